//! `PIPECAST_TREE_DUMP=DIR` (docs/tree-dump.md): four real processes (`pipecast bench --local
//! 4`, every byte verified) write one MPICH-shaped `colltree<rank>.json` each, one line per
//! distinct plan (not per broadcast), and the files agree: every rank's parent lists it among
//! its children, in every lane, and only the root has none.

mod common;

use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

use common::EXE;
const RANKS: usize = 4;

#[test]
fn every_rank_dumps_each_plan_once_and_the_dumps_agree() {
    let dir = std::env::temp_dir().join(format!("pipecast-tree-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(EXE)
        .args(["bench", "--local", &RANKS.to_string(), "--json"])
        .args(["--sizes", "1K,200003", "--tree", "binary,multilane"])
        .args(["--iters", "3", "--root", "2"])
        .env("PIPECAST_LOG", "warn")
        .env("PIPECAST_TREE_DUMP", &dir)
        .output()
        .expect("run pipecast bench");
    assert!(
        out.status.success(),
        "bench failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<Vec<Value>> = (0..RANKS)
        .map(|r| {
            let path = dir.join(format!("colltree{r}.json"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
                .collect()
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);

    // 12 broadcasts from root 2, at most 4 plans (2 sizes × 2 trees), and the bench's own
    // point-to-point reference from rank 0 (`p2p:1`, one per size).
    let plans = files[0].len();
    assert!((2..=6).contains(&plans), "{plans} plans: {:?}", files[0]);
    let key = |v: &Value| {
        (
            v["root"].as_u64().unwrap(),
            v["tree"].to_string(),
            v["segment_bytes"].as_u64().unwrap(),
        )
    };
    let keys: BTreeSet<_> = files[0].iter().map(key).collect();
    assert_eq!(keys.len(), plans, "a plan dumped twice: {:?}", files[0]);
    let trees: BTreeSet<_> = files[0]
        .iter()
        .map(|v| v["tree"].as_str().unwrap())
        .collect();
    assert!(
        trees.contains("binary") && trees.contains("multilane"),
        "{trees:?}"
    );

    for i in 0..plans {
        let lines: Vec<&Value> = files.iter().map(|f| &f[i]).collect();
        for (r, v) in lines.iter().enumerate() {
            assert_eq!(v["rank"], r, "{v}");
            assert_eq!(v["nranks"], RANKS, "{v}");
            assert_eq!(key(v), key(lines[0]), "ranks dumped different plans");
            assert_eq!(v["msize"], lines[0]["msize"]);
            // MPICH's fields are lane 0's.
            assert_eq!(v["parent"], v["lanes"][0]["parent"]);
            assert_eq!(v["children"], v["lanes"][0]["children"]);
        }
        let root = lines[0]["root"].as_u64().unwrap() as usize;
        let lanes = lines[0]["lanes"].as_array().unwrap().len();
        assert!(lanes >= 1);
        for l in 0..lanes {
            for (r, v) in lines.iter().enumerate() {
                let parent = v["lanes"][l]["parent"].as_i64().unwrap();
                if r == root {
                    assert_eq!(parent, -1, "the root has no parent: {v}");
                    continue;
                }
                if parent == -1 {
                    // A point-to-point plan spans only its two ranks.
                    assert!(lines[0]["tree"].as_str().unwrap().starts_with("p2p"), "{v}");
                    continue;
                }
                let p = usize::try_from(parent).unwrap_or_else(|_| panic!("rank {r}: {v}"));
                let kids = lines[p]["lanes"][l]["children"].as_array().unwrap();
                assert!(
                    kids.iter().any(|c| c == r),
                    "lane {l}: rank {r}'s parent {p} does not list it: {}",
                    lines[p]
                );
            }
            let edges: usize = lines
                .iter()
                .map(|v| v["lanes"][l]["children"].as_array().unwrap().len())
                .sum();
            if !lines[0]["tree"].as_str().unwrap().starts_with("p2p") {
                assert_eq!(edges, RANKS - 1, "lane {l} is not a spanning tree");
            }
        }
    }
}
