//! Transports: how engine messages travel between processes. Today: TCP
//! ([`tcp::TcpTransport`]); raw Ethernet and verbs come next. `unsafe` code of the crate
//! lives here (and in `capi/`), each block with a `// SAFETY:` comment.
//!
//! A transport frames [`Message`](crate::engine::Message)s, sends data segments straight from
//! the user buffer, and asks the engine (`Bcast::place`) where an arriving segment goes before
//! reading its payload straight into the user buffer. A lossy transport (raw Ethernet) keeps
//! the same shape: the engine's cumulative credits are its acknowledgements.

pub mod frame;
pub mod loan;
pub mod tcp;
pub mod uring;

pub use loan::{lend, BufLoan};
pub use tcp::TcpTransport;

/// What went wrong in a transport.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("{what}: {error}")]
    Setup { what: String, error: String },
    #[error("ranks {waiting:?} did not connect within {ms} ms: are they running, and in the same job (same rendezvous)?")]
    ConnectTimeout { waiting: Vec<usize>, ms: u64 },
    #[error("rank {peer} closed its connection (it died or failed): see its own error")]
    Closed { peer: usize },
    #[error("I/O error{}: {error}", peer.map(|p| format!(" with rank {p}")).unwrap_or_default())]
    Io { peer: Option<usize>, error: String },
    #[error("rank {peer} sent a bad frame: {reason}")]
    BadFrame { peer: usize, reason: String },
    #[error("rank {peer} has no address: the bootstrap did not include it")]
    UnknownPeer { peer: usize },
}

pub mod ifaddrs;
pub mod lldp_socket;
pub mod raweth;
