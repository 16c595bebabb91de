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
    /// How many times it was NACKed.
    asked: u32,
    /// A child asked for it: NACK it in the next round, whatever the backoff says.
    urgent: bool,
}

/// Whom a repair is for: one child, or the whole group (the root's re-multicast).
const GROUP: usize = usize::MAX;

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
    /// Repairs asked for and not sent: a copy was queued, or had left only lately.
    pub suppressed: u64,
    /// The root's pace at the end, in thousandths below [`Config::rate`] (the loss it saw).
    pub spare: u32,
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
    /// When the last copy of each (child or [`GROUP`], segment) repair left this rank.
    repaired: BTreeMap<(usize, u32), u64>,
    /// Repairs waiting for the pace, in the order asked for: (child or [`GROUP`], segment),
    /// each at most once.
    repairs: VecDeque<(usize, u32)>,
    queued: BTreeSet<(usize, u32)>,
    /// Control messages (reports, NACKs, syncs, aborts): sent before repairs and data.
    queue: VecDeque<Out>,
    /// No NACK round before this (the last one asked for [`Config::nack_max`] segments).
    nack_round: u64,
    /// The last value reported to the parent.
    reported: u64,
    last_ping: u64,
    /// A group sync asked for reports: report every growth until the subtree caught up.
    synced: bool,
    // The root's side.
    next: u32,
    acked: u64,
    /// When the root's window last moved or a new segment left: it syncs only when neither
    /// happened for a sync interval (stalled), so sparse reports do not make it sync.
    moved: u64,
    last_sync: Option<u64>,
    /// Syncs since every segment left (the first right behind the last one).
    tail_syncs: u32,
    asks: BTreeMap<u32, BTreeSet<usize>>,
    /// The root that saw loss counts its lateness as the scheduler's (and catches it up,
    /// [`Config::loss_catch_up`]) from this time on: [`Config::nack_min`] after the last NACK
    /// from a child or repair that left it (one in flight until then).
    quiet_from: u64,
    /// What this rank multicasts and repairs leaves through this bucket: the root's new
    /// segments and its repairs share it (one uplink, and the room its pace leaves on the
    /// links beyond is for every parent's repairs), at the rate less the spare; its depth
    /// ([`Member::depth`]) the path's burst while the root has seen no loss.
    pacer: Pacer,
    /// The loss estimate (`model::multicast::PACE`): thousandths of `config.rate` the root
    /// leaves spare, segments NACKed in this block, where the block began.
    spare: u32,
    missed: u64,
    block_from: u32,
    /// How long this rank's repairs take (its NACK retries wait that).
    repair_time: crate::model::multicast::RepairTime,
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
            repairs: VecDeque::new(),
            queued: BTreeSet::new(),
            queue: VecDeque::new(),
            nack_round: now,
            reported: 0,
            last_ping: now,
            synced: false,
            next: 0,
            acked: 0,
            moved: now,
            last_sync: None,
            tail_syncs: 0,
            asks: BTreeMap::new(),
            quiet_from: now,
            pacer: {
                let spare = config.spare.min(crate::model::multicast::PACE.spare_max);
                let p = Pacer::new(
                    Self::paced(config.rate, spare, is_root),
                    Self::depth(&config, segment, is_root, spare),
                    now,
                );
                match config.tokens {
                    Some(t) if is_root => p.with_tokens(now, t),
                    _ => p,
                }
            },
            spare: config.spare.min(crate::model::multicast::PACE.spare_max),
            missed: 0,
            block_from: 0,
            repair_time: Default::default(),
            stats: Stats::default(),
            shape,
        };
        m.pace_catch_up(now);
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
        Stats {
            spare: self.spare,
            ..self.stats
        }
    }

    /// What this rank learned of the loss (thousandths of the rate a root leaves spare):
    /// [`Config::spare`] of the next broadcast it roots.
    pub fn spare(&self) -> u32 {
        self.spare
    }

    /// The bucket's depth: the path's burst ([`Config::burst`]) for a root that has seen no
    /// loss, else [`LOSS_BURST_SEGMENTS`](super::LOSS_BURST_SEGMENTS) segments at most — where
    /// frames are lost the path's queues are in use (the spare's room holds repairs and
    /// duplicates there), and a burst of the path's size overflowed them (measured on the
    /// 16-machine lab with 1 % loss, docs/multicast.md "The path's burst"). A rank's repairs
    /// (there is loss) burst as little.
    fn depth(config: &Config, segment: u32, is_root: bool, spare: u32) -> u64 {
        if is_root && spare == 0 {
            config.burst
        } else {
            let counted = u64::from(segment) + super::DATA_HEADER;
            config
                .burst
                .min(super::LOSS_BURST_SEGMENTS.saturating_mul(counted))
        }
    }

    /// Whether this root paces as one that saw loss: a spare above 0 here, or loss in an
    /// earlier broadcast at this rank ([`Config::seen_loss`]).
    fn saw_loss(&self) -> bool {
        self.config.seen_loss || self.spare > 0
    }

    /// What a late root may send beyond its bucket at `now`: one that has seen no loss
    /// [`Config::catch_up`]; one that saw loss [`Config::loss_catch_up`] beyond the loss
    /// bucket ([`LOSS_BURST_SEGMENTS`](super::LOSS_BURST_SEGMENTS); with a deeper bucket, as
    /// a sticky loss with a spare back at 0 has, less by as much: never more at once than
    /// that), but nothing while a repair of its is pending or in flight (queued, or a NACK
    /// from a child or a repair that left less than [`Config::nack_min`] ago: its lateness
    /// may then be the network's, and the paths to the children that asked are in use);
    /// other ranks nothing.
    fn catch_up_allowance(&self, now: u64) -> u64 {
        if !self.is_root() {
            0
        } else if !self.saw_loss() {
            self.config.catch_up
        } else if self.repairs.is_empty() && now >= self.quiet_from {
            let loss_bucket = Self::depth(&self.config, self.segment, false, 0);
            loss_bucket
                .saturating_add(self.config.loss_catch_up)
                .saturating_sub(self.pacer.burst())
        } else {
            0
        }
    }

    /// Gives the root's bucket the catch-up allowance of `now`. Allowed again after a
    /// repair, the root catches up only the lateness since it has been quiet
    /// ([`Member::quiet_from`]); the time before stays lost.
    fn pace_catch_up(&mut self, now: u64) {
        let want = self.catch_up_allowance(now);
        let have = self.pacer.catch_up();
        if want > have {
            let from = self.quiet_from.min(now);
            self.pacer.set_catch_up(from, want);
        } else if want < have {
            self.pacer.set_catch_up(now, want);
        }
    }

    /// The root's window is full: nothing new may leave until a report moves it.
    fn window_full(&self) -> bool {
        self.next < self.n
            && u64::from(self.next) >= self.acked.saturating_add(u64::from(self.config.window))
    }

    /// The uplink's bucket: what it holds when the next broadcast this rank roots starts
    /// ([`Pacer::level`] then) is that one's [`Config::tokens`].
    pub fn uplink(&self) -> &Pacer {
        &self.pacer
    }

    /// The root's pace: `rate` less `spare` thousandths (another rank's repairs: `rate`).
    fn paced(rate: Option<u64>, spare: u32, is_root: bool) -> Option<u64> {
        let pace = crate::model::multicast::PACE;
        rate.map(|r| if is_root { pace.paced(r, spare) } else { r })
    }

    /// Counts `missed` segments NACKed (the root: by its children; another rank: by itself)
    /// and, once a block of segments was sent (the root) or learned sent, moves the spare
    /// and the root's pace.
    fn estimate(&mut self, now: u64, missed: u64) {
        self.missed = self.missed.saturating_add(missed);
        let pace = crate::model::multicast::PACE;
        let (done, per) = if self.is_root() {
            (self.next, self.children.len() as u64)
        } else {
            (self.high, 1)
        };
        let block = done.saturating_sub(self.block_from);
        if block < pace.block.max(1) || per == 0 {
            return;
        }
        self.spare = pace.next_spare(self.spare, self.missed, u64::from(block), per);
        self.missed = 0;
        self.block_from = done;
        if self.is_root() {
            let rate = Self::paced(self.config.rate, self.spare, true);
            self.pacer.set_rate(now, rate);
            let depth = Self::depth(&self.config, self.segment, true, self.spare);
            self.pacer.set_burst(now, depth);
            self.pace_catch_up(now);
        }
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
            self.drop_repairs();
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

    /// Whether [`Member::land`] would take segment `index` from `from` now (not held yet, a
    /// sender it takes data from, this rank receiving and not failed): a receiver may then
    /// copy the bytes into the segment's place before it knows them good, since nothing
    /// counts them until `land` (a later good copy overwrites a bad one).
    pub fn would_land(&self, from: usize, index: u32) -> bool {
        !matches!(self.state, State::Failed(_))
            && index < self.n
            && !self.is_root()
            && (from == self.shape.root || Some(from) == self.shape.parent)
            && !self.have[index as usize]
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
        if let Some(Miss {
            nacked: Some(at),
            asked: 1,
            ..
        }) = self.missing.remove(&index)
        {
            // Asked for once: how long a repair takes here.
            self.repair_time.sample(now.saturating_sub(at));
        }
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
    fn learn_sent(&mut self, now: u64, sent: u32, seen: u64) {
        let sent = sent.min(self.n);
        if self.is_root() || sent <= self.high {
            return;
        }
        for i in self.high..sent {
            if !self.have[i as usize] {
                self.missing.insert(
                    i,
                    Miss {
                        seen,
                        nacked: None,
                        asked: 0,
                        urgent: false,
                    },
                );
            }
        }
        self.high = sent;
        self.estimate(now, 0);
    }

    /// Queues a repair of segment `index` to `to` (a child, or [`GROUP`]) unless a copy is
    /// queued already or its last copy left less than half a NACK interval ago (a child's
    /// NACK may have crossed it: the child asks again, later and later, if it was lost).
    fn repair(&mut self, now: u64, to: usize, index: u32) {
        if self.recently_repaired(now, to, index) {
            self.stats.suppressed += 1;
            return;
        }
        self.queued.insert((to, index));
        self.repairs.push_back((to, index));
    }

    /// Whether a copy of segment `index` to `to` is queued, or left less than half a NACK
    /// interval before `now`.
    fn recently_repaired(&self, now: u64, to: usize, index: u32) -> bool {
        let hold = self.hold();
        self.queued.contains(&(to, index))
            || self
                .repaired
                .get(&(to, index))
                .is_some_and(|&left| now < left.saturating_add(hold))
    }

    fn drop_repairs(&mut self) {
        self.repairs.clear();
        self.queued.clear();
    }

    /// The next queued repair that is still wanted, if the pace lets it leave now; the
    /// time it left is what holds its next copy back.
    fn next_repair(&mut self, now: u64) -> Option<Out> {
        while let Some(&(to, index)) = self.repairs.front() {
            // A child that reported holding it (its whole subtree does) needs it no more.
            let held = to != GROUP
                && self
                    .children
                    .get(&to)
                    .is_some_and(|c| c.ack > u64::from(index));
            if held {
                self.repairs.pop_front();
                self.queued.remove(&(to, index));
                continue;
            }
            let bytes = self.segment_range(index).len() as u64 + super::DATA_HEADER;
            if !self.pacer.try_take(now, bytes) {
                return None;
            }
            self.repairs.pop_front();
            self.queued.remove(&(to, index));
            self.repaired.insert((to, index), now);
            if self.is_root() {
                // In flight: no catch-up for the time a repair takes at least.
                self.quiet_from = self
                    .quiet_from
                    .max(now.saturating_add(self.config.nack_min));
            }
            let to = if to == GROUP {
                self.stats.group_repairs += 1;
                To::Group
            } else {
                self.stats.repairs += 1;
                To::Rank(to)
            };
            return Some(Out {
                to,
                msg: Msg::Data {
                    index,
                    repair: true,
                },
            });
        }
        None
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
                    if self.window_full() {
                        // Since its last round the root could send nothing new (no credit):
                        // that time was idle, not late, and is not caught up.
                        self.pacer.idle(now);
                    }
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
                    if value == n {
                        // The final report: no later one replaces it, and its loss holds the
                        // whole broadcast until the root's next tail sync; a second copy right
                        // behind it.
                        self.report(p, value, false);
                    }
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
            self.drop_repairs();
            self.state = State::Failed(McastError::Aborted { gone, by });
        }
    }

    fn on_nack(&mut self, now: u64, child: usize, index: u32, count: u32) {
        if index >= self.n {
            return;
        }
        // A NACK names at most `nack_max` segments: a longer one is served that far.
        let end = index
            .saturating_add(count.min(self.config.nack_max.max(1)))
            .min(self.n);
        if self.is_root() {
            // A child lost something: no catch-up while its repair is due or in flight.
            self.quiet_from = self
                .quiet_from
                .max(now.saturating_add(self.config.nack_min));
            self.pace_catch_up(now);
            self.estimate(now, u64::from(end - index));
        } else {
            // The child knows these were sent.
            self.learn_sent(now, end, now.saturating_sub(self.config.nack_delay));
        }
        for i in index..end {
            if !self.have[i as usize] {
                // Not held here: repaired when it lands. This rank NACKs it itself, and now
                // if its own last NACK of it is as old as a repair's hold: a child that
                // waited out its backoff does not wait out this rank's too.
                self.wanted.entry(i).or_default().insert(child);
                let hold = self.hold();
                if let Some(m) = self.missing.get_mut(&i) {
                    if m.nacked.is_some_and(|at| now >= at.saturating_add(hold)) {
                        m.urgent = true;
                    }
                }
                continue;
            }
            if self.is_root() && self.config.group_repair > 0 {
                if self.recently_repaired(now, GROUP, i) {
                    // A copy to the whole group is queued or just left.
                    self.stats.suppressed += 1;
                    continue;
                }
                let asked = self.asks.entry(i).or_default();
                asked.insert(child);
                if asked.len() >= self.config.group_repair {
                    self.asks.remove(&i);
                    self.repair(now, GROUP, i);
                    continue;
                }
            }
            self.repair(now, child, i);
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
        }
        if self.is_root() {
            self.pace_catch_up(now);
        }
        if !self.repairs.is_empty() {
            // Repairs first; new segments wait for them (one pace, one uplink).
            return self.next_repair(now);
        }
        if !self.is_root() {
            return None;
        }
        let limit = self.acked.saturating_add(u64::from(self.config.window));
        if self.next < self.n && u64::from(self.next) < limit {
            let bytes = self.segment_range(self.next).len() as u64 + super::DATA_HEADER;
            if self.pacer.try_take(now, bytes) {
                let index = self.next;
                self.next += 1;
                self.moved = now;
                self.stats.sent += 1;
                self.estimate(now, 0);
                if self.next == self.n {
                    // The last segment: a sync right behind it (the same path, in order)
                    // tells every rank what was sent, so a lost tail, which no later
                    // segment reveals, is NACKed at once, not a sync interval later.
                    self.sync(now);
                }
                return Some(Out {
                    to: To::Group,
                    msg: Msg::Data {
                        index,
                        repair: false,
                    },
                });
            }
        } else {
            // Nothing new may leave (all sent, or no credit): not late, idle.
            self.pacer.idle(now);
        }
        None
    }

    fn nack_due(&self, m: &Miss) -> u64 {
        if m.urgent {
            return 0;
        }
        match m.nacked {
            None => m.seen.saturating_add(self.config.nack_delay),
            Some(at) => at.saturating_add(crate::model::multicast::backoff(
                self.retry_wait(),
                m.asked,
                self.config.nack_backoff,
            )),
        }
    }

    /// The first retry's wait (`model::multicast::Repair::retry_wait` with this config).
    fn retry_wait(&self) -> u64 {
        let r = crate::model::multicast::Repair {
            nack_wait_ns: self.config.nack_interval,
            nack_wait_min_ns: self.config.nack_min,
            ..crate::model::multicast::REPAIR
        };
        r.retry_wait(&self.repair_time)
    }

    /// How long after a repair's copy left this rank it sends the same one no other.
    fn hold(&self) -> u64 {
        self.config.nack_min.min(self.config.nack_interval) / 2
    }

    /// When the next NACK round is due (`None`: nothing missing).
    fn next_nack(&self) -> Option<u64> {
        let due = self.missing.values().map(|m| self.nack_due(m)).min()?;
        Some(due.max(self.nack_round))
    }

    /// How long the parent takes to send `nack_max` repairs at the pace (the NACK delay
    /// unpaced): the least time between two NACK rounds that asked for that many.
    fn nack_round_gap(&self) -> u64 {
        let max = u128::from(self.config.nack_max.max(1));
        match self.config.rate {
            Some(rate) if rate > 0 => {
                let bytes = max * u128::from(u64::from(self.segment) + super::DATA_HEADER);
                u64::try_from(bytes * 1_000_000_000 / u128::from(rate)).unwrap_or(u64::MAX)
            }
            _ => self.config.nack_delay,
        }
    }

    /// NACKs to `parent` the gaps that are due, at most [`Config::nack_max`] segments (the
    /// lowest first); the rest in a later round.
    fn queue_nacks(&mut self, now: u64, parent: usize) {
        if now < self.nack_round {
            return;
        }
        let max = self.config.nack_max.max(1) as usize;
        let mut due: Vec<u32> = self
            .missing
            .iter()
            .filter(|(_, m)| self.nack_due(m) <= now)
            .map(|(&i, _)| i)
            .take(max + 1)
            .collect();
        if due.len() > max {
            due.truncate(max);
            self.nack_round = now.saturating_add(self.nack_round_gap());
        }
        if !due.is_empty() {
            self.estimate(now, due.len() as u64);
        }
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for i in due {
            if let Some(m) = self.missing.get_mut(&i) {
                m.nacked = Some(now);
                m.asked = m.asked.saturating_add(1);
                m.urgent = false;
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
                    let every = self.ping_every();
                    if silent >= every && now.saturating_sub(self.last_ping) >= every {
                        self.last_ping = now;
                        let value = self.subtree();
                        self.report(p, value, true);
                    }
                }
            }
            None => {
                let since = self.last_sync.map_or(u64::MAX, |s| now.saturating_sub(s));
                let due = match self.tail_wait() {
                    Some(wait) => since >= wait,
                    None => now.saturating_sub(self.moved) >= every && since >= every,
                };
                if self.acked < n && due {
                    self.sync(now);
                }
            }
        }
    }

    /// How long a waiting rank lets its parent be silent before it pings it: a sync
    /// interval while it waits for repairs (the answer also says what the parent holds),
    /// else an eighth of the liveness limit (only to learn that the parent is alive: a
    /// receiver that misses nothing hears no more from its parent than the answers).
    fn ping_every(&self) -> u64 {
        let every = self.config.sync_interval;
        if self.missing.is_empty() {
            every.max(self.config.liveness / 8)
        } else {
            every
        }
    }

    /// Once every segment left (the root): how long after its last sync the root syncs
    /// again while some rank lacks something — [`Config::nack_min`], then twice that … up to
    /// a sync interval. A lost final report (or a lost tail's NACK) is thus asked for again
    /// a few ms after the last segment, not a whole sync interval later; the reports it
    /// asks for are one per rank.
    fn tail_wait(&self) -> Option<u64> {
        if self.next < self.n || self.last_sync.is_none() {
            return None;
        }
        let every = self.config.sync_interval;
        let first = self.config.nack_min.min(every).max(1);
        let doublings = self.tail_syncs.saturating_sub(1).min(16);
        Some(first.saturating_mul(1 << doublings).min(every))
    }

    /// The root tells the group how many segments it sent.
    fn sync(&mut self, now: u64) {
        if self.next == self.n {
            self.tail_syncs = self.tail_syncs.saturating_add(1);
        }
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
                if let Some(&(_, index)) = self.repairs.front() {
                    let bytes = self.segment_range(index).len() as u64 + super::DATA_HEADER;
                    take(self.pacer.ready_at(now, bytes));
                }
                let every = self.config.sync_interval;
                match self.shape.parent {
                    Some(_) => {
                        if let Some(t) = self.next_nack() {
                            take(t);
                        }
                        if self.prefix < self.n {
                            let ping = self
                                .parent_heard
                                .max(self.last_ping)
                                .saturating_add(self.ping_every());
                            take(ping);
                            take(self.parent_heard.saturating_add(self.config.liveness));
                        }
                    }
                    None => {
                        if self.acked < n {
                            let t = match (self.last_sync, self.tail_wait()) {
                                (Some(s), Some(wait)) => s.saturating_add(wait),
                                (Some(s), None) => s.max(self.moved).saturating_add(every),
                                (None, _) => self.moved.saturating_add(every),
                            };
                            take(t);
                        }
                        let limit = self.acked.saturating_add(u64::from(self.config.window));
                        if self.next < self.n && u64::from(self.next) < limit {
                            let bytes =
                                self.segment_range(self.next).len() as u64 + super::DATA_HEADER;
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

    fn repair_of(to: To, index: u32) -> Out {
        Out {
            to,
            msg: Msg::Data {
                index,
                repair: true,
            },
        }
    }

    fn nacks(out: &[Out]) -> Vec<(u32, u32)> {
        out.iter()
            .filter_map(|o| match o.msg {
                Msg::Nack { index, count } => Some((index, count)),
                _ => None,
            })
            .collect()
    }

    /// An inner rank 1 (parent 0, child 2) holding segments `0..held` of 100 ten-byte ones.
    fn parent_holding(c: Config, held: u32) -> Member {
        let mut p = Member::new(shape(1, Some(0), &[2]), 1000, 10, c, 0).unwrap();
        for i in 0..held {
            p.land(0, 0, i);
        }
        drain(&mut p, 0);
        p
    }

    #[test]
    fn a_repair_is_not_sent_again_while_queued_nor_soon_after_it_left() {
        // 42 counted bytes per repair at 42 000 B/s: one repair per ms, a bucket of one.
        let c = Config {
            rate: Some(42_000),
            burst: 42,
            ..Config::default()
        };
        let mut p = parent_holding(c, 100);
        p.pacer = Pacer::new(c.rate, c.burst, 0);
        p.pacer.try_take(0, 42); // the bucket is empty: the next repair leaves at 1 ms
        p.handle(0, 2, Msg::Nack { index: 5, count: 2 });
        assert!(drain(&mut p, 0).is_empty(), "the pace holds them");
        // Asked again while queued: nothing more is queued.
        p.handle(MS / 2, 2, Msg::Nack { index: 5, count: 2 });
        assert_eq!(p.poll_timeout(MS / 2), Some(MS));
        assert_eq!(drain(&mut p, MS), [repair_of(To::Rank(2), 5)]);
        assert_eq!(drain(&mut p, 2 * MS), [repair_of(To::Rank(2), 6)]);
        assert!(drain(&mut p, 10 * MS).is_empty());
        assert_eq!(p.stats().repairs, 2);
        assert_eq!(p.stats().suppressed, 2);
        // Segment 5 left at 1 ms: asked again before 1 ms + half an interval, not repaired.
        let hold = c.nack_min / 2;
        p.handle(MS + hold - 1, 2, Msg::Nack { index: 5, count: 1 });
        assert!(drain(&mut p, MS + hold - 1).is_empty());
        p.handle(MS + hold, 2, Msg::Nack { index: 5, count: 1 });
        assert_eq!(drain(&mut p, MS + hold), [repair_of(To::Rank(2), 5)]);
    }

    #[test]
    fn repairs_leave_at_the_pace_and_not_for_a_child_that_reported_them() {
        let c = Config {
            rate: Some(42_000),
            burst: 42,
            ..Config::default()
        };
        let mut p = parent_holding(c, 100);
        p.handle(0, 2, Msg::Nack { index: 0, count: 4 });
        let mut left = Vec::new();
        let mut now = 0;
        while left.len() < 2 {
            for o in drain(&mut p, now) {
                left.push((now, o));
            }
            now = p.poll_timeout(now).unwrap().max(now + 1);
        }
        assert_eq!(left[0], (0, repair_of(To::Rank(2), 0)));
        assert_eq!(left[1].1, repair_of(To::Rank(2), 1));
        assert!(left[1].0 >= MS, "one repair per ms: {left:?}");
        // The child now reports 0..3: segment 2 is not sent, 3 is.
        p.handle(
            left[1].0,
            2,
            Msg::Ack {
                value: 3,
                ping: false,
            },
        );
        let later = left[1].0 + 10 * MS;
        assert_eq!(drain(&mut p, later), [repair_of(To::Rank(2), 3)]);
    }

    #[test]
    fn nack_retries_back_off_to_32_intervals() {
        let c = Config::default();
        let mut r = Member::new(shape(2, Some(1), &[]), 1000, 10, c, 0).unwrap();
        r.land(0, 0, 0);
        r.land(0, 0, 2); // 1 is missing
        let mut at = Vec::new();
        let mut now = 0;
        while at.len() < 9 {
            now = r.poll_timeout(now).unwrap();
            r.handle_timeout(now);
            let out = drain(&mut r, now);
            if !nacks(&out).is_empty() {
                assert_eq!(nacks(&out), [(1, 1)]);
                at.push(now);
            }
            // The parent answers pings (a sync every 20 ms): it is alive, its repairs lost.
            r.handle(
                now,
                1,
                Msg::Sync {
                    sent: 3,
                    answer: true,
                },
            );
        }
        let waits: Vec<u64> = at
            .windows(2)
            .map(|w| (w[1] - w[0]) / c.nack_interval)
            .collect();
        assert_eq!(at[0], c.nack_delay);
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 32, 32]);
        // A repair ends it.
        r.land(now, 1, 1);
        assert!(r.missing.is_empty());
    }

    #[test]
    fn a_nack_names_at_most_nack_max_segments_and_the_rest_wait_for_the_pace() {
        let c = Config {
            nack_max: 8,
            rate: Some(42_000), // one 10-byte segment per ms
            ..Config::default()
        };
        let mut r = Member::new(shape(2, Some(1), &[]), 1000, 10, c, 0).unwrap();
        r.land(0, 0, 0);
        r.land(0, 0, 30); // 1..30 missing: 29 segments
        let first = drain(&mut r, c.nack_delay);
        assert_eq!(nacks(&first), [(1, 8)]);
        // The parent needs 8 ms for those: the next round not sooner.
        assert_eq!(r.poll_timeout(c.nack_delay), Some(c.nack_delay + 8 * MS));
        assert!(nacks(&drain(&mut r, c.nack_delay + 8 * MS - 1)).is_empty());
        assert_eq!(nacks(&drain(&mut r, c.nack_delay + 8 * MS)), [(9, 8)]);
        // A parent asked for a longer run serves `nack_max` of it.
        let mut p = parent_holding(c, 100);
        p.pacer = Pacer::new(None, 1, 0);
        p.handle(
            0,
            2,
            Msg::Nack {
                index: 0,
                count: 50,
            },
        );
        assert_eq!(drain(&mut p, 0).len(), 8);
    }

    #[test]
    fn a_parent_repairs_only_what_it_holds() {
        let c = Config::default();
        let mut p = parent_holding(c, 3); // holds 0..3
        p.handle(3 * MS, 2, Msg::Nack { index: 1, count: 4 });
        let out = drain(&mut p, 3 * MS);
        let repairs: Vec<u32> = out
            .iter()
            .filter_map(|o| match o.msg {
                Msg::Data { index, .. } => Some(index),
                _ => None,
            })
            .collect();
        assert_eq!(repairs, [1, 2], "3 and 4 are not held here: {out:?}");
        // It NACKs 3 and 4 itself (the child's NACK says they were sent) ...
        assert_eq!(nacks(&out), [(3, 2)]);
        // ... and repairs each when it lands, once.
        assert_eq!(p.land(4 * MS, 0, 4), Some(40..50));
        assert_eq!(drain(&mut p, 4 * MS), [repair_of(To::Rank(2), 4)]);
        assert_eq!(p.land(4 * MS, 0, 4), None);
        assert!(drain(&mut p, 4 * MS).is_empty());
    }

    #[test]
    fn the_roots_group_repair_is_not_repeated_while_its_copy_is_fresh() {
        let c = Config::default();
        let mut root = Member::new(shape(0, None, &[1, 2]), 1000, 10, c, 0).unwrap();
        drain(&mut root, 0);
        root.handle(MS, 1, Msg::Nack { index: 7, count: 1 });
        root.handle(MS, 2, Msg::Nack { index: 7, count: 1 });
        let out = drain(&mut root, MS);
        assert_eq!(out, [repair_of(To::Rank(1), 7), repair_of(To::Group, 7)]);
        // Both ask again at once (their NACKs crossed the copy): nothing.
        root.handle(2 * MS, 1, Msg::Nack { index: 7, count: 1 });
        root.handle(2 * MS, 2, Msg::Nack { index: 7, count: 1 });
        assert!(drain(&mut root, 2 * MS).is_empty());
        // Half an interval after it left, asked by both again: one more group copy.
        let later = MS + c.nack_min / 2;
        root.handle(later, 1, Msg::Nack { index: 7, count: 1 });
        root.handle(later, 2, Msg::Nack { index: 7, count: 1 });
        assert_eq!(
            drain(&mut root, later),
            [repair_of(To::Rank(1), 7), repair_of(To::Group, 7)]
        );
    }

    #[test]
    fn the_root_syncs_right_behind_its_last_segment_and_a_lost_tail_is_nacked_at_once() {
        let c = Config::default();
        let mut root = Member::new(shape(0, None, &[1]), 30, 10, c, 0).unwrap();
        let out = drain(&mut root, 0);
        let last = |o: &Out| o.msg;
        assert_eq!(
            out.iter().map(last).collect::<Vec<_>>(),
            [
                Msg::Data {
                    index: 0,
                    repair: false
                },
                Msg::Data {
                    index: 1,
                    repair: false
                },
                Msg::Data {
                    index: 2,
                    repair: false
                },
                Msg::Sync {
                    sent: 3,
                    answer: false
                },
            ]
        );
        // A receiver that lost segment 2 hears the sync: it NACKs 2 now.
        let mut r = Member::new(shape(1, Some(0), &[]), 30, 10, c, 0).unwrap();
        r.land(MS, 0, 0);
        r.land(MS, 0, 1);
        drain(&mut r, MS);
        r.handle(
            MS,
            0,
            Msg::Sync {
                sent: 3,
                answer: false,
            },
        );
        assert_eq!(nacks(&drain(&mut r, c.nack_delay + MS)), [(2, 1)]);
    }

    #[test]
    fn the_roots_pace_leaves_room_for_the_repairs_its_children_ask_for() {
        let pace = crate::model::multicast::PACE;
        // 1000 segments of 10 bytes; 42 counted bytes each at 42 000 B/s: one per ms.
        let c = Config {
            window: 1000,
            rate: Some(42_000),
            burst: 42,
            ..Config::default()
        };
        let mut root = Member::new(shape(0, None, &[1, 2]), 10_000, 10, c, 0).unwrap();
        let mut now = 0;
        let send = |root: &mut Member, segments: u32, now: &mut u64| {
            let mut sent = 0;
            while sent < segments {
                for o in drain(root, *now) {
                    if matches!(o.msg, Msg::Data { repair: false, .. }) {
                        sent += 1;
                    }
                }
                *now = root.poll_timeout(*now).unwrap().max(*now + 1);
            }
        };
        send(&mut root, pace.block, &mut now);
        assert_eq!(root.spare(), 0, "no NACK, no spare");
        // Each child misses 5 % of the next block: the pace drops by 2 × 5 %.
        let block = pace.block;
        for i in 0..block / 20 {
            root.handle(now, 1, Msg::Nack { index: i, count: 1 });
            root.handle(now, 2, Msg::Nack { index: i, count: 1 });
        }
        drain(&mut root, now);
        send(&mut root, block, &mut now);
        let spare = root.spare();
        assert!((90..=110).contains(&spare), "{spare}");
        assert_eq!(
            root.pacer.rate(),
            Some(42_000 / 1000 * (1000 - u64::from(spare)))
        );
        // A clean block: the spare falls back by an eighth of the way, not at once.
        send(&mut root, block, &mut now);
        assert_eq!(root.spare(), spare - spare.div_ceil(8));
        // Never below 75 % of the rate however much is lost.
        for i in 0..block {
            root.handle(now, 1, Msg::Nack { index: i, count: 1 });
        }
        send(&mut root, block, &mut now);
        assert_eq!(root.spare(), pace.spare_max);
        assert_eq!(root.pacer.rate(), Some(42_000 * 3 / 4));
        // The next broadcast this rank roots starts where this one ended.
        let c2 = Config {
            spare: root.spare(),
            ..c
        };
        let next = Member::new(shape(0, None, &[1, 2]), 10_000, 10, c2, now).unwrap();
        assert_eq!(next.pacer.rate(), Some(42_000 * 3 / 4));
        // A root that saw little loss still leaves `spare_min`; none: the whole rate.
        for (learned, kept) in [(10, pace.spare_min), (0, 0), (120, 120)] {
            let c3 = Config {
                spare: learned,
                ..c
            };
            let next = Member::new(shape(0, None, &[1, 2]), 10_000, 10, c3, now).unwrap();
            assert_eq!(
                next.pacer.rate(),
                Some(42_000 / 1000 * (1000 - u64::from(kept))),
                "learned {learned}"
            );
        }
    }

    #[test]
    fn a_root_bursts_the_paths_bucket_until_it_sees_loss_and_starts_with_its_tokens() {
        // 1000 segments of 10 bytes, 42 counted bytes each at 42 000 B/s: one per ms; the
        // path's bucket 20 segments (more than LOSS_BURST_SEGMENTS).
        let c = Config {
            window: 1000,
            rate: Some(42_000),
            burst: 20 * 42,
            ..Config::default()
        };
        let at_once = |m: &mut Member, now: u64| {
            drain(m, now)
                .iter()
                .filter(|o| matches!(o.msg, Msg::Data { .. }))
                .count()
        };
        let mut root = Member::new(shape(0, None, &[1, 2]), 10_000, 10, c, 0).unwrap();
        assert_eq!(
            at_once(&mut root, 0),
            20,
            "clean: the path's bucket at once"
        );
        // Given what the bucket gathered since the last broadcast: that.
        let part = Config {
            tokens: Some(3 * 42),
            ..c
        };
        let mut root = Member::new(shape(0, None, &[1, 2]), 10_000, 10, part, 0).unwrap();
        assert_eq!(at_once(&mut root, 0), 3);
        assert_eq!(root.uplink().level(0), 0);
        assert_eq!(root.uplink().level(5 * MS), 5 * 42);
        // A root that learned of loss: 16 segments at most, from the start or once it sees it.
        let lossy = Config { spare: 50, ..c };
        let mut root = Member::new(shape(0, None, &[1, 2]), 10_000, 10, lossy, 0).unwrap();
        assert_eq!(at_once(&mut root, 0), 16);
        let mut root = Member::new(shape(0, None, &[1, 2]), 10_000, 10, c, 0).unwrap();
        let mut now = at_once(&mut root, 0) as u64 * MS;
        for i in 0..10 {
            root.handle(now, 1, Msg::Nack { index: i, count: 1 });
        }
        // Through the repairs and a block of new segments: the spare rises.
        while root.spare() == 0 {
            drain(&mut root, now);
            now = root.poll_timeout(now).unwrap().max(now + 1);
        }
        assert_eq!(root.uplink().burst(), 16 * 42);
        assert_eq!(at_once(&mut root, now + 1000 * MS), 16);
        // A rank's repairs burst as little.
        let r = Member::new(shape(1, Some(0), &[2]), 10_000, 10, c, 0).unwrap();
        assert_eq!(r.uplink().burst(), 16 * 42);
    }

    /// New segments (not repairs) and repairs `m` sends at `now`.
    fn sent_at(m: &mut Member, now: u64) -> (usize, usize) {
        let out = drain(m, now);
        let new = out
            .iter()
            .filter(|o| matches!(o.msg, Msg::Data { repair: false, .. }))
            .count();
        let repairs = out
            .iter()
            .filter(|o| matches!(o.msg, Msg::Data { repair: true, .. }))
            .count();
        (new, repairs)
    }

    #[test]
    fn a_root_that_saw_loss_catches_up_the_schedulers_lateness_not_while_repairing() {
        // 63 segments of 10 bytes, 42 counted bytes each at 42 000 B/s: one per ms (fewer
        // than a block: the spare, and so the pace, stay). A bucket of 8 segments; a late
        // root that has seen no loss may hold 16 more, one that saw loss 4.
        let c = Config {
            window: 1000,
            rate: Some(42_000),
            burst: 8 * 42,
            catch_up: 16 * 42,
            loss_catch_up: 4 * 42,
            ..Config::default()
        };
        let shape = || shape(0, None, &[1, 2]);
        // Seen no loss: 20 ms late, all 20 segments it owes at once.
        let mut clean = Member::new(shape(), 630, 10, c, 0).unwrap();
        assert_eq!(sent_at(&mut clean, 0), (8, 0));
        assert_eq!(sent_at(&mut clean, 20 * MS), (20, 0));
        assert_eq!(clean.uplink().lost(), 0);
        assert_eq!(clean.uplink().caught(), 12 * MS);
        // Saw loss in an earlier broadcast: the bucket and 4 more; 8 ms lost for good.
        let lossy = Config {
            seen_loss: true,
            ..c
        };
        let mut root = Member::new(shape(), 630, 10, lossy, 0).unwrap();
        assert_eq!(sent_at(&mut root, 0), (8, 0));
        assert_eq!(sent_at(&mut root, 20 * MS), (12, 0));
        assert_eq!(root.uplink().lost(), 8 * MS);
        assert_eq!(root.uplink().caught(), 4 * MS);
        // A child NACKs: while its repair is queued the root catches nothing up, even once
        // the NACK is a repair's time old (20 ms late: the bucket, repair first).
        root.handle(20 * MS, 1, Msg::Nack { index: 2, count: 1 });
        assert_eq!(root.uplink().catch_up(), 0);
        assert_eq!(sent_at(&mut root, 20 * MS), (0, 0));
        assert_eq!(sent_at(&mut root, 40 * MS), (7, 1));
        assert_eq!(root.uplink().lost(), 20 * MS);
        assert_eq!(root.uplink().caught(), 4 * MS);
        // The repair left at 40 ms: in flight for `nack_min` (4 ms). Late until 70 ms, the
        // root catches up only from 44 ms on: its bucket (4 segments from 40 to 44 ms, then
        // full) and 4 more; 18 ms lost.
        assert_eq!(c.nack_min, 4 * MS);
        assert_eq!(sent_at(&mut root, 70 * MS), (12, 0));
        assert_eq!(root.uplink().lost(), 38 * MS);
        assert_eq!(root.uplink().caught(), 8 * MS);
        assert_eq!(root.uplink().catch_up(), 4 * 42);
        // A NACK that came while it was late cancels it before it sends (handled first).
        root.handle(90 * MS, 2, Msg::Nack { index: 3, count: 1 });
        assert_eq!(sent_at(&mut root, 90 * MS), (7, 1));
        assert_eq!(root.uplink().caught(), 8 * MS);
        assert_eq!(root.uplink().lost(), 50 * MS);
        // A spare above 0 counts as loss seen too, from the start.
        let spared = Config { spare: 50, ..c };
        let m = Member::new(shape(), 630, 10, spared, 0).unwrap();
        assert_eq!(m.uplink().catch_up(), 4 * 42);
        // A sticky loss whose spare is back at 0 has the path's bucket (20 segments here, more
        // than the loss bucket's 16): at once never more than 16 + 4 segments in all.
        let path = Config {
            burst: 20 * 42,
            ..lossy
        };
        let m = Member::new(shape(), 630, 10, path, 0).unwrap();
        assert_eq!((m.uplink().burst(), m.uplink().catch_up()), (20 * 42, 0));
        let m = Member::new(shape(), 630, 10, Config { spare: 50, ..path }, 0).unwrap();
        assert_eq!(
            (m.uplink().burst(), m.uplink().catch_up()),
            (16 * 42, 4 * 42)
        );
        // Other ranks never catch up (their repairs are the loss).
        let r = Member::new(shape1(), 630, 10, lossy, 0).unwrap();
        assert_eq!(r.uplink().catch_up(), 0);
        let r = Member::new(shape1(), 630, 10, c, 0).unwrap();
        assert_eq!(r.uplink().catch_up(), 0);
    }

    fn shape1() -> Shape {
        shape(1, Some(0), &[2])
    }

    #[test]
    fn a_root_whose_window_was_full_was_idle_not_late() {
        // As above, seen no loss, a window of 30 segments and one child.
        let c = Config {
            window: 30,
            rate: Some(42_000),
            burst: 8 * 42,
            catch_up: 16 * 42,
            ..Config::default()
        };
        let mut root = Member::new(shape(0, None, &[1]), 630, 10, c, 0).unwrap();
        assert_eq!(sent_at(&mut root, 0), (8, 0));
        assert_eq!(sent_at(&mut root, 22 * MS), (22, 0), "late: caught up");
        // The window is full until the report at 100 ms: a bucket then, not 24 segments.
        assert_eq!(sent_at(&mut root, 23 * MS), (0, 0));
        root.handle(
            100 * MS,
            1,
            Msg::Ack {
                value: 30,
                ping: false,
            },
        );
        assert_eq!(sent_at(&mut root, 100 * MS), (8, 0));
        assert_eq!(root.uplink().lost(), 0);
        assert_eq!(root.uplink().caught(), 14 * MS);
    }

    #[test]
    fn a_receiver_learns_the_loss_from_its_own_nacks_and_paces_nothing() {
        let pace = crate::model::multicast::PACE;
        let c = Config {
            rate: Some(42_000),
            ..Config::default()
        };
        let mut r = Member::new(shape(1, Some(0), &[]), 10_000, 10, c, 0).unwrap();
        // Every tenth segment lost over three blocks, one segment each 0.1 ms.
        for i in 0..3 * pace.block {
            let now = u64::from(i) * MS / 10;
            if i % 10 != 5 {
                r.land(now, 0, i);
            }
            drain(&mut r, now);
        }
        let spare = r.spare();
        assert!((150..=250).contains(&spare), "{spare}");
        assert_eq!(
            r.pacer.rate(),
            Some(42_000),
            "a receiver's repairs keep the rate"
        );
    }

    #[test]
    fn a_parent_nacks_at_once_what_a_child_asks_for_and_it_lacks() {
        let c = Config::default();
        let mut p = parent_holding(c, 3); // holds 0..3
        p.land(0, 0, 4); // 3 is missing
        let first = c.nack_delay;
        assert_eq!(nacks(&drain(&mut p, first)), [(3, 1)]);
        // Its own retry waits a NACK interval; a child asking sooner than a repair's hold
        // changes nothing (the parent's NACK may still be answered) ...
        let soon = first + c.nack_min / 2 - 1;
        p.handle(soon, 2, Msg::Nack { index: 3, count: 1 });
        assert!(nacks(&drain(&mut p, soon)).is_empty());
        // ... later, the parent asks again at once, not at its own backoff.
        let later = first + c.nack_min / 2;
        p.handle(later, 2, Msg::Nack { index: 3, count: 1 });
        assert_eq!(nacks(&drain(&mut p, later)), [(3, 1)]);
        // And then on its backoff again: two intervals after this second NACK.
        assert_eq!(p.next_nack(), Some(later + 2 * c.nack_interval));
    }

    #[test]
    fn nack_retries_wait_the_time_repairs_take_here_within_bounds() {
        let c = Config::default();
        let mut r = Member::new(shape(2, Some(1), &[]), 1000, 10, c, 0).unwrap();
        r.land(0, 0, 0);
        r.land(0, 0, 2); // 1 is missing
        let t = c.nack_delay;
        assert_eq!(nacks(&drain(&mut r, t)), [(1, 1)]);
        // Nothing measured yet: the retry waits the whole interval.
        assert_eq!(r.next_nack(), Some(t + c.nack_interval));
        // Its repair takes 1 ms: 1 ms and four deviations of 0.5 ms is 3 ms, below the least.
        r.land(t + MS, 1, 1);
        r.land(t + MS, 0, 4); // 3 is missing
        let t2 = t + MS + c.nack_delay;
        assert_eq!(nacks(&drain(&mut r, t2)), [(3, 1)]);
        assert_eq!(r.next_nack(), Some(t2 + c.nack_min));
        // Then twice that, and so on.
        assert_eq!(nacks(&drain(&mut r, t2 + c.nack_min)), [(3, 1)]);
        assert_eq!(r.next_nack(), Some(t2 + 3 * c.nack_min));
        // Repairs that take long (a full queue) wait longer, at most the interval.
        let mut slow = crate::model::multicast::RepairTime::default();
        for _ in 0..20 {
            slow.sample(50 * MS);
        }
        assert_eq!(
            crate::model::multicast::REPAIR.retry_wait(&slow),
            c.nack_interval
        );
    }

    fn syncs(out: &[Out]) -> usize {
        out.iter()
            .filter(|o| matches!(o.msg, Msg::Sync { answer: false, .. }))
            .count()
    }

    #[test]
    fn after_its_last_segment_the_root_syncs_again_soon_then_less_often() {
        let c = Config::default();
        let mut root = Member::new(shape(0, None, &[1]), 30, 10, c, 0).unwrap();
        assert_eq!(
            syncs(&drain(&mut root, 0)),
            1,
            "right behind the last segment"
        );
        // The child's final report was lost: syncs at nack_min, then 2, 4 … times that after
        // the one before, at most a sync interval apart.
        let mut at = Vec::new();
        let mut now = 0;
        while at.len() < 6 {
            now = root.poll_timeout(now).unwrap();
            root.handle_timeout(now);
            if syncs(&drain(&mut root, now)) == 1 {
                at.push(now);
            }
            // The child is alive (it answers each sync with its report, 0 segments held).
            root.handle(
                now,
                1,
                Msg::Ack {
                    value: 0,
                    ping: false,
                },
            );
        }
        let gaps: Vec<u64> = std::iter::once(at[0])
            .chain(at.windows(2).map(|w| w[1] - w[0]))
            .collect();
        let m = c.nack_min;
        assert_eq!(
            gaps,
            [
                m,
                2 * m,
                4 * m,
                c.sync_interval,
                c.sync_interval,
                c.sync_interval
            ]
        );
        // The report arrives: complete, no more syncs.
        root.handle(
            now,
            1,
            Msg::Ack {
                value: 3,
                ping: false,
            },
        );
        assert_eq!(root.state(), &State::Complete);
        assert_eq!(root.poll_timeout(now), None);
    }

    #[test]
    fn a_rank_sends_its_final_report_twice_and_the_parent_takes_it_once() {
        let c = Config {
            ack_every: 100,
            ..Config::default()
        };
        let finals = |out: &[Out], to: usize, value: u64| {
            out.iter()
                .filter(|o| {
                    o.to == To::Rank(to)
                        && matches!(o.msg, Msg::Ack { value: v, ping: false } if v == value)
                })
                .count()
        };
        // A leaf: segments 0 and 1 report nothing (fewer than ack_every), the last one
        // completes it, and its final report leaves twice.
        let mut leaf = Member::new(shape(2, Some(1), &[]), 30, 10, c, 0).unwrap();
        assert!(leaf.land(0, 0, 0).is_some());
        assert!(leaf.land(0, 0, 1).is_some());
        assert_eq!(finals(&drain(&mut leaf, 0), 1, 2), 0);
        assert!(leaf.land(MS, 0, 2).is_some());
        let out = drain(&mut leaf, MS);
        assert_eq!(finals(&out, 1, 3), 2, "{out:?}");
        assert_eq!(leaf.state(), &State::Complete);
        assert_eq!(leaf.stats().acks, 2);
        // Its parent, holding everything, completes on the first copy and reports once more
        // twice; the second copy changes nothing.
        let mut parent = Member::new(shape(1, Some(0), &[2]), 30, 10, c, 0).unwrap();
        for i in 0..3 {
            assert!(parent.land(0, 0, i).is_some());
        }
        assert_eq!(
            finals(&drain(&mut parent, 0), 0, 3),
            0,
            "the child lacks them"
        );
        parent.handle(
            MS,
            2,
            Msg::Ack {
                value: 3,
                ping: false,
            },
        );
        assert_eq!(finals(&drain(&mut parent, MS), 0, 3), 2);
        assert_eq!(parent.state(), &State::Complete);
        parent.handle(
            MS,
            2,
            Msg::Ack {
                value: 3,
                ping: false,
            },
        );
        assert!(drain(&mut parent, MS).is_empty());
    }

    #[test]
    fn while_sending_the_root_does_not_sync_for_want_of_reports() {
        // 2000 segments paced one per ms, reports every 100 (100 ms apart: 5 sync intervals).
        let c = Config {
            window: 2000,
            ack_every: 100,
            rate: Some(74_000),
            burst: 74,
            ..Config::default()
        };
        let mut root = Member::new(shape(0, None, &[1]), 20_000, 10, c, 0).unwrap();
        let mut now = 0;
        let mut sent = 0;
        while sent < 1000 {
            root.handle_timeout(now);
            for o in drain(&mut root, now) {
                match o.msg {
                    Msg::Data { .. } => sent += 1,
                    Msg::Sync { .. } => panic!("a sync at {now} while the root sends"),
                    _ => {}
                }
            }
            now = root.poll_timeout(now).unwrap().max(now + 1);
        }
        assert_eq!(root.stats().syncs, 0);
    }

    #[test]
    fn a_receiver_missing_nothing_pings_its_parent_rarely() {
        let c = Config {
            liveness: 800 * MS,
            ..Config::default()
        };
        let mut r = Member::new(shape(2, Some(1), &[]), 1000, 10, c, 0).unwrap();
        r.land(0, 0, 0);
        drain(&mut r, 0);
        // Nothing missing: the first ping after an eighth of the liveness limit.
        assert_eq!(r.poll_timeout(0), Some(100 * MS));
        r.handle_timeout(100 * MS);
        let pings = |out: &[Out]| {
            out.iter()
                .filter(|o| matches!(o.msg, Msg::Ack { ping: true, .. }))
                .count()
        };
        assert_eq!(pings(&drain(&mut r, 100 * MS)), 1);
        // A gap: it waits for repairs, and pings after a sync interval of silence.
        r.land(101 * MS, 0, 2);
        drain(&mut r, 101 * MS);
        let t = 100 * MS + c.sync_interval;
        r.handle_timeout(t);
        assert_eq!(pings(&drain(&mut r, t)), 1);
    }
}
