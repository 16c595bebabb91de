//! `binomial`: seed 004 §3.1.4, Algorithm 4 — the topology-unaware MPI binomial tree over the
//! ranks, each logical transfer routed over a shortest path (by `T_uv`) of the platform.

use super::platform::{EdgeId, NodeId, Platform};
use super::throughput::Tree;
use super::HeteroError;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Ranks: the source is rank 0, the other nodes follow in file order. With `m = ⌊log2 |V|⌋`,
/// stage p (0 ≤ p < m) has rank `X·2^(m−p)` send to `X·2^(m−p) + 2^(m−p−1)` for
/// `X < 2^p`; then each rank `u ≥ 2^m` receives from `u − 2^m` (the listing writes
/// `SHORTEST-PATH(u, u − 2^m)`, but the data flows from the lower rank, which already has it).
/// Each transfer follows a shortest path, so the period counts the load every routed transfer
/// puts on every edge it crosses. O(|V| (|E| log |V|)).
pub fn binomial(platform: &Platform) -> Result<Tree, HeteroError> {
    let n = platform.size();
    let mut rank_to_node: Vec<NodeId> = vec![platform.source()];
    rank_to_node.extend((0..n).filter(|&v| v != platform.source()));
    let m = usize::BITS - 1 - n.leading_zeros(); // ⌊log2 n⌋, n ≥ 2
    let mut transfers = Vec::with_capacity(n - 1);
    for p in 0..m {
        let step = 1usize << (m - p);
        for x in 0..(1usize << p) {
            transfers.push((x * step, x * step + step / 2));
        }
    }
    for u in (1usize << m)..n {
        transfers.push((u - (1usize << m), u));
    }
    let mut parent = vec![None; n];
    let mut route = vec![Vec::new(); n];
    let mut paths: Vec<Option<Vec<Option<EdgeId>>>> = vec![None; n];
    for (a, b) in transfers {
        let (from, to) = (rank_to_node[a], rank_to_node[b]);
        let pred = paths[from].get_or_insert_with(|| shortest_paths(platform, from));
        parent[to] = Some(from);
        let mut hops = Vec::new();
        let mut at = to;
        while at != from {
            // Every node is reachable from the source, but not necessarily from `from`.
            let Some(e) = pred[at] else {
                return Err(HeteroError::NoRoute {
                    heuristic: "binomial",
                    from: platform.nodes()[from].clone(),
                    to: platform.nodes()[to].clone(),
                });
            };
            hops.push(e);
            at = platform.edges()[e].from;
        }
        hops.reverse();
        route[to] = hops;
    }
    Ok(Tree { parent, route })
}

/// Dijkstra from `from` by edge time: the edge entering each node on a shortest path.
fn shortest_paths(platform: &Platform, from: NodeId) -> Vec<Option<EdgeId>> {
    let n = platform.size();
    let mut dist = vec![f64::INFINITY; n];
    let mut pred = vec![None; n];
    dist[from] = 0.0;
    let mut heap = BinaryHeap::new();
    heap.push(Reverse((Ordered(0.0), from)));
    while let Some(Reverse((Ordered(d), u))) = heap.pop() {
        if d > dist[u] {
            continue;
        }
        for &e in platform.out_edges(u) {
            let edge = &platform.edges()[e];
            let nd = d + edge.time;
            if nd < dist[edge.to] {
                dist[edge.to] = nd;
                pred[edge.to] = Some(e);
                heap.push(Reverse((Ordered(nd), edge.to)));
            }
        }
    }
    pred
}

/// A totally ordered f64 for the heap.
#[derive(Clone, Copy)]
struct Ordered(f64);
impl PartialEq for Ordered {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Ordered {}
impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}
