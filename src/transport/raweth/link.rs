//! The raw Ethernet link without its socket: peers' MAC addresses, the job's cookie and
//! communicator, the per-peer reliability, segment reassembly and the counters. Frames come
//! in as bytes ([`FrameLink::receive_frame`], rx.rs) and go out through a function given the
//! batch ([`FrameLink::send`], tx.rs), so the whole receive path — checks, checksum,
//! reliability, reassembly, delivery into the broadcast's buffer — runs without a socket: in
//! [`RawEthTransport`](super::RawEthTransport), in the in-memory tests below it, and in the
//! fuzz target `raweth_rx`.

use super::{Assembly, Config, Counters, Item, Target};
use crate::engine::reliable::Peers;
use crate::engine::Endpoint;
use crate::transport::raweth::socket::{mac_to_string, Mac};
use crate::transport::{Buffers, TransportError};
use crate::wire::frame::{Kind, Repr, HEADER_LEN};
use std::collections::BTreeMap;

/// Everything of one rank's raw Ethernet link but its socket.
pub struct FrameLink {
    pub(super) me: usize,
    /// This rank's MAC address (the destination of what it receives, the source of what it
    /// sends: both are in every frame's checksum).
    pub(super) mac: Mac,
    pub(super) config: Config,
    pub(super) max_payload: usize,
    pub(super) cookie: u64,
    /// Every peer's MAC address, by rank.
    pub(super) macs: BTreeMap<usize, Mac>,
    pub(super) by_mac: BTreeMap<Mac, usize>,
    /// The per-peer reliability of every frame.
    pub(super) reliable: Peers<Item>,
    pub(super) assembly: BTreeMap<(usize, u64, u16, u32), Assembly>,
    pub(super) counters: Counters,
}

impl FrameLink {
    /// Rank `me`'s link at MAC `mac`, with at most `max_payload` bytes per frame (at least
    /// 1, at most 65535).
    pub fn new(me: usize, mac: Mac, config: Config, max_payload: usize) -> FrameLink {
        let max_payload = max_payload.clamp(1, 0xffff);
        let frame_bytes = (HEADER_LEN + max_payload + 14) as u64;
        FrameLink {
            me,
            mac,
            max_payload,
            cookie: 0,
            macs: BTreeMap::new(),
            by_mac: BTreeMap::new(),
            reliable: Peers::new(config.reliable, config.liveness, frame_bytes),
            assembly: BTreeMap::new(),
            counters: Counters::default(),
            config,
        }
    }

    /// This rank's MAC address.
    pub fn mac(&self) -> Mac {
        self.mac
    }

    /// Payload bytes per frame.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Every rank's MAC address (from the bootstrap, indexed by rank) and the job cookie.
    pub fn set_peers(&mut self, macs: Vec<Mac>, cookie: u64) -> Result<(), TransportError> {
        self.cookie = cookie;
        self.macs.clear();
        self.reliable.clear();
        self.by_mac.clear();
        for (rank, mac) in macs.into_iter().enumerate() {
            if rank == self.me {
                continue;
            }
            let clash = if mac == self.mac {
                Some(self.me)
            } else {
                self.by_mac.insert(mac, rank)
            };
            if let Some(other) = clash {
                return Err(TransportError::Setup {
                    what: "raw Ethernet peers".into(),
                    error: format!(
                        "ranks {} and {} share MAC {}: run one rank per interface",
                        other.min(rank),
                        other.max(rank),
                        mac_to_string(&mac)
                    ),
                });
            }
            self.macs.insert(rank, mac);
            self.reliable.add(rank);
        }
        Ok(())
    }

    /// Whether `peer` has a MAC address.
    pub fn knows(&self, peer: usize) -> bool {
        self.reliable.contains(peer)
    }

    /// The counters, with the reliability's totals (the kernel's drops are the socket's).
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        let t = self.reliable.totals();
        c.retransmits = t.retransmits;
        c.timeouts = t.timeouts;
        c.duplicates = t.duplicates;
        c
    }

    /// A header of `kind` with this job's cookie and communicator, the rest zero.
    pub(super) fn head(&self, kind: Kind) -> Repr {
        Repr {
            kind: kind.into(),
            cookie: self.cookie,
            comm: self.config.comm,
            ..Repr::default()
        }
    }

    /// Ends the reassembly of finished broadcasts' segments (their buffers are gone).
    pub fn forget_finished(&mut self, bufs: &Buffers) {
        self.assembly.retain(|_, a| match a.target {
            Target::Buffer { seq, .. } => bufs.contains_key(&seq),
            Target::Hold(_) => true,
        });
    }

    /// When the reliability next needs a call (a retransmission, an ack, pacing), in ns.
    pub fn next_timeout(&self, now: u64, blocked: bool) -> Option<u64> {
        self.reliable.poll_timeout(now, blocked)
    }

    /// Fails when a peer that `endpoint` waits for stayed silent too long; queues heartbeats
    /// to quiet ones.
    pub fn check_liveness(&mut self, now: u64, endpoint: &Endpoint) -> Result<(), TransportError> {
        let heartbeat = Item {
            head: self.head(Kind::Nop),
            payload: 0..0,
        };
        self.reliable
            .check_liveness(now, &endpoint.waiting_for(), || heartbeat.clone())
            .map_err(|g| TransportError::PeerGone {
                peer: g.peer,
                ms: g.silent / 1_000_000,
            })
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
        out += &self.reliable.describe(now);
        out
    }

    /// Forgets everything in flight.
    pub fn reset(&mut self) {
        self.reliable.reset();
        self.assembly.clear();
    }
}
