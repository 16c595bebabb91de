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
