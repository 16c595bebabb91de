//! Maximum flow and a minimum cut (Dinic's algorithm) over real capacities, for the cut
//! generation of [`super::lp`]. O(|V|² |E|) per flow.

use super::platform::{EdgeId, NodeId, Platform};

/// A maximum `source → sink` flow value and the source side of a minimum cut.
pub struct MinCut {
    pub value: f64,
    /// `source_side[v]`: v is reachable from the source in the residual graph.
    pub source_side: Vec<bool>,
}

/// Max flow from the platform's source to `sink` with capacity `cap[e]` on edge e; residual
/// capacities below `eps` count as zero.
pub fn min_cut(platform: &Platform, cap: &[f64], sink: NodeId, eps: f64) -> MinCut {
    let n = platform.size();
    // Arc 2e is the edge, 2e+1 its reverse.
    let mut residual: Vec<f64> = Vec::with_capacity(2 * cap.len());
    let mut head: Vec<NodeId> = Vec::with_capacity(2 * cap.len());
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (e, edge) in platform.edges().iter().enumerate() {
        residual.push(cap[e].max(0.0));
        head.push(edge.to);
        adj[edge.from].push(2 * e);
        residual.push(0.0);
        head.push(edge.from);
        adj[edge.to].push(2 * e + 1);
    }
    let s = platform.source();
    let mut value = 0.0;
    loop {
        let level = levels(&adj, &head, &residual, s, eps);
        if level[sink] == usize::MAX {
            let source_side = level.iter().map(|&l| l != usize::MAX).collect();
            return MinCut { value, source_side };
        }
        let mut next = vec![0usize; n];
        loop {
            let pushed = augment(
                (&adj, &head),
                &mut residual,
                (&level, &mut next),
                (s, sink),
                eps,
            );
            if pushed <= eps {
                break;
            }
            value += pushed;
        }
    }
}

/// The edges leaving the source side of a cut.
pub fn cut_edges(platform: &Platform, source_side: &[bool]) -> Vec<EdgeId> {
    (0..platform.edges().len())
        .filter(|&e| {
            let edge = &platform.edges()[e];
            source_side[edge.from] && !source_side[edge.to]
        })
        .collect()
}

fn levels(
    adj: &[Vec<usize>],
    head: &[NodeId],
    residual: &[f64],
    s: NodeId,
    eps: f64,
) -> Vec<usize> {
    let mut level = vec![usize::MAX; adj.len()];
    level[s] = 0;
    let mut queue = std::collections::VecDeque::from([s]);
    while let Some(u) = queue.pop_front() {
        for &a in &adj[u] {
            let v = head[a];
            if residual[a] > eps && level[v] == usize::MAX {
                level[v] = level[u] + 1;
                queue.push_back(v);
            }
        }
    }
    level
}

/// One blocking-flow augmentation along level-increasing arcs (iterative DFS).
fn augment(
    (adj, head): (&[Vec<usize>], &[NodeId]),
    residual: &mut [f64],
    (level, next): (&[usize], &mut [usize]),
    (s, sink): (NodeId, NodeId),
    eps: f64,
) -> f64 {
    // Path of arcs from s; `next[u]` is the next arc of u to try.
    let mut path: Vec<usize> = Vec::new();
    let mut u = s;
    loop {
        if u == sink {
            let pushed = path.iter().fold(f64::INFINITY, |m, &a| m.min(residual[a]));
            for &a in &path {
                residual[a] -= pushed;
                residual[a ^ 1] += pushed;
            }
            return pushed;
        }
        let mut advanced = false;
        while next[u] < adj[u].len() {
            let a = adj[u][next[u]];
            let v = head[a];
            if residual[a] > eps && level[v] == level[u] + 1 {
                path.push(a);
                u = v;
                advanced = true;
                break;
            }
            next[u] += 1;
        }
        if !advanced {
            // Dead end: retreat and skip the arc that led here.
            let Some(a) = path.pop() else { return 0.0 };
            u = head[a ^ 1];
            next[u] += 1;
        }
    }
}
