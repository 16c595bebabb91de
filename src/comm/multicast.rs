//! Multicast broadcasts on the progress thread (issue 32; docs/multicast.md): the protocol of
//! `engine::multicast` (one [`Member`] per broadcast in flight, keyed by the engine's
//! broadcast number) over the carrier the setup agreed on (`transport::mcast`), beside the
//! link's tree broadcasts.
//!
//! - Frames name their broadcast by its number (`codec::Ident::bseq`); data lands straight in
//!   the posted buffer, segment by segment, once its length is checked against the segment
//!   it claims to be.
//! - A frame of a broadcast this rank holds no member for is answered as the protocol asks
//!   ([`absent_answer`]): not posted yet (a late rank: alive, holding nothing), finished (a
//!   bounded record of the last [`FINISHED_KEPT`] finished ones, so that a lost report is
//!   repeated), or long gone (older than the record: dropped).
//! - Frames of a broadcast not posted here yet (the root is ahead: the usual case, as ranks
//!   leave their previous collective at different times) are kept, up to [`EARLY_BYTES`] in
//!   all, and handed to its member when it is posted, as the endpoint holds the trees' early
//!   segments; what did not fit is repaired by the protocol (the root's sync reveals it).
//! - The carrier is served between broadcasts too: a late rank's progress thread answers the
//!   root's syncs while its caller computes, so it is waited for however long.
//! - A failure (a rank gone, an abort, ranks that disagree on a broadcast) fails the run as a
//!   tree failure does: the progress thread fails the whole engine.
//!
//! Only communicators that hold every process of the engine broadcast this way (the base and
//! its duplicates): every rank then receives every group frame of every broadcast it is part
//! of, and every process derives a broadcast's ack tree from the root alone
//! (`plan::multicast::ack_tree` on the engine's topology).

use crate::engine::multicast::{absent_answer, Absent, Config, Member, Msg, Out, Shape, State};
use crate::engine::number::{comm_of, seq_of};
use crate::engine::EngineError;
use crate::plan::Lane;
use crate::topology::Topology;
use crate::transport::mcast::codec::{decode, Ident};
use crate::transport::mcast::{
    accept_unsummed, accept_with, Accepted, Batch, Carrier, Detached, Dropped, Drops, Source,
    Unsummed,
};
use crate::transport::{Buffers, TransportError};
use crate::wire::mcast::{Header, HeaderBytes, DATA_HEADER_LEN, HEADER_LEN, MAX_PAYLOAD};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Finished broadcasts remembered, to answer a lost report again.
pub const FINISHED_KEPT: usize = 1024;

/// Frames read per round at most (the others wait for the next round, which comes at once:
/// the carrier's descriptors stay readable).
const READS_PER_ROUND: usize = 4096;

/// Frames taken from the carrier at once (one `recvmmsg(2)` per socket).
const BATCH: usize = 64;

/// Buffers of deferred control frames kept for reuse.
const DEFERRED_KEPT: usize = 64;

/// Bytes of early frames kept at most (payloads and headers).
pub const EARLY_BYTES: usize = 16 << 20;

/// How long a round waits when the carrier's socket was full (it is not polled for room).
const SEND_RETRY: Duration = Duration::from_micros(200);

/// What the setup agreed on, for the progress thread.
pub struct Agreed {
    pub carrier: Box<dyn Carrier>,
    /// The job's cookie: every frame carries it.
    pub cookie: u64,
    /// Payload bytes per segment (one datagram), the same at every rank.
    pub segment: u32,
    pub config: Config,
    /// The engine's topology (ack trees).
    pub topology: Topology,
    /// Every rank's carrier checksums payloads (`Carrier::checksums_payload`): data frames
    /// sent carry a header-only CRC.
    pub header_sum: bool,
}

struct Running {
    member: Member,
    ident: Ident,
    /// Messages the carrier had no room for, in order: sent first next time.
    stalled: VecDeque<Out>,
    /// Segments landed here (new ones).
    landed: u32,
    /// When it passed its milestones, at `PIPECAST_LOG=pipecast::comm::multicast=debug` only.
    trace: Option<Box<Trace>>,
}

/// A broadcast's milestones at this rank (wall-clock µs, comparable across the ranks of one
/// host, e.g. a lab's), logged at debug when it finishes: where its time goes.
#[derive(Debug, Default)]
struct Trace {
    posted: u64,
    /// The first segment landed (a receiver) or left (the root).
    first: u64,
    /// Every segment landed here (a receiver) or left (the root).
    all: u64,
    /// This rank and its subtree hold everything.
    complete: u64,
    /// The root's lateness ([`Lateness`]).
    late: Lateness,
    /// Sends the carrier refused (its socket full), and how long (µs) from each refusal to
    /// the send that then went through: time the root's pace cannot see (its tokens were
    /// taken), spent waiting on the path's queue or on the retry's round.
    stalls: u32,
    stalled_us: u64,
    stalled_at: Option<u64>,
}

/// How late a root's progress thread ran against what it asked for: every round of its data
/// phase (segments left to send) ends with the time its member has something to do next
/// (the pacer's next segment, as a rule: `Member::poll_timeout`), and the next round says how
/// late it came. Late by more than the bucket's time (its depth at the pace), the pace is
/// lost beyond what a late root may catch up (`Pacer::lost`).
#[derive(Debug, Default)]
struct Lateness {
    /// When the next round was due (the clock's ns), while segments were left to send.
    due: Option<u64>,
    /// Rounds of the data phase that came after they were due.
    rounds: u32,
    /// ... by more than 1 ms, and by more than the bucket's time.
    over_1ms: u32,
    over_bucket: u32,
    /// The latest (µs), and the sum of what the rounds came beyond the bucket's time (µs:
    /// the pace lost without a catch-up).
    max_us: u64,
    beyond_us: u64,
}

impl Lateness {
    /// A round of a root at `now` (the clock's ns) whose bucket holds `bucket_ns` of pace.
    fn woke(&mut self, now: u64, bucket_ns: u64) {
        let Some(due) = self.due.take() else {
            return;
        };
        let late = now.saturating_sub(due);
        if late == 0 {
            return;
        }
        self.rounds += 1;
        self.over_1ms += u32::from(late > 1_000_000);
        self.over_bucket += u32::from(late > bucket_ns);
        self.max_us = self.max_us.max(late / 1000);
        self.beyond_us += late.saturating_sub(bucket_ns) / 1000;
    }
}

fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// This process's multicast broadcasts.
pub struct Multicast {
    me: usize,
    size: usize,
    agreed: Agreed,
    running: BTreeMap<u64, Running>,
    /// Finished broadcasts (number → segments, root, message size), oldest first in `order`.
    finished: BTreeMap<u64, (u64, u32, u64)>,
    order: VecDeque<u64>,
    /// The highest sequence number posted per communicator: a number at or below it that is
    /// neither running nor remembered is long finished.
    posted: BTreeMap<u32, u32>,
    /// Ack trees by root.
    trees: BTreeMap<usize, Lane>,
    /// Frames of broadcasts not posted yet: (from, header, payload), in arrival order.
    early: BTreeMap<u64, Vec<(usize, Header, Vec<u8>)>>,
    early_bytes: usize,
    rx: Batch,
    /// Control frames met while the carrier was visited in place, handled after it (from,
    /// bytes), and buffers for them.
    deferred: Vec<(Source, Vec<u8>)>,
    deferred_spare: Vec<Vec<u8>>,
    drops: Drops,
    /// Frames sent and received (counters).
    sent: u64,
    received: u64,
    /// Whether the last round landed data ([`Multicast::coalesce`]).
    landed: bool,
    /// What this rank learned of the loss ([`Config::spare`]).
    spare: u32,
    /// The uplink's bucket of the last broadcast this rank rooted: the next starts with what
    /// it holds then ([`Config::tokens`]), not with a full one (the path's buckets refill
    /// at the pace).
    bucket: Option<crate::engine::reliable::Pacer>,
    /// Whether a broadcast here ever saw loss (a NACK, a repair or a spare, as root or
    /// receiver): from then on the broadcasts this rank roots catch up only as a root that
    /// saw loss ([`Config::seen_loss`]: [`Config::loss_catch_up`], while none of its repairs
    /// is in flight), even where the spare has fallen back to 0 between losses.
    lossy: bool,
    /// How long a receiving rank lets frames gather before the next round, at most.
    coalesce: Duration,
    /// One segment's time at the paced rate (zero: unpaced).
    per_segment: Duration,
}

fn gone(seq: u64, e: &crate::engine::multicast::McastError) -> crate::Error {
    use crate::engine::multicast::McastError;
    match e {
        McastError::Gone { rank, silent_ms } => TransportError::PeerGone {
            peer: *rank,
            ms: *silent_ms,
        }
        .into(),
        other => TransportError::Io {
            peer: other.gone(),
            error: format!("multicast broadcast {seq}: {other}"),
        }
        .into(),
    }
}

impl Multicast {
    pub fn new(me: usize, agreed: Agreed) -> Multicast {
        let coalesce = coalesce_for(agreed.config, agreed.segment);
        let (agreed_rate, agreed_segment) = (agreed.config.rate, agreed.segment);
        let agreed_spare = agreed.config.spare;
        // A slot holds the largest valid frame and a little more (a longer one is cut, then
        // dropped as malformed: no valid frame is longer).
        let slot = HEADER_LEN.max(DATA_HEADER_LEN + agreed.segment as usize) + 64;
        Multicast {
            me,
            size: agreed.topology.size(),
            agreed,
            running: BTreeMap::new(),
            finished: BTreeMap::new(),
            order: VecDeque::new(),
            posted: BTreeMap::new(),
            trees: BTreeMap::new(),
            early: BTreeMap::new(),
            early_bytes: 0,
            rx: Batch::new(BATCH, slot),
            deferred: Vec::new(),
            deferred_spare: Vec::new(),
            drops: Drops::default(),
            sent: 0,
            received: 0,
            landed: false,
            spare: agreed_spare,
            bucket: None,
            lossy: false,
            coalesce,
            per_segment: per_segment(agreed_rate, agreed_segment),
        }
    }

    /// How long the progress thread may let frames gather in the socket before the next round
    /// (`None`: not now): only while every broadcast here is a receiver's that is landing data
    /// and has nothing to send. One round per frame (a wake-up, a poll of every link, three
    /// receive calls) cost a receiving rank several times the CPU of the bytes it moves; a
    /// round per millisecond reads the frames that arrived meanwhile in one go. The wait is
    /// an eighth of the window's time at the paced rate (at most 1 ms), so the root's credit
    /// never runs dry for it, and acknowledgements are late by as much at most.
    pub fn coalesce(&self, now: u64) -> Option<Duration> {
        if !self.landed || self.coalesce.is_zero() || self.running.is_empty() {
            return None;
        }
        // No longer than half the time the slowest member's missing segments take to arrive
        // at the paced rate: the last one is read (and reported) without waiting out a pause.
        let mut pause = self.coalesce;
        if !self.per_segment.is_zero() {
            for r in self.running.values() {
                let missing = r.member.segments().saturating_sub(r.landed);
                pause = pause.min(self.per_segment * missing / 2);
            }
        }
        let horizon = now.saturating_add(pause.as_nanos() as u64);
        let quiet = self.running.values().all(|r| {
            !r.member.is_root()
                && matches!(r.member.state(), State::Running)
                && r.stalled.is_empty()
                && r.member.poll_timeout(now).is_none_or(|t| t > horizon)
        });
        (quiet && !pause.is_zero()).then_some(pause)
    }

    /// The carrier, the segment, the window and the root's pace, for logs.
    pub fn describe(&self) -> String {
        let pace = match self.agreed.config.rate {
            Some(bytes_per_s) => format!("paced at {} kbit/s", bytes_per_s * 8 / 1000),
            None => "unpaced (no rank knows its link's rate)".to_string(),
        };
        format!(
            "{}, segments of {} bytes, window {}, {pace}",
            self.agreed.carrier.describe(),
            self.agreed.segment,
            self.agreed.config.window
        )
    }

    /// For a stall report: every multicast broadcast in flight here, how far it got.
    pub fn describe_running(&self) -> String {
        self.running
            .iter()
            .map(|(seq, r)| {
                format!(
                    "multicast {seq}: root {}, {} bytes, {} of {} segments landed, holds all {}, {:?}, {:?}",
                    r.ident.root,
                    r.ident.msize,
                    r.landed,
                    r.member.segments(),
                    r.member.holds_all(),
                    r.member.state(),
                    r.member.stats()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// This rank's place in the ack tree of a broadcast from `root`.
    fn shape(&mut self, root: usize) -> crate::Result<Shape> {
        if !self.trees.contains_key(&root) {
            let lane = crate::plan::multicast::ack_tree(&self.agreed.topology, root)?;
            self.trees.insert(root, lane);
        }
        let lane = &self.trees[&root];
        Ok(Shape {
            me: self.me,
            root,
            parent: lane.parents.get(self.me).copied().flatten(),
            children: lane.children.get(self.me).cloned().unwrap_or_default(),
        })
    }

    /// Starts broadcast `seq` of `msize` bytes from `root` (its buffer is posted in `bufs`)
    /// and hands it what arrived for it early.
    pub fn start(
        &mut self,
        seq: u64,
        root: usize,
        msize: u64,
        now: u64,
        bufs: &mut Buffers,
    ) -> crate::Result<()> {
        if root >= self.size {
            return Err(crate::plan::PlanError::BadRoot {
                root,
                size: self.size,
            }
            .into());
        }
        let shape = self.shape(root)?;
        let segment = self.agreed.segment;
        if segment as usize > MAX_PAYLOAD {
            return Err(EngineError::BadPlan(format!(
                "multicast segments of {segment} bytes: a data frame carries {MAX_PAYLOAD} at most"
            ))
            .into());
        }
        let config = Config {
            spare: self.spare,
            seen_loss: self.lossy,
            tokens: self
                .bucket
                .as_ref()
                .filter(|_| root == self.me)
                .map(|b| b.level(now)),
            ..self.agreed.config
        };
        let member = Member::new(shape, msize, segment, config, now)
            .map_err(|e| EngineError::BadPlan(e.to_string()))?;
        let last = self.posted.entry(comm_of(seq)).or_insert(0);
        *last = (*last).max(seq_of(seq));
        let ident = Ident {
            cookie: self.agreed.cookie,
            bseq: seq,
            root,
            msize,
            segment,
            me: self.me,
        };
        self.running.insert(
            seq,
            Running {
                member,
                ident,
                stalled: VecDeque::new(),
                landed: 0,
                trace: tracing::enabled!(tracing::Level::DEBUG).then(|| {
                    Box::new(Trace {
                        posted: wall_us(),
                        ..Trace::default()
                    })
                }),
            },
        );
        // Older ones will never be posted on this communicator: their space is free.
        let comm = comm_of(seq);
        let stale: Vec<u64> = self
            .early
            .keys()
            .copied()
            .filter(|&n| comm_of(n) == comm && seq_of(n) <= seq_of(seq))
            .collect();
        for n in stale {
            let frames = self.early.remove(&n).unwrap_or_default();
            self.early_bytes -= frames.iter().map(|f| early_cost(&f.2)).sum::<usize>();
            if n == seq {
                for (from, repr, payload) in frames {
                    self.deliver(seq, from, &repr, &payload, now, bufs)?;
                }
            }
        }
        Ok(())
    }

    pub fn runs(&self, seq: u64) -> bool {
        self.running.contains_key(&seq)
    }

    /// Whether broadcast `seq` is complete here (and in this rank's subtree).
    pub fn is_done(&self, seq: u64) -> bool {
        self.running
            .get(&seq)
            .is_some_and(|r| matches!(r.member.state(), State::Complete))
    }

    /// Forgets broadcast `seq` (complete, or failed with the engine), remembering it as
    /// finished when it completed.
    pub fn finish(&mut self, seq: u64) {
        let Some(r) = self.running.remove(&seq) else {
            return;
        };
        if let Some(t) = &r.trace {
            let s = r.member.stats();
            tracing::debug!(
                rank = self.me,
                seq,
                root = r.ident.root,
                bytes = r.ident.msize,
                posted = t.posted,
                first = t.first.saturating_sub(t.posted),
                all = t.all.saturating_sub(t.posted),
                late_rounds = t.late.rounds,
                late_over_1ms = t.late.over_1ms,
                late_over_bucket = t.late.over_bucket,
                late_max = t.late.max_us,
                late_beyond_bucket = t.late.beyond_us,
                pace_lost = r.member.uplink().lost() / 1000,
                pace_caught = r.member.uplink().caught() / 1000,
                stalls = t.stalls,
                stalled = t.stalled_us,
                complete = t.complete.saturating_sub(t.posted),
                finish = wall_us().saturating_sub(t.posted),
                sent = s.sent,
                repairs = s.repairs,
                group_repairs = s.group_repairs,
                nacks = s.nacks,
                acks = s.acks,
                syncs = s.syncs,
                duplicates = s.duplicates,
                suppressed = s.suppressed,
                spare = s.spare,
                "multicast trace (µs after posted)"
            );
        }
        self.lossy |= saw_loss(&r.member.stats(), r.member.spare());
        if matches!(r.member.state(), State::Complete) {
            // The loss this rank saw: the next broadcast it roots starts paced for it (as a
            // receiver: only that there was loss, `Pace::carried`).
            self.spare =
                crate::model::multicast::PACE.carried(r.member.is_root(), r.member.spare());
            if r.member.is_root() {
                self.bucket = Some(r.member.uplink().clone());
            }
            let segments = u64::from(r.member.segments());
            self.finished
                .insert(seq, (segments, r.ident.root as u32, r.ident.msize));
            self.order.push_back(seq);
            while self.order.len() > FINISHED_KEPT {
                if let Some(old) = self.order.pop_front() {
                    self.finished.remove(&old);
                }
            }
        }
    }

    /// Forgets communicator `comm` (dropped, its broadcasts over here): its id may be reused,
    /// and its numbers start again, so nothing of its old broadcasts may answer for the new
    /// ones (as `Endpoint::forget`).
    pub fn forget(&mut self, comm: u32) {
        self.posted.remove(&comm);
        self.finished.retain(|&n, _| comm_of(n) != comm);
        self.order.retain(|&n| comm_of(n) != comm);
        let gone: Vec<u64> = self
            .early
            .keys()
            .copied()
            .filter(|&n| comm_of(n) == comm)
            .collect();
        for n in gone {
            let frames = self.early.remove(&n).unwrap_or_default();
            self.early_bytes -= frames.iter().map(|f| early_cost(&f.2)).sum::<usize>();
        }
    }

    /// Forgets every broadcast in flight and every early frame (the engine failed).
    pub fn clear(&mut self) {
        self.running.clear();
        self.early.clear();
        self.early_bytes = 0;
    }

    /// How long the next round may wait at most (`None`: until a frame arrives).
    pub fn wait(&self, now: u64) -> Option<Duration> {
        let mut at: Option<u64> = None;
        for r in self.running.values() {
            if !r.stalled.is_empty() {
                return Some(SEND_RETRY);
            }
            if let Some(t) = r.member.poll_timeout(now) {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        }
        at.map(|t| Duration::from_nanos(t.saturating_sub(now)))
    }

    /// Counters (`mcast_*`) for `Comm::transport_counters`.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let d = self.drops;
        [
            ("mcast_frames_sent", self.sent),
            ("mcast_frames_received", self.received),
            ("mcast_drop_malformed", d.malformed),
            ("mcast_drop_checksum", d.checksum),
            ("mcast_drop_foreign", d.foreign),
            ("mcast_drop_other_rank", d.other_rank),
            ("mcast_drop_spoofed", d.spoofed),
            (
                "mcast_kernel_drops",
                self.agreed.carrier.drops().unwrap_or(0),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// One round: what arrived, the timers, what is due to be sent. An error fails the engine.
    pub fn drive(&mut self, clock: &dyn Fn() -> u64, bufs: &mut Buffers) -> crate::Result<()> {
        self.landed = false;
        let woke = clock();
        for r in self.running.values_mut() {
            if let (Some(t), true) = (r.trace.as_deref_mut(), r.member.is_root()) {
                let p = r.member.uplink();
                let bucket_ns = p.rate().map_or(0, |rate| {
                    p.burst().saturating_mul(1_000_000_000) / rate.max(1)
                });
                t.late.woke(woke, bucket_ns);
            }
        }
        self.receive(woke, bufs)?;
        let now = clock();
        for r in self.running.values_mut() {
            if r.member.poll_timeout(now).is_some_and(|t| t <= now) {
                r.member.handle_timeout(now);
            }
        }
        // Each running broadcast in order (no list allocated per round).
        let mut next = self.running.keys().next().copied();
        while let Some(seq) = next {
            self.transmit(seq, now, bufs)?;
            let r = self.running.get_mut(&seq).expect("running");
            if let Some(t) = r.trace.as_deref_mut() {
                if t.complete == 0 && matches!(r.member.state(), State::Complete) {
                    t.complete = wall_us();
                }
                let left = r.member.stats().sent < u64::from(r.member.segments());
                if r.member.is_root() && left {
                    t.late.due = r.member.poll_timeout(now);
                }
            }
            let r = &self.running[&seq];
            if let State::Failed(e) = r.member.state() {
                return Err(gone(seq, e));
            }
            next = self
                .running
                .range((std::ops::Bound::Excluded(seq), std::ops::Bound::Unbounded))
                .next()
                .map(|(&s, _)| s);
        }
        Ok(())
    }

    fn receive(&mut self, now: u64, bufs: &mut Buffers) -> crate::Result<()> {
        // Where the carrier can, its frames are checked where they arrived and a data frame's
        // payload is copied once, to its place in the buffer (from a raw Ethernet ring: the
        // only copy of the receiving thread's); the carrier is lent out meanwhile.
        let mut carrier = std::mem::replace(&mut self.agreed.carrier, Box::new(Detached));
        let visited = self.visit(&mut *carrier, now, bufs);
        self.agreed.carrier = carrier;
        let visited = visited?;
        // Control frames met on the way, now that the carrier can answer them.
        let mut deferred = std::mem::take(&mut self.deferred);
        let mut result = Ok(());
        for (source, bytes) in deferred.drain(..) {
            if result.is_ok() {
                result = self.handle_frame(&bytes, &source, now, bufs);
            }
            if self.deferred_spare.len() < DEFERRED_KEPT {
                self.deferred_spare.push(bytes);
            }
        }
        self.deferred = deferred;
        result?;
        if visited {
            return Ok(());
        }
        let mut rx = std::mem::replace(&mut self.rx, Batch::new(1, 1));
        let result = self.receive_into(&mut rx, now, bufs);
        self.rx = rx;
        result
    }

    /// Visits what waits in `carrier` in place ([`Carrier::visit`]): data frames to their
    /// member and buffer at once, control frames kept for after (`deferred`: they may need
    /// the carrier to answer). `false` when the carrier cannot be visited.
    fn visit(
        &mut self,
        carrier: &mut dyn Carrier,
        now: u64,
        bufs: &mut Buffers,
    ) -> crate::Result<bool> {
        let sums = carrier.checksums_payload();
        let mut read = 0;
        let mut failed = None;
        while read < READS_PER_ROUND && failed.is_none() {
            let max = READS_PER_ROUND - read;
            let took = carrier
                .visit(max, &mut |bytes, source, is_rank| {
                    if failed.is_some() {
                        return;
                    }
                    if let Err(e) = self.take_in_place(bytes, &source, is_rank, sums, now, bufs) {
                        failed = Some(e);
                    }
                })
                .map_err(|e| io_error(None, "receive", &e))?;
            let Some(took) = took else {
                return Ok(false);
            };
            read += took;
            if took == 0 {
                // The carrier had no more (a port's `recvmmsg` takes one batch a call: asked
                // again until it finds nothing).
                break;
            }
        }
        failed.map_or(Ok(true), Err)
    }

    /// A frame where it arrived: checked (`accept`) before anything in it is read; a data
    /// frame handled at once, a control frame copied into `deferred`.
    fn take_in_place(
        &mut self,
        bytes: &[u8],
        source: &Source,
        is_rank: &dyn Fn(usize, &Source) -> bool,
        sums: bool,
        now: u64,
        bufs: &mut Buffers,
    ) -> crate::Result<()> {
        match accept_unsummed(bytes, source, self.me, self.agreed.cookie, is_rank, sums) {
            Ok(Accepted::Unsummed(frame)) => self.take_unsummed(frame, now, bufs),
            Ok(Accepted::Checked(repr @ Header::Data(_), payload)) => {
                self.take_accepted(repr, payload, now, bufs)
            }
            Ok(Accepted::Checked(Header::Control(_), _)) => {
                let mut v = self.deferred_spare.pop().unwrap_or_default();
                v.clear();
                v.extend_from_slice(bytes);
                self.deferred.push((*source, v));
                Ok(())
            }
            Err(d) => {
                self.drops.count(d);
                Ok(())
            }
        }
    }

    /// Reads what waits (into `rx`, a batch at a time) and hands it on.
    fn receive_into(&mut self, rx: &mut Batch, now: u64, bufs: &mut Buffers) -> crate::Result<()> {
        let mut read = 0;
        while read < READS_PER_ROUND {
            rx.clear();
            let n = self
                .agreed
                .carrier
                .recv_batch(rx)
                .map_err(|e| io_error(None, "receive", &e))?;
            if n == 0 {
                return Ok(());
            }
            read += n;
            for i in 0..rx.len() {
                let (bytes, source) = rx.get(i);
                self.handle_frame(bytes, &source, now, bufs)?;
            }
            if rx.len() < rx.capacity() {
                // The carrier had no more: asking again now would find nothing.
                return Ok(());
            }
        }
        Ok(())
    }

    /// One arrived frame: checked (`accept`), then to its broadcast's member, answered for a
    /// broadcast this rank holds none for, or kept for one not posted yet.
    fn handle_frame(
        &mut self,
        bytes: &[u8],
        source: &Source,
        now: u64,
        bufs: &mut Buffers,
    ) -> crate::Result<()> {
        let carrier = &self.agreed.carrier;
        let is_rank = |p: usize, s: &Source| carrier.is_rank(p, s);
        let sums = carrier.checksums_payload();
        let accepted = accept_with(bytes, source, self.me, self.agreed.cookie, &is_rank, sums);
        match accepted {
            Ok((repr, payload)) => self.take_accepted(repr, payload, now, bufs),
            Err(d) => {
                self.drops.count(d);
                Ok(())
            }
        }
    }

    /// A data frame checked in everything but its payload's CRC
    /// ([`accept_unsummed`]): where it is a segment of a running broadcast that this rank
    /// would land, its payload is copied to the segment's place and its CRC checked on the
    /// way, and the segment counts as landed only when the CRC matched (a bad copy leaves a
    /// segment that is not landed, which the good copy overwrites). Any other frame is
    /// checked whole first and handled as before.
    fn take_unsummed(
        &mut self,
        frame: Unsummed<'_>,
        now: u64,
        bufs: &mut Buffers,
    ) -> crate::Result<()> {
        let d = *frame.header();
        let (from, seq) = (d.from as usize, d.bseq);
        let place = self.running.get(&seq).and_then(|r| {
            let fits = from != self.me
                && from < self.size
                && r.ident.matches(&Header::Data(d))
                && d.index < r.member.segments()
                && r.member.segment_range(d.index).len() == frame.payload_len()
                && r.member.would_land(from, d.index);
            fits.then(|| r.member.segment_range(d.index))
        });
        let Some(range) = place else {
            return match frame.verify() {
                Ok((repr, payload)) => self.take_accepted(repr, payload, now, bufs),
                Err(e) => {
                    self.drops.count(e);
                    Ok(())
                }
            };
        };
        let buf = bufs
            .get_mut(&seq)
            .expect("a running broadcast has a buffer")
            .as_mut_slice();
        if let Err(e) = frame.land(&mut buf[range]) {
            self.drops.count(e);
            return Ok(());
        }
        self.received += 1;
        self.landed = true;
        let r = self.running.get_mut(&seq).expect("running");
        let landed = Self::landed(r, now, from, d.index);
        debug_assert!(landed.is_some(), "would_land said it would");
        Ok(())
    }

    /// Marks segment `index` from `from` landed in `r`'s member: its range where it is new
    /// (the caller's bytes are, or go, there), `None` for a duplicate.
    fn landed(
        r: &mut Running,
        now: u64,
        from: usize,
        index: u32,
    ) -> Option<std::ops::Range<usize>> {
        let range = r.member.land(now, from, index)?;
        r.landed += 1;
        if let Some(t) = r.trace.as_deref_mut() {
            if r.landed == 1 {
                t.first = wall_us();
            }
            if r.landed == r.member.segments() {
                t.all = wall_us();
            }
        }
        Some(range)
    }

    /// A frame [`accept`](crate::transport::mcast::accept) took: to its broadcast's member,
    /// answered for a broadcast this rank holds none for, or kept for one not posted yet.
    fn take_accepted(
        &mut self,
        repr: Header,
        payload: &[u8],
        now: u64,
        bufs: &mut Buffers,
    ) -> crate::Result<()> {
        let from = repr.from() as usize;
        if from == self.me || from >= self.size {
            // Our own group frame, looped back to a host whose ranks share it.
            return Ok(());
        }
        let Some(msg) = decode(&repr) else {
            return Ok(()); // a probe's straggler
        };
        self.received += 1;
        let seq = repr.bseq();
        if self.running.contains_key(&seq) {
            self.deliver(seq, from, &repr, payload, now, bufs)?;
        } else if self.answer_absent(seq, &repr, from, msg)?
            && self.early_bytes + early_cost(payload) <= EARLY_BYTES
        {
            self.early_bytes += early_cost(payload);
            let payload = payload.to_vec();
            self.early
                .entry(seq)
                .or_default()
                .push((from, repr, payload));
        }
        Ok(())
    }

    /// A frame of running broadcast `seq` from `from`, to its member (data into the buffer).
    fn deliver(
        &mut self,
        seq: u64,
        from: usize,
        repr: &Header,
        payload: &[u8],
        now: u64,
        bufs: &mut Buffers,
    ) -> crate::Result<()> {
        let Some(msg) = decode(repr) else {
            return Ok(());
        };
        let Some(r) = self.running.get_mut(&seq) else {
            return Ok(());
        };
        if let Some((what, ours, theirs)) = r.ident.mismatch(repr) {
            return Err(EngineError::Mismatch {
                seq,
                what,
                peer: from,
                ours,
                theirs,
            }
            .into());
        }
        match msg {
            Msg::Data { index, .. } => {
                if index >= r.member.segments()
                    || r.member.segment_range(index).len() != payload.len()
                {
                    self.drops.count(Dropped::Malformed);
                    return Ok(());
                }
                self.landed = true;
                if let Some(range) = Self::landed(r, now, from, index) {
                    let buf = bufs
                        .get_mut(&seq)
                        .expect("a running broadcast has a buffer")
                        .as_mut_slice();
                    buf[range].copy_from_slice(payload);
                }
            }
            other => r.member.handle(now, from, other),
        }
        Ok(())
    }

    /// Answers `msg` of broadcast `seq`, for which this rank holds no member; `true` when
    /// that broadcast is not posted here yet (its frames are worth keeping).
    fn answer_absent(
        &mut self,
        seq: u64,
        header: &Header,
        from: usize,
        msg: Msg,
    ) -> crate::Result<bool> {
        let posted = self
            .posted
            .get(&comm_of(seq))
            .is_some_and(|&s| seq_of(seq) <= s);
        let not_yet = !self.finished.contains_key(&seq) && !posted;
        let repr = match header {
            // Nothing answers data (`absent_answer`): kept while not posted, its root and
            // sizes checked once it is.
            Header::Data(_) => return Ok(not_yet),
            Header::Control(r) => r,
        };
        let root = repr.root as usize;
        if root >= self.size {
            return Ok(false);
        }
        let absent = match self.finished.get(&seq) {
            // The same root and size: this rank's finished broadcast (a number of a dropped
            // communicator whose id came back would name another one: not answered for it).
            Some(&(segments, root, msize)) if root == repr.root && msize == repr.msize => {
                Absent::Finished { segments }
            }
            Some(_) => return Ok(false),
            // Finished long ago (or failed with the engine).
            None if !not_yet => return Ok(false),
            None => Absent::NotYet,
        };
        let parent = self.shape(root)?.parent;
        if let Some(out) = absent_answer(parent, absent, from, msg) {
            let ident = Ident {
                cookie: self.agreed.cookie,
                bseq: seq,
                root,
                msize: repr.msize,
                segment: repr.segment,
                me: self.me,
            };
            let header = ident
                .encode(&out, 0)
                .to_bytes(&[])
                .map_err(|e| io_error(Some(from), "answer", &std::io::Error::other(e)))?;
            // Best effort: the asker asks again.
            let sent = self
                .agreed
                .carrier
                .send(out.to, &header, &[])
                .map_err(|e| io_error(Some(from), "send", &e))?;
            self.sent += u64::from(sent);
        }
        Ok(absent == Absent::NotYet)
    }

    /// Sends what broadcast `seq`'s member has to send, until the carrier is full.
    /// Consecutive group data frames (up to [`GROUP_BATCH`]) go to the carrier together
    /// ([`Carrier::send_group`]: UDP GSO): only what the member released in this round, each
    /// frame as it would leave alone.
    fn transmit(&mut self, seq: u64, now: u64, bufs: &Buffers) -> crate::Result<()> {
        let Some(r) = self.running.get_mut(&seq) else {
            return Ok(());
        };
        let buf = bufs
            .get(&seq)
            .expect("a running broadcast has a buffer")
            .as_slice();
        // Group data frames gathered and not yet handed to the carrier: each with its header.
        let mut batch: Vec<(Out, HeaderBytes)> = Vec::with_capacity(GROUP_BATCH);
        loop {
            let next = r
                .stalled
                .pop_front()
                .or_else(|| r.member.poll_transmit(now));
            let group_data = matches!(
                next,
                Some(Out {
                    to: crate::engine::multicast::To::Group,
                    msg: Msg::Data { .. },
                })
            );
            if !batch.is_empty() && (!group_data || batch.len() == GROUP_BATCH) {
                let frames: Vec<(&[u8], &[u8])> = batch
                    .iter()
                    .map(|(out, header)| (&header[..], payload_of(r, buf, out)))
                    .collect();
                let left = self
                    .agreed
                    .carrier
                    .send_group(&frames)
                    .map_err(|e| io_error(None, "send", &e))?;
                drop(frames);
                for (out, _) in &batch[..left] {
                    self.sent += 1;
                    sent_one(r, out, None);
                }
                if left < batch.len() {
                    // The carrier is full: what did not leave is sent first next time, in
                    // order, before what the member had not yet handed out.
                    if let Some(out) = next {
                        r.stalled.push_front(out);
                    }
                    for (out, _) in batch.drain(left..).rev() {
                        r.stalled.push_front(out);
                    }
                    stall(r);
                    return Ok(());
                }
                batch.clear();
            }
            let Some(out) = next else {
                return Ok(());
            };
            let payload = payload_of(r, buf, &out);
            let mut repr = r.ident.encode(&out, payload.len());
            if let (Header::Data(d), true) = (&mut repr, self.agreed.header_sum) {
                // Every rank's carrier checksums the payload (UDP; raw Ethernet where every
                // NIC checks the FCS): the CRC covers the header alone.
                d.flags |= crate::wire::mcast::flags::HEADER_SUM;
            }
            let peer = match out.to {
                crate::engine::multicast::To::Rank(p) => Some(p),
                crate::engine::multicast::To::Group => None,
            };
            let header = repr
                .to_bytes(payload)
                .map_err(|e| io_error(peer, "frame", &std::io::Error::other(e)))?;
            if group_data {
                batch.push((out, header));
                continue;
            }
            match self.agreed.carrier.send(out.to, &header, payload) {
                Ok(true) => {
                    self.sent += 1;
                    sent_one(r, &out, peer);
                }
                Ok(false) => {
                    stall(r);
                    r.stalled.push_front(out);
                    return Ok(());
                }
                Err(e) => return Err(io_error(peer, "send", &e)),
            }
        }
    }
}

/// Group data frames [`Multicast::transmit`] hands the carrier together at most (one UDP GSO
/// send: the kernel takes 64 segments and 64 KiB at most).
const GROUP_BATCH: usize = crate::transport::mcast::udp::GSO_SEGMENTS;

/// The payload `out` carries: its segment of `buf` for data, none else.
fn payload_of<'a>(r: &Running, buf: &'a [u8], out: &Out) -> &'a [u8] {
    match out.msg {
        Msg::Data { index, .. } => &buf[r.member.segment_range(index)],
        _ => &[],
    }
}

/// Notes in `r`'s trace that `out` (to `peer`, `None`: the group) left.
fn sent_one(r: &mut Running, out: &Out, peer: Option<usize>) {
    if let Some(t) = r.trace.as_deref_mut() {
        if let Some(at) = t.stalled_at.take() {
            t.stalled_us += wall_us().saturating_sub(at);
        }
    }
    if let (
        Some(t),
        Msg::Data {
            index,
            repair: false,
        },
        None,
    ) = (r.trace.as_deref_mut(), out.msg, peer)
    {
        // The root's own segments, when they left (not when the member handed them out: one
        // the carrier had no room for leaves later).
        if t.first == 0 {
            t.first = wall_us();
        }
        if index + 1 == r.member.segments() {
            t.all = wall_us();
        }
    }
}

/// Notes in `r`'s trace that the carrier was full.
fn stall(r: &mut Running) {
    if let Some(t) = r.trace.as_deref_mut() {
        t.stalls += 1;
        t.stalled_at.get_or_insert_with(wall_us);
    }
}

/// Whether a broadcast with these `stats` and final `spare` saw loss at this rank: a NACK, a
/// repair (sent or asked for) or a spare. Duplicates and late ranks are no loss.
fn saw_loss(stats: &crate::engine::multicast::Stats, spare: u32) -> bool {
    stats.nacks > 0 || stats.repairs > 0 || stats.group_repairs > 0 || spare > 0
}

/// [`Multicast::coalesce`]'s longest wait for a protocol `config` with `segment`-byte
/// segments: an eighth of the window's time at the paced rate, so the root's credit never
/// runs dry for it, at most [`COALESCE_MOST`].
fn coalesce_for(config: Config, segment: u32) -> Duration {
    let most = COALESCE_MOST;
    match config.rate {
        Some(rate) if rate > 0 => {
            let window_ns = u128::from(config.window)
                * u128::from(u64::from(segment) + DATA_HEADER_LEN as u64)
                * 1_000_000_000
                / u128::from(rate);
            Duration::from_nanos((window_ns / 8).min(most.as_nanos()) as u64)
        }
        // Unpaced: the link's rate is unknown; a fifth of the longest.
        _ => most / 5,
    }
}

/// The longest a receiving rank lets frames gather. (4 ms, measured on the 16-machine lab:
/// a quarter less CPU per broadcast, but 1.12 × T(m) at 4 and 16 MiB against 1.03-1.05.)
const COALESCE_MOST: Duration = Duration::from_millis(1);

/// One segment's time at the paced `rate` (bytes per second; zero when unpaced).
fn per_segment(rate: Option<u64>, segment: u32) -> Duration {
    match rate {
        Some(rate) if rate > 0 => Duration::from_nanos(
            (u128::from(u64::from(segment) + DATA_HEADER_LEN as u64) * 1_000_000_000
                / u128::from(rate)) as u64,
        ),
        _ => Duration::ZERO,
    }
}

/// What an early frame costs of [`EARLY_BYTES`].
fn early_cost(payload: &[u8]) -> usize {
    payload.len() + HEADER_LEN
}

fn io_error(peer: Option<usize>, what: &str, e: &std::io::Error) -> crate::Error {
    TransportError::Io {
        peer,
        error: format!("multicast {what}: {e}"),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1 of two on the in-memory switch, receiving through the raw Ethernet carrier
    /// (which leaves the payload's CRC to the frame), and rank 0's carrier to send from.
    fn receiver(
        segment: u32,
    ) -> (
        Multicast,
        crate::transport::mcast::ether::EtherCarrier<crate::transport::raweth::medium::MemoryPort>,
    ) {
        use crate::transport::mcast::ether::EtherCarrier;
        use crate::transport::raweth::medium::{Impairments, Medium};
        let group = [0x03, 0x50, 0x32, 0, 0, 9];
        let macs = vec![[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        let medium = Medium::new(4096, Impairments::default());
        let a = medium.port("r0", macs[0], 9000).unwrap();
        let b = medium.port("r1", macs[1], 9000).unwrap();
        b.join(group);
        let mut tx = EtherCarrier::on_port(a, group);
        let mut rx = EtherCarrier::on_port(b, group);
        tx.set_peers(macs.clone());
        rx.set_peers(macs);
        let agreed = Agreed {
            carrier: Box::new(rx),
            cookie: COOKIE,
            segment,
            config: Config::default(),
            topology: Topology::single_switch(2),
            header_sum: false,
        };
        (Multicast::new(1, agreed), tx)
    }

    const COOKIE: u64 = 0x3232_0032;

    /// Rank 0's data frame of segment `index` of broadcast `seq` (`msize` bytes), with
    /// `payload` as its bytes and, where `corrupt`, one payload bit (or, empty, one of its
    /// checksum) flipped after the CRC.
    fn data_frame(
        seq: u64,
        msize: u64,
        segment: u32,
        index: u32,
        payload: &[u8],
        corrupt: bool,
    ) -> (Vec<u8>, Vec<u8>) {
        let ident = Ident {
            cookie: COOKIE,
            bseq: seq,
            root: 0,
            msize,
            segment,
            me: 0,
        };
        let out = Out {
            to: crate::engine::multicast::To::Group,
            msg: Msg::Data {
                index,
                repair: false,
            },
        };
        let mut header = ident
            .encode(&out, payload.len())
            .to_bytes(payload)
            .unwrap()
            .to_vec();
        let mut payload = payload.to_vec();
        match (corrupt, payload.len()) {
            (false, _) => {}
            // An empty payload: the checksum itself is wrong.
            (true, 0) => header[DATA_HEADER_LEN - 1] ^= 0x10,
            (true, n) => payload[n / 2] ^= 0x10,
        }
        (header, payload)
    }

    fn pattern(n: usize, salt: u8) -> Vec<u8> {
        (0..n).map(|i| (i * 31 + i / 7) as u8 ^ salt).collect()
    }

    /// The raw Ethernet path lands a payload and checks its CRC in one step
    /// (`take_unsummed`): a frame whose payload fails its CRC never counts as landed, and the
    /// good copy that follows overwrites what it left; a copy, good or bad, of a segment
    /// already landed leaves it as it is; every size, the last segment short, lands whole.
    #[test]
    fn a_payload_lands_with_its_crc_checked_on_the_way_and_a_bad_one_never_counts() {
        let segment = 1000u32;
        for msize in [0usize, 1, 999, 1000, 2 * 1000 + 7] {
            let (mut m, mut tx) = receiver(segment);
            let seq = crate::engine::number::number(0, 1);
            let mut bufs = Buffers::new();
            let fill = vec![0xEEu8; msize];
            bufs.insert(seq, crate::transport::Buffer::Owned(fill));
            m.start(seq, 0, msize as u64, 0, &mut bufs).unwrap();
            let data = pattern(msize, 0x5A);
            // A message of 0 bytes is one empty segment.
            let segments = m.running[&seq].member.segments();
            assert_eq!(segments as usize, msize.div_ceil(segment as usize).max(1));
            let range = |i: u32| {
                let s = (i * segment) as usize;
                s..(s + segment as usize).min(msize)
            };
            let mut send = |i: u32, bytes: &[u8], corrupt: bool| {
                let (h, p) = data_frame(seq, msize as u64, segment, i, bytes, corrupt);
                assert!(tx
                    .send(crate::engine::multicast::To::Group, &h, &p)
                    .unwrap());
            };
            let mut now = 1_000_000u64;
            let mut round = |m: &mut Multicast, bufs: &mut Buffers| {
                now += 1_000_000;
                let t = now;
                m.drive(&|| t, bufs).unwrap();
            };
            for i in 0..segments {
                // A corrupt copy first: dropped, the segment not landed.
                send(i, &data[range(i)], true);
                round(&mut m, &mut bufs);
                let r = &m.running[&seq];
                assert_eq!(
                    (r.landed, m.drops.checksum),
                    (i, 2 * u64::from(i) + 1),
                    "{msize} {i}"
                );
                assert!(r.member.would_land(0, i));
                // The good copy lands it, over whatever the bad one left.
                send(i, &data[range(i)], false);
                round(&mut m, &mut bufs);
                assert_eq!(m.running[&seq].landed, i + 1, "{msize} {i}");
                assert_eq!(&bufs[&seq].as_slice()[range(i)], &data[range(i)]);
                // Duplicates after it, a bad one and a good one with other bytes claimed
                // good by a correct CRC: neither touches the landed segment.
                send(i, &data[range(i)], true);
                let other = pattern(range(i).len(), 0xC3);
                send(i, &other, false);
                round(&mut m, &mut bufs);
                let r = &m.running[&seq];
                assert_eq!(r.landed, i + 1);
                assert_eq!(m.drops.checksum, 2 * u64::from(i) + 2, "{msize} {i}");
                assert_eq!(&bufs[&seq].as_slice()[range(i)], &data[range(i)]);
                assert!(r.member.stats().duplicates >= 1);
            }
            assert_eq!(bufs[&seq].as_slice(), &data[..], "{msize}");
            assert!(m.running[&seq].member.holds_all());
            assert_eq!(m.drops.malformed, 0);
        }
    }

    /// A frame that names a segment the payload does not fit is never copied: dropped as
    /// malformed (after its CRC, which it passes), the buffer as it was.
    #[test]
    fn a_payload_of_the_wrong_length_for_its_segment_is_not_landed() {
        let segment = 1000u32;
        let (mut m, mut tx) = receiver(segment);
        let seq = crate::engine::number::number(0, 1);
        let mut bufs = Buffers::new();
        bufs.insert(seq, crate::transport::Buffer::Owned(vec![0xEE; 1500]));
        m.start(seq, 0, 1500, 0, &mut bufs).unwrap();
        // Segment 1 holds 500 bytes; 600 claimed; and an index past the end.
        for (index, len) in [(1u32, 600usize), (2, 10)] {
            let (h, p) = data_frame(seq, 1500, segment, index, &pattern(len, 1), false);
            assert!(tx
                .send(crate::engine::multicast::To::Group, &h, &p)
                .unwrap());
        }
        m.drive(&|| 2_000_000, &mut bufs).unwrap();
        assert_eq!(m.running[&seq].landed, 0);
        assert_eq!((m.drops.malformed, m.drops.checksum), (2, 0));
        assert!(bufs[&seq].as_slice().iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn receivers_gather_frames_for_an_eighth_of_the_window_at_most_1_ms() {
        let paced = |window, rate| Config {
            window,
            rate: Some(rate),
            ..Config::default()
        };
        // 2979 segments at 100 Mbit/s take 350 ms: capped at 1 ms.
        assert_eq!(
            coalesce_for(paced(2979, 11_800_000), 1440),
            Duration::from_millis(1)
        );
        // 120 segments at 1 Gbit/s: 1.4 ms of window, 0.18 ms.
        let c = coalesce_for(paced(120, 118_000_000), 1440);
        assert!(
            c > Duration::from_micros(150) && c < Duration::from_micros(220),
            "{c:?}"
        );
        assert_eq!(
            coalesce_for(Config::default(), 1440),
            Duration::from_micros(200)
        );
    }

    #[test]
    fn loss_is_a_nack_a_repair_or_a_spare_never_a_duplicate() {
        use crate::engine::multicast::Stats;
        let clean = Stats {
            sent: 729,
            acks: 5,
            syncs: 1,
            duplicates: 3,
            ..Stats::default()
        };
        assert!(!saw_loss(&clean, 0));
        assert!(saw_loss(&Stats { nacks: 1, ..clean }, 0));
        assert!(saw_loss(
            &Stats {
                repairs: 2,
                ..clean
            },
            0
        ));
        assert!(saw_loss(
            &Stats {
                group_repairs: 1,
                ..clean
            },
            0
        ));
        assert!(saw_loss(&clean, 40));
    }

    #[test]
    fn the_protocol_counts_the_data_header_the_wire_writes() {
        assert_eq!(
            crate::engine::multicast::DATA_HEADER,
            DATA_HEADER_LEN as u64
        );
    }

    #[test]
    fn a_segment_takes_its_bytes_and_header_at_the_paced_rate() {
        // 1472 counted bytes at 12 MB/s: 122.7 µs.
        let t = per_segment(Some(12_000_000), 1440);
        assert_eq!(t, Duration::from_nanos(122_666));
        assert_eq!(per_segment(None, 1408), Duration::ZERO);
        assert_eq!(per_segment(Some(0), 1408), Duration::ZERO);
    }
}
