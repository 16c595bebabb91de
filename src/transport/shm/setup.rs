//! Setting up the shared-memory link between the ranks of one host: every rank listens on an
//! abstract Unix socket (no file, so nothing is left behind; per network namespace, like the
//! TCP port its name is built from); the lower rank of a pair connects. Each side says hello
//! (job cookie, rank, a probe), tries to read the other's probe by cross-memory attach, and
//! says how it will read ([`Mode`]); then, unless `PIPECAST_SHM=cma`, each writer sends every
//! peer its staging ring ([`super::stage`]), one for all its readers, which a reader that
//! cannot attach reads everything from.
//! Every step is bounded by the deadline: a peer that never shows up is an error, not a hang.

use super::ring::{self, Ring};
use super::stage::Stage;
use super::{cma, Peer, ShmLink, ShmMode, RING_BYTES};
use crate::transport::TransportError;
use crate::wire::shm::{Mode, Record, RECORD};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// The abstract socket name of the rank listening on TCP address `tcp` (unique in a network
/// namespace, which is also the scope of abstract names).
pub fn socket_name(tcp: &std::net::SocketAddr) -> String {
    format!("pipecast.{tcp}")
}

pub fn listen(name: &str) -> io::Result<UnixListener> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    let l = UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// One pair's connection while it is set up.
struct Pending {
    peer: usize,
    stream: UnixStream,
    pid: i32,
    hello: Option<(u64, [u8; 16])>,
    read: Option<Mode>,
    write: Option<Mode>,
}

impl ShmLink {
    /// Connects to every rank of `peers` (on this host) within `timeout`.
    pub(super) fn setup(
        &mut self,
        peers: &[usize],
        timeout: Duration,
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + timeout;
        let me = self.me;
        let missing: Vec<usize> = peers
            .iter()
            .copied()
            .filter(|p| *p != me && !self.peers.contains_key(p))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut pending: Vec<Pending> = Vec::new();
        for &p in missing.iter().filter(|&&p| p > me) {
            let name = self
                .names
                .get(p)
                .ok_or(TransportError::UnknownPeer { peer: p })?
                .clone();
            let stream = connect(&name, deadline).map_err(|e| TransportError::Setup {
                what: format!("shared memory: connect to rank {p} (@{name})"),
                error: e.to_string(),
            })?;
            let mut c = Pending {
                peer: p,
                pid: peer_pid(&stream),
                stream,
                hello: None,
                read: None,
                write: None,
            };
            self.send(&mut c, &self.hello())?;
            pending.push(c);
        }
        let lower: Vec<usize> = missing.iter().copied().filter(|&p| p < me).collect();
        while !lower
            .iter()
            .all(|p| pending.iter().any(|c| c.peer == *p && c.hello.is_some()))
        {
            let stream = accept(&self.listener, deadline).map_err(|e| TransportError::Setup {
                what: format!("shared memory: waiting for ranks {lower:?} on this host to connect"),
                error: e.to_string(),
            })?;
            // A stray or foreign connection (wrong cookie, unexpected rank) is dropped.
            let Ok((
                Record::Hello {
                    cookie,
                    rank,
                    probe_addr,
                    probe,
                },
                _,
            )) = read_record(&stream, deadline)
            else {
                continue;
            };
            let rank = rank as usize;
            if cookie != self.cookie
                || !lower.contains(&rank)
                || pending.iter().any(|c| c.peer == rank)
            {
                tracing::warn!(
                    rank = me,
                    claimed = rank,
                    "shared memory: dropped a stray connection"
                );
                continue;
            }
            let mut c = Pending {
                peer: rank,
                pid: peer_pid(&stream),
                stream,
                hello: Some((probe_addr, probe)),
                read: None,
                write: None,
            };
            self.send(&mut c, &self.hello())?;
            pending.push(c);
        }
        for c in pending.iter_mut().filter(|c| c.hello.is_none()) {
            match self.read(c, deadline)? {
                (
                    Record::Hello {
                        cookie,
                        rank,
                        probe_addr,
                        probe,
                    },
                    _,
                ) if cookie == self.cookie && rank as usize == c.peer => {
                    c.hello = Some((probe_addr, probe));
                }
                (r, _) => return Err(bad(c.peer, format!("expected its hello, got {r:?}"))),
            }
        }
        // How this rank reads each peer.
        for c in &mut pending {
            let (addr, probe) = c.hello.expect("every pending pair said hello");
            let attach = if c.pid > 0 {
                cma::probe(c.pid, addr, &probe)
            } else {
                Err("the peer's process is not visible here (another PID namespace)".into())
            };
            let mode = match (self.mode, attach) {
                (ShmMode::Ring, _) => {
                    tracing::info!(
                        rank = me,
                        peer = c.peer,
                        "shared memory: ring (PIPECAST_SHM=ring)"
                    );
                    Mode::Ring
                }
                (_, Ok(())) => Mode::Cma,
                (ShmMode::Cma, Err(why)) => {
                    return Err(TransportError::Setup {
                        what: format!("shared memory with rank {} (PIPECAST_SHM=cma)", c.peer),
                        error: format!("cross-memory attach refused: {why}"),
                    })
                }
                (ShmMode::Auto | ShmMode::Off, Err(why)) => {
                    tracing::info!(
                        rank = me,
                        peer = c.peer,
                        "shared memory: two-copy ring, because single-copy cross-memory attach is refused: {why}"
                    );
                    Mode::Ring
                }
            };
            c.read = Some(mode);
            self.send(c, &Record::Mode(mode))?;
        }
        // Every rank has one staging ring (the mode is the same at every rank), unless
        // `PIPECAST_SHM=cma`.
        let staged = self.mode != ShmMode::Cma;
        if staged && self.stage.is_none() {
            self.stage = Some(
                Stage::create(RING_BYTES).map_err(|e| TransportError::Setup {
                    what: "shared memory: create the staging ring (memfd_create)".into(),
                    error: crate::transport::limits::memory("its mapping", &e, RING_BYTES as u64),
                })?,
            );
        }
        for c in &mut pending {
            match self.read(c, deadline)? {
                (Record::Mode(m), _) => c.write = Some(m),
                (r, _) => return Err(bad(c.peer, format!("expected its mode, got {r:?}"))),
            }
            if c.write == Some(Mode::Ring) && !staged {
                return Err(bad(
                    c.peer,
                    "it reads through a ring, but PIPECAST_SHM=cma here (set PIPECAST_SHM alike at every rank)".into(),
                ));
            }
            if let Some(stage) = &self.stage {
                let rec = Record::RingFd {
                    size: stage.size() as u64,
                }
                .encode();
                ring::send_with_fd(&c.stream, &rec, stage.ring().fd())
                    .map_err(|e| io_err(c.peer, e))?;
            }
        }
        for c in pending {
            let rx = if staged {
                match self.read(&c, deadline)? {
                    (Record::RingFd { size }, Some(fd)) if (1..=1u64 << 32).contains(&size) => {
                        Some(Ring::open(fd, size as usize).map_err(|e| {
                            let why = if crate::transport::limits::out_of_memory(&e) {
                                crate::transport::limits::memory("mapping it", &e, size)
                            } else {
                                e.to_string()
                            };
                            bad(c.peer, format!("its ring: {why}"))
                        })?)
                    }
                    (r, _) => return Err(bad(c.peer, format!("expected its ring, got {r:?}"))),
                }
            } else {
                None
            };
            c.stream
                .set_nonblocking(true)
                .map_err(|e| io_err(c.peer, e))?;
            self.add_peer(
                c.peer,
                Peer::new(
                    c.stream,
                    c.pid,
                    c.read == Some(Mode::Cma),
                    c.write == Some(Mode::Cma),
                    rx,
                ),
            )?;
        }
        Ok(())
    }

    fn hello(&self) -> Record {
        Record::Hello {
            cookie: self.cookie,
            rank: self.me as u32,
            probe_addr: self.probe.as_ptr() as u64,
            probe: *self.probe,
        }
    }

    fn send(&self, c: &mut Pending, r: &Record) -> Result<(), TransportError> {
        let bytes = r.encode();
        let mut sent = 0;
        while sent < bytes.len() {
            match super::send(&c.stream, &bytes[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(c.peer, e)),
            }
        }
        Ok(())
    }

    fn read(
        &self,
        c: &Pending,
        deadline: Instant,
    ) -> Result<(Record, Option<OwnedFd>), TransportError> {
        read_record(&c.stream, deadline).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => TransportError::Closed { peer: c.peer },
            io::ErrorKind::InvalidData => bad(c.peer, e.to_string()),
            _ => io_err(c.peer, e),
        })
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

fn connect(name: &str, deadline: Instant) -> io::Result<UnixStream> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    loop {
        match UnixStream::connect_addr(&addr) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "shared memory: connect, retrying");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

fn accept(listener: &UnixListener, deadline: Instant) -> io::Result<UnixStream> {
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_readable(listener.as_raw_fd(), deadline)?;
            }
            Err(e) => return Err(e),
        }
    }
}

fn wait_readable(fd: i32, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"));
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one live pollfd for an open descriptor.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// One whole record (and a descriptor sent with it), waiting until `deadline`.
fn read_record(stream: &UnixStream, deadline: Instant) -> io::Result<(Record, Option<OwnedFd>)> {
    stream.set_nonblocking(true)?;
    let mut buf = [0u8; RECORD];
    let mut got = 0;
    let mut fd = None;
    while got < RECORD {
        match ring::recv_with_fd(stream, &mut buf[got..]) {
            Ok((0, _)) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok((n, f)) => {
                got += n;
                fd = fd.or(f);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_readable(stream.as_raw_fd(), deadline)?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    stream.set_nonblocking(false)?;
    let r = Record::decode(&buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok((r, fd))
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
