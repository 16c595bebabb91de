//! Per-rank tree dumps on request (`PIPECAST_TREE_DUMP=DIR`), in the shape MPICH's
//! `MPIR_CVAR_COLL_TREE_DUMP` writes them (`colltree<rank>.json`, one object with `rank`,
//! `nranks`, `parent` (-1 at the root) and `children`), so tools that read MPICH's dumps read
//! these. pipecast adds what its plans have beyond one tree: the `root`, the schedule
//! (`tree`), `segment_bytes`, the message size that first used the plan (`msize`) and every
//! lane's parent and children at this rank (`lanes`; `parent`/`children` are lane 0's).
//!
//! One line per distinct plan a communicator uses (the plan cache's misses, not every
//! broadcast), appended with one `write` so that communicators sharing a rank number in one
//! process never interleave within a line. A dump that cannot be written is logged and
//! never fails a broadcast (docs/tree-dump.md).

use crate::plan::Lane;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where this rank's dump goes.
#[derive(Debug)]
pub struct TreeDump {
    file: PathBuf,
    /// Set after the first failed write: one warning, not one per plan.
    failed: bool,
}

/// One plan as the dump records it.
pub struct DumpedPlan<'a> {
    pub rank: usize,
    pub nranks: usize,
    pub root: usize,
    pub tree: String,
    pub segment: u64,
    pub msize: u64,
    pub lanes: &'a [Lane],
}

/// The file of `rank` in `dir`, named as MPICH names it.
pub fn dump_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("colltree{rank}.json"))
}

/// One line of JSON: MPICH's fields first (lane 0), then pipecast's.
pub fn dump_line(p: &DumpedPlan) -> String {
    let at = |lane: &Lane| {
        let parent = lane.parents[p.rank].map_or(-1, |q| q as i64);
        (parent, lane.children[p.rank].clone())
    };
    let (parent, children) = p.lanes.first().map(at).unwrap_or((-1, Vec::new()));
    let lanes: Vec<_> = p
        .lanes
        .iter()
        .map(|l| {
            let (parent, children) = at(l);
            json!({"parent": parent, "children": children})
        })
        .collect();
    let v = json!({
        "rank": p.rank,
        "nranks": p.nranks,
        "parent": parent,
        "children": children,
        "root": p.root,
        "tree": p.tree,
        "segment_bytes": p.segment,
        "msize": p.msize,
        "lanes": lanes,
    });
    format!("{v}\n")
}

impl TreeDump {
    pub fn new(dir: &Path, rank: usize) -> TreeDump {
        TreeDump {
            file: dump_file(dir, rank),
            failed: false,
        }
    }

    /// Appends `plan` to this rank's file (creating the directory); a failure is logged once.
    pub fn record(&mut self, plan: &DumpedPlan) {
        let line = dump_line(plan);
        let written = self
            .file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.file)
            })
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            if !self.failed {
                tracing::warn!(file = %self.file.display(), error = %e, "PIPECAST_TREE_DUMP: cannot write the tree dump");
            }
            self.failed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_mpich_shaped_with_every_lane() {
        // Two lanes over three ranks rooted at 1: 1→0→2 and 1→2→0.
        let lanes = [
            Lane::from_children(vec![vec![2], vec![0], vec![]]),
            Lane::from_children(vec![vec![], vec![2], vec![0]]),
        ];
        let plan = |rank| DumpedPlan {
            rank,
            nranks: 3,
            root: 1,
            tree: "multilane".into(),
            segment: 8192,
            msize: 100_000,
            lanes: &lanes,
        };
        let root: serde_json::Value = serde_json::from_str(&dump_line(&plan(1))).unwrap();
        assert_eq!(root["parent"], -1);
        assert_eq!(root["children"], json!([0]));
        let zero: serde_json::Value = serde_json::from_str(&dump_line(&plan(0))).unwrap();
        assert_eq!(zero["rank"], 0);
        assert_eq!(zero["nranks"], 3);
        assert_eq!(zero["parent"], 1);
        assert_eq!(zero["children"], json!([2]));
        assert_eq!(
            zero["lanes"],
            json!([{"parent": 1, "children": [2]}, {"parent": 2, "children": []}])
        );
        assert_eq!(zero["segment_bytes"], 8192);
        assert_eq!(zero["msize"], 100_000);
        assert!(dump_line(&plan(0)).ends_with("}\n"));
    }
}
