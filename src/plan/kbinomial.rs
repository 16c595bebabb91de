//! k-binomial trees for packetized (pipelined) broadcast — seed 001
//! (`../shared/seeds/001_27b88991baebfc43.txt`, §3.2, §4.1–§4.3).
//!
//! * FPFS forwarding (§3.2, Fig. 7): a node forwards every packet to all of its children, in
//!   send order, before it handles the next packet. pipecast's engine forwards segments the same
//!   way, so a [`Lane`]'s `children[r]` is that order.
//! * Step model (§4.1, Theorems 1–2): one step = one packet sent by one node. The first packet
//!   reaches every node after `t_s` steps and each further packet completes `k_T` steps after the
//!   previous one (k_T = children of the root), so `m` packets take `t_s + (m − 1)·k_T` steps
//!   ([`steps`]).
//! * Lemma 1: a k-binomial tree (every node has at most k children, recursive doubling) covers
//!   [`nodes_reached`]`(s, k)` = N(s, k) nodes in s steps: `2^s` if `s ≤ k`, else
//!   `1 + Σ_{i=1..k} N(s − i, k)`.
//! * Theorem 3: for n nodes and m packets the optimal tree is the k-binomial tree, `1 ≤ k ≤
//!   ⌈log2 n⌉`, minimizing `t_s + (m − 1)·k` with `t_s` the least s such that N(s, k) ≥ n
//!   ([`optimal_k`]; no closed form, §4.3.1, so every k is tried: O(k_max · t_s · k)).
//! * Fig. 11 (§4.3.2): the construction on a contention-free ordering, root first. A node that
//!   owns the chain segment `[lo, hi]` with `s` steps left sends first to the node
//!   `N(s−1, k)` places from the right end, then to the node `N(s−2, k)` places further left,
//!   …; each child covers the part of the chain to its right recursively. We use the Algorithm 1
//!   order ([`super::linear::order`]). O(P).
//!
//! **Contention.** The ordering guarantees (seed 000 Lemma 3) that `m_i → m_j` and `m_k → m_l`
//! never contend for `i < j ≤ k < l`, i.e. for *disjoint* intervals of the chain. Within one
//! step of the construction all transfers use disjoint intervals, so the tree is contention-free
//! packet by packet — seed 001's "depth contention-free". Under pipelining (FPFS) every edge of
//! the tree is busy at once with different packets, and the construction nests intervals: the
//! root's transfer `m_0 → a` spans the whole interval of its later child `b` and b's subtree. On
//! a single switch that never contends (distinct senders and distinct receivers share no
//! directed edge), but across switch links it can. So the result is *not* contention-free in
//! general under pipecast's pipelined 1-port model: `pipecast plan` reports the checker's
//! verdict (`plan::check`) rather than claiming it.

use super::{Lane, PlanError};
use crate::topology::{MachineId, Topology};

/// N(s, k) of seed 001 Lemma 1: nodes (root included) a k-binomial tree reaches in `s` steps.
/// Saturates at `u64::MAX`. `k = 0` reaches only the root.
pub fn nodes_reached(s: u32, k: u32) -> u64 {
    *reach_table(s, k).last().expect("table has s + 1 entries")
}

/// `[N(0, k), N(1, k), …, N(s, k)]`.
fn reach_table(s: u32, k: u32) -> Vec<u64> {
    let mut n = Vec::with_capacity(s as usize + 1);
    for t in 0..=s {
        let v = if k == 0 {
            1
        } else if t <= k {
            1u64.checked_shl(t).unwrap_or(u64::MAX)
        } else {
            let lo = (t - k) as usize;
            n[lo..t as usize]
                .iter()
                .fold(1u64, |acc: u64, &x| acc.saturating_add(x))
        };
        n.push(v);
    }
    n
}

/// t_s of Theorem 3: the least number of steps in which a k-binomial tree reaches `n` nodes.
/// `n ≤ 1` needs 0 steps; `k = 0` cannot reach more than the root (`u32::MAX`).
pub fn first_packet_steps(n: u64, k: u32) -> u32 {
    if n <= 1 {
        return 0;
    }
    if k == 0 {
        return u32::MAX;
    }
    // N(s, k) ≥ s + 1, so s = n − 1 always suffices; grow the table incrementally.
    let mut table: Vec<u64> = vec![1];
    let mut s = 0u32;
    while table[s as usize] < n {
        s += 1;
        let v = if s <= k {
            1u64.checked_shl(s).unwrap_or(u64::MAX)
        } else {
            let lo = (s - k) as usize;
            table[lo..s as usize]
                .iter()
                .fold(1u64, |acc, &x| acc.saturating_add(x))
        };
        table.push(v);
    }
    s
}

/// Theorem 2: steps for `m` packets over a tree whose first packet needs `t_s` steps and whose
/// root has `k` children: `t_s + (m − 1)·k` (`m = 0` counts as one packet).
pub fn steps(t_s: u32, k: u32, m: u64) -> u64 {
    t_s as u64 + m.max(1).saturating_sub(1).saturating_mul(k as u64)
}

/// ⌈log2 n⌉ (0 for n ≤ 1): the binomial tree's root degree, the largest useful k.
pub fn ceil_log2(n: u64) -> u32 {
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros()
    }
}

/// Optimal k for `n` nodes and `m` packets (seed 001 Theorem 3): the k in `1..=⌈log2 n⌉` with
/// the fewest steps `t_s(n, k) + (m − 1)·k`; ties go to the smaller k (fewer children per node,
/// less forwarding work). `n ≤ 2` gives 1.
pub fn optimal_k(n: u64, m: u64) -> u32 {
    let k_max = ceil_log2(n).max(1);
    let mut best = (u64::MAX, 1);
    for k in 1..=k_max {
        let cost = steps(first_packet_steps(n, k), k, m);
        if cost < best.0 {
            best = (cost, k);
        }
    }
    best.1
}

/// Fig. 11 on an arbitrary ordering (`order[0]` is the root): children lists indexed by rank,
/// in send order. `k ≥ 1`.
pub fn build_on_order(size: usize, order: &[MachineId], k: u32) -> Lane {
    let mut children = vec![Vec::new(); size];
    if order.len() <= 1 {
        return Lane::from_children(children);
    }
    let s = first_packet_steps(order.len() as u64, k);
    let reach = reach_table(s, k);
    // (position of the sender, last position of its chain segment, steps left)
    let mut stack = vec![(0usize, order.len() - 1, s)];
    while let Some((lo, hi, s)) = stack.pop() {
        let mut end = hi;
        for i in 1..=k.min(s) {
            if end == lo {
                break;
            }
            let block = (reach[(s - i) as usize].min((end - lo) as u64)) as usize;
            let child = end + 1 - block;
            children[order[lo]].push(order[child]);
            stack.push((child, end, s - i));
            end = child - 1;
        }
        debug_assert_eq!(end, lo, "N(s, k) ≥ segment length by the choice of s");
    }
    Lane::from_children(children)
}

/// k-binomial tree rooted at `root` on the Algorithm 1 ordering (seed 001 Fig. 11 over seed 003
/// Algorithm 1). Children are in send order (the farthest subtree first).
pub fn build(topology: &Topology, root: MachineId, k: u32) -> Result<Lane, PlanError> {
    let size = topology.size();
    if root >= size {
        return Err(PlanError::BadRoot { root, size });
    }
    if k == 0 {
        return Err(PlanError::BadArity(format!("kbinomial:{k}")));
    }
    let order = super::linear::order(topology, root);
    Ok(build_on_order(size, &order, k))
}

/// Step at which each rank first receives a packet when every node sends one packet per step
/// to its children in send order (child i, 1-based, receives at parent's step + i). This is the
/// single-packet schedule of seed 001 Fig. 8/9; its maximum is t_s.
pub fn arrival_steps(lane: &Lane) -> Vec<u64> {
    let mut step = vec![0u64; lane.parents.len()];
    let Some(root) = lane.root() else {
        return step;
    };
    let mut stack = vec![root];
    let mut visited = 0;
    while let Some(r) = stack.pop() {
        visited += 1;
        if visited > lane.parents.len() {
            break; // malformed (cyclic) lane: the checker reports it
        }
        for (i, &c) in lane.children[r].iter().enumerate() {
            step[c] = step[r] + i as u64 + 1;
            stack.push(c);
        }
    }
    step
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gen;

    #[test]
    fn lemma1_values() {
        // s ≤ k: binomial doubling.
        assert_eq!(nodes_reached(0, 3), 1);
        assert_eq!(nodes_reached(3, 3), 8);
        // Fig. 9(a): the 3-binomial tree needs 5 steps for 16 nodes: N(4,3)=15, N(5,3)=28.
        assert_eq!(nodes_reached(4, 3), 1 + 8 + 4 + 2);
        assert_eq!(nodes_reached(5, 3), 1 + 15 + 8 + 4);
        // Fig. 9(b): the 4-binomial tree reaches 16 nodes in 4 steps.
        assert_eq!(nodes_reached(4, 4), 16);
        // k = 1 is the chain: s + 1 nodes.
        for s in 0..20 {
            assert_eq!(nodes_reached(s, 1), s as u64 + 1);
        }
        assert_eq!(nodes_reached(200, 8), u64::MAX);
    }

    #[test]
    fn first_packet_steps_match_figures() {
        assert_eq!(first_packet_steps(16, 3), 5);
        assert_eq!(first_packet_steps(16, 4), 4);
        assert_eq!(first_packet_steps(8, 3), 3); // Fig. 8: binomial tree over 8 nodes
        assert_eq!(first_packet_steps(10, 1), 9);
        assert_eq!(first_packet_steps(1, 5), 0);
    }

    #[test]
    fn theorem2_fig8_example() {
        // 3 packets, 7 destinations, binomial tree: 3 + (3 − 1)·3 = 9 steps.
        assert_eq!(steps(first_packet_steps(8, 3), 3, 3), 9);
    }

    #[test]
    fn optimal_k_hand_cases() {
        // One packet: the binomial tree (k = ⌈log2 n⌉) when n is a power of two.
        assert_eq!(optimal_k(16, 1), 4);
        assert_eq!(optimal_k(64, 1), 6);
        // Many packets: the chain wins (1 step per packet).
        assert_eq!(optimal_k(16, 1000), 1);
        // n = 16, m = 4: k=1: 15+3=18, k=2: t_s(16,2)=5 (N(4,2)=12, N(5,2)=20) → 5+6=11,
        // k=3: 5+9=14, k=4: 4+12=16 → 2.
        assert_eq!(nodes_reached(4, 2), 12);
        assert_eq!(first_packet_steps(16, 2), 5);
        assert_eq!(optimal_k(16, 4), 2);
        assert_eq!(optimal_k(1, 7), 1);
        assert_eq!(optimal_k(2, 1), 1);
    }

    #[test]
    fn optimal_k_is_the_argmin() {
        for n in [3u64, 7, 16, 33, 100, 1000] {
            for m in [1u64, 2, 5, 30, 500] {
                let k = optimal_k(n, m);
                let best = steps(first_packet_steps(n, k), k, m);
                for j in 1..=ceil_log2(n) {
                    assert!(best <= steps(first_packet_steps(n, j), j, m), "n={n} m={m}");
                }
            }
        }
    }

    #[test]
    fn construction_spans_and_meets_lemma1() {
        for (switches, machines, seed) in [(1, 16, 1), (5, 40, 2), (9, 77, 3)] {
            let t = gen::random_cluster(switches, machines, seed);
            for k in 1..=7 {
                let root = seed as usize % machines;
                let lane = build(&t, root, k).unwrap();
                assert_eq!(lane.root(), Some(root));
                let reached = lane.parents.iter().filter(|p| p.is_some()).count();
                assert_eq!(reached, machines - 1);
                assert!(lane.max_degree() <= k as usize);
                let steps = arrival_steps(&lane);
                let t_s = *steps.iter().max().unwrap();
                assert_eq!(t_s, first_packet_steps(machines as u64, k) as u64, "k={k}");
            }
        }
    }

    #[test]
    fn fig11_first_child_is_n_s_minus_1_from_the_right() {
        let t = crate::topology::Topology::single_switch(16);
        let lane = build(&t, 0, 3).unwrap();
        // Order is 0..16; s = 5; first child is N(4,3) = 15 places from the right end → 1,
        // second N(3,3) = 8 would exceed what is left, so it takes the rest.
        assert_eq!(lane.children[0], [1]);
        let lane = build(&t, 0, 4).unwrap();
        // s = 4: blocks of 8, 4, 2, 1 from the right: children 8, 4, 2, 1.
        assert_eq!(lane.children[0], [8, 4, 2, 1]);
    }

    #[test]
    fn bad_input_is_an_error() {
        let t = crate::topology::Topology::single_switch(4);
        assert!(matches!(build(&t, 4, 2), Err(PlanError::BadRoot { .. })));
        assert!(matches!(build(&t, 0, 0), Err(PlanError::BadArity(_))));
    }
}
