//! Multi-lane trees (seed 002) — to be written.
use super::{Lane, PlanError};
use crate::topology::{MachineId, Topology};

/// Two lanes, each carrying half of the message.
pub fn build(_topology: &Topology, _root: MachineId) -> Result<Vec<Lane>, PlanError> {
    Err(PlanError::NotImplemented("multilane".into()))
}
