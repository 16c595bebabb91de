//! Tests on the simulated network: the engine over reliable and lossy fabrics, several
//! broadcasts in flight, the per-peer reliability alone, and property tests.

use crate::engine::Config;
use crate::plan::{Lane, TreeKind};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

mod broadcasts;
mod engine;
mod overlap;
mod props;
mod reliable_link;
mod whole;

/// A small window and frequent credits, so flow control is exercised; a short idle timeout
/// (1 ms of virtual time: links take ns here) so dead ranks are found quickly.
fn config() -> Config {
    Config {
        window: 3,
        credit_every: 2,
        idle_timeout: 1_000_000,
    }
}

pub(crate) fn all_trees() -> Vec<TreeKind> {
    [
        "linear",
        "flat",
        "binomial",
        "naive-linear",
        "naive-binary",
        "binary",
        "kbinomial:2",
        "multilane",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect()
}

/// A random tree over `size` ranks rooted at `root`: each rank hangs below an earlier one of
/// a random order.
fn random_lane(size: usize, root: usize, rng: &mut ChaCha8Rng) -> Lane {
    let mut order: Vec<usize> = (0..size).filter(|&r| r != root).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    order.insert(0, root);
    let mut children = vec![Vec::new(); size];
    for i in 1..size {
        let parent = order[rng.gen_range(0..i)];
        children[parent].push(order[i]);
    }
    Lane::from_children(children)
}
