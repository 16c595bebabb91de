//! The pipelined broadcast engine: pure, deterministic, on a virtual clock.
//!
//! [`Bcast`] is one rank's part in one broadcast of any [`Plan`](crate::plan::Plan) (one or
//! more lanes); [`Endpoint`] is every broadcast in flight at one rank, of every communicator
//! (routing by broadcast [`number`]: communicator and sequence number, holding what arrives
//! early); [`Layout`] cuts the message into lanes and segments;
//! [`Message`] is what ranks say to each other; [`Expected`] is a segment a rank may receive
//! next (for links that pre-post receives); [`reliable`] is the one retransmission scheme,
//! per peer, switched on for lossy links (each such link holds a [`reliable::Peers`]). Links
//! frame messages and move bytes; the communicator's progress thread drives the endpoint with
//! a real clock. See `bcast.rs` for the protocol (FPFS forwarding, credits).

#![deny(unsafe_code)]

mod bcast;
pub mod drive;
pub mod driver;
mod endpoint;
mod expected;
mod layout;
mod message;
pub mod multicast;
pub mod number;
pub mod reliable;

pub use bcast::{Bcast, Config, Setup};
pub use endpoint::{copy_into, Endpoint, Route};
pub use expected::Expected;
pub use layout::Layout;
pub use message::{DataHeader, Message, Placement, Transmit};

/// What went wrong during a broadcast.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum EngineError {
    #[error("broadcast {seq}: rank {peer} has {what} {theirs} but this rank has {ours}: every rank must call bcast with the same root and message size, in the same order")]
    Mismatch {
        seq: u64,
        what: &'static str,
        peer: usize,
        ours: u64,
        theirs: u64,
    },
    #[error("rank {from} sent data for lane {lane}, but this rank's parent there is {parent:?}: do all ranks use the same tree, root and topology?")]
    UnexpectedSender {
        from: usize,
        lane: usize,
        parent: Option<usize>,
    },
    #[error("broadcast {seq} made no progress for {idle_ms} ms, waiting for ranks {waiting_for:?}: a peer died, hangs, or called a different collective (raise the timeout if peers are just slow)")]
    Timeout {
        seq: u64,
        waiting_for: Vec<usize>,
        idle_ms: u64,
    },
    #[error("bad plan for the engine: {0}")]
    BadPlan(String),
    #[error("protocol violation: {0}")]
    Protocol(String),
}
