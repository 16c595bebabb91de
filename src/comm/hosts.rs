//! Which address a rank listens on, and which ranks share a host (and so a NIC).
//!
//! Several ranks on one host share its NIC, so a host with several ranks becomes a switch of
//! its own (`crate::topology::hosts` builds that topology; this module gathers the host names
//! and keys and turns its errors into the communicator's).

use super::CommError;
use crate::topology::hosts::{host_topology, machine_of_host};
use crate::topology::{Topology, TopologyError};
use crate::transport::ifaddrs::{ipv4_interfaces, Ipv4Interface};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

/// The address to listen on when none is given (`Config::ip`, `PIPECAST_IP`): the
/// interface(s) `iface` names (`Config::iface`, `PIPECAST_IFACE`; see [`pick_ip`]); else the
/// first interface that is up, not loopback, not named `mgmt*`, with an IPv4 address; else
/// 127.0.0.1.
pub fn listen_ip(iface: Option<&str>) -> Result<String, CommError> {
    pick_ip(iface, &interfaces()?).map(|ip| ip.to_string())
}

/// This host's IPv4 interfaces.
fn interfaces() -> Result<Vec<Ipv4Interface>, CommError> {
    ipv4_interfaces().map_err(|e| CommError::Env {
        name: "PIPECAST_IFACE",
        problem: format!("cannot list the network interfaces (getifaddrs: {e}): set PIPECAST_IP"),
    })
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

/// The address of each of this rank's NICs on a topology with `rails` rails (NIC i = rail
/// i, `docs/topology.md`): item i of `iface` (`PIPECAST_IFACE`), a comma-separated list
/// like `eth0,eth1` or `198.18.0.0/16,198.19.0.0/16`, names rail i's interface. `None` when
/// the list names fewer than `rails` interfaces: the rank then uses one NIC (every lane on
/// rail 0, right data at one NIC's speed), as it does without a topology with rails.
pub fn rail_ips(iface: Option<&str>, rails: usize) -> Result<Option<Vec<Ipv4Addr>>, CommError> {
    pick_rail_ips(iface, &interfaces()?, rails)
}

/// [`rail_ips`] on a list of interfaces (pure).
pub fn pick_rail_ips(
    spec: Option<&str>,
    interfaces: &[Ipv4Interface],
    rails: usize,
) -> Result<Option<Vec<Ipv4Addr>>, CommError> {
    let items: Vec<&str> = spec
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if rails < 2 || items.len() < rails {
        if rails >= 2 {
            tracing::info!(
                rails,
                iface = spec.unwrap_or_default(),
                "the topology has {rails} rails but PIPECAST_IFACE names {} interfaces (one per rail, e.g. eth0,eth1): using one NIC",
                items.len()
            );
        }
        return Ok(None);
    }
    let mut ips = Vec::with_capacity(rails);
    for item in &items[..rails] {
        let ip = pick_ip(Some(item), interfaces)?;
        if ips.contains(&ip) {
            return Err(CommError::Env {
                name: "PIPECAST_IFACE",
                problem: format!(
                    "{item:?} in {:?} gives {ip} again: each rail needs its own NIC",
                    spec.unwrap_or_default()
                ),
            });
        }
        ips.push(ip);
    }
    Ok(Some(ips))
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

/// This rank's host identity for the bootstrap blob: `machine` (`Config::machine`,
/// `PIPECAST_MACHINE`, which `pipecast lab run` sets), else the host name. Whitespace is
/// replaced (the blob is space-separated).
pub fn host_name(machine: Option<&str>) -> String {
    let name = machine.map(str::to_string).unwrap_or_else(|| {
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

/// Before the bootstrap: fails (as [`topology`] would after it) when the file's rank count
/// (its machines' `ranks`) is not the job's size and this rank's host `name` is not one of the
/// file's machines.
pub fn check_file(file: &Topology, size: usize, name: &str) -> Result<(), CommError> {
    if file.ranks() == size || machine_of_host(file, name).is_some() {
        return Ok(());
    }
    Err(CommError::TopologyHosts {
        machines: file.size(),
        size,
        missing: name.to_string(),
    })
}

/// The topology the communicator plans on, machine r being rank r: ranks sharing a host sit
/// behind a switch `host:NAME` ([`host_topology`], which says how; this maps its errors), and
/// the topology remembers them ([`Topology::hosts`]), so every plan on it is two-level
/// (`plan::two_level`: only host leaders cross a NIC, the other ranks read from their leader).
pub fn topology(
    file: Option<&Topology>,
    ranks: &[RankHost],
    keys: &[String],
) -> Result<Topology, CommError> {
    let names: Vec<&str> = ranks.iter().map(|r| r.name.as_str()).collect();
    host_topology(file, &names, keys).map_err(|e| match e {
        TopologyError::HostsNotMachines {
            machines,
            size,
            missing,
        } => CommError::TopologyHosts {
            machines,
            size,
            missing,
        },
        e => CommError::Bootstrap(format!("cannot build the hosts' topology: {e}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn one_interface_per_rail() {
        let mut h = lab_host();
        h.push(iface("eth1", [198, 20, 0, 3], true));
        let ips = |spec, rails| pick_rail_ips(Some(spec), &h, rails);
        assert_eq!(
            ips("eth0,eth1", 2).unwrap().unwrap(),
            [Ipv4Addr::new(198, 18, 0, 3), Ipv4Addr::new(198, 20, 0, 3)]
        );
        assert_eq!(
            ips("198.20.0.0/16, 198.18.0.0/16", 2).unwrap().unwrap(),
            [Ipv4Addr::new(198, 20, 0, 3), Ipv4Addr::new(198, 18, 0, 3)]
        );
        // Fewer interfaces than rails, or no rails: one NIC, as before.
        assert_eq!(ips("eth0", 2).unwrap(), None);
        assert_eq!(ips("eth0,eth1", 1).unwrap(), None);
        assert_eq!(pick_rail_ips(None, &h, 2).unwrap(), None);
        let e = ips("eth0,198.18.0.0/16", 2).unwrap_err().to_string();
        assert!(e.contains("each rail needs its own NIC"), "{e}");
        let e = ips("eth0,nosuch9", 2).unwrap_err().to_string();
        assert!(e.contains("nosuch9"), "{e}");
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
    fn ranks_sharing_a_host_get_a_plannable_topology() {
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
        let lanes = crate::comm::lanes(
            &t,
            3,
            &crate::comm::Algorithm::Tree(crate::plan::TreeKind::Linear),
            8,
        )
        .unwrap();
        // Two-level: the chain c → a → b between leaders 3, 0, 1; 0 → 2 and 1 → 4 through
        // memory.
        assert_eq!(lanes.len(), 1);
        let mut across: Vec<(usize, usize)> = Vec::new();
        for (p, kids) in lanes[0].children.iter().enumerate() {
            across.extend(kids.iter().map(|&c| (p, c)));
        }
        across.sort_unstable();
        assert_eq!(across, [(0, 1), (0, 2), (1, 4), (3, 0)]);
    }

    #[test]
    fn a_file_with_ranks_per_machine_places_ranks_in_file_order() {
        let file = crate::topology::parse_topology(
            r#"{"switches": ["s0"], "machines": [{"name": "n0", "switch": "s0", "ranks": 2},
                {"name": "n1", "switch": "s0", "ranks": 2}]}"#,
        )
        .unwrap();
        check_file(&file, 4, "elsewhere").unwrap();
        assert!(check_file(&file, 2, "elsewhere").is_err());
        let four = vec![rank("x", [1, 0, 0, 1]); 4];
        let t = topology(Some(&file), &four, &host_keys(&four)).unwrap();
        let h = t.hosts().unwrap();
        assert_eq!((h.ranks(0), h.ranks(1)), (&[0, 1][..], &[2, 3][..]));
    }

    #[test]
    fn hosts_missing_from_the_file_are_a_config_error() {
        let file = crate::topology::parse_topology(
            r#"{"switches": ["s0"], "machines": [{"name": "n0", "switch": "s0"}]}"#,
        )
        .unwrap();
        let two = vec![rank("x", [1, 0, 0, 1]); 2];
        let e = topology(Some(&file), &two, &host_keys(&two)).unwrap_err();
        assert!(matches!(e, CommError::TopologyHosts { .. }), "{e:?}");
        assert!(e.to_string().contains("1 machines"), "{e}");
    }
}
