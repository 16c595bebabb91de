//! `pipecast plan` end to end: runs the built binary on generated topology files and checks the
//! DESIGN.md JSON contract field by field, the error exits and the Graphviz output.

mod common;
use common::{pipecast, pipecast_json, EXE};

use pipecast::topology::{gen, to_json, Topology};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn write_topology(name: &str, t: &Topology) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-plan");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, to_json(t).to_string()).unwrap();
    path
}

/// Checks the contract's fields and that every lane is a spanning tree rooted at `root`.
fn check_contract(v: &Value, ranks: usize, root: usize) {
    let obj = v.as_object().unwrap();
    assert!(obj["tree"].is_string());
    assert_ne!(obj["tree"], "auto");
    assert_eq!(obj["root"], root);
    assert_eq!(obj["ranks"], ranks);
    assert!(obj["contention_free"].is_boolean());
    let lanes = obj["lanes"].as_array().unwrap();
    assert!(!lanes.is_empty());
    let mut height = 0;
    let mut degree = 0;
    for lane in lanes {
        let parents = lane["parents"].as_array().unwrap();
        let children = lane["children"].as_array().unwrap();
        assert_eq!(parents.len(), ranks);
        assert_eq!(children.len(), ranks);
        for (r, p) in parents.iter().enumerate() {
            if r == root {
                assert!(p.is_null(), "the root has no parent");
            } else {
                let p = p.as_u64().unwrap() as usize;
                let listed = children[p].as_array().unwrap();
                assert!(
                    listed.iter().any(|c| c == r),
                    "rank {r} missing from children[{p}]"
                );
            }
        }
        // Depth of every rank by walking parents: reaches the root without cycles.
        for r in 0..ranks {
            let (mut x, mut d) = (r, 0);
            while let Some(p) = parents[x].as_u64() {
                x = p as usize;
                d += 1;
                assert!(d <= ranks, "cycle through rank {r}");
            }
            assert_eq!(x, root);
            height = height.max(d);
        }
        degree = degree.max(
            children
                .iter()
                .map(|c| c.as_array().unwrap().len())
                .max()
                .unwrap(),
        );
    }
    assert_eq!(obj["height"], height);
    assert_eq!(obj["max_degree"], degree);
}

#[test]
fn json_contract_for_every_tree() {
    let t = gen::random_cluster(5, 21, 3);
    let path = write_topology("random.json", &t);
    let file = path.to_str().unwrap();
    for (tree, lanes) in [
        ("linear", 1),
        ("binary", 1),
        ("kary:3", 1),
        ("kbinomial:3", 1),
        ("multilane", 2),
        ("flat", 1),
        ("binomial", 1),
        ("naive-linear", 1),
        ("naive-binary", 1),
    ] {
        let v = pipecast_json(&[
            "plan",
            "--topology",
            file,
            "--root",
            "4",
            "--tree",
            tree,
            "--json",
        ]);
        check_contract(&v, 21, 4);
        assert_eq!(v["tree"], tree);
        assert_eq!(v["lanes"].as_array().unwrap().len(), lanes);
        assert!(v.get("segment_bytes").is_none());
        assert!(v.get("predicted_us").is_none());
    }
    // kbinomial without k is resolved; the linear chain has degree 1.
    let v = pipecast_json(&["plan", "--topology", file, "--tree", "kbinomial", "--json"]);
    assert!(v["tree"].as_str().unwrap().starts_with("kbinomial:"), "{v}");
    let v = pipecast_json(&["plan", "--topology", file, "--format", "json"]);
    assert_eq!(v["tree"], "linear");
    assert_eq!(v["max_degree"], 1);
    assert_eq!(v["height"], 20);
}

#[test]
fn msize_adds_segment_and_prediction() {
    let t = gen::hub(3, 8, true);
    let path = write_topology("hub.json", &t);
    let file = path.to_str().unwrap();
    let mut last = 0.0;
    for msize in ["8K", "64K", "1M"] {
        let v = pipecast_json(&[
            "plan",
            "--topology",
            file,
            "--tree",
            "linear",
            "--msize",
            msize,
            "--json",
        ]);
        check_contract(&v, 32, 0);
        let seg = v["segment_bytes"].as_u64().unwrap();
        let predicted = v["predicted_us"].as_f64().unwrap();
        assert!([256, 512, 1024, 2048, 4096, 8192, 16384, 32768].contains(&seg));
        assert!(predicted > last, "{msize}: {predicted} after {last}");
        last = predicted;
    }
    // Default tree with --msize is auto, resolved to a concrete algorithm.
    let v = pipecast_json(&["plan", "--topology", file, "--msize", "2M", "--json"]);
    check_contract(&v, 32, 0);
    assert!(v["predicted_us"].as_f64().unwrap() > 0.0);
    // The 1 Gbit/s profile is faster than the 100 Mbit/s one.
    let slow = pipecast_json(&[
        "plan",
        "--topology",
        file,
        "--tree",
        "binary",
        "--msize",
        "1M",
        "--json",
    ]);
    let fast = pipecast_json(&[
        "plan",
        "--topology",
        file,
        "--tree",
        "binary",
        "--msize",
        "1M",
        "--profile",
        "1gbit",
        "--json",
    ]);
    assert!(fast["predicted_us"].as_f64() < slow["predicted_us"].as_f64());
    // A profile file works like the built-in it copies.
    let dir = path.parent().unwrap().join("p100.json");
    std::fs::write(
        &dir,
        pipecast::model::Profile::builtin("100mbit")
            .unwrap()
            .to_json(),
    )
    .unwrap();
    let from_file = pipecast_json(&[
        "plan",
        "--topology",
        file,
        "--tree",
        "binary",
        "--msize",
        "1M",
        "--profile",
        dir.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(from_file["predicted_us"], slow["predicted_us"]);
}

#[test]
fn errors_exit_non_zero_with_a_message() {
    let t = gen::hub(2, 2, false);
    let path = write_topology("small.json", &t);
    let file = path.to_str().unwrap();
    let bad = path.parent().unwrap().join("cycle.json");
    std::fs::write(
        &bad,
        r#"{"switches":["a","b","c"],"links":[["a","b"],["b","c"],["c","a"]],"machines":[{"name":"n","switch":"a"}]}"#,
    )
    .unwrap();
    let bad_profile = path.parent().unwrap().join("bad-profile.json");
    std::fs::write(
        &bad_profile,
        r#"{"points":[{"bytes":512,"L_us":1,"g_us":2},{"bytes":256,"L_us":1,"g_us":2}]}"#,
    )
    .unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--topology", bad.to_str().unwrap()], "cycle"),
        (vec!["--topology", "/nonexistent/topo.json"], "cannot read"),
        (vec!["--topology", file, "--root", "6"], "root 6"),
        (vec!["--topology", file, "--tree", "star"], "unknown tree"),
        (vec!["--topology", file, "--tree", "kary:0"], "kary:0"),
        (vec!["--topology", file, "--tree", "auto"], "message size"),
        (vec!["--topology", file, "--msize", "12X"], "12X"),
        (
            vec![
                "--topology",
                file,
                "--msize",
                "1M",
                "--profile",
                bad_profile.to_str().unwrap(),
            ],
            "256 B",
        ),
    ];
    for (args, needle) in cases {
        let mut full = vec!["plan"];
        full.extend(&args);
        let out = pipecast(&full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(out.stdout.is_empty(), "{args:?} printed on stdout");
        assert!(
            stderr.contains(needle),
            "{args:?}: {stderr:?} lacks {needle:?}"
        );
    }
}

#[test]
fn dot_output_shape() {
    let t = gen::hub(2, 3, true);
    let path = write_topology("dot.json", &t);
    let file = path.to_str().unwrap();
    let out = pipecast(&[
        "plan",
        "--topology",
        file,
        "--tree",
        "multilane",
        "--format",
        "dot",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("digraph"));
    assert!(text.trim_end().ends_with('}'));
    assert_eq!(text.matches("shape=box").count(), 3);
    assert_eq!(text.matches("shape=ellipse").count(), 9);
    // Two lanes of 8 tree edges each, in two colors, labelled with send positions.
    assert_eq!(text.matches("constraint=false").count(), 16);
    assert_eq!(text.matches("[color=red,").count(), 8);
    assert_eq!(text.matches("[color=blue,").count(), 8);
    assert!(text.contains("label=\"1\""));
    // Switch links and machine attachments are drawn undirected.
    assert_eq!(text.matches("dir=none").count(), 2 + 9);

    let has_dot = Command::new("dot").arg("-V").output().is_ok();
    let out = pipecast(&["plan", "--topology", file, "--format", "svg"]);
    if has_dot {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
    } else {
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("graphviz"));
        common::skip_or_fail(
            "graphviz",
            "the SVG part: `dot` (graphviz) is not installed",
        );
    }
}

#[test]
fn table_lists_every_rank() {
    let t = gen::hub(1, 3, false);
    let path = write_topology("table.json", &t);
    let out = pipecast(&[
        "plan",
        "--topology",
        path.to_str().unwrap(),
        "--msize",
        "64K",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("predicted"));
    for name in ["n0", "n1", "n2", "n3", "n4", "n5"] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
}

#[test]
fn hetero_trees_report_their_throughput() {
    let dir = std::env::temp_dir().join(format!("pipecast-cli-hetero-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.json");
    std::fs::write(
        &file,
        r#"{"switches": ["s0", "s1"], "links": [{"a": "s0", "b": "s1", "gbps": 0.1}],
            "machines": [{"name": "n0", "switch": "s0"}, {"name": "n1", "switch": "s0"},
                         {"name": "n2", "switch": "s1"}, {"name": "n3", "switch": "s1"}]}"#,
    )
    .unwrap();
    let out = Command::new(EXE)
        .args(["plan", "--tree", "hetero:grow", "--json", "--topology"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tree"], "hetero:grow");
    assert_eq!(v["ranks"], 4);
    let parents = v["lanes"][0]["parents"].as_array().unwrap();
    assert_eq!(parents.iter().filter(|p| p.is_null()).count(), 1);
    let tp = v["throughput"].as_f64().unwrap();
    // The 100 Mbit/s switch link bounds the rate: at most 100e6/8 / 65536 slices per second.
    assert!(tp > 0.0 && tp <= 100e6 / 8.0 / 65536.0 * 1.0001, "{tp}");
    let bad = Command::new(EXE)
        .args(["plan", "--tree", "hetero:nope", "--topology"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("prune-degree"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 11: ranks sharing a machine get a two-level plan, and the JSON says which.
#[test]
fn ranks_per_machine_plan_two_levels() {
    let dir = std::env::temp_dir().join(format!("pipecast-cli-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.json");
    std::fs::write(
        &file,
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "n0", "switch": "s0", "ranks": 3},
                         {"name": "n1", "switch": "s1"},
                         {"name": "n2", "switch": "s1", "ranks": 2}]}"#,
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let v = pipecast_json(&["plan", "--topology", file, "--tree", "linear", "--json"]);
    check_contract(&v, 6, 0);
    assert_eq!(v["contention_free"], true);
    let hosts = v["hosts"].as_array().expect("a hosts field");
    let rows: Vec<(String, u64, Vec<u64>)> = hosts
        .iter()
        .map(|h| {
            let ranks = h["ranks"].as_array().unwrap();
            (
                h["name"].as_str().unwrap().to_string(),
                h["leader"].as_u64().unwrap(),
                ranks.iter().map(|r| r.as_u64().unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("n0".to_string(), 0, vec![0, 1, 2]),
            ("n1".to_string(), 3, vec![3]),
            ("n2".to_string(), 4, vec![4, 5]),
        ]
    );
    // The chain n0 → n1 → n2 between leaders, each leader's host after its network child.
    let children = &v["lanes"][0]["children"];
    assert_eq!(children[0], serde_json::json!([3, 1, 2]));
    assert_eq!(children[3], serde_json::json!([4]));
    assert_eq!(children[4], serde_json::json!([5]));
    // Root 5 leads n2; --ranks-per-machine overrides the file (2 × 3 = 6 ranks again).
    let v = pipecast_json(&[
        "plan",
        "--topology",
        file,
        "--ranks-per-machine",
        "2",
        "--root",
        "5",
        "--msize",
        "1M",
        "--json",
    ]);
    check_contract(&v, 6, 5);
    assert_eq!(v["hosts"][2]["leader"], 5);
    assert_eq!(v["hosts"][2]["ranks"], serde_json::json!([4, 5]));
    assert!(v["predicted_us"].as_f64().unwrap() > 0.0);
    // One rank per machine: no hosts field (the contract as before).
    let v = pipecast_json(&[
        "plan",
        "--topology",
        file,
        "--ranks-per-machine",
        "1",
        "--json",
    ]);
    assert_eq!(v["ranks"], 3);
    assert!(v.get("hosts").is_none());
    // The table shows both levels; bad K values are clear errors.
    let out = pipecast(&["plan", "--topology", file]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("two-level: linear between 3 hosts"), "{text}");
    for bad in ["0", "5000"] {
        let out = pipecast(&["plan", "--topology", file, "--ranks-per-machine", bad]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("machine n0: \"ranks\" must be a whole number from 1 to 1024"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 32: the multicast schedule's JSON is the contract plus a `multicast` field (the group
/// send); its lane is the ack tree, contention-free; `auto` never resolves to it.
#[test]
fn multicast_plan_json_has_the_group_and_the_ack_tree() {
    let t = gen::random_cluster(5, 21, 3);
    let path = write_topology("random-mc.json", &t);
    let file = path.to_str().unwrap();
    let v = pipecast_json(&[
        "plan",
        "--topology",
        file,
        "--root",
        "4",
        "--tree",
        "multicast",
        "--json",
    ]);
    check_contract(&v, 21, 4);
    assert_eq!(v["tree"], "multicast");
    assert_eq!(v["contention_free"], true);
    let mc = &v["multicast"];
    assert_eq!(mc["sender"], 4);
    let receivers: Vec<u64> = mc["receivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_u64().unwrap())
        .collect();
    assert_eq!(receivers, (0..21).filter(|&r| r != 4).collect::<Vec<u64>>());
    // Each directed edge once: the root's uplink, the 4 switch links, 20 downlinks.
    let edges = mc["group_edges"].as_array().unwrap();
    assert_eq!(edges.len(), 1 + 4 + 20);
    let mut names: Vec<&str> = edges.iter().map(|e| e.as_str().unwrap()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), edges.len());
    let priced = pipecast_json(&[
        "plan",
        "--topology",
        file,
        "--tree",
        "multicast",
        "--msize",
        "16M",
        "--json",
    ]);
    assert!(priced["predicted_us"].as_f64().unwrap() > 0.0);
    for size in ["4K", "1M", "256M"] {
        let auto = pipecast_json(&["plan", "--topology", file, "--msize", size, "--json"]);
        assert_ne!(auto["tree"], "multicast");
        assert!(auto.get("multicast").is_none());
    }
}
