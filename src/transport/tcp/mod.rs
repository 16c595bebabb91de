//! TCP transport: one connection per pair of ranks that share a tree edge, set up lazily and
//! cached (`setup.rs`); non-blocking sockets, readiness by `poll(2)`; `TCP_NODELAY`. Each
//! round sends on every writable connection and receives on every readable one with one
//! io_uring submission each (`../uring.rs`), or plain `sendmsg`/`read` without io_uring:
//! segments leave straight from the user buffer and land straight in it.

use super::arrival::Dest;
use super::driver::Driver;
use super::uring::{RecvTarget, Ring};
use super::{slot, Buffers, Link, TransportError};
use crate::engine::Message;
use crate::wire::message::{self, HEADER};
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::time::Duration;

mod setup;
pub(crate) use setup::connect_started;
#[cfg(test)]
mod tests;

/// Most bytes read from one connection per readiness round, so one busy peer cannot starve
/// the others (or our own sends).
const READ_BUDGET: usize = 4 << 20;

/// One queued frame: a header and an optional payload range of broadcast `seq`'s buffer.
struct Out {
    head: [u8; HEADER],
    sent: usize,
    seq: u64,
    payload: Range<usize>,
}

impl Out {
    fn len(&self) -> usize {
        HEADER + self.payload.len()
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

struct Conn {
    stream: TcpStream,
    out: VecDeque<Out>,
    rx: Rx,
    /// The peer closed its end. Only an error when a broadcast needs this peer: a peer that
    /// finished (and exited) must not fail ranks that no longer talk to it.
    closed: bool,
    /// A payload read also asks for the next frame's header, into here: one syscall per
    /// segment instead of two.
    spare: [u8; HEADER],
    /// Bytes written so far (headers and payloads), for the per-rail counters.
    sent_bytes: u64,
}

/// A connection's peer and rail (the NIC index both ends use: rail 0 is the listener of
/// [`TcpTransport::bind`], rail i ≥ 1 that of the i-th [`TcpTransport::bind_rails`] address).
type Key = (usize, usize);

/// This rank's TCP endpoint.
pub struct TcpTransport {
    me: usize,
    /// One per rail (NIC): `listeners[0]` is [`TcpTransport::bind`]'s.
    listeners: Vec<TcpListener>,
    cookie: u64,
    /// Every rank's listening address on each rail: `addrs[rail][rank]`.
    addrs: Vec<Vec<SocketAddr>>,
    /// How many rails the job connects (1 unless every rank published several NICs).
    rails: usize,
    conns: BTreeMap<Key, Conn>,
    scratch: Vec<u8>,
    /// Batched sends; `None` when io_uring is unavailable or not wanted (`bind_with`).
    ring: Option<Ring>,
    /// The progress thread's wake descriptor, polled beside the connections.
    wake: Option<std::os::fd::RawFd>,
    /// TCP keepalive: a peer's host that stops answering is found within about this long (a
    /// dead process closes its connections at once).
    keepalive: Option<Duration>,
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
        let listener = TcpListener::bind((ip, 0)).map_err(|e| TransportError::Setup {
            what: format!("listen on {ip}"),
            error: e.to_string(),
        })?;
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
            cookie: 0,
            addrs: Vec::new(),
            rails: 1,
            conns: BTreeMap::new(),
            scratch: vec![0; 64 << 10],
            ring,
            wake: None,
            keepalive: None,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listeners[0].local_addr().expect("bound listener")
    }

    /// Also listens on each of `ips`, the addresses of this rank's NICs 1, 2, … (rails 1, 2,
    /// …; rail 0 is [`TcpTransport::bind`]'s), and returns where: for the bootstrap blob.
    pub fn bind_rails(
        &mut self,
        ips: &[std::net::IpAddr],
    ) -> Result<Vec<SocketAddr>, TransportError> {
        for ip in ips {
            let listener = TcpListener::bind((*ip, 0)).map_err(|e| TransportError::Setup {
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

    /// Every rank's listening address (from the bootstrap) and the job cookie.
    pub fn set_peers(&mut self, addrs: Vec<SocketAddr>, cookie: u64) {
        self.addrs = vec![addrs];
        self.rails = 1;
        self.cookie = cookie;
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
    fn write_batch(&mut self, peers: &[Key], bufs: &Buffers) -> Result<(), TransportError> {
        let mut sent_to = Vec::with_capacity(peers.len());
        let mut batch = Vec::with_capacity(peers.len());
        for &p in peers {
            let c = &self.conns[&p];
            if !c.out.is_empty() {
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
                Ok(0) => return Err(TransportError::Closed { peer: key.0 }),
                Ok(n) => advance(self.conns.get_mut(&key).expect("connected"), n),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(io_error(key.0, e)),
            }
        }
        Ok(())
    }

    /// Fails if a peer that a broadcast in flight waits for has closed its connection.
    fn check_closed(&self, driver: &dyn Driver) -> Result<(), TransportError> {
        if !self.conns.values().any(|c| c.closed) {
            return Ok(());
        }
        super::check_closed(driver, |p| {
            self.conns.range((p, 0)..(p + 1, 0)).any(|(_, c)| c.closed)
        })
    }

    fn queue(&mut self, driver: &mut dyn Driver, now: u64) -> Result<(), TransportError> {
        loop {
            let conns = &self.conns;
            let Some(t) = driver.next(now, &|p| conns.contains_key(&(p, 0))) else {
                break;
            };
            // Lane i of a plan on rails leaves through NIC i (its data, and its credits back).
            let rail = Some(t.rail).filter(|&r| r < self.rails);
            let conn = self
                .conns
                .get_mut(&(t.to, rail.unwrap_or(0)))
                .ok_or(TransportError::UnknownPeer { peer: t.to })?;
            if conn.closed {
                return Err(TransportError::Closed { peer: t.to });
            }
            conn.out.push_back(Out {
                head: message::emit(&t.message),
                sent: 0,
                seq: t.seq,
                payload: t.payload,
            });
        }
        Ok(())
    }

    fn write(&mut self, key: Key, bufs: &Buffers) -> Result<(), TransportError> {
        let peer = key.0;
        let conn = self.conns.get_mut(&key).expect("connected");
        while !conn.out.is_empty() {
            let r = send_vectored(&conn.stream, &slices(conn, bufs));
            match r {
                Ok(0) => return Err(TransportError::Closed { peer }),
                Ok(n) => advance(conn, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(peer, e)),
            }
        }
        Ok(())
    }

    fn read(
        &mut self,
        key: Key,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
    ) -> Result<(), crate::Error> {
        let peer = key.0;
        let mut budget = READ_BUDGET;
        loop {
            let conn = self.conns.get_mut(&key).expect("connected");
            if conn.closed || budget == 0 {
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
                Ok(0) => return eof(peer, conn).map_err(Into::into),
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    received(peer, conn, n, driver, bufs, now)?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(peer, e).into()),
            }
        }
    }

    /// Reads from every connection in `peers` with one io_uring submission per round, until
    /// none has more (or a round limit, so sends get their turn).
    fn read_batch(
        &mut self,
        mut active: Vec<Key>,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
    ) -> Result<(), crate::Error> {
        for _round in 0..64 {
            active.retain(|p| !self.conns[p].closed);
            // Discarded payloads share one scratch buffer: read those one by one.
            let (discard, batched): (Vec<Key>, Vec<Key>) = active.iter().partition(|p| {
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
                let c = self.conns.get_mut(p).expect("connected");
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
                let conn = self.conns.get_mut(&key).expect("connected");
                let peer = key.0;
                match r {
                    Ok(0) => eof(peer, conn)?,
                    Ok(n) => {
                        received(peer, conn, n, driver, bufs, now)?;
                        next.push(key);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => next.push(key),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(io_error(peer, e).into()),
                }
            }
            self.queue(driver, now)?;
            self.check_closed(driver)?;
            active = next;
        }
        Ok(())
    }
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

    fn connect(&mut self, peers: &[usize], timeout: Duration) -> Result<(), TransportError> {
        self.connect_all(peers, timeout)
    }

    fn set_wake(&mut self, fd: std::os::fd::RawFd) {
        self.wake = Some(fd);
    }

    /// One round: queue what the driver hands out, wait up to `wait` for readiness, then
    /// write and read what can be (delivering arrivals to the driver).
    fn progress(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> crate::Result<()> {
        self.queue(driver, clock())?;
        self.check_closed(driver)?;
        let peers: Vec<Key> = self.conns.keys().copied().collect();
        let mut fds: Vec<libc::pollfd> = peers
            .iter()
            .map(|p| {
                let c = &self.conns[p];
                let mut events = 0;
                if !c.closed {
                    events |= libc::POLLIN;
                }
                if !c.out.is_empty() {
                    events |= libc::POLLOUT;
                }
                libc::pollfd {
                    // A closed connection would report POLLHUP forever: leave it out.
                    fd: if c.closed && c.out.is_empty() {
                        -1
                    } else {
                        c.stream.as_raw_fd()
                    },
                    events,
                    revents: 0,
                }
            })
            .collect();
        // Last: the wake descriptor (its readiness only ends the wait).
        fds.push(libc::pollfd {
            fd: self.wake.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        });
        // A broadcast that this round's sends completed must not wait for the network.
        let wait = driver.may_wait(wait);
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a live, exclusively borrowed array of `fds.len()` pollfd structs
        // whose descriptors stay open (owned by `self.conns`, and the wake descriptor by the
        // progress thread) for the duration of the call; -1 entries are ignored.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(TransportError::Io {
                    peer: None,
                    error: e.to_string(),
                }
                .into());
            }
            return Ok(());
        }
        let mut writable = Vec::new();
        let readable: Vec<Key> = peers
            .iter()
            .enumerate()
            .filter(|(i, _)| fds[*i].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
            .map(|(_, &p)| p)
            .collect();
        if self.ring.is_some() {
            self.read_batch(readable, bufs, driver, clock)?;
        } else {
            for peer in readable {
                self.read(peer, bufs, driver, clock())?;
                self.queue(driver, clock())?;
                self.check_closed(driver)?;
            }
        }
        for (i, &peer) in peers.iter().enumerate() {
            // Ready for output, or output queued during this round (worth an optimistic try).
            let asked = fds[i].events & libc::POLLOUT != 0;
            let ready = fds[i].revents & libc::POLLOUT != 0;
            if !self.conns[&peer].out.is_empty() && (ready || !asked) {
                writable.push(peer);
            }
        }
        if self.ring.is_some() {
            self.write_batch(&writable, bufs)?;
        } else {
            for peer in writable {
                self.write(peer, bufs)?;
            }
        }
        Ok(())
    }

    /// With several rails, the bytes sent through each (`rail0.bytes_sent`, …): how a test
    /// sees that each lane left through its own NIC. None with one NIC.
    fn counters(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        if self.rails > 1 {
            for rail in 0..self.rails {
                out.insert(format!("rail{rail}.bytes_sent"), 0);
            }
            for (&(_, rail), c) in &self.conns {
                *out.entry(format!("rail{rail}.bytes_sent")).or_default() += c.sent_bytes;
            }
        }
        out
    }

    /// The per-connection state for a failure report (idle connections are left out).
    fn describe_state(&self, _now: u64) -> String {
        let mut out = String::from("tcp");
        for (&(peer, rail), c) in &self.conns {
            if c.out.is_empty() && !c.closed && matches!(c.rx, Rx::Header { got: 0, .. }) {
                continue;
            }
            out += &format!(
                "\n  peer {peer} rail {rail}: {} messages queued, mid-payload {}, closed {}",
                c.out.len(),
                matches!(c.rx, Rx::Payload { .. }),
                c.closed
            );
        }
        out
    }

    /// Closes every connection: peers see end-of-file and fail their broadcast at once.
    fn shutdown(&mut self) {
        for c in self.conns.values() {
            c.stream.shutdown(std::net::Shutdown::Both).ok();
        }
        self.conns.clear();
    }
}

/// The peer closed its end: fine between frames (it may have finished), an error inside one.
fn eof(peer: usize, conn: &mut Conn) -> Result<(), TransportError> {
    if matches!(conn.rx, Rx::Header { got: 0, .. }) {
        conn.closed = true;
        Ok(())
    } else {
        Err(TransportError::Closed { peer })
    }
}

/// `n` more bytes of `conn`'s current header or payload arrived (for a payload, bytes beyond
/// it went into `conn.spare`: the start of the next header).
fn received(
    peer: usize,
    conn: &mut Conn,
    n: usize,
    driver: &mut dyn Driver,
    bufs: &mut Buffers,
    now: u64,
) -> Result<(), crate::Error> {
    match &mut conn.rx {
        Rx::Header { got, .. } => {
            *got += n;
            if *got == HEADER {
                header_done(peer, conn, driver, bufs, now)?;
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
                    header_done(peer, conn, driver, bufs, now)?;
                }
            }
        }
    }
    Ok(())
}

/// `conn.rx` holds a whole header: decode it and hand it to the driver.
fn header_done(
    peer: usize,
    conn: &mut Conn,
    driver: &mut dyn Driver,
    bufs: &mut Buffers,
    now: u64,
) -> Result<(), crate::Error> {
    let Rx::Header { buf: head, .. } = &conn.rx else {
        return Ok(());
    };
    let msg = super::decode_header(peer, head)?;
    conn.rx = Rx::Header {
        buf: [0; HEADER],
        got: 0,
    };
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
        let head = &o.head[..];
        if o.sent < HEADER {
            slices.push(IoSlice::new(&head[o.sent..]));
            if !body.is_empty() {
                slices.push(IoSlice::new(body));
            }
        } else {
            slices.push(IoSlice::new(&body[o.sent - HEADER..]));
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
