//! Heterogeneous platforms (seed 004) — to be written.

/// What went wrong with a platform or a heuristic.
#[derive(Debug, thiserror::Error)]
pub enum HeteroError {
    #[error("{0}")]
    Platform(String),
}
