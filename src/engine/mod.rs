//! The pipelined broadcast state machine (pure, virtual clock) — to be written.

/// What went wrong during a broadcast.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Protocol(String),
}
