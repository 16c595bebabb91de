//! Per-peer reliability over a lossy link: pure (no sockets, time passed in as u64 ns).
//!
//! This is pipecast's one retransmission scheme. It sits between the [`Endpoint`](super::Endpoint)
//! and a link that may lose, duplicate or reorder what it carries, and is switched on for such
//! links only: raw Ethernet uses it for every peer (`transport::raweth`), the simulated network
//! (`crate::sim`) for every pair of ranks whose path is lossy; TCP, reliable already, does
//! not. The engine above it sees every message exactly once, so its cumulative credits are
//! flow control only and never trigger a resend.
//!
//! Each item (a raw Ethernet frame, a simulated engine message) to a peer gets a per-peer
//! sequence number (from 1). The receiver returns a
//! cumulative acknowledgement (every number below `ack` arrived), a 64-bit selective
//! acknowledgement bitmap (bit i: `ack + 1 + i` arrived) and a credit (how many numbers from
//! `ack` on it will accept). The sender keeps every unacknowledged frame, limits what is in
//! flight to the credit, retransmits on a timeout (RTO from smoothed RTT, RFC 6298, doubled on
//! every expiry up to a cap, Karn's rule for samples) or as soon as three later frames are
//! selectively acknowledged, and paces itself with a token bucket. A timeout first resends
//! only the oldest frame as a probe (see [`Sender::handle_timeout`]). A retransmitted frame
//! that arrives as new is echoed back ([`Receiver::repaired`]): its first copy was lost, and
//! so is every frame sent before the retransmission that is still unacknowledged, since the
//! link delivers in order ([`Sender::on_ack`]). The receiver suppresses
//! duplicates, so every frame is delivered exactly once; order is not restored, because
//! payloads go straight to their offset in the user buffer and engine credits are cumulative.
//!
//! One concept per file: [`Pacer`] (the token bucket shared by a link's peers), [`Sender`]
//! and [`Receiver`] (the two halves toward one peer), [`Peers`]: the per-peer
//! reliability of one lossy link as a whole — every peer's halves, the queue of new items
//! per peer, the round-robin choice of what to send next within credit and pacing, the
//! acknowledgements to piggyback or send bare, the next timer, heartbeats and liveness —
//! and [`Lossy`], the lossy-path adapter around a `Peers`: engine messages cut into frames,
//! the send round, heartbeats, a segment's [`Assembly`] from its frames.
//!
//! Why the link holds a [`Lossy`] rather than the [`Endpoint`](super::Endpoint): reliability
//! runs per *frame*, and only the link knows its frame size (its largest frame,
//! `transport::Capabilities::max_frame`). The endpoint stays frame-agnostic and sees whole
//! segments exactly once; the link (raw Ethernet, and the simulator's network) owns a
//! `Lossy`, whose logic is all here, pure, on a virtual clock, and keeps only its header
//! format, sockets, reassembly targets and addresses.

mod lossy;
mod pacer;
mod peers;
mod receiver;
mod sender;

pub use lossy::{Assembly, Frame, Lossy, Piece, Sent};
pub use pacer::Pacer;
pub use peers::{Outgoing, PeerGone, Peers, Totals};
pub use receiver::{Accept, Receiver};
pub use sender::Sender;

/// Reliability tuning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// RTO before the first RTT sample (ns).
    pub rto_initial: u64,
    pub rto_min: u64,
    pub rto_max: u64,
    /// Frames a receiver accepts beyond its cumulative ack (its advertised credit).
    pub window: u32,
    /// Pacing rate in bytes per second (`None`: no pacing).
    pub rate: Option<u64>,
    /// Token bucket depth in bytes.
    pub burst: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            // Above a 100 mbit link's queueing delay (default SO_SNDBUF + a tbf queue: ~40 ms)
            // until RTT samples arrive.
            rto_initial: 50_000_000,
            rto_min: 20_000_000,
            rto_max: 500_000_000,
            window: 4096,
            rate: None,
            burst: 64 << 10,
        }
    }
}

/// The copy number a frame carries (the `flags` field has 8 bits for it): 1 for the first
/// send, wrapping after 255.
pub fn copy_number(sends: u32) -> u8 {
    (sends % 256) as u8
}
