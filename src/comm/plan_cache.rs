//! The plan cache: the model's resolution of each broadcast (`auto`, segment size) and the
//! lanes of each schedule, computed once per communicator and key, over the communicator's
//! ranks and (what is posted) over its engine's processes.

use super::{resolve, schedule, tree_dump, Algorithm, Comm};
use crate::plan::{Lane, TreeKind};
use std::sync::Arc;

/// (root, requested algorithm, message size, configured segment size).
pub(super) type ChoiceKey = (usize, Algorithm, u64, Option<u64>);
/// The rail of each lane.
pub(super) type RailsOf = Arc<Vec<usize>>;
/// (root, schedule, segment size, segments for kbinomial's k).
pub(super) type PlanKey = (usize, Algorithm, u64, u64);

/// A schedule as it runs.
#[derive(Clone)]
pub(super) struct Planned {
    /// Its lanes over the communicator's ranks.
    pub lanes: Arc<Vec<Lane>>,
    /// The rail each lane runs on (`Plan::rails`; empty: all on rail 0).
    pub rails: RailsOf,
    /// Its lanes over the engine's processes (the same lanes on a base communicator).
    pub posted: Arc<Vec<Lane>>,
    /// Sent to the multicast group (the lanes are its ack tree).
    pub multicast: bool,
}

impl Comm {
    /// [`resolve`], cached: `auto` and the segment size for this message.
    pub(super) fn resolve(
        &mut self,
        root: usize,
        algorithm: &Algorithm,
        msize: u64,
        segment: Option<u64>,
    ) -> crate::Result<(Algorithm, u64)> {
        let key = (root, algorithm.clone(), msize, segment);
        if let Some(c) = self.choices.get(&key) {
            return Ok(c.clone());
        }
        if let Some(c) = self.multicast_choice(root, algorithm, msize)? {
            self.choices.insert(key, c.clone());
            return Ok(c);
        }
        // Multicast asked for where it cannot run: the trees (`auto`), the same at every rank.
        let auto = Algorithm::Tree(TreeKind::Auto);
        let algorithm = if *algorithm == Algorithm::Tree(TreeKind::Multicast) {
            &auto
        } else {
            algorithm
        };
        let mut c = resolve(
            &self.topology,
            root,
            algorithm,
            msize,
            segment,
            &self.config.profile,
        )?;
        if let (None, Some(frame), Algorithm::Tree(kind)) =
            (segment, self.engine.known.frame_payload, &c.0)
        {
            // The model's segment in whole frames: a 1024-byte segment would travel in
            // 1024-byte frames, 38 % more frames than 1408-byte ones (MTU 1500) for the same bytes, and
            // frames, not bytes, cost CPU (measured on the lab: 1.43 → 1.25 T at 1 MiB).
            if kind.is_pipelined() && c.1 < msize {
                c.1 =
                    c.1.div_ceil(frame)
                        .saturating_mul(frame)
                        .min(u64::from(u32::MAX));
            }
        }
        self.choices.insert(key, c.clone());
        Ok(c)
    }

    /// Multicast for a broadcast of `msize` bytes from `root`, with its segment (one datagram),
    /// if it takes it: asked for (`multicast`) when the setup agreed on it and this
    /// communicator holds every process of the engine (a view of some ranks would send to
    /// processes outside it); with `auto`, when the model also predicts it faster than the best
    /// tree. Decided from agreed data only, so every rank takes the same. Asked for where it
    /// cannot run, it says why at info once per broadcast shape, and the trees run.
    fn multicast_choice(
        &self,
        root: usize,
        algorithm: &Algorithm,
        msize: u64,
    ) -> crate::Result<Option<(Algorithm, u64)>> {
        let multicast = Algorithm::Tree(TreeKind::Multicast);
        let asked = *algorithm == multicast;
        if !asked && *algorithm != Algorithm::Tree(TreeKind::Auto) {
            return Ok(None);
        }
        let whole = self.members.is_none() && self.size == self.engine.known.size;
        let segment = match &self.engine.known.multicast {
            Ok(s) if whole => u64::from(*s),
            Ok(_) => {
                if asked {
                    tracing::info!(
                        rank = self.rank,
                        comm = self.id,
                        "multicast asked for on a communicator of some of the processes: the trees run"
                    );
                }
                return Ok(None);
            }
            Err(why) => {
                if asked {
                    tracing::info!(
                        rank = self.rank,
                        "multicast asked for, but the trees run: {why}"
                    );
                }
                return Ok(None);
            }
        };
        if asked {
            return Ok(Some((multicast, segment)));
        }
        let profile = &self.config.profile;
        let tree = crate::hetero::any_tree::plan_for(
            &self.topology,
            root,
            &TreeKind::Auto,
            profile,
            msize,
        )?;
        let plan = crate::plan::multicast::build(&self.topology, root)?;
        let shape = crate::model::multicast::Shape::of(&plan, Some(&self.topology));
        let t = crate::model::multicast::predict(shape, profile, msize, segment, 0.0);
        Ok((t < tree.predicted_us).then_some((multicast, segment)))
    }

    /// The lanes of a schedule, cached; `true` when they were planned by this call.
    pub(super) fn lanes(
        &mut self,
        root: usize,
        algorithm: &Algorithm,
        segment: u64,
        msize: u64,
    ) -> crate::Result<(Planned, bool)> {
        let segments = msize.div_ceil(segment).max(1);
        // The tree depends on the segment count only for kbinomial (its optimal k).
        let key_segments = match algorithm {
            Algorithm::Tree(TreeKind::KBinomial(None)) => segments,
            _ => 0,
        };
        let key = (root, algorithm.clone(), segment, key_segments);
        if let Some(l) = self.plans.get(&key) {
            return Ok((l.clone(), false));
        }
        let (lanes, rails) = schedule(&self.topology, root, algorithm, segments)?;
        let lanes = Arc::new(lanes);
        let l = Planned {
            posted: self.to_engine(&lanes),
            lanes,
            rails: Arc::new(rails),
            multicast: *algorithm == Algorithm::Tree(TreeKind::Multicast),
        };
        self.plans.insert(key, l.clone());
        Ok((l, true))
    }

    /// The broadcast of `msize` bytes from `root` as it will run: the schedule (`auto`
    /// resolved by the model), its segment size (in whole frames on raw Ethernet) and lanes.
    pub fn plan(
        &mut self,
        root: usize,
        msize: u64,
    ) -> crate::Result<(Algorithm, u64, Arc<Vec<Lane>>)> {
        let configured = self.config.algorithm.clone();
        self.plan_with(root, msize, &configured, self.config.segment)
    }

    /// [`Comm::plan`] for a given schedule and segment size (`None`: the model's choice).
    pub fn plan_with(
        &mut self,
        root: usize,
        msize: u64,
        algorithm: &Algorithm,
        segment: Option<u64>,
    ) -> crate::Result<(Algorithm, u64, Arc<Vec<Lane>>)> {
        self.plan_rails(root, msize, algorithm, segment)
            .map(|(a, s, planned)| (a, s, planned.lanes))
    }

    /// [`Comm::plan_with`], with the rail each lane runs on and the lanes to post.
    pub(super) fn plan_rails(
        &mut self,
        root: usize,
        msize: u64,
        algorithm: &Algorithm,
        segment: Option<u64>,
    ) -> crate::Result<(Algorithm, u64, Planned)> {
        if root >= self.size {
            return Err(crate::plan::PlanError::BadRoot {
                root,
                size: self.size,
            }
            .into());
        }
        let (algorithm, segment) = self.resolve(root, algorithm, msize, segment)?;
        let (planned, new) = self.lanes(root, &algorithm, segment, msize)?;
        if let (true, Some(dump)) = (new, self.dump.as_mut()) {
            dump.record(&tree_dump::DumpedPlan {
                rank: self.rank,
                nranks: self.size,
                root,
                tree: algorithm.to_string(),
                segment,
                msize,
                lanes: &planned.lanes,
            });
        }
        Ok((algorithm, segment, planned))
    }
}
