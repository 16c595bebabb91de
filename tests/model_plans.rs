//! Property tests for the k-binomial and multi-lane planners and the cost model on random
//! clusters (seed 003's generator).

use pipecast::model::{self, logp, Profile};
use pipecast::plan::{self, kbinomial, multilane, Lane, TreeKind};
use pipecast::topology::gen;
use proptest::prelude::*;

/// Ranks reached from `root` by walking children, each exactly once.
fn reached(lane: &Lane, root: usize) -> Vec<bool> {
    let mut seen = vec![false; lane.parents.len()];
    let mut stack = vec![root];
    while let Some(r) = stack.pop() {
        assert!(!seen[r], "rank {r} reached twice");
        seen[r] = true;
        stack.extend(&lane.children[r]);
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn kbinomial_spans_with_degree_at_most_k(
        switches in 1usize..8, machines in 1usize..70, seed in 0u64..1000, k in 1u32..7,
    ) {
        let t = gen::random_cluster(switches, machines, seed);
        let root = seed as usize % machines;
        let lane = kbinomial::build(&t, root, k).unwrap();
        prop_assert!(reached(&lane, root).iter().all(|&s| s));
        prop_assert!(lane.max_degree() <= k as usize);
        let t_s = kbinomial::arrival_steps(&lane).into_iter().max().unwrap();
        prop_assert_eq!(t_s, kbinomial::first_packet_steps(machines as u64, k) as u64);
    }

    #[test]
    fn multilane_every_rank_receives_both_halves(
        switches in 1usize..6, machines in 1usize..60, seed in 0u64..1000, sites in 1usize..4,
    ) {
        let mut t = gen::random_cluster(switches, machines, seed);
        if sites > 1 {
            // Label sites round-robin by switch and rebuild through the file format.
            let mut v = pipecast::topology::to_json(&t);
            for m in v["machines"].as_array_mut().unwrap() {
                let s: usize = m["switch"].as_str().unwrap()[1..].parse().unwrap();
                m["site"] = serde_json::json!(format!("site{}", s % sites));
            }
            t = pipecast::topology::parse_topology(&v.to_string()).unwrap();
        }
        let root = (seed as usize / 7) % machines;
        let lanes = multilane::build(&t, root).unwrap();
        prop_assert_eq!(lanes.len(), 2);
        for lane in &lanes {
            prop_assert_eq!(lane.root(), Some(root));
            prop_assert!(reached(lane, root).iter().all(|&s| s));
        }
        if sites == 1 {
            for r in 0..machines {
                let sends = lanes[0].children[r].len() + lanes[1].children[r].len();
                prop_assert!(sends <= 2, "rank {} sends {} half streams", r, sends);
            }
        }
    }

    #[test]
    fn predictions_are_finite_and_grow_with_the_message(
        switches in 1usize..6, machines in 2usize..40, seed in 0u64..1000,
    ) {
        let t = gen::random_cluster(switches, machines, seed);
        let p = Profile::builtin(if seed % 2 == 0 { "100mbit" } else { "1gbit" }).unwrap();
        for kind in [
            TreeKind::Linear, TreeKind::Binary, TreeKind::KBinomial(None), TreeKind::Multilane,
            TreeKind::Kary(3), TreeKind::Flat, TreeKind::Auto,
        ] {
            let small = model::plan_for(&t, 0, &kind, &p, 200_000).unwrap();
            let large = model::plan_for(&t, 0, &kind, &p, 10_000_000).unwrap();
            prop_assert!(small.predicted_us.is_finite() && small.predicted_us > 0.0);
            prop_assert!(large.predicted_us > small.predicted_us, "{}", kind);
            prop_assert!(large.segment_bytes >= small.segment_bytes || kind == TreeKind::Auto, "{} {} {}", kind, small.segment_bytes, large.segment_bytes);
        }
    }
}

#[test]
fn multilane_halves_beat_one_binary_tree_for_large_messages() {
    // Seed 002 Table 1: binary (pipelined) log p·l + 2M/b versus multilane log p·l + M/b.
    let t = gen::random_cluster(1, 31, 1);
    let p = Profile::builtin("100mbit").unwrap();
    let binary = plan::build(&t, 0, &TreeKind::Binary, None).unwrap();
    let lanes = plan::build(&t, 0, &TreeKind::Multilane, None).unwrap();
    let msize = 64 << 20;
    let c = p.cost(8192);
    let (_, multi) = model::choose_segment(&lanes, &p, msize);
    // Bandwidth term of one lane pair: (X − 1)·2·g with X = msize / 2 / segment.
    let x = msize / 2 / 8192;
    assert!(multi <= logp::tree_time(&lanes.lanes, x, c) + 1e-6);
    if binary.max_degree() == 2 {
        let (_, bin) = model::choose_segment(&binary, &p, msize);
        assert!(multi < 0.6 * bin, "multilane {multi} vs binary {bin}");
    }
}
