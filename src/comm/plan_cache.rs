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
