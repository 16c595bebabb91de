//! Connection setup: the lower rank of a pair connects, the higher accepts; the connection's
//! first 24 bytes are a hello (magic, job cookie, rank) so that a stray or foreign connection
//! is refused.

use super::{Conn, Rx, TcpTransport, HEADER};
use crate::transport::TransportError;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::wire::hello;

impl TcpTransport {
    /// Makes sure there is a connection to each of `peers` on every rail, within `timeout`.
    pub(super) fn connect_all(
        &mut self,
        peers: &[usize],
        timeout: Duration,
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + timeout;
        let rails = self.rails;
        let missing: Vec<(usize, usize)> = peers
            .iter()
            .copied()
            .filter(|p| *p != self.me)
            .flat_map(|p| (0..rails).map(move |rail| (p, rail)))
            .filter(|key| !self.conns.contains_key(key))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let _span = tracing::debug_span!("connect", rank = self.me, peers = ?missing).entered();
        let me = self.me;
        for &(p, rail) in missing.iter().filter(|&&(p, _)| p > me) {
            let addr = *self
                .addrs
                .get(rail)
                .and_then(|a| a.get(p))
                .ok_or(TransportError::UnknownPeer { peer: p })?;
            let setup = |e: io::Error| TransportError::Setup {
                what: match rail {
                    0 => format!("connect to rank {p} at {addr}"),
                    _ => format!("connect to rank {p} at {addr} (rail {rail})"),
                },
                error: e.to_string(),
            };
            // On rails, from this rank's own address on the rail (its NIC `rail`), so that a
            // connection's source is the NIC it belongs to, not whatever the route picks.
            let local = (self.rails > 1)
                .then(|| self.listeners[rail].local_addr().ok())
                .flatten()
                .map(|a| a.ip())
                .filter(|ip| !ip.is_unspecified() && ip.is_ipv4() == addr.is_ipv4());
            let mut stream = match local {
                Some(ip) => connect_from(ip, addr, timeout),
                None => TcpStream::connect_timeout(&addr, timeout),
            }
            .map_err(setup)?;
            let first = hello::emit(hello::TCP_LINK, self.cookie, self.me as u64);
            stream.write_all(&first).map_err(setup)?;
            self.add((p, rail), stream).map_err(setup)?;
        }
        for l in &self.listeners[..rails] {
            l.set_nonblocking(true).map_err(|e| TransportError::Io {
                peer: None,
                error: e.to_string(),
            })?;
        }
        while missing.iter().any(|key| !self.conns.contains_key(key)) {
            // Each rail's listener in turn; the rail of a connection is its listener's.
            let mut idle = true;
            for rail in 0..rails {
                match self.listeners[rail].accept() {
                    Ok((stream, from)) => {
                        idle = false;
                        self.accept(stream, from, rail, timeout)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        return Err(TransportError::Io {
                            peer: None,
                            error: e.to_string(),
                        });
                    }
                }
            }
            if !idle {
                continue;
            }
            if Instant::now() >= deadline {
                let mut waiting: Vec<usize> = missing
                    .iter()
                    .filter(|key| !self.conns.contains_key(key))
                    .map(|&(p, _)| p)
                    .collect();
                waiting.dedup();
                return Err(TransportError::ConnectTimeout {
                    waiting,
                    ms: timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        tracing::debug!(connections = self.conns.len(), "connected");
        Ok(())
    }

    /// Keeps an accepted connection on `rail` if it opens with this job's hello from a lower
    /// rank not yet connected there.
    fn accept(
        &mut self,
        mut stream: TcpStream,
        from: std::net::SocketAddr,
        rail: usize,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        stream.set_nonblocking(false).ok();
        stream.set_read_timeout(Some(timeout)).ok();
        let mut first = [0u8; hello::LEN];
        let words = stream
            .read_exact(&mut first)
            .ok()
            .and_then(|()| hello::parse(hello::TCP_LINK, &first))
            .filter(|&(cookie, _)| cookie == self.cookie);
        let Some((_, rank)) = words else {
            tracing::warn!(%from, "refused a connection without this job's hello");
            return Ok(());
        };
        let rank = usize::try_from(rank).unwrap_or(usize::MAX);
        let known = self.addrs.first().map_or(0, Vec::len);
        if rank >= known || rank >= self.me || self.conns.contains_key(&(rank, rail)) {
            tracing::warn!(%from, rank, rail, "refused a duplicate or misdirected connection");
            return Ok(());
        }
        self.add((rank, rail), stream)
            .map_err(|e| TransportError::Setup {
                what: format!("accept rank {rank}"),
                error: e.to_string(),
            })
    }

    fn add(&mut self, key: (usize, usize), stream: TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)?;
        if let Some(within) = self.keepalive {
            keepalive(&stream, within)?;
        }
        stream.set_read_timeout(None)?;
        stream.set_nonblocking(true)?;
        self.conns.insert(
            key,
            Conn {
                stream,
                out: VecDeque::new(),
                rx: Rx::Header {
                    buf: [0; HEADER],
                    got: 0,
                },
                closed: false,
                spare: [0; HEADER],
                sent_bytes: 0,
            },
        );
        Ok(())
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

/// [`TcpStream::connect_timeout`] from source address `local` (any port): the socket is bound
/// to `local` before it connects, as a NIC's connections must leave from that NIC's address
/// (issue 16: one connection per rail, each from and to its rail's addresses).
pub(super) fn connect_from(
    local: IpAddr,
    addr: SocketAddr,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let stream = connect_started(Some(local), addr)?;
    let mut pfd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, libc::c_int::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd, alive for the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "connection timed out",
        ));
    }
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    stream.set_nonblocking(false)?;
    Ok(stream)
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
