//! Slurm's `topology.conf` (topology/tree plugin): one line per switch,
//! `SwitchName=s0 Switches=s[1-3]` or `SwitchName=s1 Nodes=n[0-15]`, with hostlist ranges.
//! It gives the switch tree and each node's switch (the network model of seed 000 §3).

use super::{Link, Machine, Switch, Topology, TopologyError};
use std::collections::HashMap;

/// One `SwitchName=` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmSwitch {
    pub name: String,
    pub switches: Vec<String>,
    pub nodes: Vec<String>,
}

/// A parsed topology.conf, switches in file order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlurmTopology {
    pub switches: Vec<SlurmSwitch>,
}

impl SlurmTopology {
    /// The switch a node is listed under.
    pub fn switch_of(&self, node: &str) -> Option<&str> {
        self.switches
            .iter()
            .find(|s| s.nodes.iter().any(|n| n == node))
            .map(|s| s.name.as_str())
    }
    /// Parent–child switch pairs, in file order.
    pub fn links(&self) -> Vec<(String, String)> {
        self.switches
            .iter()
            .flat_map(|s| s.switches.iter().map(|c| (s.name.clone(), c.clone())))
            .collect()
    }

    /// The topology file this topology.conf describes (`pipecast topo import --format slurm`):
    /// its switches in file order, a link per `Switches=` entry, and its nodes as machines in
    /// file order (rank r = the r-th node listed), each on the switch that lists it.
    pub fn to_topology(&self) -> Result<Topology, TopologyError> {
        let index: HashMap<&str, usize> = self
            .switches
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut links = Vec::new();
        for s in &self.switches {
            for child in &s.switches {
                let b = *index
                    .get(child.as_str())
                    .ok_or_else(|| TopologyError::UnknownSwitch {
                        name: child.clone(),
                        context: format!(
                            "topology.conf: Switches= of {} (give it a SwitchName= line)",
                            s.name
                        ),
                    })?;
                links.push(Link {
                    a: index[s.name.as_str()],
                    b,
                    gbps: None,
                });
            }
        }
        let machines = self
            .switches
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.nodes.iter().map(move |n| Machine::new(n.clone(), i)))
            .collect();
        let switches = self
            .switches
            .iter()
            .map(|s| Switch {
                name: s.name.clone(),
            })
            .collect();
        Topology::new(switches, links, machines)
    }
}

/// What is wrong with a topology.conf.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum SlurmError {
    #[error("topology.conf line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("bad hostlist {0:?}: write names and ranges like n[0-3,7],gpu01")]
    Hostlist(String),
    #[error("the hostlists name more than {limit} hosts and switches in all: check the ranges (pipecast plans at most that many)")]
    TooManyNames { limit: usize },
}

/// At most this many names come out of one topology.conf (all its hostlists together) or one
/// hostlist given alone: 1,000,000 names take ~40 MB, while a few thousand lines of
/// `n[0-99999]` would otherwise take gigabytes.
pub const MAX_HOSTLIST_NAMES: usize = 1_000_000;

/// Expands a Slurm hostlist: `n[0-3,7],m1,x[01-03]` → n0 n1 n2 n3 n7 m1 x01 x02 x03.
/// Zero padding of the range start is kept. At most [`MAX_HOSTLIST_NAMES`] names.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, SlurmError> {
    expand_within(list, MAX_HOSTLIST_NAMES)
}

/// [`expand_hostlist`] giving at most `budget` names (more is [`SlurmError::TooManyNames`]).
fn expand_within(list: &str, budget: usize) -> Result<Vec<String>, SlurmError> {
    let too_many = || SlurmError::TooManyNames {
        limit: MAX_HOSTLIST_NAMES,
    };
    let bad = || SlurmError::Hostlist(list.to_string());
    // Split on commas outside brackets.
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(bad());
        }
    }
    if depth != 0 {
        return Err(bad());
    }
    items.push(&list[start..]);
    let mut out = Vec::new();
    for item in items.into_iter().map(str::trim).filter(|s| !s.is_empty()) {
        let Some(open) = item.find('[') else {
            if item.contains(']') {
                return Err(bad());
            }
            if out.len() >= budget {
                return Err(too_many());
            }
            out.push(item.to_string());
            continue;
        };
        let close = item.find(']').ok_or_else(bad)?;
        if close < open {
            return Err(bad());
        }
        let (prefix, ranges, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
        if suffix.contains('[') {
            return Err(bad()); // multi-dimensional hostlists are not supported
        }
        for range in ranges.split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let width = lo.len();
            // u64 has at most 20 digits: more is zero-padding no host name needs (and a
            // width above 65535 would panic `format!`).
            if width > 20 || hi.len() > 20 {
                return Err(bad());
            }
            let a: u64 = lo.parse().map_err(|_| bad())?;
            let b: u64 = hi.parse().map_err(|_| bad())?;
            if b < a {
                return Err(bad());
            }
            if (out.len() as u64).saturating_add(b - a) >= budget as u64 {
                return Err(too_many());
            }
            for n in a..=b {
                out.push(format!("{prefix}{n:0width$}{suffix}"));
            }
        }
    }
    Ok(out)
}

/// Parses topology.conf text. Unknown keys (`LinkSpeed=`, …) are ignored.
pub fn parse_slurm_topology(text: &str) -> Result<SlurmTopology, SlurmError> {
    let mut topo = SlurmTopology::default();
    let mut names = 0usize;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |reason: String| SlurmError::Line {
            line: n + 1,
            reason,
        };
        let mut switch = SlurmSwitch {
            name: String::new(),
            switches: Vec::new(),
            nodes: Vec::new(),
        };
        for pair in line.split_whitespace() {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| err(format!("{pair:?} is not KEY=VALUE")))?;
            let mut expand = |v: &str| {
                let list = expand_within(v, MAX_HOSTLIST_NAMES - names).map_err(|e| match e {
                    e @ SlurmError::TooManyNames { .. } => e,
                    e => err(e.to_string()),
                })?;
                names += list.len();
                Ok::<_, SlurmError>(list)
            };
            match key.to_ascii_lowercase().as_str() {
                "switchname" => switch.name = value.to_string(),
                "switches" => switch.switches = expand(value)?,
                "nodes" => switch.nodes = expand(value)?,
                _ => {}
            }
        }
        if switch.name.is_empty() {
            return Err(err("no SwitchName=".into()));
        }
        if topo.switches.iter().any(|s| s.name == switch.name) {
            return Err(err(format!("switch {} is defined twice", switch.name)));
        }
        topo.switches.push(switch);
    }
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_expand() {
        assert_eq!(
            expand_hostlist("n[0-2,7],m1,x[08-10]").unwrap(),
            ["n0", "n1", "n2", "n7", "m1", "x08", "x09", "x10"]
        );
        assert_eq!(expand_hostlist("a[3]b").unwrap(), ["a3b"]);
        // Issue 14: a 65,536-digit zero-padded start panicked in `format!`.
        let padded = format!("n[{}1-2]", "0".repeat(65_536));
        assert!(expand_hostlist(&padded).is_err());
        assert_eq!(
            expand_hostlist("n[00000000000000000001-2]").unwrap(),
            ["n00000000000000000001", "n00000000000000000002"]
        );
        for bad in ["n[0-", "n]0[", "n[3-1]", "n[a-b]", "n[0-1][2-3]", "n[[0]]"] {
            assert!(expand_hostlist(bad).is_err(), "{bad}");
        }
    }

    /// Issue 14: the cap was per list, so 2000 lines of `n[0-99999]` took 3.4 GB; it is per
    /// file now.
    #[test]
    fn the_name_cap_holds_for_the_whole_file() {
        let lines: String = (0..11)
            .map(|i| format!("SwitchName=s{i} Nodes=n{i}x[0-99999]\n"))
            .collect();
        let e = parse_slurm_topology(&lines).unwrap_err();
        assert_eq!(
            e,
            SlurmError::TooManyNames {
                limit: MAX_HOSTLIST_NAMES
            }
        );
        assert!(e.to_string().contains("1000000"), "{e}");
        assert!(expand_hostlist("n[0-999999]").is_ok());
        assert!(expand_hostlist("n[0-1000000]").is_err());
        assert!(expand_hostlist("n[0-18446744073709551615]").is_err());
    }

    #[test]
    fn parses_a_two_level_tree() {
        let t = parse_slurm_topology(
            "# fat tree\nSwitchName=s0 Switches=s[1-2] LinkSpeed=10\n\
             SwitchName=s1 Nodes=n[0-1]\nSwitchName=s2 Nodes=n[2-3]\n",
        )
        .unwrap();
        assert_eq!(t.switches.len(), 3);
        assert_eq!(t.switch_of("n3"), Some("s2"));
        assert_eq!(t.switch_of("n9"), None);
        assert_eq!(
            t.links(),
            [
                ("s0".to_string(), "s1".to_string()),
                ("s0".into(), "s2".into())
            ]
        );
        let e = parse_slurm_topology("SwitchName=s0\nSwitchName=s0\n").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(parse_slurm_topology("Nodes=n1\n").is_err());
        assert!(parse_slurm_topology("SwitchName=s0 junk\n").is_err());
    }

    #[test]
    fn becomes_a_topology_with_nodes_in_file_order() {
        let t = parse_slurm_topology(
            "SwitchName=s1 Nodes=n[0-1]\nSwitchName=s2 Nodes=n[2-3]\nSwitchName=s0 Switches=s[1-2]\n",
        )
        .unwrap()
        .to_topology()
        .unwrap();
        let names: Vec<&str> = t.machines().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["n0", "n1", "n2", "n3"]);
        assert_eq!(t.switches()[t.machines()[2].switch].name, "s2");
        assert_eq!(t.links().len(), 2);
        let e = parse_slurm_topology("SwitchName=s0 Switches=s9 Nodes=n0\n")
            .unwrap()
            .to_topology()
            .unwrap_err()
            .to_string();
        assert!(e.contains("s9") && e.contains("SwitchName="), "{e}");
        // Two top switches: not one tree.
        let e = parse_slurm_topology("SwitchName=s0 Nodes=n0\nSwitchName=s1 Nodes=n1\n")
            .unwrap()
            .to_topology()
            .unwrap_err()
            .to_string();
        assert!(e.contains("not connected"), "{e}");
        // A node under two switches.
        let e =
            parse_slurm_topology("SwitchName=s0 Switches=s1 Nodes=n0\nSwitchName=s1 Nodes=n0\n")
                .unwrap()
                .to_topology()
                .unwrap_err()
                .to_string();
        assert!(e.contains("n0"), "{e}");
    }
}
