//! The extended parameterized LogP model of seed 003 §4.2
//! (`../shared/seeds/003_f72e5e0868946953.txt`), generalized from chains and binary trees to any
//! plan.
//!
//! * Formula (1), linear tree: `(P − 1)(L(m) + g(m)) + (X − 1)·g(m)` ([`chain_time`]).
//! * Formula (2), binary tree: a segment reaches the left child after `L + g` and the right child
//!   after `L + 2g`; the first segment reaches receiver r after `A_r·L + B_r·g`; the total is
//!   `max_r(A_r·L + B_r·g) + 2(X − 1)·g`. Generalized ([`arrival_coefficients`],
//!   [`tree_time`]): the hop to the child in 1-based send position i costs `L + i·g`, and the
//!   pipeline term is `(X − 1)·D·g` with D the largest number of children of one rank — the
//!   busiest sender spends D gaps per segment. For a chain this is formula (1) exactly, for a
//!   binary tree formula (2).
//! * Several lanes (seed 002's multi-lane trees, each lane carrying an equal share of the
//!   message in X segments): a rank that sends in several lanes sends segment x of lane 0 to its
//!   lane-0 children, then segment x of lane 1 to its lane-1 children, so the send positions run
//!   on across lanes and D counts a rank's children in all lanes. With two lanes of msize/2 in
//!   X segments of size m each, this is seed 002 Table 1's `log p · l + M/b`: the first segment
//!   crosses a binary tree plus one swap hop, and the pipeline term is `(X − 1)·2·g(m)` for
//!   `2X·m = M` bytes, the same bandwidth term as a chain.
//!
//! The model assumes no contention (§4.2: the trees are contention-free); it is optimistic for
//! plans the checker rejects.

use super::profile::Cost;
use crate::plan::Lane;

/// Formula (1): a chain over `p` ranks, `x` segments (0 when nobody receives).
pub fn chain_time(p: usize, x: u64, c: Cost) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    let hops = p.saturating_sub(1) as f64;
    hops * (c.l_us + c.g_us) + x.saturating_sub(1) as f64 * c.g_us
}

/// `(A_r, B_r)` for every rank of one lane: the first segment reaches r after `A_r·L + B_r·g`
/// (the root has `(0, 0)`). Ranks the lane does not reach keep `(0, 0)`.
pub fn arrival_coefficients(lane: &Lane) -> Vec<(u64, u64)> {
    arrivals(std::slice::from_ref(lane))
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// Per lane, per rank `(A, B)` with send positions counted across lanes (module doc).
fn arrivals(lanes: &[Lane]) -> Vec<Vec<(u64, u64)>> {
    let size = lanes.first().map_or(0, |l| l.parents.len());
    // offset[l][r]: children rank r has in lanes before l.
    let mut before = vec![0u64; size];
    let mut out = Vec::with_capacity(lanes.len());
    for lane in lanes {
        let mut ab = vec![(0u64, 0u64); size];
        if let Some(root) = lane.root() {
            let mut stack = vec![root];
            let mut visited = 0;
            while let Some(r) = stack.pop() {
                visited += 1;
                if visited > size {
                    break; // a cyclic lane: the checker reports it
                }
                for (i, &c) in lane.children[r].iter().enumerate() {
                    let (a, b) = ab[r];
                    ab[c] = (a + 1, b + before[r] + i as u64 + 1);
                    stack.push(c);
                }
            }
        }
        for (r, kids) in lane.children.iter().enumerate() {
            before[r] += kids.len() as u64;
        }
        out.push(ab);
    }
    out
}

/// The largest number of children one rank has, summed over lanes.
pub fn sending_degree(lanes: &[Lane]) -> u64 {
    let size = lanes.first().map_or(0, |l| l.parents.len());
    (0..size)
        .map(|r| lanes.iter().map(|l| l.children[r].len() as u64).sum())
        .max()
        .unwrap_or(0)
}

/// The most segment ends (sends plus receives) one rank handles per segment round, summed over
/// lanes: its children in every lane, plus one receive in every lane that reaches it from a
/// parent. Seed 003 §5 counts a node's CPU work this way ("each node takes two units of time to
/// perform two sends and one receive" in a binary tree, one send and one receive in a chain).
pub fn segment_ends(lanes: &[Lane]) -> u64 {
    let size = lanes.first().map_or(0, |l| l.parents.len());
    (0..size)
        .map(|r| {
            lanes
                .iter()
                .map(|l| l.children[r].len() as u64 + u64::from(l.parents[r].is_some()))
                .sum()
        })
        .max()
        .unwrap_or(0)
}

/// When the first segment reaches each rank, latest over lanes: `max over lanes of A·L + B·g`.
pub fn arrival_times(lanes: &[Lane], c: Cost) -> Vec<f64> {
    let size = lanes.first().map_or(0, |l| l.parents.len());
    let mut out = vec![0.0f64; size];
    for lane in arrivals(lanes) {
        for (t, (a, b)) in out.iter_mut().zip(lane) {
            *t = t.max(a as f64 * c.l_us + b as f64 * c.g_us);
        }
    }
    out
}

/// Time until the first segment of every lane has reached every rank: `max(A·L + B·g)`.
pub fn first_arrival(lanes: &[Lane], c: Cost) -> f64 {
    arrivals(lanes)
        .iter()
        .flatten()
        .map(|&(a, b)| a as f64 * c.l_us + b as f64 * c.g_us)
        .fold(0.0, f64::max)
}

/// Generalized formula (2): `max_r(A_r·L + B_r·g) + (X − 1)·D·g` for `x` segments per lane.
pub fn tree_time(lanes: &[Lane], x: u64, c: Cost) -> f64 {
    first_arrival(lanes, c) + x.saturating_sub(1) as f64 * sending_degree(lanes) as f64 * c.g_us
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Cost = Cost {
        l_us: 100.0,
        g_us: 10.0,
    };

    #[test]
    fn figure8_example() {
        // Seed 003 Fig. 8: root 0 with children 1 (left) and 2 (right); 2 has children 3, 4.
        // The last receiver is 4 with A = 2, B = 4.
        let lane = Lane::from_children(vec![vec![1, 2], vec![], vec![3, 4], vec![], vec![]]);
        let ab = arrival_coefficients(&lane);
        assert_eq!(ab[4], (2, 4));
        assert_eq!(ab[3], (2, 3));
        assert_eq!(ab[1], (1, 1));
        // 2L + 4g + 2(X − 1)g
        let x = 7;
        let want = 2.0 * C.l_us + 4.0 * C.g_us + 2.0 * (x - 1) as f64 * C.g_us;
        assert_eq!(tree_time(&[lane], x, C), want);
    }

    #[test]
    fn formula1_is_the_chain_case() {
        for p in 1..12 {
            let order: Vec<usize> = (0..p).rev().collect();
            let lane = Lane::chain(p, &order);
            for x in [1, 2, 50] {
                assert_eq!(
                    tree_time(std::slice::from_ref(&lane), x, C),
                    chain_time(p, x, C)
                );
            }
        }
        assert_eq!(
            chain_time(
                32,
                32,
                Cost {
                    l_us: 110.0,
                    g_us: 30.0
                }
            ),
            5270.0
        );
    }

    #[test]
    fn lanes_interleave_send_positions() {
        // Root 0 sends lane 0 to 1 and lane 1 to 2; the leaves swap.
        let a = Lane::from_children(vec![vec![1], vec![2], vec![]]);
        let b = Lane::from_children(vec![vec![2], vec![], vec![1]]);
        let lanes = [a, b];
        assert_eq!(sending_degree(&lanes), 2);
        // Lane 1 reaches 2 as the root's second send: L + 2g; 1 via 2: 2L + 3g.
        assert_eq!(first_arrival(&lanes, C), 2.0 * C.l_us + 3.0 * C.g_us);
        // Ranks 1 and 2 each receive in both lanes and send in one: 3 ends; the root 2.
        assert_eq!(segment_ends(&lanes), 3);
        let chain = Lane::chain(4, &[0, 1, 2, 3]);
        assert_eq!(segment_ends(std::slice::from_ref(&chain)), 2);
    }
}
