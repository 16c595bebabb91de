//! Transports: TCP (io_uring), raw Ethernet (AF_PACKET), verbs (feature) — to be written.

/// What went wrong in a transport.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("{0}")]
    Io(String),
}

pub mod lldp_socket;
