//! One multicast broadcast simulated (issue 32; `plan::multicast`, docs/multicast.md): the
//! root sends each segment once to the group and the switches copy it; seeded loss on every
//! link; NACK-driven unicast repair; acknowledgements aggregated up the ack tree; the root
//! paced by a credit window. Pure and deterministic: the same inputs and seed give the same
//! run, event for event.
//!
//! **The network.** Every directed edge of the topology is a [`SimLink`] (first in, first
//! out, at its rate; cut-through across switches), timed as [`super::simulate`] times the
//! trees: with a calibration profile a data frame of s bytes holds the sender's port for
//! g(s) and reaches its receiver L(s) after its last byte left; acknowledgements and NACKs
//! ([`ACK_BYTES`] + 4 bytes per segment named) are priced alike at their size. A **group
//! frame** leaves through the root's uplink; a switch that receives it puts a copy on each
//! of its links away from the root's switch and on the downlink of each of its machines but
//! the root, so every directed edge carries it once and every rank receives one copy. Rail 0.
//!
//! **Loss.** `loss` is the chance that one 1500-byte frame is lost on one link: a segment of
//! s bytes is lost on an edge with 1 − (1 − loss)^⌈(s + 40)/1500⌉ (each edge draws from its
//! own seeded generator). A group frame lost on a switch link is lost for every rank below.
//! Repairs are data frames and can be lost too; acknowledgements and NACKs are not (at
//! runtime they ride the link's reliable unicast).
//!
//! **Reliability** (the plan's lane is the ack tree):
//! The NACK and sync parameters are the runtime's
//! ([`model::multicast::REPAIR`](crate::model::multicast::REPAIR), `engine::multicast`'s
//! defaults):
//! * a receiver knows the segments sent up to the highest it got, or up to what the root's
//!   **status** frame (the runtime's sync) said: when the root has sent no segment for the
//!   sync interval and has not heard that everything arrived (its window is full, or the
//!   message is all sent), it sends the group a 40-byte status naming the segments sent so
//!   far, again every interval, and once right behind its last segment (a lost tail has no
//!   later segment to reveal it);
//! * a receiver missing some segment known sent sends its ack-tree parent a NACK naming it,
//!   the NACK delay after a later segment revealed the gap (reordering, at runtime) or at
//!   once when a status did; at most `nack_max` (64) segments per NACK, the rest once the
//!   parent had the time to send those; it asks again for one after 1, 2, 4, … 32 waits (a
//!   repair may be lost; backing off keeps a busy parent's port from being flooded with the
//!   same request), a wait being the NACK wait until the rank measured how long its repairs
//!   take, then that ([`RepairTime`], as the runtime);
//! * a parent holding a segment asked for sends it to the child by unicast unless a copy to
//!   that child is still on its port or left less than [`Repair::repair_hold`](crate::model::multicast::Repair::repair_hold)
//!   ago; one that does not hold it yet remembers the request, serves it when it gets the
//!   segment, and asks its own parent again at once if its own last request is that old (the root holds
//!   everything, so every request is served);
//! * the root is not paced below its port's rate (the runtime's `model::multicast::PACE`
//!   is not simulated);
//! * every rank reports to its parent the prefix of segments its whole subtree holds, when it
//!   grew by a quarter of the window or reached the end; the root's credit is the least of
//!   its children's reports;
//! * the root sends segment i only while i < credit + window ([`window_segments`]), one
//!   segment after another on its port, repairs between them as they are asked for.
//!
//! The broadcast is over when the root has heard that every rank holds every segment (it may
//! reuse its buffer only then). The simulator then **checks** that every rank holds every
//! segment and says which ones are missing otherwise ([`SimError::Undelivered`]).

use super::{EdgeUse, LinkModel, SimError, SimLink, Through, Timing, EDGE_LATENCY_NS};
use crate::model::multicast::{window_segments, RepairTime, ACK_BYTES, FRAME_BYTES, REPAIR};
use crate::model::Profile;
use crate::plan::{multicast, Plan, TreeKind};
use crate::topology::{DirEdge, MachineId, Topology};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;

/// Header bytes of a data frame (as [`super::net::HEADER_BYTES`]).
const HEADER: u64 = super::net::HEADER_BYTES as u64;

/// How a multicast run is set up beyond the plan and the timing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Chance that one 1500-byte frame is lost on one link (0 to 1).
    pub loss: f64,
    /// Seed of every edge's loss draws.
    pub seed: u64,
    /// Credit window in segments (`None`: [`window_segments`] of the segment size).
    pub window: Option<u64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            loss: 0.0,
            seed: 1,
            window: None,
        }
    }
}

/// What one simulated multicast broadcast did.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// When the root heard that every rank holds every segment (the broadcast is over), ns.
    pub completion_ns: u64,
    /// Per rank, when it held every segment (the root: 0).
    pub holds_ns: Vec<u64>,
    /// Segments of the message.
    pub segments: u64,
    /// Group frames the root sent (one per segment).
    pub group_frames: u64,
    /// Unicast repairs sent, by any rank.
    pub repairs: u64,
    /// Repairs the root sent (on its own port, between the group frames).
    pub root_repairs: u64,
    pub nacks: u64,
    pub acks: u64,
    /// Data frames (group copies or repairs) lost on some link.
    pub lost: u64,
    /// Segments a rank received while already holding them.
    pub duplicates: u64,
    /// Times the root had to wait for credit.
    pub stalls: u64,
    /// (rank, segment) pairs held at the end, checked to be (ranks − 1) × segments.
    pub delivered: u64,
    /// Every edge that carried something, by edge id.
    pub edges: Vec<EdgeUse>,
    /// The busiest edge.
    pub bottleneck: Option<EdgeUse>,
}

#[derive(Debug, Clone)]
enum Kind {
    Group {
        seg: u32,
    },
    Repair {
        seg: u32,
        to: u32,
    },
    Nack {
        from: u32,
        to: u32,
        segs: Arc<[u32]>,
    },
    Status {
        sent: u32,
    },
    Ack {
        from: u32,
        to: u32,
        prefix: u32,
    },
}

#[derive(Debug, Clone)]
struct Frame {
    kind: Kind,
    /// The unicast path (empty for group frames) and the edge it is on.
    path: Arc<[DirEdge]>,
    hop: u32,
    head: u64,
    tail: u64,
    lost: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival(u32),
    RootSend,
    RootStatus,
    /// A rank's NACK round may be due.
    Ask(u32),
}

/// What is at the far end of a directed edge.
#[derive(Debug, Clone, Copy)]
enum Head {
    Switch(usize),
    Machine(usize),
    Unused,
}

/// One rank's state.
#[derive(Debug, Default)]
struct Rank {
    /// Highest segment held + 1 (0: none).
    above: u32,
    /// Segments below `above` not held.
    gaps: BTreeSet<u32>,
    /// Segments known sent (the highest held + 1, or a status).
    known: u32,
    /// When each missing segment was last asked for, and how often (0: not yet; then the
    /// time it became known).
    asked: HashMap<u32, (u64, u32)>,
    /// No NACK round before this (the last one named `nack_max` segments).
    nack_round: u64,
    /// When the last copy of each (child, segment) repair leaves this rank's port.
    repaired: HashMap<(u32, u32), u64>,
    /// Requests from children for segments not held yet.
    pending: HashMap<u32, Vec<u32>>,
    /// Children's reported prefixes, in the ack tree's child order.
    reported: Vec<u32>,
    /// The prefix last reported to the parent.
    sent: u32,
    done_at: Option<u64>,
    /// How long this rank's repairs take (its retries wait that).
    repair_time: RepairTime,
}

impl Rank {
    fn holds(&self, seg: u32) -> bool {
        seg < self.above && !self.gaps.contains(&seg)
    }
    fn prefix(&self) -> u32 {
        self.gaps.first().copied().unwrap_or(self.above)
    }
    fn count(&self) -> u64 {
        u64::from(self.above) - self.gaps.len() as u64
    }
}

struct Sim<'a> {
    topology: &'a Topology,
    lane: &'a crate::plan::Lane,
    root: usize,
    msize: u64,
    segment: u64,
    x: u32,
    window: u32,
    ack_every: u32,
    profile: Option<&'a Profile>,
    links: Vec<SimLink<Frame>>,
    rngs: Vec<ChaCha8Rng>,
    loss: f64,
    head: Vec<Head>,
    fanout: Vec<Vec<DirEdge>>,
    paths: HashMap<(u32, u32), Arc<[DirEdge]>>,
    ranks: Vec<Rank>,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    order: u64,
    now: u64,
    next: u32,
    credit: u32,
    blocked: bool,
    acked_at: Option<u64>,
    /// The time a rank's port takes for `nack_max` repairs: the least time between two NACK
    /// rounds that named that many.
    round_ns: u64,
    /// When the root last sent a group frame.
    last_group: u64,
    report: Report,
}

/// Simulates one multicast broadcast of `msize` bytes in `segment`-byte segments along
/// `plan` (a [`TreeKind::Multicast`] plan: its lane is the ack tree) on `topology`.
pub fn simulate_multicast(
    topology: &Topology,
    plan: &Plan,
    msize: u64,
    segment: u64,
    timing: &Timing,
    options: Options,
) -> Result<Report, SimError> {
    let size = topology.size();
    if plan.tree != TreeKind::Multicast || plan.lanes.len() != 1 {
        return Err(SimError::NotMulticast(plan.tree.to_string()));
    }
    if plan.size() != size {
        return Err(SimError::Size {
            lanes: plan.size(),
            machines: size,
        });
    }
    if !(0.0..1.0).contains(&options.loss) {
        return Err(SimError::Loss(options.loss));
    }
    let gbps = timing.default_gbps();
    if !(gbps.is_finite() && gbps > 0.0) {
        return Err(SimError::Rate(gbps));
    }
    let segment = segment.clamp(1, msize.max(1));
    let x = msize.div_ceil(segment);
    let x = u32::try_from(x).map_err(|_| SimError::TooManySegments(x))?;
    let (latency, profile) = match timing {
        Timing::Rate { .. } => (EDGE_LATENCY_NS, None),
        Timing::Profile(p) => (0, Some(p)),
    };
    let links: Vec<SimLink<Frame>> = (0..topology.edge_count())
        .map(|e| {
            let g = topology
                .edge_gbps(DirEdge(e as u32))
                .filter(|g| g.is_finite() && *g > 0.0)
                .unwrap_or(gbps);
            SimLink::new(LinkModel::rate(g, latency), 0)
        })
        .collect();
    let rngs = (0..topology.edge_count())
        .map(|e| {
            ChaCha8Rng::seed_from_u64(options.seed ^ (e as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        })
        .collect();
    let window = options
        .window
        .unwrap_or_else(|| window_segments(segment))
        .clamp(1, u64::from(u32::MAX)) as u32;
    let one_segment = match profile {
        Some(p) => (p.cost(segment).g_us * 1000.0).round() as u64,
        None => LinkModel::rate(gbps, 0).wire_ns((segment + HEADER) as usize),
    };
    let round_ns = one_segment.saturating_mul(u64::from(REPAIR.nack_max.max(1)));
    let lane = &plan.lanes[0];
    let mut ranks: Vec<Rank> = (0..size)
        .map(|r| Rank {
            reported: vec![0; lane.children[r].len()],
            ..Rank::default()
        })
        .collect();
    ranks[plan.root].above = x;
    ranks[plan.root].done_at = Some(0);
    let mut sim = Sim {
        topology,
        lane,
        root: plan.root,
        msize,
        segment,
        x,
        window,
        ack_every: (window / 4).max(1),
        profile,
        links,
        rngs,
        loss: options.loss,
        head: heads(topology),
        fanout: fanout(topology, plan.root),
        paths: HashMap::new(),
        ranks,
        events: BinaryHeap::new(),
        order: 0,
        now: 0,
        next: 0,
        credit: 0,
        blocked: false,
        acked_at: None,
        round_ns,
        last_group: 0,
        report: Report {
            completion_ns: 0,
            holds_ns: vec![0; size],
            segments: u64::from(x),
            group_frames: 0,
            repairs: 0,
            root_repairs: 0,
            nacks: 0,
            acks: 0,
            lost: 0,
            duplicates: 0,
            stalls: 0,
            delivered: 0,
            edges: Vec::new(),
            bottleneck: None,
        },
    };
    sim.run()?;
    Ok(sim.report)
}

/// The far end of every directed edge (rail 0; other rails' edges are unused).
fn heads(t: &Topology) -> Vec<Head> {
    let mut head = vec![Head::Unused; t.edge_count()];
    for m in 0..t.size() {
        head[t.machine_up(m).0 as usize] = Head::Switch(t.switch_of(m));
        head[t.machine_down(m).0 as usize] = Head::Machine(m);
    }
    for s in 0..t.switches().len() {
        for &(n, l) in t.neighbours(s) {
            head[t.link_edge(l, s).0 as usize] = Head::Switch(n);
        }
    }
    head
}

/// Per switch, the edges it copies a group frame onto (`plan::multicast::group_edges`).
fn fanout(t: &Topology, root: MachineId) -> Vec<Vec<DirEdge>> {
    let mut out = vec![Vec::new(); t.switches().len()];
    for (s, from) in multicast::switch_order(t, root) {
        out[s].extend(
            t.machines_on(s)
                .filter(|&m| m != root)
                .map(|m| t.machine_down(m)),
        );
        if let Some(e) = from {
            // The frame came into `s` by `e`: its sender switch copies onto it.
            let up = t
                .neighbours(s)
                .iter()
                .find(|&&(n, l)| t.link_edge(l, n) == e)
                .map(|&(n, _)| n)
                .expect("a switch copied into has the link it came by");
            out[up].push(e);
        }
    }
    out
}

impl Sim<'_> {
    fn schedule(&mut self, at: u64, event: Event) {
        self.order += 1;
        self.events.push(Reverse((at, self.order, event)));
    }

    fn seg_bytes(&self, seg: u32) -> u64 {
        let start = u64::from(seg) * self.segment;
        self.segment.min(self.msize - start)
    }

    fn path(&mut self, from: u32, to: u32) -> Arc<[DirEdge]> {
        let t = self.topology;
        self.paths
            .entry((from, to))
            .or_insert_with(|| t.path(from as usize, to as usize).into())
            .clone()
    }

    /// Puts `frame` on edge `e` (hop `first` of its path: the sender's port; `last`: it ends
    /// at a machine).
    fn put(&mut self, e: DirEdge, mut frame: Frame, first: bool, last: bool) {
        let (bytes, data, payload) = match &frame.kind {
            Kind::Group { seg } | Kind::Repair { seg, .. } => {
                let b = self.seg_bytes(*seg);
                (b + HEADER, true, b)
            }
            Kind::Nack { segs, .. } => (ACK_BYTES + 4 * segs.len() as u64, false, ACK_BYTES),
            Kind::Ack { .. } | Kind::Status { .. } => (ACK_BYTES, false, ACK_BYTES),
        };
        let link = &self.links[e.0 as usize];
        let mut service = link.model().wire_ns(bytes as usize);
        let mut extra = 0;
        if let Some(p) = self.profile {
            let cost = p.cost(payload);
            if first {
                service = service.max((cost.g_us * 1000.0).round() as u64);
            }
            if last {
                // Group frames arrive in the order sent: a short last segment or a status
                // takes a whole segment's latency (a smaller L would let it overtake the
                // segments before it, and receivers would ask for segments on their way).
                let l = match frame.kind {
                    Kind::Status { .. } | Kind::Group { .. } => {
                        p.cost(self.segment).l_us.max(cost.l_us)
                    }
                    _ => cost.l_us,
                };
                extra = (l * 1000.0).round() as u64;
            }
        }
        if data && self.loss > 0.0 {
            let frames = bytes.div_ceil(FRAME_BYTES).max(1) as i32;
            let p = 1.0 - (1.0 - self.loss).powi(frames);
            if self.rngs[e.0 as usize].gen_bool(p.clamp(0.0, 1.0)) {
                frame.lost = true;
            }
        }
        let through = Through {
            head: frame.head,
            tail: frame.tail,
            service,
            extra,
            forward: !last,
        };
        let stamp = |f: &mut Frame, a, b| {
            f.head = a;
            f.tail = b;
        };
        let sent = self.links[e.0 as usize].send_through(through, frame, stamp);
        if let Some(at) = sent.arrivals[0] {
            self.schedule(at, Event::Arrival(e.0));
        }
    }

    /// Sends a unicast frame from `from` to `to` now.
    fn unicast(&mut self, from: u32, to: u32, kind: Kind) {
        let path = self.path(from, to);
        let frame = Frame {
            kind,
            path: path.clone(),
            hop: 0,
            head: self.now,
            tail: self.now,
            lost: false,
        };
        self.put(path[0], frame, true, path.len() == 1);
    }

    fn run(&mut self) -> Result<(), SimError> {
        let size = self.ranks.len();
        if size > 1 && self.x > 0 {
            self.schedule(0, Event::RootSend);
            self.schedule(REPAIR.sync_ns, Event::RootStatus);
        } else {
            self.acked_at = Some(0);
        }
        // Generous bounds: a run that needs more is stuck, never endless.
        let budget = (u64::from(self.x) + 16)
            .saturating_mul(size as u64 + 64)
            .saturating_mul(64)
            .saturating_add(10_000_000);
        let mut events = 0u64;
        while let Some(Reverse((at, _, event))) = self.events.pop() {
            self.now = at;
            events += 1;
            if events > budget {
                return Err(SimError::Stuck {
                    events,
                    at_ns: self.now,
                });
            }
            match event {
                Event::Arrival(e) => self.arrival(DirEdge(e)),
                Event::RootSend => self.root_send(),
                Event::RootStatus => self.root_status(),
                Event::Ask(r) => self.ask_missing(r),
            }
        }
        self.finish()
    }

    fn finish(&mut self) -> Result<(), SimError> {
        let x = self.x;
        let mut delivered = 0;
        for (r, rank) in self.ranks.iter().enumerate() {
            if r == self.root {
                continue;
            }
            delivered += rank.count();
            if rank.count() != u64::from(x) {
                let missing: Vec<u32> = (0..x).filter(|&s| !rank.holds(s)).take(8).collect();
                return Err(SimError::Undelivered {
                    rank: r,
                    missing: u64::from(x) - rank.count(),
                    first: missing,
                });
            }
            self.report.holds_ns[r] = rank.done_at.unwrap_or(0);
        }
        let Some(acked) = self.acked_at else {
            return Err(SimError::Unacknowledged);
        };
        self.report.delivered = delivered;
        let holds = self.report.holds_ns.iter().copied().max().unwrap_or(0);
        self.report.completion_ns = acked.max(holds);
        self.report.edges = self
            .links
            .iter()
            .enumerate()
            .filter(|(_, l)| l.stats().sent > 0)
            .map(|(e, l)| EdgeUse {
                edge: DirEdge(e as u32),
                busy_ns: l.stats().busy,
            })
            .collect();
        self.report.bottleneck =
            self.report
                .edges
                .iter()
                .copied()
                .reduce(|a, b| if b.busy_ns > a.busy_ns { b } else { a });
        Ok(())
    }

    fn root_send(&mut self) {
        if self.next >= self.x {
            return;
        }
        if u64::from(self.next) >= u64::from(self.credit) + u64::from(self.window) {
            if !self.blocked {
                self.blocked = true;
                self.report.stalls += 1;
            }
            return;
        }
        let seg = self.next;
        self.next += 1;
        self.report.group_frames += 1;
        let e = self.topology.machine_up(self.root);
        let frame = Frame {
            kind: Kind::Group { seg },
            path: Arc::from([]),
            hop: 0,
            head: self.now,
            tail: self.now,
            lost: false,
        };
        self.put(e, frame, true, false);
        self.last_group = self.now;
        if self.next == self.x {
            // The last segment: a status right behind it, as the runtime's sync.
            self.status();
        }
        // The next one when the port is free again (repairs asked for meanwhile go first).
        let free = self.links[e.0 as usize].free_at();
        self.schedule(free.max(self.now + 1), Event::RootSend);
    }

    fn arrival(&mut self, e: DirEdge) {
        let Some((_, frame)) = self.links[e.0 as usize].pop_arrived(self.now) else {
            return;
        };
        if frame.lost {
            self.report.lost += 1;
            return;
        }
        match (self.head[e.0 as usize], &frame.kind) {
            // Group frames and the root's status frames: the switch copies them to every port away
            // from the root.
            (Head::Switch(s), Kind::Group { .. } | Kind::Status { .. }) => {
                let outs = std::mem::take(&mut self.fanout[s]);
                for &out in &outs {
                    let last = matches!(self.head[out.0 as usize], Head::Machine(_));
                    self.put(out, frame.clone(), false, last);
                }
                self.fanout[s] = outs;
            }
            (Head::Machine(m), Kind::Group { seg }) => self.data(m as u32, *seg),
            (Head::Machine(m), Kind::Status { sent }) => {
                let rank = &mut self.ranks[m];
                rank.known = rank.known.max(*sent);
                self.ask_missing(m as u32);
            }
            (_, _) if (frame.hop as usize) + 1 < frame.path.len() => {
                let hop = frame.hop as usize + 1;
                let next = frame.path[hop];
                let last = hop + 1 == frame.path.len();
                let frame = Frame {
                    hop: hop as u32,
                    ..frame
                };
                self.put(next, frame, false, last);
            }
            (_, Kind::Repair { seg, to }) => self.data(*to, *seg),
            (_, Kind::Nack { from, to, segs }) => {
                let segs = segs.clone();
                self.nack(*to, *from, &segs)
            }
            (_, Kind::Ack { from, to, prefix }) => self.ack(*to, *from, *prefix),
            (_, Kind::Group { .. } | Kind::Status { .. }) => {}
        }
    }

    /// Rank `r` receives segment `seg`.
    fn data(&mut self, r: u32, seg: u32) {
        let now = self.now;
        let rank = &mut self.ranks[r as usize];
        if rank.holds(seg) {
            self.report.duplicates += 1;
            return;
        }
        if seg >= rank.above {
            // New gaps: asked for after the NACK delay (a reordered segment may still come).
            for g in rank.above..seg {
                rank.gaps.insert(g);
                rank.asked.insert(g, (now, 0));
            }
            let gap = rank.above < seg;
            rank.above = seg + 1;
            rank.known = rank.known.max(rank.above);
            if gap {
                self.schedule(now + REPAIR.nack_delay_ns, Event::Ask(r));
            }
        } else {
            rank.gaps.remove(&seg);
        }
        let rank = &mut self.ranks[r as usize];
        if let Some((at, 1)) = rank.asked.remove(&seg) {
            // Asked for once: how long a repair takes here.
            rank.repair_time.sample(now.saturating_sub(at));
        }
        if rank.count() == u64::from(self.x) {
            rank.done_at = Some(now);
        }
        if let Some(children) = rank.pending.remove(&seg) {
            for c in children {
                self.repair(r, c, seg);
            }
        }
        self.ask_missing(r);
        self.report_prefix(r);
    }

    /// Rank `r` asks its parent for the segments known sent that it misses and did not ask
    /// for lately (after the NACK delay, then 1, 2, 4, … 32 NACK waits), at most `nack_max`
    /// of them; the rest in a round once the parent had the time to send these.
    fn ask_missing(&mut self, r: u32) {
        let now = self.now;
        let rank = &self.ranks[r as usize];
        if now < rank.nack_round {
            return;
        }
        let due = |s: &u32| {
            rank.asked.get(s).is_none_or(|&(t, n)| {
                let wait = match n {
                    0 => REPAIR.nack_delay_ns,
                    n => REPAIR.retry_after(n, &rank.repair_time),
                };
                t + wait <= now
            })
        };
        let max = REPAIR.nack_max.max(1) as usize;
        let mut due: Vec<u32> = rank
            .gaps
            .iter()
            .copied()
            .chain(rank.above..rank.known)
            .filter(due)
            .take(max + 1)
            .collect();
        if due.len() > max {
            due.truncate(max);
            let at = now + self.round_ns.max(1);
            self.ranks[r as usize].nack_round = at;
            self.schedule(at, Event::Ask(r));
        }
        if !due.is_empty() {
            self.ask(r, due);
        }
    }

    /// `from` repairs `seg` to `to`, unless a copy is still on its port or left less than
    /// half a NACK wait ago.
    fn repair(&mut self, from: u32, to: u32, seg: u32) {
        let hold = REPAIR.repair_hold();
        if let Some(&left) = self.ranks[from as usize].repaired.get(&(to, seg)) {
            if self.now < left + hold {
                return;
            }
        }
        self.report.repairs += 1;
        if from as usize == self.root {
            self.report.root_repairs += 1;
        }
        self.unicast(from, to, Kind::Repair { seg, to });
        let port = self.path(from, to)[0];
        let left = self.links[port.0 as usize].free_at().max(self.now);
        self.ranks[from as usize].repaired.insert((to, seg), left);
    }

    /// Rank `r` asks its ack-tree parent for `segs`.
    fn ask(&mut self, r: u32, segs: Vec<u32>) {
        let now = self.now;
        for &s in &segs {
            let asked = self.ranks[r as usize].asked.entry(s).or_insert((now, 0));
            *asked = (now, asked.1 + 1);
        }
        let parent = self.lane.parents[r as usize].expect("a receiver has a parent") as u32;
        self.report.nacks += 1;
        self.unicast(
            r,
            parent,
            Kind::Nack {
                from: r,
                to: parent,
                segs: segs.into(),
            },
        );
    }

    /// `parent` is asked for `segs` by `child`. One it lacks is served when it lands, and
    /// asked for again at once if the parent's own last NACK of it is a repair's hold old
    /// (not on the parent's own backoff), as at runtime.
    fn nack(&mut self, parent: u32, child: u32, segs: &[u32]) {
        let now = self.now;
        let mut again = Vec::new();
        for &s in segs {
            if self.ranks[parent as usize].holds(s) {
                self.repair(parent, child, s);
            } else {
                let rank = &mut self.ranks[parent as usize];
                let waiting = rank.pending.entry(s).or_default();
                if !waiting.contains(&child) {
                    waiting.push(child);
                }
                let stale = rank
                    .asked
                    .get(&s)
                    .is_some_and(|&(t, n)| n > 0 && now >= t + REPAIR.repair_hold());
                if stale && parent as usize != self.root {
                    again.push(s);
                }
            }
        }
        if !again.is_empty() {
            self.ask(parent, again);
        }
    }

    /// Rank `r` hears from `child` that its subtree holds `prefix`.
    fn ack(&mut self, r: u32, child: u32, prefix: u32) {
        self.report.acks += 1;
        let i = self.lane.children[r as usize]
            .iter()
            .position(|&c| c as u32 == child)
            .expect("acks come from children");
        let slot = &mut self.ranks[r as usize].reported[i];
        *slot = (*slot).max(prefix);
        self.report_prefix(r);
    }

    /// What rank `r`'s subtree holds: reported to the parent when it grew enough, or taken
    /// as credit at the root.
    fn report_prefix(&mut self, r: u32) {
        let rank = &self.ranks[r as usize];
        let below = rank.reported.iter().copied().min().unwrap_or(u32::MAX);
        let agg = rank.prefix().min(below);
        if r as usize == self.root {
            if agg > self.credit {
                self.credit = agg;
                if self.blocked {
                    self.blocked = false;
                    self.schedule(self.now, Event::RootSend);
                }
            }
            if agg == self.x && self.acked_at.is_none() {
                self.acked_at = Some(self.now);
            }
            return;
        }
        if agg > rank.sent && (agg - rank.sent >= self.ack_every || agg == self.x) {
            self.ranks[r as usize].sent = agg;
            let parent = self.lane.parents[r as usize].expect("a receiver has a parent") as u32;
            self.unicast(
                r,
                parent,
                Kind::Ack {
                    from: r,
                    to: parent,
                    prefix: agg,
                },
            );
        }
    }

    /// The root's status: when it sent no segment for the NACK wait and has not heard that
    /// every rank holds everything, it tells the group how many segments it sent.
    fn root_status(&mut self) {
        if self.acked_at.is_some() {
            return;
        }
        let due = self.last_group + REPAIR.sync_ns;
        if due > self.now {
            self.schedule(due, Event::RootStatus);
            return;
        }
        self.status();
        self.schedule(self.now + REPAIR.sync_ns, Event::RootStatus);
    }

    /// The root multicasts how many segments it sent.
    fn status(&mut self) {
        let frame = Frame {
            kind: Kind::Status { sent: self.next },
            path: Arc::from([]),
            hop: 0,
            head: self.now,
            tail: self.now,
            lost: false,
        };
        self.put(self.topology.machine_up(self.root), frame, true, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan;
    use crate::topology::gen;

    fn mc(t: &Topology, root: usize) -> Plan {
        plan::build(t, root, &TreeKind::Multicast, None).unwrap()
    }

    fn profile() -> Timing {
        Timing::Profile(Profile::builtin("100mbit").unwrap())
    }

    #[test]
    fn without_loss_time_is_flat_in_the_ranks() {
        let m = 1u64 << 20;
        let mut times = Vec::new();
        for t in [
            Topology::single_switch(4),
            Topology::single_switch(8),
            gen::hub(3, 4, true),
            gen::random_cluster(64, 1024, 3),
        ] {
            let r = simulate_multicast(&t, &mc(&t, 0), m, 32768, &profile(), Options::default())
                .unwrap();
            assert_eq!(r.delivered, (t.size() as u64 - 1) * 32);
            assert_eq!(r.lost + r.repairs + r.nacks + r.duplicates, 0);
            assert_eq!(r.group_frames, 32);
            times.push(r.completion_ns as f64);
        }
        let (lo, hi) = times
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), &t| (a.min(t), b.max(t)));
        assert!(hi / lo < 1.03, "{times:?}");
        // Close to the root's stream: 32 × g(32 KiB).
        let stream = 32.0 * 2781e3;
        assert!(lo > stream && hi < 1.03 * stream, "{times:?}");
    }

    #[test]
    fn each_edge_carries_each_segment_once() {
        let t = gen::hub(3, 4, true);
        let plan = mc(&t, 5);
        let timing = profile();
        let r = simulate_multicast(&t, &plan, 100_000, 4096, &timing, Options::default()).unwrap();
        assert_eq!((r.segments, r.group_frames), (25, 25));
        // A leaf of the ack tree hears no acks: its downlink carried the 25 segments once,
        // and the root's status right behind the last one.
        let wire = LinkModel::rate(timing.default_gbps(), 0);
        let once: u64 = (0..25u64)
            .map(|s| wire.wire_ns((4096.min(100_000 - s * 4096) + HEADER) as usize))
            .sum::<u64>()
            + wire.wire_ns(ACK_BYTES as usize);
        let leaves: Vec<usize> = (0..16)
            .filter(|&m| m != 5 && plan.lanes[0].children[m].is_empty())
            .collect();
        assert!(!leaves.is_empty());
        for m in leaves {
            let e = t.machine_down(m);
            let busy = r.edges.iter().find(|u| u.edge == e).unwrap().busy_ns;
            assert_eq!(busy, once, "{}", t.edge_name(e));
        }
    }

    #[test]
    fn with_loss_every_segment_reaches_every_rank() {
        let t = gen::random_cluster(8, 64, 5);
        for (loss, seed) in [(0.001, 1), (0.01, 2), (0.05, 3)] {
            for (m, seg) in [(1u64, 1u64), (7, 4), (65_537, 1024), (1 << 20, 8192)] {
                let opts = Options {
                    loss,
                    seed,
                    window: None,
                };
                let r = simulate_multicast(&t, &mc(&t, 3), m, seg, &profile(), opts).unwrap();
                assert_eq!(r.delivered, 63 * r.segments, "{loss} {m}");
                if m >= 65_537 && loss >= 0.01 {
                    assert!(
                        r.lost > 0 && r.repairs > 0 && r.nacks > 0,
                        "{loss} {m}: {r:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn loss_costs_time_and_a_small_window_stalls() {
        let t = gen::hub(3, 4, false);
        let m = 4u64 << 20;
        let clean =
            simulate_multicast(&t, &mc(&t, 0), m, 8192, &profile(), Options::default()).unwrap();
        let lossy = Options {
            loss: 0.02,
            ..Options::default()
        };
        let r = simulate_multicast(&t, &mc(&t, 0), m, 8192, &profile(), lossy).unwrap();
        assert!(r.completion_ns > clean.completion_ns);
        let tight = Options {
            window: Some(2),
            ..Options::default()
        };
        let r = simulate_multicast(&t, &mc(&t, 0), m, 8192, &profile(), tight).unwrap();
        assert!(r.stalls > 0);
        assert!(r.completion_ns > clean.completion_ns);
    }

    #[test]
    fn deterministic_by_seed() {
        let t = gen::random_cluster(8, 48, 2);
        let opts = |seed| Options {
            loss: 0.03,
            seed,
            window: None,
        };
        let a = simulate_multicast(&t, &mc(&t, 0), 1 << 20, 4096, &profile(), opts(7)).unwrap();
        let b = simulate_multicast(&t, &mc(&t, 0), 1 << 20, 4096, &profile(), opts(7)).unwrap();
        assert_eq!(a, b);
        let c = simulate_multicast(&t, &mc(&t, 0), 1 << 20, 4096, &profile(), opts(8)).unwrap();
        assert_ne!(a.lost, c.lost);
    }

    #[test]
    fn by_rate_and_edge_cases() {
        let t = Topology::single_switch(3);
        let rate = Timing::Rate { gbps: 1.0 };
        let r =
            simulate_multicast(&t, &mc(&t, 1), 1 << 20, 65536, &rate, Options::default()).unwrap();
        // 1 MiB at 1 Gbit/s: about 8.4 ms.
        assert!(
            r.completion_ns > 8_300_000 && r.completion_ns < 9_000_000,
            "{r:?}"
        );
        let zero = simulate_multicast(&t, &mc(&t, 0), 0, 1, &rate, Options::default()).unwrap();
        assert_eq!(zero.completion_ns, 0);
        let one = Topology::single_switch(1);
        let r =
            simulate_multicast(&one, &mc(&one, 0), 1000, 100, &rate, Options::default()).unwrap();
        assert_eq!(r.delivered, 0);
        let linear = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
        assert!(simulate_multicast(&t, &linear, 10, 1, &rate, Options::default()).is_err());
        let bad = Options {
            loss: 1.0,
            ..Options::default()
        };
        assert!(simulate_multicast(&t, &mc(&t, 0), 10, 1, &rate, bad).is_err());
    }
}
