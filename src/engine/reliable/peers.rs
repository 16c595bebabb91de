//! The per-peer reliability of one lossy link, whole: a [`Sender`] and a [`Receiver`] per
//! peer, the new items waiting per peer, one [`Pacer`] for the link, and the scheduling
//! between them. Pure: the link feeds it by `handle_*(now, …)` and asks it by `poll_*`, the
//! style of quinn-proto's connection (STYLE.md).
//!
//! A link (raw Ethernet) uses it so:
//! - [`Peers::enqueue`] each item it cut (a frame's header and payload range);
//! - [`Peers::handle_timeout`], then [`Peers::poll_send`] until `None` (a batch at a time),
//!   writing [`Peers::piggyback`]'s acknowledgement into each frame, and reporting
//!   [`Peers::sent`] or [`Peers::unsent`] (newest first) once the socket took or refused it;
//! - [`Peers::owed_acks`]: the peers that get a bare acknowledgement (with
//!   [`Peers::take_repaired`]'s echo);
//! - for an arriving frame, [`Peers::handle_ack`] with its acknowledgement fields, then (if it
//!   is sequenced) [`Peers::handle_seq`]: deliver it only if `Fresh`;
//! - [`Peers::poll_timeout`] says how long it may wait, [`Peers::check_liveness`] when a peer
//!   a broadcast waits for is gone (queueing heartbeats the link supplies), [`Peers::reset`]
//!   forgets everything after a failure.

use super::{Accept, Config, Pacer, Receiver, Sender};
use std::collections::{BTreeMap, VecDeque};

/// The next item to send: to `peer` under its per-peer number `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing<T> {
    pub peer: usize,
    pub seq: u64,
    pub item: T,
    /// `None` for its first send; for a retransmission, the copy number this send carries
    /// ([`copy_number`](super::copy_number): 2, 3, …).
    pub copy: Option<u8>,
}

/// A peer that a broadcast waits for acknowledged nothing for the liveness limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerGone {
    pub peer: usize,
    /// How long it has been silent while owing an acknowledgement (ns).
    pub silent: u64,
}

/// Counters summed over every peer (since the last [`Peers::reset`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub retransmits: u64,
    pub timeouts: u64,
    pub duplicates: u64,
}

#[derive(Debug, Clone)]
struct Peer<T> {
    tx: Sender<T>,
    rx: Receiver,
    /// New items waiting for credit or pacing.
    queue: VecDeque<T>,
    /// When the last heartbeat went to this peer.
    pinged: u64,
}

impl<T> Peer<T> {
    fn new(config: Config) -> Peer<T> {
        Peer {
            tx: Sender::new(config),
            rx: Receiver::new(config),
            queue: VecDeque::new(),
            pinged: 0,
        }
    }

    /// Whether it has something to send that credit allows (pacing aside).
    fn wants(&self) -> bool {
        self.tx.has_retransmit() || (!self.queue.is_empty() && self.tx.can_send())
    }
}

/// Every peer of one lossy link.
#[derive(Debug, Clone)]
pub struct Peers<T> {
    config: Config,
    /// A waited-for peer is gone when something to it stays unacknowledged this long (ns).
    liveness: u64,
    /// What one item costs the pacer (bytes: a full frame on the wire).
    item_bytes: u64,
    pacer: Pacer,
    peers: BTreeMap<usize, Peer<T>>,
    /// The peer served last: the round robin goes on after it.
    last: Option<usize>,
}

impl<T: Clone> Peers<T> {
    /// No peers yet; `liveness` in ns, `item_bytes` what one item costs the pacer.
    pub fn new(config: Config, liveness: u64, item_bytes: u64) -> Peers<T> {
        Peers {
            config,
            liveness,
            item_bytes,
            pacer: Pacer::new(config.rate, config.burst, 0),
            peers: BTreeMap::new(),
            last: None,
        }
    }

    /// Adds `peer` with fresh state (replacing any it had).
    pub fn add(&mut self, peer: usize) {
        self.peers.insert(peer, Peer::new(self.config));
    }

    /// Forgets every peer.
    pub fn clear(&mut self) {
        self.peers.clear();
        self.last = None;
    }

    pub fn contains(&self, peer: usize) -> bool {
        self.peers.contains_key(&peer)
    }

    /// Every peer, by rank.
    pub fn ranks(&self) -> impl Iterator<Item = usize> + '_ {
        self.peers.keys().copied()
    }

    /// Queues a new item for `peer`; `false` if `peer` is unknown.
    pub fn enqueue(&mut self, peer: usize, item: T) -> bool {
        match self.peers.get_mut(&peer) {
            Some(p) => {
                p.queue.push_back(item);
                true
            }
            None => false,
        }
    }

    /// Runs every peer's retransmission timer.
    pub fn handle_timeout(&mut self, now: u64) {
        for p in self.peers.values_mut() {
            p.tx.handle_timeout(now);
        }
    }

    /// The next item to send: peers take turns (round robin, continuing after the one served
    /// last), each offering its oldest retransmission first, then its oldest new item if its
    /// credit allows; `None` when no peer has one or the pacer says wait
    /// ([`Peers::poll_timeout`] says until when). A new item gets its number here; report
    /// [`Peers::sent`] or [`Peers::unsent`] for it.
    pub fn poll_send(&mut self, now: u64) -> Option<Outgoing<T>> {
        let start = self.last.map_or(0, |l| l.saturating_add(1));
        let order: Vec<usize> = self
            .peers
            .range(start..)
            .chain(self.peers.range(..start))
            .filter(|(_, p)| p.wants())
            .map(|(&r, _)| r)
            .collect();
        for peer in order {
            // Every item costs the same: if this one must wait, so must the others.
            if !self.pacer.try_take(now, self.item_bytes) {
                return None;
            }
            self.last = Some(peer);
            let p = self.peers.get_mut(&peer).expect("listed");
            if let Some((seq, item)) = p.tx.poll_retransmit(now) {
                let item = item.clone();
                let copy = p.tx.next_copy(seq).unwrap_or(0);
                return Some(Outgoing {
                    peer,
                    seq,
                    item,
                    copy: Some(copy),
                });
            }
            if let Some(item) = p.queue.pop_front() {
                let seq = p.tx.push(now, item.clone());
                return Some(Outgoing {
                    peer,
                    seq,
                    item,
                    copy: None,
                });
            }
        }
        None
    }

    /// Item `seq` (from [`Peers::poll_send`]) left for `peer` at `now`.
    pub fn sent(&mut self, peer: usize, seq: u64, now: u64) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.tx.sent(seq, now);
        }
    }

    /// Item `seq` did not leave: it goes first in `peer`'s retransmission queue (report
    /// several newest first, so that they keep their order).
    pub fn unsent(&mut self, peer: usize, seq: u64) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.tx.unsent(seq);
        }
    }

    /// The acknowledgement to carry on the next frame to `peer` (cumulative, selective
    /// bitmap, credit); counts as sent.
    pub fn piggyback(&mut self, peer: usize) -> (u64, u64, u32) {
        match self.peers.get_mut(&peer) {
            Some(p) => {
                p.rx.acked();
                p.rx.ack()
            }
            None => (0, 0, 0),
        }
    }

    /// The peers owed a bare acknowledgement: something arrived from them since the last
    /// acknowledgement went out, or an echo is due.
    pub fn owed_acks(&self) -> Vec<usize> {
        self.peers
            .iter()
            .filter(|(_, p)| p.rx.ack_due())
            .map(|(&r, _)| r)
            .collect()
    }

    /// A retransmitted item from `peer` that arrived as new, to echo once in a bare
    /// acknowledgement: its number and copy number.
    pub fn take_repaired(&mut self, peer: usize) -> Option<(u64, u8)> {
        self.peers.get_mut(&peer)?.rx.take_repaired()
    }

    /// An acknowledgement from `peer` (every arriving frame carries one; `repaired` is a bare
    /// acknowledgement's echo). Returns how many items it acknowledged.
    pub fn handle_ack(
        &mut self,
        now: u64,
        peer: usize,
        ack: u64,
        sack: u64,
        credit: u32,
        repaired: Option<(u64, u8)>,
    ) -> usize {
        self.peers
            .get_mut(&peer)
            .map_or(0, |p| p.tx.on_ack(now, ack, sack, credit, repaired))
    }

    /// A sequenced item from `peer` arrived with number `seq`; `copy` is its copy number if
    /// it was sent as a retransmission. Deliver it only if `Fresh`.
    pub fn handle_seq(&mut self, peer: usize, seq: u64, copy: Option<u8>) -> Accept {
        let Some(p) = self.peers.get_mut(&peer) else {
            return Accept::OutOfWindow;
        };
        let verdict = p.rx.accept(seq);
        if let (Accept::Fresh, Some(copy)) = (verdict, copy) {
            p.rx.repaired(seq, copy);
        }
        verdict
    }

    /// When something must happen without a frame arriving: a retransmission timer, or the
    /// pacer allowing a waiting item. While the link's send buffer is full (`blocked`), its
    /// own readiness says when to send again, not a timer.
    pub fn poll_timeout(&self, now: u64, blocked: bool) -> Option<u64> {
        self.peers
            .values()
            .filter_map(|p| {
                if p.wants() && !blocked {
                    Some(self.pacer.ready_at(now, self.item_bytes))
                } else {
                    p.tx.poll_timeout()
                }
            })
            .min()
    }

    /// Fails when a peer in `waiting` left an item unacknowledged for the liveness limit;
    /// queues a heartbeat (`heartbeat()`, a sequenced no-op of the link) to a waited-for peer
    /// that owes nothing and was not pinged for a quarter of the limit, so that a live peer's
    /// progress thread answers even while it computes.
    pub fn check_liveness(
        &mut self,
        now: u64,
        waiting: &[usize],
        mut heartbeat: impl FnMut() -> T,
    ) -> Result<(), PeerGone> {
        let (limit, ping_every) = self.liveness_limits();
        for &peer in waiting {
            let Some(p) = self.peers.get_mut(&peer) else {
                continue;
            };
            let silent = now.saturating_sub(p.tx.last_progress());
            if !p.tx.is_idle() && silent >= limit {
                return Err(PeerGone { peer, silent });
            }
            if p.tx.is_idle() && p.queue.is_empty() && now.saturating_sub(p.pinged) >= ping_every {
                p.pinged = now;
                p.queue.push_back(heartbeat());
            }
        }
        Ok(())
    }

    /// The liveness limit and the heartbeat period (a quarter of it, at least 10 ms).
    fn liveness_limits(&self) -> (u64, u64) {
        let limit = self.liveness.max(1);
        (limit, (limit / 4).max(10_000_000))
    }

    /// When [`Peers::check_liveness`] next has something to do for `waiting`: a heartbeat
    /// falls due to a quiet peer, or a peer that owes an acknowledgement reaches the limit.
    pub fn liveness_timeout(&self, waiting: &[usize]) -> Option<u64> {
        let (limit, ping_every) = self.liveness_limits();
        waiting
            .iter()
            .filter_map(|peer| self.peers.get(peer))
            .filter_map(|p| {
                if !p.tx.is_idle() {
                    Some(p.tx.last_progress().saturating_add(limit))
                } else if p.queue.is_empty() {
                    Some(p.pinged.saturating_add(ping_every))
                } else {
                    None
                }
            })
            .min()
    }

    /// Whether everything to `peer` is acknowledged and nothing waits to go to it (an
    /// unknown peer is).
    pub fn is_idle_to(&self, peer: usize) -> bool {
        self.peers
            .get(&peer)
            .is_none_or(|p| p.tx.is_idle() && p.queue.is_empty())
    }

    /// Forgets everything in flight (after a failed broadcast): numbers restart at 1 and
    /// queues empty; the peers, the pacer and the heartbeat times stay.
    pub fn reset(&mut self) {
        for p in self.peers.values_mut() {
            p.tx = Sender::new(self.config);
            p.rx = Receiver::new(self.config);
            p.queue.clear();
        }
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for p in self.peers.values() {
            t.retransmits += p.tx.retransmits;
            t.timeouts += p.tx.timeouts;
            t.duplicates += p.rx.duplicates;
        }
        t
    }

    /// One line per peer with something queued, unacknowledged or owed, for a failure report.
    pub fn describe(&self, now: u64) -> String {
        let mut out = String::new();
        for (rank, p) in &self.peers {
            if p.queue.is_empty() && p.tx.is_idle() && !p.rx.ack_due() {
                continue;
            }
            out += &format!(
                "\n  peer {rank}: queued {} | tx {} | rx {}",
                p.queue.len(),
                p.tx.describe(now),
                p.rx.describe()
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn peers(config: Config, ranks: &[usize]) -> Peers<u32> {
        let mut p = Peers::new(config, 1_000 * MS, 1_500);
        for &r in ranks {
            p.add(r);
        }
        p
    }

    /// Polls and reports sent until nothing is left: (peer, seq, item, copy).
    fn drain(p: &mut Peers<u32>, now: u64) -> Vec<(usize, u64, u32, Option<u8>)> {
        let mut out = Vec::new();
        while let Some(o) = p.poll_send(now) {
            p.sent(o.peer, o.seq, now);
            out.push((o.peer, o.seq, o.item, o.copy));
        }
        out
    }

    #[test]
    fn peers_take_turns_and_number_their_items_from_one() {
        let mut p = peers(Config::default(), &[1, 2, 5]);
        for (peer, n) in [(1, 3), (2, 1), (5, 2)] {
            for i in 0..n {
                assert!(p.enqueue(peer, 10 * peer as u32 + i));
            }
        }
        assert!(!p.enqueue(3, 0), "an unknown peer");
        let order: Vec<(usize, u64, u32)> = drain(&mut p, 0)
            .into_iter()
            .map(|(peer, seq, item, copy)| {
                assert_eq!(copy, None);
                (peer, seq, item)
            })
            .collect();
        assert_eq!(
            order,
            [
                (1, 1, 10),
                (2, 1, 20),
                (5, 1, 50),
                (1, 2, 11),
                (5, 2, 51),
                (1, 3, 12)
            ]
        );
        // The turn goes on after the peer served last, not from the lowest rank again.
        p.enqueue(1, 13);
        p.enqueue(2, 21);
        p.enqueue(5, 52);
        let peers: Vec<usize> = drain(&mut p, 0).iter().map(|o| o.0).collect();
        assert_eq!(peers, [2, 5, 1]);
    }

    #[test]
    fn new_items_wait_for_credit_and_retransmissions_go_first() {
        let config = Config {
            window: 2,
            ..Config::default()
        };
        let mut p = peers(config, &[1]);
        for i in 0..5 {
            p.enqueue(1, i);
        }
        assert_eq!(drain(&mut p, 0).len(), 2, "the credit is 2 items");
        assert_eq!(p.poll_timeout(0, false), Some(config.rto_initial));
        // The first is acknowledged: one more fits.
        assert_eq!(p.handle_ack(MS, 1, 2, 0, 2, None), 1);
        assert_eq!(drain(&mut p, MS), [(1, 3, 2, None)]);
        // The timer fires: the oldest unacknowledged item is resent, as copy 2, before
        // anything new.
        let at = p.poll_timeout(MS, false).unwrap();
        p.handle_timeout(at);
        assert_eq!(p.totals().timeouts, 1);
        let o = p.poll_send(at).unwrap();
        assert_eq!((o.seq, o.item, o.copy), (2, 1, Some(2)));
        // The socket refuses it: it stays first.
        p.unsent(1, o.seq);
        assert_eq!(drain(&mut p, at), [(1, 2, 1, Some(2))]);
        assert_eq!(p.totals().retransmits, 1);
    }

    #[test]
    fn the_pacer_spaces_items_and_says_when() {
        let config = Config {
            rate: Some(1_000_000), // 1 MB/s: a 1500-byte item every 1.5 ms
            burst: 3_000,
            ..Config::default()
        };
        let mut p = peers(config, &[1, 2]);
        for i in 0..4 {
            p.enqueue(1 + i as usize % 2, i);
        }
        assert_eq!(drain(&mut p, 0).len(), 2, "the burst holds two items");
        let at = p.poll_timeout(0, false).unwrap();
        assert_eq!(at, 1_500_000);
        assert_eq!(p.poll_timeout(0, true), Some(Config::default().rto_initial));
        assert!(p.poll_send(at - 1).is_none());
        assert_eq!(drain(&mut p, at).len(), 1);
        assert_eq!(drain(&mut p, at + 1_500_000).len(), 1);
    }

    #[test]
    fn a_waited_for_peer_gets_heartbeats_and_is_gone_when_it_never_answers() {
        let mut p = peers(Config::default(), &[1, 2]);
        let limit = 1_000 * MS;
        let ping_every = limit / 4;
        // Nothing owed: no heartbeat before a quarter of the limit, then one to the waited-for
        // peer only.
        p.check_liveness(ping_every - 1, &[1], || 99).unwrap();
        assert!(drain(&mut p, ping_every - 1).is_empty());
        p.check_liveness(ping_every, &[1], || 99).unwrap();
        assert_eq!(drain(&mut p, ping_every), [(1, 1, 99, None)]);
        // Answered: idle again, the next heartbeat a quarter later.
        p.handle_ack(ping_every + MS, 1, 2, 0, 4096, None);
        p.check_liveness(2 * ping_every - 1, &[1], || 99).unwrap();
        assert!(drain(&mut p, 2 * ping_every - 1).is_empty());
        p.check_liveness(2 * ping_every, &[1], || 99).unwrap();
        assert_eq!(drain(&mut p, 2 * ping_every), [(1, 2, 99, None)]);
        // Never answered (retransmissions are not answers): gone after the limit.
        p.check_liveness(2 * ping_every + limit - 1, &[1], || 99)
            .unwrap();
        assert_eq!(
            p.check_liveness(2 * ping_every + limit, &[1, 2], || 99),
            Err(PeerGone {
                peer: 1,
                silent: limit
            })
        );
        // A peer nobody waits for is never gone.
        assert!(p.check_liveness(10 * limit, &[2], || 99).is_ok());
    }

    #[test]
    fn arrivals_are_acknowledged_once_and_repairs_echoed() {
        let config = Config {
            window: 8,
            ..Config::default()
        };
        let mut p = peers(config, &[1]);
        assert_eq!(p.handle_seq(1, 2, None), Accept::Fresh);
        assert_eq!(p.owed_acks(), [1]);
        assert_eq!(p.piggyback(1), (1, 0b1, 8));
        assert!(p.owed_acks().is_empty());
        assert_eq!(p.handle_seq(1, 2, None), Accept::Duplicate);
        assert_eq!(p.owed_acks(), [1], "a duplicate is acknowledged again");
        assert_eq!(p.handle_seq(1, 1, Some(3)), Accept::Fresh);
        assert_eq!(p.take_repaired(1), Some((1, 3)));
        assert_eq!(p.take_repaired(1), None);
        assert_eq!(p.handle_seq(1, 20, None), Accept::OutOfWindow);
        assert_eq!(
            p.handle_seq(7, 1, None),
            Accept::OutOfWindow,
            "unknown peer"
        );
        assert_eq!(p.totals().duplicates, 1);
    }

    #[test]
    fn reset_forgets_what_is_in_flight_but_keeps_the_peers() {
        let mut p = peers(Config::default(), &[1, 2]);
        for i in 0..3 {
            p.enqueue(1, i);
        }
        p.poll_send(0).unwrap();
        p.handle_seq(2, 1, None);
        assert!(!p.describe(0).is_empty());
        p.reset();
        assert!(p.poll_send(0).is_none());
        assert!(p.owed_acks().is_empty());
        assert_eq!(p.poll_timeout(0, false), None);
        assert_eq!(p.describe(0), "");
        assert!(p.contains(1) && p.contains(2));
        // Numbers start again at 1, on both sides.
        p.enqueue(1, 7);
        assert_eq!(drain(&mut p, 0), [(1, 1, 7, None)]);
        assert_eq!(p.handle_seq(2, 1, None), Accept::Fresh);
        p.clear();
        assert!(!p.contains(1));
    }
}
