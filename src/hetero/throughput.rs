//! Broadcast trees on a platform and their steady-state period (seed 004 §2.4, §3.1, §3.2).
//!
//! A [`Tree`] gives every destination a parent and the route (platform edges) its slices take
//! from that parent. For the heuristics of §3.1.1–3.1.3, §3.2 and §4.2 the route is the single
//! edge parent→child; for the binomial tree (§3.1.4) it is the shortest path between the two
//! ranks, and every edge of it carries the slice (so an edge crossed by k transfers is loaded k
//! times).

use super::platform::{EdgeId, NodeId, Platform};
use super::HeteroError;

/// Which communication model the period is computed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Model {
    /// Bidirectional one-port (§2.3, §3.1): a node sends to one neighbour at a time and
    /// receives from one at a time; period of node u = max(Σ_children T_uv, T of its
    /// incoming edge).
    OnePort,
    /// Multi-port (§3.2): sends overlap except for the sender-busy part; period of node u =
    /// max(Σ_children send_uv, max_children T_uv) — δout·send_u when send depends on u only.
    MultiPort,
}

impl Model {
    pub fn name(self) -> &'static str {
        match self {
            Model::OnePort => "one-port",
            Model::MultiPort => "multi-port",
        }
    }
}

impl std::str::FromStr for Model {
    type Err = HeteroError;
    fn from_str(s: &str) -> Result<Model, HeteroError> {
        match s {
            "one-port" => Ok(Model::OnePort),
            "multi-port" => Ok(Model::MultiPort),
            _ => Err(HeteroError::UnknownModel(s.to_string())),
        }
    }
}

/// A spanning broadcast tree rooted at the platform's source.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// `parent[v]`: who sends to v (`None` for the source).
    pub parent: Vec<Option<NodeId>>,
    /// `route[v]`: the platform edges a slice crosses from `parent[v]` to v, in order (empty for
    /// the source).
    pub route: Vec<Vec<EdgeId>>,
}

impl Tree {
    /// A tree whose every route is the one edge parent→child: `edge_in[v]` is that edge.
    pub fn from_edges(platform: &Platform, edge_in: &[Option<EdgeId>]) -> Tree {
        let parent = edge_in
            .iter()
            .map(|e| e.map(|e| platform.edges()[e].from))
            .collect();
        let route = edge_in
            .iter()
            .map(|e| e.iter().copied().collect())
            .collect();
        Tree { parent, route }
    }

    /// Checks that every node but the source has a parent, routes join parent to child over
    /// existing edges, and the parents reach the source without a cycle.
    pub fn validate(&self, platform: &Platform) -> Result<(), HeteroError> {
        let n = platform.size();
        let bad = |m: String| Err(HeteroError::BadTree(m));
        if self.parent.len() != n || self.route.len() != n {
            return bad(format!(
                "tree has {} entries for {n} nodes",
                self.parent.len()
            ));
        }
        for v in 0..n {
            let name = &platform.nodes()[v];
            match self.parent[v] {
                None if v == platform.source() => continue,
                None => return bad(format!("node {name:?} has no parent")),
                Some(_) if v == platform.source() => {
                    return bad(format!("source {name:?} has a parent"))
                }
                Some(p) => {
                    let mut at = p;
                    for &e in &self.route[v] {
                        let edge = platform.edges().get(e).ok_or_else(|| {
                            HeteroError::BadTree(format!("route to {name:?} uses unknown edge {e}"))
                        })?;
                        if edge.from != at {
                            return bad(format!("route to {name:?} is not a path"));
                        }
                        at = edge.to;
                    }
                    if at != v || self.route[v].is_empty() {
                        return bad(format!("route to {name:?} does not end at it"));
                    }
                }
            }
        }
        for v in 0..n {
            let (mut at, mut steps) = (v, 0);
            while let Some(p) = self.parent[at] {
                at = p;
                steps += 1;
                if steps > n {
                    return bad(format!("parents of {:?} form a cycle", platform.nodes()[v]));
                }
            }
        }
        Ok(())
    }

    /// The children of every node, in node order.
    pub fn children(&self) -> Vec<Vec<NodeId>> {
        let mut children = vec![Vec::new(); self.parent.len()];
        for (v, p) in self.parent.iter().enumerate() {
            if let Some(p) = p {
                children[*p].push(v);
            }
        }
        children
    }
}

/// The steady-state period of `tree` (time between two slices leaving the source); the
/// throughput is its inverse. Every edge of every route is counted once per route crossing it.
pub fn period(platform: &Platform, tree: &Tree, model: Model) -> f64 {
    let n = platform.size();
    let mut out_sum = vec![0.0; n];
    let mut out_max: Vec<f64> = vec![0.0; n];
    let mut in_sum = vec![0.0; n];
    for route in &tree.route {
        for &e in route {
            let edge = &platform.edges()[e];
            out_sum[edge.from] += match model {
                Model::OnePort => edge.time,
                Model::MultiPort => edge.send_time(),
            };
            out_max[edge.from] = out_max[edge.from].max(edge.time);
            in_sum[edge.to] += edge.time;
        }
    }
    (0..n)
        .map(|u| match model {
            Model::OnePort => out_sum[u].max(in_sum[u]),
            Model::MultiPort => out_sum[u].max(out_max[u]),
        })
        .fold(0.0, f64::max)
}

/// Slices per time unit: `1 / period`.
pub fn throughput(platform: &Platform, tree: &Tree, model: Model) -> f64 {
    1.0 / period(platform, tree, model)
}
