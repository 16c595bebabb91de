//! TCP transport: connections only on the tree edges the broadcasts use, opened when a
//! broadcast that talks to a peer is posted and kept in a bounded cache (`setup.rs`: one
//! stream per pair of ranks carrying both directions, dialled, accepted and closed inside the
//! poll loop, never blocking the progress thread); non-blocking sockets, readiness by `poll(2)`; `TCP_NODELAY`. Each
//! round sends on every writable connection and receives on every readable one with one
//! io_uring submission each (`../uring.rs`), or plain `sendmsg`/`read` without io_uring:
//! segments leave straight from the user buffer and land straight in it.

use super::arrival::Dest;
use super::driver::Driver;
use super::uring::{RecvTarget, Ring};
use super::{slot, Buffers, Link, TransportError};
use crate::engine::Message;
use crate::wire::message::{self, HEADER};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

mod setup;
pub(crate) use setup::connect_started;
pub mod timers;
use setup::{Gone, Pending};
#[cfg(test)]
mod tests;

/// Most bytes read from one connection per readiness round, so one busy peer cannot starve
/// the others (or our own sends).
const READ_BUDGET: usize = 4 << 20;

/// Connections a rank keeps open by default (`PIPECAST_MAX_CONNECTIONS`): above this many,
/// idle ones are closed, least recently used first. A few trees' worth of neighbours (a
/// binary tree has 3, a linear one 2, a binomial one up to log2 of the ranks).
pub const MAX_CONNECTIONS: usize = 16;

/// The most `PIPECAST_MAX_CONNECTIONS` may be.
pub const MAX_CONNECTIONS_LIMIT: usize = 1 << 20;

/// One queued frame: a header (or a link record: hello, goodbye) and an optional payload
/// range of broadcast `seq`'s buffer.
struct Out {
    head: [u8; HEADER],
    /// Bytes of `head` to send (an engine header's [`HEADER`], a hello's 24).
    head_len: usize,
    sent: usize,
    seq: u64,
    payload: Range<usize>,
}

impl Out {
    fn len(&self) -> usize {
        self.head_len + self.payload.len()
    }

    /// A record of the link itself (a hello, a goodbye): no payload.
    fn record(bytes: &[u8]) -> Out {
        let mut head = [0u8; HEADER];
        head[..bytes.len()].copy_from_slice(bytes);
        Out {
            head,
            head_len: bytes.len(),
            sent: 0,
            seq: 0,
            payload: 0..0,
        }
    }
}

enum Rx {
    Header {
        buf: [u8; HEADER],
        got: usize,
    },
    Payload {
        msg: Message,
        dest: Dest,
        len: usize,
        got: usize,
    },
}

/// One direction of a stream (this rank's, or its peer's): see `setup.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// Not begun (no start record yet).
    Unused,
    /// Begun with the start record of this number.
    Open(u64),
    /// Ended with a goodbye (begun or not): nothing more comes on it.
    Closed,
}

/// One stream with a peer, dialled or accepted: both ranks send and read on it.
struct Conn {
    stream: TcpStream,
    /// Frames waiting for (or being written to) the stream: a dialled one's hello first,
    /// this rank's start record before its first message, its goodbye last.
    out: VecDeque<Out>,
    rx: Rx,
    /// This rank dialled it (else accepted it).
    dialed: bool,
    /// This rank's direction on it, and the peer's.
    mine: Dir,
    theirs: Dir,
    /// The peer's end of the stream was read (orderly after its goodbye).
    ended: bool,
    /// Refused, timed out, reset, or ended without a goodbye: nothing more goes through it
    /// (the peer is `gone`: only an error when a broadcast needs it, since a peer that
    /// finished and exited must not fail ranks that no longer talk to it).
    broken: bool,
    /// This rank's goodbye is out and its write side shut.
    shut: bool,
    /// A dialled stream whose connection is under way: until when it may be.
    connecting: Option<Instant>,
    /// When it was last used (the link's round counter): the cache closes the least recently
    /// used idle ones first.
    last_used: u64,
    /// A payload read also asks for the next frame's header, into here: one syscall per
    /// segment instead of two.
    spare: [u8; HEADER],
    /// Bytes written so far (headers and payloads), for the per-rail counters.
    sent_bytes: u64,
}

impl Conn {
    fn new(stream: TcpStream, dialed: bool) -> Conn {
        Conn {
            stream,
            out: VecDeque::new(),
            rx: Rx::Header {
                buf: [0; HEADER],
                got: 0,
            },
            dialed,
            mine: Dir::Unused,
            theirs: Dir::Unused,
            ended: false,
            broken: false,
            shut: false,
            connecting: None,
            last_used: 0,
            spare: [0; HEADER],
            sent_bytes: 0,
        }
    }

    /// Idle both ways: nothing queued, nothing being connected, nothing half read. Closing
    /// this rank's direction then loses nothing (what was written is in the kernel, which
    /// delivers it before the goodbye).
    fn idle(&self) -> bool {
        self.out.is_empty()
            && self.connecting.is_none()
            && !self.broken
            && matches!(self.rx, Rx::Header { got: 0, .. })
    }

    /// Has output to write now: established, its write side not shut, nothing failed.
    fn writes(&self) -> bool {
        !self.out.is_empty() && self.connecting.is_none() && !self.broken && !self.shut
    }

    /// Neither direction ended: a stream that counts against the cache's bound, and one
    /// this rank may still begin its direction on.
    fn live(&self) -> bool {
        !self.broken && self.mine != Dir::Closed && self.theirs != Dir::Closed
    }

    /// Read now: established, not ended, and the peer's direction on it is not one that
    /// must wait for an older one (`in_epoch`: the number of the peer's direction read now).
    fn reads(&self, in_epoch: u64) -> bool {
        !self.broken
            && !self.ended
            && self.connecting.is_none()
            && match self.theirs {
                Dir::Open(e) => e == in_epoch,
                _ => true,
            }
    }
}

/// A connection's peer and rail (the NIC index both ends use: rail 0 is the listener of
/// [`TcpTransport::bind`], rail i ≥ 1 that of the i-th [`TcpTransport::bind_rails`] address).
type Key = (usize, usize);

/// A stream: its peer, rail and number (this link's count of streams made).
type ConnKey = (usize, usize, u64);

/// What a rank keeps per peer and rail: its directions to the peer are numbered (each begins
/// on one stream and ends there with a goodbye), and the peer's are read in their order, so
/// that moving a direction to another stream never reorders messages.
#[derive(Debug, Default)]
struct Pair {
    /// The number of this rank's next direction to the peer.
    out_epoch: u64,
    /// The number of the peer's direction read now (its older ones ended).
    in_epoch: u64,
    /// The stream this rank's open direction is on.
    out: Option<u64>,
}

/// This rank's TCP endpoint.
pub struct TcpTransport {
    me: usize,
    /// One per rail (NIC): `listeners[0]` is [`TcpTransport::bind`]'s (none after shutdown).
    listeners: Vec<TcpListener>,
    /// Where `listeners[0]` listens.
    addr: SocketAddr,
    /// Each peer's identity in hellos (`ids[rank]`; [`NewPeer::id`](super::NewPeer)): the
    /// job cookie and rank for the setup's peers, their own for peers added later
    /// ([`Link::grow`]); and this rank's. Both dialled at once, the lower identity's stream
    /// wins (the lower rank's within one job).
    ids: Vec<(u64, u64)>,
    my_id: (u64, u64),
    /// Every rank's listening address on each rail: `addrs[rail][rank]`.
    addrs: Vec<Vec<SocketAddr>>,
    /// How many rails the job connects (1 unless every rank published several NICs).
    rails: usize,
    /// The streams with peers (dialled or accepted), by peer, rail and number.
    conns: BTreeMap<ConnKey, Conn>,
    /// Per peer and rail: the numbering of directions, and the stream this rank sends on.
    pairs: BTreeMap<Key, Pair>,
    /// Accepted connections whose hello has not arrived yet.
    pending: Vec<Pending>,
    /// The peers this link serves ([`Link::connect`]: the router gives it the other hosts').
    serves: BTreeSet<usize>,
    /// Peers found gone (refused, reset, ended without a goodbye): an error for a broadcast
    /// that needs them.
    gone: BTreeMap<usize, Gone>,
    /// Streams whose peer said goodbye: this rank ends its own direction on them too.
    farewells: BTreeSet<ConnKey>,
    /// The peers this link serves that the broadcasts in flight talk to, increasing, as of
    /// the driver's `in_flight` count `busy_at` (recomputed, and dialled, only when it moves).
    busy: Vec<usize>,
    busy_at: Option<u64>,
    /// Streams kept at most (idle ones beyond are closed, least recently used first).
    max_conns: usize,
    /// How long a connection may take to be established, and an accepted one to say hello.
    connect_timeout: Duration,
    /// Rounds so far (the clock of `Conn::last_used`), and streams made so far.
    rounds: u64,
    made: u64,
    /// Bytes sent by closed streams, per rail (the counters).
    retired_sent: Vec<u64>,
    /// Idle streams this rank closed so far (the cache's bound).
    closed_idle: u64,
    /// Directions this rank moved onto a stream the peer dialled (both dialled at once).
    moved: u64,
    scratch: Vec<u8>,
    /// Batched sends; `None` when io_uring is unavailable or not wanted (`bind_with`).
    ring: Option<Ring>,
    /// The progress thread's wake descriptor, polled beside the connections.
    wake: Option<std::os::fd::RawFd>,
    /// TCP keepalive: a peer's host that stops answering is found within about this long (a
    /// dead process closes its connections at once).
    keepalive: Option<Duration>,
    /// Every connection's minimum RTO and delayed-ack ceiling (`timers`; `None`: the
    /// kernel's).
    rto_min: Option<Duration>,
}

impl TcpTransport {
    /// Listens on `ip` (any port), through io_uring where the kernel has it: see
    /// [`TcpTransport::bind_with`].
    pub fn bind(me: usize, ip: &str) -> Result<TcpTransport, TransportError> {
        TcpTransport::bind_with(me, ip, true)
    }

    /// Listens on `ip` (any port). Its address goes into the bootstrap blob. With `io_uring`
    /// (the communicator's `PIPECAST_IO_URING`), sends and receives are batched through
    /// io_uring where the kernel offers it; without, plain `sendmsg`/`readv`.
    pub fn bind_with(me: usize, ip: &str, io_uring: bool) -> Result<TcpTransport, TransportError> {
        let listener = setup::listen(ip).map_err(|e| TransportError::Setup {
            what: format!("listen on {ip}"),
            error: e.to_string(),
        })?;
        let addr = listener.local_addr().map_err(|e| TransportError::Setup {
            what: format!("listen on {ip}"),
            error: e.to_string(),
        })?;
        // Where discarded payloads are read: a refused allocation fails the setup, named, and
        // every rank learns it in the setup's agreement.
        let scratch = super::limits::buffer(|| "the TCP link's read buffer".into(), 64 << 10)?;
        let ring = if !io_uring {
            tracing::info!("io_uring off (PIPECAST_IO_URING=0): using sendmsg");
            None
        } else {
            match Ring::new() {
                Ok(r) => {
                    tracing::debug!("io_uring: batched sends and receives");
                    Some(r)
                }
                Err(e) => {
                    tracing::info!(error = %e, "io_uring unavailable: using sendmsg");
                    None
                }
            }
        };
        Ok(TcpTransport {
            me,
            listeners: vec![listener],
            addr,
            ids: Vec::new(),
            my_id: (0, me as u64),
            addrs: Vec::new(),
            rails: 1,
            conns: BTreeMap::new(),
            pairs: BTreeMap::new(),
            pending: Vec::new(),
            serves: BTreeSet::new(),
            gone: BTreeMap::new(),
            farewells: BTreeSet::new(),
            busy: Vec::new(),
            busy_at: None,
            max_conns: MAX_CONNECTIONS,
            connect_timeout: Duration::from_secs(60),
            rounds: 0,
            made: 0,
            retired_sent: Vec::new(),
            closed_idle: 0,
            moved: 0,
            scratch,
            ring,
            wake: None,
            keepalive: None,
            rto_min: None,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Also listens on each of `ips`, the addresses of this rank's NICs 1, 2, … (rails 1, 2,
    /// …; rail 0 is [`TcpTransport::bind`]'s), and returns where: for the bootstrap blob.
    pub fn bind_rails(
        &mut self,
        ips: &[std::net::IpAddr],
    ) -> Result<Vec<SocketAddr>, TransportError> {
        for ip in ips {
            let listener = setup::listen(&ip.to_string()).map_err(|e| TransportError::Setup {
                what: format!("listen on {ip} (rail {})", self.listeners.len()),
                error: e.to_string(),
            })?;
            self.listeners.push(listener);
        }
        Ok(self.listeners[1..]
            .iter()
            .map(|l| l.local_addr().expect("bound listener"))
            .collect())
    }

    /// Turns on TCP keepalive for this rank's connections, probing an idle connection after
    /// a third of `within` and giving up after about `within`: how a host that died (or whose
    /// link went down) is found. A live process that is late (computing, even stopped) keeps
    /// answering from its kernel, so it is waited for.
    pub fn set_keepalive(&mut self, within: Duration) {
        self.keepalive = Some(within);
    }

    /// Every connection's minimum retransmission timeout (`PIPECAST_TCP_RTO_MIN_US`; its
    /// delayed-ack ceiling half of it): a lost segment waits this long, not Linux's 200 ms
    /// ([`timers`]). `None`, the default, leaves the kernel's. Set before connections open
    /// (open ones keep theirs).
    pub fn set_rto_min(&mut self, rto_min: Option<Duration>) {
        self.rto_min = rto_min;
    }

    /// Keeps at most `n` connections (at least 1; `PIPECAST_MAX_CONNECTIONS`): above that,
    /// idle ones are closed, least recently used first. Connections the broadcasts in
    /// flight use are never closed, so a broadcast that talks to more peers holds more.
    pub fn set_max_connections(&mut self, n: usize) {
        self.max_conns = n.max(1);
    }

    /// Every rank's listening address (from the bootstrap) and the job cookie.
    pub fn set_peers(&mut self, addrs: Vec<SocketAddr>, cookie: u64) {
        self.ids = (0..addrs.len() as u64).map(|r| (cookie, r)).collect();
        self.my_id = (cookie, self.me as u64);
        self.addrs = vec![addrs];
        self.rails = 1;
    }

    /// Every rank's NICs beyond the first (`rails[rank][i]` listens for rail i + 1, from the
    /// bootstrap). The job connects as many rails as every rank has (this one included), the
    /// same number at every rank since every rank reads the same blobs; a lane planned on a
    /// rail beyond them travels on rail 0 (right data, one NIC's speed).
    pub fn set_rails(&mut self, rails: &[Vec<SocketAddr>]) {
        let common = rails
            .iter()
            .map(|r| r.len() + 1)
            .min()
            .unwrap_or(1)
            .min(self.listeners.len());
        self.addrs.truncate(1);
        for rail in 1..common {
            self.addrs.push(rails.iter().map(|r| r[rail - 1]).collect());
        }
        self.rails = common;
    }

    /// How many rails (NICs) the connections use.
    pub fn rails(&self) -> usize {
        self.rails
    }

    /// One io_uring submission sends on every writable connection.
    fn write_batch(&mut self, peers: &[ConnKey], bufs: &Buffers) -> Result<(), TransportError> {
        let mut sent_to = Vec::with_capacity(peers.len());
        let mut batch = Vec::with_capacity(peers.len());
        for &p in peers {
            let c = &self.conns[&p];
            if c.writes() {
                sent_to.push(p);
                batch.push((c.stream.as_raw_fd(), slices(c, bufs)));
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        let ring = self.ring.as_mut().expect("checked by the caller");
        let results = match ring.send_batch(&batch) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "io_uring failed: falling back to sendmsg");
                self.ring = None;
                return Ok(()); // the next round sends with sendmsg
            }
        };
        drop(batch);
        for (key, r) in sent_to.into_iter().zip(results) {
            match r {
                Ok(0) => self.write_failed(key, io::ErrorKind::BrokenPipe.into())?,
                Ok(n) => advance(self.conns.get_mut(&key).expect("connected"), n),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => self.write_failed(key, e)?,
            }
        }
        Ok(())
    }

    /// A write on `key` failed: a reset or broken pipe is its peer gone (an error for the
    /// broadcasts that need it: `check_closed`), anything else an error.
    fn write_failed(&mut self, key: ConnKey, e: io::Error) -> Result<(), TransportError> {
        match io_error(key.0, e) {
            TransportError::Closed { .. } => {
                if let Some(c) = self.conns.get_mut(&key) {
                    c.broken = true;
                }
                self.gone.entry(key.0).or_insert(Gone::Closed);
                Ok(())
            }
            e => Err(e),
        }
    }

    /// Fails if a peer that a broadcast in flight waits for is gone (its stream ended without
    /// a goodbye, or its listener refused this rank).
    fn check_closed(&self, driver: &dyn Driver) -> Result<(), TransportError> {
        if self.gone.is_empty() {
            return Ok(());
        }
        match driver
            .waiting_for()
            .into_iter()
            .find_map(|p| Some((p, self.gone.get(&p)?)))
        {
            Some((peer, why)) => Err(why.error(peer)),
            None => Ok(()),
        }
    }

    /// Queues what the driver hands out to this link's peers; a peer without a connection
    /// gets one started (its messages wait in its queue meanwhile).
    fn queue(&mut self, driver: &mut dyn Driver, now: u64) -> Result<(), TransportError> {
        loop {
            let serves = &self.serves;
            let Some(t) = driver.next(now, &|p| serves.contains(&p)) else {
                break;
            };
            // Lane i of a plan on rails leaves through NIC i (its data, and its credits back).
            let rail = Some(t.rail).filter(|&r| r < self.rails);
            let key = (t.to, rail.unwrap_or(0));
            if let Some(why) = self.gone.get(&t.to) {
                return Err(why.error(t.to));
            }
            let at = self.sender(key)?;
            if let Some(why) = self.gone.get(&t.to) {
                return Err(why.error(t.to));
            }
            let rounds = self.rounds;
            let conn = at
                .and_then(|k| self.conns.get_mut(&k))
                .ok_or(TransportError::UnknownPeer { peer: t.to })?;
            conn.last_used = rounds;
            // The queue holds headers and ranges (the window's worth per child): a refused
            // allocation is the named memory error, not an abort.
            conn.out.try_reserve(1).map_err(|_| {
                super::limits::heap(
                    &format!("queue a message of broadcast {} to rank {}", t.seq, t.to),
                    ((conn.out.len() + 1) * std::mem::size_of::<Out>()) as u64,
                )
            })?;
            conn.out.push_back(Out {
                head: message::emit(&t.message),
                head_len: HEADER,
                sent: 0,
                seq: t.seq,
                payload: t.payload,
            });
        }
        Ok(())
    }

    fn write(&mut self, key: ConnKey, bufs: &Buffers) -> Result<(), TransportError> {
        let conn = self.conns.get_mut(&key).expect("connected");
        if !conn.writes() {
            return Ok(());
        }
        while !conn.out.is_empty() {
            let r = send_vectored(&conn.stream, &slices(conn, bufs));
            match r {
                Ok(0) => return self.write_failed(key, io::ErrorKind::BrokenPipe.into()),
                Ok(n) => advance(conn, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.write_failed(key, e),
            }
        }
        Ok(())
    }

    fn read(
        &mut self,
        key: ConnKey,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
    ) -> Result<(), crate::Error> {
        let peer = key.0;
        let mut budget = READ_BUDGET;
        loop {
            let conn = self.conns.get_mut(&key).expect("a stream");
            let pair = self.pairs.entry((key.0, key.1)).or_default();
            if !conn.reads(pair.in_epoch) || budget == 0 {
                return Ok(());
            }
            let r = match &mut conn.rx {
                Rx::Header { buf: head, got } => conn.stream.read(&mut head[*got..]),
                Rx::Payload {
                    dest: Dest::Buffer { seq, range },
                    got,
                    ..
                } => {
                    let dst = slot(bufs, peer, *seq, range.start + *got..range.end)?;
                    conn.stream.read_vectored(&mut [
                        IoSliceMut::new(dst),
                        IoSliceMut::new(&mut conn.spare),
                    ])
                }
                Rx::Payload {
                    dest: Dest::Hold(v),
                    got,
                    ..
                } => conn.stream.read_vectored(&mut [
                    IoSliceMut::new(&mut v[*got..]),
                    IoSliceMut::new(&mut conn.spare),
                ]),
                Rx::Payload {
                    dest: Dest::Discard,
                    len,
                    got,
                    ..
                } => {
                    let n = (*len - *got).min(self.scratch.len());
                    conn.stream.read(&mut self.scratch[..n])
                }
            };
            match r {
                Ok(0) => return eof(peer, conn, &mut self.gone).map_err(Into::into),
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    let at = At {
                        key,
                        in_epoch: &mut pair.in_epoch,
                        farewells: &mut self.farewells,
                    };
                    received(at, conn, n, driver, bufs, now)?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return read_error(peer, conn, e, &mut self.gone).map_err(Into::into),
            }
        }
    }

    /// Reads from every accepted stream in `active` with one io_uring submission per round,
    /// until none has more (or a round limit, so sends get their turn).
    fn read_batch(
        &mut self,
        mut active: Vec<ConnKey>,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
    ) -> Result<(), crate::Error> {
        for _round in 0..64 {
            let (conns, pairs) = (&self.conns, &self.pairs);
            active.retain(|p| {
                let in_epoch = pairs.get(&(p.0, p.1)).map_or(0, |s| s.in_epoch);
                conns[p].reads(in_epoch)
            });
            // Discarded payloads share one scratch buffer: read those one by one.
            let (discard, batched): (Vec<ConnKey>, Vec<ConnKey>) = active.iter().partition(|p| {
                matches!(
                    self.conns[p].rx,
                    Rx::Payload {
                        dest: Dest::Discard,
                        ..
                    }
                )
            });
            for p in discard {
                self.read(p, bufs, driver, clock())?;
            }
            if batched.is_empty() {
                break;
            }
            let mut entries: Vec<RecvTarget> = Vec::with_capacity(batched.len());
            for p in &batched {
                let c = self.conns.get_mut(p).expect("a stream");
                let fd = c.stream.as_raw_fd();
                entries.push(match &mut c.rx {
                    Rx::Header { buf: head, got } => (
                        fd,
                        [
                            (head[*got..].as_mut_ptr(), HEADER - *got),
                            (std::ptr::null_mut(), 0),
                        ],
                    ),
                    Rx::Payload {
                        dest: Dest::Buffer { seq, range },
                        got,
                        ..
                    } => {
                        let dst = slot(bufs, p.0, *seq, range.start + *got..range.end)?;
                        (
                            fd,
                            [
                                (dst.as_mut_ptr(), dst.len()),
                                (c.spare.as_mut_ptr(), HEADER),
                            ],
                        )
                    }
                    Rx::Payload {
                        dest: Dest::Hold(v),
                        got,
                        ..
                    } => (
                        fd,
                        [
                            (v[*got..].as_mut_ptr(), v.len() - *got),
                            (c.spare.as_mut_ptr(), HEADER),
                        ],
                    ),
                    Rx::Payload {
                        dest: Dest::Discard,
                        ..
                    } => unreachable!("partitioned out"),
                });
            }
            let ring = self.ring.as_mut().expect("checked by the caller");
            // SAFETY: each target is a connection's own header, spare or hold buffer (the map
            // is not changed during the call) or the payload range the driver routed for
            // that connection inside its broadcast's buffer, which `bufs` (borrowed mutably
            // and not touched meanwhile) keeps alive; ranges of different connections are
            // different segments, hence disjoint.
            let results = match unsafe { ring.recv_batch(&entries) } {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "io_uring failed: falling back to read");
                    self.ring = None;
                    for p in batched {
                        self.read(p, bufs, driver, clock())?;
                    }
                    return Ok(());
                }
            };
            let now = clock();
            let mut next = Vec::with_capacity(batched.len());
            for (key, r) in batched.into_iter().zip(results) {
                let conn = self.conns.get_mut(&key).expect("a stream");
                let pair = self.pairs.entry((key.0, key.1)).or_default();
                let peer = key.0;
                match r {
                    Ok(0) => eof(peer, conn, &mut self.gone)?,
                    Ok(n) => {
                        let at = At {
                            key,
                            in_epoch: &mut pair.in_epoch,
                            farewells: &mut self.farewells,
                        };
                        received(at, conn, n, driver, bufs, now)?;
                        next.push(key);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => next.push(key),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => read_error(peer, conn, e, &mut self.gone)?,
                }
            }
            self.queue(driver, now)?;
            self.check_closed(driver)?;
            active = next;
        }
        Ok(())
    }
}

impl TcpTransport {
    /// Keeps `busy` (the peers the broadcasts in flight talk to) as of the driver's set in
    /// flight: when that set changed since the last round, the streams of the peers that were
    /// busy are marked used now (the cache's recency: a busy stream is never closed, so it
    /// was last used when it stopped being busy), and the new ones are dialled (`connect`
    /// did at posting; this also reopens one closed meanwhile). Nothing per round otherwise.
    fn follow(&mut self, driver: &dyn Driver) -> Result<(), TransportError> {
        let at = driver.in_flight();
        if self.busy_at == Some(at) {
            return Ok(());
        }
        self.stamp_busy();
        let serves = &self.serves;
        self.busy = driver
            .talks_to()
            .into_iter()
            .filter(|p| serves.contains(p))
            .collect();
        self.busy_at = Some(at);
        for i in 0..self.busy.len() {
            for rail in 0..self.rails {
                self.ensure((self.busy[i], rail))?;
            }
        }
        self.stamp_busy();
        Ok(())
    }

    /// Marks the streams with the busy peers used in this round.
    fn stamp_busy(&mut self) {
        for &p in &self.busy {
            for (_, c) in self.conns.range_mut((p, 0, 0)..=(p, usize::MAX, u64::MAX)) {
                c.last_used = self.rounds;
            }
        }
    }
}

/// What a pollfd in a round stands for.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Listener(usize),
    Pending(usize),
    Conn(ConnKey),
    Wake,
}

impl Link for TcpTransport {
    fn describe(&self) -> String {
        match self.rails {
            1 => "tcp".into(),
            k => format!("tcp:{k}rails"),
        }
    }

    fn capabilities(&self) -> super::Capabilities {
        super::Capabilities {
            rails: self.rails,
            ..super::Capabilities::default()
        }
    }

    /// Serves `peers` from now on and starts a connection to each one not connected yet, on
    /// every rail, without waiting: the poll loop finishes them (`progress`), and messages to
    /// a peer whose connection is under way wait in its queue. A connection not established
    /// within `timeout` (at least a minute) fails the broadcasts that need its peer.
    fn connect(&mut self, peers: &[usize], timeout: Duration) -> Result<(), TransportError> {
        self.connect_timeout = timeout.max(Duration::from_secs(60));
        let known = self.addrs.first().map_or(0, Vec::len);
        let me = self.me;
        for &p in peers.iter().filter(|&&p| p != me) {
            if p >= known {
                return Err(TransportError::UnknownPeer { peer: p });
            }
            self.serves.insert(p);
            self.busy_at = None; // what it serves changed: recomputed next round
            for rail in 0..self.rails {
                self.ensure((p, rail))?;
            }
        }
        Ok(())
    }

    fn set_wake(&mut self, fd: std::os::fd::RawFd) {
        self.wake = Some(fd);
    }

    /// One round: connect to the peers the broadcasts talk to, queue what the driver hands
    /// out, close idle connections over the bound, wait up to `wait` for readiness, then
    /// accept, finish connections, write and read what can be (delivering arrivals to the
    /// driver).
    fn progress(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> crate::Result<()> {
        self.rounds += 1;
        self.follow(driver)?;
        self.queue(driver, clock())?;
        self.check_closed(driver)?;
        self.trim();
        let mut slots: Vec<Slot> = Vec::new();
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut add = |slot: Slot, fd: std::os::fd::RawFd, events: i16| {
            slots.push(slot);
            fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            });
        };
        for (rail, l) in self.listeners.iter().enumerate().take(self.rails) {
            add(Slot::Listener(rail), l.as_raw_fd(), libc::POLLIN);
        }
        for (i, p) in self.pending.iter().enumerate() {
            add(Slot::Pending(i), p.stream.as_raw_fd(), libc::POLLIN);
        }
        for (&key, c) in &self.conns {
            let in_epoch = self.pairs.get(&(key.0, key.1)).map_or(0, |p| p.in_epoch);
            let mut events = 0;
            if c.reads(in_epoch) {
                events |= libc::POLLIN;
            }
            if c.connecting.is_some() || c.writes() {
                events |= libc::POLLOUT;
            }
            // A stream with nothing to wait for is left out: one whose ends are both shut
            // would report POLLHUP forever.
            if events != 0 && !c.broken {
                add(Slot::Conn(key), c.stream.as_raw_fd(), events);
            }
        }
        // Last: the wake descriptor (its readiness only ends the wait).
        add(Slot::Wake, self.wake.unwrap_or(-1), libc::POLLIN);
        // A broadcast that this round's sends completed must not wait for the network.
        let wait = driver.may_wait(wait);
        let wait = self.pending_wait(wait);
        // To the nanosecond: a wait under 1 ms is a wait (`transport::poll`), not a spin.
        if let Err(e) = crate::transport::poll::poll(&mut fds, wait) {
            return Err(TransportError::Io {
                peer: None,
                error: e.to_string(),
            }
            .into());
        }
        let ready = |i: usize, mask: i16| fds[i].revents & mask != 0;
        let any = libc::POLLIN | libc::POLLOUT | libc::POLLHUP | libc::POLLERR;
        let mut readable = Vec::new();
        let mut pending = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            match *slot {
                Slot::Listener(rail) if ready(i, any) => self.accept_all(rail)?,
                Slot::Pending(p) if ready(i, any) => pending.push(p),
                Slot::Conn(key) if ready(i, any) => {
                    let established = self.watch(key, fds[i].revents);
                    if established && ready(i, libc::POLLIN | libc::POLLHUP | libc::POLLERR) {
                        readable.push(key);
                    }
                }
                _ => {}
            }
        }
        self.hellos(&pending);
        if self.ring.is_some() {
            self.read_batch(readable, bufs, driver, clock)?;
        } else {
            for key in readable {
                self.read(key, bufs, driver, clock())?;
                self.queue(driver, clock())?;
                self.check_closed(driver)?;
            }
        }
        // Written: every stream with output queued (ready for it, or queued during this
        // round: worth an optimistic try).
        let writable: Vec<ConnKey> = self
            .conns
            .iter()
            .filter(|(_, c)| c.writes())
            .map(|(&k, _)| k)
            .collect();
        if self.ring.is_some() {
            self.write_batch(&writable, bufs)?;
        } else {
            for key in writable {
                self.write(key, bufs)?;
            }
        }
        self.reap();
        self.check_closed(driver)?;
        Ok(())
    }

    /// With several rails, the bytes sent through each (`rail0.bytes_sent`, …): how a test
    /// sees that each lane left through its own NIC. None with one NIC.
    fn counters(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        if self.rails > 1 {
            for rail in 0..self.rails {
                let retired = self.retired_sent.get(rail).copied().unwrap_or(0);
                out.insert(format!("rail{rail}.bytes_sent"), retired);
            }
            for (&(_, rail, _), c) in &self.conns {
                *out.entry(format!("rail{rail}.bytes_sent")).or_default() += c.sent_bytes;
            }
        }
        out
    }

    /// The per-connection state for a failure report (idle connections are left out).
    fn describe_state(&self, _now: u64) -> String {
        let live = self.conns.values().filter(|c| c.live()).count();
        let mut out = format!(
            "tcp: {live} connections, {} closing, {} awaiting a hello",
            self.conns.len() - live,
            self.pending.len(),
        );
        for (&(peer, rail, _), c) in &self.conns {
            if c.idle() && c.live() {
                continue;
            }
            out += &format!(
                "\n  rank {peer} rail {rail}: {} messages queued, connecting {}, mid-payload {}, \
                 this rank's direction {:?}, the peer's {:?}, ended {}, broken {}",
                c.out.len(),
                c.connecting.is_some(),
                matches!(c.rx, Rx::Payload { .. }),
                c.mine,
                c.theirs,
                c.ended,
                c.broken
            );
        }
        for (peer, why) in &self.gone {
            out += &format!("\n  rank {peer}: {}", why.error(*peer));
        }
        out
    }

    /// Closes every connection and the listeners: peers see end-of-file (or a refused or
    /// reset connection) and fail their broadcast at once.
    fn can_grow(&self) -> bool {
        self.rails == 1 && !self.listeners.is_empty()
    }

    /// Appends `peers` (reached on rail 0; a link on several rails cannot grow).
    fn grow(&mut self, peers: &[super::NewPeer]) -> Result<(), TransportError> {
        if !self.can_grow() {
            return Err(TransportError::Setup {
                what: format!("add peers to {}", super::Link::describe(self)),
                error: "a TCP link on several rails, or shut down, cannot add peers".into(),
            });
        }
        let addrs = self.addrs.first_mut().ok_or(TransportError::Setup {
            what: "add peers to tcp".into(),
            error: "the link has no peers set".into(),
        })?;
        addrs.extend(peers.iter().map(|p| p.addr));
        self.ids.extend(peers.iter().map(|p| p.id));
        Ok(())
    }

    fn shutdown(&mut self) {
        for c in self.conns.values() {
            c.stream.shutdown(std::net::Shutdown::Both).ok();
        }
        self.conns.clear();
        self.pairs.clear();
        self.pending.clear();
        self.listeners.clear();
    }
}

/// The peer closed its end: orderly after its goodbye; else fine between frames (it may have
/// finished, and is an error only for a broadcast that needs it), an error inside one.
fn eof(
    peer: usize,
    conn: &mut Conn,
    gone: &mut BTreeMap<usize, Gone>,
) -> Result<(), TransportError> {
    conn.ended = true;
    if conn.theirs == Dir::Closed {
        return Ok(());
    }
    conn.broken = true;
    gone.entry(peer).or_insert(Gone::Closed);
    if matches!(conn.rx, Rx::Header { got: 0, .. }) {
        Ok(())
    } else {
        Err(TransportError::Closed { peer })
    }
}

/// A read failed: a reset is the peer gone (see [`eof`]), anything else an error.
fn read_error(
    peer: usize,
    conn: &mut Conn,
    e: io::Error,
    gone: &mut BTreeMap<usize, Gone>,
) -> Result<(), TransportError> {
    match io_error(peer, e) {
        TransportError::Closed { .. } => eof(peer, conn, gone),
        e => Err(e),
    }
}

/// Where a stream's bytes are read: its key, the number of the peer's direction read now,
/// and the streams whose peer said goodbye.
struct At<'a> {
    key: ConnKey,
    in_epoch: &'a mut u64,
    farewells: &'a mut BTreeSet<ConnKey>,
}

/// `n` more bytes of `conn`'s current header or payload arrived (for a payload, bytes beyond
/// it went into `conn.spare`: the start of the next header).
fn received(
    at: At<'_>,
    conn: &mut Conn,
    n: usize,
    driver: &mut dyn Driver,
    bufs: &mut Buffers,
    now: u64,
) -> Result<(), crate::Error> {
    let peer = at.key.0;
    match &mut conn.rx {
        Rx::Header { got, .. } => {
            *got += n;
            if *got == HEADER {
                header_done(at, conn, driver, bufs, now)?;
            }
        }
        Rx::Payload { len, got, .. } => {
            let extra = (*got + n).saturating_sub(*len);
            *got = (*got + n).min(*len);
            if *got == *len {
                let done = std::mem::replace(
                    &mut conn.rx,
                    Rx::Header {
                        buf: conn.spare,
                        got: extra,
                    },
                );
                if let Rx::Payload { msg, dest, .. } = done {
                    dest.landed(driver, bufs, now, peer, msg)?;
                }
                if extra == HEADER {
                    header_done(at, conn, driver, bufs, now)?;
                }
            }
        }
    }
    Ok(())
}

/// `conn.rx` holds a whole header: decode it and hand it to the driver; or it is the start
/// of the peer's direction on the stream (read on only once its older ones ended), or its
/// goodbye (nothing may follow but the end of the stream; the peer's next direction is read
/// from then on, and this rank ends its own on the stream too).
fn header_done(
    at: At<'_>,
    conn: &mut Conn,
    driver: &mut dyn Driver,
    bufs: &mut Buffers,
    now: u64,
) -> Result<(), crate::Error> {
    use crate::wire::hello;
    let peer = at.key.0;
    let Rx::Header { buf: head, .. } = conn.rx else {
        return Ok(());
    };
    conn.rx = Rx::Header {
        buf: [0; HEADER],
        got: 0,
    };
    let bad = |reason: &str| {
        Err(TransportError::BadFrame {
            peer,
            reason: reason.into(),
        }
        .into())
    };
    if conn.theirs == Dir::Closed {
        return bad("it sent more after its goodbye");
    }
    if hello::is_goodbye(&head) {
        if let Dir::Open(e) = conn.theirs {
            *at.in_epoch = e + 1;
        }
        conn.theirs = Dir::Closed;
        at.farewells.insert(at.key);
        return Ok(());
    }
    if let Some(e) = hello::parse_start(&head) {
        if conn.theirs != Dir::Unused || e < *at.in_epoch {
            return bad("a stream's start out of order");
        }
        conn.theirs = Dir::Open(e);
        return Ok(());
    }
    if conn.theirs != Dir::Open(*at.in_epoch) {
        return bad("a message before its stream's start");
    }
    let msg = super::decode_header(peer, &head)?;
    offer(peer, conn, msg, driver, bufs, now)
}

/// Hands a freshly read header to the driver and sets up the read of its payload.
fn offer(
    peer: usize,
    conn: &mut Conn,
    msg: Message,
    driver: &mut dyn Driver,
    bufs: &mut Buffers,
    now: u64,
) -> Result<(), crate::Error> {
    let Message::Data(h) = msg else {
        return driver.landed(now, peer, &msg);
    };
    let len = h.len as usize;
    // At most a segment to hold: the driver checked it.
    let dest = Dest::of(driver, peer, &h, len)?;
    if len == 0 {
        return dest.landed(driver, bufs, now, peer, msg);
    }
    conn.rx = Rx::Payload {
        msg,
        dest,
        len,
        got: 0,
    };
    Ok(())
}

/// The iovecs of up to 32 queued frames of `conn`: headers, and payloads straight from their
/// broadcasts' buffers (a broadcast that is over sends nothing more: see `queue`).
fn slices<'a>(conn: &'a Conn, bufs: &'a Buffers) -> Vec<IoSlice<'a>> {
    let mut slices = Vec::with_capacity(64);
    for o in conn.out.iter().take(32) {
        let body: &[u8] = if o.payload.is_empty() {
            &[]
        } else {
            bufs.get(&o.seq)
                .and_then(|b| b.as_slice().get(o.payload.clone()))
                .expect("a queued segment's broadcast is in flight")
        };
        let head = &o.head[..o.head_len];
        if o.sent < o.head_len {
            slices.push(IoSlice::new(&head[o.sent..]));
            if !body.is_empty() {
                slices.push(IoSlice::new(body));
            }
        } else {
            slices.push(IoSlice::new(&body[o.sent - o.head_len..]));
        }
    }
    slices
}

/// Drops the first `n` sent bytes from `conn`'s queue.
fn advance(conn: &mut Conn, mut n: usize) {
    conn.sent_bytes += n as u64;
    while n > 0 {
        let o = conn.out.front_mut().expect("sent bytes belong to a frame");
        let left = o.len() - o.sent;
        if n >= left {
            n -= left;
            conn.out.pop_front();
        } else {
            o.sent += n;
            n = 0;
        }
    }
}

/// `writev` that never raises SIGPIPE (a library must not kill its host process when a peer
/// dies): `sendmsg(2)` with `MSG_NOSIGNAL`.
fn send_vectored(stream: &TcpStream, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is guaranteed ABI-compatible with iovec on Unix.
    msg.msg_iov = slices.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = slices.len() as _;
    // SAFETY: the fd is open (owned by `stream`), `msg` points to `slices.len()` iovecs that
    // borrow live buffers for the duration of the call, and sendmsg only reads them.
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn io_error(peer: usize, e: io::Error) -> TransportError {
    match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            TransportError::Closed { peer }
        }
        _ => TransportError::Io {
            peer: Some(peer),
            error: e.to_string(),
        },
    }
}
