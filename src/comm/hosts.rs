//! Which address a rank listens on, and which ranks share a host (and so a NIC).
//!
//! Several ranks on one host share its NIC: two of them sending off the host at once contend
//! on the NIC's uplink exactly as two machines behind one switch contend on the switch's
//! uplink (seed 000 §3, `../shared/seeds/000_4ae1cf15394cd769.txt`: contention is two
//! communications sharing a directed edge). So a host with several ranks becomes a switch of
//! its own — the host — with one machine per rank behind it, and the NIC is the link from that
//! host switch to the physical switch. Plans that are contention-free on this topology are
//! then contention-free on the NIC too.

use super::CommError;
use crate::topology::{Link, Machine, Switch, Topology};
use crate::transport::ifaddrs::{ipv4_interfaces, Ipv4Interface};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

/// The address to listen on: `PIPECAST_IP` if set; else the interface(s) `iface` names (or
/// `PIPECAST_IFACE` when `iface` is `None`, see [`pick_ip`]); else the first interface that
/// is up, not loopback, not named `mgmt*`, with an IPv4 address; else 127.0.0.1.
pub fn listen_ip(iface: Option<&str>) -> Result<String, CommError> {
    if let Some(ip) = env_nonempty("PIPECAST_IP") {
        return Ok(ip);
    }
    let spec = iface
        .map(str::to_string)
        .or_else(|| env_nonempty("PIPECAST_IFACE"));
    let interfaces = ipv4_interfaces().map_err(|e| CommError::Env {
        name: "PIPECAST_IFACE",
        problem: format!("cannot list the network interfaces (getifaddrs: {e}): set PIPECAST_IP"),
    })?;
    pick_ip(spec.as_deref(), &interfaces).map(|ip| ip.to_string())
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Chooses among `interfaces` (pure, for [`listen_ip`]). `spec` is a comma-separated list in
/// the style of Open MPI's `btl_tcp_if_include`: interface names (`eth0`) or IPv4 subnets
/// (`198.18.0.0/16`); the first interface (in kernel order) that is up and matches wins.
/// Without `spec`: the first interface that is up, not loopback and not a management NIC
/// (name starting with `mgmt`, as the lab's `mgmt0`), else 127.0.0.1.
pub fn pick_ip(spec: Option<&str>, interfaces: &[Ipv4Interface]) -> Result<Ipv4Addr, CommError> {
    let Some(spec) = spec else {
        return Ok(interfaces
            .iter()
            .find(|i| i.up && !i.loopback && !i.name.starts_with("mgmt"))
            .map_or(Ipv4Addr::LOCALHOST, |i| i.addr));
    };
    let mut wanted = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        wanted.push(match item.split_once('/') {
            Some((net, bits)) => {
                let net: Ipv4Addr = net.parse().map_err(|_| bad_iface(spec, item))?;
                let bits: u8 = bits
                    .parse()
                    .ok()
                    .filter(|b| *b <= 32)
                    .ok_or_else(|| bad_iface(spec, item))?;
                Wanted::Subnet(net, bits)
            }
            None => Wanted::Name(item.to_string()),
        });
    }
    if wanted.is_empty() {
        return Err(bad_iface(spec, spec));
    }
    interfaces
        .iter()
        .filter(|i| i.up)
        .find(|i| wanted.iter().any(|w| w.matches(i)))
        .map(|i| i.addr)
        .ok_or_else(|| CommError::Env {
            name: "PIPECAST_IFACE",
            problem: format!(
                "no interface that is up with an IPv4 address matches {spec:?}; this host has: {}",
                interfaces
                    .iter()
                    .map(|i| format!(
                        "{} {}/{}{}",
                        i.name,
                        i.addr,
                        i.prefix,
                        if i.up { "" } else { " (down)" }
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

enum Wanted {
    Name(String),
    Subnet(Ipv4Addr, u8),
}

impl Wanted {
    fn matches(&self, i: &Ipv4Interface) -> bool {
        match self {
            Wanted::Name(n) => *n == i.name,
            Wanted::Subnet(net, bits) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(*bits)).unwrap_or(0);
                u32::from(i.addr) & mask == u32::from(*net) & mask
            }
        }
    }
}

fn bad_iface(spec: &str, item: &str) -> CommError {
    CommError::Env {
        name: "PIPECAST_IFACE",
        problem: format!(
            "{item:?} in {spec:?} is neither an interface name nor an IPv4 subnet like 198.18.0.0/16"
        ),
    }
}

/// This rank's host identity for the bootstrap blob: `PIPECAST_MACHINE` (which `pipecast lab
/// run` sets), else the host name. Whitespace is replaced (the blob is space-separated).
pub fn host_name() -> String {
    let name = env_nonempty("PIPECAST_MACHINE").unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "localhost".into())
    });
    name.chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect()
}

/// What one rank said about itself in the bootstrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankHost {
    /// `PIPECAST_MACHINE` or the host name.
    pub name: String,
    /// The address it listens on.
    pub ip: IpAddr,
}

/// Which host each rank is on. Ranks sharing a name and an address share a host. Ranks
/// sharing a name but not an address (network namespaces of one machine, which share the host
/// name) are different hosts, keyed `name@address`.
pub fn host_keys(ranks: &[RankHost]) -> Vec<String> {
    let mut ips: BTreeMap<&str, Vec<IpAddr>> = BTreeMap::new();
    for r in ranks {
        let list = ips.entry(r.name.as_str()).or_default();
        if !list.contains(&r.ip) {
            list.push(r.ip);
        }
    }
    ranks
        .iter()
        .map(|r| {
            if ips[r.name.as_str()].len() > 1 {
                format!("{}@{}", r.name, r.ip)
            } else {
                r.name.clone()
            }
        })
        .collect()
}

/// Before the bootstrap: fails (as [`topology`] would after it) when the file's size is not
/// the job's and this rank's host `name` is not one of the file's machines.
pub fn check_file(file: &Topology, size: usize, name: &str) -> Result<(), CommError> {
    if file.size() == size || machine_of_host(file, name).is_some() {
        return Ok(());
    }
    Err(CommError::TopologyHosts {
        machines: file.size(),
        size,
        missing: name.to_string(),
    })
}

/// The file's machine whose `host` is `name`, else whose `name` is.
fn machine_of_host(file: &Topology, name: &str) -> Option<usize> {
    file.machines()
        .iter()
        .position(|m| m.host.as_deref() == Some(name))
        .or_else(|| file.machine_named(name))
}

/// The topology the communicator plans on, machine r being rank r.
///
/// - Without `file`: every host with several ranks becomes a switch `host:NAME` holding
///   machines `NAME:rR`, linked to one physical switch `switch`; hosts with one rank are
///   machines on `switch` directly. When every rank has a host of its own, or all share one
///   host, that is [`Topology::single_switch`].
/// - With `file`, when every rank's host name is a machine of the file (its `host` field, else
///   its `name`): ranks go to their host's machine; a machine with several ranks becomes a
///   switch `host:NAME` behind the machine's switch, its NIC (`gbps` of the file's machine)
///   the link between them.
/// - With `file` otherwise: rank r is the file's machine r, so the sizes must match.
pub fn topology(
    file: Option<&Topology>,
    ranks: &[RankHost],
    keys: &[String],
) -> Result<Topology, CommError> {
    let size = ranks.len();
    let bad = |e: crate::topology::TopologyError| {
        CommError::Bootstrap(format!("cannot build the hosts' topology: {e}"))
    };
    let Some(file) = file else {
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for (r, key) in keys.iter().enumerate() {
            match groups.iter_mut().find(|(k, _)| *k == key.as_str()) {
                Some((_, list)) => list.push(r),
                None => groups.push((key, vec![r])),
            }
        }
        if groups.len() == 1 || groups.len() == size {
            return Ok(Topology::single_switch(size));
        }
        let mut switches = vec![Switch {
            name: "switch".into(),
        }];
        let mut links = Vec::new();
        let mut machines: Vec<Option<Machine>> = vec![None; size];
        for (key, list) in &groups {
            let at = if list.len() > 1 {
                switches.push(Switch {
                    name: format!("host:{key}"),
                });
                links.push(Link {
                    a: 0,
                    b: switches.len() - 1,
                    gbps: None,
                });
                switches.len() - 1
            } else {
                0
            };
            for &r in list {
                let name = if list.len() > 1 {
                    format!("{key}:r{r}")
                } else {
                    key.to_string()
                };
                let mut m = Machine::new(name, at);
                m.host = Some(ranks[r].name.clone());
                machines[r] = Some(m);
            }
        }
        let machines = machines
            .into_iter()
            .map(|m| m.expect("every rank"))
            .collect();
        return Topology::new(switches, links, machines).map_err(bad);
    };
    let found: Vec<Option<usize>> = ranks
        .iter()
        .map(|r| machine_of_host(file, &r.name))
        .collect();
    if found.iter().any(Option::is_none) {
        if file.size() == size {
            return Ok(file.clone());
        }
        let missing: Vec<&str> = ranks
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(r, _)| r.name.as_str())
            .collect();
        return Err(CommError::TopologyHosts {
            machines: file.size(),
            size,
            missing: missing.join(", "),
        });
    }
    let found: Vec<usize> = found.into_iter().map(|f| f.expect("checked")).collect();
    let mut switches = file.switches().to_vec();
    let mut links = file.links().to_vec();
    let mut host_switch: BTreeMap<usize, usize> = BTreeMap::new();
    let mut machines = Vec::with_capacity(size);
    for (r, &fm) in found.iter().enumerate() {
        let of_file = &file.machines()[fm];
        let shared = found.iter().filter(|&&x| x == fm).count() > 1;
        if !shared {
            machines.push(of_file.clone());
            continue;
        }
        let at = *host_switch.entry(fm).or_insert_with(|| {
            switches.push(Switch {
                name: format!("host:{}", of_file.name),
            });
            links.push(Link {
                a: of_file.switch,
                b: switches.len() - 1,
                gbps: of_file.gbps,
            });
            switches.len() - 1
        });
        let mut m = Machine::new(format!("{}:r{r}", of_file.name), at);
        m.host = of_file.host.clone().or_else(|| Some(of_file.name.clone()));
        m.site = of_file.site.clone();
        machines.push(m);
    }
    Topology::new(switches, links, machines).map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::parse_topology;

    fn iface(name: &str, addr: [u8; 4], up: bool) -> Ipv4Interface {
        Ipv4Interface {
            name: name.into(),
            addr: Ipv4Addr::from(addr),
            prefix: 16,
            up,
            loopback: name == "lo",
        }
    }

    fn lab_host() -> Vec<Ipv4Interface> {
        vec![
            iface("lo", [127, 0, 0, 1], true),
            iface("mgmt0", [198, 19, 0, 3], true),
            iface("eth1", [10, 0, 0, 3], false),
            iface("eth0", [198, 18, 0, 3], true),
        ]
    }

    #[test]
    fn default_skips_loopback_down_and_management() {
        assert_eq!(
            pick_ip(None, &lab_host()).unwrap(),
            Ipv4Addr::new(198, 18, 0, 3)
        );
        let only_lo = &lab_host()[..2];
        assert_eq!(pick_ip(None, only_lo).unwrap(), Ipv4Addr::LOCALHOST);
    }

    #[test]
    fn spec_by_name_or_subnet() {
        let h = lab_host();
        assert_eq!(
            pick_ip(Some("mgmt0"), &h).unwrap(),
            Ipv4Addr::new(198, 19, 0, 3)
        );
        assert_eq!(
            pick_ip(Some("198.18.0.0/16"), &h).unwrap(),
            Ipv4Addr::new(198, 18, 0, 3)
        );
        assert_eq!(
            pick_ip(Some("wlan0, 198.19.0.0/16"), &h).unwrap(),
            Ipv4Addr::new(198, 19, 0, 3)
        );
        let down = pick_ip(Some("eth1"), &h).unwrap_err().to_string();
        assert!(down.contains("eth1 10.0.0.3/16 (down)"), "{down}");
        let junk = pick_ip(Some("198.18.0.0/40"), &h).unwrap_err().to_string();
        assert!(junk.contains("neither an interface name"), "{junk}");
    }

    fn rank(name: &str, ip: [u8; 4]) -> RankHost {
        RankHost {
            name: name.into(),
            ip: IpAddr::from(ip),
        }
    }

    #[test]
    fn namespaces_sharing_a_host_name_are_told_apart_by_address() {
        let ranks = [
            rank("box", [198, 18, 0, 1]),
            rank("box", [198, 18, 0, 2]),
            rank("a", [10, 0, 0, 1]),
            rank("a", [10, 0, 0, 1]),
        ];
        assert_eq!(
            host_keys(&ranks),
            ["box@198.18.0.1", "box@198.18.0.2", "a", "a"]
        );
    }

    #[test]
    fn ranks_sharing_a_host_sit_behind_a_host_switch() {
        let ranks = [
            rank("a", [10, 0, 0, 1]),
            rank("b", [10, 0, 0, 2]),
            rank("a", [10, 0, 0, 1]),
            rank("c", [10, 0, 0, 3]),
            rank("b", [10, 0, 0, 2]),
        ];
        let t = topology(None, &ranks, &host_keys(&ranks)).unwrap();
        let names: Vec<&str> = t.switches().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["switch", "host:a", "host:b"]);
        let on: Vec<&str> = (0..5)
            .map(|r| t.switches()[t.switch_of(r)].name.as_str())
            .collect();
        assert_eq!(on, ["host:a", "host:b", "host:a", "switch", "host:b"]);
        assert_eq!(t.machines()[2].name, "a:r2");
        // Ranks 0 and 2 leaving host a at once share its NIC (the host-switch uplink).
        let (p0, p2) = (t.path(0, 1), t.path(2, 3));
        assert!(p0.iter().any(|e| p2.contains(e)), "{p0:?} {p2:?}");
        // Between hosts a and b, opposite directions do not contend.
        let (ab, ba) = (t.path(0, 1), t.path(4, 2));
        assert!(!ab.iter().any(|e| ba.contains(e)), "{ab:?} {ba:?}");
        let lanes = crate::comm::lanes(
            &t,
            3,
            &crate::comm::Algorithm::Tree(crate::plan::TreeKind::Linear),
            8,
        );
        assert!(!lanes.unwrap().is_empty());
    }

    #[test]
    fn one_rank_per_host_or_one_host_is_a_single_switch() {
        let spread = [rank("a", [1, 0, 0, 1]), rank("b", [1, 0, 0, 2])];
        let t = topology(None, &spread, &host_keys(&spread)).unwrap();
        assert_eq!((t.switches().len(), t.size()), (1, 2));
        let packed = vec![rank("a", [1, 0, 0, 1]); 3];
        let t = topology(None, &packed, &host_keys(&packed)).unwrap();
        assert_eq!((t.switches().len(), t.size()), (1, 3));
    }

    const FILE: &str = r#"{"switches": ["s0", "s1"], "links": [{"a": "s0", "b": "s1"}],
        "machines": [{"name": "n0", "switch": "s0"},
                     {"name": "n1", "switch": "s1", "host": "node-b", "gbps": 10},
                     {"name": "n2", "switch": "s1"}]}"#;

    #[test]
    fn file_maps_ranks_to_machines_by_host_name() {
        let file = parse_topology(FILE).unwrap();
        let ranks = [
            rank("node-b", [1, 0, 0, 2]),
            rank("n0", [1, 0, 0, 1]),
            rank("node-b", [1, 0, 0, 2]),
            rank("n2", [1, 0, 0, 3]),
        ];
        let t = topology(Some(&file), &ranks, &host_keys(&ranks)).unwrap();
        let names: Vec<&str> = t.machines().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["n1:r0", "n0", "n1:r2", "n2"]);
        let hs = t.switch_named("host:n1").unwrap();
        assert_eq!((t.switch_of(0), t.switch_of(2)), (hs, hs));
        let s1 = t.switch_named("s1").unwrap();
        assert_eq!(t.switch_of(3), s1);
        let nic = t.links().iter().find(|l| l.b == hs).unwrap();
        assert_eq!((nic.a, nic.gbps), (s1, Some(10.0)));
    }

    #[test]
    fn file_without_host_names_is_rank_order_or_a_clear_error() {
        let file = parse_topology(FILE).unwrap();
        let three = vec![rank("x", [1, 0, 0, 1]); 3];
        let t = topology(Some(&file), &three, &host_keys(&three)).unwrap();
        assert_eq!(t.machines()[1].name, "n1");
        let four = vec![rank("x", [1, 0, 0, 1]); 4];
        let e = topology(Some(&file), &four, &host_keys(&four))
            .unwrap_err()
            .to_string();
        assert!(e.contains("x") && e.contains("3 machines"), "{e}");
    }
}
