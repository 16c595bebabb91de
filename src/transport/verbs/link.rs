//! The verbs link's protocol, over any [`Verbs`] backend (the device, or the model in tests).
//!
//! - One reliable-connected queue pair per tree edge, created and connected when a broadcast
//!   first uses the edge, through a handshake on a TCP side channel
//!   (`handshake.rs`; the edges' cache: `link/edges.rs`): a rank has queue pairs only to the
//!   parents and children of the broadcasts it ran, at most [`LinkConfig::max_qps`] of them
//!   idle.
//! - A child registers its user buffer when its broadcast is posted
//!   ([`Link::register`]) and tells each of its parents where it is (an advert, with the
//!   broadcast's shape so that ranks that disagree fail instead of writing past a buffer).
//! - The parent RDMA-WRITEs each segment from its own registered user buffer into the
//!   child's, at the segment's offset, with an immediate naming the segment: no bounce
//!   buffer, no copy at either end. The immediate's completion at the child says the bytes are
//!   in place (RC completes a QP's work in order).
//! - Credits and the engine's other messages go back as small inline SENDs; the engine's
//!   window (seed 000 §3.1's pipeline under R segments per child) bounds what is in flight,
//!   and the child keeps a receive posted for each segment it may receive next
//!   ([`Driver::expected`]), plus some for control messages.
//! - A buffer that cannot be registered (a locked-memory limit) falls back to rings registered
//!   at setup: a child's segments go into its ring block for that parent, in pieces, and it
//!   copies each piece out and releases ring slots by cumulative count; a parent copies its
//!   pieces into a staging slot and writes from there.
//! - A peer that dies fails the RC sends to it (`RetryExceeded`): the link sends a heartbeat
//!   every quarter of the liveness time to each peer a broadcast waits for, so a dead parent
//!   is noticed too.
//!
//! One concept per file below `link/`: `edges.rs` (queue pairs per tree edge), `wr_id.rs`
//! (what a work request id says), `registration.rs` (buffers registered, adverts, the ring
//! fallback), `tx.rs` (writes and control sends), `landing.rs` (completions in, segments
//! landed), `cq.rs` (the completion queue: polling, sizing, sleeping on its channel).

use super::handshake::{Conn, Listener};
use super::mr_cache::MrCache;
use super::ops::{
    Completion, Local, Mr, Op, QpId, RecvWr, SendWr, Verbs, VerbsError, WcKind, WcStatus,
};
use super::waitset::WaitSet;
use crate::engine::{DataHeader, Message};
use crate::transport::driver::{Broadcast, Driver, Landing};
use crate::transport::{Buffer, Buffers, Capabilities, Link, TransportError};
use crate::wire::bootstrap::VerbsAddr;
use crate::wire::verbs::{self as control, Control, Target, MAX_SEGMENTS};
use edges::Edge;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

mod cq;
mod edges;
mod landing;
mod registration;
mod tx;
mod wr_id;

use cq::wait_for;
use wr_id::{KIND, NO_STAGE, REG_MASK, WR_CONTROL, WR_RECV, WR_WRITE};

/// Sizes of the link's queues and rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    /// Send work requests in flight per queue pair.
    pub send_depth: u32,
    /// Receives posted per queue pair, at most.
    pub recv_depth: u32,
    /// Receives kept posted per queue pair for control messages, besides one per expected
    /// segment.
    pub control_recvs: u32,
    /// The receive ring per peer (used when a user buffer cannot be registered).
    pub ring_slots: u32,
    pub ring_slot: u32,
    /// The send staging slots (used when a user buffer cannot be registered).
    pub stage_slots: u32,
    /// A peer a broadcast waits for gets a heartbeat this often (ns) when nothing else goes
    /// to it, so that a dead one fails the send.
    pub heartbeat: u64,
    /// Queue pairs kept (`PIPECAST_VERBS_MAX_QPS`): above this many, idle ones (no broadcast
    /// in flight uses them) are closed, least recently used first. Busy ones are never
    /// closed, so a rank holds at most this many or the edges of its broadcasts in flight,
    /// whichever is more. The completion queue is sized from it ([`LinkConfig::cq_entries`]).
    pub max_qps: usize,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            send_depth: 128,
            recv_depth: 256,
            control_recvs: 32,
            ring_slots: 4,
            ring_slot: 32 << 10,
            stage_slots: 8,
            heartbeat: 500_000_000,
            max_qps: 64,
        }
    }
}

impl LinkConfig {
    /// Completions one queue pair may have outstanding: every work request the link posts
    /// completes exactly once (sends are all signaled; a flushed one completes too), and
    /// it posts at most `send_depth` sends and `recv_depth` receives on a queue pair whose
    /// completions it has not polled.
    pub fn completions_per_qp(&self) -> usize {
        self.send_depth as usize + self.recv_depth as usize
    }

    /// The completion queue's size: room for [`LinkConfig::max_qps`] queue pairs'
    /// outstanding completions. Not from the communicator's size: a rank connects only its
    /// tree edges. Not from the engine's window either: the window bounds segments per child
    /// and lane of one broadcast, but lanes and broadcasts in flight multiply it, while the
    /// per-queue-pair depths bound everything the link posts. A rank holding more queue
    /// pairs at once (busy edges are never closed: a flat tree's root) grows the queue
    /// first (`VerbsLink`'s `cq_room`), so it cannot overrun.
    pub fn cq_entries(&self) -> usize {
        self.max_qps.max(1) * self.completions_per_qp()
    }
}

/// Bytes of one control receive slot.
const SLOT: usize = 64;

/// Memory the link owns and registered at setup.
struct Region {
    bytes: Box<[u8]>,
    mr: Mr,
}

impl Region {
    fn new<V: Verbs>(verbs: &mut V, len: usize) -> Result<Region, VerbsError> {
        let mut bytes = vec![0u8; len.max(1)].into_boxed_slice();
        // SAFETY: the box is never reallocated and lives in the link until `Drop`, which
        // deregisters every region before the box goes.
        let mr = unsafe { verbs.register(bytes.as_mut_ptr(), bytes.len()) }?;
        Ok(Region { bytes, mr })
    }

    fn addr(&self, at: usize) -> u64 {
        self.bytes.as_ptr() as u64 + at as u64
    }
}

/// A broadcast whose buffer is registered here.
struct Reg {
    /// Its number in work request ids (`wr_id`), `REG_MASK` bits.
    id: u64,
    /// What its parents write in their immediates to name it here (told in the advert).
    token: u8,
    /// `None`: registration refused, the rings carry its segments.
    mr: Option<Mr>,
    addr: u64,
    len: usize,
    /// Parents told where to write.
    advertised: BTreeSet<usize>,
}

/// A segment to write to a child, from `sent` bytes on.
struct Outgoing {
    seq: u64,
    segment: u32,
    payload: Range<usize>,
    sent: usize,
}

/// Where to write a child's segments of one broadcast, the token that names it there, and
/// the shape it has there.
#[derive(Clone, Copy)]
struct Advert {
    target: Target,
    token: u8,
    shape: control::Shape,
}

/// The piece of a ring segment a child is copying out.
struct Assembling {
    seq: u64,
    segment: u32,
    offset: usize,
}

/// One peer's queue pair (one tree edge) and traffic.
struct Peer {
    qp: QpId,
    /// Where the handshake is (only `Ready` edges carry traffic).
    edge: Edge,
    /// The far end's queue pair number (once known).
    remote_qpn: u32,
    /// This rank's ring block for the peer, and its control receive slots.
    ring: Region,
    recv: Region,
    /// Its ring block for this rank.
    ring_addr: u64,
    ring_rkey: u32,
    sq_used: u32,
    /// Receive slots (of this peer's block of the control region) not posted.
    free_recvs: Vec<u32>,
    control_out: VecDeque<Control>,
    data_out: VecDeque<Outgoing>,
    /// Pieces written into its ring, and how many it released.
    ring_sent: u64,
    ring_released: u64,
    /// Pieces it wrote into this rank's ring: arrived, and released back.
    ring_arrived: u64,
    ring_release_sent: u64,
    assembling: Option<Assembling>,
    heartbeat_out: bool,
    last_sent: u64,
    /// When the edge last carried anything (the cache closes the least recently used).
    last_used: u64,
    /// The peer refused to close it (it uses it): not asked again before then.
    close_after: Option<Instant>,
}

/// The RDMA verbs link over backend `V`.
pub struct VerbsLink<V: Verbs> {
    rank: usize,
    size: usize,
    cfg: LinkConfig,
    verbs: V,
    /// The edges: a queue pair per peer this rank's broadcasts used (or that asked).
    peers: BTreeMap<usize, Peer>,
    by_qp: BTreeMap<QpId, usize>,
    /// The side channel: this rank's listener, the peers' ones (after `set_peers`), the job
    /// cookie, connections not yet matched to an edge (with a deadline), answers being
    /// flushed before they close.
    listener: Listener,
    listen: Vec<SocketAddr>,
    cookie: u64,
    incoming: Vec<(Conn, Instant)>,
    leaving: Vec<Conn>,
    connect_timeout: Duration,
    /// Peers whose handshake failed, and why (final: a broadcast needing them fails).
    failed: BTreeMap<usize, String>,
    /// Peers this link serves (every `connect` adds its peers): under a router, the
    /// broadcasts' other peers (same host: shared memory) get no queue pair here.
    routed: BTreeSet<usize>,
    /// The peers this link serves that the broadcasts in flight talk to, as of the driver's
    /// `in_flight` count `busy_at`: recomputed only when that moves (or `connect` adds
    /// peers), as the TCP link does, not every round.
    busy: BTreeSet<usize>,
    busy_at: Option<u64>,
    /// Queue pairs whose outstanding completions the completion queue has room for, and
    /// queue pairs destroyed since it was last polled empty (completions of theirs may
    /// still be in it: they take room until a poll finds it empty).
    cq_qps: usize,
    retiring: usize,
    /// What `cq_qps` was at creation (room for `max_qps` queue pairs): a grown queue
    /// shrinks back towards it (`cq_shrink`), never below.
    cq_base: usize,
    /// Registered edge regions (ring block, receive slots) not in use (`edges::SPARE`).
    spare: Vec<(Region, Region)>,
    stage: Region,
    free_stage: Vec<u32>,
    cache: MrCache,
    regs: BTreeMap<u64, Reg>,
    /// The next registration number (`Reg::id`).
    next_reg: u64,
    tokens: BTreeMap<u8, u64>,
    adverts: BTreeMap<(usize, u64), Advert>,
    /// Writes posted from each broadcast's buffer and not completed, by its registration
    /// number.
    writing: BTreeMap<u64, u32>,
    backlog: VecDeque<Completion>,
    /// Peers whose queue pair failed, and why.
    gone: BTreeMap<usize, WcStatus>,
    wake: Option<std::os::fd::RawFd>,
    /// The completion channel, the side channel and the backlog as one descriptor: what
    /// the link waits on, and its `wait_fd`.
    waitset: WaitSet,
    counters: BTreeMap<&'static str, u64>,
    describe: String,
}

impl<V: Verbs> VerbsLink<V> {
    /// Rank `rank` of `size`: the staging region registered and the handshake listener bound
    /// on `ip`; no queue pair yet. [`VerbsLink::local_addr`] is what goes into the blob.
    pub fn new(
        rank: usize,
        size: usize,
        mut verbs: V,
        cfg: LinkConfig,
        describe: String,
        ip: std::net::IpAddr,
    ) -> Result<VerbsLink<V>, VerbsError> {
        let listener = Listener::bind(ip).map_err(|e| VerbsError::Call {
            call: "listening for queue pair handshakes",
            detail: format!("{ip}: {e}"),
        })?;
        let cq_qps = verbs.cq_entries() / cfg.completions_per_qp();
        if cq_qps == 0 {
            return Err(VerbsError::Call {
                call: "ibv_create_cq",
                detail: format!(
                    "a completion queue of {} entries has no room for one queue pair's {}",
                    verbs.cq_entries(),
                    cfg.completions_per_qp()
                ),
            });
        }
        let fixed: Vec<std::os::fd::RawFd> = verbs.wait_fd().into_iter().collect();
        let waitset = WaitSet::new(&fixed).map_err(|e| VerbsError::Call {
            call: "epoll_create1",
            detail: e.to_string(),
        })?;
        let stage = Region::new(
            &mut verbs,
            cfg.stage_slots as usize * cfg.ring_slot as usize,
        )?;
        let spare = match edges::edge_regions(&mut verbs, &cfg) {
            Ok(r) => vec![r],
            Err(e) => {
                verbs.deregister(stage.mr.id);
                return Err(e);
            }
        };
        let mut link = VerbsLink {
            spare,
            cq_qps,
            cq_base: cq_qps,
            waitset,
            retiring: 0,
            rank,
            size,
            cfg,
            peers: BTreeMap::new(),
            by_qp: BTreeMap::new(),
            listener,
            listen: Vec::new(),
            cookie: 0,
            incoming: Vec::new(),
            leaving: Vec::new(),
            connect_timeout: Duration::from_secs(60),
            failed: BTreeMap::new(),
            routed: BTreeSet::new(),
            busy: BTreeSet::new(),
            busy_at: None,
            free_stage: (0..cfg.stage_slots).rev().collect(),
            stage,
            verbs,
            cache: MrCache::new(),
            regs: BTreeMap::new(),
            next_reg: 0,
            tokens: BTreeMap::new(),
            adverts: BTreeMap::new(),
            writing: BTreeMap::new(),
            backlog: VecDeque::new(),
            gone: BTreeMap::new(),
            wake: None,
            counters: BTreeMap::new(),
            describe,
        };
        // The listener is in the wait set from the start.
        link.waitset
            .sync(&link.side_fds())
            .map_err(|e| VerbsError::Call {
                call: "epoll_ctl",
                detail: e.to_string(),
            })?;
        Ok(link)
    }

    /// What the other ranks need to reach this one (the bootstrap blob's verbs section): its
    /// port and where it takes queue pair handshakes; the same size at any number of ranks.
    pub fn local_addr(&self) -> VerbsAddr {
        let port = self.verbs.port();
        VerbsAddr {
            port: port.port,
            gid_index: port.gid_index,
            lid: port.lid,
            gid: port.gid,
            mtu: port.mtu,
            listen: self.listener.addr(),
            ring_slot: self.cfg.ring_slot,
            ring_slots: self.cfg.ring_slots,
        }
    }

    /// Keeps `busy` (the peers it serves that the broadcasts in flight talk to) as of the
    /// driver's set in flight: recomputed when that set changed (a broadcast posted or
    /// finished) or `connect` added peers, and left as it is in every other round.
    fn follow(&mut self, driver: &dyn Driver) {
        let at = driver.in_flight();
        if self.busy_at == Some(at) {
            return;
        }
        let routed = &self.routed;
        self.busy = driver
            .talks_to()
            .into_iter()
            .filter(|p| routed.contains(p))
            .collect();
        self.busy_at = Some(at);
    }

    /// Takes everybody's addresses (and the job's cookie, which every handshake carries).
    /// Connects nothing: an edge's queue pair is made when a broadcast first uses it.
    pub fn set_peers(&mut self, addrs: &[VerbsAddr], cookie: u64) -> Result<(), TransportError> {
        if addrs.len() != self.size {
            return Err(setup(format!(
                "{} verbs addresses for {} ranks",
                addrs.len(),
                self.size
            )));
        }
        for (p, a) in addrs.iter().enumerate() {
            if a.ring_slots != self.cfg.ring_slots || a.ring_slot != self.cfg.ring_slot {
                return Err(setup(format!(
                    "rank {p} has rings of {} × {} bytes, this rank {} × {}: run the same pipecast everywhere",
                    a.ring_slots, a.ring_slot, self.cfg.ring_slots, self.cfg.ring_slot
                )));
            }
        }
        self.listen = addrs.iter().map(|a| a.listen).collect();
        self.cookie = cookie;
        Ok(())
    }

    /// The backend (the model's tests look into it).
    pub fn verbs(&self) -> &V {
        &self.verbs
    }

    /// Registrations made and reused by the cache.
    pub fn cache_stats(&self) -> (u64, u64, usize) {
        (self.cache.registered, self.cache.reused, self.cache.len())
    }

    /// Keeps `want` receives posted to `peer` (at most the queue's depth).
    fn post_recvs(&mut self, peer: usize, want: u32) -> Result<(), TransportError> {
        let want = want.min(self.cfg.recv_depth);
        let Some(p) = self.peers.get_mut(&peer) else {
            return Ok(());
        };
        while self.cfg.recv_depth - (p.free_recvs.len() as u32) < want {
            let slot = p.free_recvs.pop().expect("below depth");
            let wr = RecvWr {
                wr_id: WR_RECV | u64::from(slot),
                addr: p.recv.addr(slot as usize * SLOT),
                len: SLOT as u32,
                lkey: p.recv.mr.lkey,
            };
            // SAFETY: the slot lies in the peer's receive region, registered until its queue
            // pair is destroyed (`drop_peer`, which destroys the queue pair first), and nothing
            // touches it until its completion (then it is read and reused).
            unsafe { self.verbs.post_recv(p.qp, &wr) }
                .map_err(|e| io(peer, format!("posting a receive: {e}")))?;
        }
        Ok(())
    }
}

/// What broadcast `b` is, as every rank must agree (an advert carries the child's).
fn shape_of(b: Broadcast<'_>) -> control::Shape {
    control::Shape {
        root: b.root,
        msize: b.layout.msize(),
        segment: b.layout.segment() as u32,
        lanes: b.layout.lanes() as u16,
    }
}

/// Fails unless the child's broadcast `seq` has this rank's shape.
fn same_shape(
    peer: usize,
    seq: u64,
    theirs: control::Shape,
    b: Broadcast<'_>,
) -> Result<(), TransportError> {
    let ours = shape_of(b);
    if ours == theirs {
        return Ok(());
    }
    Err(bad(
        peer,
        &format!("broadcast {seq} has {theirs} there but {ours} here: every rank must call bcast with the same root and message size, in the same order"),
    ))
}

fn bump(counters: &mut BTreeMap<&'static str, u64>, what: &'static str, n: u64) {
    *counters.entry(what).or_default() += n;
}

fn setup(error: String) -> TransportError {
    TransportError::Setup {
        what: "verbs link".into(),
        error,
    }
}

fn io(peer: usize, error: String) -> TransportError {
    TransportError::Io {
        peer: Some(peer),
        error,
    }
}

fn bad(peer: usize, reason: &str) -> TransportError {
    TransportError::BadFrame {
        peer,
        reason: reason.to_string(),
    }
}

impl<V: Verbs> Link for VerbsLink<V> {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reliable: true,
            max_frame: None,
            needs_registration: true,
            one_sided: true,
            // One device port for every lane: lanes are not on rails yet.
            rails: 1,
        }
    }

    /// Connects nothing yet: the queue pair of an edge is made when a broadcast in flight
    /// first uses it (`progress`), and its handshake must end within `timeout`.
    fn connect(&mut self, peers: &[usize], timeout: Duration) -> Result<(), TransportError> {
        if let Some(&peer) = peers
            .iter()
            .find(|&&p| p == self.rank || p >= self.listen.len())
        {
            return Err(TransportError::UnknownPeer { peer });
        }
        self.connect_timeout = timeout;
        self.routed.extend(peers);
        self.busy_at = None; // what it serves changed: recomputed next round
        Ok(())
    }

    fn register(&mut self, seq: u64, buf: &Buffer) -> Result<(), TransportError> {
        self.register_buffer(seq, buf)
    }

    fn deregister(&mut self, seq: u64) {
        self.deregister_buffer(seq)
    }

    fn progress(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> crate::Result<()> {
        let now = clock();
        self.waitset.lower(); // raised again at the end if the backlog still holds some
        self.poll_all(bufs, driver, now)?;
        // The edges the broadcasts in flight use: asked for when new, handshakes advanced,
        // idle ones over the bound closed.
        self.follow(driver);
        let busy = std::mem::take(&mut self.busy);
        let edges = self.edges(&busy);
        self.busy = busy;
        edges?;
        self.cq_shrink()?;
        if let Some((&peer, why)) = self.failed.iter().find(|(p, _)| self.busy.contains(p)) {
            return Err(io(peer, why.clone()).into());
        }
        let served: BTreeSet<usize> = self
            .peers
            .iter()
            .filter(|(_, p)| matches!(p.edge, Edge::Ready))
            .map(|(&r, _)| r)
            .collect();
        while let Some(t) = driver.next(now, &|p| served.contains(&p)) {
            let seq = t.seq;
            let p = self.peers.get_mut(&t.to).expect("served");
            match t.message {
                Message::Data(h) => {
                    let b = driver.broadcast(seq).expect("it just sent");
                    let segment = b.layout.number(usize::from(h.lane), h.index);
                    if segment >= u64::from(MAX_SEGMENTS) {
                        return Err(setup(format!(
                            "broadcast {seq} has more than {MAX_SEGMENTS} segments: raise the segment size (PIPECAST_SEGMENT)"
                        ))
                        .into());
                    }
                    p.data_out.push_back(Outgoing {
                        seq,
                        segment: segment as u32,
                        payload: t.payload,
                        sent: 0,
                    });
                }
                m => p.control_out.push_back(Control::Engine(m)),
            }
            if let (Message::Data(_), Some(a)) = (t.message, self.adverts.get(&(t.to, seq))) {
                same_shape(
                    t.to,
                    seq,
                    a.shape,
                    driver.broadcast(seq).expect("it just sent"),
                )?;
            }
        }
        // Adverts to parents, and receives for what may arrive next.
        let expected = driver.expected(&|p| served.contains(&p));
        let mut per_peer: BTreeMap<usize, u32> = BTreeMap::new();
        for e in &expected {
            *per_peer.entry(e.from).or_default() += 1;
            let Some(reg) = self.regs.get_mut(&e.seq) else {
                continue;
            };
            if reg.advertised.insert(e.from) {
                let target = match reg.mr {
                    Some(mr) => Target::Buffer {
                        addr: reg.addr,
                        rkey: mr.rkey,
                        len: reg.len as u64,
                    },
                    // Nothing to write into: zero-length writes touch no memory.
                    None if reg.len == 0 => Target::Buffer {
                        addr: reg.addr,
                        rkey: 0,
                        len: 0,
                    },
                    None => Target::Ring,
                };
                let shape = shape_of(driver.broadcast(e.seq).expect("expected of it"));
                let p = self.peers.get_mut(&e.from).expect("served");
                p.control_out.push_back(Control::Advert {
                    seq: e.seq,
                    token: reg.token,
                    shape,
                    target,
                });
            }
        }
        let peers: Vec<usize> = served.iter().copied().collect();
        for &peer in &peers {
            let want = self.cfg.control_recvs + per_peer.get(&peer).copied().unwrap_or(0);
            self.post_recvs(peer, want)?;
        }
        // Ring releases, and heartbeats to the peers broadcasts wait for.
        let waiting = driver.waiting_for();
        for &peer in &peers {
            let half = u64::from(self.cfg.ring_slots).div_ceil(2);
            let p = self.peers.get_mut(&peer).expect("listed");
            if p.ring_arrived - p.ring_release_sent >= half
                || (p.assembling.is_none() && p.ring_arrived > p.ring_release_sent)
            {
                p.ring_release_sent = p.ring_arrived;
                p.control_out.push_back(Control::Release {
                    copied: p.ring_arrived,
                });
            }
            if waiting.contains(&peer)
                && !p.heartbeat_out
                && p.control_out.is_empty()
                && now.saturating_sub(p.last_sent) >= self.cfg.heartbeat
            {
                p.control_out.push_back(Control::Heartbeat);
            }
        }
        for &peer in &peers {
            self.flush(peer, bufs, now)?;
        }
        let needed = |p: &usize| {
            waiting.contains(p)
                || self
                    .peers
                    .get(p)
                    .is_some_and(|q| !q.data_out.is_empty() || !q.control_out.is_empty())
        };
        if let Some((&peer, _)) = self.gone.iter().find(|(p, _)| needed(p)) {
            return Err(TransportError::Closed { peer }.into());
        }
        self.arm()?;
        let wait = driver.may_wait(wait);
        if wait.is_zero() {
            return Ok(());
        }
        self.wait(wait)?;
        Ok(())
    }

    fn set_wake(&mut self, fd: std::os::fd::RawFd) {
        self.wake = Some(fd);
    }

    /// Peers ask for edges (and to close idle ones) whenever their broadcasts start, so the
    /// side channel is served between broadcasts too.
    fn serves_idle(&self) -> bool {
        true
    }

    /// The wait set: readable when a completion arrives, a peer asks for or answers a
    /// handshake, or completions wait in the backlog (each round ends arming it).
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.waitset.fd())
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        let mut c: BTreeMap<String, u64> = self
            .counters
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        c.insert("verbs_registrations".into(), self.cache.registered);
        c.insert("verbs_registrations_reused".into(), self.cache.reused);
        c.insert("verbs_qps".into(), self.peers.len() as u64);
        c
    }

    fn describe_state(&self, _now: u64) -> String {
        let mut s = format!(
            "{}: {} buffers registered ({} regions), {} queue pairs ({} connecting), {} peers gone, {} failed",
            self.describe,
            self.regs.len(),
            self.cache.len(),
            self.peers.len(),
            self.peers
                .values()
                .filter(|p| !matches!(p.edge, Edge::Ready))
                .count(),
            self.gone.len(),
            self.failed.len(),
        );
        for (peer, why) in &self.failed {
            s += &format!("\n  rank {peer}: {why}");
        }
        for (peer, p) in &self.peers {
            if !p.data_out.is_empty() || !p.control_out.is_empty() || p.sq_used > 0 {
                s += &format!(
                    "\n  rank {peer}: {} segments and {} control messages queued, {} sends in flight, ring {}/{} sent/released",
                    p.data_out.len(),
                    p.control_out.len(),
                    p.sq_used,
                    p.ring_sent,
                    p.ring_released
                );
            }
        }
        s
    }

    fn shutdown(&mut self) {
        let seqs: Vec<u64> = self.regs.keys().copied().collect();
        for seq in seqs {
            self.deregister(seq);
        }
    }
}

impl<V: Verbs> Drop for VerbsLink<V> {
    fn drop(&mut self) {
        self.shutdown();
        let peers: Vec<usize> = self.peers.keys().copied().collect();
        for peer in peers {
            self.drop_peer(peer);
        }
        self.verbs.deregister(self.stage.mr.id);
        for (ring, recv) in std::mem::take(&mut self.spare) {
            self.verbs.deregister(ring.mr.id);
            self.verbs.deregister(recv.mr.id);
        }
    }
}
