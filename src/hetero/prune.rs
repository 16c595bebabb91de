//! Pruning heuristics: start from the whole platform and delete edges while every node stays
//! reachable from the source, until a spanning tree (n − 1 edges) is left.
//!
//! "Connected" in seed 004's listings means, for a directed platform and a broadcast, that the
//! source still reaches every node. An edge that is once found necessary stays necessary (the
//! graph only loses edges), so each edge is tested at most once: O(|E| (|V| + |E|)).

use super::platform::{EdgeId, Platform};
use super::throughput::Tree;
use std::cmp::Ordering;

/// Edges left after pruning: one incoming edge per destination.
struct Pruner<'a> {
    platform: &'a Platform,
    kept: Vec<bool>,
    needed: Vec<bool>,
    count: usize,
}

impl<'a> Pruner<'a> {
    fn new(platform: &'a Platform) -> Pruner<'a> {
        let m = platform.edges().len();
        Pruner {
            platform,
            kept: vec![true; m],
            needed: vec![false; m],
            count: m,
        }
    }

    fn done(&self) -> bool {
        self.count < self.platform.size()
    }

    /// Deletes `e` if the source still reaches everybody without it; returns whether it did.
    fn try_remove(&mut self, e: EdgeId) -> bool {
        if !self.kept[e] || self.needed[e] {
            return false;
        }
        if self.reaches_head_without(e) {
            self.kept[e] = false;
            self.count -= 1;
            true
        } else {
            self.needed[e] = true;
            false
        }
    }

    /// Whether the source reaches the head v of `e` over the kept edges but `e`. That is
    /// enough: a path to any node that used `e` can take the other path to v instead.
    fn reaches_head_without(&self, e: EdgeId) -> bool {
        let p = self.platform;
        let target = p.edges()[e].to;
        let mut seen = vec![false; p.size()];
        seen[p.source()] = true;
        let mut stack = vec![p.source()];
        while let Some(u) = stack.pop() {
            if u == target {
                return true;
            }
            for &f in p.out_edges(u) {
                let v = p.edges()[f].to;
                if f != e && self.kept[f] && !seen[v] {
                    seen[v] = true;
                    stack.push(v);
                }
            }
        }
        false
    }

    fn tree(self) -> Tree {
        let mut edge_in = vec![None; self.platform.size()];
        for (e, &k) in self.kept.iter().enumerate() {
            if k {
                edge_in[self.platform.edges()[e].to] = Some(e);
            }
        }
        Tree::from_edges(self.platform, &edge_in)
    }
}

/// Deletes edges in the order `order` gives while they keep the platform connected; one pass
/// suffices, since an edge kept in the pass was necessary and stays so.
fn prune_in_order(platform: &Platform, order: &mut [EdgeId]) -> Tree {
    let mut pruner = Pruner::new(platform);
    for &e in order.iter() {
        if pruner.done() {
            break;
        }
        pruner.try_remove(e);
    }
    pruner.tree()
}

fn by_time_desc(platform: &Platform) -> impl Fn(&EdgeId, &EdgeId) -> Ordering + '_ {
    |&a, &b| {
        let (ea, eb) = (&platform.edges()[a], &platform.edges()[b]);
        eb.time.total_cmp(&ea.time).then(a.cmp(&b))
    }
}

/// `prune-simple`: seed 004 §3.1.1, Algorithm 1 (Simple Platform Pruning). Deletes edges by
/// non-increasing `T_uv` while the source still reaches every node. O(|E| (|V| + |E|)).
pub fn prune_simple(platform: &Platform) -> Tree {
    let mut order: Vec<EdgeId> = (0..platform.edges().len()).collect();
    order.sort_by(by_time_desc(platform));
    prune_in_order(platform, &mut order)
}

/// `prune-degree`: seed 004 §3.1.2, Algorithm 2 (Refined Platform Pruning). Keeps the
/// weighted out-degree `OutDegree(u) = Σ T_uv` over u's remaining edges; repeatedly takes the
/// node with the largest one and deletes its heaviest edge that can go. O(|E| (|V| + |E|)).
pub fn prune_degree(platform: &Platform) -> Tree {
    let n = platform.size();
    let mut pruner = Pruner::new(platform);
    let mut out_degree: Vec<f64> = (0..n)
        .map(|u| {
            platform
                .out_edges(u)
                .iter()
                .map(|&e| platform.edges()[e].time)
                .sum()
        })
        .collect();
    // Each node's edges by decreasing weight, once.
    let mut by_weight: Vec<Vec<EdgeId>> = (0..n).map(|u| platform.out_edges(u).to_vec()).collect();
    for list in &mut by_weight {
        list.sort_by(by_time_desc(platform));
    }
    'outer: while !pruner.done() {
        let mut nodes: Vec<usize> = (0..n).collect();
        nodes.sort_by(|&a, &b| out_degree[b].total_cmp(&out_degree[a]).then(a.cmp(&b)));
        for u in nodes {
            for &e in &by_weight[u] {
                if pruner.try_remove(e) {
                    out_degree[u] -= platform.edges()[e].time;
                    continue 'outer;
                }
            }
        }
        unreachable!("a connected graph with more than n-1 edges has an edge that can go");
    }
    pruner.tree()
}

/// `lp-prune`: seed 004 §4.2.1, Algorithm 6 (communication graph pruning). Deletes the edges
/// carrying the fewest slices in the LP optimum (`n_uv`, [`super::lp::Ssb::n`]) first, while
/// the source still reaches every node. The listing says "sorted by non-increasing n_uv", but
/// the text ("removes the edges carrying the smallest number of messages") is what it means:
/// we delete by non-decreasing n_uv, ties broken by larger `T_uv` first.
pub fn lp_prune(platform: &Platform, n_uv: &[f64]) -> Tree {
    let mut order: Vec<EdgeId> = (0..platform.edges().len()).collect();
    let by_time = by_time_desc(platform);
    order.sort_by(|a, b| n_uv[*a].total_cmp(&n_uv[*b]).then_with(|| by_time(a, b)));
    prune_in_order(platform, &mut order)
}
