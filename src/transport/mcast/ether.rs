//! Raw Ethernet multicast: frames of EtherType 0x88B6 (IEEE local experimental 2; the raw
//! Ethernet link's unicast frames are 0x88B5, so neither socket sees the other's) to the
//! job's group MAC ([`Group::mac`](super::Group), locally administered 03:50:…, never a
//! link-local 01:80:c2 group that bridges do not forward) or to one rank's MAC, through a raw
//! Ethernet [`Port`]: an `AF_PACKET` socket that joined the group (`PACKET_ADD_MEMBERSHIP`;
//! needs CAP_NET_RAW, [`EtherCarrier::open`]) or a port of the in-memory switch
//! ([`EtherCarrier::on_port`]: `raweth::medium` delivers a group frame to every port that
//! joined).
//!
//! A bridge's IGMP snooping filters IP multicast only (01:00:5e:…): frames to this group are
//! flooded to every port of a switch, snooping or not. UDP ([`super::udp`]) is the carrier
//! for networks that filter.

use super::{Carrier, Source, To};
use crate::transport::raweth::port::{PacketPort, Port};
use crate::transport::raweth::socket::{mac_to_string, Addressed, Mac, RawSocket};
use crate::transport::TransportError;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;

/// The multicast carrier's EtherType (IEEE 802 local experimental 2).
pub const ETHERTYPE: u16 = 0x88B6;

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
}

impl EtherCarrier<PacketPort> {
    /// Opens interface `ifname` (in this thread's network namespace) for `group`.
    pub fn open(ifname: &str, group: Mac) -> Result<EtherCarrier<PacketPort>, TransportError> {
        let sock = RawSocket::open_with(ifname, ETHERTYPE)?;
        sock.add_membership(&group)
            .map_err(|e| TransportError::Setup {
                what: format!("join group {} on {ifname}", mac_to_string(&group)),
                error: e.to_string(),
            })?;
        // The raw socket asked for a large receive buffer (SO_RCVBUFFORCE where privileged);
        // what it got sizes the agreed window.
        let rcvbuf = crate::transport::raweth::socket::int_option(
            sock.raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
        )
        .ok()
        .and_then(|b| usize::try_from(b).ok());
        let mut c = EtherCarrier::on_port(PacketPort::plain(sock, 32), group);
        c.rcvbuf = rcvbuf;
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

    fn is_rank(&self, rank: usize, source: &Source) -> bool {
        matches!(source, Source::Mac(m) if self.peers.get(rank) == Some(m))
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
}
