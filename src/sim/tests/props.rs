//! Property tests on the simulated network with loss: random clusters and trees × windows ×
//! segment and message sizes × loss up to 30 % × duplication × reordering. Every rank must end
//! with the root's bytes, and the retransmissions must stay within a bound.

use crate::engine::{reliable, Config, Setup};
use crate::plan::{self, TreeKind};
use crate::sim::{LinkModel, Outcome, SimNet};
use crate::topology::{gen, Topology};
use proptest::prelude::*;

fn trees() -> impl Strategy<Value = TreeKind> {
    prop_oneof![
        Just(TreeKind::Linear),
        Just(TreeKind::Binary),
        (2u32..4).prop_map(TreeKind::Kary),
        (2u32..4).prop_map(|k| TreeKind::KBinomial(Some(k))),
        Just(TreeKind::Multilane),
        Just(TreeKind::Flat),
        Just(TreeKind::Binomial),
        Just(TreeKind::NaiveLinear),
        Just(TreeKind::NaiveBinary),
    ]
}

/// Segment, then message size: empty, one byte, odd, one off a multiple of the segment, or
/// anything up to 40 segments.
fn sizes() -> impl Strategy<Value = (u64, u64)> {
    (1u64..300).prop_flat_map(|segment| {
        let sizes = prop_oneof![
            Just(0u64),
            Just(1u64),
            (0u64..500).prop_map(|n| 2 * n + 1),
            (1u64..20, prop_oneof![Just(-1i64), Just(1i64)])
                .prop_map(move |(k, d)| (k * segment).saturating_add_signed(d)),
            0u64..40 * segment,
        ];
        (Just(segment), sizes)
    })
}

/// The most edges a message crosses between two ranks.
fn longest_path(topo: &Topology) -> usize {
    let n = topo.size();
    (0..n)
        .flat_map(|a| (0..n).map(move |b| (a, b)))
        .map(|(a, b)| topo.path(a, b).len())
        .max()
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn lossy_networks_deliver_every_byte_with_bounded_retransmissions(
        switches in 1usize..4,
        ranks in 1usize..9,
        topo_seed in any::<u64>(),
        tree in trees(),
        root in any::<prop::sample::Index>(),
        (segment, msize) in sizes(),
        window in 1u32..8,
        credit_every in 1u32..4,
        // The reliability's credit: tiny ones make the sender wait for acknowledgements.
        credit in prop_oneof![Just(4096u32), 1u32..8],
        // Loss of a whole path: each edge loses 1 - (1 - loss)^(1/longest path).
        loss in 0.0f64..0.3,
        duplicate in 0.0f64..0.1,
        jitter in 0u64..2_000,
        deep in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let topo = gen::random_cluster(switches, ranks, topo_seed);
        let root = root.index(ranks);
        let Ok(plan) = plan::build(&topo, root, &tree, Some(msize.div_ceil(segment))) else {
            return Ok(()); // a planner that does not take this topology
        };
        let hops = longest_path(&topo).max(1);
        let edge_loss = 1.0 - (1.0 - loss).powf(1.0 / hops as f64);
        let model = LinkModel { latency: 200, jitter, ps_per_byte: 0, loss: edge_loss, duplicate };
        let setup = Setup { seq: 1, root, msize, segment, deep };
        let mut net = SimNet::new(&topo, model, seed);
        net.engine_config(Config {
            window,
            credit_every,
            // 10 s of virtual time: 20 000 of the longest RTOs without progress, which no
            // loss drawn here comes near; a broadcast that stalls fails the test by name.
            idle_timeout: 10_000_000_000,
        })
        .reliable_config(reliable::Config {
            // A round trip here is at most 2 × 6 hops × 2.2 µs.
            rto_initial: 50_000,
            rto_min: 10_000,
            rto_max: 500_000,
            window: credit,
            ..reliable::Config::default()
        })
        .reliable_everywhere()
        .post_everywhere(&plan.lanes, setup);
        let outcome = net.run();
        for (r, o) in outcome.iter().enumerate() {
            prop_assert_eq!(o, &Outcome::Done, "rank {}", r);
            prop_assert!(net.buffer(r, 1) == Some(net.message(1)), "rank {} differs", r);
        }
        // The bound. A message and its acknowledgement both get through with probability
        // q = (1 - loss)^2 (each path loses at most `loss`), so a sender that resent exactly
        // what went unacknowledged would send 1/q copies per message on average. The scheme
        // also resends what merely looks lost: reordering (jitter) triggers fast retransmits,
        // a retransmission timeout sends a probe and, if that goes unanswered too, every frame
        // older than an RTO, acknowledged later or not. Hence the factor 2 over 1/q, and an
        // additive 4 per pair of ranks for runs of a few messages, where one probe weighs
        // much and averages mean little. (Over 1500 random cases the worst run sent half of
        // this bound; large runs send about 1.1/q copies per message.)
        let stats = net.stats();
        let pairs = (ranks * ranks) as f64;
        let q = (1.0 - loss).powi(2);
        let bound = 2.0 * stats.messages as f64 / q + 4.0 * pairs;
        prop_assert!(
            (stats.sends as f64) <= bound,
            "{} sends for {} messages at loss {:.2}: above {:.0} ({:?})",
            stats.sends, stats.messages, loss, bound, stats
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Loss on some edges only, so the reliability runs between some pairs (in one direction
    /// or both) and not others; random multi-lane trees; two broadcasts with different roots
    /// in flight, each rank posting them at its own time.
    #[test]
    fn partly_lossy_networks_with_two_broadcasts_in_flight_are_byte_exact(
        switches in 1usize..4,
        ranks in 2usize..8,
        lanes in 1usize..3,
        (segment, msize) in sizes(),
        window in 1u32..6,
        lossy_edges in prop::collection::vec(any::<bool>(), 64),
        loss in 0.0f64..0.3,
        jitter in 0u64..2_000,
        delays in prop::collection::vec(0u64..50_000, 16),
        seed in any::<u64>(),
    ) {
        use rand::{Rng, SeedableRng};
        let topo = gen::random_cluster(switches, ranks, seed);
        let clean = LinkModel { latency: 200, jitter, ..LinkModel::reliable(0) };
        let mut net = SimNet::new(&topo, clean, seed);
        for e in 0..topo.edge_count() {
            if lossy_edges[e % lossy_edges.len()] {
                net.set_link(crate::topology::DirEdge(e as u32), LinkModel { loss, ..clean });
            }
        }
        net.engine_config(Config { window, credit_every: 1, idle_timeout: 10_000_000_000 })
            .reliable_config(reliable::Config {
                rto_initial: 50_000,
                rto_min: 10_000,
                rto_max: 500_000,
                ..reliable::Config::default()
            });
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut at = vec![0u64; ranks];
        for seq in 1..=2u64 {
            let root = rng.gen_range(0..ranks);
            let plan: Vec<_> =
                (0..lanes).map(|_| super::random_lane(ranks, root, &mut rng)).collect();
            let setup = Setup { seq, root, msize: msize + seq, segment, deep: seq == 2 };
            for r in 0..ranks {
                // A rank posts the second broadcast no earlier than the first.
                at[r] += delays[(r + ranks * (seq as usize - 1)) % delays.len()];
                net.post(r, at[r], &plan, setup);
            }
        }
        let outcome = net.run();
        for (r, o) in outcome.iter().enumerate() {
            prop_assert_eq!(o, &Outcome::Done, "rank {}", r);
            for seq in 1..=2 {
                prop_assert!(net.buffer(r, seq) == Some(net.message(seq)), "rank {} broadcast {}", r, seq);
            }
        }
    }
}
