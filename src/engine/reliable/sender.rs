//! The sending half of the per-peer reliability toward one peer: numbering, the
//! retransmission timer (RFC 6298), fast retransmit, the probe and the repaired echo.

use super::{copy_number, Config};
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug, Clone)]
struct Pending<T> {
    item: T,
    /// When it last left (or was handed out, until `sent` confirms).
    sent_at: u64,
    /// Times it left the socket.
    sends: u32,
    /// Queued for retransmission.
    lost: bool,
}

/// The sending half toward one peer: holds `T` (what to resend) per sequence number.
///
/// Usage per frame: `push` (new) or `poll_retransmit` (again) hands it out; the caller then
/// reports `sent` when the socket took it or `unsent` when it did not.
#[derive(Debug, Clone)]
pub struct Sender<T> {
    config: Config,
    next: u64,
    /// Every number below this one is acknowledged.
    acked: u64,
    credit: u64,
    pending: BTreeMap<u64, Pending<T>>,
    lost: VecDeque<u64>,
    srtt: Option<u64>,
    rttvar: u64,
    rto: u64,
    /// The retransmission timer runs from here: the last acknowledgement that made progress
    /// (or the first send after the sender was idle).
    timer_base: u64,
    /// The last acknowledgement that made progress (or the first send after the sender was
    /// idle): unlike `timer_base`, a timeout does not move it, so a peer that answers
    /// nothing stays silent since then however often its frames are resent.
    progressed: u64,
    /// After a timeout: the first number sent after it. Until everything below it is
    /// acknowledged, further timeouts belong to the same recovery.
    recover: Option<u64>,
    /// Counters.
    pub retransmits: u64,
    pub timeouts: u64,
}

impl<T> Sender<T> {
    pub fn new(config: Config) -> Sender<T> {
        Sender {
            config,
            next: 1,
            acked: 1,
            credit: u64::from(config.window.max(1)),
            pending: BTreeMap::new(),
            lost: VecDeque::new(),
            srtt: None,
            rttvar: 0,
            rto: config.rto_initial,
            timer_base: 0,
            progressed: 0,
            recover: None,
            retransmits: 0,
            timeouts: 0,
        }
    }

    /// Whether the peer's credit allows one more new frame.
    pub fn can_send(&self) -> bool {
        self.next - self.acked < self.credit
    }

    /// Records a new frame handed out at `now`; returns its sequence number.
    pub fn push(&mut self, now: u64, item: T) -> u64 {
        let seq = self.next;
        self.next += 1;
        if self.pending.is_empty() {
            self.timer_base = now;
            self.progressed = now;
        }
        self.pending.insert(
            seq,
            Pending {
                item,
                sent_at: now,
                sends: 0,
                lost: false,
            },
        );
        seq
    }

    /// Frame `seq` left the socket at `now`.
    pub fn sent(&mut self, seq: u64, now: u64) {
        if let Some(p) = self.pending.get_mut(&seq) {
            p.sends += 1;
            p.sent_at = now;
            if p.sends > 1 {
                self.retransmits += 1;
            }
        }
    }

    /// Frame `seq` (handed out by `push` or `poll_retransmit`) did not leave: it goes first
    /// in the retransmission queue.
    pub fn unsent(&mut self, seq: u64) {
        if let Some(p) = self.pending.get_mut(&seq) {
            p.lost = true;
            self.lost.push_front(seq);
        }
    }

    /// Which copy of frame `seq` the next send is ([`copy_number`]), if it is unacknowledged.
    pub fn next_copy(&self, seq: u64) -> Option<u8> {
        self.pending.get(&seq).map(|p| copy_number(p.sends + 1))
    }

    /// The next sequence number `push` will hand out.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Takes an acknowledgement: cumulative `ack`, selective bitmap `sack`, the peer's credit
    /// and, if the acknowledgement carries one, a retransmitted frame that arrived as new
    /// (`repaired`: its number and which copy it was, [`copy_number`]). Returns how many
    /// frames it acknowledged.
    pub fn on_ack(
        &mut self,
        now: u64,
        ack: u64,
        sack: u64,
        credit: u32,
        repaired: Option<(u64, u8)>,
    ) -> usize {
        let ack = ack.min(self.next);
        // Only the latest copy's departure is known: `sent_at`.
        let repaired_at = repaired.and_then(|(seq, copy)| {
            self.pending
                .get(&seq)
                .filter(|p| copy_number(p.sends) == copy && !p.lost)
                .map(|p| (p.sent_at, seq))
        });
        let mut newly = Vec::new();
        if ack > self.acked {
            let rest = self.pending.split_off(&ack);
            newly.extend(std::mem::replace(&mut self.pending, rest));
            self.acked = ack;
        }
        let mut highest_sacked = None;
        for i in 0..64 {
            if sack & (1 << i) != 0 {
                let seq = ack + 1 + i;
                if let Some(p) = self.pending.remove(&seq) {
                    newly.push((seq, p));
                }
                highest_sacked = Some(seq);
            }
        }
        if ack >= self.acked {
            self.credit = u64::from(credit.max(1));
        }
        for (_, p) in &newly {
            // Karn: only frames sent once give RTT samples.
            if p.sends == 1 {
                self.sample(now.saturating_sub(p.sent_at));
            }
        }
        if !newly.is_empty() {
            self.rto = self.computed_rto();
            self.timer_base = now;
            self.progressed = now;
        }
        if self.recover.is_some_and(|r| self.acked >= r) {
            self.recover = None;
        }
        if let Some(at) = repaired_at {
            // The link delivers in order: what left before the retransmission that arrived
            // and is still unacknowledged is lost (e.g. a lost tail, which no selective
            // acknowledgement reports).
            for (&seq, p) in self.pending.iter_mut() {
                if !p.lost && (p.sent_at, seq) < at {
                    p.lost = true;
                    self.lost.push_back(seq);
                }
            }
        }
        // Fast retransmit: a frame three or more numbers below a selectively acknowledged one
        // is presumed lost (once).
        if let Some(h) = highest_sacked {
            for (&seq, p) in self.pending.range_mut(..h.saturating_sub(2)) {
                if !p.lost && p.sends == 1 {
                    p.lost = true;
                    self.lost.push_back(seq);
                }
            }
        }
        self.lost.retain(|s| self.pending.contains_key(s));
        newly.len()
    }

    fn sample(&mut self, rtt: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + srtt.abs_diff(rtt)) / 4;
                self.srtt = Some((7 * srtt + rtt) / 8);
            }
        }
    }

    fn computed_rto(&self) -> u64 {
        match self.srtt {
            Some(srtt) => (srtt + 4 * self.rttvar).clamp(self.config.rto_min, self.config.rto_max),
            None => self.config.rto_initial,
        }
    }

    /// When the retransmission timer fires: an RTO after the last acknowledgement that made
    /// progress, while something is unacknowledged and not already queued again.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.pending
            .values()
            .any(|p| !p.lost)
            .then(|| self.timer_base.saturating_add(self.rto))
    }

    /// Fires the timer (RFC 6298 §5). The first expiry after progress resends only the oldest
    /// unacknowledged frame, as a probe; the RTO doubles (capped) and the timer restarts.
    ///
    /// - If the probe arrives as new, the receiver echoes it and [`Sender::on_ack`] queues
    ///   every frame sent before it that is still unacknowledged: a lost tail (the last frames
    ///   before the sender waits for credit, which no selective acknowledgement reports) is
    ///   recovered in one RTO plus one round trip, not one RTO per frame.
    /// - If its first copy had arrived, the expiry was spurious (a receiver descheduled for an
    ///   RTO on the 2-core lab, or acks queued behind its own data in a tbf): it cost one
    ///   duplicate frame. Resending the whole window here cost hundreds of duplicates per
    ///   stall.
    /// - A further expiry before everything outstanding at the first one is acknowledged (the
    ///   probe or its echo lost, or more lost behind it) queues every frame that left an RTO
    ///   ago or earlier, as TCP's SACK recovery after an RTO would (RFC 6675 §5.1).
    pub fn handle_timeout(&mut self, now: u64) {
        match self.poll_timeout() {
            Some(at) if at <= now => {}
            _ => return,
        }
        let rto = self.rto;
        let again = self.recover.is_some();
        if !again {
            self.recover = Some(self.next);
        }
        let mut first = true;
        for (&seq, p) in self.pending.iter_mut() {
            if p.lost {
                continue;
            }
            if first || (again && now.saturating_sub(p.sent_at) >= rto) {
                p.lost = true;
                self.lost.push_back(seq);
            }
            first = false;
        }
        self.timeouts += 1;
        self.rto = (self.rto * 2).min(self.config.rto_max);
        self.timer_base = now;
    }

    /// The next frame to retransmit: its number and content.
    pub fn poll_retransmit(&mut self, now: u64) -> Option<(u64, &T)> {
        while let Some(seq) = self.lost.pop_front() {
            if self.pending.contains_key(&seq) {
                let p = self.pending.get_mut(&seq).expect("checked");
                p.lost = false;
                p.sent_at = now;
                return Some((seq, &p.item));
            }
        }
        None
    }

    /// When the peer last acknowledged something new (or, after idling, when the first
    /// unacknowledged frame left): how long it has been silent while owing an ack.
    pub fn last_progress(&self) -> u64 {
        self.progressed
    }

    /// A frame waits for retransmission.
    pub fn has_retransmit(&self) -> bool {
        !self.lost.is_empty()
    }

    /// Nothing is unacknowledged.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    pub fn rto(&self) -> u64 {
        self.rto
    }

    /// One line of state for a failure report.
    pub fn describe(&self, now: u64) -> String {
        format!(
            "next {} acked {} credit {} pending {} (oldest {:?}) lost {} rto {} ms timer in {} ms",
            self.next,
            self.acked,
            self.credit,
            self.pending.len(),
            self.pending.keys().next(),
            self.lost.len(),
            self.rto / 1_000_000,
            (self.timer_base.saturating_add(self.rto) as i128 - now as i128) / 1_000_000,
        )
    }

    /// Replaces the content of every unacknowledged frame (e.g. data whose buffer is gone
    /// becomes a no-op that still fills its number).
    pub fn rewrite(&mut self, mut f: impl FnMut(&mut T)) {
        for p in self.pending.values_mut() {
            f(&mut p.item);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The sender by hand; over a simulated lossy link in `crate::sim`'s tests.
    use super::*;

    #[test]
    fn rto_backs_off_and_is_capped() {
        let config = Config::default();
        let mut tx: Sender<()> = Sender::new(config);
        let s = tx.push(0, ());
        tx.sent(s, 0);
        let mut now = 0;
        let mut last = tx.rto();
        for _ in 0..20 {
            now = tx.poll_timeout().unwrap();
            tx.handle_timeout(now);
            assert!(tx.poll_retransmit(now).is_some());
            tx.sent(s, now);
            assert!(tx.rto() >= last);
            last = tx.rto();
        }
        assert_eq!(tx.rto(), config.rto_max);
        assert_eq!(tx.timeouts, 20);
        // Resent twenty times, never answered: silent since the first send (liveness).
        assert_eq!(tx.last_progress(), 0);
        assert_eq!(tx.on_ack(now, 2, 0, 10, None), 1);
        assert!(tx.is_idle());
    }

    /// Fires the timer at `at` and resends what it queued; returns the resent items.
    fn expire(tx: &mut Sender<u32>, at: u64) -> Vec<u32> {
        tx.handle_timeout(at);
        resend(tx, at)
    }

    fn resend(tx: &mut Sender<u32>, at: u64) -> Vec<u32> {
        let mut again = Vec::new();
        while let Some((s, &v)) = tx.poll_retransmit(at) {
            again.push(v);
            tx.sent(s, at);
        }
        again
    }

    /// 50 frames (items 0..50, numbers 1..=50) sent at 0; the first 10 acknowledged at 1 ms.
    fn fifty_sent_ten_acked() -> Sender<u32> {
        let mut tx: Sender<u32> = Sender::new(Config::default());
        for i in 0..50 {
            let s = tx.push(0, i);
            tx.sent(s, 0);
        }
        assert_eq!(tx.on_ack(1_000_000, 11, 0, 4096, None), 10);
        tx
    }

    #[test]
    fn a_lost_tail_is_retransmitted_after_one_timeout_and_its_probe() {
        // The first 10 arrive; the other 40 (the tail) are lost, so no selective ack.
        let mut tx = fifty_sent_ten_acked();
        let at = tx.poll_timeout().expect("timer runs");
        assert_eq!(expire(&mut tx, at), vec![10], "the timeout sends one probe");
        // The probe arrives as new (echoed): everything sent before it is lost.
        let back = at + 2_000_000;
        assert_eq!(tx.on_ack(back, 12, 0, 4096, Some((11, 2))), 1);
        assert_eq!(resend(&mut tx, back), (11..50).collect::<Vec<_>>());
        assert_eq!(tx.retransmits, 40);
    }

    #[test]
    fn a_spurious_timeout_costs_one_duplicate() {
        // Nothing was lost: the receiver was late. Its first copy arrived, so the probe is a
        // duplicate there and not echoed.
        let mut tx = fifty_sent_ten_acked();
        let at = tx.poll_timeout().expect("timer runs");
        assert_eq!(expire(&mut tx, at), vec![10]);
        assert_eq!(tx.on_ack(at + 1_000_000, 31, 0, 4096, None), 20);
        assert_eq!(resend(&mut tx, at + 1_000_000), Vec::<u32>::new());
        assert_eq!(tx.retransmits, 1);
        assert_eq!(tx.in_flight(), 20);
        // The rest arrives too; a later expiry (new frames, nothing acknowledged) is a new
        // recovery and starts with one probe again.
        assert_eq!(tx.on_ack(at + 2_000_000, 51, 0, 4096, None), 20);
        for i in 50..60 {
            let s = tx.push(at + 3_000_000, i);
            tx.sent(s, at + 3_000_000);
        }
        let at2 = tx.poll_timeout().expect("timer runs");
        assert_eq!(expire(&mut tx, at2), vec![50]);
    }

    #[test]
    fn a_repaired_frame_marks_only_what_left_before_it() {
        // Items 0..30 (numbers 1..=30) leave at 0 and 5 ms; 1..=4 arrive, the rest is lost.
        let mut tx: Sender<u32> = Sender::new(Config::default());
        for i in 0..30 {
            let at = if i < 10 { 0 } else { 5_000_000 };
            let s = tx.push(at, i);
            tx.sent(s, at);
        }
        assert_eq!(tx.on_ack(6_000_000, 5, 0, 4096, None), 4);
        let at = tx.poll_timeout().expect("timer runs");
        assert_eq!(expire(&mut tx, at), vec![4], "the probe");
        // A frame sent after the probe.
        let late = tx.push(at + 1_000_000, 30);
        tx.sent(late, at + 1_000_000);
        // No echo (the probe's first copy arrived after all): nothing more is presumed lost.
        let mut spurious = tx.clone();
        spurious.on_ack(at + 2_000_000, 6, 0, 4096, None);
        assert_eq!(resend(&mut spurious, at + 2_000_000), Vec::<u32>::new());
        // The probe arrived as new: what left before it is lost, the later frame is not.
        // An echo of the first copy says nothing about when it left.
        let mut first_copy = tx.clone();
        first_copy.on_ack(at + 2_000_000, 6, 0, 4096, Some((5, 1)));
        assert_eq!(resend(&mut first_copy, at + 2_000_000), Vec::<u32>::new());
        tx.on_ack(at + 2_000_000, 6, 0, 4096, Some((5, 2)));
        assert_eq!(resend(&mut tx, at + 2_000_000), (5..30).collect::<Vec<_>>());
        assert_eq!(tx.in_flight(), 26);
    }

    #[test]
    fn a_lost_probe_leads_to_resending_every_old_frame() {
        let mut tx = fifty_sent_ten_acked();
        let at = tx.poll_timeout().expect("timer runs");
        assert_eq!(expire(&mut tx, at), vec![10]);
        // A frame sent just before the second expiry is not presumed lost.
        let at2 = tx.poll_timeout().expect("timer runs");
        let fresh = tx.push(at2 - 1_000, 50);
        tx.sent(fresh, at2 - 1_000);
        // No answer to the probe: the second expiry resends it and everything older than an
        // RTO, in number order.
        assert_eq!(expire(&mut tx, at2), (10..50).collect::<Vec<_>>());
    }
}
