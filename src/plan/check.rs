//! The plan checker — to be written.
use super::Plan;
use crate::topology::Topology;

/// What the checker found.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub spanning: bool,
    pub rooted: bool,
    pub acyclic: bool,
    pub contention_free: bool,
}

pub fn check(_plan: &Plan, _topology: &Topology) -> Report {
    Report {
        spanning: true,
        rooted: true,
        acyclic: true,
        contention_free: true,
    }
}
