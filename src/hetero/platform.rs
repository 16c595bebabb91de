//! The platform graph of seed 004 §2 (`../shared/seeds/004_8086033551961233.txt`): a directed
//! graph (cycles and multiple paths allowed) whose edge `u→v` carries `T_uv`, the time to send
//! one slice over it, and optionally `send_uv`, the time the sender is busy (multi-port model,
//! §2.2 and §3.2).
//!
//! File format (JSON):
//! `{"nodes": ["p0", "p1"], "source": "p0", "edges": [{"from": "p0", "to": "p1", "time": 1.25, "send": 1.0}]}`

use super::HeteroError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Index of a node in [`Platform::nodes`].
pub type NodeId = usize;
/// Index of an edge in [`Platform::edges`].
pub type EdgeId = usize;

/// Edge and send times a platform accepts. Times are relative (throughputs are slices per
/// time unit), so any platform scales into this range; outside it, throughputs such as
/// `1 / 5e-324` overflow to infinity and sums of them to NaN.
pub const TIME_RANGE: std::ops::RangeInclusive<f64> = 1e-9..=1e9;

/// One directed edge `from → to`.
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub from: NodeId,
    pub to: NodeId,
    /// `T_uv`: time the edge is busy with one slice (any positive unit; throughputs are in
    /// slices per that unit).
    pub time: f64,
    /// `send_uv`: time the sender is busy with one slice under the multi-port model. `None`
    /// means the sender is busy for the whole transfer (`send = time`).
    pub send: Option<f64>,
}

impl Edge {
    /// The sender-busy time under the multi-port model (`time` when none was given).
    pub fn send_time(&self) -> f64 {
        self.send.unwrap_or(self.time)
    }
}

/// A validated platform: names unique, times positive, every node reachable from the source.
#[derive(Debug, Clone, PartialEq)]
pub struct Platform {
    nodes: Vec<String>,
    source: NodeId,
    edges: Vec<Edge>,
    /// Outgoing / incoming edge ids of each node, in edge order.
    out: Vec<Vec<EdgeId>>,
    inc: Vec<Vec<EdgeId>>,
}

#[derive(Serialize, Deserialize)]
struct FileEdge {
    from: String,
    to: String,
    time: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    send: Option<f64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePlatform {
    nodes: Vec<String>,
    source: String,
    edges: Vec<FileEdge>,
}

impl Platform {
    /// Builds and validates a platform. Errors name the offending node or edge.
    pub fn new(
        nodes: Vec<String>,
        source: NodeId,
        edges: Vec<Edge>,
    ) -> Result<Platform, HeteroError> {
        let bad = |msg: String| Err(HeteroError::Platform(msg));
        if nodes.len() < 2 {
            return bad(format!(
                "a platform needs the source and at least one destination, got {} node(s): add nodes",
                nodes.len()
            ));
        }
        let mut seen = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if let Some(fault) = crate::topology::name_fault(n) {
                return bad(format!("node {n:?} {fault}"));
            }
            if let Some(j) = seen.insert(n.as_str(), i) {
                return bad(format!(
                    "node {n:?} is listed twice (positions {j} and {i}): names must be unique"
                ));
            }
        }
        if source >= nodes.len() {
            return bad(format!(
                "source index {source} is not one of the {} nodes",
                nodes.len()
            ));
        }
        let mut out = vec![Vec::new(); nodes.len()];
        let mut inc = vec![Vec::new(); nodes.len()];
        for (i, e) in edges.iter().enumerate() {
            if e.from >= nodes.len() || e.to >= nodes.len() {
                return bad(format!(
                    "edge {i} names a node index outside 0..{}",
                    nodes.len()
                ));
            }
            let name = format!("{}->{}", nodes[e.from], nodes[e.to]);
            if e.from == e.to {
                return bad(format!("edge {name} is a self-loop: remove it"));
            }
            if !TIME_RANGE.contains(&e.time) {
                return bad(format!(
                    "edge {name} has time {:?}: the time to send one slice must be a number from {:e} to {:e} (times are relative: scale them all by one factor)",
                    e.time,
                    TIME_RANGE.start(),
                    TIME_RANGE.end()
                ));
            }
            if let Some(s) = e.send {
                if !(TIME_RANGE.contains(&s) && s <= e.time) {
                    return bad(format!(
                        "edge {name} has send {s:?}: the sender-busy time must be at least {:e} and at most the edge time {:?}",
                        TIME_RANGE.start(),
                        e.time
                    ));
                }
            }
            out[e.from].push(i);
            inc[e.to].push(i);
        }
        let platform = Platform {
            nodes,
            source,
            edges,
            out,
            inc,
        };
        let reach = platform.reachable(&|_| true);
        if let Some(v) = reach.iter().position(|r| !r) {
            return bad(format!(
                "node {:?} cannot be reached from the source {:?}: add an edge towards it",
                platform.nodes[v], platform.nodes[source]
            ));
        }
        Ok(platform)
    }

    /// Node names, in file order.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }
    /// Number of nodes.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }
    /// The source of the broadcast.
    pub fn source(&self) -> NodeId {
        self.source
    }
    /// All edges.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }
    /// Edges leaving `u`.
    pub fn out_edges(&self, u: NodeId) -> &[EdgeId] {
        &self.out[u]
    }
    /// Edges entering `v`.
    pub fn in_edges(&self, v: NodeId) -> &[EdgeId] {
        &self.inc[v]
    }
    /// The node called `name`.
    pub fn node_named(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().position(|n| n == name)
    }
    /// `edges / (n (n-1))`: the probability that a given ordered pair is an edge.
    pub fn density(&self) -> f64 {
        let n = self.size() as f64;
        self.edges.len() as f64 / (n * (n - 1.0))
    }
    /// A readable name for an edge, `from->to`.
    pub fn edge_name(&self, e: EdgeId) -> String {
        let e = &self.edges[e];
        format!("{}->{}", self.nodes[e.from], self.nodes[e.to])
    }

    /// Which nodes the source reaches using only the edges `keep` accepts.
    pub fn reachable(&self, keep: &dyn Fn(EdgeId) -> bool) -> Vec<bool> {
        let mut seen = vec![false; self.size()];
        seen[self.source] = true;
        let mut stack = vec![self.source];
        while let Some(u) = stack.pop() {
            for &e in &self.out[u] {
                let v = self.edges[e].to;
                if !seen[v] && keep(e) {
                    seen[v] = true;
                    stack.push(v);
                }
            }
        }
        seen
    }

    /// The platform as a JSON value in the file format.
    pub fn to_json(&self) -> serde_json::Value {
        let file = FilePlatform {
            nodes: self.nodes.clone(),
            source: self.nodes[self.source].clone(),
            edges: self
                .edges
                .iter()
                .map(|e| FileEdge {
                    from: self.nodes[e.from].clone(),
                    to: self.nodes[e.to].clone(),
                    time: e.time,
                    send: e.send,
                })
                .collect(),
        };
        serde_json::to_value(file).expect("a platform serializes")
    }
}

/// Parses a platform file's text.
pub fn parse_platform(text: &str) -> Result<Platform, HeteroError> {
    let file: FilePlatform = serde_json::from_str(text).map_err(|e| {
        HeteroError::Platform(format!(
            "not a platform file ({e}): expected {{\"nodes\": [...], \"source\": NAME, \"edges\": [{{\"from\", \"to\", \"time\", \"send\"?}}]}}"
        ))
    })?;
    let index: BTreeMap<&str, NodeId> = file
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let lookup = |name: &str, what: &str| {
        index.get(name).copied().ok_or_else(|| {
            HeteroError::Platform(format!(
                "{what} names unknown node {name:?}: add it to \"nodes\""
            ))
        })
    };
    let source = lookup(&file.source, "\"source\"")?;
    let mut edges = Vec::with_capacity(file.edges.len());
    for e in &file.edges {
        let what = format!("edge {}->{}", e.from, e.to);
        edges.push(Edge {
            from: lookup(&e.from, &what)?,
            to: lookup(&e.to, &what)?,
            time: e.time,
            send: e.send,
        });
    }
    Platform::new(file.nodes, source, edges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_round_trips() {
        let text = r#"{"nodes": ["a", "b", "c"], "source": "a", "edges": [
            {"from": "a", "to": "b", "time": 1.5, "send": 1.0}, {"from": "b", "to": "c", "time": 2}]}"#;
        let p = parse_platform(text).unwrap();
        assert_eq!(p.size(), 3);
        assert_eq!(p.edges()[0].send, Some(1.0));
        assert_eq!(p.edges()[1].send_time(), 2.0);
        let again = parse_platform(&p.to_json().to_string()).unwrap();
        assert_eq!(again, p);
    }

    #[test]
    fn errors_name_the_problem() {
        let err = |t: &str| parse_platform(t).unwrap_err().to_string();
        let e = err(
            r#"{"nodes": ["a", "b"], "source": "a", "edges": [{"from": "a", "to": "x", "time": 1}]}"#,
        );
        assert!(e.contains("unknown node \"x\""), "{e}");
        let e = err(
            r#"{"nodes": ["a", "b"], "source": "a", "edges": [{"from": "a", "to": "b", "time": 0}]}"#,
        );
        assert!(e.contains("a->b") && e.contains("from 1e-9 to 1e9"), "{e}");
        let e = err(
            r#"{"nodes": ["a", "b"], "source": "a", "edges": [{"from": "a", "to": "b", "time": -2}]}"#,
        );
        assert!(e.contains("from 1e-9"), "{e}");
        // Issue 14: a denormal time made the throughput infinite (and NaN downstream).
        for tiny in ["5e-324", "1e-10", "1e308"] {
            let e = err(&format!(
                r#"{{"nodes": ["a", "b"], "source": "a", "edges": [{{"from": "a", "to": "b", "time": {tiny}}}]}}"#
            ));
            assert!(e.contains("scale them"), "{tiny}: {e}");
        }
        let e = err(
            r#"{"nodes": ["a", "b"], "source": "a", "edges": [{"from": "a", "to": "b", "time": 1, "send": 5e-324}]}"#,
        );
        assert!(e.contains("send 5e-324"), "{e}");
        let e = err(
            r#"{"nodes": ["a", "b", "c"], "source": "a", "edges": [{"from": "a", "to": "b", "time": 1}, {"from": "c", "to": "b", "time": 1}]}"#,
        );
        assert!(e.contains("\"c\" cannot be reached"), "{e}");
        let e = err(r#"{"nodes": ["a", "b"], "source": "z", "edges": []}"#);
        assert!(e.contains("unknown node \"z\""), "{e}");
        let e = err(r#"{"nodes": ["a", "a"], "source": "a", "edges": []}"#);
        assert!(e.contains("twice"), "{e}");
        let e = err("[1, 2]");
        assert!(e.contains("not a platform file"), "{e}");
    }
}
