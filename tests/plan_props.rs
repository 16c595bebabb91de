//! Property tests of the planners on random clusters (`topology::gen::random_cluster`):
//! every tree spans all ranks once and is rooted at the root; the topology-aware trees are
//! contention-free by an independent brute-force test written here (pairwise
//! shared directed edges of `Topology::path_on` over communications with different senders), and `plan::check` agrees
//! with the brute force on every tree, the (often contending) baselines included.

use pipecast::plan::{self, check, Lane, Plan, PlanError, TreeKind};
use pipecast::topology::{gen, Topology};
use proptest::prelude::*;

const AWARE: [TreeKind; 5] = [
    TreeKind::Linear,
    TreeKind::Binary,
    TreeKind::Kary(2),
    TreeKind::Kary(3),
    TreeKind::Kary(4),
];
const BASELINES: [TreeKind; 4] = [
    TreeKind::Flat,
    TreeKind::Binomial,
    TreeKind::NaiveLinear,
    TreeKind::NaiveBinary,
];

/// Walks the lane from `root` over `children`; every rank must be met exactly once and its
/// `parents` entry must name the rank that sent to it.
fn assert_spanning_tree(lane: &Lane, root: usize, size: usize) {
    assert_eq!(lane.parents.len(), size);
    assert_eq!(lane.children.len(), size);
    assert_eq!(lane.parents[root], None, "the root has a parent");
    let mut seen = vec![false; size];
    seen[root] = true;
    let mut stack = vec![root];
    let mut count = 1;
    while let Some(r) = stack.pop() {
        for &c in &lane.children[r] {
            assert!(!seen[c], "rank {c} is reached twice");
            assert_eq!(lane.parents[c], Some(r), "parents[{c}]");
            seen[c] = true;
            count += 1;
            stack.push(c);
        }
    }
    assert_eq!(count, size, "not every rank is reached from the root");
}

/// Brute force: some two communications with different senders share a directed edge.
fn brute_force_contends(lane: &Lane, t: &Topology) -> bool {
    brute_force_contends_on(lane, t, 0)
}

fn cluster() -> impl Strategy<Value = (Topology, usize)> {
    (
        1usize..12,
        1usize..48,
        any::<u64>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(switches, machines, seed, root)| {
            let t = gen::random_cluster(switches, machines, seed);
            let root = root.index(machines);
            (t, root)
        })
}

/// Machines with 2 to 4 NICs, each rail its own random switch tree and placement.
fn rails() -> impl Strategy<Value = (Topology, usize)> {
    (
        2usize..5,
        1usize..8,
        1usize..40,
        any::<u64>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(rails, switches, machines, seed, root)| {
            let t = gen::random_rails(rails, switches, machines, seed);
            (t, root.index(machines))
        })
}

/// Brute force on a rail: two transfers of the lane with different senders share a directed
/// edge of the rail (its NICs and switch links; rail 0 is what `Topology::contends` compares).
fn brute_force_contends_on(lane: &Lane, t: &Topology, rail: usize) -> bool {
    let comms: Vec<(usize, usize)> = lane
        .children
        .iter()
        .enumerate()
        .flat_map(|(p, kids)| kids.iter().map(move |&c| (p, c)))
        .collect();
    comms.iter().enumerate().any(|(x, &a)| {
        let pa = t.path_on(rail, a.0, a.1);
        comms[x + 1..]
            .iter()
            .any(|&b| a.0 != b.0 && t.path_on(rail, b.0, b.1).iter().any(|e| pa.contains(e)))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Seed 002's multi-lane NICs: k rails give k lanes, lane i on rail i, each a spanning
    /// tree that is contention-free on its rail and never touches another rail's NICs.
    #[test]
    fn multilane_puts_lane_i_on_rail_i((t, root) in rails()) {
        let plan = plan::build(&t, root, &TreeKind::Multilane, None).unwrap();
        prop_assert_eq!(plan.lanes.len(), t.rails());
        prop_assert_eq!(&plan.rails, &(0..t.rails()).collect::<Vec<_>>());
        for (rail, lane) in plan.lanes.iter().enumerate() {
            assert_spanning_tree(lane, root, t.size());
            prop_assert!(!brute_force_contends_on(lane, &t, rail), "lane {} contends", rail);
            for (p, kids) in lane.children.iter().enumerate() {
                for &c in kids {
                    for other in (0..t.rails()).filter(|&o| o != rail) {
                        let theirs = t.path_on(other, p, c);
                        prop_assert!(t.path_on(rail, p, c).iter().all(|e| !theirs.contains(e)));
                    }
                }
            }
        }
        prop_assert!(check(&plan, &t).ok());
        // Every other tree plans on rail 0 and is still a spanning tree there.
        for kind in AWARE {
            let plan = plan::build(&t, root, &kind, None).unwrap();
            prop_assert!(plan.rails.is_empty());
            prop_assert!(check(&plan, &t).ok(), "{}", kind);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn topology_aware_trees_are_contention_free((t, root) in cluster()) {
        for kind in AWARE {
            let plan = plan::build(&t, root, &kind, None).unwrap();
            prop_assert_eq!(plan.root, root);
            prop_assert_eq!(plan.lanes.len(), 1);
            let lane = &plan.lanes[0];
            assert_spanning_tree(lane, root, t.size());
            if let TreeKind::Kary(k) = kind {
                prop_assert!(lane.max_degree() <= k as usize);
            }
            prop_assert!(!brute_force_contends(lane, &t), "{} contends", kind);
            let report = check(&plan, &t);
            prop_assert!(report.ok(), "{}: {:?}", kind, report);
        }
        // kary:2 is Algorithm 2 edge for edge, and no binary tree beats ⌊log2 P⌋.
        let binary = plan::build(&t, root, &TreeKind::Binary, None).unwrap();
        let kary2 = plan::build(&t, root, &TreeKind::Kary(2), None).unwrap();
        prop_assert_eq!(&binary.lanes, &kary2.lanes);
        prop_assert!(binary.height() >= t.size().ilog2() as usize);
    }

    #[test]
    fn checker_agrees_with_brute_force((t, root) in cluster()) {
        for kind in AWARE.iter().chain(&BASELINES) {
            let plan = plan::build(&t, root, kind, None).unwrap();
            assert_spanning_tree(&plan.lanes[0], root, t.size());
            let report = check(&plan, &t);
            prop_assert!(report.spanning && report.rooted && report.acyclic && report.consistent);
            let brute = brute_force_contends(&plan.lanes[0], &t);
            prop_assert_eq!(report.contention_free, !brute, "{}", kind);
            prop_assert_eq!(report.conflicts.is_empty(), !brute);
            for c in &report.conflicts {
                prop_assert!(c.first.0 != c.second.0);
                prop_assert!(t.path(c.first.0, c.first.1).contains(&c.edge));
                prop_assert!(t.path(c.second.0, c.second.1).contains(&c.edge));
                prop_assert_eq!(&c.edge_name, &t.edge_name(c.edge));
            }
        }
    }

    #[test]
    fn a_detached_rank_is_caught((t, root) in cluster(), victim in any::<prop::sample::Index>()) {
        prop_assume!(t.size() >= 2);
        let mut plan = plan::build(&t, root, &TreeKind::Binary, None).unwrap();
        let lane = &mut plan.lanes[0];
        let mut r = victim.index(t.size());
        if r == root {
            r = (r + 1) % t.size();
        }
        let parent = lane.parents[r].unwrap();
        lane.children[parent].retain(|&c| c != r);
        let report = check(&plan, &t);
        prop_assert!(!report.ok());
        prop_assert!(!report.spanning);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary (mostly broken) lanes: the checker never panics, and whatever it calls a good
    /// plan really is a contention-free spanning tree.
    #[test]
    fn checker_survives_garbage(
        (t, root) in cluster(),
        raw in prop::collection::vec(prop::collection::vec(0usize..50, 0..3), 0..50),
        parents in prop::collection::vec(prop::option::of(0usize..50), 0..50),
    ) {
        let lane = Lane { parents, children: raw };
        let plan = Plan { tree: TreeKind::Linear, root, lanes: vec![lane.clone()], rails: Vec::new() };
        let report = check(&plan, &t);
        if report.ok() {
            assert_spanning_tree(&lane, root, t.size());
            prop_assert!(!brute_force_contends(&lane, &t));
        }
    }
}

#[test]
fn the_baselines_contend_on_an_interleaved_hub() {
    // Seed 000's topology-(5)-like placement: consecutive ranks sit on different switches.
    let t = gen::hub(3, 4, true);
    for kind in [
        TreeKind::Binomial,
        TreeKind::NaiveLinear,
        TreeKind::NaiveBinary,
    ] {
        let plan = plan::build(&t, 0, &kind, None).unwrap();
        assert!(!check(&plan, &t).contention_free, "{kind}");
        assert!(brute_force_contends(&plan.lanes[0], &t), "{kind}");
    }
    for kind in AWARE {
        let plan = plan::build(&t, 0, &kind, None).unwrap();
        assert!(check(&plan, &t).ok(), "{kind}");
    }
}

#[test]
fn errors_name_the_problem() {
    let t = gen::hub(3, 4, false);
    for kind in AWARE.iter().chain(&BASELINES) {
        let err = plan::build(&t, 16, kind, None).unwrap_err();
        assert_eq!(err, PlanError::BadRoot { root: 16, size: 16 });
        assert!(err.to_string().contains("root 16"), "{err}");
    }
    assert!(matches!(
        "kary:0".parse::<TreeKind>(),
        Err(PlanError::BadArity(_))
    ));
    assert!(matches!(
        plan::build(&t, 0, &TreeKind::Auto, None),
        Err(PlanError::NeedsModel(_))
    ));
    let big = Topology::single_switch(plan::binary::MAX_RANKS + 1);
    let err = plan::build(&big, 0, &TreeKind::Binary, None).unwrap_err();
    assert!(matches!(err, PlanError::TooLarge { .. }));
    assert!(err.to_string().contains("use linear"), "{err}");
    // A plan whose root is not the lanes' root.
    let mut plan: Plan = plan::build(&t, 0, &TreeKind::Linear, None).unwrap();
    plan.root = 3;
    assert!(!check(&plan, &t).rooted);
}

#[test]
fn larger_clusters_stay_contention_free() {
    for seed in 0..3 {
        let t = gen::random_cluster(50, 400, seed);
        for kind in [TreeKind::Binary, TreeKind::Kary(3)] {
            let plan = plan::build(&t, seed as usize * 7, &kind, None).unwrap();
            let report = check(&plan, &t);
            assert!(
                report.ok(),
                "{kind} seed {seed}: {:?}",
                report.conflicts.first()
            );
        }
    }
}
