//! Several broadcasts in flight at once on the simulated network, as ibcasts make them: the
//! endpoint routes by sequence number and holds what arrives for a broadcast a late rank has
//! not posted yet.

use super::broadcasts::fast_reliable;
use crate::engine::{Config, Setup};
use crate::plan::{self, TreeKind};
use crate::sim::{LinkModel, Outcome, SimNet};
use crate::topology::gen;

/// Three broadcasts with different roots, trees, sizes and segments, posted at once by every
/// rank but `late`, which posts them `late_by` ns later; returns the network after the run,
/// every rank's buffer checked.
fn three_broadcasts(model: LinkModel, late: usize, late_by: u64, seed: u64) -> SimNet {
    let size = 7;
    let topo = gen::random_cluster(3, size, seed);
    let broadcasts = [
        (1, 0, "linear", 1000, 64),
        (2, 3, "binary", 777, 50),
        (3, size - 1, "multilane", 4097, 128),
    ];
    let mut net = SimNet::new(&topo, model, seed);
    net.engine_config(Config {
        window: 4,
        credit_every: 2,
        // Far above the late rank's delay: its peers wait for it, as they must.
        idle_timeout: 1_000_000_000,
    })
    .reliable_config(fast_reliable());
    for (seq, root, tree, msize, segment) in broadcasts {
        let tree: TreeKind = tree.parse().unwrap();
        let plan = plan::build(&topo, root, &tree, None).unwrap();
        let setup = Setup {
            seq,
            root,
            msize,
            segment,
            deep: seq == 2,
        };
        for r in 0..size {
            let at = if r == late { late_by } else { 0 };
            net.post(r, at, &plan.lanes, setup);
        }
    }
    let outcome = net.run();
    for (r, o) in outcome.iter().enumerate() {
        assert_eq!(o, &Outcome::Done, "rank {r}");
        for seq in 1..=3 {
            assert!(
                net.buffer(r, seq) == Some(net.message(seq)),
                "rank {r} broadcast {seq} differs"
            );
        }
    }
    assert!(net.now() >= late_by, "everybody waited for the late rank");
    net
}

#[test]
fn three_broadcasts_with_a_late_rank_are_byte_exact() {
    let clean = LinkModel {
        jitter: 300,
        ..LinkModel::reliable(100)
    };
    for late in [0, 3, 5] {
        three_broadcasts(clean, late, 200_000, late as u64);
    }
}

#[test]
fn three_broadcasts_with_a_late_rank_are_byte_exact_on_a_lossy_network() {
    let lossy = LinkModel {
        jitter: 300,
        loss: 0.05,
        duplicate: 0.02,
        ..LinkModel::reliable(100)
    };
    for late in [0, 3, 5] {
        let net = three_broadcasts(lossy, late, 200_000, 10 + late as u64);
        assert!(net.stats().retransmits > 0, "{:?}", net.stats());
    }
}

/// The ranks post one broadcast after another as each completes locally (a loop of ibcasts
/// with a window of one), except that each posts the next one at a different time.
#[test]
fn staggered_posts_overlap_and_are_byte_exact() {
    let size = 5;
    let topo = gen::random_cluster(2, size, 42);
    let model = LinkModel {
        jitter: 1_000,
        loss: 0.1,
        ..LinkModel::reliable(200)
    };
    let mut net = SimNet::new(&topo, model, 42);
    net.engine_config(Config {
        idle_timeout: 1_000_000_000,
        ..Config::default()
    })
    .reliable_config(fast_reliable());
    for seq in 1..=6u64 {
        let root = seq as usize % size;
        let plan = plan::build(&topo, root, &TreeKind::Linear, None).unwrap();
        let setup = Setup {
            seq,
            root,
            msize: 300 * seq + 1,
            segment: 32,
            deep: false,
        };
        for r in 0..size {
            net.post(r, seq * (r as u64 + 1) * 3_000, &plan.lanes, setup);
        }
    }
    let outcome = net.run();
    for (r, o) in outcome.iter().enumerate() {
        assert_eq!(o, &Outcome::Done, "rank {r}");
        for seq in 1..=6 {
            assert!(
                net.buffer(r, seq) == Some(net.message(seq)),
                "rank {r} broadcast {seq}"
            );
        }
    }
}
