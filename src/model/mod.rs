//! Cost models and the calibration profile.
//!
//! * [`profile`]: L(m), g(m) measured at a few sizes (seed 003 §5.1, Table 2; DESIGN.md contract).
//! * [`logp`]: seed 003 §4.2 formulas (1) and (2), generalized to any tree and to several lanes
//!   (seed 002 Table 1).
//! * [`steps`]: seed 001's step model (Theorem 2) for k-binomial trees.
//! * [`contention`]: where a plan breaks the models' no-contention assumption.
//!
//! [`predict`] prices a plan for a message and a segment size; [`choose_segment`] picks the best
//! candidate segment size (the profile's sizes); [`plan_for`] also resolves `kbinomial` (whose
//! optimal k depends on the segment count) and `auto` (the best of linear, binary,
//! kbinomial, multilane and kary:3). On a topology whose ranks share hosts the plans are
//! two-level and [`two_level`] prices them (network stream plus in-host copies). Everything
//! here is pure.

#![deny(unsafe_code)]

pub mod contention;
pub mod logp;
pub mod multicast;
pub mod network;
pub mod profile;
pub mod steps;
pub mod two_level;

pub use profile::{Cost, Point, Profile, BUILTIN_NAMES, COPY_OVERHEAD_US, DEFAULT_MEMCPY_GB_S};

use crate::plan::{self, kbinomial, Plan, PlanError, TreeKind};
use crate::topology::{MachineId, Topology};
use std::collections::btree_map::{BTreeMap, Entry};

/// What went wrong in the model layer.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{0}")]
    Profile(String),
    #[error("the calibration profile has no points: list {{\"bytes\", \"L_us\", \"g_us\"}} entries under \"points\"")]
    EmptyProfile,
    #[error("profile point {index} ({bytes} B): {field} is {value}, it must be {need}")]
    BadPoint {
        index: usize,
        bytes: u64,
        field: &'static str,
        value: f64,
        need: &'static str,
    },
    #[error("profile point {index} ({bytes} B) does not follow {previous} B: list points by strictly increasing size")]
    UnsortedProfile {
        index: usize,
        bytes: u64,
        previous: u64,
    },
    #[error("not a calibration profile: {0} (expected {{\"points\": [{{\"bytes\": 256, \"L_us\": 110.0, \"g_us\": 30.0}}, …]}}; built-in profiles: {BUILTIN_NAMES})")]
    ProfileJson(String),
    #[error("profile {path}: {source}")]
    ProfileFile {
        path: String,
        #[source]
        source: Box<ModelError>,
    },
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// A plan priced by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub plan: Plan,
    /// Bytes per segment (per lane); the whole message for non-pipelined baselines.
    pub segment_bytes: u64,
    pub predicted_us: f64,
}

/// The algorithms `auto` chooses among, in tie-breaking order; on a topology with rails
/// (machines with several NICs) `multilane` too ([`candidates`]).
///
/// `multilane` is left out on one NIC: it measured about 2 × T(msize) on the 16-host lab at every size,
/// segment and window tried (docs/results-ompi.md) when the model predicted ~1 T. The model
/// now adds the busiest edge's load over all lanes ([`busiest_edge`]) and predicts ~2 T there
/// too, but that was found late and `auto` has not been re-measured with it in; it stays
/// available by name.
pub const AUTO_CANDIDATES: [TreeKind; 4] = [
    TreeKind::Linear,
    TreeKind::Binary,
    TreeKind::KBinomial(None),
    TreeKind::Kary(3),
];

/// What `auto` compares on `topology`: [`AUTO_CANDIDATES`], and `multilane` where rails exist
/// (one lane per NIC, seed 002 §3: the only plan that sends faster than one link). A
/// communicator plans on the rails its link carries (`Topology::first_rails`: TCP binds one
/// connection per NIC address and raw Ethernet opens one socket per NIC; verbs runs one port),
/// so a topology with rails here means each lane leaves and enters through its own NIC.
pub fn candidates(topology: &Topology) -> Vec<TreeKind> {
    let mut list = AUTO_CANDIDATES.to_vec();
    if topology.rails() > 1 && topology.hosts().is_none() {
        list.push(TreeKind::Multilane);
    }
    list
}

/// Bytes each lane carries.
pub(crate) fn per_lane(plan: &Plan, msize: u64) -> u64 {
    msize.div_ceil(plan.lanes.len().max(1) as u64)
}

/// Predicted broadcast time in µs of `msize` bytes over `plan` with segments of `segment`
/// bytes (per lane). Non-pipelined trees (`TreeKind::is_pipelined`: flat, binomial) are priced
/// as moving the whole message per hop: the
/// whole message crosses each hop (`segment` is ignored), with L and g interpolated at `msize`.
/// k-binomial plans use seed 001's step model, every other plan the generalized formula (2).
/// A segment larger than a lane's share is one segment of that share.
pub fn predict(plan: &Plan, profile: &Profile, msize: u64, segment: u64) -> f64 {
    if msize == 0 || plan.lanes.is_empty() {
        return 0.0;
    }
    if !plan.tree.is_pipelined() {
        return logp::tree_time(&plan.lanes, 1, profile.cost(msize));
    }
    if plan.tree == TreeKind::Multicast {
        // No loss, paths of one link: `multicast::predict` with a topology and a loss rate.
        return multicast::predict(
            multicast::Shape::of(plan, None),
            profile,
            msize,
            segment,
            0.0,
        );
    }
    let share = per_lane(plan, msize);
    let seg = segment.max(1).min(share);
    let x = share.div_ceil(seg);
    let cost = profile.cost(seg);
    match plan.tree {
        TreeKind::KBinomial(_) if plan.lanes.len() == 1 => {
            // The step model has no CPU term: the busiest rank's ends bound it from below.
            let cpu = x.saturating_sub(1) as f64 * round_cpu_us(plan, profile);
            steps::kbinomial_time(&plan.lanes[0], x, cost).max(cpu)
        }
        _ => {
            // One CPU per rank for all its rails (doc of `by_rail`).
            let cpu = round_cpu_us(plan, profile);
            by_rail(plan)
                .iter()
                .map(|lanes| {
                    let nic = logp::sending_degree(lanes) as f64 * cost.g_us;
                    logp::first_arrival(lanes, cost) + x.saturating_sub(1) as f64 * nic.max(cpu)
                })
                .fold(0.0, f64::max)
        }
    }
}

/// The CPU time of one segment round at the busiest rank: its segment ends in every lane
/// ([`logp::segment_ends`]) times the CPU cost of one end. A round of the pipeline takes the
/// longer of this and the busiest NIC's gaps (`D·g`, [`logp::tree_time`]).
///
/// The cost of an end is the profile's stated one ([`Profile::stated_segment_cpu_us`]). A
/// profile that states none is seed 003's model: on one NIC its g(m) already covers the
/// overheads (§4.2), so no floor (Table 3's segment sizes, `bench/experiments/table3_segments.rs`);
/// on several rails each NIC's g(m) covers one lane's share only, so [`Profile::segment_cpu_us`]'s
/// default applies there.
pub(crate) fn round_cpu_us(plan: &Plan, profile: &Profile) -> f64 {
    let per_end = if plan.rails.is_empty() {
        profile.stated_segment_cpu_us().unwrap_or(0.0)
    } else {
        profile.segment_cpu_us()
    };
    logp::segment_ends(&plan.lanes) as f64 * per_end
}

/// The lanes of each rail, by rail. Lanes are priced by the NICs they use: a rank interleaves
/// its sends over the lanes of one rail (one NIC, formula (2)'s send positions across lanes)
/// but sends on different rails at once, so the plan takes as long as its slowest rail. A plan
/// without rails is one rail: formula (2) with its round at least the CPU's.
///
/// The NICs work in parallel, the rank's CPU does not: per segment round it sends and receives
/// in every lane ([`logp::segment_ends`]), each end costing the CPU's time per segment, so a
/// round costs the larger of the busiest NIC's gaps and the CPU's ends ([`round_cpu_us`]).
/// Seed 003 §4.2 has g(m) ≥ o_s(m), o_r(m) (`../shared/seeds/003_f72e5e0868946953.txt`), which
/// bounds each end by one gap, not a rank's ends together: a chain's rank receives and sends
/// each segment (2 ends, 1 gap), a binary tree's 3 ends in 2 gaps. Where a rank has a core to
/// itself (12 µs per end, the default) that rarely binds at 100 Mbit/s (g ≥ 30 µs); where
/// ranks share cores it does:
/// * on k rails g(m) covers one lane's share of the work. Without the CPU term the model saw
///   no cost in cutting each lane's half of the message into many small segments and chose
///   1 KiB for multilane on two rails against 4 KiB for linear (the 100mbit profile), four
///   times the segments per rank; on the 16-machine lab on 2 cores
///   (`profiles/lab16-100mbit.json`) it now chooses 8 KiB. Rails are charged the default
///   12 µs per end when the profile states no cost;
/// * on one NIC, 8 machines × 2 ranks of the same lab (16 ranks on 2 cores) at 1 MiB: without
///   it `auto` chose 1 KiB segments, 1.10–1.32 × T(msize) measured, where 2–4 KiB measured
///   1.06–1.09 (issue 11; docs/model.md). One NIC is charged only a cost the profile states:
///   without one the profile is seed 003's, whose g(m) covers the overheads (issue 28: the
///   default floor had moved 3 of seed 003 Table 3's 1 Gbit/s rows).
fn by_rail(plan: &Plan) -> Vec<Vec<crate::plan::Lane>> {
    let mut rails: BTreeMap<usize, Vec<crate::plan::Lane>> = BTreeMap::new();
    for (l, lane) in plan.lanes.iter().enumerate() {
        rails.entry(plan.rail(l)).or_default().push(lane.clone());
    }
    rails.into_values().collect()
}

/// The candidate segment size (a profile size, capped at a lane's share of the message) with
/// the smallest predicted time, and that time. Ties go to the smaller segment. Non-pipelined
/// trees get the whole message; `msize = 0` gives `(0, 0.0)`.
pub fn choose_segment(plan: &Plan, profile: &Profile, msize: u64) -> (u64, f64) {
    if msize == 0 {
        return (0, 0.0);
    }
    if !plan.tree.is_pipelined() {
        return (msize, predict(plan, profile, msize, msize));
    }
    let share = per_lane(plan, msize);
    let mut best = (0u64, f64::INFINITY);
    for size in profile.sizes() {
        let t = predict(plan, profile, msize, size);
        if t < best.1 {
            best = (size.min(share), t);
        }
    }
    best
}

/// Builds and prices `tree` for `msize` bytes. `kbinomial` without k takes, for every candidate
/// segment size, Theorem 3's optimal k for that many segments; `auto` takes the cheapest of
/// [`AUTO_CANDIDATES`] that `plan::check` finds contention-free (the cheapest of all of them
/// when none is), because the model prices contention-free trees only; candidates whose
/// planner fails are skipped (the first error is returned if all fail). `hetero:NAME` is
/// refused as [`plan::build`] refuses it (`hetero::plan_for` builds and prices every tree).
pub fn plan_for(
    topology: &Topology,
    root: MachineId,
    tree: &TreeKind,
    profile: &Profile,
    msize: u64,
) -> Result<Choice, ModelError> {
    profile.validate()?;
    match tree {
        TreeKind::Auto => {
            // The model assumes contention-free trees (seed 003 §4.2): prefer the candidates
            // the checker accepts, and fall back to all of them only if it accepts none.
            let mut best: Option<(bool, Choice)> = None;
            let mut refused = None;
            for kind in &candidates(topology) {
                // A planner may refuse a size (e.g. a dynamic program's memory limit): skip it.
                let c = match plan_for(topology, root, kind, profile, msize) {
                    Ok(c) => c,
                    Err(e) => {
                        refused.get_or_insert(e);
                        continue;
                    }
                };
                let clean = plan::check(&c.plan, topology).contention_free;
                let better = match &best {
                    None => true,
                    Some((b_clean, b)) => {
                        (clean && !b_clean)
                            || (clean == *b_clean && c.predicted_us < b.predicted_us)
                    }
                };
                if better {
                    best = Some((clean, c));
                }
            }
            match (best, refused) {
                (Some((_, c)), _) => Ok(c),
                (None, Some(e)) => Err(e),
                (None, None) => unreachable!("auto has candidates"),
            }
        }
        TreeKind::KBinomial(None) => {
            // The tree between hosts when ranks share them (plan::two_level).
            // (A job of one host fed by a tree is that tree over its ranks.)
            let size = topology
                .hosts()
                .filter(|h| !h.one_tree())
                .map_or(topology.size(), |h| h.count()) as u64;
            let mut built: BTreeMap<u32, Plan> = BTreeMap::new();
            let mut best: Option<Choice> = None;
            for seg in profile.sizes() {
                let x = msize.div_ceil(seg.max(1)).max(1);
                let k = kbinomial::optimal_k(size, x);
                let p = match built.entry(k) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => e.insert(plan::build(
                        topology,
                        root,
                        &TreeKind::KBinomial(Some(k)),
                        None,
                    )?),
                };
                let t = match topology.hosts() {
                    Some(hosts) => two_level::predict(p, hosts, profile, msize, seg),
                    None => predict(p, profile, msize, seg),
                };
                if best.as_ref().is_none_or(|b| t < b.predicted_us) {
                    best = Some(Choice {
                        plan: p.clone(),
                        segment_bytes: seg.min(msize),
                        predicted_us: t,
                    });
                }
            }
            Ok(best.expect("a validated profile has a point"))
        }
        _ => Ok(price(
            plan::build(topology, root, tree, None)?,
            topology,
            profile,
            msize,
        )),
    }
}

/// Prices a plan already built for `msize` bytes: the best candidate segment size and its
/// predicted time ([`plan_for`]'s last step; the hetero layer uses it for `hetero:NAME`).
/// Plans on a topology whose ranks share hosts are two-level ([`two_level::choose_segment`]).
pub fn price(plan: Plan, topology: &Topology, profile: &Profile, msize: u64) -> Choice {
    if plan.tree == TreeKind::Multicast {
        // Every rank receives from the group, ranks sharing hosts too: not two-level.
        return multicast::price(plan, topology, profile, msize, 0.0);
    }
    let (segment_bytes, predicted_us) = if let Some(hosts) = topology.hosts() {
        two_level::choose_segment(&plan, hosts, profile, msize)
    } else {
        choose_segment_flat(&plan, topology, profile, msize)
    };
    Choice {
        plan,
        segment_bytes,
        predicted_us,
    }
}

/// The most transfers of all lanes together that cross one directed edge of the network (each
/// lane on its own rail: lanes on different NICs meet only on switch links the rails share).
///
/// Formula (2) prices each lane as if it had the network to itself (seed 002 Table 1 assumes
/// the lanes never meet). Lanes run concurrently, so an edge crossed by n lane transfers
/// carries n lane shares of the message, whichever lanes they belong to. On the 16-host lab
/// (`examples/hub4x4.json`) the multilane plan crosses the hub link s0→s1 four times (two
/// transfers in each lane, 2 × T(msize) of bytes) and measured 2.2–2.4 T(msize) at every
/// segment size and window, while formula (2) alone predicted ~1 T (docs/model.md).
pub fn busiest_edge(plan: &Plan, topology: &Topology) -> usize {
    let mut count: BTreeMap<crate::topology::DirEdge, usize> = BTreeMap::new();
    for (l, lane) in plan.lanes.iter().enumerate() {
        let rail = plan.rail(l);
        if rail >= topology.rails() {
            continue; // the checker reports it
        }
        for (p, kids) in lane.children.iter().enumerate() {
            for &c in kids {
                if p < topology.size() && c < topology.size() {
                    for e in topology.path_on(rail, p, c) {
                        *count.entry(e).or_default() += 1;
                    }
                }
            }
        }
    }
    count.into_values().max().unwrap_or(0)
}

/// The segment and time of a plan on a topology without hosts: [`choose_segment`], or
/// [`choose_segment_with_links`] for several concurrent lanes.
fn choose_segment_flat(
    plan: &Plan,
    topology: &Topology,
    profile: &Profile,
    msize: u64,
) -> (u64, f64) {
    if plan.lanes.len() > 1 && plan.tree.is_pipelined() {
        choose_segment_with_links(plan, topology, profile, msize)
    } else {
        choose_segment(plan, profile, msize)
    }
}

/// [`choose_segment`] for plans of several concurrent lanes: each candidate is priced as the
/// larger of formula (2) and the time the busiest directed edge needs for its bytes
/// ([`busiest_edge`] lane shares at the profile's g per byte).
fn choose_segment_with_links(
    plan: &Plan,
    topology: &Topology,
    profile: &Profile,
    msize: u64,
) -> (u64, f64) {
    if msize == 0 {
        return (0, 0.0);
    }
    let share = per_lane(plan, msize);
    let busiest = busiest_edge(plan, topology) as f64;
    let mut best = (0u64, f64::INFINITY);
    for size in profile.sizes() {
        let seg = size.min(share).max(1);
        let per_byte = profile.cost(seg).g_us / seg as f64;
        let links = busiest * share as f64 * per_byte;
        let t = predict(plan, profile, msize, size).max(links);
        if t < best.1 {
            best = (seg, t);
        }
    }
    best
}

/// `auto`: the plan, segment size and predicted µs with the smallest predicted time among the
/// contention-free candidates (see [`plan_for`]).
pub fn choose(
    topology: &Topology,
    root: MachineId,
    profile: &Profile,
    msize: u64,
) -> Result<(Plan, u64, f64), ModelError> {
    let c = plan_for(topology, root, &TreeKind::Auto, profile, msize)?;
    Ok((c.plan, c.segment_bytes, c.predicted_us))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{gen, hosts};

    #[test]
    fn zero_bytes_cost_nothing() {
        let t = gen::hub(2, 3, false);
        let p = Profile::builtin("100mbit").unwrap();
        let plan = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
        assert_eq!(choose_segment(&plan, &p, 0), (0, 0.0));
        let c = plan_for(&t, 0, &TreeKind::Auto, &p, 0).unwrap();
        assert_eq!(c.predicted_us, 0.0);
    }

    #[test]
    fn table3_linear_100mbit_endpoints() {
        // Seed 003 Table 3, 100 Mbit/s, linear tree, P = 32, model column: 8 KB → 256 B,
        // 2 MB → 1024 B.
        let t = Topology::single_switch(32);
        let p = Profile::builtin("100mbit").unwrap();
        let plan = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
        assert_eq!(choose_segment(&plan, &p, 8 << 10).0, 256);
        assert_eq!(choose_segment(&plan, &p, 2 << 20).0, 1024);
    }

    #[test]
    fn segment_choice_is_monotonic_and_time_grows() {
        let t = gen::random_cluster(6, 32, 11);
        for name in ["100mbit", "1gbit"] {
            let p = Profile::builtin(name).unwrap();
            for kind in [TreeKind::Linear, TreeKind::Binary, TreeKind::Multilane] {
                let plan = plan::build(&t, 0, &kind, None).unwrap();
                let mut last = (0u64, 0.0f64);
                for shift in 13..=21 {
                    let (seg, time) = choose_segment(&plan, &p, 1 << shift);
                    assert!(seg >= last.0, "{name} {kind}: segment shrank at 2^{shift}");
                    assert!(
                        time > last.1,
                        "{name} {kind}: time did not grow at 2^{shift}"
                    );
                    last = (seg, time);
                }
            }
        }
    }

    #[test]
    fn chosen_segment_is_the_argmin() {
        let t = gen::random_cluster(4, 20, 5);
        let p = Profile::builtin("1gbit").unwrap();
        let plan = plan::build(&t, 3, &TreeKind::Binary, None).unwrap();
        let (seg, time) = choose_segment(&plan, &p, 300_000);
        assert!(p.sizes().any(|s| s == seg));
        for s in p.sizes() {
            assert!(time <= predict(&plan, &p, 300_000, s));
        }
    }

    #[test]
    fn concurrent_lanes_pay_for_their_busiest_shared_edge() {
        let p = Profile::builtin("100mbit").unwrap();
        let msize = 4 << 20;
        // The lab's hub of 3 edge switches with 4 machines each, plus 4 on the hub.
        let hub = gen::hub(3, 4, false);
        let lanes = plan_for(&hub, 0, &TreeKind::Multilane, &p, msize).unwrap();
        let linear = plan_for(&hub, 0, &TreeKind::Linear, &p, msize).unwrap();
        assert_eq!(busiest_edge(&linear.plan, &hub), 1);
        let busiest = busiest_edge(&lanes.plan, &hub);
        assert!(
            busiest >= 3,
            "multilane crosses some hub link {busiest} times"
        );
        // busiest × a half share of the message at least: measured 2.2–2.4 T on the lab.
        assert!(
            lanes.predicted_us > 1.4 * linear.predicted_us,
            "multilane {} vs linear {}",
            lanes.predicted_us,
            linear.predicted_us
        );
        // On one switch the lanes share no edge beyond the machines' own links: ~ linear.
        let one = gen::random_cluster(1, 16, 1);
        let lanes = plan_for(&one, 0, &TreeKind::Multilane, &p, msize).unwrap();
        let linear = plan_for(&one, 0, &TreeKind::Linear, &p, msize).unwrap();
        assert!(lanes.predicted_us < 1.1 * linear.predicted_us);
    }

    #[test]
    fn lanes_on_rails_are_priced_by_their_nics() {
        let p = Profile::builtin("100mbit").unwrap();
        let msize = 4 << 20;
        // The issue-16 lab: 16 machines, 2 rails of a hub and 3 edge switches.
        let t = gen::rails(2, 3, 4, false);
        let lanes = plan_for(&t, 0, &TreeKind::Multilane, &p, msize).unwrap();
        let linear = plan_for(&t, 0, &TreeKind::Linear, &p, msize).unwrap();
        assert_eq!(
            (lanes.plan.lanes.len(), busiest_edge(&lanes.plan, &t)),
            (2, 1)
        );
        let ratio = lanes.predicted_us / linear.predicted_us;
        assert!((0.45..0.6).contains(&ratio), "multilane/linear {ratio}");
        // Both lanes on rail 0 (one NIC) would pay for the shared NICs: ~ linear.
        let shared = Plan {
            rails: vec![0, 0],
            ..lanes.plan.clone()
        };
        let (_, on_one) = choose_segment_with_links(&shared, &t, &p, msize);
        assert!(on_one > 0.9 * linear.predicted_us, "{on_one}");
        // `auto` considers multilane where rails exist, and only there: on rail 0 alone (a
        // link with one NIC) it does not.
        let (plan, _, _) = choose(&t, 5, &p, msize).unwrap();
        assert_eq!(plan.tree, TreeKind::Multilane);
        assert_eq!(plan.rails, [0, 1]);
        let (plan, _, _) = choose(&t.first_rails(1), 5, &p, msize).unwrap();
        assert_ne!(plan.tree, TreeKind::Multilane);
        assert!(candidates(&gen::hub(3, 4, false))
            .iter()
            .all(|k| *k != TreeKind::Multilane));
        for msize in [1u64, 4096, 1 << 16] {
            let (plan, _, _) = choose(&gen::hub(3, 4, false), 0, &p, msize).unwrap();
            assert_ne!(plan.tree, TreeKind::Multilane);
        }
    }

    /// The 16-machine lab on 2 cores (`profiles/lab16-100mbit.json`).
    fn lab16() -> Profile {
        Profile::parse(include_str!("../../profiles/lab16-100mbit.json")).unwrap()
    }

    #[test]
    fn multilane_on_rails_segments_pay_for_the_shared_cpu() {
        let t = gen::rails(2, 3, 4, false);
        let msize = 4 << 20;
        let seg = |p: &Profile, kind: &TreeKind| plan_for(&t, 0, kind, p, msize).unwrap();
        // Without CPU cost per segment the model cuts each lane's half into 1 KiB segments
        // (the finding of issue 16): twice linear's segment count per lane, four times per rank.
        let mut free = Profile::builtin("100mbit").unwrap();
        free.segment_cpu_us = Some(0.0);
        assert_eq!(seg(&free, &TreeKind::Multilane).segment_bytes, 1024);
        assert_eq!(seg(&free, &TreeKind::Linear).segment_bytes, 4096);
        // Each rank forwards in both lanes, 4 segment ends per round on one CPU.
        let lanes = seg(&free, &TreeKind::Multilane).plan;
        assert_eq!(logp::segment_ends(&lanes.lanes), 4);
        // The lab's 16 ranks on 2 cores: multilane takes segments at least as large as linear's
        // (8 KiB; 16 KiB measured best at 50 mbit), and linear (one NIC, g(m) covers its CPU)
        // keeps its choice.
        let lab = lab16();
        let multi = seg(&lab, &TreeKind::Multilane);
        let linear = seg(&lab, &TreeKind::Linear);
        assert_eq!(linear.segment_bytes, 4096);
        assert!(
            (8192..=16384).contains(&multi.segment_bytes),
            "{}",
            multi.segment_bytes
        );
        // The CPU bound holds at every candidate: (X − 1) rounds of 4 ends.
        for size in lab.sizes() {
            let x = (msize / 2).div_ceil(size);
            let floor = (x - 1) as f64 * 4.0 * lab.segment_cpu_us();
            assert!(predict(&multi.plan, &lab, msize, size) >= floor, "{size}");
        }
        // Still about half of linear: the rails' gain survives the CPU term.
        let ratio = multi.predicted_us / linear.predicted_us;
        assert!((0.45..0.6).contains(&ratio), "multilane/linear {ratio}");
        // On one NIC at 4 MiB the gaps still set the pace (4 KiB and up: g ≥ 351 µs, more
        // than a chain's or a binary tree's ends at 96 µs each), so the CPU term changes nothing.
        let hub = gen::hub(3, 4, false);
        for kind in [TreeKind::Linear, TreeKind::Multilane, TreeKind::Binary] {
            let a = plan_for(&hub, 0, &kind, &free, msize).unwrap();
            let b = plan_for(&hub, 0, &kind, &lab, msize).unwrap();
            assert_eq!(
                (a.segment_bytes, a.predicted_us),
                (b.segment_bytes, b.predicted_us)
            );
        }
        // So is the default (12 µs per end), where a rank has a core of its own.
        let fast = seg(&Profile::builtin("100mbit").unwrap(), &TreeKind::Multilane);
        assert_eq!(fast.segment_bytes, 1024);
    }

    #[test]
    fn ranks_short_of_cpu_take_larger_segments_on_one_nic() {
        // Issue 11's lab: 8 machines × 2 ranks, the hub interleaved by machine, 1 MiB. With a
        // core per rank (12 µs per end) a chain round is g(1 KiB) = 89 µs and `auto` cuts 1 KiB
        // segments; with 16 ranks on 2 cores (96 µs per end) a round is at least 2 × 96 µs,
        // and it takes 4 KiB (measured on the lab: 1.08 × T(msize) against 1.09–1.13 at 1 KiB).
        let t = hosts::expand(&gen::hub(3, 2, true), Some(2)).unwrap();
        let msize = 1 << 20;
        let own = plan_for(
            &t,
            0,
            &TreeKind::Auto,
            &Profile::builtin("100mbit").unwrap(),
            msize,
        )
        .unwrap();
        assert_eq!(own.segment_bytes, 1024);
        let lab = lab16();
        let shared = plan_for(&t, 0, &TreeKind::Auto, &lab, msize).unwrap();
        assert_eq!(shared.segment_bytes, 4096);
        // The CPU bounds every tree and every segment size from below, the step model's
        // k-binomial trees included: (X − 1) rounds of the busiest rank's ends.
        let flat = Topology::single_switch(16);
        for kind in ["linear", "binary", "kbinomial:1", "kbinomial:2", "kary:3"] {
            let plan = plan::build(&flat, 0, &kind.parse().unwrap(), None).unwrap();
            for size in lab.sizes() {
                let x = msize.div_ceil(size);
                let floor = (x - 1) as f64 * round_cpu_us(&plan, &lab);
                assert!(predict(&plan, &lab, msize, size) >= floor, "{kind} {size}");
            }
        }
    }

    #[test]
    fn profiles_that_state_no_cpu_cost_are_seed_003s_model_on_one_nic() {
        // Seed 003 Table 3, 1 Gbit/s, linear on 32 machines: the model column's 256/256/512 B
        // at 8/16/32 KiB (Table 2's g already includes the overheads, §4.2). Issue 28: the
        // default 12 µs per end on one NIC had made them 512/512/1024.
        let flat = Topology::single_switch(32);
        let linear = plan::build(&flat, 0, &TreeKind::Linear, None).unwrap();
        let table2 = Profile::builtin("1gbit").unwrap();
        let picks: Vec<u64> = [8u64 << 10, 16 << 10, 32 << 10]
            .iter()
            .map(|&m| choose_segment(&linear, &table2, m).0)
            .collect();
        assert_eq!(picks, [256, 256, 512]);
        // Formula (2) alone, the k-binomial step model and two-level plans included.
        for kind in ["linear", "binary", "kbinomial:2", "kary:3"] {
            let plan = plan::build(&flat, 0, &kind.parse().unwrap(), None).unwrap();
            assert_eq!(round_cpu_us(&plan, &table2), 0.0, "{kind}");
        }
        let hosts = hosts::expand(&gen::hub(3, 2, true), Some(2)).unwrap();
        let own = plan_for(&hosts, 0, &TreeKind::Auto, &table2, 1 << 20).unwrap();
        let mut free = table2.clone();
        free.segment_cpu_us = Some(0.0);
        let zero = plan_for(&hosts, 0, &TreeKind::Auto, &free, 1 << 20).unwrap();
        assert_eq!(own, zero);
        // A stated cost is charged on one NIC: 12 µs per end moves the 8 KiB row to 512 B.
        let mut stated = table2.clone();
        stated.segment_cpu_us = Some(profile::DEFAULT_SEGMENT_CPU_US);
        assert_eq!(choose_segment(&linear, &stated, 8 << 10).0, 512);
        // On rails the default still applies: both chains' 4 ends per round on one CPU.
        let rails =
            plan::build(&gen::rails(2, 3, 4, false), 0, &TreeKind::Multilane, None).unwrap();
        assert_eq!(
            round_cpu_us(&rails, &table2),
            4.0 * profile::DEFAULT_SEGMENT_CPU_US
        );
    }

    #[test]
    fn auto_picks_the_cheapest_candidate() {
        let t = gen::random_cluster(5, 24, 9);
        let p = Profile::builtin("100mbit").unwrap();
        for msize in [4096u64, 65536, 4 << 20] {
            let (plan, _, time) = choose(&t, 2, &p, msize).unwrap();
            assert_ne!(plan.tree, TreeKind::Auto);
            assert!(!matches!(plan.tree, TreeKind::KBinomial(None)));
            let chosen_clean = plan::check(&plan, &t).contention_free;
            for kind in &AUTO_CANDIDATES {
                let c = plan_for(&t, 2, kind, &p, msize).unwrap();
                if plan::check(&c.plan, &t).contention_free == chosen_clean {
                    assert!(time <= c.predicted_us, "{msize}: {kind} is cheaper");
                } else {
                    assert!(
                        chosen_clean,
                        "{msize}: a contention-free {kind} was passed over"
                    );
                }
            }
        }
        // Large messages: the pipeline term (X − 1)·D·g dominates, so a binary or 3-ary tree
        // (D ≥ 2 on the whole message) never wins.
        let (plan, _, _) = choose(&t, 0, &p, 64 << 20).unwrap();
        assert!(
            !matches!(plan.tree, TreeKind::Binary | TreeKind::Kary(_)),
            "{}",
            plan.tree
        );
    }

    #[test]
    fn bad_input_is_an_error() {
        let t = Topology::single_switch(4);
        let p = Profile::builtin("1gbit").unwrap();
        for kind in [TreeKind::Auto, TreeKind::KBinomial(None), TreeKind::Linear] {
            let err = plan_for(&t, 9, &kind, &p, 1000).unwrap_err();
            assert!(
                matches!(err, ModelError::Plan(PlanError::BadRoot { .. })),
                "{err}"
            );
        }
        let empty = Profile {
            points: vec![],
            memcpy_gb_s: None,
            segment_cpu_us: None,
        };
        let err = plan_for(&t, 0, &TreeKind::Linear, &empty, 1000).unwrap_err();
        assert!(matches!(err, ModelError::EmptyProfile));
    }

    #[test]
    fn baselines_are_not_pipelined() {
        let t = Topology::single_switch(8);
        let p = Profile::builtin("100mbit").unwrap();
        let flat = plan::build(&t, 0, &TreeKind::Flat, None).unwrap();
        let (seg, time) = choose_segment(&flat, &p, 1 << 20);
        assert_eq!(seg, 1 << 20);
        let c = p.cost(1 << 20);
        // Flat: the last of 7 children gets the message after L + 7g.
        assert!((time - (c.l_us + 7.0 * c.g_us)).abs() < 1e-6);
    }
}
