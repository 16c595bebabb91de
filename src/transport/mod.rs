//! Transports: how engine messages travel between processes. Today: TCP
//! ([`tcp::TcpTransport`]) and raw Ethernet ([`raweth::RawEthTransport`]), both behind
//! [`Transport`] and run by [`drive`]; verbs come next. `unsafe` code of the crate lives here
//! (and in `capi/`), each block with a `// SAFETY:` comment.
//!
//! A transport frames [`Message`](crate::engine::Message)s, sends data segments straight from
//! the user buffer, and asks the engine (`Bcast::place`) where an arriving segment goes before
//! reading its payload straight into the user buffer. A lossy transport (raw Ethernet) keeps
//! the same shape: the engine's cumulative credits are its acknowledgements.

pub mod frame;
pub mod loan;
pub mod tcp;
pub mod uring;

pub use loan::{lend, BufLoan, RawBuf};
pub use tcp::TcpTransport;

use crate::engine::Bcast;
use std::collections::BTreeMap;
use std::time::Duration;

/// A transport the communicator's progress thread drives ([`drive`]): TCP or raw Ethernet.
pub trait Transport: Send {
    /// `tcp` or `raweth:IFACE`: what runs.
    fn describe(&self) -> String;

    /// Payload bytes of one full frame on raw Ethernet (segments that are whole multiples of
    /// it travel in full frames); `None` on TCP, a byte stream.
    fn frame_payload(&self) -> Option<u64> {
        None
    }

    fn connect(&mut self, peers: &[usize], timeout: Duration) -> Result<(), TransportError>;

    fn resume(&mut self, bcast: &mut Bcast, now: u64) -> crate::Result<()>;

    fn progress(
        &mut self,
        buf: &mut [u8],
        bcast: &mut Bcast,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> crate::Result<()>;

    fn flushed(&self) -> bool;

    /// Whether a rank whose engine is done should stop driving it and [`Transport::linger`]
    /// instead (raw Ethernet: the engine's idle timer is off, so waiting in `progress` for a
    /// lost final ack would spin until the peer's next frame).
    fn lingers(&self) -> bool {
        false
    }

    /// Keeps acknowledging and retransmitting for at most `limit` until flushed.
    fn linger(
        &mut self,
        _buf: &mut [u8],
        _clock: &dyn Fn() -> u64,
        _limit: Duration,
    ) -> crate::Result<bool> {
        Ok(self.flushed())
    }

    /// Serves peers between broadcasts for up to `wait` (a transport that
    /// [`lingers`](Transport::lingers): acknowledgements, heartbeats, frames of the next
    /// broadcast). Fails when a peer is gone.
    fn idle(&mut self, _clock: &dyn Fn() -> u64, wait: Duration) -> crate::Result<()> {
        std::thread::sleep(wait);
        Ok(())
    }

    /// The transport's monotonic counters by name (raw Ethernet: retransmits, drops, …).
    fn counters(&self) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }

    /// The transport's state for a failure report.
    fn describe_state(&self, now: u64) -> String;

    fn shutdown(&mut self);
}

/// Runs `bcast` (connected and resumed) to completion over `transport`; a transport that
/// [`lingers`](Transport::lingers) then answers peers for up to `linger` until its last
/// frames are acknowledged.
pub fn drive(
    transport: &mut dyn Transport,
    buf: &mut [u8],
    bcast: &mut Bcast,
    clock: &dyn Fn() -> u64,
    linger: Duration,
) -> crate::Result<()> {
    loop {
        if bcast.is_done() && transport.flushed() {
            return Ok(());
        }
        if bcast.is_done() && transport.lingers() {
            // Done but not all acknowledged: answer peers for a while, then return (the
            // engine's idle timer is off, so `progress` would wait for frames that may never
            // come). Unacknowledged frames left over become no-ops in the next broadcast.
            transport.linger(buf, clock, linger)?;
            return Ok(());
        }
        let now = clock();
        bcast.handle_timeout(now)?;
        let wait = bcast
            .poll_timeout()
            .map_or(1_000_000, |t| t.saturating_sub(now))
            .min(100_000_000);
        transport.progress(buf, bcast, clock, Duration::from_nanos(wait))?;
    }
}

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
    #[error("rank {peer} is gone: it answered nothing for {ms} ms (its process died, or its host or link is down; raise PIPECAST_TIMEOUT_MS if it was only stopped)")]
    PeerGone { peer: usize, ms: u64 },
}

pub mod ifaddrs;
pub mod lldp_socket;
pub mod raweth;
