//! The lossy-path adapter: everything a link over a lossy datagram path does around its
//! [`Peers`] that is not I/O. Raw Ethernet runs one per rail (`transport::raweth`), the
//! simulator one per rank over its simulated edges (`crate::sim`), so both run the same
//! round robin between peers, [`Pacer`](super::Pacer), acknowledgements and heartbeats.
//!
//! - [`Lossy::queue`] cuts an engine message into pieces of at most the link's payload per
//!   frame and queues them on the peer's reliability (raw Ethernet: MTU − header; the
//!   simulator: whole messages);
//! - [`Lossy::send`] runs the retransmission timers, then hands out batches of [`Frame`]s in
//!   the order [`Peers::poll_send`] chooses (retransmissions first, peers in turn, within
//!   credit and pacing), each with its peer's acknowledgement piggybacked, then bare
//!   acknowledgements to the peers owed one (with a repaired echo). The link's `out` writes
//!   them and says how many it took; the rest go back first in line;
//! - [`Lossy::receive`] for every arriving frame (a link delivers its content only when
//!   `Fresh`); an engine segment cut into several frames is
//!   put back together by an [`Assembly`];
//! - [`Lossy::check_liveness`] queues heartbeats to quiet peers a broadcast waits for and
//!   says when one is gone; [`Lossy::poll_timeout`] and [`Lossy::liveness_timeout`] say when
//!   the next call is due.

use super::{Accept, Config, Outgoing, PeerGone, Peers, Totals};
use crate::engine::Message;
use std::collections::BTreeMap;
use std::ops::Range;

/// What one sequenced frame carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Bytes `payload` of the broadcast buffer of `message` (empty for a credit or a done),
    /// at `offset` in its segment.
    Message {
        message: Message,
        offset: u32,
        payload: Range<usize>,
    },
    /// A sequenced no-op: a live peer acknowledges it, even while its rank computes.
    Heartbeat,
}

/// One frame to put on the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub peer: usize,
    /// Its per-peer sequence number (0 for a bare acknowledgement).
    pub seq: u64,
    /// `None`: a bare acknowledgement.
    pub piece: Option<Piece>,
    /// The copy number of a retransmission (`None` on a first send).
    pub copy: Option<u8>,
    /// The acknowledgement it carries to `peer`: cumulative, selective bitmap, credit.
    pub ack: u64,
    pub sack: u64,
    pub credit: u32,
    /// A bare acknowledgement's echo of a repaired frame: its number and copy number.
    pub repaired: Option<(u64, u8)>,
}

/// What the adapter counted (beside the reliability's [`Totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Bare acknowledgements the link took.
    pub acks: u64,
    /// Batches the link took only in part (its send buffer was full).
    pub blocked: u64,
}

/// The per-peer reliability of one lossy link, with its framing.
#[derive(Debug, Clone)]
pub struct Lossy {
    peers: Peers<Piece>,
    /// Payload bytes per frame.
    max_payload: usize,
    /// Frames per batch handed to the link.
    batch: usize,
    sent: Sent,
}

impl Lossy {
    /// No peers yet. `liveness` (ns): a waited-for peer is gone when a frame to it stays
    /// unacknowledged this long; `frame_bytes`: what one frame costs the pacer; at most
    /// `max_payload` payload bytes per frame (at least 1); `batch` frames at a time to the
    /// link.
    pub fn new(
        config: Config,
        liveness: u64,
        frame_bytes: u64,
        max_payload: usize,
        batch: usize,
    ) -> Lossy {
        Lossy {
            peers: Peers::new(config, liveness, frame_bytes),
            max_payload: max_payload.max(1),
            batch: batch.max(1),
            sent: Sent::default(),
        }
    }

    /// Adds `peer` with fresh state.
    pub fn add(&mut self, peer: usize) {
        self.peers.add(peer);
    }

    /// Forgets every peer.
    pub fn clear(&mut self) {
        self.peers.clear();
    }

    pub fn contains(&self, peer: usize) -> bool {
        self.peers.contains(peer)
    }

    /// Every peer, by rank.
    pub fn peers(&self) -> impl Iterator<Item = usize> + '_ {
        self.peers.ranks()
    }

    /// Queues engine message `message` to `peer`: a segment (its payload `payload` of its
    /// broadcast's buffer) cut into frames of at most the payload per frame, a credit or a
    /// done as one frame. `false` if `peer` is unknown.
    pub fn queue(&mut self, peer: usize, message: Message, payload: Range<usize>) -> bool {
        if !self.peers.contains(peer) {
            return false;
        }
        if !matches!(message, Message::Data(_)) {
            return self.peers.enqueue(
                peer,
                Piece::Message {
                    message,
                    offset: 0,
                    payload: 0..0,
                },
            );
        }
        let mut off = 0usize;
        loop {
            let len = (payload.len() - off).min(self.max_payload);
            let start = payload.start + off;
            self.peers.enqueue(
                peer,
                Piece::Message {
                    message,
                    offset: off as u32,
                    payload: start..start + len,
                },
            );
            off += len;
            if off >= payload.len() {
                return true;
            }
        }
    }

    /// Sends what the reliability hands out, in batches of [`Frame`]s given to `out`, then
    /// bare acknowledgements to the peers owed one. `out` returns how many frames of the
    /// batch it took; when it took fewer (a full send buffer), the rest go first in line
    /// again and only acknowledgements are still tried. Returns whether `out` took fewer
    /// than it was given.
    pub fn send<E>(
        &mut self,
        now: u64,
        out: &mut dyn FnMut(&[Frame]) -> Result<usize, E>,
    ) -> Result<bool, E> {
        self.peers.handle_timeout(now);
        let most = self.batch;
        let mut full = false;
        loop {
            let mut batch: Vec<Outgoing<Piece>> = Vec::with_capacity(most);
            while batch.len() < most {
                match self.peers.poll_send(now) {
                    Some(o) => batch.push(o),
                    None => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            let frames: Vec<Frame> = batch
                .iter()
                .map(|o| {
                    let (ack, sack, credit) = self.peers.piggyback(o.peer);
                    Frame {
                        peer: o.peer,
                        seq: o.seq,
                        piece: Some(o.item.clone()),
                        copy: o.copy,
                        ack,
                        sack,
                        credit,
                        repaired: None,
                    }
                })
                .collect();
            let sent = out(&frames)?.min(frames.len());
            for o in &batch[..sent] {
                self.peers.sent(o.peer, o.seq, now);
            }
            for o in batch[sent..].iter().rev() {
                self.peers.unsent(o.peer, o.seq);
            }
            if sent < batch.len() {
                self.sent.blocked += 1;
                full = true;
                break;
            }
        }
        let owed = self.peers.owed_acks();
        for chunk in owed.chunks(most) {
            let frames: Vec<Frame> = chunk
                .iter()
                .map(|&peer| {
                    let (ack, sack, credit) = self.peers.piggyback(peer);
                    Frame {
                        peer,
                        seq: 0,
                        piece: None,
                        copy: None,
                        ack,
                        sack,
                        credit,
                        repaired: self.peers.take_repaired(peer),
                    }
                })
                .collect();
            let sent = out(&frames)?.min(frames.len());
            self.sent.acks += sent as u64;
            if sent < frames.len() {
                return Ok(true);
            }
        }
        Ok(full)
    }

    /// A frame from `peer` arrived: its acknowledgement `(ack, sack, credit)` (every frame
    /// carries one; `repaired` is a bare acknowledgement's echo) goes to the sending half,
    /// its number and copy number (`seq`: `None` for a bare acknowledgement; the copy number
    /// only when it was sent as a retransmission) to the receiving half. Deliver its content
    /// only if `Some(Fresh)`.
    pub fn receive(
        &mut self,
        now: u64,
        peer: usize,
        (ack, sack, credit): (u64, u64, u32),
        repaired: Option<(u64, u8)>,
        seq: Option<(u64, Option<u8>)>,
    ) -> Option<Accept> {
        self.peers
            .handle_ack(now, peer, ack, sack, credit, repaired);
        let (seq, copy) = seq?;
        Some(self.peers.handle_seq(peer, seq, copy))
    }

    /// When the reliability next needs a call (a retransmission, pacing); `blocked`: the
    /// link's send buffer is full, so its readiness, not pacing, says when to send.
    pub fn poll_timeout(&self, now: u64, blocked: bool) -> Option<u64> {
        self.peers.poll_timeout(now, blocked)
    }

    /// Fails when a peer in `waiting` left a frame unacknowledged for the liveness limit;
    /// queues a heartbeat to a waited-for peer that owes nothing and was not pinged for a
    /// quarter of it ([`Peers::check_liveness`]).
    pub fn check_liveness(&mut self, now: u64, waiting: &[usize]) -> Result<(), PeerGone> {
        self.peers.check_liveness(now, waiting, || Piece::Heartbeat)
    }

    /// When [`Lossy::check_liveness`] next has something to do for `waiting` (a link polled
    /// at least that often needs no timer of its own for it).
    pub fn liveness_timeout(&self, waiting: &[usize]) -> Option<u64> {
        self.peers.liveness_timeout(waiting)
    }

    /// Whether everything to `peer` is acknowledged and nothing waits to go to it.
    pub fn is_idle_to(&self, peer: usize) -> bool {
        self.peers.is_idle_to(peer)
    }

    /// Forgets everything in flight (after a failed broadcast).
    pub fn reset(&mut self) {
        self.peers.reset();
    }

    pub fn totals(&self) -> Totals {
        self.peers.totals()
    }

    pub fn sent(&self) -> Sent {
        self.sent
    }

    /// One line per peer with something queued, unacknowledged or owed.
    pub fn describe(&self, now: u64) -> String {
        self.peers.describe(now)
    }
}

/// One engine segment put back together from the frames it was cut into: where it goes
/// (`target`, the link's), which frames arrived (offset → length, distinct and
/// non-overlapping) and how many bytes they cover. Duplicated or overlapping frames never
/// complete a segment early.
#[derive(Debug)]
pub struct Assembly<T, H> {
    pub target: T,
    /// The segment's length.
    pub len: usize,
    pub pieces: BTreeMap<usize, usize>,
    pub got: usize,
    /// The segment's header.
    pub head: H,
}

impl<T, H> Assembly<T, H> {
    pub fn new(target: T, len: usize, head: H) -> Assembly<T, H> {
        Assembly {
            target,
            len,
            pieces: BTreeMap::new(),
            got: 0,
            head,
        }
    }

    /// Whether a frame of `n` bytes at `off` overlaps none that arrived.
    pub fn fits(&self, off: usize, n: usize) -> bool {
        let before = self.pieces.range(..=off).next_back();
        let after = self.pieces.range(off..).next();
        before.is_none_or(|(&o, &l)| o + l <= off && (o != off || l == 0))
            && after.is_none_or(|(&o, _)| o >= off + n && o != off)
    }

    /// Takes the frame of `n` bytes at `off`, which must fit ([`Assembly::fits`], within
    /// `len`); whether the segment is complete.
    pub fn add(&mut self, off: usize, n: usize) -> bool {
        self.pieces.insert(off, n);
        self.got += n;
        self.got >= self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::DataHeader;

    fn data(len: u32) -> Message {
        Message::Data(DataHeader {
            seq: 1,
            root: 0,
            msize: u64::from(len),
            segment: len,
            lanes: 1,
            lane: 0,
            index: 0,
            len,
        })
    }

    fn lossy(max_payload: usize, batch: usize) -> Lossy {
        let mut l = Lossy::new(Config::default(), 1_000_000_000, 1_500, max_payload, batch);
        l.add(1);
        l.add(2);
        l
    }

    #[test]
    fn segments_are_cut_into_frames_and_peers_take_turns() {
        let mut l = lossy(4, 32);
        assert!(l.queue(1, data(10), 100..110));
        assert!(l.queue(2, Message::Done { seq: 1, lane: 0 }, 0..0));
        assert!(!l.queue(3, Message::Done { seq: 1, lane: 0 }, 0..0));
        let mut got = Vec::new();
        let full = l
            .send::<()>(0, &mut |frames| {
                got.extend_from_slice(frames);
                Ok(frames.len())
            })
            .unwrap();
        assert!(!full);
        let seen: Vec<(usize, u64, Option<Range<usize>>)> = got
            .iter()
            .map(|f| {
                let range = match &f.piece {
                    Some(Piece::Message { payload, .. }) => Some(payload.clone()),
                    _ => None,
                };
                (f.peer, f.seq, range)
            })
            .collect();
        assert_eq!(
            seen,
            [
                (1, 1, Some(100..104)),
                (2, 1, Some(0..0)),
                (1, 2, Some(104..108)),
                (1, 3, Some(108..110)),
            ]
        );
    }

    #[test]
    fn a_full_link_keeps_the_rest_first_in_line_and_bare_acks_echo_repairs() {
        let mut l = lossy(1_000, 2);
        for _ in 0..3 {
            l.queue(1, Message::Done { seq: 1, lane: 0 }, 0..0);
        }
        let full = l.send::<()>(0, &mut |_| Ok(1)).unwrap();
        assert!(full);
        assert_eq!(l.sent().blocked, 1);
        let mut seqs = Vec::new();
        l.send::<()>(0, &mut |frames| {
            seqs.extend(frames.iter().map(|f| f.seq));
            Ok(frames.len())
        })
        .unwrap();
        assert_eq!(seqs, [2, 3]);
        // A retransmission from peer 2 that arrives as new: the bare ack echoes it.
        let fresh = l.receive(0, 2, (1, 0, 4096), None, Some((1, Some(2))));
        assert_eq!(fresh, Some(Accept::Fresh));
        assert_eq!(
            l.receive(0, 2, (1, 0, 4096), None, None),
            None,
            "a bare ack"
        );
        let mut acks = Vec::new();
        l.send::<()>(0, &mut |frames| {
            acks.extend_from_slice(frames);
            Ok(frames.len())
        })
        .unwrap();
        assert_eq!(acks.len(), 1);
        assert_eq!(
            (
                acks[0].peer,
                acks[0].piece.clone(),
                acks[0].ack,
                acks[0].repaired
            ),
            (2, None, 2, Some((1, 2)))
        );
        assert_eq!(l.sent().acks, 1);
    }

    #[test]
    fn quiet_waited_for_peers_get_heartbeats_when_due() {
        let mut l = lossy(1_000, 32);
        assert_eq!(l.liveness_timeout(&[1]), Some(250_000_000));
        l.check_liveness(250_000_000, &[1]).unwrap();
        assert!(!l.is_idle_to(1));
        let mut got = Vec::new();
        l.send::<()>(250_000_000, &mut |frames| {
            got.extend_from_slice(frames);
            Ok(frames.len())
        })
        .unwrap();
        assert_eq!(got[0].piece, Some(Piece::Heartbeat));
        // Unanswered: gone at the limit after it left.
        assert_eq!(l.liveness_timeout(&[1]), Some(1_250_000_000));
        assert!(l.check_liveness(1_250_000_000, &[1]).is_err());
    }

    #[test]
    fn an_assembly_takes_distinct_frames_only() {
        let mut a = Assembly::new((), 10, ());
        assert!(a.fits(0, 4));
        assert!(!a.add(0, 4));
        assert!(!a.fits(0, 4) && !a.fits(2, 4));
        assert!(!a.add(4, 4));
        assert!(a.add(8, 2));
    }
}
