//! Connections, made and closed inside the poll loop, never blocking the progress thread.
//!
//! **One stream per pair of ranks, both directions on it.** A rank's messages to a peer
//! travel as a *direction*: a start record numbering it (0, 1, 2, … per peer and rail:
//! [`wire::hello::start`](crate::wire::hello::start)), the messages, and a goodbye. A
//! direction lives on one stream, dialled by either rank; a rank sends on its open direction
//! (`Pair::out`) and begins a new one only after ending the last. The reader reads a peer's
//! directions in their numbers' order: a stream whose peer direction is numbered beyond the
//! one read now waits, unread, until that one's goodbye. So a direction can move to another
//! stream at any time (the old one's messages are queued before its goodbye) without ever
//! reordering, losing or duplicating a message.
//!
//! **Opening** (`sender`, `ensure`, `dial`): when a broadcast that talks to a peer is posted
//! ([`Link::connect`](crate::transport::Link::connect) from the progress thread, and every
//! time the set of broadcasts in flight changes, for
//! [`Driver::talks_to`](crate::transport::Driver::talks_to)), a rank without a live stream
//! with the peer starts a non-blocking `connect(2)`; the stream's first 24 bytes, a hello
//! (magic, job cookie, rank: [`wire::hello`](crate::wire::hello)), and its start record wait
//! in its queue with the messages to that peer until the socket turns writable. A rank that
//! sends to a peer with a live stream the peer dialled begins its direction on that one.
//! Connecting early to every peer a broadcast talks to keeps the fault rules of a full mesh:
//! a dead peer's listener refuses (or its end of a stream closes) and the broadcasts that
//! need it fail naming it; a late peer's listener is open (bound before the agreement), so
//! its kernel accepts and this rank waits for it.
//!
//! **Both at once** (`hellos`): two ranks that dial each other before either's hello arrived
//! get two streams. The lower rank's wins: the higher rank, on accepting it, ends its
//! direction on the stream it dialled (its goodbye follows what is queued there) and begins
//! the next one on the lower rank's; the lower rank, reading that goodbye, ends its own
//! (unused) direction on the loser, which then closes. Both ranks decide from their ranks
//! alone, and the numbering keeps the order whichever stream is read first.
//!
//! **Accepting** (`accept_all`, `hellos`): a readable listener is accepted without waiting;
//! the hello is read as it arrives; a connection that says something else, or nothing
//! within the connect timeout, is closed without stalling anything else.
//!
//! **Closing** (`trim`): above [`max_conns`](super::TcpTransport::set_max_connections) live
//! streams, the least recently used ones idle both ways (nothing queued, nothing half read,
//! no broadcast in flight that talks to the peer, established) get this rank's goodbye. A
//! rank that reads a peer's goodbye on a stream ends its own direction there too (after what
//! it queued), so a goodbye either way closes the stream. Each rank shuts its write side
//! after its goodbye and keeps reading, delivering whatever the peer sent before its own
//! goodbye, until the end of the stream: then both directions are over and nothing is
//! unread, so the stream is closed without a reset and without losing a byte. A rank never
//! closes a stream whose peer may still write on it.

use super::{Conn, ConnKey, Dir, Key, Out, TcpTransport};
pub(super) use crate::transport::gone::Gone;
use crate::transport::limits;
use crate::transport::TransportError;
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
    /// The stream this rank sends to `key`'s peer and rail on: its open direction's, else
    /// a live stream where it has none begun yet (its direction begins there), else a new
    /// one (`dial`). `None` when the peer is gone.
    pub(super) fn sender(&mut self, key: Key) -> Result<Option<ConnKey>, TransportError> {
        let pair = self.pairs.entry(key).or_default();
        if let Some(id) = pair.out {
            let at = (key.0, key.1, id);
            match self.conns.get(&at) {
                Some(c) if !c.broken && matches!(c.mine, Dir::Open(_)) => return Ok(Some(at)),
                _ => pair.out = None,
            }
        }
        let free = self
            .conns
            .range((key.0, key.1, 0)..=(key.0, key.1, u64::MAX))
            .find(|(_, c)| c.live() && c.mine == Dir::Unused && !c.ended)
            .map(|(&k, _)| k);
        match free {
            Some(at) => {
                self.begin(at);
                Ok(Some(at))
            }
            None => self.dial(key),
        }
    }

    /// Makes sure there is a live stream with `key`'s peer and rail (dialling one if not),
    /// unless the peer is gone.
    pub(super) fn ensure(&mut self, key: Key) -> Result<(), TransportError> {
        let live = self
            .conns
            .range((key.0, key.1, 0)..=(key.0, key.1, u64::MAX))
            .any(|(_, c)| c.live());
        if !live {
            self.dial(key)?;
        }
        Ok(())
    }

    /// Begins this rank's next direction to the peer on stream `at` (its start record
    /// queued): from now on it sends there.
    fn begin(&mut self, at: ConnKey) {
        let pair = self.pairs.entry((at.0, at.1)).or_default();
        let Some(c) = self.conns.get_mut(&at) else {
            return;
        };
        let e = pair.out_epoch;
        pair.out_epoch += 1;
        pair.out = Some(at.2);
        c.out.push_back(Out::record(&hello::start(e)));
        c.mine = Dir::Open(e);
        c.last_used = self.rounds;
    }

    /// Ends this rank's direction on stream `at` (its goodbye queued after what is there):
    /// it sends nothing more on it.
    pub(super) fn end(&mut self, at: ConnKey) {
        let Some(c) = self.conns.get_mut(&at) else {
            return;
        };
        if c.mine == Dir::Closed || c.broken {
            return;
        }
        c.mine = Dir::Closed;
        c.out.push_back(Out::record(&hello::goodbye()));
        if let Some(pair) = self.pairs.get_mut(&(at.0, at.1)) {
            if pair.out == Some(at.2) {
                pair.out = None;
            }
        }
    }

    /// Starts a new stream to `key`'s peer and rail (unless the peer is gone), non-blocking,
    /// its hello queued first and this rank's next direction begun on it. Out of descriptors
    /// is an error naming the limit; a refused connection makes the peer gone.
    pub(super) fn dial(&mut self, key: Key) -> Result<Option<ConnKey>, TransportError> {
        let (p, rail) = key;
        if self.gone.contains_key(&p) || p == self.me {
            return Ok(None);
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
                        what: format!("connect to rank {p} at {addr}"),
                        error: e.to_string(),
                    },
                );
                return Ok(None);
            }
        };
        let mut conn = Conn::new(stream, true);
        conn.connecting = Some(Instant::now() + self.connect_timeout);
        conn.out.push_back(Out::record(&hello::emit(
            hello::TCP_LINK,
            self.my_id.0,
            self.my_id.1,
        )));
        self.made += 1;
        let at = (p, rail, self.made);
        self.conns.insert(at, conn);
        self.begin(at);
        Ok(Some(at))
    }

    /// The connections this link holds (live, closing, awaiting a hello).
    pub(super) fn held(&self) -> usize {
        self.conns.len() + self.pending.len()
    }

    /// `TCP_NODELAY`, the LAN's retransmission and delayed-ack timers where the kernel has
    /// them (`timers`), and keepalive if asked for.
    fn options(&self, stream: &TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)?;
        super::timers::lan(stream, self.rto_min);
        if let Some(within) = self.keepalive {
            keepalive(stream, within)?;
        }
        Ok(())
    }

    /// A stream's socket reported readiness (`revents`): a connection under way is
    /// established or failed. Whether the stream may be read now (it was established).
    pub(super) fn watch(&mut self, key: ConnKey, revents: i16) -> bool {
        let peer = key.0;
        let addr = self.addrs.get(key.1).and_then(|a| a.get(peer)).copied();
        let Some(conn) = self.conns.get_mut(&key) else {
            return false;
        };
        if conn.connecting.is_none() {
            return true;
        }
        let failed = match conn.stream.take_error() {
            Ok(Some(e)) | Err(e) => Some(e),
            Ok(None) if revents & (libc::POLLERR | libc::POLLHUP) != 0 => {
                Some(io::Error::from(io::ErrorKind::ConnectionRefused))
            }
            Ok(None) => None,
        };
        match failed {
            Some(e) => {
                conn.broken = true;
                let addr = addr.unwrap_or(self.addr);
                self.gone.entry(peer).or_insert(Gone::Refused {
                    what: format!("connect to rank {peer} at {addr}"),
                    error: e.to_string(),
                });
            }
            None => conn.connecting = None,
        }
        false
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
                .and_then(|id| self.peer_of(id))
                .filter(|&rank| rank < known && rank != self.me);
            let Some(rank) = words else {
                tracing::warn!(from = %p.from, "tcp: refused a connection without this job's hello");
                continue;
            };
            if self.options(&p.stream).is_err() {
                continue;
            }
            self.made += 1;
            let at = (rank, p.rail, self.made);
            let mut conn = Conn::new(p.stream, false);
            conn.last_used = self.rounds;
            self.conns.insert(at, conn);
            // Both dialled: the lower rank's stream wins. This (higher) rank moves its
            // direction there; the one it dialled closes once the peer ends its own on it.
            if self.ids.get(rank).is_some_and(|&id| id < self.my_id) {
                let out = self
                    .pairs
                    .get(&(rank, p.rail))
                    .and_then(|pair| pair.out)
                    .map(|id| (rank, p.rail, id));
                if let Some(old) = out.filter(|k| self.conns.get(k).is_some_and(|c| c.dialed)) {
                    tracing::debug!(
                        rank = self.me,
                        peer = rank,
                        "tcp: both dialled: moving to the peer's stream"
                    );
                    self.end(old);
                    self.begin(at);
                    self.moved += 1;
                }
            }
        }
        self.pending = keep;
    }

    /// The peer whose identity a hello names: the job's rank at once, a peer added later
    /// ([`Link::grow`](crate::transport::Link::grow)) by looking it up.
    fn peer_of(&self, id: (u64, u64)) -> Option<usize> {
        let direct = usize::try_from(id.1)
            .ok()
            .filter(|&r| self.ids.get(r) == Some(&id));
        direct.or_else(|| self.ids.iter().position(|&x| x == id))
    }

    /// How long this round may wait, given `wait`: no longer than until the first deadline of
    /// a connection under way or awaiting its hello.
    pub(super) fn pending_wait(&mut self, wait: Duration) -> Duration {
        let now = Instant::now();
        let mut first: Option<Instant> = self.pending.iter().map(|p| p.deadline).min();
        for (&(peer, _, _), c) in self.conns.iter_mut() {
            match c.connecting {
                Some(d) if d <= now => {
                    c.broken = true;
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

    /// Ends this rank's direction on the streams whose peer said goodbye, drops the streams
    /// that are over, and above the bound closes the least recently used live streams idle
    /// both ways (none with a peer that a broadcast in flight talks to, `busy`).
    pub(super) fn trim(&mut self) {
        for at in std::mem::take(&mut self.farewells) {
            self.end(at);
        }
        self.reap();
        let live = self.conns.values().filter(|c| c.live()).count();
        let over = live.saturating_sub(self.max_conns);
        if over == 0 {
            return;
        }
        let busy = &self.busy;
        let mut idle: Vec<(u64, ConnKey)> = self
            .conns
            .iter()
            .filter(|(k, c)| c.live() && c.idle() && busy.binary_search(&k.0).is_err())
            .map(|(&k, c)| (c.last_used, k))
            .collect();
        idle.sort_unstable();
        for (_, at) in idle.into_iter().take(over) {
            tracing::debug!(
                rank = self.me,
                peer = at.0,
                rail = at.1,
                live,
                "tcp: closing an idle connection"
            );
            self.closed_idle += 1;
            self.end(at);
        }
    }

    /// Shuts the write side of streams whose goodbye from this rank is out, and drops those
    /// that are over: failed ones (their peer is `gone`), and those whose both ends are shut
    /// and whose end was read (nothing unread: no reset).
    pub(super) fn reap(&mut self) {
        let mut over = Vec::new();
        for (&at, c) in self.conns.iter_mut() {
            if c.mine == Dir::Closed && c.out.is_empty() && !c.shut && c.connecting.is_none() {
                c.stream.shutdown(std::net::Shutdown::Write).ok();
                c.shut = true;
            }
            if c.broken || (c.shut && c.ended) {
                over.push(at);
            }
        }
        for at in over {
            if let Some(c) = self.conns.remove(&at) {
                self.retire(at.1, &c);
            }
            if let Some(pair) = self.pairs.get_mut(&(at.0, at.1)) {
                if pair.out == Some(at.2) {
                    pair.out = None;
                }
            }
        }
    }

    /// Keeps the bytes a stream sent in the counters once it is gone.
    fn retire(&mut self, rail: usize, c: &Conn) {
        if self.retired_sent.len() <= rail {
            self.retired_sent.resize(rail + 1, 0);
        }
        self.retired_sent[rail] += c.sent_bytes;
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
