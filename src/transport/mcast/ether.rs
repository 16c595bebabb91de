//! Raw Ethernet multicast: frames of EtherType 0x88B6 (IEEE local experimental 2; the raw
//! Ethernet link's unicast frames are 0x88B5, so neither socket sees the other's) to the
//! job's group MAC ([`Group::mac`](super::Group), locally administered 03:50:…, never a
//! link-local 01:80:c2 group that bridges do not forward) or to one rank's MAC, through a raw
//! Ethernet [`Port`]: an `AF_PACKET` socket that joined the group (`PACKET_ADD_MEMBERSHIP`;
//! needs CAP_NET_RAW, [`EtherCarrier::open`]; frames arrive through its PACKET_MMAP ring,
//! where [`Carrier::visit`] hands them over for the caller to check and land with one copy,
//! or [`Carrier::recv_batch`] copies them into a [`Batch`]) or a port of the in-memory switch
//! ([`EtherCarrier::on_port`]: `raweth::medium` delivers a group frame to every port that
//! joined).
//!
//! A bridge's IGMP snooping filters IP multicast only (01:00:5e:…): frames to this group are
//! flooded to every port of a switch, snooping or not. UDP ([`super::udp`]) is the carrier
//! for networks that filter.

use super::{Batch, Carrier, Source, To, Visitor};
use crate::transport::raweth::port::{PacketPort, Port};
use crate::transport::raweth::socket::{mac_to_string, Addressed, Mac, RawSocket};
use crate::transport::TransportError;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;

/// The multicast carrier's EtherType (IEEE 802 local experimental 2).
pub const ETHERTYPE: u16 = 0x88B6;

/// The receive ring's size at least (bytes; slots of a power of two above the MTU).
const RING_BYTES: usize = 8 << 20;

/// One rank's raw Ethernet multicast carrier on port `P`.
pub struct EtherCarrier<P: Port> {
    port: P,
    group: Mac,
    /// Every rank's MAC, by rank.
    peers: Vec<Mac>,
    arrived: VecDeque<(Mac, Vec<u8>)>,
    /// Buffers of frames already handed out, reused for the next (no allocation per frame).
    spare: Vec<Vec<u8>>,
    batch: usize,
    /// The socket's receive buffer as the kernel reports it (`None` in memory).
    rcvbuf: Option<usize>,
    /// The interface's NIC checks every frame's FCS and drops one that fails
    /// ([`super::fcs`]): the payload needs no CRC of its own (false in memory).
    link_sums: bool,
}

/// A raw socket on `ifname` for the carrier's EtherType that joined `group`.
fn joined(ifname: &str, group: Mac) -> Result<RawSocket, TransportError> {
    let sock = RawSocket::open_with(ifname, ETHERTYPE)?;
    sock.add_membership(&group)
        .map_err(|e| TransportError::Setup {
            what: format!("join group {} on {ifname}", mac_to_string(&group)),
            error: e.to_string(),
        })?;
    Ok(sock)
}

impl EtherCarrier<PacketPort> {
    /// Opens interface `ifname` (in this thread's network namespace) for `group`.
    pub fn open(ifname: &str, group: Mac) -> Result<EtherCarrier<PacketPort>, TransportError> {
        let sock = joined(ifname, group)?;
        // The raw socket asked for a large receive buffer (SO_RCVBUFFORCE where privileged);
        // what it got sizes the agreed window.
        let rcvbuf = crate::transport::raweth::socket::int_option(
            sock.raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
        )
        .ok()
        .and_then(|b| usize::try_from(b).ok());
        let mtu = sock.mtu();
        let link_sums = match super::fcs::query(sock.raw_fd(), ifname) {
            Ok(nic) => {
                let sums = super::fcs::checks_fcs(&nic);
                tracing::debug!(
                    "multicast on {ifname}: {nic:?}: {}",
                    if sums {
                        "the NIC checks the FCS, payloads need no CRC of their own"
                    } else {
                        "payloads carry their CRC"
                    }
                );
                sums
            }
            Err(e) => {
                tracing::debug!(
                    "multicast on {ifname}: no ethtool answer ({e}): payloads carry their CRC"
                );
                false
            }
        };
        // Frames arrive through a PACKET_MMAP ring as large as that buffer: a receiver then
        // pays no system call and no copy of the kernel's per frame (docs/multicast.md,
        // "Receivers' CPU: the floor": 2 x a memcpy per message against 7-10 x with
        // `recvmmsg`). Where the ring cannot be set up, `recvmmsg` as before.
        let ring_bytes = rcvbuf.unwrap_or(RING_BYTES).max(RING_BYTES);
        let port = match PacketPort::plain_with_ring(sock, 32, ring_bytes) {
            Ok(port) => port,
            Err(e) => {
                tracing::debug!("multicast on {ifname}: no receive ring ({e}); recvmmsg");
                PacketPort::plain(joined(ifname, group)?, 32)
            }
        };
        // The window may not hold more frames than the ring: each counted as the window
        // counts a datagram in a socket's buffer (`comm::multicast_setup::window`).
        let rcvbuf = match port.ring_frames() {
            Some(frames) => {
                let held = frames.saturating_mul(2 * mtu + 512);
                Some(rcvbuf.map_or(held, |b| b.min(held)))
            }
            None => rcvbuf,
        };
        let mut c = EtherCarrier::on_port(port, group);
        c.rcvbuf = rcvbuf;
        c.link_sums = link_sums;
        Ok(c)
    }
}

impl<P: Port> EtherCarrier<P> {
    /// The carrier on `port`, which receives `group`'s frames already.
    pub fn on_port(port: P, group: Mac) -> EtherCarrier<P> {
        EtherCarrier {
            port,
            group,
            peers: Vec::new(),
            arrived: VecDeque::new(),
            spare: Vec::new(),
            batch: 32,
            rcvbuf: None,
            link_sums: false,
        }
    }

    /// This rank's MAC: what the others need ([`EtherCarrier::set_peers`]).
    pub fn mac(&self) -> Mac {
        self.port.mac()
    }

    /// Bytes one frame may carry after the Ethernet header.
    pub fn mtu(&self) -> usize {
        self.port.mtu()
    }

    /// Every rank's MAC, by rank.
    pub fn set_peers(&mut self, peers: Vec<Mac>) {
        self.peers = peers;
    }
}

impl<P: Port> Carrier for EtherCarrier<P> {
    fn describe(&self) -> String {
        format!(
            "ether:{} group {}",
            self.port.name(),
            mac_to_string(&self.group)
        )
    }

    fn send(&mut self, to: To, header: &[u8], payload: &[u8]) -> io::Result<bool> {
        let mac = match to {
            To::Group => self.group,
            To::Rank(r) => match self.peers.get(r) {
                Some(m) => *m,
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("rank {r} has no MAC address"),
                    ))
                }
            },
        };
        let batch = [(mac, [IoSlice::new(header), IoSlice::new(payload)])];
        Ok(self.port.send(&batch)? == 1)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<(Source, usize)>> {
        if self.arrived.is_empty() {
            let (arrived, spare) = (&mut self.arrived, &mut self.spare);
            self.port
                .receive(self.batch, &mut |(mac, to, cut, bytes)| {
                    // Unicast frames flooded to this host for another, and cut ones, are not ours.
                    if to == Addressed::Us && !cut {
                        let mut v = spare.pop().unwrap_or_default();
                        v.clear();
                        v.extend_from_slice(bytes);
                        arrived.push_back((mac, v));
                    }
                })?;
        }
        Ok(self.arrived.pop_front().map(|(mac, bytes)| {
            let n = bytes.len().min(buf.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            // At most one batch of buffers is kept.
            if self.spare.len() < self.batch {
                self.spare.push(bytes);
            }
            (Source::Mac(mac), n)
        }))
    }

    /// Frames land in `batch`'s slots straight from the port (from the ring: one copy in
    /// all), visited as [`Carrier::visit`] hands them; frames the port hands over beyond the
    /// free slots wait for the next call.
    fn recv_batch(&mut self, batch: &mut Batch) -> io::Result<usize> {
        let mut n = 0;
        let mut spare = std::mem::take(&mut self.spare);
        let mut over = Vec::new();
        // Until the batch is full or the port has nothing (a `recvmmsg` takes at most its
        // own batch, fewer than the slots may be).
        loop {
            let free = batch.capacity() - batch.len();
            if free == 0 {
                break;
            }
            let took = self.visit(free, &mut |bytes, source, _| match batch.next_free() {
                Some(slot) => {
                    let len = bytes.len().min(slot.len());
                    slot[..len].copy_from_slice(&bytes[..len]);
                    batch.commit(bytes.len(), source);
                    n += 1;
                }
                None => {
                    if let Source::Mac(mac) = source {
                        let mut v = spare.pop().unwrap_or_default();
                        v.clear();
                        v.extend_from_slice(bytes);
                        over.push((mac, v));
                    }
                }
            })?;
            if took.unwrap_or(0) == 0 {
                break;
            }
        }
        // The port's overflow came after everything queued (the visit drained the queue
        // before it read the port).
        self.arrived.extend(over);
        spare.append(&mut self.spare);
        spare.truncate(self.batch);
        self.spare = spare;
        Ok(n)
    }

    /// Frames where the port has them (the ring's slots, or its `recvmmsg` buffers): the
    /// caller checks each and copies its payload once, to where it belongs. Frames a
    /// [`Carrier::recv`] took from the port before wait here first.
    fn visit(&mut self, max: usize, f: &mut Visitor<'_>) -> io::Result<Option<usize>> {
        let peers = &self.peers;
        let is_rank = |rank: usize, source: &Source| is_peer(peers, rank, source);
        let mut n = 0;
        while n < max {
            let Some((mac, bytes)) = self.arrived.pop_front() else {
                break;
            };
            f(&bytes, Source::Mac(mac), &is_rank);
            n += 1;
            if self.spare.len() < self.batch {
                self.spare.push(bytes);
            }
        }
        if n < max {
            n += self.port.receive(max - n, &mut |(mac, to, cut, bytes)| {
                // Unicast frames flooded to this host for another, and cut ones, are not ours.
                if to == Addressed::Us && !cut {
                    f(bytes, Source::Mac(mac), &is_rank);
                }
            })?;
        }
        Ok(Some(n))
    }

    fn is_rank(&self, rank: usize, source: &Source) -> bool {
        is_peer(&self.peers, rank, source)
    }

    fn fds(&self) -> Vec<RawFd> {
        vec![self.port.fd()]
    }

    fn rcvbuf(&self) -> Option<usize> {
        self.rcvbuf
    }

    fn drops(&self) -> Option<u64> {
        Some(self.port.take_drops())
    }

    fn checksums_payload(&self) -> bool {
        self.link_sums
    }
}

/// Whether `source` is rank `rank`'s MAC in `peers`.
fn is_peer(peers: &[Mac], rank: usize, source: &Source) -> bool {
    matches!(source, Source::Mac(m) if peers.get(rank) == Some(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::raweth::medium::{Impairments, Medium, MemoryPort};

    /// Two carriers on one in-memory medium, b joined to the group: (a's, b's), each knowing
    /// both ranks' MACs.
    fn pair() -> (EtherCarrier<MemoryPort>, EtherCarrier<MemoryPort>) {
        let group = [0x03, 0x50, 0, 0, 0, 1];
        let medium = Medium::new(4096, Impairments::default());
        let a = medium.port("a", [2, 0, 0, 0, 0, 1], 1500).unwrap();
        let b = medium.port("b", [2, 0, 0, 0, 0, 2], 1500).unwrap();
        b.join(group);
        let mut tx = EtherCarrier::on_port(a, group);
        let mut rx = EtherCarrier::on_port(b, group);
        let peers = vec![[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        tx.set_peers(peers.clone());
        rx.set_peers(peers);
        (tx, rx)
    }

    #[test]
    fn a_batch_takes_every_frame_in_order_across_calls_and_cuts_what_is_too_long() {
        let (mut tx, mut rx) = pair();
        let frame =
            |i: usize| -> Vec<u8> { (0..1 + i * 13 % 1400).map(|j| (i + j) as u8).collect() };
        for i in 0..100 {
            let f = frame(i);
            let to = if i % 10 == 9 { To::Rank(1) } else { To::Group };
            assert!(tx.send(to, &f[..1], &f[1..]).unwrap());
        }
        // One frame through `recv` first, then batches of 7 slots of 1000 bytes.
        let mut got = Vec::new();
        let mut buf = vec![0; 1500];
        let (source, n) = rx.recv(&mut buf).unwrap().unwrap();
        assert_eq!(source, Source::Mac([2, 0, 0, 0, 0, 1]));
        got.push(buf[..n].to_vec());
        let mut batch = Batch::new(7, 1000);
        loop {
            batch.clear();
            let n = rx.recv_batch(&mut batch).unwrap();
            assert_eq!(n, batch.len());
            if n == 0 {
                break;
            }
            for i in 0..n {
                let (bytes, source) = batch.get(i);
                assert_eq!(source, Source::Mac([2, 0, 0, 0, 0, 1]));
                got.push(bytes.to_vec());
            }
        }
        assert_eq!(got.len(), 100);
        for (i, g) in got.iter().enumerate() {
            let f = frame(i);
            assert_eq!(g[..], f[..f.len().min(1000)], "frame {i}");
        }
    }

    #[test]
    fn a_visit_hands_every_frame_in_order_once_with_what_recv_left_first() {
        let (mut tx, mut rx) = pair();
        let frame =
            |i: usize| -> Vec<u8> { (0..1 + i * 7 % 1400).map(|j| (i ^ j) as u8).collect() };
        for i in 0..90 {
            let f = frame(i);
            assert!(tx.send(To::Group, &f[..1], &f[1..]).unwrap());
        }
        // `recv` takes a port's batch and hands one frame: the rest wait in the carrier.
        let mut got = Vec::new();
        let mut buf = vec![0; 1500];
        let (_, n) = rx.recv(&mut buf).unwrap().unwrap();
        got.push(buf[..n].to_vec());
        loop {
            let took = rx
                .visit(5, &mut |bytes, source, is_rank| {
                    assert!(is_rank(0, &source) && !is_rank(1, &source));
                    got.push(bytes.to_vec());
                })
                .unwrap()
                .expect("the ether carrier visits in place");
            assert!(took <= 5 + 32, "{took}");
            if took == 0 {
                break;
            }
        }
        assert_eq!(got.len(), 90);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(*g, frame(i), "frame {i}");
        }
    }
}
