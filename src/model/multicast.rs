//! The multicast schedule priced (issue 32; `plan::multicast`, docs/multicast.md).
//!
//! The switches copy a group frame, so every directed edge carries each segment once and the
//! root's uplink carries the message once: no pipeline to fill, no rank relaying. With
//! segments of s bytes (x = ⌈m/s⌉ of them) and seed 003's L and g:
//!
//! ```text
//! T = x·g(s)·(1 + q·c)            the root's port: every segment once, plus the repairs of
//!                                  its c ack-tree children (each misses a segment with q)
//!   + L(s)                         the last segment's latency
//!   + h·(g(a) + L(a))              the last acknowledgement climbing the ack tree (height h,
//!                                  a = ACK_BYTES): the root may reuse its buffer only then
//!   + (1 − (1 − q)^n)·h·(g(a) + L(a) + g(s) + L(s))
//!                                  a tail loss: some of the n receivers misses the last
//!                                  segment, learns it was sent from the root's sync right
//!                                  behind it (no later segment reveals it), asks its parent,
//!                                  gets a unicast repair; a frame lost on a switch link is
//!                                  missed by a whole subtree, whose ranks ask up the ack
//!                                  tree at once and are repaired level by level down it
//!                                  (up to h rounds)
//! ```
//!
//! where q = 1 − (1 − p)^(f·d) is the chance that a receiver misses a segment: p the loss
//! rate of one frame on one link, f = ⌈(s + header)/1500⌉ frames per segment, d the links of
//! the longest root-to-receiver path. Repairs by parents deeper in the ack tree run on their
//! own uplinks, idle otherwise (a receiver only receives), and are not on the root's path.
//! A receiver's CPU: every receiver handles every segment, so where a profile states a cost
//! o per segment end (`segment_cpu_us`, the derived profiles do) the stream cannot run faster
//! than one segment per o at a receiver: `x·max(g(s)·(1 + q·c), o)` (the trees' round has
//! the same floor, `model::round_cpu_us`). A derived profile's g(s) = o + s/B already exceeds
//! o; the floor matters for a calibrated profile whose g is smaller.
//! What this leaves out: the credit window (the simulator's root stalls if a repair takes
//! longer than the window; with [`WINDOW_BYTES`] it rarely does).

use super::{Choice, ModelError, Profile};
use crate::plan::{self, Plan, TreeKind};
use crate::topology::{MachineId, Topology};

/// Bytes of a frame on the wire (Ethernet MTU payload): loss is drawn per frame.
pub const FRAME_BYTES: u64 = 1500;

/// Bytes of an acknowledgement or NACK (as the simulator's header).
pub const ACK_BYTES: u64 = 40;

/// The root's credit window: at most this many bytes sent and not yet acknowledged by every
/// rank (at least [`MIN_WINDOW_SEGMENTS`] segments), the simulator's pacing. 4 MiB: half of
/// the receive buffer the issue found enough for bursts (8 MB with `SO_RCVBUFFORCE`).
pub const WINDOW_BYTES: u64 = 4 << 20;

/// The smallest window in segments.
pub const MIN_WINDOW_SEGMENTS: u64 = 4;

/// The window in segments for `segment`-byte segments.
pub fn window_segments(segment: u64) -> u64 {
    WINDOW_BYTES
        .div_ceil(segment.max(1))
        .max(MIN_WINDOW_SEGMENTS)
}

/// The NACK and sync timers and limits: one set, the runtime's (`engine::multicast::Config`'s
/// defaults) and the simulator's (`sim::multicast`), so that the simulator does what the
/// runtime does. Times in ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
    /// A gap waits this long before it is NACKed (a reordered segment may still come).
    pub nack_delay_ns: u64,
    /// A segment NACKed once is asked for again after this long; each further time after
    /// twice as long as the time before ([`Repair::retry_after`]): a repair may be lost, but
    /// most are only late, queued behind the group's stream.
    pub nack_wait_ns: u64,
    /// Retries wait at most `nack_wait_ns << backoff_max` (32 waits).
    pub backoff_max: u32,
    /// The first retry's wait at least: a rank that measured how long its repairs take
    /// ([`RepairTime`]) waits that (and four times its deviation), between this and
    /// `nack_wait_ns`. A parent does not repair a segment to the same child again until half
    /// of this passed since the last copy left it.
    pub nack_wait_min_ns: u64,
    /// Most segments one NACK names; a rank with more due asks for the rest once its parent
    /// has had the time to send these.
    pub nack_max: u32,
    /// The root tells the group how many segments it sent (sync, status) when it has had
    /// nothing new to send for this long, and again every interval while it waits.
    pub sync_ns: u64,
}

/// The one set of NACK and sync parameters (runtime and simulator). 2 ms of reordering
/// (the lab's reordering holds a frame back 6-15 ms: those are asked for, and arrive twice);
/// 20 ms before the first retry: at 100 Mbit/s a 256 KiB switch queue is 21 ms of frames, the
/// time a repair may wait behind the group's stream.
pub const REPAIR: Repair = Repair {
    nack_delay_ns: 2_000_000,
    nack_wait_ns: 20_000_000,
    backoff_max: 5,
    nack_wait_min_ns: 4_000_000,
    nack_max: 64,
    sync_ns: 20_000_000,
};

/// How the root's pace leaves room for repairs (`engine::multicast::Member`): the group's
/// stream and the repairs share every receiver's downlink, which a pace just under the link's
/// rate fills. A rank that repairs counts the segments its ack-tree children NACK per segment
/// it sent or received, over blocks of [`Pace::block`] segments; the root's pace is the link's
/// less `spare`, which jumps to `gain` × that miss rate (at most `spare_max`) when it is
/// higher and falls back by an eighth of the difference per block when it is lower. Every
/// rank keeps what it learned for the next broadcast it roots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Segments per estimate.
    pub block: u32,
    /// Spare pace per missed segment per segment sent, in thousandths per thousandth.
    pub gain: u32,
    /// Most spare (thousandths of the rate): the pace never falls below the rest.
    pub spare_max: u32,
    /// Least spare of a root that saw loss (a spare above 0): its pace leaves at least this
    /// much whatever its children miss. The root hears only its children's NACKs, and where
    /// they sit on its own switch they see one of the ports a farther receiver's frames are
    /// dropped at; that receiver's downlink, and the switch link into its switch (which
    /// carries the repairs of that switch's one rank whose parent is elsewhere), need room
    /// for the repairs and duplicates of every port on the way.
    pub spare_min: u32,
}

/// The one set (runtime; the simulator's root is not paced: it sends at its port's rate).
/// A gain of 2: a NACKed segment costs its repair on the downlink and, with reordering, a
/// duplicate; duplicated frames the root does not see. At most 25 % below the link. At
/// least 4 % once loss was seen: on the 16-machine lab (1 % loss, duplicates and reordering
/// per port) roots whose two ack-tree children share their switch learned ~4 %, and 31 of
/// main's 147 16 MiB broadcasts collapsed, all at such roots (s0's queues to the far switches
/// overflowing, 6 000-24 000 repairs instead of 3 000-4 400, up to 2 × T(m)); with at least
/// 7 %, none of 63 did (docs/multicast.md, "Where the slow lossy iterations went"). Since the
/// ack tree crosses every switch link once (`plan::multicast::one_per_link`) 4 % leaves that
/// room: no collapse in 84 broadcasts, and the data phase 2-3 % shorter (docs/multicast.md,
/// "One repair edge per switch link").
pub const PACE: Pace = Pace {
    block: 64,
    gain: 2,
    spare_max: 250,
    spare_min: 40,
};

impl Pace {
    /// The spare (thousandths) after a block in which `missed` segments were NACKed by
    /// `children` children for `block` segments, from `spare`.
    pub fn next_spare(&self, spare: u32, missed: u64, block: u64, children: u64) -> u32 {
        let samples = block.saturating_mul(children).max(1);
        let target = (missed
            .saturating_mul(1000)
            .saturating_mul(u64::from(self.gain))
            / samples)
            .min(u64::from(self.spare_max)) as u32;
        if target >= spare {
            target
        } else {
            spare - (spare - target).div_ceil(8)
        }
    }

    /// The spare a rank starts the next broadcast it roots with, from a broadcast that ended
    /// with `spare` here: what it learned as the root (its children's misses); as a receiver
    /// (its own misses, every port and switch link on its path, noisy per block) only that
    /// there was loss, i.e. at most [`Pace::spare_min`] — the root's children tell it the
    /// rest within a block, and a far receiver's miss rate is not the root's: carried whole
    /// (4–15 % on the 16-machine lab with 1 % loss) it paced a whole 1 MiB broadcast below the
    /// floor's rate, as the spare falls back by an eighth a block only
    /// (docs/multicast.md, "… (helper iter32)").
    pub fn carried(&self, rooted: bool, spare: u32) -> u32 {
        if rooted {
            spare
        } else {
            spare.min(self.spare_min)
        }
    }

    /// `rate` less `spare` thousandths: at least [`Pace::spare_min`] of a spare above 0, at
    /// most [`Pace::spare_max`].
    pub fn paced(&self, rate: u64, spare: u32) -> u64 {
        let spare = match spare {
            0 => 0,
            s => s.max(self.spare_min),
        };
        let keep = 1000 - u64::from(spare.min(self.spare_max).min(1000));
        rate / 1000 * keep + rate % 1000 * keep / 1000
    }
}

impl Repair {
    /// How long after its `asked`-th NACK (1 for the first) a segment is asked for again,
    /// by a rank whose repairs take `time`.
    pub fn retry_after(&self, asked: u32, time: &RepairTime) -> u64 {
        backoff(self.retry_wait(time), asked, self.backoff_max)
    }

    /// The first retry's wait: the repairs' smoothed time and four deviations, between
    /// `nack_wait_min_ns` and `nack_wait_ns` (this with no measure yet).
    pub fn retry_wait(&self, time: &RepairTime) -> u64 {
        match time.srtt {
            None => self.nack_wait_ns,
            Some(s) => s.saturating_add(time.rttvar.saturating_mul(4)).clamp(
                self.nack_wait_min_ns.min(self.nack_wait_ns),
                self.nack_wait_ns,
            ),
        }
    }

    /// How long after a repair's copy left a parent it does not send the same child another.
    pub fn repair_hold(&self) -> u64 {
        self.nack_wait_min_ns.min(self.nack_wait_ns) / 2
    }
}

/// How long a rank's repairs take, from its first NACK of a segment to the segment (a
/// segment asked for twice gives no sample: which NACK was answered is unknown), smoothed
/// as TCP smooths round trips (RFC 6298: an eighth and a quarter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairTime {
    pub srtt: Option<u64>,
    pub rttvar: u64,
}

impl RepairTime {
    pub fn sample(&mut self, ns: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(ns);
                self.rttvar = ns / 2;
            }
            Some(s) => {
                self.rttvar = self.rttvar - self.rttvar / 4 + s.abs_diff(ns) / 4;
                self.srtt = Some(s - s / 8 + ns / 8);
            }
        }
    }
}

/// `wait` doubled once per NACK after the first (`asked` of them so far), at most
/// `max_doublings` times: 1, 2, 4 … waits.
pub fn backoff(wait: u64, asked: u32, max_doublings: u32) -> u64 {
    let doublings = asked.saturating_sub(1).min(max_doublings).min(32);
    wait.saturating_mul(1u64 << doublings)
}

/// What the estimate needs of the plan and the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Ranks the group delivers to (all but the root).
    pub receivers: usize,
    /// Height of the ack tree.
    pub ack_height: usize,
    /// Ack-tree children of the root (the root repairs them).
    pub root_children: usize,
    /// Links on the longest root-to-receiver path (1 without a topology: loss is then per
    /// segment and receiver).
    pub hops: usize,
}

impl Shape {
    /// The shape of a multicast plan; with the topology, the longest path too.
    pub fn of(plan: &Plan, topology: Option<&Topology>) -> Shape {
        let lane = plan.lanes.first();
        let hops = topology.map_or(1, |t| {
            (0..t.size().min(plan.size()))
                .map(|r| t.path(plan.root, r).len())
                .max()
                .unwrap_or(1)
                .max(1)
        });
        Shape {
            receivers: plan.size().saturating_sub(1),
            ack_height: lane.map_or(0, |l| l.height()),
            root_children: lane.map_or(0, |l| l.children.get(plan.root).map_or(0, Vec::len)),
            hops,
        }
    }
}

/// The chance that a receiver misses a segment of `segment` bytes when each frame is lost on
/// each of `hops` links with `loss`.
pub fn segment_loss(loss: f64, segment: u64, hops: usize) -> f64 {
    let p = loss.clamp(0.0, 1.0);
    if p == 0.0 {
        return 0.0;
    }
    let frames = (segment + ACK_BYTES).div_ceil(FRAME_BYTES).max(1) as f64;
    1.0 - (1.0 - p).powf(frames * hops.max(1) as f64)
}

/// Predicted µs of a multicast broadcast of `msize` bytes in `segment`-byte segments with a
/// frame loss rate `loss` per link (the module doc's formula).
pub fn predict(shape: Shape, profile: &Profile, msize: u64, segment: u64, loss: f64) -> f64 {
    if msize == 0 || shape.receivers == 0 {
        return 0.0;
    }
    let seg = segment.clamp(1, msize);
    let x = msize.div_ceil(seg) as f64;
    let c = profile.cost(seg);
    let a = profile.cost(ACK_BYTES);
    let q = segment_loss(loss, seg, shape.hops);
    // A segment leaves the root every g(s), and every receiver spends its CPU cost of a
    // segment end on each (a stated profile's o, as a tree round's floor: `round_cpu_us`):
    // the slower of the two paces the stream.
    let per_end = profile.stated_segment_cpu_us().unwrap_or(0.0);
    let stream = x * (c.g_us * (1.0 + q * shape.root_children as f64)).max(per_end);
    let acks = shape.ack_height as f64 * (a.g_us + a.l_us);
    let tail_p = 1.0 - (1.0 - q).powf(shape.receivers as f64);
    let repair = a.g_us + a.l_us + c.g_us + c.l_us;
    let rounds = shape.ack_height.max(1) as f64;
    stream + c.l_us + acks + tail_p * rounds * repair
}

/// The profile size (capped at the message) with the least [`predict`]ed time, and that time.
pub fn choose_segment(shape: Shape, profile: &Profile, msize: u64, loss: f64) -> (u64, f64) {
    if msize == 0 {
        return (0, 0.0);
    }
    let mut best = (0u64, f64::INFINITY);
    for size in profile.sizes() {
        let t = predict(shape, profile, msize, size, loss);
        if t < best.1 {
            best = (size.min(msize), t);
        }
    }
    best
}

/// The multicast plan rooted at `root`, priced for `msize` bytes with frame loss `loss`.
pub fn plan_for(
    topology: &Topology,
    root: MachineId,
    profile: &Profile,
    msize: u64,
    loss: f64,
) -> Result<Choice, ModelError> {
    profile.validate()?;
    let plan = plan::build(topology, root, &TreeKind::Multicast, None)?;
    Ok(price(plan, topology, profile, msize, loss))
}

/// Prices a multicast plan already built.
pub fn price(plan: Plan, topology: &Topology, profile: &Profile, msize: u64, loss: f64) -> Choice {
    let (segment_bytes, predicted_us) =
        choose_segment(Shape::of(&plan, Some(topology)), profile, msize, loss);
    Choice {
        plan,
        segment_bytes,
        predicted_us,
    }
}

/// What `auto` would take if multicast were a candidate: the cheaper of the model's tree
/// (`auto`) and multicast. Nothing at runtime calls it (the communicator has no multicast
/// carrier); `pipecast plan`/`sim` and `bench/sim_auto.py` use it to compare.
pub fn best_of_trees_and_multicast(
    topology: &Topology,
    root: MachineId,
    profile: &Profile,
    msize: u64,
    loss: f64,
) -> Result<Choice, ModelError> {
    let tree = super::plan_for(topology, root, &TreeKind::Auto, profile, msize)?;
    let mc = plan_for(topology, root, profile, msize, loss)?;
    Ok(if mc.predicted_us < tree.predicted_us {
        mc
    } else {
        tree
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gen;

    fn p100() -> Profile {
        Profile::builtin("100mbit").unwrap()
    }

    #[test]
    fn monotone_in_size_loss_and_receivers() {
        let p = p100();
        let base = Shape {
            receivers: 15,
            ack_height: 4,
            root_children: 2,
            hops: 4,
        };
        let mut last = 0.0;
        for m in [1u64, 100, 4096, 65536, 1 << 20, 16 << 20, 256 << 20] {
            // Never cheaper for more bytes (below the profile's smallest size, equal).
            let t = choose_segment(base, &p, m, 0.0).1;
            assert!(t >= last, "{m}: {t} < {last}");
            last = t;
        }
        let mut last = 0.0;
        for loss in [0.0, 1e-4, 1e-3, 1e-2, 0.1] {
            let t = predict(base, &p, 1 << 20, 1024, loss);
            assert!(t > last, "{loss}: {t} <= {last}");
            last = t;
        }
        // More receivers never cost less (the ack tree grows, tail losses are likelier).
        let mut last = 0.0;
        for (n, h) in [(3, 2), (15, 4), (1023, 10), (4095, 12)] {
            let s = Shape {
                receivers: n,
                ack_height: h,
                ..base
            };
            let t = predict(s, &p, 1 << 20, 1024, 0.01);
            assert!(t >= last, "{n}: {t} < {last}");
            last = t;
        }
    }

    #[test]
    fn a_receivers_spare_carries_only_that_there_was_loss() {
        let p = PACE;
        assert_eq!(p.carried(true, 150), 150);
        assert_eq!(p.carried(true, 0), 0);
        assert_eq!(p.carried(false, 150), p.spare_min);
        assert_eq!(p.carried(false, 0), 0);
        assert_eq!(p.carried(false, 3), 3);
        // Carried from a receiver, the root still paces at the floor's rate: loss was seen.
        assert_eq!(
            p.paced(1_000_000, p.carried(false, 150)),
            p.paced(1_000_000, 1)
        );
    }

    #[test]
    fn the_pace_leaves_at_least_spare_min_once_loss_was_seen() {
        let rate = 12_500_000;
        assert_eq!(PACE.paced(rate, 0), rate);
        assert_eq!(PACE.paced(rate, 1), rate / 1000 * (1000 - 40));
        assert_eq!(PACE.paced(rate, PACE.spare_min), PACE.paced(rate, 1));
        assert_eq!(PACE.paced(rate, 100), rate / 1000 * 900);
        assert_eq!(PACE.paced(rate, 1000), rate / 4 * 3);
        const { assert!(PACE.spare_min <= PACE.spare_max) };
    }

    #[test]
    fn a_receivers_stated_cost_per_segment_paces_the_stream() {
        let s = Shape {
            receivers: 15,
            ack_height: 4,
            root_children: 2,
            hops: 4,
        };
        let mut p = p100();
        let seg = 1024;
        let g = p.cost(seg).g_us;
        let free = predict(s, &p, 1 << 20, seg, 0.0);
        // Stated below g: the wire paces, as without it.
        p.segment_cpu_us = Some(g / 2.0);
        assert_eq!(predict(s, &p, 1 << 20, seg, 0.0), free);
        // Stated above g: a receiver's CPU paces every segment.
        p.segment_cpu_us = Some(3.0 * g);
        let slow = predict(s, &p, 1 << 20, seg, 0.0);
        let x = (1u64 << 20).div_ceil(seg) as f64;
        assert!(
            (slow - free - x * 2.0 * g).abs() < 1e-6 * slow,
            "{slow} vs {free}"
        );
    }

    #[test]
    fn without_loss_it_is_the_roots_stream_plus_latencies() {
        let p = p100();
        let s = Shape {
            receivers: 1023,
            ack_height: 10,
            root_children: 2,
            hops: 6,
        };
        let m = 64u64 << 20;
        let (seg, t) = choose_segment(s, &p, m, 0.0);
        assert!(seg >= 16384, "{seg}");
        let stream = (m / seg) as f64 * p.cost(seg).g_us;
        assert!(t > stream && t < stream * 1.01, "{t} vs {stream}");
        // Flat in P: 1023 and 4095 receivers differ by two ack levels.
        let big = Shape {
            receivers: 4095,
            ack_height: 12,
            ..s
        };
        let t4 = choose_segment(big, &p, m, 0.0).1;
        assert!((t4 - t) / t < 0.001, "{t4} vs {t}");
    }

    #[test]
    fn multicast_beats_the_trees_at_scale_and_auto_never_picks_it() {
        let t = gen::random_cluster(64, 1024, 1);
        let p = p100();
        let m = 64u64 << 20;
        let tree = super::super::plan_for(&t, 0, &TreeKind::Auto, &p, m).unwrap();
        assert_ne!(tree.plan.tree, TreeKind::Multicast);
        let mc = plan_for(&t, 0, &p, m, 0.0).unwrap();
        assert!(mc.predicted_us < tree.predicted_us);
        let best = best_of_trees_and_multicast(&t, 0, &p, m, 0.0).unwrap();
        assert_eq!(best.plan.tree, TreeKind::Multicast);
        // Through the generic entry points too.
        let generic = super::super::plan_for(&t, 0, &TreeKind::Multicast, &p, m).unwrap();
        assert_eq!(generic.segment_bytes, mc.segment_bytes);
        assert!((generic.predicted_us - mc.predicted_us).abs() < 1e-6);
        let again = super::super::predict(&generic.plan, &p, m, generic.segment_bytes);
        assert!((again - mc.predicted_us).abs() < 1e-6);
    }

    #[test]
    fn segment_loss_grows_with_frames_and_hops() {
        assert_eq!(segment_loss(0.0, 1 << 20, 8), 0.0);
        let one = segment_loss(0.01, 1000, 1);
        assert!((one - 0.01).abs() < 1e-12);
        assert!(segment_loss(0.01, 32768, 1) > one);
        assert!(segment_loss(0.01, 1000, 4) > one);
        assert_eq!(segment_loss(1.0, 1, 1), 1.0);
    }
}
