//! Algorithm 1 of seed 000 §4 / seed 003 §4.1.1 (`003_f72e5e0868946953.txt`): the
//! contention-free logical linear tree.
//!
//! Step 1: number the switches in depth-first order starting from the root's switch. Step 2:
//! chain the machines grouped per switch in that order, the root first. Theorem 1 proves the
//! chain contention-free; Lemma 3 adds that for `i < j ≤ k < l`, `m_i → m_j` never contends with
//! `m_k → m_l`, which Algorithm 2 and the k-binomial construction build on. O(P + |S|).

use super::Lane;
use crate::topology::{MachineId, SwitchId, Topology};

/// In which order a depth-first walk of the switch tree visits a switch's children. Every
/// such walk is a DFS, so Theorem 1 holds for each; the order only changes which machines are
/// neighbours in the chain, and so the trees built on it (Algorithm 2's height, for one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// By increasing switch id (the papers' walk; the default).
    ById,
    /// Subtrees holding more machines first.
    HeavyFirst,
    /// Subtrees holding fewer machines first.
    LightFirst,
}

/// Switches in DFS arrival order from `start` (neighbours visited by increasing id).
pub fn dfs_switch_order(topology: &Topology, start: SwitchId) -> Vec<SwitchId> {
    dfs_switch_order_with(topology, start, Visit::ById)
}

/// Switches in DFS arrival order from `start`, children visited in `visit` order (ties by id).
pub fn dfs_switch_order_with(topology: &Topology, start: SwitchId, visit: Visit) -> Vec<SwitchId> {
    if visit == Visit::ById {
        return dfs_by_id(topology, start);
    }
    // Machines below every switch, rooted at `start` (children after parents in `by_id`).
    let by_id = dfs_by_id(topology, start);
    let n = topology.switches().len();
    let mut position = vec![usize::MAX; n];
    for (p, &s) in by_id.iter().enumerate() {
        position[s] = p;
    }
    let mut weight = vec![0usize; n];
    for m in 0..topology.size() {
        weight[topology.switch_of(m)] += 1;
    }
    for &s in by_id.iter().skip(1).rev() {
        let parent = topology
            .neighbours(s)
            .iter()
            .map(|&(p, _)| p)
            .filter(|&p| position[p] < position[s])
            .min_by_key(|&p| position[p])
            .expect("a switch after the first has an earlier neighbour in a DFS");
        weight[parent] += weight[s];
    }
    // The first to visit goes on the stack last.
    walk(topology, start, |next| match visit {
        Visit::HeavyFirst => next.sort_by_key(|&c| (weight[c], std::cmp::Reverse(c))),
        _ => next.sort_by_key(|&c| (std::cmp::Reverse(weight[c]), std::cmp::Reverse(c))),
    })
}

fn dfs_by_id(topology: &Topology, start: SwitchId) -> Vec<SwitchId> {
    // Reversed, so the smallest neighbour is visited first.
    walk(topology, start, |next| next.reverse())
}

/// The depth-first walk from `start` that every [`Visit`] shares: at each switch, its unseen
/// neighbours in adjacency order, arranged by `arrange` so that the last is visited first.
fn walk(
    topology: &Topology,
    start: SwitchId,
    mut arrange: impl FnMut(&mut Vec<SwitchId>),
) -> Vec<SwitchId> {
    let n = topology.switches().len();
    let mut order = Vec::with_capacity(n);
    let mut seen = vec![false; n];
    let mut stack = vec![start];
    while let Some(s) = stack.pop() {
        if seen[s] {
            continue;
        }
        seen[s] = true;
        order.push(s);
        let mut next: Vec<SwitchId> = topology
            .neighbours(s)
            .iter()
            .map(|&(c, _)| c)
            .filter(|&c| !seen[c])
            .collect();
        arrange(&mut next);
        stack.extend(next);
    }
    order
}

/// The Algorithm 1 ordering `m_0 = root, m_1, …, m_{P-1}`: machines grouped by switch in DFS
/// order, rank order within a switch, the root first in its group.
pub fn order(topology: &Topology, root: MachineId) -> Vec<MachineId> {
    order_with(topology, root, Visit::ById)
}

/// [`order`] over the switches in `visit`'s DFS order.
pub fn order_with(topology: &Topology, root: MachineId, visit: Visit) -> Vec<MachineId> {
    let mut by_switch: Vec<Vec<MachineId>> = vec![Vec::new(); topology.switches().len()];
    for m in 0..topology.size() {
        if m != root {
            by_switch[topology.switch_of(m)].push(m);
        }
    }
    let mut order = Vec::with_capacity(topology.size());
    order.push(root);
    for s in dfs_switch_order_with(topology, topology.switch_of(root), visit) {
        order.extend_from_slice(&by_switch[s]);
    }
    order
}

/// The contention-free chain rooted at `root`.
pub fn build(topology: &Topology, root: MachineId) -> Lane {
    Lane::chain(topology.size(), &order(topology, root))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gen;

    #[test]
    fn groups_machines_by_switch_in_dfs_order() {
        let t = gen::hub(3, 2, true); // ranks interleaved over s0..s3
        let o = order(&t, 5); // rank 5 is on s1
        assert_eq!(o[0], 5);
        let switches: Vec<usize> = o.iter().map(|&m| t.switch_of(m)).collect();
        assert_eq!(switches, [1, 1, 0, 0, 2, 2, 3, 3]);
        let lane = build(&t, 5);
        assert_eq!(lane.height(), 7);
        // Every directed edge is used at most once by the chain (Theorem 1).
        let mut used = std::collections::BTreeSet::new();
        for w in o.windows(2) {
            for e in t.path(w[0], w[1]) {
                assert!(used.insert(e), "edge {} used twice", t.edge_name(e));
            }
        }
    }
}
