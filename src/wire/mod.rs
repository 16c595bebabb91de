//! Byte formats: Ethernet, LLDP TLVs, the pipecast frame header — to be written.

/// A malformed frame.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WireError {
    #[error("truncated: need {need} bytes, got {got}")]
    Truncated { need: usize, got: usize },
    #[error("unknown frame version {got} (this build speaks {want}): run the same pipecast version on every rank")]
    BadVersion { got: u8, want: u8 },
    #[error("bad length in {what}: {detail}")]
    BadLength { what: &'static str, detail: String },
}

pub mod frame;
