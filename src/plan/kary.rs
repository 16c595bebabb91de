//! k-ary extension of Algorithm 2 (seed 003, after Theorem 2) — to be written.
use super::Lane;
use crate::topology::{MachineId, Topology};

/// Contention-free k-ary tree rooted at `root`.
pub fn build(topology: &Topology, root: MachineId, _k: usize) -> Lane {
    super::linear::build(topology, root)
}
