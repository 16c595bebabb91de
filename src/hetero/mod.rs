//! Heterogeneous platforms: seed 004 (`../shared/seeds/004_8086033551961233.txt`, Beaumont,
//! Legrand, Marchal, Robert, "Broadcast trees for heterogeneous platforms").
//!
//! A [`Platform`] is a directed graph whose edges take `T_uv` to carry one slice. A single
//! spanning tree pipelines slices at the rate `1 / period` ([`throughput`]); the heuristics of
//! §3 and §4 build such trees ([`HEURISTICS`], [`build`]), and the linear program SSB(G) of
//! §4.1 ([`lp::ssb`]) gives the optimal throughput TP with several trees, an upper bound for
//! all of them under the one-port model. [`plan_on_topology`] runs a heuristic on a switched
//! cluster ([`crate::topology::Topology`]); [`build_plan`] and [`plan_for`] plan every tree kind,
//! `hetero:NAME` included (plan itself never imports this layer).

#![deny(unsafe_code)]

pub mod any_tree;
pub mod binomial;
pub mod cluster;
pub mod gen;
pub mod grow;
pub mod lp;
pub mod maxflow;
pub mod platform;
pub mod prune;
pub mod throughput;

pub use any_tree::{build_plan, plan_for, PLAN_SLICE};
pub use cluster::{plan_on_topology, platform_of_topology, DEFAULT_GBPS};
pub use lp::{ssb, ssb_direct, Ssb};
pub use platform::{parse_platform, Edge, EdgeId, NodeId, Platform};
pub use throughput::{period, throughput, Model, Tree};

/// What went wrong with a platform, a heuristic or the solver.
#[derive(Debug, thiserror::Error)]
pub enum HeteroError {
    /// The platform file or graph is invalid; the message names the node or edge.
    #[error("{0}")]
    Platform(String),
    #[error("unknown heuristic {0:?}: use one of {names}", names = HEURISTICS.join(", "))]
    UnknownHeuristic(String),
    #[error("unknown model {0:?}: use one-port or multi-port")]
    UnknownModel(String),
    /// A logical transfer has no path in the platform (a directed platform may reach every
    /// node from the source without every node reaching every other).
    #[error("{heuristic}: node {from:?} has no path to {to:?} in the platform: add edges or use another heuristic")]
    NoRoute {
        heuristic: &'static str,
        from: String,
        to: String,
    },
    /// A tree that is not a spanning tree of the platform rooted at the source.
    #[error("not a broadcast tree of this platform: {0}")]
    BadTree(String),
    /// The LP solver failed or did not prove optimality.
    #[error("LP solver: {0}")]
    Solver(String),
    /// Bad generator parameters.
    #[error("platform generator: {0}")]
    Generator(String),
    /// Bad input when planning on a topology.
    #[error("hetero planning on a topology: {0}")]
    Topology(String),
}

/// Every heuristic name, in the order of the paper's sections (`plan::HETERO_HEURISTICS`
/// repeats it for parsing `hetero:NAME`; a test keeps them equal).
pub const HEURISTICS: [&str; 7] = [
    "prune-simple",
    "prune-degree",
    "grow",
    "binomial",
    "multiport-grow",
    "lp-prune",
    "lp-grow",
];

/// Builds the tree of heuristic `name`. The LP-based ones use `lp` when given (so that one LP
/// solve serves several heuristics) and solve SSB(G) otherwise.
pub fn build(platform: &Platform, name: &str, lp: Option<&Ssb>) -> Result<Tree, HeteroError> {
    let tree = match name {
        "prune-simple" => prune::prune_simple(platform),
        "prune-degree" => prune::prune_degree(platform),
        "grow" => grow::grow(platform),
        "binomial" => binomial::binomial(platform)?,
        "multiport-grow" => grow::multiport_grow(platform),
        "lp-prune" | "lp-grow" => {
            let solved;
            let lp = match lp {
                Some(lp) => lp,
                None => {
                    solved = ssb(platform)?;
                    &solved
                }
            };
            if lp.n.len() != platform.edges().len() {
                return Err(HeteroError::Solver(format!(
                    "the LP solution given has {} edge rates for a platform of {} edges: solve SSB(G) on this platform",
                    lp.n.len(),
                    platform.edges().len()
                )));
            }
            if name == "lp-prune" {
                prune::lp_prune(platform, &lp.n)
            } else {
                grow::lp_grow(platform, &lp.n)
            }
        }
        _ => return Err(HeteroError::UnknownHeuristic(name.to_string())),
    };
    tree.validate(platform)?;
    Ok(tree)
}

#[cfg(test)]
mod tests {
    #[test]
    fn plan_parses_exactly_these_heuristics() {
        assert_eq!(super::HEURISTICS, crate::plan::HETERO_HEURISTICS);
    }
}
