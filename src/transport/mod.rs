//! Links: how engine messages travel between processes. TCP ([`tcp::TcpTransport`]), shared
//! memory between the ranks of one host ([`shm::ShmLink`]), raw Ethernet
//! ([`raweth::RawEthTransport`]) and RDMA verbs ([`verbs::VerbsLink`]), all behind the trait
//! [`Link`], combined per peer by [`router::Router`] and driven by the communicator's
//! progress thread. `unsafe` code of the crate lives here (and in `capi/`), each block with
//! a `// SAFETY:` comment.
//!
//! A link moves bytes and gets no engine: each round it is handed a [`Driver`], everything
//! it may ask of the layer above. The trait and the engine's pure implementation of it
//! ([`Engine`](crate::engine::drive::Engine), which the communicator's progress thread
//! drives) live in the pure core, below the links, so the links and their tests depend on
//! them from below; [`drive`](drive::drive) runs one broadcast over a link. A link frames
//! the [`Message`](crate::engine::Message)s the driver
//! hands out ([`Driver::next`]; the header is [`wire::message`](crate::wire::message)),
//! sends data segments straight from their broadcast's buffer, and asks the driver where an
//! arriving segment goes ([`Driver::header`], the one landing decision) before reading its
//! payload straight into that buffer ([`slot`]) or holding it for a broadcast not posted
//! yet ([`Driver::held`] once it is whole): `arrival::Dest` is that receive path, shared by
//! TCP, shared memory's ring and raw Ethernet's reassembly; [`Driver::may_wait`] is the one rule for how
//! long a round may sleep, [`check_closed`] the one for a closed peer. A lossy link (raw
//! Ethernet) holds the engine's pure lossy-path adapter
//! ([`Lossy`](crate::engine::reliable::Lossy)), because reliability runs per frame and only
//! the link cuts segments into frames, and moves its frames through a datagram
//! [`Port`](raweth::port::Port) (a socket, or an in-memory switch). A link that must prepare
//! memory (RDMA verbs) says so in its [`Capabilities`]; the progress thread then calls
//! [`Link::register`]/[`Link::deregister`] around each broadcast, and the link may pre-post
//! what [`Driver::expected`] lists. One conformance suite (tests/links.rs) runs the same
//! cases against every link; docs/engine.md, "Links", says what it covers and how far the
//! links got.

mod arrival;
pub mod clock;
pub mod drive;
pub mod gone;
pub use crate::engine::driver;
pub mod limits;
pub mod loan;
pub mod poll;
pub mod recording;
pub mod router;
pub mod shm;
pub mod tcp;
pub mod uring;
pub mod verbs;
pub mod wake;

pub use driver::Driver;
pub use loan::{lend, BufLoan, Buffer, Buffers, RawBuf};
pub use tcp::TcpTransport;
pub use wake::Wake;

use std::collections::BTreeMap;
use std::time::Duration;

/// What a link can do, for the driver above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Delivers every message exactly once (TCP, shared memory). A lossy link (raw Ethernet)
    /// needs per-peer reliability (`engine::reliable`).
    pub reliable: bool,
    /// Payload bytes of one full frame (raw Ethernet: segments that are whole multiples of it
    /// travel in full frames); `None` for a byte stream.
    pub max_frame: Option<u64>,
    /// Buffers must be registered with the link before data moves (RDMA verbs):
    /// the driver then calls [`Link::register`] and [`Link::deregister`]; other
    /// links pay nothing.
    pub needs_registration: bool,
    /// The reader takes the bytes from the writer's memory itself (shared memory's
    /// cross-memory attach; RDMA reads): the writer's buffer must stay put until the reader
    /// acknowledged it, which the engine's credits already guarantee.
    pub one_sided: bool,
    /// NICs the link sends lanes through: a lane on rail i leaves and enters through NIC i
    /// (seed 002 §2.1). 1: every lane through NIC 0, whatever the topology says; the
    /// communicator then plans on rail 0 alone (`Topology::first_rails`).
    pub rails: usize,
}

impl Default for Capabilities {
    fn default() -> Capabilities {
        Capabilities {
            reliable: true,
            max_frame: None,
            needs_registration: false,
            one_sided: false,
            rails: 1,
        }
    }
}

/// A link the communicator's progress thread drives: it moves the driver's messages
/// between ranks, sending payloads straight from their broadcasts'
/// buffers and writing arriving segments straight into them. It knows nothing of trees:
/// routing by broadcast, holding early messages and completion live above the [`Driver`].
pub trait Link: Send {
    /// What runs (`tcp`, `shm:cma+ring`, `raweth:IFACE`, …), for logs and failure reports.
    fn describe(&self) -> String;

    /// What the link can do (NCCL's net plugin properties and smoltcp's device capabilities
    /// are the models). Default: a reliable byte stream (TCP).
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    fn connect(&mut self, peers: &[usize], timeout: Duration) -> Result<(), TransportError>;

    /// One round: sends what the driver hands out, waits up to `wait` for arrivals (less if
    /// [`Driver::may_wait`] says so) and hands them to the driver. Fails when a peer that a
    /// broadcast in flight waits for is gone.
    fn progress(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> crate::Result<()>;

    /// Makes broadcast `seq`'s buffer known to the link before any of its data moves (RDMA
    /// verbs register memory; NCCL's net plugin `regMr` is the model). The driver calls it
    /// only on links whose [`Capabilities::needs_registration`] is true, when a broadcast's
    /// buffer is posted, and [`Link::deregister`] once that broadcast finished or
    /// failed; a link may then pre-post what [`Driver::expected`] lists. Default: nothing.
    fn register(&mut self, _seq: u64, _buf: &Buffer) -> Result<(), TransportError> {
        Ok(())
    }

    /// Forgets broadcast `seq`'s buffer (it goes back to its owner after this; also called
    /// when its `register` failed).
    fn deregister(&mut self, _seq: u64) {}

    /// Also waits on `fd` (the progress thread's [`Wake`]) in `progress`: a readable `fd`
    /// ends the wait.
    fn set_wake(&mut self, fd: std::os::fd::RawFd);

    /// A descriptor that is readable whenever this link has something to read, so that
    /// another link's wait can include it ([`router::Router`]); `None` when it has none.
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    /// Whether peers need this link served even when no broadcast runs (raw Ethernet: its
    /// acknowledgements and heartbeats; TCP's kernel does that).
    fn serves_idle(&self) -> bool {
        false
    }

    /// The transport's monotonic counters by name (raw Ethernet: retransmits, drops, …).
    fn counters(&self) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }

    /// The transport's state for a failure report.
    fn describe_state(&self, now: u64) -> String;

    /// Whether [`Link::grow`] can add peers (TCP on one rail; `comm::grow`). Default: no.
    fn can_grow(&self) -> bool {
        false
    }

    /// Appends `peers` to the peers this link knows: the first becomes peer number
    /// (peers known so far), and so on. They are reached by their [`NewPeer::addr`] and
    /// known in hellos by their [`NewPeer::id`], the identity both sides use for them
    /// whatever their local numbers (`comm::grow`). Default: an error (only links that
    /// [`Link::can_grow`] grow).
    fn grow(&mut self, _peers: &[NewPeer]) -> Result<(), TransportError> {
        Err(TransportError::Setup {
            what: format!("add peers to {}", self.describe()),
            error: "this link cannot add peers after its setup".into(),
        })
    }

    fn shutdown(&mut self);
}

/// A process a link learns of after its setup ([`Link::grow`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewPeer {
    /// Its identity: the job cookie and rank of the setup that made its engine, what its
    /// hellos say (the same at every process, whatever number each gives it).
    pub id: (u64, u64),
    /// Where its TCP link listens.
    pub addr: std::net::SocketAddr,
}

/// Broadcast `seq`'s bytes at `range`, where the payload of a segment from `peer` that
/// [`Driver::header`] sent `Into` them lands: the one destination lookup of the links
/// (its buffer still here, the range inside it).
pub(crate) fn slot(
    bufs: &mut Buffers,
    peer: usize,
    seq: u64,
    range: std::ops::Range<usize>,
) -> Result<&mut [u8], TransportError> {
    let buf = bufs
        .get_mut(&seq)
        .ok_or_else(|| gone_buffer(peer, seq))?
        .as_mut_slice();
    let len = buf.len();
    buf.get_mut(range.clone())
        .ok_or_else(|| TransportError::BadFrame {
            peer,
            reason: format!(
                "a segment of broadcast {seq} lands at {range:?}, beyond its {len}-byte buffer"
            ),
        })
}

/// The engine message in a header from `peer` ([`wire::message`](crate::wire::message)), or
/// why it is not one.
pub(crate) fn decode_header(
    peer: usize,
    head: &[u8],
) -> Result<crate::engine::Message, TransportError> {
    crate::wire::message::parse(head).map_err(|e| TransportError::BadFrame {
        peer,
        reason: e.to_string(),
    })
}

/// Fails if a peer that a broadcast in flight waits for is gone (`closed(peer)`): how a
/// reliable link (TCP, shared memory) learns of a dead process, its connection closed.
pub(crate) fn check_closed(
    driver: &dyn Driver,
    closed: impl Fn(usize) -> bool,
) -> Result<(), TransportError> {
    match driver.waiting_for().into_iter().find(|&p| closed(p)) {
        Some(peer) => Err(TransportError::Closed { peer }),
        None => Ok(()),
    }
}

/// A payload routed into a broadcast whose buffer is gone: cannot happen (a broadcast cannot
/// finish while one of its segments is still arriving), reported rather than trusted.
pub fn gone_buffer(peer: usize, seq: u64) -> TransportError {
    TransportError::BadFrame {
        peer,
        reason: format!("a segment of broadcast {seq} arrived after it finished here"),
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
    /// A link's buffer that the allocator refused, or a length beyond what this process could
    /// ever hold (`limits::heap`, `limits::memory_ceiling`): the limit, the count, the fix.
    #[error("{what}: {error}")]
    Memory { what: String, error: String },
    #[error("rank {peer} is gone: it answered nothing for {ms} ms (its process died, or its host or link is down; raise PIPECAST_TIMEOUT_MS if it was only stopped)")]
    PeerGone { peer: usize, ms: u64 },
}

pub mod ifaddrs;
pub mod lldp_socket;
pub mod mcast;
pub mod raweth;
