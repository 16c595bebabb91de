//! Raw Ethernet transport: pipecast frames (wire/frame.rs) in Ethernet frames of EtherType
//! 0x88B5, sent to each peer's MAC address from an `AF_PACKET` socket ([`socket`]), made
//! reliable per peer by the engine's one retransmission scheme: the link holds one
//! lossy-path adapter [`Lossy`](reliable::Lossy) per rail (sequence numbers, cumulative +
//! selective acks, RTO, credit, pacing, round robin between peers, heartbeats and liveness,
//! segments cut into frames; all pure, in `engine::reliable`, and what the simulator runs
//! too) and keeps only its header format, the socket, reassembly targets and MAC addresses.
//! Reliability runs per frame and only this link knows its frame size, so the instance
//! lives here while the engine above stays frame-agnostic.
//!
//! Same shape as [`TcpTransport`](crate::transport::TcpTransport): the communicator gives it
//! the peers' MAC addresses and the job cookie from the bootstrap, then drives it through a
//! [`Driver`]. An engine segment larger than one frame goes
//! out as several frames (payload per frame = MTU − 100-byte header); the receiver copies each
//! frame's payload straight to its offset in its broadcast's buffer and tells the driver
//! ([`Driver::landed`]) once distinct frames covered it. A segment of a broadcast not
//! posted yet is assembled in a buffer of its own and handed over whole ([`Driver::held`]).
//!
//! Every frame carries a CRC32C of its addresses, header and payload (wire/frame.rs), checked
//! before anything in it is trusted: a frame corrupted in a host's memory, a switch's buffer
//! or on a veth pair (which has no FCS) is dropped and counted (`dropped_checksum`), and the
//! reliability recovers it as a lost frame. Frames with another job's cookie or communicator
//! id, from unknown MACs, of unknown versions or with bad lengths are dropped and counted
//! ([`Counters`]).
//!
//! Ranks of one host share its NICs (issue 11): frames name their sending and receiving rank,
//! a frame is taken only from the MAC of the rank it names and only for this rank
//! (`dropped_otherrank`), and each socket's BPF filter ([`filter::rank_filter`]) keeps the
//! other ranks' frames out of it in the kernel. Ranks of this host behind its own NIC are no
//! peers of this link: shared memory reaches them (docs/raweth.md, "Several ranks per host").
//!
//! Frames leave and arrive through a [`Port`] per NIC: an `AF_PACKET` socket
//! ([`PacketPort`]) or a port of an in-memory switch ([`medium`], the conformance suite's
//! raw Ethernet in memory and simulated link). Everything but the port is a [`FrameLink`]
//! (link.rs): bytes in, frames out, so that the
//! receive path runs without a socket in tests and under the fuzzer.
//!
//! On machines with several NICs (issue 16, seed 002's multi-lane NICs) the transport opens
//! one socket per NIC ([`RawEthTransport::bind_rails`]): rail r's frames leave and enter
//! through NIC r's socket, to and from the peers' NIC r MACs, and every socket is polled.
//! Reliability runs per (peer, rail) (link.rs says why). `rail{r}.bytes_sent` counts each
//! rail's bytes, as the TCP link does.

mod addresses;
pub mod filter;
mod link;
pub mod medium;
pub mod port;
pub mod ring;
mod rx;
pub mod socket;
#[cfg(test)]
mod tests;
mod tx;

pub use link::FrameLink;

use crate::engine::reliable;
use crate::engine::DataHeader;
use crate::transport::arrival::Dest;
use crate::transport::driver::Driver;
use crate::transport::{Buffers, Link, TransportError};
use crate::wire::frame::HEADER_LEN;
use port::{PacketPort, Port};
use socket::{Mac, RawSocket};
use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

/// Transport tuning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub reliable: reliable::Config,
    /// Communicator id carried in every frame (frames of other communicators are dropped).
    pub comm: u32,
    /// Frames per `sendmmsg`/`recvmmsg`.
    pub batch: usize,
    /// Payload bytes per frame (default: MTU − header); lower it to test splitting.
    pub max_payload: Option<usize>,
    /// SO_SNDBUF in bytes (default: the kernel's, ~212 KB, which makes a full tbf push back
    /// on the sender; a large one turns downstream queues into silent drops, LAB.md).
    pub sndbuf: Option<usize>,
    /// Receive through a PACKET_MMAP ring of this many bytes ([`ring::RxRing`]) instead of
    /// `recvmmsg` batches.
    pub rx_ring: Option<usize>,
    /// A peer that a broadcast waits for is gone when a frame to it stays unacknowledged this
    /// long (ns). A peer with nothing to acknowledge gets a heartbeat (a sequenced no-op) every
    /// quarter of it; the progress thread of a live peer answers even while it computes.
    pub liveness: u64,
    /// Write and check every frame's CRC32C. Off only to measure what it costs (both ends
    /// must agree: a checking receiver drops every frame of a sender that does not write it).
    pub checksum: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            reliable: reliable::Config::default(),
            comm: 0,
            batch: 32,
            max_payload: None,
            sndbuf: None,
            rx_ring: None,
            liveness: 5_000_000_000,
            checksum: true,
        }
    }
}

/// What the transport saw (monotonic counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub acks_sent: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    /// Sends refused by a full socket buffer (EAGAIN/ENOBUFS): retried later.
    pub send_blocked: u64,
    pub duplicates: u64,
    pub out_of_window: u64,
    pub later_kept: u64,
    pub later_dropped: u64,
    /// Frames addressed to another host (flooded by a bridge that has not learnt a MAC).
    pub dropped_otherhost: u64,
    /// Frames for another rank of this host (which shares this NIC's MAC): the socket's
    /// filter keeps them out, so this stays 0 unless the filter is off.
    pub dropped_otherrank: u64,
    /// Frames the kernel dropped because this socket's receive buffer or ring was full.
    pub kernel_drops: u64,
    pub dropped_cookie: u64,
    pub dropped_comm: u64,
    pub dropped_unknown_peer: u64,
    pub dropped_version: u64,
    pub dropped_length: u64,
    pub dropped_kind: u64,
    /// Frames whose CRC32C did not match (corrupted on the way): recovered as lost frames.
    pub dropped_checksum: u64,
}

/// A segment being reassembled from its frames ([`reliable::Assembly`]); its target is never
/// `Dest::Discard` (a discarded segment is not assembled).
type Assembly = reliable::Assembly<Dest, DataHeader>;

/// This rank's raw Ethernet endpoint: a [`FrameLink`] on a [`Port`] per NIC (rail): an
/// `AF_PACKET` socket ([`PacketPort`]; one per NIC on machines with several,
/// [`RawEthTransport::bind_rails`]), or a port of an in-memory [`medium`].
pub struct RawEthTransport {
    /// One per rail: `ports[r]` is NIC r's.
    ports: Vec<Box<dyn Port>>,
    /// The progress thread's wake descriptor, polled beside the ports.
    wake: Option<std::os::fd::RawFd>,
    kernel_drops: std::cell::Cell<u64>,
    link: FrameLink,
}

impl RawEthTransport {
    /// Opens interface `ifname` (in this thread's network namespace).
    pub fn bind(
        me: usize,
        ifname: &str,
        config: Config,
    ) -> Result<RawEthTransport, TransportError> {
        Self::with_sockets(me, vec![RawSocket::open(ifname)?], config)
    }

    /// Opens one socket on each of `ifnames`, NIC r (rail r) first to last (in this thread's
    /// network namespace). One name is [`RawEthTransport::bind`]; none is an error.
    pub fn bind_rails(
        me: usize,
        ifnames: &[&str],
        config: Config,
    ) -> Result<RawEthTransport, TransportError> {
        let socks = ifnames
            .iter()
            .map(|i| RawSocket::open(i))
            .collect::<Result<Vec<_>, _>>()?;
        Self::with_sockets(me, socks, config)
    }

    /// Opens interface `ifname` inside network namespace `netns` (see
    /// [`RawSocket::open_in_netns`]).
    pub fn bind_in_netns(
        me: usize,
        netns: &str,
        ifname: &str,
        config: Config,
    ) -> Result<RawEthTransport, TransportError> {
        Self::with_sockets(me, vec![RawSocket::open_in_netns(netns, ifname)?], config)
    }

    /// The link on `socks` (NIC r's socket at r), each a [`PacketPort`].
    pub fn with_sockets(
        me: usize,
        socks: Vec<RawSocket>,
        config: Config,
    ) -> Result<RawEthTransport, TransportError> {
        let ports = socks
            .into_iter()
            .map(|s| Ok(Box::new(PacketPort::new(s, me, &config)?) as Box<dyn Port>))
            .collect::<Result<Vec<_>, TransportError>>()?;
        Self::with_ports(me, ports, config)
    }

    /// The link on `ports` (NIC r's at r). Frames carry as much payload as the smallest MTU
    /// allows.
    pub fn with_ports(
        me: usize,
        ports: Vec<Box<dyn Port>>,
        config: Config,
    ) -> Result<RawEthTransport, TransportError> {
        let Some(mtu) = ports.iter().map(|p| p.mtu()).min() else {
            return Err(TransportError::Setup {
                what: "raw Ethernet".into(),
                error: "no interface to open".into(),
            });
        };
        let fits = mtu.saturating_sub(HEADER_LEN);
        let max_payload = config.max_payload.unwrap_or(fits).min(fits).min(0xffff);
        if max_payload == 0 {
            return Err(TransportError::Setup {
                what: format!("raw Ethernet on {}", names(&ports)),
                error: format!(
                    "MTU {mtu} leaves no room for payload after the {HEADER_LEN}-byte header"
                ),
            });
        }
        let macs = ports.iter().map(|p| p.mac()).collect();
        Ok(RawEthTransport {
            link: FrameLink::on_rails(me, macs, config, max_payload),
            ports,
            wake: None,
            kernel_drops: std::cell::Cell::new(0),
        })
    }

    /// This endpoint's MAC address (NIC 0's; goes into the bootstrap blob).
    pub fn local_mac(&self) -> Mac {
        self.ports[0].mac()
    }

    /// The MAC address of each NIC this endpoint opened (rail r's at r).
    pub fn local_macs(&self) -> Vec<Mac> {
        self.ports.iter().map(|p| p.mac()).collect()
    }

    pub fn mtu(&self) -> usize {
        self.ports[0].mtu()
    }

    /// Payload bytes per frame.
    pub fn max_payload(&self) -> usize {
        self.link.max_payload()
    }

    /// How many rails the link runs on (1 until [`RawEthTransport::set_rail_peers`] gives
    /// more).
    pub fn rails(&self) -> usize {
        self.link.rails()
    }

    pub fn counters(&self) -> Counters {
        let mut c = self.link.counters();
        // PACKET_STATISTICS resets on read: keep the running total.
        let new: u64 = self.ports.iter().map(|p| p.take_drops()).sum();
        let total = self.kernel_drops.get() + new;
        self.kernel_drops.set(total);
        c.kernel_drops = total;
        c
    }

    /// Every rank's MAC address (from the bootstrap, indexed by rank) and the job cookie.
    pub fn set_peers(&mut self, macs: Vec<Mac>, cookie: u64) -> Result<(), TransportError> {
        self.link.set_peers(macs, cookie)
    }

    /// Every rank's MAC address on each rail (`macs[rail][rank]`) and the job cookie: the
    /// link runs on `macs.len()` rails, at most as many as it opened NICs.
    pub fn set_rail_peers(
        &mut self,
        macs: Vec<Vec<Mac>>,
        cookie: u64,
    ) -> Result<(), TransportError> {
        self.link.set_rail_peers(macs, cookie)
    }

    /// [`RawEthTransport::set_rail_peers`] knowing which host each rank is on (ranks of one
    /// host may share its NICs: [`FrameLink::set_rail_peers_on_hosts`]).
    pub fn set_rail_peers_on_hosts(
        &mut self,
        macs: Vec<Vec<Mac>>,
        hosts: &[usize],
        cookie: u64,
    ) -> Result<(), TransportError> {
        self.link.set_rail_peers_on_hosts(macs, hosts, cookie)
    }
}

/// The interfaces of `ports`, comma-separated.
fn names(ports: &[Box<dyn Port>]) -> String {
    let names: Vec<&str> = ports.iter().map(|p| p.name()).collect();
    names.join(",")
}

// `counters` stays inherent: it returns the typed `Counters`; the trait's `counters`
// turns them into a map.
impl Link for RawEthTransport {
    /// `raweth:IFACE`, or with several rails `raweth:IFACE0,IFACE1,…` (NIC r first to last).
    fn describe(&self) -> String {
        format!("raweth:{}", names(&self.ports[..self.link.rails()]))
    }

    fn capabilities(&self) -> super::Capabilities {
        super::Capabilities {
            reliable: false,
            max_frame: Some(self.link.max_payload() as u64),
            rails: self.link.rails(),
            ..super::Capabilities::default()
        }
    }

    /// Checks that every one of `peers` has a MAC address (there is no connection to make:
    /// the same shape as `TcpTransport::connect`).
    fn connect(&mut self, peers: &[usize], _timeout: Duration) -> Result<(), TransportError> {
        match peers
            .iter()
            .find(|&&p| p != self.link.me && !self.link.knows(p))
        {
            Some(&peer) => Err(TransportError::UnknownPeer { peer }),
            None => Ok(()),
        }
    }

    /// One round: queue what the driver hands out, send what credit and pacing allow,
    /// wait up to `wait` for frames on every rail's socket, and deliver arrivals to the
    /// driver. Between broadcasts (nothing in flight) it keeps acknowledging and
    /// retransmitting: peers may still need its acks, and a late peer's heartbeats its
    /// answers.
    fn progress(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> crate::Result<()> {
        self.link.forget_finished(bufs);
        self.link.queue(driver)?;
        self.send(bufs, clock())?;
        let now = clock();
        let mut wait = driver.may_wait(wait);
        if let Some(t) = self.link.next_timeout(now) {
            wait = wait.min(Duration::from_nanos(t.saturating_sub(now)));
        }
        let rails = self.link.rails();
        let polled: Vec<(std::os::fd::RawFd, bool)> = self.ports[..rails]
            .iter()
            .enumerate()
            .map(|(r, p)| (p.fd(), self.link.blocked(r)))
            .collect();
        let ready = socket::poll_fds(&polled, wait, self.wake).map_err(|e| io_err(None, e))?;
        self.link.unblock();
        for (rail, &(readable, _)) in ready.iter().enumerate() {
            if readable {
                self.receive(rail, bufs, driver, clock)?;
            }
        }
        self.link.queue(driver)?;
        self.link.check_liveness(clock(), driver)?;
        self.send(bufs, clock())?;
        Ok(())
    }

    fn serves_idle(&self) -> bool {
        true
    }

    fn set_wake(&mut self, fd: std::os::fd::RawFd) {
        self.wake = Some(fd);
    }

    /// The typed [`Counters`], and with several rails the bytes sent through each NIC
    /// (`rail0.bytes_sent`, …, as the TCP link counts them): how a test proves that each
    /// lane used its NIC.
    fn counters(&self) -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = serde_json::to_value(RawEthTransport::counters(self))
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let sent = self.link.rail_bytes_sent();
        if sent.len() > 1 {
            for (rail, &b) in sent.iter().enumerate() {
                out.insert(format!("rail{rail}.bytes_sent"), b);
            }
        }
        out
    }

    /// The per-peer state for a failure report (peers with nothing outstanding are left out).
    fn describe_state(&self, now: u64) -> String {
        format!(
            "raweth blocked {} kernel drops {}; {}",
            self.link.any_blocked(),
            RawEthTransport::counters(self).kernel_drops,
            self.link.describe(now)
        )
    }

    /// Forgets everything in flight (after a failed broadcast): peers then fail by their
    /// idle timeout, as there is no connection to close.
    fn shutdown(&mut self) {
        self.link.reset();
    }
}

fn io_err(peer: Option<usize>, e: io::Error) -> TransportError {
    TransportError::Io {
        peer,
        error: e.to_string(),
    }
}
