//! Multicast at communicator creation (issue 32; docs/multicast.md): every rank decides the
//! same, from the same answers.
//!
//! 1. With `PIPECAST_MULTICAST` not off and ranks on more than one host (both agreed), every
//!    rank opens a multicast carrier on the interface its TCP link uses, joined to the job's
//!    group ([`open`]): UDP/IP (`udp`, `auto`; `IP_MULTICAST_LOOP` at ranks that share their
//!    host, so a root's neighbours hear it too) or raw Ethernet frames to the group MAC
//!    (`ether`: CAP_NET_RAW, one rank per interface). A rank that cannot says so: it has no
//!    address in the next round.
//! 2. The second round of the bootstrap carries each rank's carrier address (IPv4 and port, or
//!    MAC), its payload per datagram (its MTU less the IP/UDP headers and the 32-byte data
//!    frame header, `wire::mcast::DATA_HEADER_LEN`) and its receive buffer ([`blob`]). Two
//!    ranks with one MAC under `ether` (a shared host) make every rank use the trees.
//! 3. If any rank has no carrier, every rank knows it from that round: no probe, trees for all.
//!    Else rank 0 multicasts its probe; a rank that hears it answers rank 0 by unicast (so rank
//!    0 stops as soon as all did) and one that hears nothing waits the probe's whole duration;
//!    then a third round gathers every rank's answer and every rank applies `probe::agree` to
//!    the same answers ([`agree`]).
//! 4. Agreed: the smallest payload is every rank's segment, the window fits the smallest
//!    receive buffer, and the carrier goes to the progress thread. Not agreed: every rank uses
//!    the trees, and says why at `PIPECAST_LOG=info` (verbose 1 of the MPI glue), naming ranks.

use super::multicast::Agreed;
use super::{Bootstrap, CommError, Config, MulticastMode};
use crate::engine::multicast::Config as McastConfig;
use crate::topology::Topology;
use crate::transport::mcast::ether::EtherCarrier;
use crate::transport::mcast::probe::{self, ProbeConfig};
use crate::transport::mcast::udp::{UdpCarrier, UdpConfig};
use crate::transport::mcast::{Carrier, Group};
use crate::transport::raweth::port::PacketPort;
use crate::transport::raweth::socket::mac_to_string;
use crate::wire::mcast::DATA_HEADER_LEN;
use std::net::{Ipv4Addr, SocketAddrV4};

/// This rank's opened carrier: UDP/IP multicast (`PIPECAST_MULTICAST=udp` or `auto`) or raw
/// Ethernet frames to the group MAC (`ether`, CAP_NET_RAW). Every rank opens the same kind
/// (the mode is an agreed setting).
pub enum Opened {
    Udp(UdpCarrier),
    Ether(Box<EtherCarrier<PacketPort>>),
}

impl Opened {
    /// The descriptors the progress thread waits on.
    pub fn fds(&self) -> Vec<std::os::fd::RawFd> {
        self.carrier().fds()
    }

    fn carrier(&self) -> &dyn Carrier {
        match self {
            Opened::Udp(c) => c,
            Opened::Ether(c) => c.as_ref(),
        }
    }

    fn carrier_mut(&mut self) -> &mut dyn Carrier {
        match self {
            Opened::Udp(c) => c,
            Opened::Ether(c) => c.as_mut(),
        }
    }

    fn into_carrier(self) -> Box<dyn Carrier> {
        match self {
            Opened::Udp(c) => Box::new(c),
            Opened::Ether(c) => c,
        }
    }

    /// What the others need to reach this rank: its unicast IPv4 address and port, or its MAC
    /// (six bytes either way).
    fn address(&self) -> [u8; 6] {
        match self {
            Opened::Udp(c) => {
                let a = c.local_addr();
                let (ip, port) = (a.ip().octets(), a.port().to_be_bytes());
                [ip[0], ip[1], ip[2], ip[3], port[0], port[1]]
            }
            Opened::Ether(c) => c.mac(),
        }
    }

    /// Payload bytes one frame may carry after every header.
    fn payload(&self) -> usize {
        match self {
            Opened::Udp(c) => c.max_payload(),
            Opened::Ether(c) => c
                .mtu()
                .saturating_sub(DATA_HEADER_LEN)
                .clamp(1, crate::wire::mcast::MAX_PAYLOAD),
        }
    }

    /// Bytes every frame carries besides the protocol's and Ethernet's: IP and UDP headers for
    /// UDP, none for raw Ethernet ([`pace`]).
    fn overhead(&self) -> u64 {
        match self {
            Opened::Udp(_) => 28,
            Opened::Ether(_) => 0,
        }
    }

    /// Every rank's address (from [`Opened::address`]), by rank. `Err`: two ranks share one
    /// MAC, which the raw Ethernet carrier cannot tell apart.
    fn set_peers(&mut self, addrs: &[[u8; 6]]) -> Result<(), String> {
        match self {
            Opened::Udp(c) => c.set_peers(
                addrs
                    .iter()
                    .map(|a| {
                        SocketAddrV4::new(
                            Ipv4Addr::new(a[0], a[1], a[2], a[3]),
                            u16::from_be_bytes([a[4], a[5]]),
                        )
                    })
                    .collect(),
            ),
            Opened::Ether(c) => {
                let mut sorted = addrs.to_vec();
                sorted.sort_unstable();
                if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                    let ranks: Vec<usize> =
                        (0..addrs.len()).filter(|&r| addrs[r] == w[0]).collect();
                    return Err(format!(
                        "ranks {ranks:?} share the MAC {} (one host, or one interface): raw Ethernet multicast needs one rank per interface; PIPECAST_MULTICAST=udp serves ranks that share a host",
                        mac_to_string(&w[0])
                    ));
                }
                c.set_peers(addrs.to_vec());
            }
        }
        Ok(())
    }
}

/// Opens this rank's carrier for the job with `cookie`, on the interface of its TCP link's
/// address: UDP unless the agreed mode is `ether`.
pub fn open(config: &Config, cookie: u64, loopback: bool) -> Result<Opened, String> {
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
    let group = Group::of(cookie);
    if config.multicast == MulticastMode::Ether {
        let ifname = crate::transport::ifaddrs::ipv4_interfaces()
            .map_err(|e| format!("cannot list the interfaces (getifaddrs): {e}"))?
            .into_iter()
            .find(|i| i.addr == ip)
            .map(|i| i.name)
            .ok_or_else(|| format!("no interface holds the TCP link's address {ip}"))?;
        return EtherCarrier::open(&ifname, group.mac)
            .map(|c| Opened::Ether(Box::new(c)))
            .map_err(|e| format!("{e} (raw Ethernet multicast needs CAP_NET_RAW; PIPECAST_MULTICAST=udp needs no privilege)"));
    }
    let udp = UdpConfig {
        loopback,
        ..UdpConfig::default()
    };
    UdpCarrier::open(group, ip, udp)
        .map(Opened::Udp)
        .map_err(|e| e.to_string())
}

/// What a rank's carrier tells the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Addr {
    /// IPv4 address and port (UDP) or MAC (raw Ethernet).
    addr: [u8; 6],
    payload: u32,
    rcvbuf: u32,
    /// Its carrier checksums every frame's payload (`Carrier::checksums_payload`).
    sums: bool,
}

const BLOB_LEN: usize = 15;

/// This rank's part of the second round: its carrier's address, payload per datagram,
/// receive buffer and whether it checksums payloads; empty without a carrier.
pub fn blob(carrier: Option<&Result<Opened, String>>) -> Vec<u8> {
    let Some(Ok(c)) = carrier else {
        return Vec::new();
    };
    let mut v = Vec::with_capacity(BLOB_LEN);
    v.extend_from_slice(&c.address());
    v.extend_from_slice(&(c.payload().min(u32::MAX as usize) as u32).to_le_bytes());
    let rcvbuf = c.carrier().rcvbuf().unwrap_or(0).min(u32::MAX as usize) as u32;
    v.extend_from_slice(&rcvbuf.to_le_bytes());
    v.push(u8::from(c.carrier().checksums_payload()));
    v
}

fn parse(b: &[u8]) -> Option<Addr> {
    let b: &[u8; BLOB_LEN] = b.try_into().ok()?;
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut addr = [0u8; 6];
    addr.copy_from_slice(&b[..6]);
    let a = Addr {
        addr,
        payload: u32_at(6),
        rcvbuf: u32_at(10),
        sums: b[14] == 1,
    };
    (a.payload > 0 && a.addr != [0; 6]).then_some(a)
}

/// The credit window (segments) for `segment`-byte segments when the smallest receive buffer
/// is `rcvbuf` bytes (as `SO_RCVBUF` reads back): what the buffer holds, each datagram
/// counted at twice its bytes plus 512 for the kernel's bookkeeping, at most the
/// simulator's 4 MiB credit (`model::multicast::window_segments`), at least 16.
pub fn window(segment: u32, rcvbuf: usize) -> u32 {
    let per = 2 * (u64::from(segment) + DATA_HEADER_LEN as u64) + 512;
    let fits = rcvbuf as u64 / per;
    let most = crate::model::multicast::window_segments(u64::from(segment));
    fits.min(most).max(16).min(u64::from(u32::MAX)) as u32
}

/// A rank reports to its parent every this many segments (a quarter of `window`, at least
/// the protocol's default; `Member` keeps it at most half the window).
pub fn ack_every(window: u32) -> u32 {
    (window / 4).max(McastConfig::default().ack_every)
}

/// The root's pace at most (bytes per second as the protocol counts them: payload and frame
/// header) for a link of `bps` bits per second: the link's rate less what every datagram also
/// carries (`overhead`, the carrier's: IP and UDP headers, 28 bytes, for UDP, none for raw
/// Ethernet; Ethernet's 14-byte header, what a Linux shaper charges), and 0.2 % to spare. The
/// switches drop what arrives faster than the slowest port forwards, silently: a root that
/// outran the link would lose whole windows. Preamble, gap and check sum (24 bytes a frame)
/// are not counted: on a real wire the root's own port, as fast as the others, sends no
/// faster, and its socket's buffer holds the root back. The root paces below this by the loss
/// it sees (`engine::multicast::Config::spare`): repairs need room on a receiver's downlink,
/// which this pace alone fills (measured on the 16-machine lab, docs/multicast.md: without
/// loss 1.08/1.04/1.03 × T(m) at 1/4/16 MiB against 1.10/1.07/1.06 with 38 bytes and 1 %
/// to spare, but with 1 % loss per link 2.29 against 1.89 × T(m) at 16 MiB when fixed).
pub fn pace(bps: u64, segment: u32, overhead: u64) -> u64 {
    let counted = u64::from(segment) + DATA_HEADER_LEN as u64;
    let wire = counted + overhead + 14;
    (bps / 8).saturating_mul(counted) / wire * 998 / 1000
}

/// The least bucket the root's pace has (segments): its bucket where there is loss.
const BURST_SEGMENTS: u64 = crate::engine::multicast::LOSS_BURST_SEGMENTS;

/// The bucket the path absorbs at least (bytes): a switch port's buffer, or a shaper's
/// bucket (`tbf`'s 64 KiB at 100 Mbit/s in the lab, `lab::tbf_sizes`), holds this much
/// arriving at once; TCP's window sends as much at once.
pub const PATH_BURST: u64 = 64 << 10;

/// The root's token bucket (bytes as the protocol counts them, `segment` + header per
/// segment): what the path absorbs at once beyond the pace — [`PATH_BURST`], or a
/// millisecond of the agreed link rate (`bps` bits per second) where that is more, as the
/// lab sizes its shapers (a shaper whose bucket is under ~1 ms of its rate costs TCP
/// throughput: `../shared/LAB.md`). Never more than a quarter of the credit window (`window`
/// segments, which the smallest receive buffer holds: [`window`]), never less than 16
/// segments. A shaper whose bucket is full passes a burst at once, as it does TCP's first
/// window (measured on the 16-machine lab: docs/multicast.md, "The path's burst"); a switch
/// queues it; the root's own port, where it is the slowest, holds it back in the socket.
pub fn burst(bps: Option<u64>, segment: u32, window: u32) -> u64 {
    let counted = u64::from(segment) + DATA_HEADER_LEN as u64;
    let least = BURST_SEGMENTS * counted;
    let path = bps.map_or(least, |b| (b / 8 / 1000).max(PATH_BURST));
    let most = u64::from(window).saturating_mul(counted) / 4;
    path.min(most).max(least)
}

/// What a late root may send beyond its bucket ([`burst`]), in buckets: a root whose progress
/// thread was not scheduled when its next segment was due sends the pace it owes at once, up
/// to this many more buckets (the root's own port's queue holds them: the lab's shapers queue
/// 256 KiB behind their 64 KiB bucket, `lab::tbf_sizes`). Only for a root that has seen no
/// loss (`Config::catch_up`) and on a rank where no broadcast ever did (`comm::multicast`:
/// once lossy, [`LOSS_CATCH_UP_BUCKETS`] only). Measured on the 16-machine lab through the Open MPI component
/// (docs/multicast.md, "A late root" and "The component under load"): a paced root whose
/// progress thread is scheduled late (16 ranks on 2 cores and a busy loop beside) lost
/// 11-85 ms of pace per 1-4 MiB broadcast without it. Before the sticky loss flag, 3 buckets
/// made the 1 % loss bench slower in all six comparisons of two A/B pairs: the catch-up came
/// back wherever the root's spare fell to 0 between losses.
pub const CATCH_UP_BUCKETS: u64 = 3;

/// What a late root that saw loss may send beyond its bucket, in buckets of [`burst`]
/// (`engine::multicast::Config::loss_catch_up`), counted only while none of its repairs is
/// pending or in flight: the scheduler's lateness. Its whole burst is then its 16-segment
/// loss bucket and one path's burst, under a third of what a clean root may send at once
/// (a bucket and [`CATCH_UP_BUCKETS`]). What it sends is what it owes: the paths to the
/// receivers carried none of its stream while it was late and drained by as much, so a
/// catch-up refills their queues to where the pace would have kept them, not beyond, save
/// the transient of its arriving at once — which one path's burst bounds, as a clean root's
/// bucket. Through Open MPI with loss a root woken 2-9 ms late lost 7-32 ms of pace per
/// 4 MiB broadcast without it (docs/multicast.md, "Checked with OSU under loss"); a bucket
/// covers lateness up to ~7 ms at 100 Mbit/s (the loss bucket's 1.9 ms and its 5.2).
pub const LOSS_CATCH_UP_BUCKETS: u64 = 1;

/// What a late root that saw loss may send beyond its bucket (bytes,
/// `engine::multicast::Config::loss_catch_up`): [`LOSS_CATCH_UP_BUCKETS`] buckets of
/// [`burst`], never more than a quarter of the credit window, nothing where unpaced.
pub fn loss_catch_up(bps: Option<u64>, segment: u32, window: u32) -> u64 {
    buckets_beyond(LOSS_CATCH_UP_BUCKETS, bps, segment, window)
}

/// What a late root that has seen no loss may send beyond its bucket (bytes,
/// `engine::multicast::Config::catch_up`): [`CATCH_UP_BUCKETS`] buckets of [`burst`], never
/// more than a quarter of the credit window (`window` segments), nothing when the link's rate
/// is unknown (unpaced).
pub fn catch_up(bps: Option<u64>, segment: u32, window: u32) -> u64 {
    buckets_beyond(CATCH_UP_BUCKETS, bps, segment, window)
}

/// `buckets` buckets of [`burst`], never more than a quarter of the credit window (`window`
/// segments), nothing when the link's rate is unknown (unpaced): what a late root may send
/// beyond its bucket.
fn buckets_beyond(buckets: u64, bps: Option<u64>, segment: u32, window: u32) -> u64 {
    if bps.is_none() {
        return 0;
    }
    let counted = u64::from(segment) + DATA_HEADER_LEN as u64;
    let most = u64::from(window).saturating_mul(counted) / 4;
    buckets
        .saturating_mul(burst(bps, segment, window))
        .min(most)
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
    mine: Result<Opened, String>,
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
    let kind = match (&mine, config.multicast) {
        (_, MulticastMode::Ether) => "raw Ethernet",
        _ => "UDP",
    };
    let addrs: Vec<Option<Addr>> = ready.iter().map(|b| b.get(1..).and_then(parse)).collect();
    let missing: Vec<usize> = (0..size)
        .filter(|&r| addrs.get(r).copied().flatten().is_none())
        .collect();
    let addrs: Vec<Addr> = addrs.into_iter().flatten().collect();
    let mut carrier = match (mine, missing.is_empty()) {
        (Ok(c), true) if addrs.len() == size => c,
        _ => {
            return Ok(Err(format!(
                "ranks {missing:?} could not open the {kind} multicast carrier (their logs say why at PIPECAST_LOG=info)"
            )))
        }
    };
    let macs: Vec<[u8; 6]> = addrs.iter().map(|a| a.addr).collect();
    if let Err(why) = carrier.set_peers(&macs) {
        // Every rank sees the same addresses: every rank returns here.
        return Ok(Err(why));
    }
    let group = carrier.carrier().describe();
    let probe_config = ProbeConfig {
        answers: size - 1,
        ..ProbeConfig::default()
    };
    let nonce = cookie ^ 0x7072_6f62_6521_0032;
    let heard = probe::probe(carrier.carrier_mut(), rank, 0, cookie, nonce, probe_config)
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
            "ranks {missed:?} did not receive rank 0's probe on the multicast group ({group}) within {:?} (a switch that filters multicast, IGMP snooping without a join, or a network without multicast)",
            probe_config.duration
        )));
    }
    let segment = addrs.iter().map(|a| a.payload).min().unwrap_or(1).max(1);
    let overhead = carrier.overhead();
    let rcvbuf = addrs.iter().map(|a| a.rcvbuf as usize).min().unwrap_or(0);
    let window = window(segment, rcvbuf);
    // Data frames leave their payload out of their CRC only where every rank's carrier
    // checksums it (UDP everywhere; raw Ethernet where every rank's NIC checks the FCS):
    // a rank whose carrier does not would drop every one.
    let header_sum = addrs.iter().all(|a| a.sums);
    let mcast = McastConfig {
        window,
        // A report per quarter of the window (at least the protocol's 32 segments), as the
        // simulator's (`sim::multicast`): the root's credit never runs dry for it (a report
        // lags a rank's arrivals by a quarter, half where the tree's levels are out of step,
        // plus a pause of at most an eighth), and a receiver sends ~4 reports per window
        // (each a `sendmsg`; an eighth before: docs/multicast.md, "Receivers' CPU: wake-ups
        // and acks").
        ack_every: ack_every(window),
        liveness: u64::try_from(config.timeout.as_nanos()).unwrap_or(u64::MAX),
        rate: rate_bps.map(|bps| pace(bps, segment, overhead)),
        burst: burst(rate_bps, segment, window),
        catch_up: catch_up(rate_bps, segment, window),
        loss_catch_up: loss_catch_up(rate_bps, segment, window),
        ..McastConfig::default()
    };
    Ok(Ok(Agreed {
        carrier: carrier.into_carrier(),
        cookie,
        segment,
        config: mcast,
        topology: topology.clone(),
        header_sum,
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
        b.push(1);
        let a = parse(&b).unwrap();
        assert_eq!(a.addr, [10, 0, 0, 1, 0x12, 0x34]);
        assert_eq!((a.payload, a.rcvbuf, a.sums), (1408, 425_984, true));
        b[14] = 0;
        assert!(!parse(&b).unwrap().sums);
        assert_eq!(parse(&b[..14]), None);
        assert_eq!(parse(&[]), None);
    }

    #[test]
    fn the_root_paces_below_the_link_rate() {
        let p = pace(100_000_000, 1440, 28);
        // 100 Mbit/s is 12.5 MB/s as a shaper counts it; 1472 of every 1514 bytes are counted
        // (a 1440-byte segment and its 32-byte data header).
        assert!(p < 12_500_000 * 1472 / 1514 && p > 12_100_000, "{p}");
        // Raw Ethernet: a 1468-byte segment, 1500 of every 1514 bytes counted.
        let e = pace(100_000_000, 1468, 0);
        assert!(e < 12_500_000 * 1500 / 1514 && e > p, "{e}");
    }

    #[test]
    fn the_roots_bucket_is_what_the_path_absorbs_within_the_window() {
        let seg = 1440 + DATA_HEADER_LEN as u64;
        // 100 Mbit/s: 64 KiB (a millisecond is less).
        assert_eq!(burst(Some(100_000_000), 1440, 2979), PATH_BURST);
        // 10 Gbit/s: a millisecond.
        assert_eq!(burst(Some(10_000_000_000), 1440, 20_000), 1_250_000);
        assert_eq!(burst(Some(10_000_000_000), 1440, 2979), 2979 * seg / 4);
        // A small window (a small receive buffer): a quarter of it, at least 16 segments.
        assert_eq!(burst(Some(100_000_000), 1440, 100), 25 * seg);
        assert_eq!(burst(Some(100_000_000), 1440, 16), 16 * seg);
        // No known rate: 16 segments.
        assert_eq!(burst(None, 1440, 2979), 16 * seg);
        // A late root's catch-up: CATCH_UP_BUCKETS buckets, never where unpaced.
        assert_eq!(
            catch_up(Some(100_000_000), 1440, 2979),
            CATCH_UP_BUCKETS * PATH_BURST
        );
        assert_eq!(catch_up(None, 1440, 2979), 0);
        // One that saw loss: a bucket, within a quarter of the window, never where unpaced.
        assert_eq!(loss_catch_up(Some(100_000_000), 1440, 2979), PATH_BURST);
        assert_eq!(loss_catch_up(Some(100_000_000), 1440, 100), 25 * seg);
        assert_eq!(loss_catch_up(None, 1440, 2979), 0);
        assert!(
            loss_catch_up(Some(100_000_000), 1440, 2979) < catch_up(Some(100_000_000), 1440, 2979)
        );
    }

    #[test]
    fn the_window_fits_the_smallest_receive_buffer() {
        // An unprivileged rank's 212,992-byte buffer (read back doubled).
        let w = window(1440, 425_984);
        assert!((100..=150).contains(&w), "{w}");
        // A forced 8 MiB buffer: the simulator's 4 MiB credit.
        assert_eq!(
            u64::from(window(1440, 16 << 20)),
            crate::model::multicast::window_segments(1440)
        );
        assert_eq!(window(1440, 0), 16);
    }

    #[test]
    fn a_rank_reports_four_times_a_window_never_more_often_than_every_32_segments() {
        assert_eq!(ack_every(2979), 744);
        assert_eq!(ack_every(416), 104);
        assert_eq!(ack_every(128), 32);
        assert_eq!(ack_every(16), 32, "Member keeps it at half the window");
    }
}
