//! One rank's part in one pipelined broadcast: a pure state machine on a virtual clock.
//!
//! Seed 000 §3.1 (and seed 003 §4.1): the message is cut into segments that flow down a tree
//! in a pipeline. Seed 001 §3.2, First-Packet-First-Served: a rank forwards each segment to its
//! children (in send order) as soon as the segment has arrived, without waiting for the rest
//! of the message. Among everything that could be sent next, the engine picks the lowest
//! segment number first, then the lowest lane, then the child earliest in send order.
//!
//! Flow control: a rank has at most `window` segments in flight to one child; the child
//! returns cumulative credits as segments land (they land directly in the user buffer, so
//! "consumed" means "placed"). The engine expects every message exactly once, in any order:
//! a lossy link runs the per-peer reliability of [`reliable`](super::reliable) below it, so
//! credits are flow control only and the engine never retransmits.
//!
//! Driven like quinn-proto: `place`/`handle_data`/`handle_message` take events in,
//! `poll_transmit` hands messages out, `poll_timeout`/`handle_timeout` manage the idle timer.
//! The engine never touches sockets, clocks or the user buffer.

use super::number::{comm_of, seq_of};
use super::{DataHeader, EngineError, Expected, Layout, Message, Placement, Transmit};
use crate::plan::Lane;
use std::collections::VecDeque;

/// Engine tuning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// R: most segments in flight from one rank to one child.
    pub window: u32,
    /// A child sends a credit after this many new segments (and always after the last one).
    pub credit_every: u32,
    /// A broadcast that makes no progress for this long (ns) fails with `Timeout`.
    pub idle_timeout: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            window: 16,
            credit_every: 4,
            idle_timeout: 5_000_000_000,
        }
    }
}

/// What every rank must agree on for one broadcast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    pub seq: u64,
    pub root: usize,
    pub msize: u64,
    pub segment: u64,
    /// A deep broadcast completes at a rank only when its whole subtree holds the message
    /// (children report `Done`); the root of a deep broadcast thus knows everybody arrived.
    pub deep: bool,
}

#[derive(Debug, Clone)]
struct Child {
    rank: usize,
    /// Next segment to send (every one below it was sent).
    next: u32,
    /// Segments the child has acknowledged (cumulative).
    acked: u32,
    done: bool,
}

#[derive(Debug, Clone)]
struct LaneState {
    parent: Option<usize>,
    member: bool,
    segments: u32,
    have: Vec<bool>,
    received: u32,
    /// Length of the received prefix.
    prefix: u32,
    /// Last `consumed` value sent to the parent.
    credited: u32,
    done_sent: bool,
    children: Vec<Child>,
}

impl LaneState {
    fn complete(&self) -> bool {
        self.received == self.segments
    }
    fn children_acked(&self) -> bool {
        self.children.iter().all(|c| c.acked == self.segments)
    }
    fn children_done(&self) -> bool {
        self.children.iter().all(|c| c.done)
    }
}

/// One rank's state in one broadcast.
#[derive(Debug)]
pub struct Bcast {
    me: usize,
    setup: Setup,
    config: Config,
    layout: Layout,
    lanes: Vec<LaneState>,
    /// The rail (NIC) each lane's messages travel on; empty: rail 0 for every lane.
    rails: Vec<usize>,
    control: VecDeque<Transmit>,
    last_progress: u64,
    failed: bool,
    /// The root as the segments' headers name it ([`Bcast::with_root_name`]).
    root_name: u32,
}

impl Bcast {
    /// Starts rank `me`'s part of broadcast `setup` over `lanes` (each a tree over all ranks
    /// rooted at `setup.root`; a rank that is neither the root nor has a parent in a lane
    /// takes no part in that lane, which is how point-to-point transfers run).
    pub fn new(
        me: usize,
        lanes: &[Lane],
        setup: Setup,
        config: Config,
        now: u64,
    ) -> Result<Bcast, EngineError> {
        let size = lanes.first().map_or(0, |l| l.parents.len());
        if lanes.is_empty() || me >= size || setup.root >= size {
            return Err(EngineError::BadPlan(format!(
                "rank {me}, root {} and {} lanes over {size} ranks",
                setup.root,
                lanes.len()
            )));
        }
        if setup.segment > u64::from(u32::MAX) || lanes.len() > usize::from(u16::MAX) {
            return Err(EngineError::BadPlan(format!(
                "segment {} bytes or {} lanes is too large",
                setup.segment,
                lanes.len()
            )));
        }
        let per_lane = setup.msize / lanes.len() as u64 + 1;
        if per_lane.div_ceil(setup.segment.max(1)) >= u64::from(u32::MAX) {
            return Err(EngineError::BadPlan(format!(
                "{} bytes in {}-byte segments is more than 2^32 segments per lane: use larger segments",
                setup.msize, setup.segment
            )));
        }
        let layout = Layout::new(setup.msize, setup.segment, lanes.len());
        let mut states = Vec::with_capacity(lanes.len());
        for (l, lane) in lanes.iter().enumerate() {
            if lane.parents.len() != size || lane.children.len() != size {
                return Err(EngineError::BadPlan(format!(
                    "lane {l} does not span {size} ranks"
                )));
            }
            if lane.parents[setup.root].is_some() {
                return Err(EngineError::BadPlan(format!(
                    "lane {l}: root {} has a parent",
                    setup.root
                )));
            }
            let segments = layout.segments(l);
            let is_root = me == setup.root;
            let parent = lane.parents[me];
            let member = is_root || parent.is_some();
            let children = if member {
                lane.children[me]
                    .iter()
                    .map(|&rank| Child {
                        rank,
                        next: 0,
                        acked: 0,
                        done: false,
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let got = if is_root || !member { segments } else { 0 };
            states.push(LaneState {
                parent,
                member,
                segments,
                have: vec![is_root; if member { segments as usize } else { 0 }],
                received: got,
                prefix: got,
                credited: got,
                done_sent: !member || is_root,
                children,
            });
        }
        let mut bcast = Bcast {
            me,
            setup,
            config: Config {
                window: config.window.max(1),
                credit_every: config.credit_every.clamp(1, config.window.max(1)),
                ..config
            },
            layout,
            lanes: states,
            rails: Vec::new(),
            control: VecDeque::new(),
            last_progress: now,
            failed: false,
            root_name: setup.root as u32,
        };
        for l in 0..bcast.lanes.len() {
            bcast.maybe_done(l);
        }
        Ok(bcast)
    }

    /// The same broadcast with lane `l` on rail `rails[l]` (the plan's `Plan::rails`): which
    /// NIC its data and credits use is the link's business, not the engine's, so this only
    /// records it for [`Bcast::rail`].
    pub fn with_rails(mut self, rails: Vec<usize>) -> Bcast {
        self.rails = rails;
        self
    }

    /// The rail lane `lane` runs on (0 unless [`Bcast::with_rails`] said otherwise).
    pub fn rail(&self, lane: usize) -> usize {
        self.rails.get(lane).copied().unwrap_or(0)
    }

    /// Names the root `name` in the segments' headers (and checks theirs against it) in
    /// place of its number here (`setup.root`): a communicator whose processes number each
    /// other differently (joined on existing engines, `comm::grow`) names it by its rank in
    /// the communicator, the same at every member. Default: `setup.root`.
    pub fn with_root_name(mut self, name: u32) -> Bcast {
        self.root_name = name;
        self
    }

    /// The root as the segments' headers name it.
    pub fn root_name(&self) -> u32 {
        self.root_name
    }

    /// R: the most segments in flight to one child per lane (and from the parent).
    pub fn window(&self) -> u32 {
        self.config.window
    }

    pub fn setup(&self) -> &Setup {
        &self.setup
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Every rank this one exchanges messages with (parents and children in any lane), sorted.
    pub fn peers(&self) -> Vec<usize> {
        let mut peers: Vec<usize> = self
            .lanes
            .iter()
            .flat_map(|l| {
                l.parent
                    .into_iter()
                    .chain(l.children.iter().map(|c| c.rank))
            })
            .collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }

    /// Whether this rank's part is over: it holds the message, its children acknowledged all
    /// of it (and, for a deep broadcast, reported their subtrees done), and its last credit
    /// is queued.
    pub fn is_done(&self) -> bool {
        !self.failed
            && self.control.is_empty()
            && self.lanes.iter().all(|s| {
                s.complete()
                    && s.children_acked()
                    && s.credited == s.segments
                    && (!self.setup.deep || (s.children_done() && s.done_sent))
            })
    }

    /// Decides where the payload of an arriving segment goes, checking that the sender and
    /// this rank agree on the broadcast.
    pub fn place(&mut self, from: usize, h: &DataHeader) -> Result<Placement, EngineError> {
        if h.seq < self.setup.seq {
            return Ok(Placement::Discard);
        }
        if h.seq > self.setup.seq {
            return Ok(Placement::Later);
        }
        self.check_agreement(from, h)?;
        let l = usize::from(h.lane);
        let Some(state) = self.lanes.get(l) else {
            return Err(self.fail(EngineError::Protocol(format!(
                "rank {from} sent a segment of lane {l}, but the broadcast has {} lanes",
                self.lanes.len()
            ))));
        };
        if state.parent != Some(from) {
            return Err(self.fail(EngineError::UnexpectedSender {
                from,
                lane: l,
                parent: state.parent,
            }));
        }
        let range = match self.layout.range(l, h.index) {
            Some(r) if r.end - r.start == u64::from(h.len) => r,
            _ => {
                return Err(self.fail(EngineError::Protocol(format!(
                    "rank {from} sent segment {} of lane {l} with {} bytes: no such segment in a \
                     {}-byte message cut into {}-byte segments",
                    h.index, h.len, h.msize, h.segment
                ))))
            }
        };
        let window = self.config.window;
        if h.index >= state.credited.saturating_add(window) {
            // A parent sends a segment only within the window of the last credit it got,
            // and it cannot have got one this rank has not sent: beyond it, it ignores the
            // credits (a repeat of a segment sent within the window never gets here).
            let (index, credited) = (h.index, state.credited);
            return Err(self.fail(EngineError::Protocol(format!(
                "rank {from} sent segment {index} of lane {l} of broadcast {} of communicator \
                 {} when this rank had acknowledged {credited}: at least {} segments of that \
                 lane unacknowledged, more than the window of {window}",
                seq_of(h.seq),
                comm_of(h.seq),
                u64::from(index) + 1 - u64::from(credited)
            ))));
        }
        if state.have[h.index as usize] {
            // A duplicate (a link that duplicates and runs no reliability): it landed already.
            return Ok(Placement::Discard);
        }
        Ok(Placement::Into(range.start as usize..range.end as usize))
    }

    fn check_agreement(&mut self, from: usize, h: &DataHeader) -> Result<(), EngineError> {
        let ours = [
            ("root", u64::from(self.root_name)),
            ("message size", self.setup.msize),
            ("segment size", self.layout.segment()),
            ("lane count", self.lanes.len() as u64),
        ];
        let theirs = [
            u64::from(h.root),
            h.msize,
            u64::from(h.segment),
            u64::from(h.lanes),
        ];
        for ((what, ours), theirs) in ours.into_iter().zip(theirs) {
            if ours != theirs {
                return Err(self.fail(EngineError::Mismatch {
                    seq: h.seq,
                    what,
                    peer: from,
                    ours,
                    theirs,
                }));
            }
        }
        Ok(())
    }

    /// The payload of a segment accepted by `place` (`Placement::Into`) has fully landed.
    pub fn handle_data(&mut self, now: u64, h: &DataHeader) {
        let l = usize::from(h.lane);
        let Some(state) = self.lanes.get_mut(l) else {
            return;
        };
        let i = h.index as usize;
        if h.seq != self.setup.seq || i >= state.have.len() || state.have[i] {
            return;
        }
        state.have[i] = true;
        state.received += 1;
        while (state.prefix as usize) < state.have.len() && state.have[state.prefix as usize] {
            state.prefix += 1;
        }
        self.last_progress = now;
        let state = &mut self.lanes[l];
        let due = state.prefix - state.credited >= self.config.credit_every
            || state.prefix == state.segments;
        if let (true, Some(to)) = (due, state.parent) {
            state.credited = state.prefix;
            self.control.push_back(Transmit {
                to,
                message: Message::Credit {
                    seq: self.setup.seq,
                    lane: l as u16,
                    consumed: state.prefix,
                },
                payload: 0..0,
            });
        }
        self.maybe_done(l);
    }

    /// A control message (credit or done) from `from`. Returns `Placement::Later` when it
    /// belongs to a later broadcast (keep it for then), `Discard` when it is stale.
    pub fn handle_message(
        &mut self,
        now: u64,
        from: usize,
        message: &Message,
    ) -> Result<Placement, EngineError> {
        let seq = message.seq();
        if seq < self.setup.seq {
            return Ok(Placement::Discard);
        }
        if seq > self.setup.seq {
            return Ok(Placement::Later);
        }
        let (lane, consumed, done) = match *message {
            Message::Data(h) => {
                return Err(self.fail(EngineError::Protocol(format!(
                    "data from rank {from} (lane {}, segment {}) must go through `place`",
                    h.lane, h.index
                ))))
            }
            Message::Credit { lane, consumed, .. } => (usize::from(lane), Some(consumed), false),
            Message::Done { lane, .. } => (usize::from(lane), None, true),
        };
        let Some(child) = self
            .lanes
            .get_mut(lane)
            .and_then(|s| s.children.iter_mut().find(|c| c.rank == from))
        else {
            return Err(self.fail(EngineError::Protocol(format!(
                "rank {from} sent a credit or done for lane {lane} of broadcast {seq} but is not \
                 a child of rank {} there: do all ranks use the same tree and root?",
                self.me
            ))));
        };
        if let Some(consumed) = consumed {
            if consumed > child.next {
                let next = child.next;
                return Err(self.fail(EngineError::Protocol(format!(
                    "rank {from} acknowledged {consumed} segments of lane {lane} but was sent {next}"
                ))));
            }
            child.acked = child.acked.max(consumed);
        }
        child.done |= done;
        self.last_progress = now;
        self.maybe_done(lane);
        Ok(Placement::Into(0..0))
    }

    fn maybe_done(&mut self, l: usize) {
        let state = &mut self.lanes[l];
        if self.setup.deep
            && !state.done_sent
            && state.complete()
            && state.children_done()
            && state.credited == state.segments
        {
            state.done_sent = true;
            if let Some(to) = state.parent {
                self.control.push_back(Transmit {
                    to,
                    message: Message::Done {
                        seq: self.setup.seq,
                        lane: l as u16,
                    },
                    payload: 0..0,
                });
            }
        }
    }

    /// The next message to send: credits first, then the FPFS choice among segments that are
    /// here and fit in their child's window.
    pub fn poll_transmit(&mut self, now: u64) -> Option<Transmit> {
        self.poll_transmit_to(now, &|_| true)
    }

    /// [`poll_transmit`](Self::poll_transmit) restricted to the peers `to` accepts: what one
    /// link of several takes (the others' messages wait for their own links).
    pub fn poll_transmit_to(&mut self, _now: u64, to: &dyn Fn(usize) -> bool) -> Option<Transmit> {
        if self.failed {
            return None;
        }
        if let Some(i) = self.control.iter().position(|t| to(t.to)) {
            return self.control.remove(i);
        }
        let window = self.config.window;
        let mut best: Option<(u32, usize, usize)> = None;
        for (l, state) in self.lanes.iter().enumerate() {
            for (c, child) in state.children.iter().enumerate() {
                let n = child.next;
                if to(child.rank)
                    && n < state.segments
                    && state.have[n as usize]
                    && n < child.acked.saturating_add(window)
                    && best.is_none_or(|(bn, _, _)| n < bn)
                {
                    best = Some((n, l, c));
                }
            }
        }
        let (n, l, c) = best?;
        let child = &mut self.lanes[l].children[c];
        child.next += 1;
        let to = child.rank;
        let h = self.header(l, n).expect("segment exists");
        let start = self.layout.range(l, n).expect("segment exists").start as usize;
        Some(Transmit {
            to,
            message: Message::Data(h),
            payload: start..start + h.len as usize,
        })
    }

    /// The header of segment `index` of lane `lane`, or `None` if there is none.
    pub fn header(&self, lane: usize, index: u32) -> Option<DataHeader> {
        self.layout
            .header(self.setup.seq, self.root_name, lane, index)
    }

    /// The segments this rank may receive next, per lane: those its parent may send now
    /// under the window, from the last credit sent (`credited`) up to `credited + window`,
    /// not yet received. The parent's window is this rank's (the agreement makes the setting
    /// equal everywhere), and it cannot have seen a credit not sent yet, so nothing outside
    /// this set can arrive. Empty at the root, in lanes this rank takes no part in, and once
    /// everything arrived. See [`Expected`].
    pub fn expected(&self) -> Vec<Expected> {
        if self.failed {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (l, s) in self.lanes.iter().enumerate() {
            let Some(from) = s.parent else { continue };
            let end = s
                .credited
                .saturating_add(self.config.window)
                .min(s.segments);
            for index in (s.credited..end).filter(|&i| !s.have[i as usize]) {
                let range = self.layout.range(l, index).expect("segment exists");
                out.push(Expected {
                    from,
                    seq: self.setup.seq,
                    lane: l as u16,
                    index,
                    range: range.start as usize..range.end as usize,
                });
            }
        }
        out
    }

    /// When `handle_timeout` should be called next (virtual ns).
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.failed || self.is_done() {
            return None;
        }
        Some(self.last_progress.saturating_add(self.config.idle_timeout))
    }

    /// Fails the broadcast if it made no progress for the idle timeout.
    pub fn handle_timeout(&mut self, now: u64) -> Result<(), EngineError> {
        let idle = self.last_progress.saturating_add(self.config.idle_timeout);
        if !self.failed && !self.is_done() && now >= idle {
            let waiting_for = self.waiting_for();
            return Err(self.fail(EngineError::Timeout {
                seq: self.setup.seq,
                waiting_for,
                idle_ms: (now - self.last_progress) / 1_000_000,
            }));
        }
        Ok(())
    }

    /// The ranks this one still waits for: parents with missing segments and children with
    /// unacknowledged segments (or, deep, unreported subtrees).
    pub fn waiting_for(&self) -> Vec<usize> {
        let mut ranks = Vec::new();
        for s in &self.lanes {
            if let (Some(p), false) = (s.parent, s.complete()) {
                ranks.push(p);
            }
            for c in &s.children {
                if c.acked < s.segments || (self.setup.deep && !c.done) {
                    ranks.push(c.rank);
                }
            }
        }
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    }

    /// The lanes' state for a failure report.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "bcast {} at rank {} (root {}, {} bytes in {}-byte segments): control queued {}",
            self.setup.seq,
            self.me,
            self.setup.root,
            self.setup.msize,
            self.layout.segment(),
            self.control.len()
        );
        for (l, s) in self.lanes.iter().enumerate() {
            if !s.member {
                continue;
            }
            out += &format!(
                "\n  lane {l}: parent {:?} received {}/{} prefix {} credited {} done_sent {}",
                s.parent, s.received, s.segments, s.prefix, s.credited, s.done_sent
            );
            for c in &s.children {
                out += &format!(
                    "\n    child {}: next {} acked {} done {}",
                    c.rank, c.next, c.acked, c.done
                );
            }
        }
        out
    }

    fn fail(&mut self, e: EngineError) -> EngineError {
        self.failed = true;
        e
    }

    /// Whether lane membership says this rank takes part at all.
    pub fn is_member(&self) -> bool {
        self.lanes.iter().any(|s| s.member)
    }
}
