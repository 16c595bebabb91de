//! The verbs link's side channel: how two ranks connect the queue pair of one tree edge when
//! a broadcast first uses it, without a new global exchange.
//!
//! Each rank listens on a TCP port published in its bootstrap blob (`wire/bootstrap.rs`'s
//! verbs section). A rank that needs an edge it has no queue pair for creates one (INIT),
//! connects to the peer's listener and sends a *request* with the queue pair's number, its
//! port's address (LID, GID, MTU) and the ring block the peer may write into. The peer
//! creates its own queue pair (or takes the one it made for a crossing request), moves it to
//! RTR and RTS and *replies* likewise; the asker moves to RTR and RTS and says *ready*, and
//! only then does the peer send on it. This is the InfiniBand connection manager's
//! REQ/REP/RTU exchange (IB spec vol. 1, ch. 12), over TCP instead of management datagrams.
//!
//! Crossing requests (both ends asked at once) resolve deterministically: the lower rank's
//! request wins; the higher rank is told to *yield* and answers the lower one's request with
//! the queue pair it had made. So each pair of ranks has exactly one queue pair pair.
//!
//! An idle edge may be *closed* to bound the cache: the peer agrees (*closed*, and both
//! destroy their queue pairs) only if it does not use the edge either, else answers *busy*.
//!
//! Every message is one 72-byte frame:
//!
//! ```text
//! 0 magic "PCQP"  4 kind u8  5 version u8 (1)  6..8 zero  8 cookie u64  16 from u32  20 to u32
//! 24 qpn u32  28 port u8  29 gid index u8  30 lid u16  32 gid [16]  48 mtu u8  49..52 zero
//! 52 ring address u64  60 ring rkey u32  64 ring slot bytes u32  68 ring slots u32
//! ```

use super::ops::PortAddr;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

/// Bytes of a frame.
pub const FRAME: usize = 72;
const MAGIC: &[u8; 4] = b"PCQP";
const VERSION: u8 = 1;

/// What a frame says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// "Connect this queue pair of mine to one of yours."
    Request = 1,
    /// "Done: here is mine (in RTS)."
    Reply = 2,
    /// "Mine is in RTS too: send."
    Ready = 3,
    /// "Our requests crossed and mine wins: answer mine."
    Yield = 4,
    /// "I do not use our edge: may we both destroy it?"
    Close = 5,
    /// "Yes: mine is destroyed."
    Closed = 6,
    /// "No: I use it."
    Busy = 7,
}

impl Kind {
    fn from_u8(k: u8) -> Option<Kind> {
        Some(match k {
            1 => Kind::Request,
            2 => Kind::Reply,
            3 => Kind::Ready,
            4 => Kind::Yield,
            5 => Kind::Close,
            6 => Kind::Closed,
            7 => Kind::Busy,
            _ => return None,
        })
    }
}

/// One frame: a rank's end of an edge (the fields after `to` only in requests and replies;
/// `qpn` in a close names the closer's queue pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub kind: Kind,
    /// The communicator's job cookie: a stray connection cannot pass for a rank.
    pub cookie: u64,
    pub from: u32,
    pub to: u32,
    pub qpn: u32,
    pub port: PortAddr,
    /// The sender's ring block for the receiver (where it writes pieces when the sender's
    /// buffer is not registered).
    pub ring_addr: u64,
    pub ring_rkey: u32,
    pub ring_slot: u32,
    pub ring_slots: u32,
}

impl Hello {
    /// A frame of `kind` with nothing but its addressing.
    pub fn bare(kind: Kind, cookie: u64, from: usize, to: usize) -> Hello {
        Hello {
            kind,
            cookie,
            from: from as u32,
            to: to as u32,
            qpn: 0,
            port: PortAddr::default(),
            ring_addr: 0,
            ring_rkey: 0,
            ring_slot: 0,
            ring_slots: 0,
        }
    }

    pub fn emit(&self) -> [u8; FRAME] {
        let mut b = [0u8; FRAME];
        b[0..4].copy_from_slice(MAGIC);
        b[4] = self.kind as u8;
        b[5] = VERSION;
        b[8..16].copy_from_slice(&self.cookie.to_le_bytes());
        b[16..20].copy_from_slice(&self.from.to_le_bytes());
        b[20..24].copy_from_slice(&self.to.to_le_bytes());
        b[24..28].copy_from_slice(&self.qpn.to_le_bytes());
        b[28] = self.port.port;
        b[29] = self.port.gid_index;
        b[30..32].copy_from_slice(&self.port.lid.to_le_bytes());
        b[32..48].copy_from_slice(&self.port.gid);
        b[48] = self.port.mtu;
        b[52..60].copy_from_slice(&self.ring_addr.to_le_bytes());
        b[60..64].copy_from_slice(&self.ring_rkey.to_le_bytes());
        b[64..68].copy_from_slice(&self.ring_slot.to_le_bytes());
        b[68..72].copy_from_slice(&self.ring_slots.to_le_bytes());
        b
    }

    pub fn parse(b: &[u8; FRAME]) -> Result<Hello, String> {
        if &b[0..4] != MAGIC {
            return Err("not a pipecast verbs handshake (bad magic)".into());
        }
        if b[5] != VERSION {
            return Err(format!(
                "verbs handshake version {} (this pipecast speaks {VERSION}): run the same pipecast everywhere",
                b[5]
            ));
        }
        let kind = Kind::from_u8(b[4]).ok_or(format!("unknown verbs handshake kind {}", b[4]))?;
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(Hello {
            kind,
            cookie: u64_at(8),
            from: u32_at(16),
            to: u32_at(20),
            qpn: u32_at(24),
            port: PortAddr {
                port: b[28],
                gid_index: b[29],
                lid: u16::from_le_bytes([b[30], b[31]]),
                gid: b[32..48].try_into().expect("16 bytes"),
                mtu: b[48],
            },
            ring_addr: u64_at(52),
            ring_rkey: u32_at(60),
            ring_slot: u32_at(64),
            ring_slots: u32_at(68),
        })
    }
}

/// What a connection gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    Frame(Hello),
    /// Nothing complete yet.
    Nothing,
    /// The peer closed it, or it failed: why.
    Closed(String),
}

/// One side-channel connection, non-blocking, frames in and out.
pub struct Conn {
    stream: TcpStream,
    rx: Vec<u8>,
    tx: Vec<u8>,
    /// Where this rank connects to while the TCP handshake is under way (`None` once it is
    /// established, and for accepted connections).
    connecting: Option<SocketAddr>,
    /// Unique in the process: tells this connection from an earlier one that had its
    /// descriptor number (`waitset::WaitSet::sync`).
    id: u64,
}

/// The next [`Conn`]'s identity (0 is the listener's).
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Conn {
    /// Starts connecting to a peer's listener, without waiting: frames sent meanwhile are
    /// queued, and a host that is down (its SYNs unanswered) holds up no other edge. The
    /// caller's deadline bounds how long it may stay unconnected ([`Conn::connected`]).
    pub fn open(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = crate::transport::tcp::connect_started(None, addr)?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            rx: Vec::new(),
            tx: Vec::new(),
            connecting: Some(addr),
            id: next_id(),
        })
    }

    fn new(stream: TcpStream) -> std::io::Result<Conn> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            rx: Vec::new(),
            tx: Vec::new(),
            connecting: None,
            id: next_id(),
        })
    }

    /// The address being connected to, while the connection is under way.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.connecting
    }

    /// Whether the TCP connection is established (a connection that failed to establish
    /// reports that through [`Conn::recv`] or [`Conn::flush`]).
    pub fn connected(&self) -> bool {
        self.connecting.is_none()
    }

    /// Whether a connection under way got established: `Ok(false)` while it is not yet, an
    /// error naming the address when it failed (refused: nobody listens there any more;
    /// unreachable: its host is down).
    fn established(&mut self) -> Result<bool, String> {
        let Some(addr) = self.connecting else {
            return Ok(true);
        };
        let mut pfd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd, alive for the call; a zero timeout never waits.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        if n <= 0 {
            return Ok(false); // not yet (or interrupted: asked again next round)
        }
        let refused = |e: std::io::Error| {
            format!(
                "cannot reach its queue pair handshake listener {addr}: {e} (is it still running?)"
            )
        };
        if let Some(e) = self.stream.take_error().map_err(refused)? {
            return Err(refused(e));
        }
        if pfd.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            return Err(refused(std::io::Error::from(ErrorKind::ConnectionRefused)));
        }
        self.connecting = None;
        Ok(true)
    }

    /// Queues a frame and sends what the socket takes.
    pub fn send(&mut self, h: &Hello) -> Result<(), String> {
        self.tx.extend_from_slice(&h.emit());
        self.flush()
    }

    /// Sends what is queued, as far as the socket takes it.
    pub fn flush(&mut self) -> Result<(), String> {
        if !self.established()? {
            return Ok(());
        }
        while !self.tx.is_empty() {
            match self.stream.write(&self.tx) {
                Ok(0) => return Err("the connection closed".into()),
                Ok(n) => {
                    self.tx.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }

    /// Whether everything queued went out.
    pub fn flushed(&self) -> bool {
        self.connected() && self.tx.is_empty()
    }

    /// The next frame, if a whole one arrived.
    pub fn recv(&mut self) -> Got {
        if let Err(e) = self.flush() {
            return Got::Closed(e);
        }
        if !self.connected() {
            return Got::Nothing;
        }
        let mut buf = [0u8; FRAME];
        while self.rx.len() < FRAME {
            match self.stream.read(&mut buf[..FRAME - self.rx.len()]) {
                Ok(0) => return Got::Closed("the connection closed".into()),
                Ok(n) => self.rx.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Got::Nothing,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Got::Closed(e.to_string()),
            }
        }
        let frame: [u8; FRAME] = self.rx[..FRAME].try_into().expect("a frame");
        self.rx.drain(..FRAME);
        match Hello::parse(&frame) {
            Ok(h) => Got::Frame(h),
            Err(e) => Got::Closed(e),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// This connection's identity (unique in the process).
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// The listener every rank publishes, non-blocking.
pub struct Listener {
    listener: TcpListener,
}

impl Listener {
    /// Listens on an ephemeral port of `ip`.
    pub fn bind(ip: std::net::IpAddr) -> std::io::Result<Listener> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))?;
        listener.set_nonblocking(true)?;
        Ok(Listener { listener })
    }

    pub fn addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener")
    }

    /// A connection waiting to be accepted, if any.
    pub fn accept(&self) -> std::io::Result<Option<Conn>> {
        match self.listener.accept() {
            Ok((s, _)) => Conn::new(s).map(Some),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_strangers_are_refused() {
        let h = Hello {
            kind: Kind::Reply,
            cookie: 0xfeed_beef_1234,
            from: 7,
            to: 4095,
            qpn: 0x12_3456,
            port: PortAddr {
                port: 1,
                gid_index: 3,
                lid: 9,
                gid: [7; 16],
                mtu: 5,
            },
            ring_addr: 0x7f00_0000_1000,
            ring_rkey: 0xabcd,
            ring_slot: 32768,
            ring_slots: 4,
        };
        assert_eq!(Hello::parse(&h.emit()).unwrap(), h);
        let mut b = h.emit();
        b[0] = b'X';
        assert!(Hello::parse(&b).unwrap_err().contains("magic"));
        let mut b = h.emit();
        b[5] = 9;
        assert!(Hello::parse(&b).unwrap_err().contains("version"));
        let mut b = h.emit();
        b[4] = 0;
        assert!(Hello::parse(&b).unwrap_err().contains("kind"));
    }

    #[test]
    fn a_connection_carries_frames_and_reports_the_peer_closing() {
        let l = Listener::bind("127.0.0.1".parse().unwrap()).unwrap();
        let mut a = Conn::open(l.addr()).unwrap();
        let mut b = loop {
            if let Some(c) = l.accept().unwrap() {
                break c;
            }
        };
        let h = Hello::bare(Kind::Ready, 5, 1, 2);
        a.send(&h).unwrap();
        let got = loop {
            match b.recv() {
                Got::Nothing => std::thread::yield_now(),
                g => break g,
            }
        };
        assert_eq!(got, Got::Frame(h));
        drop(a);
        let got = loop {
            match b.recv() {
                Got::Nothing => std::thread::yield_now(),
                g => break g,
            }
        };
        assert!(matches!(got, Got::Closed(_)), "{got:?}");
    }
}
