//! Algorithm 2 (seed 003 §4.1.2) — to be written.
use super::Lane;
use crate::topology::{MachineId, Topology};

/// Contention-free binary tree rooted at `root`.
pub fn build(topology: &Topology, root: MachineId) -> Lane {
    super::linear::build(topology, root)
}
