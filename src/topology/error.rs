//! Topology validation: the switch links must form a spanning tree, names must be unique.

use super::{Link, Machine, Switch};
use std::collections::BTreeMap;

/// What is wrong with a topology. Every message names the offending items.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TopologyError {
    #[error("{path}: {source}")]
    File {
        path: String,
        #[source]
        source: Box<TopologyError>,
    },
    #[error("cannot read: {0}")]
    Io(String),
    #[error("not a topology file: {0}")]
    Json(String),
    #[error("the topology has no switches")]
    NoSwitches,
    #[error("the topology has no machines: list them under \"machines\"")]
    NoMachines,
    #[error("{kind} {name:?} {fault}")]
    BadName {
        kind: &'static str,
        name: String,
        fault: String,
    },
    #[error("switch name {0:?} is used twice")]
    DuplicateSwitch(String),
    #[error("machine name {0:?} is used twice")]
    DuplicateMachine(String),
    #[error("{context} names unknown switch {name:?}: declare it under \"switches\"")]
    UnknownSwitch { name: String, context: String },
    #[error("switch {0} is linked to itself")]
    SelfLink(String),
    #[error("switches {0} and {1} are linked twice: switch links must form a tree")]
    DuplicateLink(String, String),
    #[error("the switch links form a cycle through {}: switch links must form a tree (remove one of these links)", .0.join(" - "))]
    Cycle(Vec<String>),
    #[error("switch {} is not connected to switch {}: switch links must form a tree that spans all switches", .disconnected.join(", "), .root)]
    Disconnected {
        disconnected: Vec<String>,
        root: String,
    },
    #[error("link {a}-{b}: bandwidth {gbps} Gbit/s must be a positive number")]
    BadBandwidth { a: String, b: String, gbps: f64 },
    /// The file does not list every rank's host, and its size is not the job's
    /// ([`super::hosts::host_topology`]).
    #[error("the topology has {machines} machines, the job {size} ranks, and these ranks' hosts are not machines of it (by `host` or `name`): {missing}; name the hosts in the file or set PIPECAST_MACHINE")]
    HostsNotMachines {
        machines: usize,
        size: usize,
        missing: String,
    },
    /// A machine's `ranks` is not a whole number in range.
    #[error("machine {machine}: \"ranks\" must be a whole number from 1 to {max}, got {value}", max = super::hosts::MAX_RANKS_PER_MACHINE)]
    BadRanks { machine: String, value: String },
    /// More ranks in all than the planners take.
    #[error("{ranks} ranks in all: at most {max} are supported (lower the machines' \"ranks\" or --ranks-per-machine)", max = super::hosts::MAX_RANKS)]
    TooManyRanks { ranks: usize },
    /// Machines with different numbers of NICs.
    #[error("machine {machine} has {nics} NIC(s), machine {first} has {expected}: every machine needs one NIC per rail (NIC i is on rail i)")]
    RailCount {
        machine: String,
        nics: usize,
        first: String,
        expected: usize,
    },
    /// A machine's `nics` is empty or too long.
    #[error("machine {machine}: \"nics\" lists {nics} NICs: give 1 to {max}", max = super::MAX_NICS)]
    BadNicCount { machine: String, nics: usize },
    /// NICs of one rail on switches of different trees.
    #[error("rail {rail}: NIC {rail} of machine {machine} is on switch {switch}, which is not connected to switch {other_switch} (NIC {rail} of machine {other}): the NICs of one rail must hang off one switch tree")]
    RailSplit {
        rail: usize,
        machine: String,
        switch: String,
        other: String,
        other_switch: String,
    },
    /// With rails, a switch tree that no NIC reaches.
    #[error("switch {} is in no rail's switch tree (no machine's NIC reaches it): link it to a rail's switches or remove it", .0.join(", "))]
    NoRail(Vec<String>),
    /// A host grouping that does not fit its network ([`super::Hosts::new`]).
    #[error("bad host grouping: {0}")]
    BadHosts(String),
}

/// Checks names, links and tree shape. Indices in `links`/`machines` must be in range
/// (the file parser resolves names first and reports unknown ones itself).
pub(super) fn validate(
    switches: &[Switch],
    links: &[Link],
    machines: &[Machine],
) -> Result<(), TopologyError> {
    if switches.is_empty() {
        return Err(TopologyError::NoSwitches);
    }
    if machines.is_empty() {
        return Err(TopologyError::NoMachines);
    }
    let check = |kind: &'static str, name: &str| match super::name_fault(name) {
        Some(fault) => Err(TopologyError::BadName {
            kind,
            name: name.into(),
            fault,
        }),
        None => Ok(()),
    };
    let mut seen = BTreeMap::new();
    for s in switches {
        check("switch name", &s.name)?;
        if seen.insert(s.name.as_str(), ()).is_some() {
            return Err(TopologyError::DuplicateSwitch(s.name.clone()));
        }
    }
    let mut seen = BTreeMap::new();
    for m in machines {
        check("machine name", &m.name)?;
        if m.nic_count() > super::MAX_NICS {
            return Err(TopologyError::BadNicCount {
                machine: m.name.clone(),
                nics: m.nic_count(),
            });
        }
        if m.nic_count() != machines[0].nic_count() {
            return Err(TopologyError::RailCount {
                machine: m.name.clone(),
                nics: m.nic_count(),
                first: machines[0].name.clone(),
                expected: machines[0].nic_count(),
            });
        }
        for nic in &m.rails {
            for (kind, text) in [("machine mac", &nic.mac), ("machine port", &nic.port)] {
                if let Some(text) = text {
                    check(kind, text)?;
                }
            }
            if nic.switch >= switches.len() {
                return Err(TopologyError::UnknownSwitch {
                    name: format!("#{}", nic.switch),
                    context: format!("machine {}", m.name),
                });
            }
        }
        for (kind, text) in [
            ("machine site", &m.site),
            ("machine mac", &m.mac),
            ("machine port", &m.port),
            ("machine host", &m.host),
        ] {
            if let Some(text) = text {
                check(kind, text)?;
            }
        }
        if seen.insert(m.name.as_str(), ()).is_some() {
            return Err(TopologyError::DuplicateMachine(m.name.clone()));
        }
        if !(1..=super::hosts::MAX_RANKS_PER_MACHINE).contains(&m.ranks) {
            return Err(TopologyError::BadRanks {
                machine: m.name.clone(),
                value: m.ranks.to_string(),
            });
        }
        if m.switch >= switches.len() {
            return Err(TopologyError::UnknownSwitch {
                name: format!("#{}", m.switch),
                context: format!("machine {}", m.name),
            });
        }
    }
    let name = |s: usize| switches[s].name.clone();
    let mut pairs = BTreeMap::new();
    for l in links {
        if l.a >= switches.len() || l.b >= switches.len() {
            return Err(TopologyError::UnknownSwitch {
                name: format!("#{}", l.a.max(l.b)),
                context: "a link".into(),
            });
        }
        if l.a == l.b {
            return Err(TopologyError::SelfLink(name(l.a)));
        }
        if let Some(g) = l.gbps {
            if !(g.is_finite() && g > 0.0) {
                return Err(TopologyError::BadBandwidth {
                    a: name(l.a),
                    b: name(l.b),
                    gbps: g,
                });
            }
        }
        if pairs.insert((l.a.min(l.b), l.a.max(l.b)), ()).is_some() {
            return Err(TopologyError::DuplicateLink(name(l.a), name(l.b)));
        }
    }
    // Union-find: the first link that closes a cycle names the cycle.
    let mut parent: Vec<usize> = (0..switches.len()).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut adjacency: Vec<Vec<usize>> = vec![Vec::new(); switches.len()];
    for l in links {
        let (ra, rb) = (find(&mut parent, l.a), find(&mut parent, l.b));
        if ra == rb {
            let mut cycle = tree_path(&adjacency, l.b, l.a);
            cycle.push(l.b);
            return Err(TopologyError::Cycle(cycle.into_iter().map(name).collect()));
        }
        parent[ra] = rb;
        adjacency[l.a].push(l.b);
        adjacency[l.b].push(l.a);
    }
    if machines[0].nic_count() > 1 {
        return check_rails(switches, machines, &mut |s| find(&mut parent, s));
    }
    let root = find(&mut parent, 0);
    let disconnected: Vec<String> = (0..switches.len())
        .filter(|&s| find(&mut parent, s) != root)
        .map(name)
        .collect();
    if !disconnected.is_empty() {
        return Err(TopologyError::Disconnected {
            disconnected,
            root: name(0),
        });
    }
    Ok(())
}

/// With rails the switch links form a forest: the NICs of each rail must all be in one of its
/// trees (rails may share a tree), and every tree must hold some rail. `tree` names a switch's
/// tree.
fn check_rails(
    switches: &[Switch],
    machines: &[Machine],
    tree: &mut dyn FnMut(usize) -> usize,
) -> Result<(), TopologyError> {
    let name = |s: usize| switches[s].name.clone();
    let mut used = vec![false; switches.len()];
    for rail in 0..machines[0].nic_count() {
        let at = |m: &Machine| m.nic_switch(rail).expect("NIC counts were checked");
        let first = at(&machines[0]);
        let want = tree(first);
        used[want] = true;
        for m in machines {
            if tree(at(m)) != want {
                return Err(TopologyError::RailSplit {
                    rail,
                    machine: m.name.clone(),
                    switch: name(at(m)),
                    other: machines[0].name.clone(),
                    other_switch: name(first),
                });
            }
        }
    }
    let alone: Vec<String> = (0..switches.len())
        .filter(|&s| !used[tree(s)])
        .map(name)
        .collect();
    if alone.is_empty() {
        Ok(())
    } else {
        Err(TopologyError::NoRail(alone))
    }
}

/// Switches on the path from `from` to `to` in a forest given by adjacency lists (both ends
/// included). The two are known to be connected.
fn tree_path(adjacency: &[Vec<usize>], from: usize, to: usize) -> Vec<usize> {
    let mut prev = vec![usize::MAX; adjacency.len()];
    let mut stack = vec![from];
    prev[from] = from;
    while let Some(s) = stack.pop() {
        if s == to {
            break;
        }
        for &n in &adjacency[s] {
            if prev[n] == usize::MAX {
                prev[n] = s;
                stack.push(n);
            }
        }
    }
    let mut path = vec![to];
    let mut x = to;
    while x != from {
        x = prev[x];
        path.push(x);
    }
    path.reverse();
    path
}
