//! Raw Ethernet transport: pipecast frames (wire/frame.rs) in Ethernet frames of EtherType
//! 0x88B5, sent to each peer's MAC address from an `AF_PACKET` socket ([`socket`]), made
//! reliable per peer by [`reliable`] (sequence numbers, cumulative + selective acks, RTO,
//! credit, pacing).
//!
//! Same shape as [`TcpTransport`](crate::transport::TcpTransport): the communicator gives it
//! the peers' MAC addresses and the job cookie from the bootstrap, then drives one
//! [`Bcast`] at a time with `resume`/`progress`/`flushed`. An engine segment larger than one
//! frame goes out as several frames (payload per frame = MTU − 88-byte header); the receiver
//! copies each frame's payload straight to its offset in the user buffer and hands the
//! segment to the engine (`handle_data`) once all its bytes arrived. Frames of a later
//! broadcast are kept (copied, up to [`Config::later_frames`]) until that broadcast starts.
//!
//! Frames with another job's cookie or communicator id, from unknown MACs, of unknown
//! versions or with bad lengths are dropped and counted ([`Counters`]).

pub mod reliable;
pub mod ring;
pub mod socket;

use crate::engine::{Bcast, DataHeader, Message, Placement};
use crate::transport::TransportError;
use crate::wire::frame::{Frame, Kind, Repr, HEADER_LEN};
use crate::wire::WireError;
use reliable::{Accept, Pacer, Receiver, Sender};
use socket::{Addressed, Mac, RawSocket, RecvBatch};
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, IoSlice};
use std::ops::Range;
use std::time::Duration;

/// Transport tuning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub reliable: reliable::Config,
    /// Communicator id carried in every frame (frames of other communicators are dropped).
    pub comm: u32,
    /// Frames per `sendmmsg`/`recvmmsg`.
    pub batch: usize,
    /// Frames of later broadcasts kept until they start (beyond: dropped unacknowledged, so
    /// the sender retransmits them).
    pub later_frames: usize,
    /// Payload bytes per frame (default: MTU − header); lower it to test splitting.
    pub max_payload: Option<usize>,
    /// SO_SNDBUF in bytes (default: the kernel's, ~212 KB, which makes a full tbf push back
    /// on the sender; a large one turns downstream queues into silent drops, LAB.md).
    pub sndbuf: Option<usize>,
    /// Receive through a PACKET_MMAP ring of this many bytes ([`ring::RxRing`]) instead of
    /// `recvmmsg` batches.
    pub rx_ring: Option<usize>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            reliable: reliable::Config::default(),
            comm: 0,
            batch: 32,
            later_frames: 8192,
            max_payload: None,
            sndbuf: None,
            rx_ring: None,
        }
    }
}

/// What the transport saw (monotonic counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub acks_sent: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    /// Sends refused by a full socket buffer (EAGAIN/ENOBUFS): retried later.
    pub send_blocked: u64,
    pub duplicates: u64,
    pub out_of_window: u64,
    pub later_kept: u64,
    pub later_dropped: u64,
    /// Frames addressed to another host (flooded by a bridge that has not learnt a MAC).
    pub dropped_otherhost: u64,
    pub dropped_cookie: u64,
    pub dropped_comm: u64,
    pub dropped_unknown_peer: u64,
    pub dropped_version: u64,
    pub dropped_length: u64,
    pub dropped_kind: u64,
}

/// One frame's content to (re)send: a header without the reliability fields and a range of
/// the user buffer.
#[derive(Debug, Clone)]
struct Item {
    head: Repr,
    payload: Range<usize>,
}

struct Peer {
    mac: Mac,
    tx: Sender<Item>,
    rx: Receiver,
    /// New frames waiting for credit or pacing.
    queue: VecDeque<Item>,
}

/// A segment being reassembled: where it goes in the user buffer and how much arrived.
struct Assembly {
    start: usize,
    len: usize,
    got: usize,
    head: DataHeader,
}

/// This rank's raw Ethernet endpoint.
pub struct RawEthTransport {
    me: usize,
    sock: RawSocket,
    config: Config,
    max_payload: usize,
    cookie: u64,
    peers: BTreeMap<usize, Peer>,
    by_mac: BTreeMap<Mac, usize>,
    pacer: Pacer,
    assembly: BTreeMap<(usize, u64, u16, u32), Assembly>,
    later: Vec<(usize, Repr, Vec<u8>)>,
    recv: RecvBatch,
    ring: Option<ring::RxRing>,
    /// The last send hit a full socket buffer: wait for POLLOUT.
    blocked: bool,
    /// The broadcast in progress (older data still unacknowledged becomes no-ops).
    current: u64,
    counters: Counters,
}

impl RawEthTransport {
    /// Opens interface `ifname` (in this thread's network namespace).
    pub fn bind(
        me: usize,
        ifname: &str,
        config: Config,
    ) -> Result<RawEthTransport, TransportError> {
        Self::with_socket(me, RawSocket::open(ifname)?, config)
    }

    /// Opens interface `ifname` inside network namespace `netns` (see
    /// [`RawSocket::open_in_netns`]).
    pub fn bind_in_netns(
        me: usize,
        netns: &str,
        ifname: &str,
        config: Config,
    ) -> Result<RawEthTransport, TransportError> {
        Self::with_socket(me, RawSocket::open_in_netns(netns, ifname)?, config)
    }

    fn with_socket(
        me: usize,
        sock: RawSocket,
        config: Config,
    ) -> Result<RawEthTransport, TransportError> {
        if let Some(bytes) = config.sndbuf {
            let bytes = bytes.min(i32::MAX as usize) as i32;
            if sock.set_int(libc::SO_SNDBUFFORCE, bytes).is_err() {
                sock.set_int(libc::SO_SNDBUF, bytes)
                    .map_err(|e| TransportError::Setup {
                        what: format!("SO_SNDBUF {bytes} on {}", sock.ifname()),
                        error: e.to_string(),
                    })?;
            }
        }
        let fits = sock.mtu().saturating_sub(HEADER_LEN);
        let max_payload = config.max_payload.unwrap_or(fits).min(fits).min(0xffff);
        if max_payload == 0 {
            return Err(TransportError::Setup {
                what: format!("raw Ethernet on {}", sock.ifname()),
                error: format!(
                    "MTU {} leaves no room for payload after the {HEADER_LEN}-byte header",
                    sock.mtu()
                ),
            });
        }
        let ring = match config.rx_ring {
            Some(bytes) => Some(ring::RxRing::new(&sock, bytes)?),
            None => None,
        };
        Ok(RawEthTransport {
            me,
            ring,
            recv: RecvBatch::new(config.batch, sock.mtu() + 64),
            sock,
            max_payload,
            cookie: 0,
            peers: BTreeMap::new(),
            by_mac: BTreeMap::new(),
            pacer: Pacer::new(config.reliable.rate, config.reliable.burst, 0),
            assembly: BTreeMap::new(),
            later: Vec::new(),
            blocked: false,
            current: 0,
            counters: Counters::default(),
            config,
        })
    }

    /// This endpoint's MAC address (goes into the bootstrap blob).
    pub fn local_mac(&self) -> Mac {
        self.sock.mac()
    }

    pub fn mtu(&self) -> usize {
        self.sock.mtu()
    }

    /// Payload bytes per frame.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    pub fn socket(&self) -> &RawSocket {
        &self.sock
    }

    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        for p in self.peers.values() {
            c.retransmits += p.tx.retransmits;
            c.timeouts += p.tx.timeouts;
            c.duplicates += p.rx.duplicates;
        }
        c
    }

    /// Every rank's MAC address (from the bootstrap, indexed by rank) and the job cookie.
    pub fn set_peers(&mut self, macs: Vec<Mac>, cookie: u64) -> Result<(), TransportError> {
        self.cookie = cookie;
        self.peers.clear();
        self.by_mac.clear();
        for (rank, mac) in macs.into_iter().enumerate() {
            if rank == self.me {
                continue;
            }
            if let Some(other) = self.by_mac.insert(mac, rank) {
                return Err(TransportError::Setup {
                    what: "raw Ethernet peers".into(),
                    error: format!(
                        "ranks {other} and {rank} share MAC {}: run one rank per interface",
                        socket::mac_to_string(&mac)
                    ),
                });
            }
            self.peers.insert(
                rank,
                Peer {
                    mac,
                    tx: Sender::new(self.config.reliable),
                    rx: Receiver::new(self.config.reliable),
                    queue: VecDeque::new(),
                },
            );
        }
        Ok(())
    }

    /// Checks that every one of `peers` has a MAC address (there is no connection to make:
    /// the same shape as `TcpTransport::connect`).
    pub fn connect(&mut self, peers: &[usize], _timeout: Duration) -> Result<(), TransportError> {
        match peers
            .iter()
            .find(|&&p| p != self.me && !self.peers.contains_key(&p))
        {
            Some(&peer) => Err(TransportError::UnknownPeer { peer }),
            None => Ok(()),
        }
    }

    /// Forgets everything in flight (after a failed broadcast): peers then fail by their
    /// idle timeout, as there is no connection to close.
    pub fn shutdown(&mut self) {
        for p in self.peers.values_mut() {
            p.tx = Sender::new(self.config.reliable);
            p.rx = Receiver::new(self.config.reliable);
            p.queue.clear();
        }
        self.assembly.clear();
        self.later.clear();
    }

    /// Whether every frame sent has been acknowledged and every ack owed has been sent.
    pub fn flushed(&self) -> bool {
        self.peers
            .values()
            .all(|p| p.queue.is_empty() && p.tx.is_idle() && !p.rx.ack_due())
    }

    /// Starts serving `bcast`: unacknowledged data of older broadcasts becomes no-ops (their
    /// buffers are gone), and kept frames of this broadcast are delivered.
    pub fn resume(&mut self, bcast: &mut Bcast, now: u64) -> Result<(), crate::Error> {
        let seq = bcast.setup().seq;
        self.current = seq;
        let nop = |i: &mut Item| {
            if i.head.kind() == Kind::Data && i.head.bcast_seq < seq {
                i.head.kind = Kind::Nop.into();
                i.head.payload_len = 0;
                i.payload = 0..0;
            }
        };
        for p in self.peers.values_mut() {
            p.tx.rewrite(nop);
            p.queue.retain(|i| i.head.bcast_seq >= seq);
        }
        self.assembly.retain(|k, _| k.1 >= seq);
        // Nothing to write into yet: kept frames are offered by `deliver_later` with a buffer.
        let _ = now;
        Ok(())
    }

    /// One round: queue what the engine wants sent, send what credit and pacing allow, wait
    /// up to `wait` for frames, and deliver arrivals to the engine.
    pub fn progress(
        &mut self,
        buf: &mut [u8],
        bcast: &mut Bcast,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> Result<(), crate::Error> {
        if bcast.setup().seq != self.current {
            self.resume(bcast, clock())?;
        }
        if self.later.iter().any(|l| l.1.bcast_seq <= self.current) {
            self.deliver_later(buf, bcast, clock())?;
        }
        self.queue(bcast)?;
        self.send(buf, clock())?;
        let now = clock();
        let mut ms = wait.as_millis().min(i32::MAX as u128) as u64;
        if let Some(t) = self.next_timer(now) {
            ms = ms.min(t.saturating_sub(now).div_ceil(1_000_000));
        }
        let (readable, _) = self
            .sock
            .poll(self.blocked, ms as i32)
            .map_err(|e| io_err(None, e))?;
        self.blocked = false;
        if readable {
            self.receive(buf, Some(bcast), clock)?;
        }
        self.queue(bcast)?;
        self.send(buf, clock())?;
        Ok(())
    }

    /// Runs `bcast` to completion on this transport, the way the communicator's progress
    /// thread drives the TCP transport; then lingers up to `linger` until peers acknowledged
    /// this rank's last frames (a lost final ack would otherwise leave a parent waiting).
    pub fn run(
        &mut self,
        buf: &mut [u8],
        bcast: &mut Bcast,
        clock: &dyn Fn() -> u64,
        linger: Duration,
    ) -> Result<(), crate::Error> {
        self.resume(bcast, clock())?;
        loop {
            if bcast.is_done() && self.flushed() {
                return Ok(());
            }
            if bcast.is_done() {
                self.linger(buf, clock, linger)?;
                return Ok(());
            }
            let now = clock();
            bcast.handle_timeout(now)?;
            let wait = bcast
                .poll_timeout()
                .map_or(1_000_000, |t| t.saturating_sub(now))
                .min(100_000_000);
            self.progress(buf, bcast, clock, Duration::from_nanos(wait))?;
        }
    }

    /// Keeps acknowledging and retransmitting without a broadcast (e.g. after the last one,
    /// until peers acknowledged everything) for at most `limit`. Returns whether flushed.
    pub fn linger(
        &mut self,
        buf: &mut [u8],
        clock: &dyn Fn() -> u64,
        limit: Duration,
    ) -> Result<bool, crate::Error> {
        let end = clock() + limit.as_nanos() as u64;
        while !self.flushed() && clock() < end {
            self.send(buf, clock())?;
            let (readable, _) = self
                .sock
                .poll(self.blocked, 1)
                .map_err(|e| io_err(None, e))?;
            self.blocked = false;
            if readable {
                self.receive(buf, None, clock)?;
            }
            self.send(buf, clock())?;
        }
        Ok(self.flushed())
    }

    /// When something must happen without a frame arriving: a retransmission timer, or the
    /// pacer allowing a queued frame.
    fn next_timer(&self, now: u64) -> Option<u64> {
        let mut at: Option<u64> = None;
        for p in self.peers.values() {
            // While the socket is full, POLLOUT (not a timer) says when to send again.
            let sendable = p.tx.has_retransmit() || (!p.queue.is_empty() && p.tx.can_send());
            let t = if sendable && !self.blocked {
                Some(self.pacer.ready_at(now, self.frame_len()))
            } else {
                p.tx.poll_timeout()
            };
            at = match (at, t) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        at
    }

    fn frame_len(&self) -> u64 {
        (HEADER_LEN + self.max_payload + 14) as u64
    }

    /// Turns the engine's transmits into frames on each peer's queue.
    fn queue(&mut self, bcast: &mut Bcast) -> Result<(), TransportError> {
        // The engine ignores the time here.
        while let Some(t) = bcast.poll_transmit(0) {
            let peer = self
                .peers
                .get_mut(&t.to)
                .ok_or(TransportError::UnknownPeer { peer: t.to })?;
            let mut head = Repr {
                cookie: self.cookie,
                comm: self.config.comm,
                ..Repr::default()
            };
            match t.message {
                Message::Data(h) => {
                    head.kind = Kind::Data.into();
                    head.bcast_seq = h.seq;
                    head.root = h.root;
                    head.msize = h.msize;
                    head.segment = h.segment;
                    head.lanes = h.lanes;
                    head.lane = h.lane;
                    head.index = h.index;
                    head.segment_len = h.len;
                    let mut off = 0usize;
                    loop {
                        let len = (t.payload.len() - off).min(self.max_payload);
                        let start = t.payload.start + off;
                        peer.queue.push_back(Item {
                            head: Repr {
                                offset: off as u32,
                                payload_len: len as u16,
                                ..head
                            },
                            payload: start..start + len,
                        });
                        off += len;
                        if off >= t.payload.len() {
                            break;
                        }
                    }
                }
                Message::Credit {
                    seq,
                    lane,
                    consumed,
                } => {
                    head.kind = Kind::Credit.into();
                    head.bcast_seq = seq;
                    head.lane = lane;
                    head.offset = consumed;
                    peer.queue.push_back(Item {
                        head,
                        payload: 0..0,
                    });
                }
                Message::Done { seq, lane } => {
                    head.kind = Kind::Done.into();
                    head.bcast_seq = seq;
                    head.lane = lane;
                    peer.queue.push_back(Item {
                        head,
                        payload: 0..0,
                    });
                }
            }
        }
        Ok(())
    }

    /// Sends retransmissions, then new frames (round robin over peers, within credit and
    /// pacing), then bare acks for peers that are owed one.
    fn send(&mut self, buf: &[u8], now: u64) -> Result<(), TransportError> {
        for p in self.peers.values_mut() {
            p.tx.handle_timeout(now);
        }
        let frame_len = self.frame_len();
        loop {
            // (peer, seq, item, new?)
            let mut batch: Vec<(usize, u64, Item, bool)> = Vec::with_capacity(self.config.batch);
            let mut progress = true;
            while batch.len() < self.config.batch && progress {
                progress = false;
                for (&rank, p) in self.peers.iter_mut() {
                    if batch.len() >= self.config.batch {
                        break;
                    }
                    let wants = p.tx.has_retransmit() || (!p.queue.is_empty() && p.tx.can_send());
                    if !wants || !self.pacer.try_take(now, frame_len) {
                        continue;
                    }
                    if let Some((seq, item)) = p.tx.poll_retransmit(now) {
                        batch.push((rank, seq, item.clone(), false));
                    } else if let Some(item) = p.queue.pop_front() {
                        let seq = p.tx.push(now, item.clone());
                        batch.push((rank, seq, item, true));
                    }
                    progress = true;
                }
            }
            if batch.is_empty() {
                break;
            }
            let sent = self.transmit(buf, &batch)?;
            for (rank, seq, _, _) in &batch[..sent] {
                self.peers
                    .get_mut(rank)
                    .expect("batched peer")
                    .tx
                    .sent(*seq, now);
            }
            for (rank, seq, _, _) in batch[sent..].iter().rev() {
                self.peers
                    .get_mut(rank)
                    .expect("batched peer")
                    .tx
                    .unsent(*seq);
            }
            if sent < batch.len() {
                self.counters.send_blocked += 1;
                self.blocked = true;
                break;
            }
        }
        // Bare acks.
        let owed: Vec<usize> = self
            .peers
            .iter()
            .filter(|(_, p)| p.rx.ack_due())
            .map(|(&r, _)| r)
            .collect();
        for chunk in owed.chunks(self.config.batch.max(1)) {
            let batch: Vec<(usize, u64, Item, bool)> = chunk
                .iter()
                .map(|&r| {
                    let head = Repr {
                        kind: Kind::Ack.into(),
                        cookie: self.cookie,
                        comm: self.config.comm,
                        ..Repr::default()
                    };
                    (
                        r,
                        0,
                        Item {
                            head,
                            payload: 0..0,
                        },
                        false,
                    )
                })
                .collect();
            let sent = self.transmit(buf, &batch)?;
            self.counters.acks_sent += sent as u64;
            if sent < batch.len() {
                self.blocked = true;
                break;
            }
        }
        Ok(())
    }

    /// Writes headers (with each peer's current ack) and sends a batch; returns how many
    /// frames the socket took.
    fn transmit(
        &mut self,
        buf: &[u8],
        batch: &[(usize, u64, Item, bool)],
    ) -> Result<usize, TransportError> {
        let mut heads = Vec::with_capacity(batch.len());
        for (rank, seq, item, _) in batch {
            let p = self.peers.get_mut(rank).expect("batched peer");
            let (ack, sack, credit) = p.rx.ack();
            p.rx.acked();
            let mut head = Repr {
                peer_seq: *seq,
                ack,
                sack,
                credit,
                ..item.head
            };
            if item.payload.end > buf.len() {
                // Data of a buffer that is gone: fill the number with a no-op.
                head.kind = Kind::Nop.into();
                head.payload_len = 0;
            }
            heads.push(head.to_bytes());
        }
        let frames: Vec<(Mac, [IoSlice<'_>; 2])> = batch
            .iter()
            .zip(heads.iter())
            .map(|((rank, _, item, _), h)| {
                let body = if item.payload.end <= buf.len() {
                    &buf[item.payload.clone()]
                } else {
                    &[][..]
                };
                (self.peers[rank].mac, [IoSlice::new(h), IoSlice::new(body)])
            })
            .collect();
        match self.sock.send_batch(&frames) {
            Ok(n) => {
                self.counters.tx_frames += n as u64;

                self.counters.tx_bytes += frames[..n]
                    .iter()
                    .map(|f| (f.1[0].len() + f.1[1].len()) as u64)
                    .sum::<u64>();
                Ok(n)
            }
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS))
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(0)
            }
            Err(e) => Err(io_err(None, e)),
        }
    }

    /// Receives what is there (bounded), checking every frame before use.
    fn receive(
        &mut self,
        buf: &mut [u8],
        mut bcast: Option<&mut Bcast>,
        clock: &dyn Fn() -> u64,
    ) -> Result<(), crate::Error> {
        if let Some(mut ring) = self.ring.take() {
            let result = self.receive_ring(&mut ring, buf, bcast, clock);
            self.ring = Some(ring);
            return result;
        }
        let mut recv = std::mem::replace(&mut self.recv, RecvBatch::new(1, 1));
        let mut result = Ok(());
        for _ in 0..16 {
            match self.sock.recv_batch(&mut recv) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted =>
                {
                    break
                }
                Err(e) => {
                    result = Err(io_err(None, e).into());
                    break;
                }
            }
            let now = clock();
            for (mac, to, truncated, bytes) in recv.frames() {
                if to == Addressed::OtherHost {
                    self.counters.dropped_otherhost += 1;
                    continue;
                }
                if let Err(e) =
                    self.handle_frame(buf, bcast.as_deref_mut(), now, mac, truncated, bytes)
                {
                    result = Err(e);
                    break;
                }
            }
            if result.is_err() {
                break;
            }
            if let Some(b) = bcast.as_deref_mut() {
                self.queue(b)?;
            }
            self.send(buf, clock())?;
        }
        self.recv = recv;
        result
    }

    fn receive_ring(
        &mut self,
        ring: &mut ring::RxRing,
        buf: &mut [u8],
        mut bcast: Option<&mut Bcast>,
        clock: &dyn Fn() -> u64,
    ) -> Result<(), crate::Error> {
        for _ in 0..16 {
            let now = clock();
            let mut result = Ok(());
            let taken = ring.drain(self.config.batch.max(1), |mac, to, cut, bytes| {
                if result.is_err() {
                    return;
                }
                if to == Addressed::OtherHost {
                    self.counters.dropped_otherhost += 1;
                    return;
                }
                result = self.handle_frame(buf, bcast.as_deref_mut(), now, mac, cut, bytes);
            });
            result?;
            if taken == 0 {
                break;
            }
            if let Some(b) = bcast.as_deref_mut() {
                self.queue(b)?;
            }
            self.send(buf, clock())?;
        }
        Ok(())
    }

    fn handle_frame(
        &mut self,
        buf: &mut [u8],
        bcast: Option<&mut Bcast>,
        now: u64,
        mac: Mac,
        truncated: bool,
        bytes: &[u8],
    ) -> Result<(), crate::Error> {
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += bytes.len() as u64;
        let Some(&rank) = self.by_mac.get(&mac) else {
            self.counters.dropped_unknown_peer += 1;
            return Ok(());
        };
        let frame = match Frame::new_checked(bytes) {
            Ok(f) if !truncated => f,
            Ok(_) | Err(WireError::Truncated { .. }) | Err(WireError::BadLength { .. }) => {
                self.counters.dropped_length += 1;
                return Ok(());
            }
            Err(WireError::BadVersion { .. }) => {
                self.counters.dropped_version += 1;
                return Ok(());
            }
        };
        if frame.cookie() != self.cookie {
            self.counters.dropped_cookie += 1;
            return Ok(());
        }
        if frame.comm() != self.config.comm {
            self.counters.dropped_comm += 1;
            return Ok(());
        }
        let head = Repr::parse(&frame)?;
        if let Kind::Unknown(_) = head.kind() {
            self.counters.dropped_kind += 1;
            return Ok(());
        }
        let peer = self.peers.get_mut(&rank).expect("mapped MAC has a peer");
        peer.tx.on_ack(now, head.ack, head.sack, head.credit);
        if head.kind() == Kind::Ack {
            return Ok(());
        }
        match peer.rx.would_accept(head.peer_seq) {
            Accept::Duplicate => {
                peer.rx.accept(head.peer_seq);
                return Ok(());
            }
            Accept::OutOfWindow => {
                self.counters.out_of_window += 1;
                return Ok(());
            }
            Accept::Fresh => {}
        }
        if self.content(buf, bcast, now, rank, &head, frame.payload(), true)? {
            self.peers
                .get_mut(&rank)
                .expect("mapped MAC has a peer")
                .rx
                .accept(head.peer_seq);
        }
        Ok(())
    }

    /// Acts on a frame's content. Returns false when it could not be taken (a later
    /// broadcast's frame with no room to keep it): then it is not acknowledged.
    #[allow(clippy::too_many_arguments)]
    fn content(
        &mut self,
        buf: &mut [u8],
        bcast: Option<&mut Bcast>,
        now: u64,
        rank: usize,
        head: &Repr,
        payload: &[u8],
        fresh: bool,
    ) -> Result<bool, crate::Error> {
        let later = |t: &mut RawEthTransport| {
            if !fresh {
                t.later.push((rank, *head, payload.to_vec()));
                return true;
            }
            if t.later.len() >= t.config.later_frames {
                t.counters.later_dropped += 1;
                return false;
            }
            t.counters.later_kept += 1;
            t.later.push((rank, *head, payload.to_vec()));
            true
        };
        let Some(bcast) = bcast else {
            // No broadcast running: keep anything that may belong to the next one.
            return Ok(match head.kind() {
                Kind::Data | Kind::Credit | Kind::Done if head.bcast_seq >= self.current => {
                    later(self)
                }
                _ => true,
            });
        };
        match head.kind() {
            Kind::Data => {
                let key = (rank, head.bcast_seq, head.lane, head.index);
                let known = self.assembly.contains_key(&key);
                if !known {
                    let h = DataHeader {
                        seq: head.bcast_seq,
                        root: head.root,
                        msize: head.msize,
                        segment: head.segment,
                        lanes: head.lanes,
                        lane: head.lane,
                        index: head.index,
                        len: head.segment_len,
                    };
                    match bcast.place(rank, &h)? {
                        Placement::Into(range) if range.end <= buf.len() => {
                            self.assembly.insert(
                                key,
                                Assembly {
                                    start: range.start,
                                    len: range.len(),
                                    got: 0,
                                    head: h,
                                },
                            );
                        }
                        Placement::Into(range) => {
                            return Err(TransportError::BadFrame {
                                peer: rank,
                                reason: format!(
                                    "segment {} lands at {range:?}, beyond the {}-byte buffer",
                                    h.index,
                                    buf.len()
                                ),
                            }
                            .into())
                        }
                        Placement::Discard => return Ok(true),
                        Placement::Later => return Ok(later(self)),
                    }
                }
                let a = self.assembly.get_mut(&key).expect("inserted above");
                let off = head.offset as usize;
                if off + payload.len() > a.len {
                    self.counters.dropped_length += 1;
                    return Ok(true);
                }
                buf[a.start + off..a.start + off + payload.len()].copy_from_slice(payload);
                a.got += payload.len();
                if a.got >= a.len {
                    let a = self.assembly.remove(&key).expect("present");
                    bcast.handle_data(now, &a.head);
                }
                Ok(true)
            }
            Kind::Credit | Kind::Done => {
                let msg = if head.kind() == Kind::Credit {
                    Message::Credit {
                        seq: head.bcast_seq,
                        lane: head.lane,
                        consumed: head.offset,
                    }
                } else {
                    Message::Done {
                        seq: head.bcast_seq,
                        lane: head.lane,
                    }
                };
                match bcast.handle_message(now, rank, &msg)? {
                    Placement::Later => Ok(later(self)),
                    _ => Ok(true),
                }
            }
            _ => Ok(true),
        }
    }

    /// Offers kept frames of later broadcasts to `bcast` (those still later stay kept).
    fn deliver_later(
        &mut self,
        buf: &mut [u8],
        bcast: &mut Bcast,
        now: u64,
    ) -> Result<(), crate::Error> {
        let kept = std::mem::take(&mut self.later);
        for (rank, head, payload) in kept {
            if head.bcast_seq < bcast.setup().seq {
                continue;
            }
            self.content(buf, Some(bcast), now, rank, &head, &payload, false)?;
        }
        Ok(())
    }
}

fn io_err(peer: Option<usize>, e: io::Error) -> TransportError {
    TransportError::Io {
        peer,
        error: e.to_string(),
    }
}
