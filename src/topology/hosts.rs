//! Ranks sharing a host: the host becomes a switch.
//!
//! Several ranks on one host share its NIC: two of them sending off the host at once contend
//! on the NIC's uplink exactly as two machines behind one switch contend on the switch's
//! uplink (seed 000 §3, `../shared/seeds/000_4ae1cf15394cd769.txt`: contention is two
//! communications sharing a directed edge). So a host with several ranks becomes a switch of
//! its own — `host:NAME` — with one machine per rank behind it, and the NIC is the link from
//! that host switch to the physical switch. Plans that are contention-free on this topology
//! are then contention-free on the NIC too. O(P²) in the number of ranks P.

use super::{Link, Machine, Switch, Topology, TopologyError};
use std::collections::BTreeMap;

/// The file's machine whose `host` is `name`, else whose `name` is.
pub fn machine_of_host(file: &Topology, name: &str) -> Option<usize> {
    file.machines()
        .iter()
        .position(|m| m.host.as_deref() == Some(name))
        .or_else(|| file.machine_named(name))
}

/// The topology a job plans on, machine r being rank r. `names[r]` is rank r's host name and
/// `keys[r]` its host identity (ranks with equal keys share a host and so a NIC).
///
/// - Without `file`: every host with several ranks becomes a switch `host:KEY` holding
///   machines `KEY:rR`, linked to one physical switch `switch`; hosts with one rank are
///   machines on `switch` directly. When every rank has a host of its own, or all share one
///   host, that is [`Topology::single_switch`].
/// - With `file`, when every rank's host name is a machine of the file (its `host` field, else
///   its `name`): ranks go to their host's machine; a machine with several ranks becomes a
///   switch `host:NAME` behind the machine's switch, its NIC (`gbps` of the file's machine)
///   the link between them.
/// - With `file` otherwise: rank r is the file's machine r, so the sizes must match
///   ([`TopologyError::HostsNotMachines`] when they do not).
pub fn host_topology(
    file: Option<&Topology>,
    names: &[&str],
    keys: &[String],
) -> Result<Topology, TopologyError> {
    let size = names.len();
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
                m.host = Some(names[r].to_string());
                machines[r] = Some(m);
            }
        }
        let machines = machines
            .into_iter()
            .map(|m| m.expect("every rank"))
            .collect();
        return Topology::new(switches, links, machines);
    };
    let found: Vec<Option<usize>> = names
        .iter()
        .map(|name| machine_of_host(file, name))
        .collect();
    if found.iter().any(Option::is_none) {
        if file.size() == size {
            return Ok(file.clone());
        }
        let missing: Vec<&str> = names
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(name, _)| *name)
            .collect();
        return Err(TopologyError::HostsNotMachines {
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
    Topology::new(switches, links, machines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::parse_topology;

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn ranks_sharing_a_host_sit_behind_a_host_switch() {
        let names = ["a", "b", "a", "c", "b"];
        let t = host_topology(None, &names, &keys(&names)).unwrap();
        let switches: Vec<&str> = t.switches().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(switches, ["switch", "host:a", "host:b"]);
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
    }

    #[test]
    fn one_rank_per_host_or_one_host_is_a_single_switch() {
        let spread = ["a", "b"];
        let t = host_topology(None, &spread, &keys(&spread)).unwrap();
        assert_eq!((t.switches().len(), t.size()), (1, 2));
        let packed = ["a"; 3];
        let t = host_topology(None, &packed, &keys(&packed)).unwrap();
        assert_eq!((t.switches().len(), t.size()), (1, 3));
    }

    const FILE: &str = r#"{"switches": ["s0", "s1"], "links": [{"a": "s0", "b": "s1"}],
        "machines": [{"name": "n0", "switch": "s0"},
                     {"name": "n1", "switch": "s1", "host": "node-b", "gbps": 10},
                     {"name": "n2", "switch": "s1"}]}"#;

    #[test]
    fn file_maps_ranks_to_machines_by_host_name() {
        let file = parse_topology(FILE).unwrap();
        let names = ["node-b", "n0", "node-b", "n2"];
        let t = host_topology(Some(&file), &names, &keys(&names)).unwrap();
        let machines: Vec<&str> = t.machines().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(machines, ["n1:r0", "n0", "n1:r2", "n2"]);
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
        let three = ["x"; 3];
        let t = host_topology(Some(&file), &three, &keys(&three)).unwrap();
        assert_eq!(t.machines()[1].name, "n1");
        let four = ["x"; 4];
        let e = host_topology(Some(&file), &four, &keys(&four))
            .unwrap_err()
            .to_string();
        assert!(e.contains("x") && e.contains("3 machines"), "{e}");
    }
}
