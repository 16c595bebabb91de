//! Algorithm 1 of seed 000 §4 / seed 003 §4.1.1 (`003_f72e5e0868946953.txt`): the
//! contention-free logical linear tree.
//!
//! Step 1: number the switches in depth-first order starting from the root's switch. Step 2:
//! chain the machines grouped per switch in that order, the root first. Theorem 1 proves the
//! chain contention-free; Lemma 3 adds that for `i < j ≤ k < l`, `m_i → m_j` never contends with
//! `m_k → m_l`, which Algorithm 2 and the k-binomial construction build on. O(P + |S|).

use super::Lane;
use crate::topology::{MachineId, SwitchId, Topology};

/// Switches in DFS arrival order from `start` (neighbours visited by increasing id).
pub fn dfs_switch_order(topology: &Topology, start: SwitchId) -> Vec<SwitchId> {
    let mut order = Vec::with_capacity(topology.switches().len());
    let mut seen = vec![false; topology.switches().len()];
    let mut stack = vec![start];
    while let Some(s) = stack.pop() {
        if seen[s] {
            continue;
        }
        seen[s] = true;
        order.push(s);
        // Push in reverse so the smallest neighbour is visited first.
        for &(n, _) in topology.neighbours(s).iter().rev() {
            if !seen[n] {
                stack.push(n);
            }
        }
    }
    order
}

/// The Algorithm 1 ordering `m_0 = root, m_1, …, m_{P-1}`: machines grouped by switch in DFS
/// order, rank order within a switch, the root first in its group.
pub fn order(topology: &Topology, root: MachineId) -> Vec<MachineId> {
    let mut by_switch: Vec<Vec<MachineId>> = vec![Vec::new(); topology.switches().len()];
    for m in 0..topology.size() {
        if m != root {
            by_switch[topology.switch_of(m)].push(m);
        }
    }
    let mut order = Vec::with_capacity(topology.size());
    order.push(root);
    for s in dfs_switch_order(topology, topology.switch_of(root)) {
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
