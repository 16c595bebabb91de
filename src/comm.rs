//! The communicator: bootstrap, plan cache, and the driver joining engine, transport and clock —
//! to be written.

/// What went wrong in a communicator.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("{0}")]
    Bootstrap(String),
}
