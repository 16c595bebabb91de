//! Connections, made and closed inside the poll loop, never blocking the progress thread.
//!
//! **One stream per direction.** A rank sends to a peer only on a stream it opened itself,
//! and reads only the streams peers opened to it. Two ranks that share a tree edge (data one
//! way, credits the other) each open one, at the same time or not: there is nothing to
//! resolve when both connect at once, and each stream has one writer, so closing it while
//! idle needs no answer from the other side.
//!
//! **Opening** (`dial`): when a broadcast that talks to a peer is posted
//! ([`Link::connect`](crate::transport::Link::connect) from the progress thread, and every
//! time the set of broadcasts in flight changes, for
//! [`Driver::talks_to`](crate::transport::Driver::talks_to)), a non-blocking
//! `connect(2)` starts and the stream's first 24 bytes, a hello (magic, job cookie, rank:
//! [`wire::hello`](crate::wire::hello)), wait in its queue with the messages to that peer
//! until the socket turns writable. Connecting early to every peer a broadcast talks to keeps
//! the fault rules of a full mesh: a dead peer's listener refuses (or its end of a stream
//! closes) and the broadcasts that need it fail naming it; a late peer's listener is open
//! (bound before the agreement), so its kernel accepts and this rank waits for it.
//!
//! **Accepting** (`accept_all`, `hellos`): a readable listener is accepted without waiting;
//! the hello is read as it arrives; a connection that says something else, or nothing
//! within the connect timeout, is closed without stalling anything else.
//!
//! **Closing** (`trim`): above [`max_conns`](super::TcpTransport::set_max_connections)
//! opened streams, the least recently used idle ones (nothing queued, no broadcast in flight
//! that talks to the peer, established) end with a goodbye record and the end of the stream.
//! Whatever was written before is in the kernel and arrives before the end; the reader sees
//! goodbye, then end-of-file, and knows the peer is not gone. A peer that said goodbye gets
//! this rank's idle stream to it closed too. A peer's streams are read oldest first, so a
//! reopened stream never overtakes the end of the one it replaced.

use super::{Conn, InKey, Key, Out, Rx, TcpTransport};
use crate::transport::limits;
use crate::transport::TransportError;
use crate::wire::message::HEADER;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::wire::hello;

/// Connections a listener queues before this rank accepts them (the kernel caps it at
/// `net.core.somaxconn`): a rank many peers connect to at once (a flat tree's root) must not
/// make them retry.
const BACKLOG: libc::c_int = 4096;

/// A non-blocking listener on `ip` (any port).
pub(super) fn listen(ip: &str) -> io::Result<TcpListener> {
    let l = TcpListener::bind((ip, 0))?;
    l.set_nonblocking(true)?;
    // SAFETY: listen(2) on a listening socket this function owns only updates its backlog.
    if unsafe { libc::listen(l.as_raw_fd(), BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(l)
}

/// Why a peer is gone: an error for the broadcasts that need it.
#[derive(Debug, Clone)]
pub(super) enum Gone {
    /// Its stream ended without a goodbye, or was reset.
    Closed,
    /// Its listener refused this rank's connection (or another error ended it).
    Refused { addr: SocketAddr, error: String },
    /// The connection was not established in time.
    Timeout { ms: u64 },
}

impl Gone {
    pub(super) fn error(&self, peer: usize) -> TransportError {
        match self {
            Gone::Closed => TransportError::Closed { peer },
            Gone::Refused { addr, error } => TransportError::Setup {
                what: format!("connect to rank {peer} at {addr}"),
                error: format!("{error}: it died or failed (see its own error)"),
            },
            Gone::Timeout { ms } => TransportError::ConnectTimeout {
                waiting: vec![peer],
                ms: *ms,
            },
        }
    }
}

/// An accepted connection whose hello has not arrived yet.
pub(super) struct Pending {
    pub(super) stream: TcpStream,
    from: SocketAddr,
    rail: usize,
    hello: [u8; hello::LEN],
    got: usize,
    deadline: Instant,
}

impl TcpTransport {
    /// Starts a connection to `key`'s peer and rail unless there is one (or the peer is
    /// gone): non-blocking, its hello queued first. Out of descriptors is an error naming
    /// the limit; a refused connection makes the peer gone.
    pub(super) fn dial(&mut self, key: Key) -> Result<(), TransportError> {
        let (p, rail) = key;
        if self.conns.contains_key(&key) || self.gone.contains_key(&p) || p == self.me {
            return Ok(());
        }
        let addr = *self
            .addrs
            .get(rail)
            .and_then(|a| a.get(p))
            .ok_or(TransportError::UnknownPeer { peer: p })?;
        // On rails, from this rank's own address on the rail (its NIC `rail`), so that a
        // connection's source is the NIC it belongs to, not whatever the route picks.
        let local = (self.rails > 1)
            .then(|| self.listeners.get(rail).and_then(|l| l.local_addr().ok()))
            .flatten()
            .map(|a| a.ip())
            .filter(|ip| !ip.is_unspecified() && ip.is_ipv4() == addr.is_ipv4());
        let what = || match rail {
            0 => format!("connect to rank {p} at {addr}"),
            _ => format!("connect to rank {p} at {addr} (rail {rail})"),
        };
        let stream = match connect_started(local, addr).and_then(|s| self.options(&s).map(|()| s)) {
            Ok(s) => s,
            Err(e) if limits::out_of_descriptors(&e) => {
                return Err(limits::descriptors(what(), &e, 1, self.held()));
            }
            Err(e) => {
                tracing::debug!(peer = p, %addr, error = %e, "tcp: connection refused");
                self.gone.insert(
                    p,
                    Gone::Refused {
                        addr,
                        error: e.to_string(),
                    },
                );
                return Ok(());
            }
        };
        let mut conn = Conn::new(stream);
        conn.connecting = Some(Instant::now() + self.connect_timeout);
        conn.last_used = self.rounds;
        conn.out.push_back(Out::record(&hello::emit(
            hello::TCP_LINK,
            self.cookie,
            self.me as u64,
        )));
        self.conns.insert(key, conn);
        Ok(())
    }

    /// The connections this link holds (opened, accepted, awaiting a hello, closing).
    pub(super) fn held(&self) -> usize {
        self.conns.len() + self.ins.len() + self.pending.len() + self.leaving.len()
    }

    /// `TCP_NODELAY`, and keepalive if asked for.
    fn options(&self, stream: &TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)?;
        if let Some(within) = self.keepalive {
            keepalive(stream, within)?;
        }
        Ok(())
    }

    /// An opened stream's socket reported readiness (`revents`): a connection under way is
    /// established or failed; an established one turned readable, which only its end (or a
    /// reset) does.
    pub(super) fn watch(&mut self, key: Key, revents: i16) -> Result<(), TransportError> {
        let peer = key.0;
        let addr = self.addrs.get(key.1).and_then(|a| a.get(peer)).copied();
        let Some(conn) = self.conns.get_mut(&key) else {
            return Ok(());
        };
        if conn.connecting.is_some() {
            let failed = match conn.stream.take_error() {
                Ok(Some(e)) | Err(e) => Some(e),
                Ok(None) if revents & (libc::POLLERR | libc::POLLHUP) != 0 => {
                    Some(io::Error::from(io::ErrorKind::ConnectionRefused))
                }
                Ok(None) => None,
            };
            match failed {
                Some(e) => {
                    conn.closed = true;
                    let addr = addr.unwrap_or(self.addr);
                    self.gone.entry(peer).or_insert(Gone::Refused {
                        addr,
                        error: e.to_string(),
                    });
                }
                None => conn.connecting = None,
            }
            return Ok(());
        }
        if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0 {
            return Ok(());
        }
        // The one thing a reader writes back: a goodbye record asking this rank to close the
        // stream when idle (its bound on accepted streams), read into the unused header.
        let Rx::Header { buf, got } = &mut conn.rx else {
            unreachable!("an opened stream never reads a payload")
        };
        match conn.stream.read(&mut buf[*got..]) {
            Ok(0) => {
                conn.closed = true;
                self.gone.entry(peer).or_insert(Gone::Closed);
                Ok(())
            }
            Ok(n) => {
                *got += n;
                if *got < HEADER {
                    return Ok(());
                }
                *got = 0;
                if !hello::is_goodbye(&buf[..]) {
                    return Err(TransportError::BadFrame {
                        peer,
                        reason: "it wrote on a connection this rank opened something else than a close request (each carries one direction)".into(),
                    });
                }
                tracing::debug!(
                    rank = self.me,
                    peer,
                    "tcp: asked to close an idle connection"
                );
                self.farewells.insert(key);
                Ok(())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(())
            }
            Err(_) => {
                conn.closed = true;
                self.gone.entry(peer).or_insert(Gone::Closed);
                Ok(())
            }
        }
    }

    /// Accepts every connection waiting on `rail`'s listener, without waiting.
    pub(super) fn accept_all(&mut self, rail: usize) -> Result<(), TransportError> {
        loop {
            let Some(l) = self.listeners.get(rail) else {
                return Ok(());
            };
            match l.accept() {
                Ok((stream, from)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    self.pending.push(Pending {
                        stream,
                        from,
                        rail,
                        hello: [0; hello::LEN],
                        got: 0,
                        deadline: Instant::now() + self.connect_timeout,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(e) if limits::out_of_descriptors(&e) => {
                    return Err(limits::descriptors(
                        "accept a connection from a peer".into(),
                        &e,
                        1,
                        self.held(),
                    ));
                }
                Err(e) => {
                    return Err(TransportError::Io {
                        peer: None,
                        error: format!("accept: {e}"),
                    })
                }
            }
        }
    }

    /// Reads the hellos of the accepted connections at `ready` (indices into `pending`) and
    /// drops those past their deadline: a connection that opens with this job's hello from a
    /// rank of the job becomes that rank's stream; any other is closed.
    pub(super) fn hellos(&mut self, ready: &[usize]) {
        let now = Instant::now();
        let known = self.addrs.first().map_or(0, Vec::len);
        let mut keep = Vec::with_capacity(self.pending.len());
        for (i, mut p) in std::mem::take(&mut self.pending).into_iter().enumerate() {
            if ready.contains(&i) {
                match p.stream.read(&mut p.hello[p.got..]) {
                    Ok(0) => {
                        tracing::debug!(from = %p.from, "tcp: a connection closed before its hello");
                        continue;
                    }
                    Ok(n) => p.got += n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) => {}
                    Err(_) => continue,
                }
            }
            if p.got < hello::LEN {
                if now < p.deadline {
                    keep.push(p);
                } else {
                    tracing::warn!(from = %p.from, "tcp: closed a connection that sent no hello");
                }
                continue;
            }
            let words = hello::parse(hello::TCP_LINK, &p.hello)
                .filter(|&(cookie, _)| cookie == self.cookie)
                .map(|(_, rank)| usize::try_from(rank).unwrap_or(usize::MAX))
                .filter(|&rank| rank < known && rank != self.me);
            let Some(rank) = words else {
                tracing::warn!(from = %p.from, "tcp: refused a connection without this job's hello");
                continue;
            };
            if self.options(&p.stream).is_err() {
                continue;
            }
            self.accepted += 1;
            let key: InKey = (rank, p.rail, self.accepted);
            let mut conn = Conn::new(p.stream);
            conn.last_used = self.rounds;
            self.ins.insert(key, conn);
        }
        self.pending = keep;
    }

    /// How long this round may wait, given `wait`: no longer than until the first deadline of
    /// a connection under way or awaiting its hello.
    pub(super) fn pending_wait(&mut self, wait: Duration) -> Duration {
        let now = Instant::now();
        let mut first: Option<Instant> = self.pending.iter().map(|p| p.deadline).min();
        for (&(peer, _), c) in self.conns.iter_mut() {
            match c.connecting {
                Some(d) if d <= now => {
                    c.closed = true;
                    c.connecting = None;
                    self.gone.entry(peer).or_insert(Gone::Timeout {
                        ms: self.connect_timeout.as_millis() as u64,
                    });
                }
                Some(d) => first = Some(first.map_or(d, |f| f.min(d))),
                None => {}
            }
        }
        match first {
            Some(d) => wait.min(d.saturating_duration_since(now) + Duration::from_millis(1)),
            None => wait,
        }
    }

    /// Closes idle opened streams: those whose peer said goodbye, and above the bound the
    /// least recently used (none that a broadcast in flight talks to, `busy`).
    pub(super) fn trim(&mut self) {
        let busy = std::mem::take(&mut self.busy);
        self.trim_except(&busy);
        self.busy = busy;
    }

    fn trim_except(&mut self, busy: &[usize]) {
        let closable = |k: &Key, c: &Conn| c.idle() && busy.binary_search(&k.0).is_err();
        // A farewell waits for this rank's stream to turn idle (or to go).
        let farewells = std::mem::take(&mut self.farewells);
        for key in farewells {
            match self.conns.get(&key) {
                Some(c) if closable(&key, c) => self.close(key),
                Some(c) if !c.closed => {
                    self.farewells.insert(key);
                }
                _ => {}
            }
        }
        // Closed (gone) streams hold a descriptor for nothing: dropped, the peer stays gone.
        let dead: Vec<Key> = self
            .conns
            .iter()
            .filter(|(_, c)| c.closed && c.out.is_empty())
            .map(|(&k, _)| k)
            .collect();
        for key in dead {
            if let Some(c) = self.conns.remove(&key) {
                self.retire(key.1, &c);
            }
        }
        let over = self.conns.len().saturating_sub(self.max_conns);
        if over == 0 {
            return;
        }
        let mut idle: Vec<(u64, Key)> = self
            .conns
            .iter()
            .filter(|(k, c)| closable(k, c))
            .map(|(&k, c)| (c.last_used, k))
            .collect();
        idle.sort_unstable();
        for (_, key) in idle.into_iter().take(over) {
            self.close(key);
        }
    }

    /// Ends the idle opened stream `key` with a goodbye (written by `flush_leaving`).
    fn close(&mut self, key: Key) {
        let Some(mut c) = self.conns.remove(&key) else {
            return;
        };
        tracing::debug!(
            rank = self.me,
            peer = key.0,
            rail = key.1,
            open = self.conns.len() + 1,
            "tcp: closing an idle connection"
        );
        self.closed_idle += 1;
        self.retire(key.1, &c);
        c.sent_bytes = 0;
        c.out.push_back(Out::record(&hello::goodbye()));
        self.leaving.push(c);
    }

    /// Keeps the bytes a stream sent in the counters once it is gone.
    fn retire(&mut self, rail: usize, c: &Conn) {
        if self.retired_sent.len() <= rail {
            self.retired_sent.resize(rail + 1, 0);
        }
        self.retired_sent[rail] += c.sent_bytes;
    }

    /// Writes the goodbyes of closing streams; a stream whose goodbye is out is dropped
    /// (closed: the kernel sends what it holds, then the end of the stream).
    pub(super) fn flush_leaving(&mut self) {
        let now = Instant::now();
        let drain_for = self.connect_timeout;
        self.leaving.retain_mut(|c| {
            while let Some(o) = c.out.front_mut() {
                let bytes = &o.head[o.sent..o.head_len];
                match (&c.stream).write_nosignal(bytes) {
                    Ok(0) => return false,
                    Ok(n) => {
                        o.sent += n;
                        if o.sent == o.head_len {
                            c.out.pop_front();
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false, // its peer is gone: nothing to say goodbye to
                }
            }
            // The goodbye is out: end the stream, then read until the reader closes its end
            // (a close request it wrote meanwhile is dropped), so as not to close it with
            // unread bytes, which would reset it and could discard what the reader has not
            // read yet.
            let deadline = *c.draining.get_or_insert_with(|| {
                c.stream.shutdown(std::net::Shutdown::Write).ok();
                now + drain_for
            });
            let mut scratch = [0u8; HEADER];
            loop {
                match (&c.stream).read(&mut scratch) {
                    Ok(0) => return false,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return now < deadline,
                    Err(_) => return false,
                }
            }
        });
    }

    /// Bounds the streams peers opened to this rank: above `max_conns` of them (not closing
    /// already), the least recently used idle ones (between frames, from a peer no broadcast
    /// in flight talks to) are asked to close: a goodbye record written back on the stream,
    /// which its writer reads as a request to close it when idle (`watch`; it closes it as
    /// any idle stream, with a goodbye and the end of the stream, and this rank drops it on
    /// reading them). The reader never closes a stream itself: its writer may be writing.
    pub(super) fn trim_ins(&mut self) {
        if self.ins.len() <= self.max_conns {
            return;
        }
        let open = |c: &Conn| !c.closed && !c.goodbye && c.asked == 0;
        let over = self
            .ins
            .values()
            .filter(|c| open(c))
            .count()
            .saturating_sub(self.max_conns);
        let busy = &self.busy;
        let mut idle: Vec<(u64, InKey)> = self
            .ins
            .iter()
            .filter(|(k, c)| {
                open(c)
                    && matches!(c.rx, Rx::Header { got: 0, .. })
                    && busy.binary_search(&k.0).is_err()
            })
            .map(|(&k, c)| (c.last_used, k))
            .collect();
        idle.sort_unstable();
        let mut asking: Vec<InKey> = idle.into_iter().take(over).map(|(_, k)| k).collect();
        // Requests partly written (a full send buffer on a stream never written: unlikely).
        asking.extend(
            self.ins
                .iter()
                .filter(|(_, c)| c.asked > 0 && c.asked < HEADER && !c.closed)
                .map(|(&k, _)| k),
        );
        let request = hello::goodbye();
        for key in asking {
            let Some(c) = self.ins.get_mut(&key) else {
                continue;
            };
            let start = c.asked;
            // A write that fails is a peer gone: its stream's end is read as such.
            if let Ok(n) = (&c.stream).write_nosignal(&request[start..]) {
                c.asked += n;
                if start == 0 {
                    self.asked_ins += 1;
                    tracing::debug!(
                        rank = self.me,
                        peer = key.0,
                        accepted = self.ins.len(),
                        "tcp: asking a peer to close an idle connection"
                    );
                }
            }
        }
    }
}

/// `write(2)` that never raises SIGPIPE.
trait WriteNoSignal {
    fn write_nosignal(&self, bytes: &[u8]) -> io::Result<usize>;
}

impl WriteNoSignal for &TcpStream {
    fn write_nosignal(&self, bytes: &[u8]) -> io::Result<usize> {
        super::send_vectored(self, &[io::IoSlice::new(bytes)])
    }
}

/// SO_KEEPALIVE with probes after `within / 3` idle, every `within / 6`, 3 of them (whole
/// seconds, at least 1).
fn keepalive(stream: &TcpStream, within: Duration) -> io::Result<()> {
    let secs = |d: Duration| d.as_secs().clamp(1, i32::MAX as u64) as libc::c_int;
    for (level, name, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(within / 3)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs(within / 6)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
    ] {
        // SAFETY: the fd is open (owned by `stream`); `value` is a live c_int and the length
        // passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A non-blocking TCP socket (from `local`, any port, when given) whose connection to `addr`
/// has started and may not be established yet: it is when the socket turns writable with no
/// pending error (`take_error`). Never waits, so a host that is down (its SYNs unanswered)
/// blocks nobody.
pub(crate) fn connect_started(local: Option<IpAddr>, addr: SocketAddr) -> io::Result<TcpStream> {
    let err = |rc: libc::c_int| {
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc)
        }
    };
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    // SAFETY: socket(2) takes no pointers; the new descriptor is owned at once below.
    let fd = err(unsafe { libc::socket(domain, kind, 0) })?;
    // SAFETY: `fd` was just created and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Some(local) = local {
        let (sa, len) = sockaddr(SocketAddr::new(local, 0));
        // SAFETY: `sa` is a sockaddr_storage holding a sockaddr of `len` bytes, alive for
        // the call.
        err(unsafe { libc::bind(fd.as_raw_fd(), (&raw const sa).cast(), len) })?;
    }
    let (sa, len) = sockaddr(addr);
    // SAFETY: as above.
    let rc = unsafe { libc::connect(fd.as_raw_fd(), (&raw const sa).cast(), len) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(TcpStream::from(fd))
}

/// `addr` as a sockaddr_in or sockaddr_in6 in a sockaddr_storage, and its length.
fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid (unspecified) value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in>().write(sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in6>().write(sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}
