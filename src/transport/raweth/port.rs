//! What raw Ethernet's link sends frames through and receives them from: a [`Port`], one per
//! NIC (rail). A port moves datagrams — each a destination MAC address and the bytes after
//! the Ethernet header — and has a descriptor to wait on; it knows nothing of pipecast's
//! frames (smoltcp's `phy::Device` is the model). [`PacketPort`] is an `AF_PACKET` socket on
//! an interface (with its PACKET_MMAP receive ring, when asked); [`super::medium`] is an
//! in-memory switch between ports of one process, loss-free or with seeded impairments.

use super::ring::RxRing;
use super::socket::{Addressed, Mac, RawSocket, RecvBatch};
use super::tx::Batch;
use super::Config;
use crate::transport::TransportError;
use std::io;
use std::os::fd::RawFd;

/// A received datagram, handed to [`Port::receive`]'s callback: the sender's MAC address,
/// how it was addressed, whether it was cut short, and its bytes after the Ethernet header.
pub type Arrived<'a> = (Mac, Addressed, bool, &'a [u8]);

/// One NIC of a raw Ethernet link.
pub trait Port: Send {
    /// The interface's name, for logs and failure reports.
    fn name(&self) -> &str;

    fn mac(&self) -> Mac;

    /// Bytes of one datagram after the Ethernet header.
    fn mtu(&self) -> usize;

    /// Sends `frames` without blocking; returns how many went out (fewer when the port is
    /// full: the link then waits until [`Port::fd`] is writable).
    fn send(&mut self, frames: &Batch<'_>) -> io::Result<usize>;

    /// Hands what is waiting, at most about `max` datagrams, to `f` without blocking; returns
    /// how many it took (0: nothing was waiting).
    fn receive(&mut self, max: usize, f: &mut dyn FnMut(Arrived<'_>)) -> io::Result<usize>;

    /// Readable while datagrams wait, writable when sends may go on: what the link polls.
    fn fd(&self) -> RawFd;

    /// Datagrams dropped since the last call because this port's receive queue was full.
    fn take_drops(&self) -> u64;
}

/// An `AF_PACKET` socket on an interface as a [`Port`]: `sendmmsg` out, `recvmmsg` batches or
/// the PACKET_MMAP ring ([`RxRing`]) in.
pub struct PacketPort {
    sock: RawSocket,
    ring: Option<RxRing>,
    recv: RecvBatch,
}

impl PacketPort {
    /// `sock` as rank `me`'s port: the send buffer `config` asks for, the rank filter (the
    /// ranks of a host share their NICs: only this rank's frames reach the socket) and the
    /// receive ring when `config` asks for one.
    pub fn new(sock: RawSocket, me: usize, config: &Config) -> Result<PacketPort, TransportError> {
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
        sock.set_rank_filter(me as u32)
            .map_err(|e| TransportError::Setup {
                what: format!("the rank filter (SO_ATTACH_FILTER) on {}", sock.ifname()),
                error: e.to_string(),
            })?;
        let ring = match config.rx_ring {
            Some(bytes) => Some(RxRing::new(&sock, bytes)?),
            None => None,
        };
        Ok(PacketPort {
            recv: RecvBatch::new(config.batch, sock.mtu() + 64),
            ring,
            sock,
        })
    }

    /// `sock` as a port that keeps every frame of its EtherType (no rank filter, no ring):
    /// the multicast carrier's, whose group frames are every rank's.
    pub fn plain(sock: RawSocket, batch: usize) -> PacketPort {
        PacketPort {
            recv: RecvBatch::new(batch, sock.mtu() + 64),
            ring: None,
            sock,
        }
    }

    /// [`PacketPort::plain`] receiving through a PACKET_MMAP ring of about `bytes`
    /// ([`RxRing`]: no system call and no copy of the kernel's per frame handed out).
    pub fn plain_with_ring(
        sock: RawSocket,
        batch: usize,
        bytes: usize,
    ) -> Result<PacketPort, TransportError> {
        let ring = RxRing::new(&sock, bytes)?;
        let mut port = PacketPort::plain(sock, batch);
        port.ring = Some(ring);
        Ok(port)
    }

    /// How many frames the receive ring holds, if frames arrive through one.
    pub fn ring_frames(&self) -> Option<usize> {
        self.ring.as_ref().map(RxRing::frames)
    }

    pub fn socket(&self) -> &RawSocket {
        &self.sock
    }
}

impl Port for PacketPort {
    fn name(&self) -> &str {
        self.sock.ifname()
    }

    fn mac(&self) -> Mac {
        self.sock.mac()
    }

    fn mtu(&self) -> usize {
        self.sock.mtu()
    }

    /// A full socket buffer (EAGAIN, ENOBUFS) or a signal takes nothing: not an error.
    fn send(&mut self, frames: &Batch<'_>) -> io::Result<usize> {
        match self.sock.send_batch(frames) {
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS))
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(0)
            }
            other => other,
        }
    }

    /// One `recvmmsg` batch, or up to `max` frames of the ring. Frames this host sent (seen
    /// by packet taps) are taken but not handed on.
    fn receive(&mut self, max: usize, f: &mut dyn FnMut(Arrived<'_>)) -> io::Result<usize> {
        if let Some(ring) = &mut self.ring {
            return Ok(ring.drain(max.max(1), |mac, to, cut, bytes| f((mac, to, cut, bytes))));
        }
        match self.sock.recv_batch(&mut self.recv) {
            Ok(n) => {
                self.recv.frames().for_each(f);
                Ok(n)
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    fn fd(&self) -> RawFd {
        self.sock.raw_fd()
    }

    /// PACKET_STATISTICS (which resets on read).
    fn take_drops(&self) -> u64 {
        self.sock.take_kernel_drops().unwrap_or(0)
    }
}
