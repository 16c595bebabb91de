//! Where a plan breaks the model's no-contention assumption (seed 003 §4.2 models only
//! contention-free trees; seed 000 §3 defines contention).
//!
//! Under the pipelined 1-port model every transfer of a lane can be busy at the same time, so two
//! transfers with different senders contend when their paths share a directed edge. (Transfers
//! from one sender are serialized by the 1-port model and never contend.) This lists them so
//! that `pipecast plan` can show *why* `contention_free` is false; `plan::check` is the verdict.

use crate::plan::Lane;
use crate::topology::{DirEdge, MachineId, Topology};
use std::collections::BTreeMap;

/// Two transfers of one lane that share a directed edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The first shared directed edge.
    pub edge: DirEdge,
    pub first: (MachineId, MachineId),
    pub second: (MachineId, MachineId),
}

/// Every pair of transfers of `lane` with different senders that share a directed edge (each
/// pair once, with the first shared edge in edge order), at most `limit` of them.
pub fn conflicts(lane: &Lane, topology: &Topology, limit: usize) -> Vec<Conflict> {
    conflicts_on(lane, 0, topology, limit)
}

/// [`conflicts`] of a lane whose transfers use rail `rail` (the machines' NIC `rail`,
/// `Topology::path_on`); none when the topology has no such rail (the checker reports it).
pub fn conflicts_on(lane: &Lane, rail: usize, topology: &Topology, limit: usize) -> Vec<Conflict> {
    let mut users: BTreeMap<DirEdge, Vec<(MachineId, MachineId)>> = BTreeMap::new();
    if rail >= topology.rails() {
        return Vec::new();
    }
    for (p, kids) in lane.children.iter().enumerate() {
        for &c in kids {
            if p < topology.size() && c < topology.size() {
                for e in topology.path_on(rail, p, c) {
                    users.entry(e).or_default().push((p, c));
                }
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (edge, list) in &users {
        for (i, &a) in list.iter().enumerate() {
            for &b in &list[i + 1..] {
                if a.0 != b.0 && seen.insert((a, b)) {
                    out.push(Conflict {
                        edge: *edge,
                        first: a,
                        second: b,
                    });
                    if out.len() >= limit {
                        return out;
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::linear;
    use crate::topology::gen;

    #[test]
    fn chain_in_dfs_order_has_none_and_crossing_tree_has_some() {
        let t = gen::hub(3, 2, true);
        assert!(conflicts(&linear::build(&t, 0), &t, 100).is_empty());
        // Rank order on interleaved switches crosses the hub links repeatedly.
        let naive = Lane::chain(t.size(), &(0..t.size()).collect::<Vec<_>>());
        let found = conflicts(&naive, &t, 100);
        assert!(!found.is_empty());
        for c in &found {
            assert!(t.path(c.first.0, c.first.1).contains(&c.edge));
            assert!(t.path(c.second.0, c.second.1).contains(&c.edge));
        }
    }
}
