//! One rank's part in one multicast broadcast: the root's window and syncs, a receiver's
//! gaps and NACKs, a parent's repairs and reports, liveness (the protocol: `mod.rs`).

use super::{segments, Config, McastError, Msg, Out, Shape, To};
use crate::engine::reliable::Pacer;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;

/// Where a broadcast is at this rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Running,
    /// This rank and its whole subtree hold every segment.
    Complete,
    Failed(McastError),
}

/// A gap: a segment known sent and not held.
#[derive(Debug, Clone, Copy)]
struct Miss {
    /// When it became known.
    seen: u64,
    /// When it was last NACKed.
    nacked: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Child {
    /// Its subtree's cumulative report.
    ack: u64,
    heard: u64,
}

/// What a member did (for reports and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// New segments multicast (root).
    pub sent: u64,
    /// Segments repaired to one rank.
    pub repairs: u64,
    /// Segments multicast again (root).
    pub group_repairs: u64,
    /// NACK messages sent.
    pub nacks: u64,
    /// Reports sent to the parent (pings included).
    pub acks: u64,
    pub syncs: u64,
    /// Segments that arrived again.
    pub duplicates: u64,
}

/// One rank's part in one multicast broadcast.
#[derive(Debug, Clone)]
pub struct Member {
    shape: Shape,
    config: Config,
    msize: u64,
    segment: u32,
    n: u32,
    state: State,
    have: Vec<bool>,
    /// The first segment not held.
    prefix: u32,
    /// Segments known sent: `0..high`.
    high: u32,
    missing: BTreeMap<u32, Miss>,
    children: BTreeMap<usize, Child>,
    parent_heard: u64,
    /// Segments this rank lacks that children asked for.
    wanted: BTreeMap<u32, BTreeSet<usize>>,
    /// When each (child, segment) was last repaired.
    repaired: BTreeMap<(usize, u32), u64>,
    queue: VecDeque<Out>,
    /// The last value reported to the parent.
    reported: u64,
    last_ping: u64,
    /// A group sync asked for reports: report every growth until the subtree caught up.
    synced: bool,
    // The root's side.
    next: u32,
    acked: u64,
    moved: u64,
    last_sync: Option<u64>,
    asks: BTreeMap<u32, BTreeSet<usize>>,
    pacer: Pacer,
    stats: Stats,
}

impl Member {
    /// Rank `shape.me`'s part in the broadcast of `msize` bytes in segments of `segment`
    /// bytes from `shape.root`, posted at `now`.
    pub fn new(
        shape: Shape,
        msize: u64,
        segment: u32,
        config: Config,
        now: u64,
    ) -> Result<Member, McastError> {
        let bad = |s: String| Err(McastError::Invalid(s));
        let Some(n) = segments(msize, segment) else {
            return bad(format!(
                "{msize} bytes in segments of {segment} bytes: too many segments or a zero segment"
            ));
        };
        let is_root = shape.me == shape.root;
        if is_root != shape.parent.is_none() || shape.parent == Some(shape.me) {
            return bad(format!(
                "rank {} has parent {:?} with root {}: exactly the root has none",
                shape.me, shape.parent, shape.root
            ));
        }
        let kids: BTreeSet<usize> = shape.children.iter().copied().collect();
        if kids.len() != shape.children.len()
            || kids.contains(&shape.me)
            || shape.parent.is_some_and(|p| kids.contains(&p))
        {
            return bad(format!(
                "rank {}: children {:?} repeat a rank, this rank or its parent",
                shape.me, shape.children
            ));
        }
        if config.window == 0 {
            return bad("a window of 0 segments".into());
        }
        let mut config = config;
        config.ack_every = config.ack_every.clamp(1, (config.window / 2).max(1));
        let children = kids
            .iter()
            .map(|&c| (c, Child { ack: 0, heard: now }))
            .collect();
        let mut m = Member {
            config,
            msize,
            segment,
            n,
            state: State::Running,
            have: vec![is_root; n as usize],
            prefix: if is_root { n } else { 0 },
            high: if is_root { n } else { 0 },
            missing: BTreeMap::new(),
            children,
            parent_heard: now,
            wanted: BTreeMap::new(),
            repaired: BTreeMap::new(),
            queue: VecDeque::new(),
            reported: 0,
            last_ping: now,
            synced: false,
            next: 0,
            acked: 0,
            moved: now,
            last_sync: None,
            asks: BTreeMap::new(),
            pacer: Pacer::new(config.rate, config.burst, now),
            stats: Stats::default(),
            shape,
        };
        m.progress(now);
        Ok(m)
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn is_root(&self) -> bool {
        self.shape.parent.is_none()
    }

    /// How many segments the message has.
    pub fn segments(&self) -> u32 {
        self.n
    }

    pub fn msize(&self) -> u64 {
        self.msize
    }

    pub fn segment_size(&self) -> u32 {
        self.segment
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The bytes of segment `index` in the buffer.
    pub fn segment_range(&self, index: u32) -> Range<usize> {
        let start = (u64::from(index) * u64::from(self.segment)).min(self.msize);
        let end = (start + u64::from(self.segment)).min(self.msize);
        start as usize..end as usize
    }

    /// Whether this rank holds every segment (its subtree may still be repairing).
    pub fn holds_all(&self) -> bool {
        self.prefix == self.n
    }

    /// The value this rank reports: `0..value` held here and in its whole subtree.
    fn subtree(&self) -> u64 {
        let mine = u64::from(self.prefix);
        self.children.values().map(|c| c.ack).fold(mine, u64::min)
    }

    fn fail(&mut self, error: McastError) {
        if matches!(self.state, State::Failed(_)) {
            return;
        }
        if let Some(gone) = error.gone() {
            let to = match self.shape.parent {
                Some(p) => To::Rank(p),
                None => To::Group,
            };
            self.queue.clear();
            let abort = Out {
                to,
                msg: Msg::Abort { gone },
            };
            self.queue.push_back(abort);
            if to == To::Group {
                // The group may lose it; whoever pings a failed rank gets it again.
                self.queue.push_back(abort);
            }
        }
        self.state = State::Failed(error);
    }

    /// Segment `index` arrived from `from` (the root, on the group or by unicast, or this
    /// rank's parent): where to copy its bytes, or `None` (a duplicate, a stranger's, another
    /// broadcast's size, or this rank failed). The caller copies them before the next call.
    pub fn land(&mut self, now: u64, from: usize, index: u32) -> Option<Range<usize>> {
        if matches!(self.state, State::Failed(_)) || index >= self.n || self.is_root() {
            return None;
        }
        if from != self.shape.root && Some(from) != self.shape.parent {
            return None;
        }
        if Some(from) == self.shape.parent {
            self.parent_heard = now;
        }
        if self.have[index as usize] {
            self.stats.duplicates += 1;
            return None;
        }
        self.have[index as usize] = true;
        self.missing.remove(&index);
        self.learn_sent(now, index + 1, now);
        while self.prefix < self.n && self.have[self.prefix as usize] {
            self.prefix += 1;
        }
        if let Some(kids) = self.wanted.remove(&index) {
            for c in kids {
                self.repair(now, c, index);
            }
        }
        self.progress(now);
        Some(self.segment_range(index))
    }

    /// Segments `0..sent` were sent: the ones not held are gaps, known since `seen`.
    fn learn_sent(&mut self, _now: u64, sent: u32, seen: u64) {
        let sent = sent.min(self.n);
        if self.is_root() || sent <= self.high {
            return;
        }
        for i in self.high..sent {
            if !self.have[i as usize] {
                self.missing.insert(i, Miss { seen, nacked: None });
            }
        }
        self.high = sent;
    }

    fn repair(&mut self, now: u64, child: usize, index: u32) {
        let half = self.config.nack_interval / 2;
        if let Some(&at) = self.repaired.get(&(child, index)) {
            if now < at.saturating_add(half) {
                return;
            }
        }
        self.repaired.insert((child, index), now);
        self.stats.repairs += 1;
        self.queue.push_back(Out {
            to: To::Rank(child),
            msg: Msg::Data {
                index,
                repair: true,
            },
        });
    }

    /// After anything that may move this rank's value: report it, move the root's window,
    /// complete.
    fn progress(&mut self, now: u64) {
        if !matches!(self.state, State::Running | State::Complete) {
            return;
        }
        let value = self.subtree();
        let n = u64::from(self.n);
        match self.shape.parent {
            None => {
                if value > self.acked {
                    self.acked = value;
                    self.moved = now;
                }
                if value == n {
                    self.state = State::Complete;
                }
            }
            Some(p) => {
                if value > self.reported
                    && (value - self.reported >= u64::from(self.config.ack_every)
                        || value == n
                        || self.synced)
                {
                    self.report(p, value, false);
                }
                if value >= u64::from(self.high) {
                    self.synced = false;
                }
                if value == n && self.reported == n {
                    self.state = State::Complete;
                }
            }
        }
    }

    fn report(&mut self, parent: usize, value: u64, ping: bool) {
        self.reported = self.reported.max(value);
        self.stats.acks += 1;
        self.queue.push_back(Out {
            to: To::Rank(parent),
            msg: Msg::Ack { value, ping },
        });
    }

    /// A message (not data: [`Member::land`]) from `from`.
    pub fn handle(&mut self, now: u64, from: usize, msg: Msg) {
        if let State::Failed(e) = &self.state {
            if !matches!(msg, Msg::Abort { .. }) {
                let gone = e.gone().unwrap_or(self.shape.me);
                self.queue.push_back(Out {
                    to: To::Rank(from),
                    msg: Msg::Abort { gone },
                });
            }
            return;
        }
        if Some(from) == self.shape.parent {
            self.parent_heard = now;
        }
        let is_child = match self.children.get_mut(&from) {
            Some(c) => {
                c.heard = now;
                true
            }
            None => false,
        };
        match msg {
            Msg::Data { .. } => {}
            Msg::Nack { index, count } if is_child => self.on_nack(now, from, index, count),
            Msg::Ack { value, ping } if is_child => {
                let n = u64::from(self.n);
                if let Some(c) = self.children.get_mut(&from) {
                    c.ack = c.ack.max(value.min(n));
                }
                if ping {
                    let sent = if self.is_root() { self.next } else { self.high };
                    self.queue.push_back(Out {
                        to: To::Rank(from),
                        msg: Msg::Sync {
                            sent: u64::from(sent),
                            answer: true,
                        },
                    });
                }
                self.progress(now);
            }
            Msg::Sync { sent, answer } => {
                if from != self.shape.root && Some(from) != self.shape.parent {
                    return;
                }
                let sent = u32::try_from(sent.min(u64::from(self.n))).unwrap_or(self.n);
                // A sync says the gaps are real: NACK them now.
                self.learn_sent(now, sent, now.saturating_sub(self.config.nack_delay));
                if !answer && from == self.shape.root {
                    if let Some(p) = self.shape.parent {
                        let value = self.subtree();
                        self.report(p, value, false);
                        self.synced = true;
                        self.progress(now);
                    }
                }
            }
            Msg::Abort { gone } => {
                let from_above = from == self.shape.root || Some(from) == self.shape.parent;
                if !(is_child || from_above) {
                    return;
                }
                if matches!(self.state, State::Complete) && !is_child {
                    return;
                }
                self.fail_from(gone, from, is_child);
            }
            _ => {}
        }
    }

    /// An abort from `by`: pass it on (up the tree from a child; the root multicasts it).
    fn fail_from(&mut self, gone: usize, by: usize, from_child: bool) {
        if from_child {
            self.fail(McastError::Aborted { gone, by });
        } else {
            self.queue.clear();
            self.state = State::Failed(McastError::Aborted { gone, by });
        }
    }

    fn on_nack(&mut self, now: u64, child: usize, index: u32, count: u32) {
        if index >= self.n {
            return;
        }
        let end = index.saturating_add(count).min(self.n);
        if !self.is_root() {
            // The child knows these were sent.
            self.learn_sent(now, end, now.saturating_sub(self.config.nack_delay));
        }
        for i in index..end {
            if self.have[i as usize] {
                if self.is_root() && self.config.group_repair > 0 {
                    let asked = self.asks.entry(i).or_default();
                    asked.insert(child);
                    if asked.len() >= self.config.group_repair {
                        self.asks.remove(&i);
                        self.stats.group_repairs += 1;
                        self.queue.push_back(Out {
                            to: To::Group,
                            msg: Msg::Data {
                                index: i,
                                repair: true,
                            },
                        });
                        continue;
                    }
                }
                self.repair(now, child, i);
            } else {
                self.wanted.entry(i).or_default().insert(child);
            }
        }
    }

    /// The next message to send, if any: what is queued (aborts, reports, repairs), then
    /// NACKs of the gaps that are due, then (the root) a new segment within the window and
    /// the pacing.
    pub fn poll_transmit(&mut self, now: u64) -> Option<Out> {
        if let Some(o) = self.queue.pop_front() {
            return Some(o);
        }
        if !matches!(self.state, State::Running) {
            return None;
        }
        if let Some(p) = self.shape.parent {
            self.queue_nacks(now, p);
            if let Some(o) = self.queue.pop_front() {
                return Some(o);
            }
            return None;
        }
        let limit = self.acked.saturating_add(u64::from(self.config.window));
        if self.next < self.n && u64::from(self.next) < limit {
            let bytes = self.segment_range(self.next).len() as u64 + 64;
            if self.pacer.try_take(now, bytes) {
                let index = self.next;
                self.next += 1;
                self.stats.sent += 1;
                return Some(Out {
                    to: To::Group,
                    msg: Msg::Data {
                        index,
                        repair: false,
                    },
                });
            }
        }
        None
    }

    fn nack_due(&self, m: &Miss) -> u64 {
        match m.nacked {
            None => m.seen.saturating_add(self.config.nack_delay),
            Some(at) => at.saturating_add(self.config.nack_interval),
        }
    }

    fn queue_nacks(&mut self, now: u64, parent: usize) {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        let due: Vec<u32> = self
            .missing
            .iter()
            .filter(|(_, m)| self.nack_due(m) <= now)
            .map(|(&i, _)| i)
            .collect();
        for i in due {
            if let Some(m) = self.missing.get_mut(&i) {
                m.nacked = Some(now);
            }
            match runs.last_mut() {
                Some((start, count)) if *start + *count == i => *count += 1,
                _ => runs.push((i, 1)),
            }
        }
        for (index, count) in runs {
            self.stats.nacks += 1;
            self.queue.push_back(Out {
                to: To::Rank(parent),
                msg: Msg::Nack { index, count },
            });
        }
    }

    /// Runs the timers due at `now`: liveness, the root's sync, a waiting rank's ping.
    pub fn handle_timeout(&mut self, now: u64) {
        if !matches!(self.state, State::Running | State::Complete) {
            return;
        }
        let n = u64::from(self.n);
        let limit = self.config.liveness;
        if let Some((&c, child)) = self
            .children
            .iter()
            .find(|(_, c)| c.ack < n && now.saturating_sub(c.heard) >= limit)
        {
            let silent_ms = now.saturating_sub(child.heard) / 1_000_000;
            self.fail(McastError::Gone { rank: c, silent_ms });
            return;
        }
        if !matches!(self.state, State::Running) {
            return;
        }
        let every = self.config.sync_interval;
        match self.shape.parent {
            Some(p) => {
                if self.prefix < self.n {
                    let silent = now.saturating_sub(self.parent_heard);
                    if silent >= limit {
                        self.fail(McastError::Gone {
                            rank: p,
                            silent_ms: silent / 1_000_000,
                        });
                        return;
                    }
                    if silent >= every && now.saturating_sub(self.last_ping) >= every {
                        self.last_ping = now;
                        let value = self.subtree();
                        self.report(p, value, true);
                    }
                }
            }
            None => {
                let stalled = now.saturating_sub(self.moved) >= every;
                let since = self.last_sync.map_or(u64::MAX, |s| now.saturating_sub(s));
                if self.acked < n && stalled && since >= every {
                    self.last_sync = Some(now);
                    self.stats.syncs += 1;
                    self.queue.push_back(Out {
                        to: To::Group,
                        msg: Msg::Sync {
                            sent: u64::from(self.next),
                            answer: false,
                        },
                    });
                }
            }
        }
    }

    /// When [`Member::handle_timeout`] or [`Member::poll_transmit`] next has something to do
    /// (`None`: nothing until a message arrives).
    pub fn poll_timeout(&self, now: u64) -> Option<u64> {
        if !self.queue.is_empty() {
            return Some(now);
        }
        let n = u64::from(self.n);
        let mut at: Option<u64> = None;
        let mut take = |t: u64| at = Some(at.map_or(t, |a: u64| a.min(t)));
        match &self.state {
            State::Failed(_) => return None,
            State::Complete => {}
            State::Running => {
                let every = self.config.sync_interval;
                match self.shape.parent {
                    Some(_) => {
                        if let Some(t) = self.missing.values().map(|m| self.nack_due(m)).min() {
                            take(t);
                        }
                        if self.prefix < self.n {
                            let ping = self.parent_heard.max(self.last_ping).saturating_add(every);
                            take(ping);
                            take(self.parent_heard.saturating_add(self.config.liveness));
                        }
                    }
                    None => {
                        if self.acked < n {
                            let t = match self.last_sync {
                                Some(s) => s.max(self.moved).saturating_add(every),
                                None => self.moved.saturating_add(every),
                            };
                            take(t.max(self.moved.saturating_add(every)));
                        }
                        let limit = self.acked.saturating_add(u64::from(self.config.window));
                        if self.next < self.n && u64::from(self.next) < limit {
                            let bytes = self.segment_range(self.next).len() as u64 + 64;
                            take(self.pacer.ready_at(now, bytes));
                        }
                    }
                }
            }
        }
        for c in self.children.values() {
            if c.ack < n {
                take(c.heard.saturating_add(self.config.liveness));
            }
        }
        at
    }
}

#[cfg(test)]
mod tests {
    //! By hand; whole groups over lossy media in tests/mcast_protocol.rs.
    use super::*;

    const MS: u64 = 1_000_000;

    fn shape(me: usize, parent: Option<usize>, children: &[usize]) -> Shape {
        Shape {
            me,
            root: 0,
            parent,
            children: children.to_vec(),
        }
    }

    fn drain(m: &mut Member, now: u64) -> Vec<Out> {
        std::iter::from_fn(|| m.poll_transmit(now)).collect()
    }

    #[test]
    fn bad_shapes_are_errors() {
        let c = Config::default();
        assert!(Member::new(shape(0, Some(1), &[]), 10, 4, c, 0).is_err());
        assert!(Member::new(shape(1, None, &[]), 10, 4, c, 0).is_err());
        assert!(Member::new(shape(1, Some(1), &[]), 10, 4, c, 0).is_err());
        assert!(Member::new(shape(1, Some(0), &[2, 2]), 10, 4, c, 0).is_err());
        assert!(Member::new(shape(1, Some(0), &[0]), 10, 4, c, 0).is_err());
        assert!(Member::new(shape(0, None, &[]), 10, 0, c, 0).is_err());
        assert!(Member::new(shape(0, None, &[]), u64::MAX, 1, c, 0).is_err());
        let alone = Member::new(shape(0, None, &[]), 10, 4, c, 0).unwrap();
        assert_eq!(alone.state(), &State::Complete);
        assert_eq!(alone.segments(), 3);
        assert_eq!(alone.segment_range(2), 8..10);
    }

    #[test]
    fn the_root_sends_within_its_window_and_moves_it_on_reports() {
        let c = Config {
            window: 4,
            ..Config::default()
        };
        let mut root = Member::new(shape(0, None, &[1]), 100, 10, c, 0).unwrap();
        let sent = drain(&mut root, 0);
        assert_eq!(sent.len(), 4);
        assert!(sent.iter().all(|o| o.to == To::Group));
        root.handle(
            MS,
            1,
            Msg::Ack {
                value: 3,
                ping: false,
            },
        );
        assert_eq!(drain(&mut root, MS).len(), 3);
        root.handle(
            2 * MS,
            1,
            Msg::Ack {
                value: 10,
                ping: false,
            },
        );
        assert_eq!(root.state(), &State::Complete);
    }

    #[test]
    fn a_gap_is_nacked_to_the_parent_after_the_delay_and_repaired_by_it() {
        let c = Config::default();
        let mut r = Member::new(shape(2, Some(1), &[]), 50, 10, c, 0).unwrap();
        assert_eq!(r.land(0, 0, 0), Some(0..10));
        assert_eq!(r.land(0, 0, 3), Some(30..40));
        assert_eq!(r.land(0, 0, 3), None, "a duplicate");
        assert_eq!(r.land(0, 9, 4), None, "a stranger");
        assert!(
            drain(&mut r, 0).is_empty(),
            "reordering may still fill the gap"
        );
        let due = r.poll_timeout(0).unwrap();
        assert_eq!(due, c.nack_delay);
        r.handle_timeout(due);
        assert_eq!(
            drain(&mut r, due),
            [Out {
                to: To::Rank(1),
                msg: Msg::Nack { index: 1, count: 2 }
            }]
        );
        // The parent holds 1 but lacks 2: it repairs 1 now and 2 when it comes.
        let mut p = Member::new(shape(1, Some(0), &[2]), 50, 10, c, 0).unwrap();
        p.land(0, 0, 0);
        p.land(0, 0, 1);
        drain(&mut p, 0);
        p.handle(due, 2, Msg::Nack { index: 1, count: 2 });
        let out = drain(&mut p, due);
        assert!(out.contains(&Out {
            to: To::Rank(2),
            msg: Msg::Data {
                index: 1,
                repair: true
            }
        }));
        assert!(!out.iter().any(|o| o.msg
            == Msg::Data {
                index: 2,
                repair: true
            }));
        p.land(due, 0, 2);
        assert!(drain(&mut p, due).contains(&Out {
            to: To::Rank(2),
            msg: Msg::Data {
                index: 2,
                repair: true
            }
        }));
    }

    #[test]
    fn a_silent_child_is_gone_and_the_root_aborts_the_group() {
        let c = Config {
            liveness: 100 * MS,
            ..Config::default()
        };
        let mut root = Member::new(shape(0, None, &[1]), 10, 10, c, 0).unwrap();
        drain(&mut root, 0);
        let mut now = 0;
        while matches!(root.state(), State::Running) {
            now = root.poll_timeout(now).unwrap();
            root.handle_timeout(now);
            drain(&mut root, now);
        }
        assert_eq!(now, 100 * MS);
        assert_eq!(
            root.state(),
            &State::Failed(McastError::Gone {
                rank: 1,
                silent_ms: 100
            })
        );
    }
}
