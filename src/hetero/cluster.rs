//! Seed 004's heuristics on a switched cluster: a [`Topology`] becomes a complete platform over
//! its machines, where `T_uv` is the time one slice takes at the bottleneck bandwidth of the
//! path `topology.path(u, v)`.
//!
//! Seed 004's model knows only end-to-end edges: two transfers that share a switch link are
//! not slowed down by each other in it (only the one-port limits at the machines count). On a
//! switch tree, the throughput reported here is therefore an upper bound that ignores
//! contention on shared switch links; `pipecast plan`'s contention check tells whether the
//! tree actually shares links.

use super::platform::{Edge, Platform};
use super::{build, HeteroError, Model};
use crate::plan::Lane;
use crate::topology::Topology;

/// Bandwidth assumed for a link whose topology file gives none: 1 Gbit/s.
pub const DEFAULT_GBPS: f64 = 1.0;

/// The platform over the machines of `topology` (named after them), source `root`, with an edge
/// each way between every two machines: `time` = seconds for `slice_bytes` at the smallest
/// `gbps` along the path (links without one count as [`DEFAULT_GBPS`]).
pub fn platform_of_topology(
    topology: &Topology,
    root: usize,
    slice_bytes: u64,
) -> Result<Platform, HeteroError> {
    let p = topology.size();
    if root >= p {
        return Err(HeteroError::Topology(format!(
            "root {root} is not a rank of this {p}-rank topology: give a root below {p}"
        )));
    }
    if slice_bytes == 0 {
        return Err(HeteroError::Topology(
            "slice size 0: give a positive number of bytes".into(),
        ));
    }
    let bits = slice_bytes as f64 * 8.0;
    let mut edges = Vec::with_capacity(p * p.saturating_sub(1));
    for u in 0..p {
        for v in 0..p {
            if u == v {
                continue;
            }
            let mut gbps = f64::INFINITY;
            for e in topology.path(u, v) {
                let g = topology.edge_gbps(e).unwrap_or(DEFAULT_GBPS);
                if !(g.is_finite() && g > 0.0) {
                    return Err(HeteroError::Topology(format!(
                        "link {} has bandwidth {g} Gbit/s: give a positive number",
                        topology.edge_name(e)
                    )));
                }
                gbps = gbps.min(g);
            }
            edges.push(Edge {
                from: u,
                to: v,
                time: bits / (gbps * 1e9),
                send: None,
            });
        }
    }
    let names = topology.machines().iter().map(|m| m.name.clone()).collect();
    Platform::new(names, root, edges)
}

/// Builds the tree of seed 004 heuristic `heuristic` (one of [`super::HEURISTICS`]) for a
/// broadcast from `root` with slices of `slice_bytes`, and returns it as a plan lane (children
/// in increasing edge time, then rank) with its one-port throughput in slices per second
/// (contention on shared switch links ignored, see the module doc). A single-machine topology
/// gives the trivial lane and an infinite throughput.
pub fn plan_on_topology(
    topology: &Topology,
    root: usize,
    heuristic: &str,
    slice_bytes: u64,
) -> Result<(Lane, f64), HeteroError> {
    if !super::HEURISTICS.contains(&heuristic) {
        return Err(HeteroError::UnknownHeuristic(heuristic.to_string()));
    }
    if topology.size() == 1 && root == 0 {
        return Ok((Lane::from_children(vec![Vec::new()]), f64::INFINITY));
    }
    let platform = platform_of_topology(topology, root, slice_bytes)?;
    let tree = build(&platform, heuristic, None)?;
    let time = |u: usize, v: usize| {
        platform.edges()[u * (platform.size() - 1) + v - usize::from(v > u)].time
    };
    let mut children = tree.children();
    for (u, kids) in children.iter_mut().enumerate() {
        kids.sort_by(|&a, &b| time(u, a).total_cmp(&time(u, b)).then(a.cmp(&b)));
    }
    let throughput = super::throughput(&platform, &tree, Model::OnePort);
    Ok((Lane::from_children(children), throughput))
}
