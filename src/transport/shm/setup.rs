//! Setting up the shared-memory link between two ranks of one host, on first use and inside
//! the poll loop, never blocking the progress thread (issue 30: a rank connects only to the
//! peers its broadcasts talk to, not to every rank of its host).
//!
//! Every rank listens on an abstract Unix socket (no file, so nothing is left behind; per
//! network namespace, like the TCP port its name is built from), bound when the communicator
//! is created, so a late rank's socket is there: it is waited for.
//!
//! **Dialling** (`dial`): when a broadcast that talks to a peer is posted
//! ([`Link::connect`](crate::transport::Link::connect)), a non-blocking `connect(2)` to the
//! peer's socket, and a hello (job cookie, rank, a probe) written at once. A Unix connection
//! is complete (or refused) when `connect` returns: refused means the peer's socket is gone,
//! and so is the peer (an error for the broadcasts that need it); a full backlog (`EAGAIN`)
//! is retried every round until the connect timeout (at least a minute).
//!
//! **Who connects.** Both ends of a tree edge post the same broadcast, so both dial; the
//! stream the lower rank dialled wins. A rank that accepts a stream from a peer it has no
//! connected stream of its own with adopts it (answers with its hello, and never dials that
//! peer); a higher rank that accepts the lower rank's stream drops its own (the lower rank
//! drops the higher's). A lower rank drops the higher's stream only once its own is connected
//! and its hello written, so when the higher rank sees its stream end without an answer, the
//! lower rank's stream and hello are already in its listener's queue: it accepts them then,
//! and only if there is none is the peer gone.
//!
//! **The handshake** (`step`): once a side has the other's hello, it tries to read the
//! other's probe by cross-memory attach and says how it will read ([`Mode`]); then, unless
//! `PIPECAST_SHM=cma`, it sends its staging ring ([`super::stage`]: one for all its readers,
//! created at the first pair that needs it), its descriptor riding along (`SCM_RIGHTS`). The
//! peer's records are read as they come, into a buffer of the pair's own. A pair whose records
//! are all in becomes a [`Peer`]; messages to a peer whose setup is under way wait in the
//! engine (`ShmLink::queue` serves only ready peers).
//!
//! **Faults**: a stream that ends before the handshake did is a gone peer; an accepted stream
//! that says no valid hello within the connect timeout, claims a rank this one is already set
//! up with, or carries another job's cookie is dropped (a stray). A peer that dialled, or was
//! dialled, and is merely late (its progress thread idle until it posts the broadcast) keeps
//! its socket open: it is waited for, as MPI waits.

use super::ring::{self, Ring};
use super::stage::Stage;
use super::{cma, Peer, ShmLink, ShmMode, RING_BYTES};
pub(super) use crate::transport::gone::Gone;
use crate::transport::{limits, TransportError};
use crate::wire::shm::{Mode, Record, RECORD};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// Connections the listener queues before this rank accepts them (the kernel caps it at
/// `net.core.somaxconn`): every neighbour of an idle rank may dial it at once.
const BACKLOG: libc::c_int = 4096;

/// The abstract socket name of the rank listening on TCP address `tcp` (unique in a network
/// namespace, which is also the scope of abstract names).
pub fn socket_name(tcp: &std::net::SocketAddr) -> String {
    format!("pipecast.{tcp}")
}

pub fn listen(name: &str) -> io::Result<UnixListener> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    let l = UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    // SAFETY: listen(2) on a listening socket this function owns only updates its backlog.
    if unsafe { libc::listen(l.as_raw_fd(), BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(l)
}

/// A pair being set up.
pub(super) enum Pair {
    /// The peer's listener queue was full: `connect` is retried until `deadline`.
    Dialling { deadline: Instant },
    /// A stream, its handshake under way.
    Open(Pending),
}

/// One pair's stream while its handshake runs.
pub(super) struct Pending {
    stream: UnixStream,
    pid: i32,
    /// This rank dialled it (else accepted and adopted it).
    dialled: bool,
    /// The peer's probe: its address in the peer and its bytes.
    hello: Option<(u64, [u8; 16])>,
    /// How this rank reads the peer (sent).
    read: Option<Mode>,
    /// How the peer reads this rank (its `Mode` record).
    write: Option<Mode>,
    /// The peer's ring, mapped (`PIPECAST_SHM=cma`: none expected).
    rx: Option<Ring>,
    /// The peer's ring record came (or none is expected).
    ringed: bool,
    rbuf: Vec<u8>,
    /// A descriptor that came with the peer's bytes (its ring's).
    fd: Option<OwnedFd>,
    /// The stream ended.
    eof: bool,
}

impl Pending {
    fn new(stream: UnixStream, dialled: bool, hello: Option<(u64, [u8; 16])>) -> Pending {
        Pending {
            pid: peer_pid(&stream),
            stream,
            dialled,
            hello,
            read: None,
            write: None,
            rx: None,
            ringed: false,
            rbuf: Vec::new(),
            fd: None,
            eof: false,
        }
    }

    pub(super) fn fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }

    fn ready(&self) -> bool {
        self.read.is_some() && self.write.is_some() && self.ringed
    }

    /// What it waits for, for a failure report.
    pub(super) fn state(&self) -> &'static str {
        match (self.hello.is_some(), self.write.is_some(), self.ringed) {
            (false, _, _) => "waiting for its hello",
            (true, false, _) => "waiting for its mode",
            (true, true, false) => "waiting for its ring",
            _ => "set up",
        }
    }
}

/// An accepted stream whose hello has not arrived yet.
pub(super) struct Knock {
    stream: UnixStream,
    buf: [u8; RECORD],
    got: usize,
    deadline: Instant,
}

impl Knock {
    pub(super) fn fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }
}

impl ShmLink {
    /// Starts setting up a pair with peer `p` unless one is set up, under way, or the peer is
    /// gone: a non-blocking connect and the hello. Out of descriptors is an error naming the
    /// limit; a refused connection makes the peer gone.
    pub(super) fn dial(&mut self, p: usize) -> Result<(), TransportError> {
        if p == self.me
            || self.peers.contains_key(&p)
            || self.gone.contains_key(&p)
            || matches!(self.pairs.get(&p), Some(Pair::Open(_)))
        {
            return Ok(());
        }
        let name = self
            .names
            .get(p)
            .ok_or(TransportError::UnknownPeer { peer: p })?
            .clone();
        match connect_started(&name) {
            Ok(stream) => {
                let mut c = Pending::new(stream, true, None);
                send(p, &c.stream, &self.hello())?;
                self.watch(c.fd())?;
                c.rbuf.reserve(RECORD * 4);
                self.pairs.insert(p, Pair::Open(c));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let deadline = Instant::now() + self.connect_timeout;
                self.pairs.entry(p).or_insert(Pair::Dialling { deadline });
            }
            Err(e) if limits::out_of_descriptors(&e) => {
                return Err(limits::descriptors(
                    format!("shared memory: connect to rank {p} (@{name})"),
                    &e,
                    1,
                    self.held(),
                ));
            }
            Err(e) => {
                tracing::debug!(peer = p, error = %e, "shared memory: connection refused");
                self.pairs.remove(&p);
                self.gone.insert(
                    p,
                    Gone::Refused {
                        what: format!("shared memory: connect to rank {p} (@{name})"),
                        error: e.to_string(),
                    },
                );
            }
        }
        Ok(())
    }

    /// Streams this link holds to peers (set up or under way).
    pub(super) fn held(&self) -> usize {
        self.peers.len() + self.pairs.len() + self.knocks.len()
    }

    /// Moves every pair's setup on as far as what arrived allows, without waiting: accepts,
    /// reads hellos, retries full queues, reads handshake records, and makes pairs whose
    /// records are all in peers.
    pub(super) fn advance(&mut self) -> Result<(), TransportError> {
        self.accept_all()?;
        self.read_knocks()?;
        let now = Instant::now();
        let dialling: Vec<(usize, Instant)> = self
            .pairs
            .iter()
            .filter_map(|(&p, s)| match s {
                Pair::Dialling { deadline } => Some((p, *deadline)),
                Pair::Open(_) => None,
            })
            .collect();
        for (p, deadline) in dialling {
            if now > deadline {
                self.pairs.remove(&p);
                let ms = self.connect_timeout.as_millis() as u64;
                self.gone.insert(p, Gone::Timeout { ms });
                continue;
            }
            self.pairs.remove(&p);
            self.dial(p)?;
            if let Some(Pair::Dialling { deadline: d }) = self.pairs.get_mut(&p) {
                *d = deadline;
            }
        }
        let open: Vec<usize> = self
            .pairs
            .iter()
            .filter(|(_, s)| matches!(s, Pair::Open(_)))
            .map(|(&p, _)| p)
            .collect();
        let mut unanswered = Vec::new();
        for p in open {
            self.step(p, &mut unanswered)?;
        }
        self.settle(unanswered)
    }

    /// Our streams to lower ranks that ended unanswered: a lower rank drops ours only once
    /// its own stream and hello are in our listener's queue, so they are taken from there
    /// first; a peer with none is gone.
    fn settle(&mut self, unanswered: Vec<usize>) -> Result<(), TransportError> {
        if unanswered.is_empty() {
            return Ok(());
        }
        self.accept_all()?;
        self.read_knocks()?;
        for p in unanswered {
            if let Some(Pair::Open(c)) = self.pairs.get(&p) {
                if c.dialled && c.eof {
                    self.pairs.remove(&p);
                    self.gone.insert(p, Gone::Closed);
                }
            }
        }
        Ok(())
    }

    /// Accepts every queued connection without waiting; each must say hello within the
    /// connect timeout.
    fn accept_all(&mut self) -> Result<(), TransportError> {
        loop {
            let Some(l) = &self.listener else {
                return Ok(());
            };
            match l.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    self.watch(stream.as_raw_fd())?;
                    self.knocks.push(Knock {
                        stream,
                        buf: [0; RECORD],
                        got: 0,
                        deadline: Instant::now() + self.connect_timeout,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if limits::out_of_descriptors(&e) => {
                    return Err(limits::descriptors(
                        "shared memory: accept a connection from a rank of this host".into(),
                        &e,
                        1,
                        self.held(),
                    ));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "shared memory: accept failed");
                    return Ok(());
                }
            }
        }
    }

    /// Reads the hellos of accepted streams: a valid one is adopted (or dropped when this
    /// rank's own stream to that peer wins); a stray, a silent one past its deadline, or one
    /// that ended is dropped.
    fn read_knocks(&mut self) -> Result<(), TransportError> {
        let now = Instant::now();
        let mut parked = Vec::new();
        let mut i = 0;
        while i < self.knocks.len() {
            let k = &mut self.knocks[i];
            let mut ended = false;
            while k.got < RECORD {
                match k.stream.read(&mut k.buf[k.got..]) {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(n) => k.got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        ended = true;
                        break;
                    }
                }
            }
            if k.got < RECORD {
                if ended || now > k.deadline {
                    tracing::warn!(
                        rank = self.me,
                        "shared memory: dropped a connection that said no hello"
                    );
                    self.knocks.swap_remove(i);
                } else {
                    i += 1;
                }
                continue;
            }
            let k = self.knocks.swap_remove(i);
            let hello = match Record::decode(&k.buf) {
                Ok(Record::Hello {
                    cookie,
                    rank,
                    probe_addr,
                    probe,
                }) if cookie == self.cookie
                    && (rank as usize) < self.names.len()
                    && rank as usize != self.me =>
                {
                    Some((rank as usize, probe_addr, probe))
                }
                _ => None,
            };
            let Some((rank, probe_addr, probe)) = hello else {
                tracing::warn!(rank = self.me, "shared memory: dropped a stray connection");
                continue;
            };
            if self.peers.get(&rank).is_some_and(|q| q.closing()) {
                // A new stream from a peer whose old one this rank has not read to its end:
                // it waits, accepted, until the old one is over (nothing overtaken).
                parked.push(k);
                continue;
            }
            if !self.adopts(rank) {
                tracing::debug!(
                    rank = self.me,
                    peer = rank,
                    "shared memory: dropped a second stream from a rank (ours wins, or one is set up)"
                );
                continue;
            }
            let mut c = Pending::new(k.stream, false, Some((probe_addr, probe)));
            send(rank, &c.stream, &self.hello())?;
            self.answer(rank, &mut c)?;
            // Replaces (closes) our own stream to a lower rank, or a dial being retried.
            self.pairs.insert(rank, Pair::Open(c));
        }
        self.knocks.extend(parked);
        Ok(())
    }

    /// Whether a stream peer `rank` dialled (with a valid hello) becomes the pair's.
    fn adopts(&self, rank: usize) -> bool {
        if self.peers.contains_key(&rank) || self.gone.contains_key(&rank) {
            return false;
        }
        match self.pairs.get(&rank) {
            None | Some(Pair::Dialling { .. }) => true,
            // Adopted one already: a duplicate.
            Some(Pair::Open(c)) if !c.dialled => false,
            // Ours, answered: the peer adopted it.
            Some(Pair::Open(c)) if c.hello.is_some() => false,
            // Both dialled: the lower rank's stream wins.
            Some(Pair::Open(_)) => rank < self.me,
        }
    }

    /// Once the peer's hello is in: how this rank reads the peer (the probe), said in a
    /// `Mode` record, and this rank's staging ring sent (created at the first pair that
    /// needs it) unless `PIPECAST_SHM=cma`.
    fn answer(&mut self, peer: usize, c: &mut Pending) -> Result<(), TransportError> {
        let me = self.me;
        let (addr, probe) = c.hello.expect("answered after its hello");
        let attach = if c.pid > 0 {
            cma::probe(c.pid, addr, &probe)
        } else {
            Err("the peer's process is not visible here (another PID namespace)".into())
        };
        let mode = match (self.mode, attach) {
            (ShmMode::Ring, _) => {
                tracing::info!(rank = me, peer, "shared memory: ring (PIPECAST_SHM=ring)");
                Mode::Ring
            }
            (_, Ok(())) => Mode::Cma,
            (ShmMode::Cma, Err(why)) => {
                return Err(TransportError::Setup {
                    what: format!("shared memory with rank {peer} (PIPECAST_SHM=cma)"),
                    error: format!("cross-memory attach refused: {why}"),
                })
            }
            (ShmMode::Auto | ShmMode::Off, Err(why)) => {
                tracing::info!(
                    rank = me,
                    peer,
                    "shared memory: two-copy ring, because single-copy cross-memory attach is refused: {why}"
                );
                Mode::Ring
            }
        };
        c.read = Some(mode);
        send(peer, &c.stream, &Record::Mode(mode))?;
        if self.mode == ShmMode::Cma {
            c.ringed = true;
            return Ok(());
        }
        if self.stage.is_none() {
            self.stage = Some(
                Stage::create(RING_BYTES).map_err(|e| TransportError::Setup {
                    what: "shared memory: create the staging ring (memfd_create)".into(),
                    error: limits::memory("its mapping", &e, RING_BYTES as u64),
                })?,
            );
        }
        let stage = self.stage.as_ref().expect("created above");
        let rec = Record::RingFd {
            size: stage.size() as u64,
        }
        .encode();
        match ring::send_with_fd(&c.stream, &rec, stage.ring().fd()) {
            // Gone: found when its stream is read.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                Ok(())
            }
            r => r.map_err(|e| io_err(peer, e)),
        }
    }

    /// Reads what peer `p`'s pair stream brought and handles its handshake records; a pair
    /// whose records are all in becomes a peer (the bytes after them are its first records).
    /// A stream of ours to a lower rank that ended unanswered goes to `unanswered` (the
    /// lower rank's own stream may be in the listener's queue); any other ended stream makes
    /// the peer gone.
    fn step(&mut self, p: usize, unanswered: &mut Vec<usize>) -> Result<(), TransportError> {
        let Some(Pair::Open(mut c)) = self.pairs.remove(&p) else {
            return Ok(());
        };
        let mut chunk = [0u8; RECORD * 4];
        while !c.eof {
            match ring::recv_with_fd(&c.stream, &mut chunk) {
                Ok((0, _)) => c.eof = true,
                Ok((n, fd)) => {
                    c.rbuf.extend_from_slice(&chunk[..n]);
                    if let Some(fd) = fd {
                        if c.fd.is_some() {
                            return Err(bad(p, "it sent a second descriptor".into()));
                        }
                        c.fd = Some(fd);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => c.eof = true,
                Err(e) => return Err(io_err(p, e)),
            }
            if c.rbuf.len() >= RECORD * 64 {
                break; // records after the handshake: read by the peer
            }
        }
        let mut at = 0;
        while !c.ready() && c.rbuf.len() - at >= RECORD {
            let r = Record::decode(&c.rbuf[at..at + RECORD]).map_err(|e| bad(p, e.to_string()))?;
            at += RECORD;
            self.record(p, &mut c, r)?;
        }
        c.rbuf.drain(..at);
        if c.ready() {
            let rest = std::mem::take(&mut c.rbuf);
            let mut peer = Peer::new(
                c.stream,
                c.pid,
                c.read == Some(Mode::Cma),
                c.write == Some(Mode::Cma),
                c.rx,
            );
            peer.rbuf = rest;
            peer.last_used = self.rounds;
            // Segments of broadcasts not posted yet that came on the pair closed before.
            peer.deferred = self.leftover.remove(&p).unwrap_or_default();
            self.peers.insert(p, peer);
            return Ok(());
        }
        if c.eof {
            if c.dialled && c.hello.is_none() && p < self.me {
                unanswered.push(p);
                self.pairs.insert(p, Pair::Open(c));
            } else {
                tracing::debug!(peer = p, "shared memory: stream ended during the setup");
                self.gone.insert(p, Gone::Closed);
            }
            return Ok(());
        }
        self.pairs.insert(p, Pair::Open(c));
        Ok(())
    }

    /// One handshake record from peer `p`, in the order hello (on a stream this rank
    /// dialled), mode, ring.
    fn record(&mut self, p: usize, c: &mut Pending, r: Record) -> Result<(), TransportError> {
        if c.hello.is_none() {
            return match r {
                Record::Hello {
                    cookie,
                    rank,
                    probe_addr,
                    probe,
                } if cookie == self.cookie && rank as usize == p => {
                    c.hello = Some((probe_addr, probe));
                    self.answer(p, c)
                }
                r => Err(bad(p, format!("expected its hello, got {r:?}"))),
            };
        }
        if c.write.is_none() {
            let Record::Mode(m) = r else {
                return Err(bad(p, format!("expected its mode, got {r:?}")));
            };
            if m == Mode::Ring && self.mode == ShmMode::Cma {
                return Err(bad(
                    p,
                    "it reads through a ring, but PIPECAST_SHM=cma here (set PIPECAST_SHM alike at every rank)".into(),
                ));
            }
            c.write = Some(m);
            return Ok(());
        }
        match (r, c.fd.take()) {
            (Record::RingFd { size }, Some(fd)) if (1..=1u64 << 32).contains(&size) => {
                c.rx = Some(Ring::open(fd, size as usize).map_err(|e| {
                    let why = if limits::out_of_memory(&e) {
                        limits::memory("mapping it", &e, size)
                    } else {
                        e.to_string()
                    };
                    bad(p, format!("its ring: {why}"))
                })?);
                c.ringed = true;
                Ok(())
            }
            (r, _) => Err(bad(p, format!("expected its ring, got {r:?}"))),
        }
    }

    pub(super) fn hello(&self) -> Record {
        Record::Hello {
            cookie: self.cookie,
            rank: self.me as u32,
            probe_addr: self.probe.as_ptr() as u64,
            probe: *self.probe,
        }
    }
}

/// Writes one whole record on a fresh pair stream (its first few: always room for them). A
/// peer that closed its end is found when its stream is read.
fn send(peer: usize, stream: &UnixStream, r: &Record) -> Result<(), TransportError> {
    let bytes = r.encode();
    match super::write_some(stream, &bytes).map_err(|e| io_err(peer, e))? {
        Some(n) if n < bytes.len() => Err(io_err(peer, io::ErrorKind::WouldBlock.into())),
        _ => Ok(()),
    }
}

fn bad(peer: usize, reason: String) -> TransportError {
    TransportError::BadFrame { peer, reason }
}

fn io_err(peer: usize, e: io::Error) -> TransportError {
    TransportError::Io {
        peer: Some(peer),
        error: e.to_string(),
    }
}

/// A non-blocking connection to the abstract socket `name`: complete when this returns (a
/// Unix connection is queued at the listener at once), `WouldBlock` when the listener's
/// queue is full, another error when no such socket exists.
fn connect_started(name: &str) -> io::Result<UnixStream> {
    // SAFETY: no pointers; a non-negative result is a new descriptor we own.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    if bytes.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket name @{name} is too long"),
        ));
    }
    // Abstract: a leading NUL, then the name (no terminator).
    for (dst, &b) in addr.sun_path[1..].iter_mut().zip(bytes) {
        *dst = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    loop {
        // SAFETY: `addr` is a live sockaddr_un of which `len` bytes are meaningful.
        let r = unsafe {
            libc::connect(
                stream.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(stream);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // EINPROGRESS does not happen on Unix sockets; retried like a full queue.
            Some(libc::EAGAIN) | Some(libc::EINPROGRESS) => {
                return Err(io::ErrorKind::WouldBlock.into())
            }
            _ => return Err(e),
        }
    }
}

/// The peer's process id as the kernel saw it connect (0 when it is not visible here).
fn peer_pid(stream: &UnixStream) -> i32 {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live `cred`.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r < 0 {
        0
    } else {
        cred.pid
    }
}

/// How long a dial may wait for a full listener queue, and an accepted stream for its hello.
pub(super) fn connect_timeout(timeout: Duration) -> Duration {
    timeout.max(Duration::from_secs(60))
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::set_up;
    use super::*;
    use crate::engine::drive::Engine;
    use crate::engine::{Bcast, Config, Setup};
    use crate::plan::baseline;
    use crate::transport::{Buffer, Buffers, Link};
    use std::collections::BTreeSet;

    const COOKIE: u64 = 7;

    /// `n` links of one "host" (threads of this process), each told every name; `extra`
    /// more names nobody listens on.
    pub(in crate::transport::shm) fn links(
        n: usize,
        extra: usize,
        mode: ShmMode,
    ) -> (Vec<ShmLink>, Vec<String>) {
        let tag: u64 = rand::random();
        let names: Vec<String> = (0..n + extra)
            .map(|r| format!("pipecast.test.lazy.{tag:x}.{r}"))
            .collect();
        let links = (0..n)
            .map(|r| {
                let mut l = ShmLink::bind(r, &names[r], mode, Duration::ZERO).unwrap();
                l.set_peers(names.clone(), COOKIE);
                l
            })
            .collect();
        (links, names)
    }

    fn peers(l: &ShmLink) -> Vec<usize> {
        l.peers.keys().copied().collect()
    }

    fn dial(l: &mut ShmLink, peers: &[usize]) {
        l.connect(peers, Duration::from_secs(60)).unwrap();
    }

    #[test]
    fn only_the_pairs_asked_for_are_set_up_one_stream_each() {
        let (mut ls, _) = links(5, 0, ShmMode::Auto);
        dial(&mut ls[0], &[1]);
        dial(&mut ls[1], &[0]);
        dial(&mut ls[2], &[3]); // 3 never dials: it adopts 2's stream
        dial(&mut ls[4], &[3]); // 3 adopts the higher rank's stream too
        set_up(&mut ls.iter_mut().collect::<Vec<_>>());
        let want: [&[usize]; 5] = [&[1], &[0], &[3], &[2, 4], &[3]];
        for (r, l) in ls.iter().enumerate() {
            assert_eq!(peers(l), want[r], "rank {r}");
            assert_eq!(l.held(), want[r].len(), "rank {r}: one stream per peer");
            assert!(l.gone.is_empty());
        }
        // Ring records went both ways (auto: every rank has a ring); attach works here.
        assert!(ls[3].stage.is_some() && ls[0].stage.is_some());
        assert!(ls[4].peers[&3].rx.is_some());
        assert_eq!(ls[3].describe(), "shm:cma");
        // Nobody asked rank 4's link for anything but 3: no stage needed elsewhere.
        let (mut cma, _) = links(2, 0, ShmMode::Cma);
        dial(&mut cma[1], &[0]);
        set_up(&mut cma.iter_mut().collect::<Vec<_>>());
        assert!(cma[0].stage.is_none() && cma[1].peers[&0].rx.is_none());
    }

    /// Both dial; the higher rank sees the lower one drop its stream before it accepted the
    /// lower rank's own: it takes that from its listener's queue, the peer is not gone.
    #[test]
    fn both_dial_and_the_lower_ranks_stream_wins_even_when_the_higher_sees_its_end_first() {
        let (mut ls, _) = links(2, 0, ShmMode::Auto);
        let (lo, hi) = ls.split_at_mut(1);
        let (lo, hi) = (&mut lo[0], &mut hi[0]);
        dial(hi, &[0]); // the higher rank's stream, queued at rank 0
        dial(lo, &[1]); // rank 0's own, queued at rank 1, hello written
        lo.advance().unwrap(); // accepts 1's stream and drops it: its own wins
        assert!(lo.knocks.is_empty());
        assert!(matches!(lo.pairs.get(&1), Some(Pair::Open(c)) if c.dialled));
        let mut unanswered = Vec::new();
        hi.step(0, &mut unanswered).unwrap(); // its stream ended, unanswered
        assert_eq!(unanswered, [0]);
        hi.settle(unanswered).unwrap();
        assert!(hi.gone.is_empty(), "{:?}", hi.gone);
        assert!(matches!(hi.pairs.get(&0), Some(Pair::Open(c)) if !c.dialled));
        set_up(&mut [lo, hi]);
        assert_eq!((peers(&ls[0]), peers(&ls[1])), (vec![1], vec![0]));
        assert_eq!(ls[0].held() + ls[1].held(), 2);
    }

    /// A broadcast that needs a rank whose socket does not exist fails, naming it; one that
    /// needs a rank that died after it was dialled too, at either end of the pair.
    #[test]
    fn a_refused_or_ended_peer_is_gone_and_fails_the_broadcast_that_needs_it() {
        let (mut ls, _) = links(2, 1, ShmMode::Auto);
        dial(&mut ls[0], &[2]);
        assert!(matches!(ls[0].gone.get(&2), Some(Gone::Refused { .. })));
        let mut ep = Engine::new();
        let mut bufs = Buffers::new();
        let setup = Setup {
            seq: 1,
            root: 0,
            msize: 10,
            segment: 10,
            deep: false,
        };
        let lanes = [baseline::flat(3, 0)];
        let b = Bcast::new(0, &lanes, setup, Config::default(), 0).unwrap();
        bufs.insert(1, Buffer::Owned(vec![1; 10]));
        ep.post(b, bufs.get_mut(&1).unwrap().as_mut_slice(), 0)
            .unwrap();
        let mut failed = None;
        for _ in 0..100 {
            if let Err(e) = ls[0].progress(&mut bufs, &mut ep, &|| 0, Duration::ZERO) {
                failed = Some(e.to_string());
                break;
            }
        }
        let e = failed.expect("the broadcast fails, no hang");
        assert!(e.contains("rank 2") && e.contains("died or failed"), "{e}");

        // Rank 1 dials rank 0, which then dies (its link dropped: listener and queue gone).
        let (mut ls, _) = links(2, 0, ShmMode::Auto);
        dial(&mut ls[1], &[0]);
        drop(ls.remove(0));
        ls[0].advance().unwrap();
        assert!(
            matches!(ls[0].gone.get(&0), Some(Gone::Closed)),
            "{:?}",
            ls[0].gone
        );
        // Rank 0 dials rank 1, which dies before answering.
        let (mut ls, _) = links(2, 0, ShmMode::Auto);
        dial(&mut ls[0], &[1]);
        ls.pop();
        ls[0].advance().unwrap();
        assert!(
            matches!(ls[0].gone.get(&1), Some(Gone::Closed)),
            "{:?}",
            ls[0].gone
        );
        assert!(ls[0].describe_state(0).contains("closed its connection"));
        // A rank that failed (shut down) refuses from then on.
        let (mut ls, _) = links(2, 0, ShmMode::Auto);
        ls[1].shutdown();
        dial(&mut ls[0], &[1]);
        assert!(matches!(ls[0].gone.get(&1), Some(Gone::Refused { .. })));
    }

    /// Connections that are not a rank of this job are dropped without disturbing anything:
    /// another job's cookie, garbage, half a record, a rank that does not exist or is the
    /// listener's own, and one that says nothing (past the connect timeout).
    #[test]
    fn strays_on_the_socket_are_dropped_and_pairs_still_set_up() {
        use std::io::Write;
        let (mut ls, names) = links(2, 0, ShmMode::Auto);
        ls[0].connect_timeout = Duration::from_millis(200);
        let addr = SocketAddr::from_abstract_name(names[0].as_bytes()).unwrap();
        let stray = |bytes: &[u8]| {
            let mut s = UnixStream::connect_addr(&addr).unwrap();
            s.write_all(bytes).unwrap();
            s
        };
        let hello = |cookie: u64, rank: u32| {
            Record::Hello {
                cookie,
                rank,
                probe_addr: 0,
                probe: [0; 16],
            }
            .encode()
        };
        let _held = [
            stray(&hello(COOKIE + 1, 1)),
            stray(&[0xa5; RECORD]),
            stray(&hello(COOKIE, 0)),
            stray(&hello(COOKIE, 99)),
            stray(&[]),
        ];
        drop(stray(&hello(COOKIE, 1)[..20]));
        ls[0].advance().unwrap();
        assert!(ls[0].pairs.is_empty(), "no stray became a pair");
        assert_eq!(ls[0].knocks.len(), 1, "only the silent one waits");
        std::thread::sleep(Duration::from_millis(250));
        ls[0].advance().unwrap();
        assert!(
            ls[0].knocks.is_empty(),
            "the silent one is dropped after the timeout"
        );
        dial(&mut ls[1], &[0]);
        set_up(&mut ls.iter_mut().collect::<Vec<_>>());
        assert_eq!((peers(&ls[0]), peers(&ls[1])), (vec![1], vec![0]));
        assert!(ls[0].gone.is_empty() && ls[1].gone.is_empty());
        // A second stream claiming a rank already set up is a stray too.
        let _dup = stray(&hello(COOKIE, 1));
        ls[0].advance().unwrap();
        assert!(ls[0].knocks.is_empty() && ls[0].pairs.is_empty());
        assert_eq!(peers(&ls[0]), [1]);
    }

    /// A peer that does not serve its link for a while (its application late, its progress
    /// thread idle) is waited for, however long, and set up once it does.
    #[test]
    fn a_late_peer_is_waited_for() {
        let (mut ls, _) = links(2, 0, ShmMode::Ring);
        dial(&mut ls[0], &[1]);
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            ls[0].advance().unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(ls[0].gone.is_empty());
        assert!(ls[0].describe_state(0).contains("waiting for its hello"));
        set_up(&mut ls.iter_mut().collect::<Vec<_>>());
        assert_eq!(peers(&ls[0]), [1]);
        assert_eq!(ls[1].describe(), "shm:ring");
    }

    /// A tree of `n` ranks from a root.
    pub(in crate::transport::shm) type Tree = fn(usize, usize) -> crate::plan::Lane;

    /// Broadcasts `runs` (number, root, tree, bytes), one after another, over `n` links
    /// (threads) keeping at most `max` pairs each; byte-exact at every rank. Once every rank
    /// is through, each keeps serving its link until every link holds at most `max` pairs
    /// (their closes over). Each rank's peers, streams held and counters then.
    pub(in crate::transport::shm) fn run_threads(
        n: usize,
        runs: &[(u64, usize, Tree, usize)],
        mode: ShmMode,
        max: usize,
    ) -> Vec<(Vec<usize>, usize, std::collections::BTreeMap<String, u64>)> {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let (ls, _) = links(n, 0, mode);
        let over = std::sync::Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let threads: Vec<_> = ls
            .into_iter()
            .enumerate()
            .map(|(r, mut link)| {
                link.set_max_connections(max);
                let runs = runs.to_vec();
                let over = over.clone();
                std::thread::spawn(move || {
                    let start = Instant::now();
                    let clock = move || start.elapsed().as_nanos() as u64;
                    let mut ep = Engine::new();
                    let mut bufs = Buffers::new();
                    for (seq, root, tree, len) in runs {
                        let lanes = [tree(n, root)];
                        let setup = Setup {
                            seq,
                            root,
                            msize: len as u64,
                            segment: 65_536,
                            deep: false,
                        };
                        let b = Bcast::new(r, &lanes, setup, Config::default(), clock()).unwrap();
                        link.connect(&b.peers(), Duration::from_secs(60)).unwrap();
                        let data = crate::testing::pattern(len, seq as usize);
                        let buf = if r == root {
                            data.clone()
                        } else {
                            vec![0xee; len]
                        };
                        bufs.insert(seq, Buffer::Owned(buf));
                        ep.post(b, bufs.get_mut(&seq).unwrap().as_mut_slice(), clock())
                            .unwrap();
                        while !ep.is_done(seq) {
                            assert!(start.elapsed() < Duration::from_secs(60), "no end");
                            link.progress(&mut bufs, &mut ep, &clock, Duration::from_millis(5))
                                .unwrap_or_else(|e| panic!("rank {r}, broadcast {seq}: {e}"));
                        }
                        ep.finish(seq);
                        let Some(Buffer::Owned(got)) = bufs.remove(&seq) else {
                            panic!("the buffer is there")
                        };
                        assert!(got == data, "rank {r}, broadcast {seq}: wrong bytes");
                    }
                    over[0].fetch_add(1, SeqCst);
                    // Between broadcasts the progress thread serves a link only when it says
                    // so (`serves_idle`): a bounded one does, so its closes complete. An
                    // unbounded one closes nothing and is served here only to finish setups.
                    // The end: every rank done and, 20 rounds running, no pair closing or
                    // being set up (pairs are closed only while a broadcast runs: those of the
                    // last broadcast stay).
                    let mut quiet_for = 0;
                    let mut quiet_counted = false;
                    while over[0].load(SeqCst) < n || over[1].load(SeqCst) < n {
                        assert!(start.elapsed() < Duration::from_secs(60), "no end");
                        if link.serves_idle() || max == usize::MAX {
                            link.progress(&mut bufs, &mut ep, &clock, Duration::from_millis(1))
                                .unwrap();
                        } else {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        let quiet = max == usize::MAX
                            || (link.pairs.is_empty() && link.peers.values().all(|p| !p.closing()));
                        quiet_for = if quiet { quiet_for + 1 } else { 0 };
                        if !quiet_counted && over[0].load(SeqCst) == n && quiet_for >= 20 {
                            quiet_counted = true;
                            over[1].fetch_add(1, SeqCst);
                        }
                    }
                    (peers(&link), link.held(), link.counters())
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    /// Real broadcasts over six links (threads), several trees and roots, byte-exact at every
    /// rank: each rank ends up set up with exactly its neighbours in those trees.
    #[test]
    fn broadcasts_set_up_only_their_tree_edges_and_are_byte_exact() {
        let n = 6;
        let runs: Vec<(u64, usize, Tree, usize)> = vec![
            (1, 0, baseline::naive_linear, 0),
            (2, 2, baseline::naive_linear, 1),
            (3, 3, baseline::naive_binary, 3 * super::super::CHUNK + 17),
            (4, 0, baseline::naive_linear, 100_003),
            (5, 5, baseline::naive_binary, 1),
        ];
        let mut want: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
        for (_, root, tree, _) in &runs {
            let lane = tree(n, *root);
            for (r, want) in want.iter_mut().enumerate() {
                let b = Bcast::new(
                    r,
                    std::slice::from_ref(&lane),
                    Setup {
                        seq: 1,
                        root: *root,
                        msize: 1,
                        segment: 1,
                        deep: false,
                    },
                    Config::default(),
                    0,
                )
                .unwrap();
                want.extend(b.peers());
            }
        }
        for mode in [ShmMode::Auto, ShmMode::Ring] {
            for (r, (got, held, c)) in run_threads(n, &runs, mode, 16).into_iter().enumerate() {
                let want: Vec<usize> = want[r].iter().copied().collect();
                assert_eq!(
                    got, want,
                    "{mode}: rank {r} set up with its neighbours only"
                );
                assert_eq!(
                    held,
                    want.len(),
                    "{mode}: rank {r}: one stream per neighbour"
                );
                assert_eq!(c["shm_closes"], 0, "{mode}: rank {r}: none closed");
            }
        }
    }
}
