//! Multicast at communicator creation (issue 32; docs/multicast.md): every rank decides the
//! same, from the same answers.
//!
//! 1. With `PIPECAST_MULTICAST` not off and ranks on more than one host (both agreed), every
//!    rank opens a UDP multicast carrier on the address its TCP link uses, joined to the job's
//!    group ([`open`]; `IP_MULTICAST_LOOP` at ranks that share their host, so a root's
//!    neighbours hear it too). A rank that cannot says so: it has no address in the next round.
//! 2. The second round of the bootstrap carries each rank's carrier address, its payload per
//!    datagram (from its MTU) and its receive buffer ([`blob`]).
//! 3. If any rank has no carrier, every rank knows it from that round: no probe, trees for all.
//!    Else rank 0 multicasts its probe; a rank that hears it answers rank 0 by unicast (so rank
//!    0 stops as soon as all did) and one that hears nothing waits the probe's whole duration;
//!    then a third round gathers every rank's answer and every rank applies `probe::agree` to
//!    the same answers ([`agree`]).
//! 4. Agreed: the smallest payload is every rank's segment, the window fits the smallest
//!    receive buffer, and the carrier goes to the progress thread. Not agreed: every rank uses
//!    the trees, and says why at `PIPECAST_LOG=info` (verbose 1 of the MPI glue), naming ranks.

use super::multicast::Agreed;
use super::{Bootstrap, CommError, Config};
use crate::engine::multicast::Config as McastConfig;
use crate::topology::Topology;
use crate::transport::mcast::probe::{self, ProbeConfig};
use crate::transport::mcast::udp::{UdpCarrier, UdpConfig};
use crate::transport::mcast::{Carrier, Group};
use std::net::{Ipv4Addr, SocketAddrV4};

/// Opens this rank's carrier for the job with `cookie`, on the address of its TCP link.
pub fn open(config: &Config, cookie: u64, loopback: bool) -> Result<UdpCarrier, String> {
    let ip: Ipv4Addr = config
        .ip
        .as_deref()
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| {
            format!(
                "the TCP link's address {:?} is not IPv4",
                config.ip.as_deref().unwrap_or("")
            )
        })?;
    let udp = UdpConfig {
        loopback,
        ..UdpConfig::default()
    };
    UdpCarrier::open(Group::of(cookie), ip, udp).map_err(|e| e.to_string())
}

/// What a rank's carrier tells the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Addr {
    addr: SocketAddrV4,
    payload: u32,
    rcvbuf: u32,
}

const BLOB_LEN: usize = 14;

/// This rank's part of the second round: its carrier's address, payload per datagram and
/// receive buffer; empty without a carrier.
pub fn blob(carrier: Option<&Result<UdpCarrier, String>>) -> Vec<u8> {
    let Some(Ok(c)) = carrier else {
        return Vec::new();
    };
    let a = c.local_addr();
    let mut v = Vec::with_capacity(BLOB_LEN);
    v.extend_from_slice(&a.ip().octets());
    v.extend_from_slice(&a.port().to_be_bytes());
    v.extend_from_slice(&(c.max_payload().min(u32::MAX as usize) as u32).to_le_bytes());
    let rcvbuf = c.rcvbuf().unwrap_or(0).min(u32::MAX as usize) as u32;
    v.extend_from_slice(&rcvbuf.to_le_bytes());
    v
}

fn parse(b: &[u8]) -> Option<Addr> {
    let b: &[u8; BLOB_LEN] = b.try_into().ok()?;
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let addr = SocketAddrV4::new(
        Ipv4Addr::new(b[0], b[1], b[2], b[3]),
        u16::from_be_bytes([b[4], b[5]]),
    );
    let a = Addr {
        addr,
        payload: u32_at(6),
        rcvbuf: u32_at(10),
    };
    (a.payload > 0 && a.addr.port() != 0).then_some(a)
}

/// The credit window (segments) for `segment`-byte segments when the smallest receive buffer
/// is `rcvbuf` bytes (as `SO_RCVBUF` reads back): what the buffer holds, each datagram
/// counted at twice its bytes plus 512 for the kernel's bookkeeping, at most the
/// simulator's 4 MiB credit (`model::multicast::window_segments`), at least 16.
pub fn window(segment: u32, rcvbuf: usize) -> u32 {
    let per = 2 * (u64::from(segment) + 64) + 512;
    let fits = rcvbuf as u64 / per;
    let most = crate::model::multicast::window_segments(u64::from(segment));
    fits.min(most).max(16).min(u64::from(u32::MAX)) as u32
}

/// The root's pace (bytes per second as the protocol counts them: payload and frame header)
/// for a link of `bps` bits per second: the link's rate less what every datagram also carries
/// on the wire (IP and UDP headers, 28 bytes; Ethernet's header, check sum, preamble and gap,
/// 38), and 1 % to spare. The switches drop what arrives faster than the slowest port
/// forwards, silently: a root that outran the link would lose whole windows. The room left is
/// also what repairs have on a full link: measured on the 16-machine lab (docs/multicast.md),
/// counting the 14 bytes its shapers charge per frame and 0.2 % to spare took 16 MiB from
/// 1.06 to 1.03 × T(m) without loss, but with 1 % loss per link from 8.8 to 23.6 × T(m).
pub fn pace(bps: u64, segment: u32) -> u64 {
    let counted = u64::from(segment) + 64;
    let wire = counted + 28 + 38;
    (bps / 8).saturating_mul(counted) / wire * 99 / 100
}

/// What every rank knows alike when it agrees on multicast (and its own rank).
pub struct Job<'a> {
    pub rank: usize,
    pub size: usize,
    /// The job's cookie (rank 0's).
    pub cookie: u64,
    pub config: &'a Config,
    /// The engine's topology (ack trees).
    pub topology: &'a Topology,
    /// The agreed link rate (bits per second), if known: the root's pace.
    pub rate_bps: Option<u64>,
}

/// Steps 3 and 4 of the module doc, after the second round (`ready`: every rank's blob of
/// that round, whose byte 0 said ready). Every rank calls it; a bootstrap failure is an
/// error, anything else an agreed outcome: the carrier, or why not (the same at every rank).
pub fn agree(
    job: &Job<'_>,
    bootstrap: &mut dyn Bootstrap,
    mine: Result<UdpCarrier, String>,
    ready: &[Vec<u8>],
) -> crate::Result<Result<Agreed, String>> {
    let Job {
        rank,
        size,
        cookie,
        config,
        topology,
        rate_bps,
    } = *job;
    if let Err(e) = &mine {
        tracing::info!(rank, "cannot open the multicast carrier: {e}");
    }
    let addrs: Vec<Option<Addr>> = ready.iter().map(|b| b.get(1..).and_then(parse)).collect();
    let missing: Vec<usize> = (0..size)
        .filter(|&r| addrs.get(r).copied().flatten().is_none())
        .collect();
    let addrs: Vec<Addr> = addrs.into_iter().flatten().collect();
    let mut carrier = match (mine, missing.is_empty()) {
        (Ok(c), true) if addrs.len() == size => c,
        _ => {
            return Ok(Err(format!(
                "ranks {missing:?} could not open the UDP multicast carrier (their logs say why at PIPECAST_LOG=info)"
            )))
        }
    };
    carrier.set_peers(addrs.iter().map(|a| a.addr).collect());
    let group = carrier.group();
    let probe_config = ProbeConfig {
        answers: size - 1,
        ..ProbeConfig::default()
    };
    let nonce = cookie ^ 0x7072_6f62_6521_0032;
    let heard = probe::probe(&mut carrier, rank, 0, cookie, nonce, probe_config)
        .map_err(|e| tracing::info!(rank, "the multicast probe failed here: {e}"))
        .unwrap_or(false);
    let answers = bootstrap.allgather(&[u8::from(heard)])?;
    if answers.len() != size {
        return Err(CommError::Bootstrap(format!(
            "allgather returned {} blobs for {size} ranks",
            answers.len()
        ))
        .into());
    }
    let received: Vec<bool> = answers.iter().map(|a| a.first() == Some(&1)).collect();
    if let Err(missed) = probe::agree(&received) {
        return Ok(Err(format!(
            "ranks {missed:?} did not receive rank 0's probe on the multicast group {}:{} within {:?} (a switch that filters multicast, IGMP snooping without a join, or a network without multicast)",
            group.ip,
            group.port,
            probe_config.duration
        )));
    }
    let segment = addrs.iter().map(|a| a.payload).min().unwrap_or(1).max(1);
    let rcvbuf = addrs.iter().map(|a| a.rcvbuf as usize).min().unwrap_or(0);
    let mcast = McastConfig {
        window: window(segment, rcvbuf),
        liveness: u64::try_from(config.timeout.as_nanos()).unwrap_or(u64::MAX),
        rate: rate_bps.map(|bps| pace(bps, segment)),
        burst: 16 * (u64::from(segment) + 64),
        ..McastConfig::default()
    };
    Ok(Ok(Agreed {
        carrier: Box::new(carrier),
        cookie,
        segment,
        config: mcast,
        topology: topology.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_round_trip_and_a_missing_carrier_has_none() {
        assert_eq!(blob(None), Vec::<u8>::new());
        assert_eq!(blob(Some(&Err("no".into()))), Vec::<u8>::new());
        let mut b = vec![10, 0, 0, 1, 0x12, 0x34];
        b.extend_from_slice(&1408u32.to_le_bytes());
        b.extend_from_slice(&425_984u32.to_le_bytes());
        let a = parse(&b).unwrap();
        assert_eq!(a.addr, "10.0.0.1:4660".parse().unwrap());
        assert_eq!((a.payload, a.rcvbuf), (1408, 425_984));
        assert_eq!(parse(&b[..13]), None);
        assert_eq!(parse(&[]), None);
    }

    #[test]
    fn the_root_paces_below_the_link_rate() {
        let p = pace(100_000_000, 1408);
        // 100 Mbit/s is 12.5 MB/s on the wire; 1472 of every 1538 bytes are counted.
        assert!(p < 12_500_000 * 1472 / 1538 && p > 11_500_000, "{p}");
    }

    #[test]
    fn the_window_fits_the_smallest_receive_buffer() {
        // An unprivileged rank's 212,992-byte buffer (read back doubled).
        let w = window(1408, 425_984);
        assert!((100..=150).contains(&w), "{w}");
        // A forced 8 MiB buffer: the simulator's 4 MiB credit.
        assert_eq!(
            u64::from(window(1408, 16 << 20)),
            crate::model::multicast::window_segments(1408)
        );
        assert_eq!(window(1408, 0), 16);
    }
}
