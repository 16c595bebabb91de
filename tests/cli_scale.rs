//! `pipecast scale` (docs/scale.md, "On paper"): on 64 ranks, the neighbour counts the planner's
//! trees give stay within what each tree's shape allows, the full mesh row is P-1, and the
//! derived descriptors and memory follow from the counts. Nothing here is timed.

mod common;
use common::pipecast;

fn rows(args: &[&str]) -> Vec<serde_json::Value> {
    let out = pipecast(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[test]
fn tree_neighbours_are_bounded_and_the_mesh_is_p_minus_1() {
    for roots in ["1", "8"] {
        let rows = rows(&[
            "scale",
            "--ranks",
            "64",
            "--trees",
            "linear,binary,kbinomial",
            "--roots",
            roots,
            "--json",
        ]);
        assert_eq!(rows.len(), 4, "three trees and the mesh");
        let one_root = roots == "1";
        for row in &rows {
            let tree = row["tree"].as_str().unwrap();
            let max = row["neighbours_max"].as_u64().unwrap();
            let median = row["neighbours_median"].as_u64().unwrap();
            assert!(median <= max && median >= 1, "{row}");
            // One two-way stream per TCP neighbour (the mesh before issue 30: one each way).
            let streams = if tree == "full mesh (before)" { 2 } else { 1 };
            assert_eq!(
                row["descriptors_max"].as_u64(),
                Some(streams * max),
                "{row}"
            );
            assert_eq!(
                row["socket_bytes_max"].as_u64().unwrap(),
                row["descriptors_max"].as_u64().unwrap() * (131_072 + 16_384),
                "{row}"
            );
            match tree {
                // A chain: a parent and a child per root.
                "linear" if one_root => assert_eq!(max, 2, "{row}"),
                "binary" if one_root => assert!(max <= 3, "{row}"),
                // k-binomial: a rank's children at most k-1 per round, log rounds.
                "kbinomial" => assert!(max < 63, "{row}"),
                "full mesh (before)" => assert_eq!((max, median), (63, 63), "{row}"),
                _ => assert!(max <= 63, "{row}"),
            }
            if !one_root && tree == "linear" {
                // Every root's chain adds at most 2 neighbours.
                assert!(max <= 16, "{row}");
            }
        }
    }
}

#[test]
fn a_size_that_is_no_multiple_of_64_is_refused() {
    let out = pipecast(&["scale", "--ranks", "100"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a multiple of 64"));
}

/// `--per-host 8`: two-level plans; a host's ranks are fed through shared memory, so most
/// ranks have no TCP peer at all, and every rank holds one staging ring.
#[test]
fn ranks_sharing_hosts_split_tcp_and_shared_memory_peers() {
    let rows = rows(&[
        "scale",
        "--ranks",
        "512",
        "--trees",
        "linear,binary",
        "--per-host",
        "8",
        "--json",
    ]);
    assert_eq!(rows.len(), 3, "two trees and the mesh");
    for row in &rows[..2] {
        assert_eq!(row["per_host"].as_u64(), Some(8), "{row}");
        assert_eq!(row["tcp_median"].as_u64(), Some(0), "{row}");
        assert_eq!(
            row["shm_max"].as_u64(),
            Some(7),
            "the leader feeds its 7: {row}"
        );
        assert!(row["tcp_max"].as_u64().unwrap() <= 3, "{row}");
        assert_eq!(row["memory_bytes_median"].as_u64(), Some(8 << 20), "{row}");
        assert!(row["in_max"].as_u64().unwrap() <= 1, "one root: {row}");
    }
    let out = pipecast(&["scale", "--ranks", "512", "--per-host", "3"]);
    assert!(
        !out.status.success(),
        "8 ranks per switch, not a multiple of 3"
    );
}
