//! k-binomial trees (seed 001) — to be written.
use super::{Lane, PlanError};
use crate::topology::{MachineId, Topology};

/// Optimal k for `n` nodes and `m` packets (seed 001 Theorem 3).
pub fn optimal_k(_n: u64, _m: u64) -> u32 {
    2
}

/// k-binomial tree on the Algorithm 1 ordering.
pub fn build(_topology: &Topology, _root: MachineId, k: u32) -> Result<Lane, PlanError> {
    Err(PlanError::NotImplemented(format!("kbinomial:{k}")))
}
