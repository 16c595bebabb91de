//! Platform generators of seed 004 §5.1: random platforms (Table 2) and a small Tiers-like
//! three-level generator. Deterministic for a seed.
//!
//! Edge times are those of a 1 MB slice (`time = 1 / bandwidth` in seconds, bandwidth in MB/s),
//! so throughputs come out in slices (MB) per second.

use super::platform::{Edge, Platform};
use super::HeteroError;
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

/// Link bandwidth of Table 2: Gaussian, mean 100 MB/s, deviation 20 MB/s.
const MEAN_MBPS: f64 = 100.0;
const DEV_MBPS: f64 = 20.0;
/// Draws below this are clamped (the Gaussian has no lower bound; a draw below 10 MB/s is a
/// 4.5-sigma event).
const MIN_MBPS: f64 = 10.0;
/// Table 2: `send_u = 0.80 · min_w T_uw`.
const SEND_FRACTION: f64 = 0.8;

struct Builder {
    rng: ChaCha8Rng,
    normal: Normal<f64>,
    pairs: Vec<(usize, usize)>,
}

impl Builder {
    fn new(seed: u64) -> Builder {
        Builder {
            rng: ChaCha8Rng::seed_from_u64(seed),
            normal: Normal::new(MEAN_MBPS, DEV_MBPS).expect("valid deviation"),
            pairs: Vec::new(),
        }
    }

    /// Links u and v both ways (once).
    fn link(&mut self, u: usize, v: usize) {
        let (a, b) = (u.min(v), u.max(v));
        if a != b && !self.pairs.contains(&(a, b)) {
            self.pairs.push((a, b));
        }
    }

    /// The platform: each direction of each link draws its own bandwidth; source `p0`.
    fn finish(mut self, n: usize) -> Platform {
        self.pairs.sort_unstable();
        let mut edges = Vec::with_capacity(2 * self.pairs.len());
        for &(a, b) in &self.pairs {
            for (from, to) in [(a, b), (b, a)] {
                let mbps = self.normal.sample(&mut self.rng).max(MIN_MBPS);
                edges.push(Edge {
                    from,
                    to,
                    time: 1.0 / mbps,
                    send: None,
                });
            }
        }
        let mut min_out = vec![f64::INFINITY; n];
        for e in &edges {
            min_out[e.from] = min_out[e.from].min(e.time);
        }
        for e in &mut edges {
            e.send = Some(SEND_FRACTION * min_out[e.from]);
        }
        let nodes = (0..n).map(|i| format!("p{i}")).collect();
        Platform::new(nodes, 0, edges).expect("generated platforms are connected")
    }
}

/// Random platform of Table 2: about a fraction `density` of the node pairs are linked (both
/// directions, each with its own bandwidth). A random spanning tree is laid first so that the
/// platform is connected (the paper does not say how it ensured connectivity; at 10 nodes and
/// density 0.04 almost no random graph is); the other pairs are then linked with the
/// probability that brings the expected density to `density`. When `density` is below the
/// tree's own, `2 / nodes`, the platform is just the tree.
pub fn random(nodes: usize, density: f64, seed: u64) -> Result<Platform, HeteroError> {
    if nodes < 2 {
        return Err(HeteroError::Generator(format!(
            "{nodes} nodes: a platform needs at least 2"
        )));
    }
    if !(0.0..=1.0).contains(&density) {
        return Err(HeteroError::Generator(format!(
            "density {density}: give a probability in [0, 1]"
        )));
    }
    let mut b = Builder::new(seed);
    for v in 1..nodes {
        let u = b.rng.gen_range(0..v);
        b.link(u, v);
    }
    let pairs = (nodes * (nodes - 1) / 2) as f64;
    let tree = (nodes - 1) as f64;
    let extra = if pairs > tree {
        ((density * pairs - tree) / (pairs - tree)).clamp(0.0, 1.0)
    } else {
        0.0
    };
    for u in 0..nodes {
        for v in u + 1..nodes {
            if b.rng.gen_bool(extra) {
                b.link(u, v);
            }
        }
    }
    Ok(b.finish(nodes))
}

/// A Tiers-like three-level platform (WAN / MAN / LAN, §5.1). About 10 % of the nodes form the
/// WAN (a random tree plus each extra WAN pair with probability 0.5); about 30 % are MAN nodes,
/// each attached to a random WAN node, with a second WAN uplink with probability 0.5 and a link
/// to each other MAN node of the same WAN node with probability 0.5; the rest are LAN hosts,
/// each attached to one MAN node (a star, as Tiers' LANs), plus with probability 0.5 a second
/// MAN uplink. Node `p0` (the source) is a WAN node. The redundancy probabilities put the
/// density in the range seed 004 reports for its Tiers platforms (0.05–0.15): about 0.11 at 30
/// nodes and 0.05 at 65.
///
/// Differences from Tiers (Calvert, Doar, Zegura 1997): Tiers places nodes in a plane and
/// builds each level as a Euclidean minimum spanning tree plus redundancy edges chosen by
/// distance, with per-level counts given explicitly; here levels are sized by fixed fractions,
/// attachment is uniform at random, there is no geometry, and — as in seed 004 — every edge
/// draws its bandwidth from the same Gaussian whatever its level.
pub fn tiers(nodes: usize, seed: u64) -> Result<Platform, HeteroError> {
    if nodes < 3 {
        return Err(HeteroError::Generator(format!(
            "{nodes} nodes: a three-level platform needs at least 3"
        )));
    }
    let mut b = Builder::new(seed);
    let wan = (nodes / 10).max(1);
    let man = ((nodes * 3) / 10).max(1).min(nodes - wan - 1);
    // Nodes 0..wan are WAN, wan..wan+man MAN, the rest LAN.
    for v in 1..wan {
        let u = b.rng.gen_range(0..v);
        b.link(u, v);
    }
    for u in 0..wan {
        for v in u + 1..wan {
            if b.rng.gen_bool(0.5) {
                b.link(u, v);
            }
        }
    }
    let mut home = Vec::with_capacity(man);
    for v in wan..wan + man {
        let u = b.rng.gen_range(0..wan);
        home.push(u);
        b.link(u, v);
        if wan > 1 && b.rng.gen_bool(0.5) {
            let u2 = b.rng.gen_range(0..wan);
            b.link(u2, v);
        }
    }
    for i in 0..man {
        for j in i + 1..man {
            if home[i] == home[j] && b.rng.gen_bool(0.5) {
                b.link(wan + i, wan + j);
            }
        }
    }
    for v in wan + man..nodes {
        let u = wan + b.rng.gen_range(0..man);
        b.link(u, v);
        if man > 1 && b.rng.gen_bool(0.5) {
            let u2 = wan + b.rng.gen_range(0..man);
            b.link(u2, v);
        }
    }
    Ok(b.finish(nodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_is_seeded_and_connected() {
        let a = random(20, 0.1, 7).unwrap();
        assert_eq!(a, random(20, 0.1, 7).unwrap());
        assert_ne!(a, random(20, 0.1, 8).unwrap());
        assert_eq!(a.size(), 20);
        for e in a.edges() {
            let send = e.send.unwrap();
            assert!(send > 0.0 && send < e.time);
        }
        assert!(random(1, 0.1, 0).is_err());
        assert!(random(5, 1.5, 0).is_err());
    }

    #[test]
    fn tiers_is_seeded_and_connected() {
        for n in [3, 10, 30, 65] {
            let p = tiers(n, 3).unwrap();
            assert_eq!(p.size(), n);
            assert_eq!(p, tiers(n, 3).unwrap());
        }
    }
}
