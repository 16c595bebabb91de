//! The raw Ethernet link without its socket: peers' MAC addresses, the job's cookie and
//! communicator, the per-peer reliability, segment reassembly and the counters.
//!
//! **Rails** (issue 16, machines with several NICs): the link may have one NIC per rail,
//! each with its own MAC address and, in [`RawEthTransport`](super::RawEthTransport), its own
//! socket. Rail r has its own table of the peers' MACs on rail r and its own
//! [`Lossy`] reliability: sequence numbers, acknowledgements, RTO, credit, pacing and
//! heartbeats run per (peer, rail), and an acknowledgement travels on the rail of what it
//! acknowledges. So frames of two rails that overtake each other (each NIC has its own queue)
//! never look like a loss (no spurious fast retransmit), a full NIC blocks only its own rail,
//! and each NIC is paced on its own. A frame is the lane's to the end: a lane's frames, their
//! retransmissions and the credits and done of that lane all go on the lane's rail, so a
//! segment is assembled from one rail's frames. With one rail (one NIC, the default) the
//! link is exactly the single-NIC one. Frames come
//! in as bytes ([`FrameLink::receive_frame`], rx.rs) and go out through a function given the
//! batch ([`FrameLink::send`], tx.rs), so the whole receive path — checks, checksum,
//! reliability, reassembly, delivery into the broadcast's buffer — runs without a socket: in
//! [`RawEthTransport`](super::RawEthTransport), in the in-memory tests below it, and in the
//! fuzz target `raweth_rx`.

use super::addresses::Addresses;
use super::{Assembly, Config, Counters};
use crate::engine::reliable::Lossy;
use crate::transport::raweth::socket::Mac;
use crate::transport::{arrival::Dest, Buffers, Driver, TransportError};
use crate::wire::frame::{Kind, Repr, HEADER_LEN};
use std::collections::BTreeMap;

/// Everything of one rank's raw Ethernet link but its socket.
pub struct FrameLink {
    pub(super) me: usize,
    /// This rank's MAC address on each rail (the destination of what it receives there, the
    /// source of what it sends there: both are in every frame's checksum). `own[0]` is NIC 0.
    pub(super) own: Vec<Mac>,
    pub(super) config: Config,
    pub(super) max_payload: usize,
    pub(super) cookie: u64,
    /// The peers' MAC addresses on each rail, as many rails as
    /// [`FrameLink::set_rail_peers`] was given (at most `own.len()`). The driver's messages
    /// to ranks not in it are another link's (shared memory's, behind the Router).
    pub(super) addrs: Addresses,
    /// The per-peer reliability of every frame with its framing (the lossy-path adapter),
    /// one per rail (per (peer, rail), see above).
    pub(super) reliable: Vec<Lossy>,
    /// Rails whose socket refused frames since [`FrameLink::unblock`]: they wait for POLLOUT.
    pub(super) blocked: Vec<bool>,
    /// Bytes sent on each rail (Ethernet payload: header and data).
    pub(super) rail_bytes: Vec<u64>,
    pub(super) assembly: BTreeMap<(usize, u64, u16, u32), Assembly>,
    pub(super) counters: Counters,
}

impl FrameLink {
    /// Rank `me`'s link at MAC `mac`, with at most `max_payload` bytes per frame (at least
    /// 1, at most 65535).
    pub fn new(me: usize, mac: Mac, config: Config, max_payload: usize) -> FrameLink {
        FrameLink::on_rails(me, vec![mac], config, max_payload)
    }

    /// Rank `me`'s link with one NIC per rail, at MAC addresses `own` (`own[r]` on rail r; at
    /// least one: an empty list is taken as one NIC at the zero address).
    pub fn on_rails(me: usize, own: Vec<Mac>, config: Config, max_payload: usize) -> FrameLink {
        let max_payload = max_payload.clamp(1, 0xffff);
        let frame_bytes = (HEADER_LEN + max_payload + 14) as u64;
        let own = if own.is_empty() { vec![[0; 6]] } else { own };
        FrameLink {
            me,
            max_payload,
            cookie: 0,
            addrs: Addresses::none(),
            reliable: own
                .iter()
                .map(|_| {
                    Lossy::new(
                        config.reliable,
                        config.liveness,
                        frame_bytes,
                        max_payload,
                        config.batch,
                    )
                })
                .collect(),
            blocked: vec![false; own.len()],
            rail_bytes: vec![0; own.len()],
            own,
            assembly: BTreeMap::new(),
            counters: Counters::default(),
            config,
        }
    }

    /// This rank's MAC address (NIC 0's).
    pub fn mac(&self) -> Mac {
        self.own[0]
    }

    /// How many rails the peers were given on (1 until [`FrameLink::set_rail_peers`] gives
    /// more).
    pub fn rails(&self) -> usize {
        self.addrs.rails()
    }

    /// The rail a lane's message goes on: `rail` when the link has it, else rail 0 (right
    /// data at one NIC's speed, as the TCP link does).
    pub(super) fn rail(&self, rail: usize) -> usize {
        if rail < self.rails() {
            rail
        } else {
            0
        }
    }

    /// Bytes sent on each rail so far.
    pub fn rail_bytes_sent(&self) -> &[u64] {
        &self.rail_bytes[..self.rails()]
    }

    /// Whether rail `rail`'s socket refused frames since the last [`FrameLink::unblock`].
    pub fn blocked(&self, rail: usize) -> bool {
        self.blocked.get(rail).copied().unwrap_or(false)
    }

    /// Whether any rail's socket refused frames since the last [`FrameLink::unblock`].
    pub fn any_blocked(&self) -> bool {
        self.blocked.iter().any(|&b| b)
    }

    /// Forgets that sockets were full (after a poll said which may take frames again).
    pub fn unblock(&mut self) {
        self.blocked.iter_mut().for_each(|b| *b = false);
    }

    /// Payload bytes per frame.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Every rank's MAC address (from the bootstrap, indexed by rank) and the job cookie.
    pub fn set_peers(&mut self, macs: Vec<Mac>, cookie: u64) -> Result<(), TransportError> {
        self.set_rail_peers(vec![macs], cookie)
    }

    /// Every rank's MAC address on each rail (`macs[rail][rank]`, from the bootstrap) and the
    /// job cookie, every rank on a host of its own (so every MAC must be distinct, over all
    /// rails): [`FrameLink::set_rail_peers_on_hosts`] with one host per rank.
    pub fn set_rail_peers(
        &mut self,
        macs: Vec<Vec<Mac>>,
        cookie: u64,
    ) -> Result<(), TransportError> {
        let ranks = macs
            .iter()
            .map(Vec::len)
            .max()
            .unwrap_or(0)
            .max(self.me + 1);
        let hosts: Vec<usize> = (0..ranks).collect();
        self.set_rail_peers_on_hosts(macs, &hosts, cookie)
    }

    /// Every rank's MAC address on each rail (`macs[rail][rank]`, from the bootstrap), which
    /// host each rank is on (`hosts[rank]`, any id: ranks with equal ids share a host) and the
    /// job cookie. The link then runs on `macs.len()` rails (1 when empty; more than this
    /// link has NICs is an error). A peer of this host behind one of its own MACs is not this
    /// link's ([`FrameLink::knows`] says no); addresses.rs says what else is an error.
    pub fn set_rail_peers_on_hosts(
        &mut self,
        macs: Vec<Vec<Mac>>,
        hosts: &[usize],
        cookie: u64,
    ) -> Result<(), TransportError> {
        self.addrs = Addresses::of(self.me, &self.own, macs, hosts)?;
        self.cookie = cookie;
        for (rail, reliable) in self.reliable.iter_mut().enumerate() {
            reliable.clear();
            let peers = self.addrs.macs.get(rail).into_iter().flat_map(|m| m.keys());
            peers.for_each(|&p| reliable.add(p));
        }
        Ok(())
    }

    /// Whether `peer` has a MAC address (on every rail).
    pub fn knows(&self, peer: usize) -> bool {
        self.addrs.peers.contains(&peer)
    }

    /// The counters, with the reliability's totals over every rail (the kernel's drops are
    /// the socket's).
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        for r in &self.reliable {
            let t = r.totals();
            c.retransmits += t.retransmits;
            c.timeouts += t.timeouts;
            c.duplicates += t.duplicates;
            let sent = r.sent();
            c.acks_sent += sent.acks;
            c.send_blocked += sent.blocked;
        }
        c
    }

    /// A header of `kind` with this job's cookie and communicator, from this rank, the rest
    /// zero (the receiver is written when the frame is sent).
    pub(super) fn head(&self, kind: Kind) -> Repr {
        Repr {
            kind: kind.into(),
            cookie: self.cookie,
            comm: self.config.comm,
            from: self.me as u32,
            ..Repr::default()
        }
    }

    /// Ends the reassembly of finished broadcasts' segments (their buffers are gone).
    pub fn forget_finished(&mut self, bufs: &Buffers) {
        self.assembly.retain(|_, a| match a.target {
            Dest::Buffer { seq, .. } => bufs.contains_key(&seq),
            Dest::Hold(_) | Dest::Discard => true,
        });
    }

    /// When the reliability next needs a call (a retransmission, an ack, pacing), in ns. A
    /// rail whose socket is full waits for POLLOUT, not for a timer.
    pub fn next_timeout(&self, now: u64) -> Option<u64> {
        self.reliable
            .iter()
            .zip(&self.blocked)
            .filter_map(|(r, &blocked)| r.poll_timeout(now, blocked))
            .min()
    }

    /// Fails when a peer that a broadcast in flight waits for ([`Driver::waiting_for`])
    /// stayed silent too long; queues heartbeats to quiet ones.
    pub fn check_liveness(&mut self, now: u64, driver: &dyn Driver) -> Result<(), TransportError> {
        let waiting = driver.waiting_for();
        let rails = self.rails();
        for r in &mut self.reliable[..rails] {
            r.check_liveness(now, &waiting)
                .map_err(|g| TransportError::PeerGone {
                    peer: g.peer,
                    ms: g.silent / 1_000_000,
                })?;
        }
        Ok(())
    }

    /// The per-peer state for a failure report (peers with nothing outstanding are left out).
    pub fn describe(&self, now: u64) -> String {
        let mut out = format!(
            "assembling {} counters {}",
            self.assembly.len(),
            serde_json::to_string(&self.counters()).unwrap_or_default()
        );
        for ((rank, seq, lane, index), a) in &self.assembly {
            out += &format!(
                "\n  assembling from {rank}: bcast {seq} lane {lane} segment {index}: {}/{} bytes",
                a.got, a.len
            );
        }
        for (rail, r) in self.reliable[..self.rails()].iter().enumerate() {
            if self.rails() > 1 {
                out += &format!("\n  rail {rail}: {} bytes sent", self.rail_bytes[rail]);
            }
            out += &r.describe(now);
        }
        out
    }

    /// Forgets everything in flight.
    pub fn reset(&mut self) {
        self.reliable.iter_mut().for_each(Lossy::reset);
        self.assembly.clear();
    }
}
