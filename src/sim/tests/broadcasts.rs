//! One broadcast at a time on the simulated network: every tree, root and awkward size byte
//! for byte, dead ranks, deep broadcasts; random trees on a reordering network.

use super::{all_trees, config, random_lane};
use crate::engine::{Config, EngineError, Setup};
use crate::plan::{self, Lane, TreeKind};
use crate::sim::{LinkModel, Outcome, SimNet};
use crate::topology::{gen, Topology};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Every hop 1..=26 ns: messages reorder.
fn jittery() -> LinkModel {
    LinkModel {
        jitter: 25,
        ..LinkModel::reliable(1)
    }
}

/// Broadcasts `msize` bytes from `root` over `lanes` on `topo`; every rank must end with the
/// root's bytes.
fn check_broadcast(
    topo: &Topology,
    lanes: &[Lane],
    root: usize,
    msize: u64,
    segment: u64,
    seed: u64,
) {
    let setup = Setup {
        seq: 7,
        root,
        msize,
        segment,
        deep: seed % 2 == 0,
    };
    let mut net = SimNet::new(topo, jittery(), seed);
    net.engine_config(config()).post_everywhere(lanes, setup);
    let outcome = net.run();
    for (r, o) in outcome.iter().enumerate() {
        assert_eq!(
            o,
            &Outcome::Done,
            "rank {r} msize {msize} seg {segment} root {root}"
        );
        assert!(
            net.buffer(r, 7) == Some(net.message(7)),
            "rank {r} holds wrong bytes (msize {msize}, seg {segment}, root {root})"
        );
    }
}

#[test]
fn every_tree_root_and_awkward_size_is_byte_exact() {
    let segment = 16;
    for size in [2, 3, 5, 8] {
        let topo = gen::random_cluster(3, size, size as u64);
        for tree in all_trees() {
            for root in 0..size {
                let Ok(plan) = plan::build(&topo, root, &tree, Some(4)) else {
                    continue; // a planner that does not take this topology
                };
                for msize in [0, 1, 7, segment - 1, segment + 1, 5 * segment + 3] {
                    check_broadcast(
                        &topo,
                        &plan.lanes,
                        root,
                        msize,
                        segment,
                        msize + root as u64,
                    );
                }
            }
        }
    }
}

#[test]
fn scatter_allgather_lanes_are_byte_exact() {
    for size in [2, 4, 7] {
        let topo = Topology::single_switch(size);
        for root in 0..size {
            let lanes = plan::scatter_allgather::scatter_allgather(size, root);
            for msize in [0, 3, 100, 1000] {
                check_broadcast(&topo, &lanes, root, msize, 8, 3 + msize);
            }
        }
    }
}

/// Rank 3's parent and children wait for it and fail with a timeout; nobody hangs (a root
/// whose children all acknowledged may finish: it is not waiting for anyone). On a lossy
/// network too, where the reliability toward the dead rank retransmits until the engine
/// gives up.
#[test]
fn dead_rank_makes_others_time_out() {
    let size = 6;
    let topo = Topology::single_switch(size);
    let lossy = LinkModel {
        loss: 0.1,
        ..jittery()
    };
    for model in [jittery(), lossy] {
        for tree in ["linear", "flat"] {
            let plan = plan::build(&topo, 0, &tree.parse().unwrap(), None).unwrap();
            let setup = Setup {
                seq: 1,
                root: 0,
                msize: 1000,
                segment: 10,
                deep: false,
            };
            let mut net = SimNet::new(&topo, model, 9);
            net.engine_config(config())
                .reliable_config(fast_reliable())
                .kill(3)
                .post_everywhere(&plan.lanes, setup);
            let outcome = net.run();
            assert_eq!(outcome[3], Outcome::Dead);
            let lane = &plan.lanes[0];
            let neighbours = lane.parents[3]
                .into_iter()
                .chain(lane.children[3].iter().copied());
            // On a lossy path the lossy adapter's liveness (as raw Ethernet's) may find 3
            // gone before the engine's idle timeout fires: either way the rank fails naming 3.
            for r in neighbours {
                assert!(
                    matches!(&outcome[r], Outcome::Failed(EngineError::Timeout { waiting_for, .. }) if waiting_for.contains(&3))
                        || matches!(outcome[r], Outcome::PeerGone { peer: 3, .. }),
                    "{tree}, loss {}: rank {r} must fail waiting for 3: {outcome:?}",
                    model.loss
                );
            }
        }
    }
}

/// Retransmission timers scaled to these links (round trips of a few µs; the defaults suit
/// Ethernet): above any round trip here, below the engine's idle timeout.
pub(super) fn fast_reliable() -> crate::engine::reliable::Config {
    crate::engine::reliable::Config {
        rto_initial: 50_000,
        rto_min: 20_000,
        rto_max: 200_000,
        ..Default::default()
    }
}

#[test]
fn deep_broadcast_root_finishes_last() {
    let size = 5;
    let topo = Topology::single_switch(size);
    let plan = plan::build(&topo, 2, &TreeKind::NaiveLinear, None).unwrap();
    let setup = Setup {
        seq: 0,
        root: 2,
        msize: 0,
        segment: 1,
        deep: true,
    };
    // Without Done messages from the far end the root must not finish: kill the chain's end.
    let last = (0..size)
        .find(|&r| r != 2 && plan.lanes[0].children[r].is_empty())
        .unwrap();
    let mut net = SimNet::new(&topo, jittery(), 1);
    net.engine_config(config())
        .kill(last)
        .post_everywhere(&plan.lanes, setup);
    let outcome = net.run();
    assert!(
        matches!(outcome[2], Outcome::Failed(_)),
        "root of a deep broadcast waited for the dead leaf: {outcome:?}"
    );
}

/// The reliability on a network that loses nothing costs acknowledgements, never a resend
/// (as raw Ethernet on a clean link).
#[test]
fn reliability_on_a_clean_network_never_resends() {
    let topo = gen::random_cluster(3, 7, 5);
    let plan = plan::build(&topo, 4, &TreeKind::Binary, None).unwrap();
    let setup = Setup {
        seq: 1,
        root: 4,
        msize: 5000,
        segment: 64,
        deep: true,
    };
    let mut net = SimNet::new(&topo, LinkModel::reliable(500), 3);
    net.engine_config(config())
        .reliable_config(fast_reliable())
        .reliable_everywhere()
        .post_everywhere(&plan.lanes, setup);
    assert!(net.run().iter().all(|o| *o == Outcome::Done));
    for r in 0..7 {
        assert_eq!(net.buffer(r, 1), Some(net.message(1)), "rank {r}");
    }
    let stats = net.stats();
    assert_eq!(stats.retransmits, 0, "{stats:?}");
    assert_eq!(stats.sends, stats.messages);
    assert!(stats.acks > 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Random trees (several lanes), windows and credit intervals on a network that reorders:
    /// byte-exact everywhere, deep broadcasts too.
    #[test]
    fn random_trees_windows_and_delays_are_byte_exact(
        size in 1usize..9,
        lanes in 1usize..4,
        msize in 0u64..3000,
        segment in 1u64..700,
        window in 1u32..6,
        credit_every in 1u32..6,
        jitter in 0u64..200,
        seed in 0u64..1000,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let root = rng.gen_range(0..size);
        let plan: Vec<Lane> = (0..lanes).map(|_| random_lane(size, root, &mut rng)).collect();
        let setup = Setup { seq: 1, root, msize, segment, deep: seed % 3 == 0 };
        let config = Config { window, credit_every, idle_timeout: 1_000_000_000 };
        let topo = gen::random_cluster(3, size, seed);
        let mut net = SimNet::new(&topo, LinkModel { jitter, ..LinkModel::reliable(1) }, seed);
        net.engine_config(config).post_everywhere(&plan, setup);
        let outcome = net.run();
        for (r, o) in outcome.iter().enumerate() {
            proptest::prop_assert_eq!(o, &Outcome::Done);
            proptest::prop_assert!(net.buffer(r, 1) == Some(net.message(1)), "rank {} differs", r);
        }
    }
}
