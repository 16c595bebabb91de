//! The emulated multi-switch lab (network namespaces, bridges, tbf, lldpd) — to be written.

/// What went wrong building or using a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{0}")]
    Command(String),
}
