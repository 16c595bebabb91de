//! Which schedule a broadcast runs: a tree of `plan/` or the scatter + ring allgather baseline,
//! and the segment size.

use crate::model::Profile;
pub use crate::plan::scatter_allgather::scatter_allgather;
use crate::plan::{Lane, PlanError, TreeKind};
use crate::topology::Topology;
use std::fmt;
use std::str::FromStr;

/// A broadcast schedule the engine can run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// One of the trees (or baselines) of `plan/`.
    Tree(TreeKind),
    /// MPICH's large-message broadcast (seed 000 §3.1): scatter, then ring allgather.
    ScatterAllgather,
    /// Point-to-point from the root to one rank (others idle): the T(msize) reference.
    PointToPoint { to: usize },
}

impl Algorithm {
    /// Names for help texts.
    pub const NAMES: &'static str = "any tree of `pipecast plan` (linear, binary, kary:K, kbinomial[:K], multilane, flat, binomial, naive-linear, naive-binary, auto) or scatter-allgather";
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::Tree(t) => t.fmt(f),
            Algorithm::ScatterAllgather => f.write_str("scatter-allgather"),
            Algorithm::PointToPoint { to } => write!(f, "p2p:{to}"),
        }
    }
}

impl FromStr for Algorithm {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Algorithm, PlanError> {
        match s {
            "scatter-allgather" => Ok(Algorithm::ScatterAllgather),
            _ => s.parse().map(Algorithm::Tree),
        }
    }
}

/// The lanes for `algorithm` rooted at `root` (`auto` must be [`resolve`]d first). On a
/// topology whose ranks share hosts ([`Topology::hosts`], as [`super::hosts::topology`] builds
/// it) every tree is two-level (`plan::two_level`); scatter-allgather and point-to-point are
/// not trees and stay as they are.
pub fn lanes(
    topology: &Topology,
    root: usize,
    algorithm: &Algorithm,
    segments: u64,
) -> Result<Vec<Lane>, PlanError> {
    schedule(topology, root, algorithm, segments).map(|(lanes, _)| lanes)
}

/// [`lanes`] and the rail each lane runs on (`Plan::rails`: empty when every lane uses rail
/// 0, as every schedule but `multilane` on a topology with rails does).
pub fn schedule(
    topology: &Topology,
    root: usize,
    algorithm: &Algorithm,
    segments: u64,
) -> Result<(Vec<Lane>, Vec<usize>), PlanError> {
    let size = topology.size();
    if root >= size {
        return Err(PlanError::BadRoot { root, size });
    }
    let lanes = match algorithm {
        // The ack tree: the progress thread sends the data to the group (`comm::multicast`).
        Algorithm::Tree(TreeKind::Multicast) => {
            return Ok((
                crate::plan::multicast::build(topology, root)?.lanes,
                Vec::new(),
            ))
        }
        Algorithm::Tree(tree) => {
            let plan = crate::hetero::build_plan(topology, root, tree, Some(segments))?;
            return Ok((plan.lanes, plan.rails));
        }
        Algorithm::ScatterAllgather => scatter_allgather(size, root),
        Algorithm::PointToPoint { to } => {
            if *to >= size || *to == root {
                return Err(PlanError::BadRoot { root: *to, size });
            }
            let mut children = vec![Vec::new(); size];
            children[root].push(*to);
            vec![Lane::from_children(children)]
        }
    };
    Ok((lanes, Vec::new()))
}

/// The concrete schedule and segment size of a broadcast of `msize` bytes from `root`.
///
/// `auto` becomes the tree the extended LogP model of seed 003 §4.2 predicts fastest for this
/// message on this topology with this calibration profile (`model::plan_for`, which prefers
/// contention-free candidates; `hetero::plan_for` adds `hetero:NAME`); a pipelined tree without a configured segment size gets the
/// model's segment size (the profile's sizes are the candidates, seed 003 §5.1). When ranks
/// share hosts, `auto` compares the two-level plans' prices (`model::two_level`). A configured
/// segment size always wins; the non-pipelined baselines move whole messages ([`segment_for`]).
pub fn resolve(
    topology: &Topology,
    root: usize,
    algorithm: &Algorithm,
    msize: u64,
    configured: Option<u64>,
    profile: &Profile,
) -> crate::Result<(Algorithm, u64)> {
    let size = topology.size();
    if let Algorithm::Tree(kind) = algorithm {
        if kind.is_pipelined() && (*kind == TreeKind::Auto || configured.is_none()) {
            let choice = crate::hetero::plan_for(topology, root, kind, profile, msize)?;
            let concrete = Algorithm::Tree(choice.plan.tree.clone());
            let segment = configured.unwrap_or(choice.segment_bytes).max(1);
            return Ok((
                concrete.clone(),
                segment_for(&concrete, size, msize, Some(segment)),
            ));
        }
    }
    Ok((
        algorithm.clone(),
        segment_for(algorithm, size, msize, configured),
    ))
}

/// The segment size a broadcast of `msize` bytes runs with. The non-pipelined baselines of
/// seed 000 Table 1 move whole messages: `flat` and `binomial` send the whole message per hop,
/// `scatter-allgather` one share per hop (MPICH), point-to-point the whole message. Every other
/// schedule is pipelined with [`choose_segment`].
pub fn segment_for(tree: &Algorithm, size: usize, msize: u64, configured: Option<u64>) -> u64 {
    let whole = |bytes: u64| bytes.clamp(1, u64::from(u32::MAX));
    match tree {
        Algorithm::Tree(TreeKind::Flat | TreeKind::Binomial) | Algorithm::PointToPoint { .. } => {
            whole(msize)
        }
        Algorithm::ScatterAllgather => whole(msize.div_ceil(size.saturating_sub(1).max(1) as u64)),
        _ => choose_segment(tree, size, msize, configured),
    }
}

/// Segment size of a pipelined schedule that [`resolve`] did not size (scatter-allgather's
/// shares are whole; trees always come through `resolve`).
pub const DEFAULT_SEGMENT: u64 = 64 * 1024;

/// The configured segment size, else [`DEFAULT_SEGMENT`].
pub fn choose_segment(
    _tree: &Algorithm,
    _size: usize,
    _msize: u64,
    configured: Option<u64>,
) -> u64 {
    configured.unwrap_or(DEFAULT_SEGMENT).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_move_whole_messages() {
        let flat = Algorithm::Tree(TreeKind::Flat);
        assert_eq!(segment_for(&flat, 8, 1 << 20, Some(4096)), 1 << 20);
        assert_eq!(segment_for(&flat, 8, 0, None), 1);
        assert_eq!(
            segment_for(&Algorithm::ScatterAllgather, 5, 1001, None),
            251
        );
        let linear = Algorithm::Tree(TreeKind::Linear);
        assert_eq!(segment_for(&linear, 8, 1 << 20, Some(4096)), 4096);
        assert_eq!(segment_for(&linear, 8, 1 << 20, None), DEFAULT_SEGMENT);
    }

    #[test]
    fn trees_are_two_level_when_ranks_share_hosts() {
        let file = crate::topology::gen::hub(2, 2, true);
        let t = crate::topology::hosts::expand(&file, Some(3)).unwrap();
        let hosts = t.hosts().unwrap();
        let profile = Profile::builtin("1gbit").unwrap();
        for name in [
            "auto",
            "linear",
            "binary",
            "kary:3",
            "kbinomial",
            "multilane",
            "flat",
            "binomial",
            "naive-linear",
            "naive-binary",
            "hetero:grow",
        ] {
            let requested: Algorithm = name.parse().unwrap();
            let (algorithm, segment) = resolve(&t, 4, &requested, 1 << 20, None, &profile).unwrap();
            assert_ne!(algorithm, Algorithm::Tree(TreeKind::Auto));
            let segments = (1u64 << 20).div_ceil(segment);
            for lane in lanes(&t, 4, &algorithm, segments).unwrap() {
                for (p, kids) in lane.children.iter().enumerate() {
                    for &c in kids {
                        let (hp, hc) = (hosts.host_of(p), hosts.host_of(c));
                        // Only leaders cross hosts; a leader feeds its whole host.
                        if hp != hc {
                            assert_eq!(p, hosts.leader(hp, 4), "{name}");
                            assert_eq!(c, hosts.leader(hc, 4), "{name}");
                        } else {
                            assert_eq!(p, hosts.leader(hp, 4), "{name}");
                        }
                    }
                }
            }
            let plan = crate::plan::Plan {
                tree: TreeKind::Linear,
                root: 4,
                lanes: lanes(&t, 4, &algorithm, segments).unwrap(),
                rails: Vec::new(),
            };
            let report = crate::plan::check(&plan, &t);
            assert!(report.spanning && report.rooted, "{name}: {report:?}");
        }
        // Not trees: unchanged.
        let sa = lanes(&t, 0, &Algorithm::ScatterAllgather, 4).unwrap();
        assert_eq!(sa, scatter_allgather(t.size(), 0));
    }

    #[test]
    fn names_round_trip() {
        for name in ["scatter-allgather", "linear", "kary:3"] {
            assert_eq!(name.parse::<Algorithm>().unwrap().to_string(), name);
        }
    }
}
