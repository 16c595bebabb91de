//! Byte formats: Ethernet, LLDP TLVs, the pipecast frame header — to be written.

/// A malformed frame.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WireError {
    #[error("truncated: need {need} bytes, got {got}")]
    Truncated { need: usize, got: usize },
}
