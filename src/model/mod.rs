//! Cost models (seed 003 §4.2 LogP, seed 001 steps, seed 002 Table 1) and the calibration
//! profile — to be written.

/// What went wrong in the model layer.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{0}")]
    Profile(String),
}
