//! Whole broadcasts timed by [`simulate`]: sanity against closed forms and the LogP model,
//! contention where the checker predicts it, and timing-only runs that time exactly as runs
//! with payloads.

use crate::engine::{Config, Setup};
use crate::model::{self, Profile};
use crate::plan::{self, TreeKind};
use crate::sim::{
    simulate, simulate_on_rails, LinkModel, Outcome, SimNet, Timing, EDGE_LATENCY_NS,
};
use crate::topology::{gen, Topology};
use std::sync::Arc;

fn lanes(topo: &Topology, tree: &str) -> Arc<[plan::Lane]> {
    let kind: TreeKind = tree.parse().unwrap();
    plan::build(topo, 0, &kind, Some(16)).unwrap().lanes.into()
}

/// Linear on one switch at link rate: the message's wire time T(msize) plus the pipeline's
/// fill (P − 2 more segment times and a few latencies per hop), and no more.
#[test]
fn linear_on_one_switch_is_the_message_time_plus_the_fill() {
    let (p, msize, segment) = (8usize, 1u64 << 20, 1u64 << 16);
    let topo = Topology::single_switch(p);
    let gbps = 1.0;
    let r = simulate(
        &topo,
        lanes(&topo, "linear"),
        0,
        msize,
        segment,
        &Timing::Rate { gbps },
    )
    .unwrap();
    let ns_per_byte = 8.0 / gbps;
    let x = msize / segment;
    let seg_ns = (segment + 40) as f64 * ns_per_byte;
    let t_msize = x as f64 * seg_ns;
    let fill = (p - 2) as f64 * (seg_ns + 2.0 * EDGE_LATENCY_NS as f64);
    let t = r.completion_ns as f64;
    assert!(t >= t_msize + fill, "{t} < {t_msize} + {fill}");
    assert!(
        t <= (t_msize + fill) * 1.02 + 50_000.0,
        "{t} vs {t_msize} + {fill}"
    );
    // Every rank holds the message; the root's uplink carried X segments (and nothing else).
    assert!(r.holds_ns.iter().all(|&h| h <= r.completion_ns));
    assert_eq!(r.finished_ns.len(), p);
    let up = r
        .edges
        .iter()
        .find(|e| e.edge == topo.machine_up(0))
        .unwrap();
    assert_eq!(up.busy_ns as f64, t_msize);
    assert!(r.contention.is_empty(), "{:?}", r.contention);
}

/// With a profile and a contention-free tree, the simulation is the LogP model (seed 003
/// §4.2) plus what the model leaves out (credits, the window): within 5 %.
#[test]
fn contention_free_trees_simulate_near_the_model() {
    let topo = gen::random_cluster(4, 24, 5);
    let profile = Profile::builtin("100mbit").unwrap();
    for tree in ["linear", "binary"] {
        let plan = plan::build(&topo, 0, &tree.parse().unwrap(), None).unwrap();
        assert!(plan::check(&plan, &topo).contention_free);
        for (msize, seg) in [(64u64 << 10, 4096u64), (1 << 20, 8192)] {
            let r = simulate(
                &topo,
                plan.lanes.clone().into(),
                0,
                msize,
                seg,
                &Timing::Profile(profile.clone()),
            )
            .unwrap();
            let predicted = model::predict(&plan, &profile, msize, seg);
            let t = r.completion_ns as f64 / 1000.0;
            assert!(
                (t - predicted).abs() <= 0.05 * predicted,
                "{tree} {msize}: simulated {t} µs, model {predicted} µs"
            );
            assert!(r.contention.is_empty(), "{tree}: {:?}", r.contention);
        }
    }
}

/// Rails are edges like any other (issue 16): multilane on two rails, each lane on its own
/// NICs and switches, finishes in about half the time of `linear` on one rail; the same lanes
/// all on rail 0 share the NICs and take about linear's time. Every rail-1 edge carries the
/// second lane, no rail-0 edge does.
#[test]
fn multilane_on_two_rails_takes_half_of_one_rail() {
    let topo = gen::rails(2, 3, 4, false);
    let timing = Timing::Rate { gbps: 1.0 };
    let (msize, seg) = (8u64 << 20, 65536u64);
    let multi = plan::build(&topo, 0, &TreeKind::Multilane, None).unwrap();
    assert_eq!(multi.rails, [0, 1]);
    let linear = plan::build(&topo, 0, &TreeKind::Linear, None).unwrap();
    let run = |plan: &plan::Plan, rails: &[usize]| {
        simulate_on_rails(
            &topo,
            plan.lanes.clone().into(),
            rails,
            0,
            msize,
            seg,
            &timing,
        )
        .unwrap()
    };
    let one = run(&linear, &[]).completion_ns as f64;
    let two = run(&multi, &multi.rails);
    let ratio = two.completion_ns as f64 / one;
    assert!((0.45..0.6).contains(&ratio), "multilane/linear {ratio}");
    assert!(two.contention.is_empty(), "{:?}", two.contention);
    // Both NICs of the root send half the message each.
    let up = |rail| {
        two.edges
            .iter()
            .find(|e| e.edge == topo.nic_up(0, rail))
            .map_or(0, |e| e.busy_ns)
    };
    let (a, b) = (up(0), up(1));
    assert!(a > 0 && a == b, "root's NICs busy {a} and {b} ns");
    // On rail 0 alone the lanes share the NICs: no faster than linear.
    let shared = run(&multi, &[0, 0]).completion_ns as f64;
    assert!(shared / one > 0.9, "both lanes on rail 0: {}", shared / one);
    assert_eq!(run(&multi, &[]).completion_ns as f64, shared);
}

/// A topology-unaware chain on interleaved switches sends different senders' data over the
/// same switch links at once; the contention-free chain on the same cluster does not, and is
/// faster.
#[test]
fn a_topology_unaware_tree_shows_contention() {
    let topo = gen::hub(3, 4, true);
    let timing = Timing::Rate { gbps: 1.0 };
    let naive = simulate(
        &topo,
        lanes(&topo, "naive-linear"),
        0,
        4 << 20,
        65536,
        &timing,
    )
    .unwrap();
    let aware = simulate(&topo, lanes(&topo, "linear"), 0, 4 << 20, 65536, &timing).unwrap();
    assert!(!naive.contention.is_empty());
    assert!(naive.contention.iter().all(|c| c.senders >= 2));
    assert!(aware.contention.is_empty(), "{:?}", aware.contention);
    assert!(naive.completion_ns > aware.completion_ns);
    let b = naive.bottleneck.unwrap();
    assert!(naive.edges.iter().all(|e| e.busy_ns <= b.busy_ns));
}

/// A shared port (TCP's connections on one NIC) gives every child of a whole-message tree
/// its message at about the same time, when all of them are through; the 1-port model
/// serves them one after another (T, 2T, 3T). Bytes arrive intact either way, and a tree of
/// small segments times the same.
#[test]
fn a_shared_port_serves_the_children_together() {
    let topo = Topology::single_switch(4);
    let msize = 1u64 << 20;
    let run = |tree: &str, segment: u64, shared: bool| {
        let l = lanes(&topo, tree);
        let setup = Setup {
            seq: 1,
            root: 0,
            msize,
            segment,
            deep: false,
        };
        let mut net = SimNet::new(&topo, LinkModel::rate(1.0, 500), 1);
        net.engine_config(Config::default());
        if shared {
            net.shared_port(65536);
        }
        net.post_everywhere(&l, setup);
        assert!(net.run().iter().all(|o| *o == Outcome::Done));
        for r in 0..topo.size() {
            assert_eq!(net.buffer(r, 1), Some(net.message(1)), "{tree} rank {r}");
        }
        (1..topo.size())
            .map(|r| net.holds_at(r, 1).unwrap() as f64)
            .collect::<Vec<_>>()
    };
    let t = msize as f64 * 8.0; // ns at 1 Gbit/s
    let one_port = run("flat", msize, false);
    let shared = run("flat", msize, true);
    let mut sorted = one_port.clone();
    sorted.sort_by(f64::total_cmp);
    for (i, h) in sorted.iter().enumerate() {
        let want = (i + 1) as f64 * t;
        assert!((h - want).abs() < 0.01 * want, "1-port {one_port:?}");
    }
    // Round robin in 64 KiB turns: the last turns end a quantum apart.
    let quantum = 65536.0 * 8.0;
    for h in &shared {
        assert!(*h >= 3.0 * t - 2.5 * quantum, "shared {shared:?}");
        assert!(*h <= 3.0 * t * 1.01, "shared {shared:?}");
    }
    assert_eq!(run("binary", 16384, false), run("binary", 16384, true));
}

/// Timing only changes nothing but memory: the same run with payloads (checked byte for
/// byte) finishes every rank at the same virtual time.
#[test]
fn timing_only_times_like_payloads() {
    let topo = gen::random_cluster(3, 9, 2);
    for tree in ["linear", "binomial", "kbinomial:2"] {
        let l = lanes(&topo, tree);
        let setup = Setup {
            seq: 1,
            root: 0,
            msize: 10_001,
            segment: 512,
            deep: false,
        };
        let run = |payloads: bool| {
            let mut net = SimNet::new(&topo, LinkModel::rate(1.0, 500), 1);
            net.engine_config(Config::default());
            if !payloads {
                net.without_payloads();
            }
            net.post_everywhere(&l, setup);
            assert!(net.run().iter().all(|o| *o == Outcome::Done));
            if payloads {
                for r in 0..topo.size() {
                    assert_eq!(net.buffer(r, 1), Some(net.message(1)), "rank {r}");
                }
            }
            (0..topo.size())
                .map(|r| (net.finished_at(r, 1), net.holds_at(r, 1)))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(true), run(false), "{tree}");
    }
}

#[test]
fn zero_bytes_and_bad_input() {
    let topo = Topology::single_switch(4);
    let r = simulate(
        &topo,
        lanes(&topo, "linear"),
        0,
        0,
        1024,
        &Timing::Rate { gbps: 1.0 },
    )
    .unwrap();
    assert!(r.holds_ns.iter().all(|&h| h == 0));
    let other = Topology::single_switch(5);
    assert!(simulate(
        &other,
        lanes(&topo, "linear"),
        0,
        10,
        4,
        &Timing::Rate { gbps: 1.0 }
    )
    .is_err());
    assert!(simulate(
        &topo,
        lanes(&topo, "linear"),
        0,
        10,
        4,
        &Timing::Rate { gbps: 0.0 }
    )
    .is_err());
}
