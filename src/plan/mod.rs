//! Broadcast trees: one file per algorithm of the seeds, plus the contention checker.
//!
//! A [`Plan`] is one or more [`Lane`]s; each lane is a spanning tree over all ranks rooted at the
//! broadcast root, and carries an equal share of the message (only `multilane` has two).
//! `children[r]` is in send order: under FPFS forwarding (seed 001 §3.2) a rank sends each
//! segment to its children in this order. On a topology whose ranks share hosts
//! (`Topology::hosts`) every plan is two-level ([`two_level`]).

#![deny(unsafe_code)]

pub mod baseline;
pub mod binary;
pub mod check;
pub mod jump_tree;
pub mod kary;
pub mod kbinomial;
pub mod linear;
pub mod multicast;
pub mod multilane;
pub mod scatter_allgather;
pub mod switch_tree;
pub mod two_level;

use crate::topology::{MachineId, Topology};
use std::fmt;
use std::str::FromStr;

pub use check::{check, Report};

/// The names `hetero:NAME` accepts: seed 004's heuristics, in the order of the paper's sections.
/// The hetero layer defines them (`hetero::HEURISTICS`, whose test keeps the two lists equal);
/// they are repeated here so that parsing a tree name needs no planner above this layer.
pub const HETERO_HEURISTICS: [&str; 7] = [
    "prune-simple",
    "prune-degree",
    "grow",
    "binomial",
    "multiport-grow",
    "lp-prune",
    "lp-grow",
];

/// Which algorithm builds the tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TreeKind {
    /// Algorithm 1 of seed 000/003 §4.1: contention-free chain in DFS switch order.
    Linear,
    /// Algorithm 2 of seed 003 §4.1.2: contention-free binary tree by DP over sub-arrays.
    Binary,
    /// The k-ary extension of Algorithm 2 (seed 003 after Theorem 2).
    Kary(u32),
    /// Seed 001 k-binomial tree; `None` = the optimal k for the message (Theorem 3).
    KBinomial(Option<u32>),
    /// Seed 002: two binary trees over halves of the message.
    Multilane,
    /// Root sends to everybody (baseline).
    Flat,
    /// Rank-relative binomial tree as in MPICH/LAM (baseline).
    Binomial,
    /// Chain in rank order (baseline, topology-unaware).
    NaiveLinear,
    /// Complete binary tree in rank order (baseline, topology-unaware).
    NaiveBinary,
    /// The model's best choice for the message size (resolved by `model::choose`). It never
    /// resolves to `multicast`.
    Auto,
    /// Issue 32: the root sends each segment once to the job's group and the switches copy
    /// it; the plan's one lane is the ack/repair tree ([`multicast`]). The communicator runs it
    /// over UDP multicast where its setup agreed on it (`comm::multicast`, docs/multicast.md).
    Multicast,
    /// A throughput heuristic of seed 004 (one of [`HETERO_HEURISTICS`]) on the platform graph
    /// of the topology's link bandwidths; it ignores shared switch links. The hetero layer builds
    /// it (`hetero::build_plan`); [`build`] refuses it, as plan never depends on hetero.
    Hetero(String),
}

impl TreeKind {
    /// Every concrete algorithm name accepted on the command line, for help texts.
    pub const NAMES: &'static str = "linear, binary, kary:K, kbinomial, kbinomial:K, multilane, flat, binomial, naive-linear, naive-binary, auto, multicast, hetero:NAME";

    /// Whether the algorithm pipelines segments. `flat` and `binomial` move the whole message
    /// per hop, as MPICH and LAM do (seed 000 Table 1); every other tree, the topology-unaware
    /// `naive-*` ones included (seed 003 §5's "topology unaware" trees), is pipelined.
    pub fn is_pipelined(&self) -> bool {
        !matches!(self, TreeKind::Flat | TreeKind::Binomial)
    }

    /// Whether the algorithm is one of the topology-unaware baselines.
    pub fn is_baseline(&self) -> bool {
        matches!(
            self,
            TreeKind::Flat | TreeKind::Binomial | TreeKind::NaiveLinear | TreeKind::NaiveBinary
        )
    }
}

impl fmt::Display for TreeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeKind::Linear => f.write_str("linear"),
            TreeKind::Binary => f.write_str("binary"),
            TreeKind::Kary(k) => write!(f, "kary:{k}"),
            TreeKind::KBinomial(None) => f.write_str("kbinomial"),
            TreeKind::KBinomial(Some(k)) => write!(f, "kbinomial:{k}"),
            TreeKind::Multilane => f.write_str("multilane"),
            TreeKind::Flat => f.write_str("flat"),
            TreeKind::Binomial => f.write_str("binomial"),
            TreeKind::NaiveLinear => f.write_str("naive-linear"),
            TreeKind::NaiveBinary => f.write_str("naive-binary"),
            TreeKind::Auto => f.write_str("auto"),
            TreeKind::Multicast => f.write_str("multicast"),
            TreeKind::Hetero(name) => write!(f, "hetero:{name}"),
        }
    }
}

impl FromStr for TreeKind {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<TreeKind, PlanError> {
        let bad = || PlanError::UnknownTree(s.to_string());
        let k = |arg: &str| -> Result<u32, PlanError> {
            match arg.parse::<u32>() {
                Ok(k) if (1..=MAX_ARITY).contains(&k) => Ok(k),
                _ => Err(PlanError::BadArity(s.to_string())),
            }
        };
        Ok(match s {
            "linear" => TreeKind::Linear,
            "binary" => TreeKind::Binary,
            "kbinomial" => TreeKind::KBinomial(None),
            "multilane" => TreeKind::Multilane,
            "flat" => TreeKind::Flat,
            "binomial" => TreeKind::Binomial,
            "naive-linear" => TreeKind::NaiveLinear,
            "naive-binary" => TreeKind::NaiveBinary,
            "auto" => TreeKind::Auto,
            "multicast" => TreeKind::Multicast,
            _ => match s.split_once(':') {
                Some(("kary", arg)) => TreeKind::Kary(k(arg)?),
                Some(("kbinomial", arg)) => TreeKind::KBinomial(Some(k(arg)?)),
                Some(("hetero", name)) if HETERO_HEURISTICS.contains(&name) => {
                    TreeKind::Hetero(name.to_string())
                }
                Some(("hetero", name)) => {
                    return Err(PlanError::UnknownHeuristic(name.to_string()))
                }
                _ => return Err(bad()),
            },
        })
    }
}

/// The largest K of `kary:K` and `kbinomial:K`: far above any cluster's rank count (a K of at
/// least the rank count already makes the flat tree), far below where counts overflow.
pub const MAX_ARITY: u32 = 1_000_000;

/// What went wrong while planning.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    #[error("unknown tree {0:?}: use one of {names}", names = TreeKind::NAMES)]
    UnknownTree(String),
    #[error("tree {0:?}: K must be a whole number from 1 to {MAX_ARITY} (a K of at least the number of ranks is the flat tree)")]
    BadArity(String),
    #[error("root {root} is not a rank of this {size}-rank topology")]
    BadRoot { root: usize, size: usize },
    #[error("tree {0} is resolved by the cost model: give a message size (and a profile)")]
    NeedsModel(String),
    #[error("unknown seed 004 heuristic {0:?}: use hetero:NAME with NAME one of {names}", names = HETERO_HEURISTICS.join(", "))]
    UnknownHeuristic(String),
    #[error("tree hetero:{name}: {reason}")]
    Hetero { name: String, reason: String },
    #[error("tree hetero:{0} is built by seed 004's heuristics (hetero::build_plan), not by plan::build")]
    BuiltByHetero(String),
    #[error("tree {tree}: {ranks} ranks exceed the planner's limit of {max} (its dynamic program needs O(P²) memory): use linear or kbinomial")]
    TooLarge {
        tree: String,
        ranks: usize,
        max: usize,
    },
}

/// One spanning tree over all ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    /// `parents[r]`: who sends to rank r (`None` for the root).
    pub parents: Vec<Option<MachineId>>,
    /// `children[r]`: whom rank r sends to, in send order.
    pub children: Vec<Vec<MachineId>>,
}

impl Lane {
    /// A lane from children lists; parents are derived.
    pub fn from_children(children: Vec<Vec<MachineId>>) -> Lane {
        let mut parents = vec![None; children.len()];
        for (p, kids) in children.iter().enumerate() {
            for &c in kids {
                parents[c] = Some(p);
            }
        }
        Lane { parents, children }
    }

    /// A chain visiting `order` (order[0] is the root).
    pub fn chain(size: usize, order: &[MachineId]) -> Lane {
        let mut children = vec![Vec::new(); size];
        for w in order.windows(2) {
            children[w[0]].push(w[1]);
        }
        Lane::from_children(children)
    }

    /// The rank with no parent (the first one if the lane is malformed).
    pub fn root(&self) -> Option<MachineId> {
        self.parents.iter().position(Option::is_none)
    }

    /// Number of edges on the longest root-to-leaf path.
    pub fn height(&self) -> usize {
        let Some(root) = self.root() else { return 0 };
        let mut best = 0;
        let mut stack = vec![(root, 0usize)];
        let mut visited = 0;
        while let Some((r, d)) = stack.pop() {
            visited += 1;
            if visited > self.parents.len() {
                break; // a cycle: the checker reports it
            }
            best = best.max(d);
            stack.extend(self.children[r].iter().map(|&c| (c, d + 1)));
        }
        best
    }

    /// The largest number of children of one rank.
    pub fn max_degree(&self) -> usize {
        self.children.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// A broadcast plan: the algorithm that built it, the root, and its lanes.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The algorithm, with parameters resolved (e.g. `kbinomial:3`, never `auto`).
    pub tree: TreeKind,
    pub root: MachineId,
    pub lanes: Vec<Lane>,
    /// The rail (NIC index, `Topology::rails`) each lane's transfers use; empty when every
    /// lane uses rail 0 (every plan but `multilane` on a topology with rails).
    pub rails: Vec<usize>,
}

impl Plan {
    /// A plan of one lane, on rail 0: what every tree but `multilane` builds.
    pub fn one_lane(tree: TreeKind, root: MachineId, lane: Lane) -> Plan {
        Plan {
            tree,
            root,
            lanes: vec![lane],
            rails: Vec::new(),
        }
    }

    /// The rail lane `lane` runs on (0 unless [`Plan::rails`] says otherwise).
    pub fn rail(&self, lane: usize) -> usize {
        self.rails.get(lane).copied().unwrap_or(0)
    }

    pub fn size(&self) -> usize {
        self.lanes.first().map_or(0, |l| l.parents.len())
    }
    pub fn height(&self) -> usize {
        self.lanes.iter().map(Lane::height).max().unwrap_or(0)
    }
    pub fn max_degree(&self) -> usize {
        self.lanes.iter().map(Lane::max_degree).max().unwrap_or(0)
    }
}

/// Builds the tree `tree` rooted at `root` over `topology`. `segments` is the number of
/// pipeline segments when known (the optimal k of `kbinomial` depends on it). `hetero:NAME`
/// is refused ([`PlanError::BuiltByHetero`]): the hetero layer builds it (`hetero::build_plan`
/// builds every tree). When ranks share hosts ([`Topology::hosts`]) the plan is two-level:
/// `tree` between the hosts' leaders, a fan-out through memory inside hosts ([`two_level`]).
pub fn build(
    topology: &Topology,
    root: MachineId,
    tree: &TreeKind,
    segments: Option<u64>,
) -> Result<Plan, PlanError> {
    let size = topology.size();
    if root >= size {
        return Err(PlanError::BadRoot { root, size });
    }
    if *tree == TreeKind::Multicast {
        // Not two-level: every rank joins the group (plan::multicast).
        return multicast::build(topology, root);
    }
    if let Some(hosts) = topology.hosts() {
        return two_level::build(hosts, root, tree, segments);
    }
    let single = |lane: Lane, tree: TreeKind| Plan::one_lane(tree, root, lane);
    Ok(match tree {
        TreeKind::Linear => single(linear::build(topology, root), TreeKind::Linear),
        TreeKind::Binary => single(binary::build(topology, root)?, TreeKind::Binary),
        TreeKind::Kary(k) => single(kary::build(topology, root, *k as usize)?, tree.clone()),
        TreeKind::KBinomial(k) => {
            let k = match k {
                Some(k) => *k,
                None => kbinomial::optimal_k(size as u64, segments.unwrap_or(1)),
            };
            single(
                kbinomial::build(topology, root, k)?,
                TreeKind::KBinomial(Some(k)),
            )
        }
        TreeKind::Multilane if topology.rails() > 1 => {
            let lanes = multilane::build_rails(topology, root)?;
            Plan {
                tree: TreeKind::Multilane,
                root,
                rails: (0..lanes.len()).collect(),
                lanes,
            }
        }
        TreeKind::Multilane => Plan {
            tree: TreeKind::Multilane,
            root,
            lanes: multilane::build(topology, root)?,
            rails: Vec::new(),
        },
        TreeKind::Flat => single(baseline::flat(size, root), TreeKind::Flat),
        TreeKind::Binomial => single(baseline::binomial(size, root), TreeKind::Binomial),
        TreeKind::NaiveLinear => single(baseline::naive_linear(size, root), TreeKind::NaiveLinear),
        TreeKind::NaiveBinary => single(baseline::naive_binary(size, root), TreeKind::NaiveBinary),
        TreeKind::Auto => return Err(PlanError::NeedsModel("auto".into())),
        TreeKind::Multicast => multicast::build(topology, root)?,
        TreeKind::Hetero(name) => return Err(PlanError::BuiltByHetero(name.clone())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_names_round_trip() {
        for name in [
            "linear",
            "binary",
            "kary:3",
            "kbinomial",
            "kbinomial:2",
            "multilane",
            "flat",
            "binomial",
            "naive-linear",
            "naive-binary",
            "auto",
            "multicast",
        ] {
            assert_eq!(name.parse::<TreeKind>().unwrap().to_string(), name);
        }
        assert!(matches!(
            "kary:0".parse::<TreeKind>(),
            Err(PlanError::BadArity(_))
        ));
        assert!(matches!(
            "kary:x".parse::<TreeKind>(),
            Err(PlanError::BadArity(_))
        ));
        // Issue 14: an arity above u32 was called "not a whole number of at least 1".
        for big in ["kary:99999999999", "kbinomial:1000001"] {
            let e = big.parse::<TreeKind>().unwrap_err().to_string();
            assert!(e.contains("from 1 to 1000000"), "{e}");
        }
        assert_eq!(
            "kary:1000000".parse::<TreeKind>(),
            Ok(TreeKind::Kary(MAX_ARITY))
        );
        assert!(matches!(
            "tree".parse::<TreeKind>(),
            Err(PlanError::UnknownTree(_))
        ));
    }

    #[test]
    fn lane_shape() {
        let lane = Lane::chain(4, &[2, 0, 3, 1]);
        assert_eq!(lane.root(), Some(2));
        assert_eq!(lane.height(), 3);
        assert_eq!(lane.max_degree(), 1);
        assert_eq!(lane.parents[1], Some(3));
    }
}
