//! Growing heuristics: Prim-like, start from the source and repeatedly add the best edge from
//! a tree node to a node outside the tree. O(|V| |E|).

use super::platform::{EdgeId, Platform};
use super::throughput::Tree;

/// Grows a tree, adding each time the frontier edge with the smallest `cost(edge, state)`
/// (ties: lower edge id); `added(edge, state)` updates the state after an edge joins.
fn grow_by<S>(
    platform: &Platform,
    mut state: S,
    cost: impl Fn(EdgeId, &S) -> f64,
    added: impl Fn(EdgeId, &mut S),
) -> Tree {
    let n = platform.size();
    let mut in_tree = vec![false; n];
    in_tree[platform.source()] = true;
    let mut edge_in = vec![None; n];
    for _ in 1..n {
        let mut best: Option<(f64, EdgeId)> = None;
        for (e, edge) in platform.edges().iter().enumerate() {
            if in_tree[edge.from] && !in_tree[edge.to] {
                let c = cost(e, &state);
                if best.is_none_or(|(b, _)| c < b) {
                    best = Some((c, e));
                }
            }
        }
        // Platforms are validated: every node is reachable, so a frontier edge exists.
        let Some((_, e)) = best else { break };
        let v = platform.edges()[e].to;
        in_tree[v] = true;
        edge_in[v] = Some(e);
        added(e, &mut state);
    }
    Tree::from_edges(platform, &edge_in)
}

/// `grow`: seed 004 §3.1.3, Algorithm 3 (growing a minimum weighted out-degree tree). The cost
/// of a frontier edge u→w is the weighted out-degree u would have with it,
/// `Σ_{tree children c} T_uc + T_uw`. (The listing's update line adds `cost(u,v)` — itself
/// already holding u's earlier children — which would count them twice; the text defines
/// the cost as the sum of the weights of u's tree edges, which is what we use.) O(|V| |E|).
pub fn grow(platform: &Platform) -> Tree {
    let out_degree = vec![0.0; platform.size()];
    grow_by(
        platform,
        out_degree,
        |e, deg| {
            let edge = &platform.edges()[e];
            deg[edge.from] + edge.time
        },
        |e, deg| {
            let edge = &platform.edges()[e];
            deg[edge.from] += edge.time;
        },
    )
}

/// `multiport-grow`: seed 004 §3.2, Algorithm 5. The cost of a frontier edge u→w is u's
/// multi-port period with it: `max(Σ_children send_uc + send_uw, max(T_uc…, T_uw))`
/// (`δout·send_u` when send depends on u only, as in the paper). O(|V| |E|).
pub fn multiport_grow(platform: &Platform) -> Tree {
    // Per node: (sum of send times of its children, largest child T).
    let state = vec![(0.0, 0.0f64); platform.size()];
    grow_by(
        platform,
        state,
        |e, s| {
            let edge = &platform.edges()[e];
            let (send, tmax) = s[edge.from];
            (send + edge.send_time()).max(tmax.max(edge.time))
        },
        |e, s| {
            let edge = &platform.edges()[e];
            let entry = &mut s[edge.from];
            entry.0 += edge.send_time();
            entry.1 = entry.1.max(edge.time);
        },
    )
}

/// `lp-grow`: seed 004 §4.2.2, Algorithm 7 (growing a tree over the communication graph). Adds
/// the frontier edge carrying the most slices in the LP optimum (largest `n_uv`); ties go to
/// the smaller `T_uv`, then the lower edge id. O(|V| |E|).
pub fn lp_grow(platform: &Platform, n_uv: &[f64]) -> Tree {
    // Lexicographic (−n, T) folded into one key would lose precision; compare in two steps by
    // ranking the edges once.
    let mut order: Vec<EdgeId> = (0..platform.edges().len()).collect();
    order.sort_by(|&a, &b| {
        n_uv[b]
            .total_cmp(&n_uv[a])
            .then(
                platform.edges()[a]
                    .time
                    .total_cmp(&platform.edges()[b].time),
            )
            .then(a.cmp(&b))
    });
    let mut rank = vec![0.0; order.len()];
    for (r, &e) in order.iter().enumerate() {
        rank[e] = r as f64;
    }
    grow_by(platform, (), |e, _| rank[e], |_, _| {})
}
