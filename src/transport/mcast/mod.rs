//! Multicast carriers: what moves the frames of a multicast broadcast (`wire::mcast`) between
//! ranks, to the job's group ([`group::Group`], from the job cookie) and to one rank. Two
//! carriers behind one trait, [`Carrier`]:
//!
//! - [`udp::UdpCarrier`]: UDP/IP multicast with an IGMP join; no privilege; works behind
//!   snooping switches and across a routed hop (TTL > 1). Group frames leave from the rank's
//!   unicast socket and arrive on a socket bound to the group; repairs, NACKs and reports use
//!   the unicast sockets.
//! - [`ether::EtherCarrier`]: raw Ethernet frames of EtherType 0x88B6 to the group MAC (or a
//!   rank's MAC) through a raw Ethernet [`Port`](crate::transport::raweth::port::Port): an
//!   `AF_PACKET` socket with `PACKET_ADD_MEMBERSHIP` (CAP_NET_RAW), or a port of the
//!   in-memory switch (`raweth::medium`), which delivers group frames to every member, so the
//!   protocol's tests run without root.
//!
//! [`accept`] is the one receive check of both: bounds, version, checksum, cookie, that the
//! frame is for this rank or the group, and that it came from the address of the rank it
//! names. [`probe`] is the setup probe: does the group reach every rank? The protocol itself
//! (`engine::multicast`) is pure; [`codec`] turns its messages into frames and back.
//!
//! [`xsk`] is the first piece of a receive path where the NIC places frames: an AF_XDP socket
//! on one queue whose XDP program ([`xdp_prog`]) redirects the raw Ethernet carrier's frames
//! into its UMEM (receive only, not a carrier yet; `pipecast bench --floor ether-xdp`).
//!
//! The communicator opens the UDP carrier and runs the probe at its setup, and the progress
//! thread runs the protocol over it (`comm::multicast_setup`, `comm::multicast`).

pub mod batch;
pub mod codec;
pub mod ether;
pub mod fcs;
pub mod group;
pub mod landing;
pub mod probe;
pub mod ring3;
pub mod udp;
pub mod xdp_prog;
pub mod xsk;

pub use batch::Batch;
pub use group::Group;
pub use landing::{accept_unsummed, Accepted, Unsummed};

use crate::wire::mcast::{Frame, Header, GROUP};
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::RawFd;

/// Where a received frame came from, as the carrier saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Udp(SocketAddrV4),
    Mac(crate::wire::frame::Mac),
}

/// Where a frame goes.
pub use crate::engine::multicast::To;

/// Moves multicast frames: to the job's group or to one rank, without blocking.
pub trait Carrier: Send {
    /// For logs: `udp:239.192.1.2:34567 on 10.0.0.1`, `ether:eth0 03:50:…`.
    fn describe(&self) -> String;

    /// Sends one frame (its header and payload); `Ok(false)` when the socket is full (try
    /// again when a descriptor is writable).
    fn send(&mut self, to: To, header: &[u8], payload: &[u8]) -> io::Result<bool>;

    /// Sends `frames` (each a header and payload) to the group, in order: how many left
    /// (the first ones) before the socket was full; the rest did not. The frames on the wire
    /// are the ones [`Carrier::send`] would send one by one, which the default does (the UDP
    /// carrier hands the kernel many with one call, UDP GSO).
    fn send_group(&mut self, frames: &[(&[u8], &[u8])]) -> io::Result<usize> {
        for (i, (header, payload)) in frames.iter().enumerate() {
            if !self.send(To::Group, header, payload)? {
                return Ok(i);
            }
        }
        Ok(frames.len())
    }

    /// Takes the next frame that waits into `buf`: its source and length, `None` when none
    /// waits. A frame longer than `buf` is cut (and then fails [`accept`]).
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<(Source, usize)>>;

    /// Takes what waits into `batch`'s free slots, as many frames as they hold; how many it
    /// took (0: none waits). Each slot is a frame as [`Carrier::recv`] gives it (cut at the
    /// slot's length). The default calls [`Carrier::recv`] slot by slot.
    fn recv_batch(&mut self, batch: &mut Batch) -> io::Result<usize> {
        let mut n = 0;
        while let Some(slot) = batch.next_free() {
            let Some((source, len)) = self.recv(slot)? else {
                break;
            };
            batch.commit(len, source);
            n += 1;
        }
        Ok(n)
    }

    /// Hands up to about `max` waiting frames to `f` where they arrived (a PACKET_MMAP
    /// ring's slot, the port's receive buffers), without copying them first: each with its
    /// source and the carrier's [`Carrier::is_rank`] (the carrier is borrowed meanwhile).
    /// Nothing in the bytes is trusted: `f` checks each with [`accept`] before it reads a
    /// byte of it, and copies what it keeps. Returns how many frames it took (0: none
    /// waits), or `None` when this carrier has no such place ([`Carrier::recv_batch`] then).
    fn visit(&mut self, max: usize, f: &mut Visitor<'_>) -> io::Result<Option<usize>> {
        let _ = (max, f);
        Ok(None)
    }

    /// Whether `source` is rank `rank`'s address.
    fn is_rank(&self, rank: usize, source: &Source) -> bool;

    /// The descriptors to wait on for arrivals.
    fn fds(&self) -> Vec<RawFd>;

    /// The receive buffer the kernel gave the group's socket (bytes, as `SO_RCVBUF` reads
    /// back: Linux doubles what it was asked for to cover its overhead); `None` in memory.
    fn rcvbuf(&self) -> Option<usize>;

    /// Datagrams the kernel dropped for want of buffer space, if it says.
    fn drops(&self) -> Option<u64> {
        None
    }

    /// Whether the carrier checksums every frame's payload itself and drops one that fails
    /// (UDP: the kernel checks the datagram's checksum; raw Ethernet where the NIC checks
    /// the FCS, [`fcs`]): this rank may then take data frames with a header-only CRC
    /// ([`flags::HEADER_SUM`](crate::wire::mcast::flags::HEADER_SUM)); a rank sends them
    /// only where every rank's carrier does (`comm::multicast_setup`).
    fn checksums_payload(&self) -> bool {
        false
    }
}

/// What [`Carrier::visit`] hands each frame to: its bytes as they arrived, its source, and
/// whether a source is a given rank's address ([`Carrier::is_rank`]).
pub type Visitor<'a> = dyn FnMut(&[u8], Source, &dyn Fn(usize, &Source) -> bool) + 'a;

/// Stands in for a carrier lent out for a moment (while its frames are visited in place):
/// sends nothing, receives nothing, knows no rank.
pub struct Detached;

impl Carrier for Detached {
    fn describe(&self) -> String {
        "detached".to_string()
    }

    fn send(&mut self, _: To, _: &[u8], _: &[u8]) -> io::Result<bool> {
        Err(io::Error::other("the multicast carrier is lent out"))
    }

    fn recv(&mut self, _: &mut [u8]) -> io::Result<Option<(Source, usize)>> {
        Ok(None)
    }

    fn is_rank(&self, _: usize, _: &Source) -> bool {
        false
    }

    fn fds(&self) -> Vec<RawFd> {
        Vec::new()
    }

    fn rcvbuf(&self) -> Option<usize> {
        None
    }
}

/// Why an arrived frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Too short, another version or kind, a payload past its end.
    Malformed,
    Checksum,
    /// Another job's (a group shared by a hash collision, or a stray).
    Foreign,
    /// For another rank (ranks of a host share its NIC).
    OtherRank,
    /// Its `from` is not the rank at its source address.
    Spoofed,
}

/// Counts of what [`accept`] dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Drops {
    pub malformed: u64,
    pub checksum: u64,
    pub foreign: u64,
    pub other_rank: u64,
    pub spoofed: u64,
}

impl Drops {
    pub fn count(&mut self, d: Dropped) {
        match d {
            Dropped::Malformed => self.malformed += 1,
            Dropped::Checksum => self.checksum += 1,
            Dropped::Foreign => self.foreign += 1,
            Dropped::OtherRank => self.other_rank += 1,
            Dropped::Spoofed => self.spoofed += 1,
        }
    }
}

/// Checks an arrived frame for rank `me` of the job with `cookie`, in this order: lengths,
/// version and kind, checksum, cookie (a data frame's tag), that it is for `me` or the group
/// (a control frame: data frames name no receiver, their bytes are every rank's), and that
/// `source` is the address of the rank it names (`is_rank`). Returns its header and payload.
/// A frame whose checksum leaves the payload to the carrier is dropped ([`accept_with`]
/// takes it where the carrier checksums).
pub fn accept<'a>(
    bytes: &'a [u8],
    source: &Source,
    me: usize,
    cookie: u64,
    is_rank: &dyn Fn(usize, &Source) -> bool,
) -> Result<(Header, &'a [u8]), Dropped> {
    accept_with(bytes, source, me, cookie, is_rank, false)
}

/// [`accept`], where `carrier_sums` says whether the carrier checksummed the payload
/// ([`Carrier::checksums_payload`]): only then may a frame's CRC cover its header alone.
pub fn accept_with<'a>(
    bytes: &'a [u8],
    source: &Source,
    me: usize,
    cookie: u64,
    is_rank: &dyn Fn(usize, &Source) -> bool,
    carrier_sums: bool,
) -> Result<(Header, &'a [u8]), Dropped> {
    let frame = Frame::new_checked(bytes).map_err(|_| Dropped::Malformed)?;
    if !frame.checksum_ok() || (frame.header_sum() && !carrier_sums) {
        return Err(Dropped::Checksum);
    }
    let header = Header::parse(&frame);
    admit(&header, source, me, cookie, is_rank)?;
    // Within `bytes`: `new_checked` saw the whole payload there (empty for control frames).
    let start = header.header_len();
    let payload = &bytes[start..start + frame.payload().len()];
    Ok((header, payload))
}

/// What [`accept_with`] checks of a frame beyond its checksum (and
/// [`accept_unsummed`](landing::accept_unsummed) before the payload's): of this job, for this
/// rank or the group, from the rank whose address it came from.
fn admit(
    header: &Header,
    source: &Source,
    me: usize,
    cookie: u64,
    is_rank: &dyn Fn(usize, &Source) -> bool,
) -> Result<(), Dropped> {
    if !header.of_job(cookie) {
        return Err(Dropped::Foreign);
    }
    if header
        .to()
        .is_some_and(|to| to != GROUP && to as usize != me)
    {
        return Err(Dropped::OtherRank);
    }
    if !is_rank(header.from() as usize, source) {
        return Err(Dropped::Spoofed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::mcast::{cookie_tag, flags, Data, Kind, Repr};

    #[test]
    fn a_header_only_checksum_is_taken_only_where_the_carrier_checksums() {
        let payload = b"seventeen bytes!!";
        let mut data = Data {
            from: 1,
            tag: cookie_tag(77),
            count: payload.len() as u16,
            ..Data::default()
        };
        let source = Source::Mac([2, 0, 0, 0, 0, 1]);
        let is_rank = |r: usize, _: &Source| r == 1;
        let frame = |d: &Data| {
            let h = Header::Data(*d).to_bytes(payload).unwrap();
            [&h[..], payload].concat()
        };
        // A whole-frame CRC: taken by both.
        let whole = frame(&data);
        for sums in [false, true] {
            let (r, p) = accept_with(&whole, &source, 0, 77, &is_rank, sums).unwrap();
            assert_eq!((r, p), (Header::Data(data), &payload[..]));
        }
        // A header-only CRC: dropped where the carrier does not checksum.
        data.flags |= flags::HEADER_SUM;
        let header_only = frame(&data);
        assert_eq!(
            accept(&header_only, &source, 0, 77, &is_rank),
            Err(Dropped::Checksum)
        );
        let (r, p) = accept_with(&header_only, &source, 0, 77, &is_rank, true).unwrap();
        assert_eq!((r, p), (Header::Data(data), &payload[..]));
        // Its header is still checked.
        let mut bad = header_only.clone();
        bad[20] ^= 1;
        assert_eq!(
            accept_with(&bad, &source, 0, 77, &is_rank, true),
            Err(Dropped::Checksum)
        );
        // Another job's tag, another rank's address.
        assert_eq!(
            accept_with(&header_only, &source, 0, 78, &is_rank, true),
            Err(Dropped::Foreign)
        );
        let stranger = Source::Mac([2, 0, 0, 0, 0, 9]);
        let is_rank = |r: usize, s: &Source| r == 1 && *s == source;
        assert_eq!(
            accept_with(&header_only, &stranger, 0, 77, &is_rank, true),
            Err(Dropped::Spoofed)
        );
    }

    #[test]
    fn a_control_frame_for_another_rank_is_dropped() {
        let repr = Repr {
            kind: Kind::Ack,
            from: 1,
            cookie: 77,
            to: 2,
            ..Repr::default()
        };
        let b = Header::Control(repr).to_bytes(&[]).unwrap();
        let source = Source::Mac([2, 0, 0, 0, 0, 1]);
        let is_rank = |r: usize, _: &Source| r == 1;
        assert_eq!(
            accept(&b, &source, 0, 77, &is_rank),
            Err(Dropped::OtherRank)
        );
        let (h, p) = accept(&b, &source, 2, 77, &is_rank).unwrap();
        assert_eq!((h, p), (Header::Control(repr), &[][..]));
        assert_eq!(accept(&b, &source, 2, 78, &is_rank), Err(Dropped::Foreign));
    }
}
