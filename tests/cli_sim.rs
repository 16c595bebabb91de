//! `pipecast sim` end to end: the JSON contract of docs/sim.md field by field, `auto`
//! reported as `auto=TREE`, every tree `bench` knows (scatter-allgather included), the size
//! and tree sweep, the SVG plot, contention on the interleaved hub, and clear errors.

mod common;
use common::{pipecast, pipecast_json};

const HUB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hub4x4.json");
const INTERLEAVED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/hub4x4-interleaved.json"
);

#[test]
fn json_contract_and_sweep() {
    let trees = "auto,linear,binary,naive-linear,binomial,scatter-allgather,kbinomial,flat";
    let v = pipecast_json(&[
        "sim",
        "--topology",
        HUB,
        "--tree",
        trees,
        "--sizes",
        "1,64K,1M",
        "--json",
    ]);
    assert_eq!(v["ranks"], 16);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 3 * 8, "sizes × trees");
    for (i, r) in results.iter().enumerate() {
        let tree = r["tree"].as_str().unwrap();
        let want = trees.split(',').nth(i % 8).unwrap();
        assert!(
            tree == want || tree.starts_with(&format!("{want}=")),
            "{tree} for {want}"
        );
        if want == "auto" {
            assert!(tree.starts_with("auto="), "{tree}");
        }
        let bytes = r["bytes"].as_u64().unwrap();
        assert_eq!(bytes, [1, 65536, 1 << 20][i / 8]);
        assert!(r["segment_bytes"].as_u64().unwrap() >= 1);
        let t = r["completion_us"].as_f64().unwrap();
        assert!(t > 0.0, "{tree} {bytes}: {t}");
        let edges = r["edges"].as_array().unwrap();
        assert!(!edges.is_empty());
        for e in edges {
            assert!(e["edge"].as_str().unwrap().contains("->"));
            assert!(e["busy_us"].as_f64().unwrap() >= 0.0);
        }
        let b = r["bottleneck"].as_str().unwrap();
        let busiest = edges
            .iter()
            .map(|e| e["busy_us"].as_f64().unwrap())
            .fold(0.0, f64::max);
        let of_b = edges.iter().find(|e| e["edge"] == b).unwrap();
        assert_eq!(of_b["busy_us"].as_f64().unwrap(), busiest);
        let ranks = r["ranks_us"].as_array().unwrap();
        assert_eq!(ranks.len(), 16);
        let slowest = ranks
            .iter()
            .map(|t| t.as_f64().unwrap())
            .fold(0.0, f64::max);
        assert_eq!(slowest, t);
    }
}

#[test]
fn the_unaware_chain_contends_on_the_interleaved_hub() {
    let v = pipecast_json(&[
        "sim",
        "--topology",
        INTERLEAVED,
        "--tree",
        "linear,naive-linear",
        "--msize",
        "4M",
        "--json",
    ]);
    let r = v["results"].as_array().unwrap();
    assert_eq!(r[0]["contention"].as_array().unwrap().len(), 0);
    assert!(!r[1]["contention"].as_array().unwrap().is_empty());
    assert!(r[1]["completion_us"].as_f64() > r[0]["completion_us"].as_f64());
}

#[test]
fn svg_has_one_line_per_tree_and_table_prints() {
    let out = pipecast(&[
        "sim",
        "--topology",
        HUB,
        "--tree",
        "linear,binary,scatter-allgather",
        "--sizes",
        "4K,64K,1M",
        "--link-rate",
        "0.1",
        "--format",
        "svg",
    ]);
    assert!(out.status.success());
    let svg = String::from_utf8(out.stdout).unwrap();
    assert!(svg.starts_with("<svg"));
    assert_eq!(svg.matches("<polyline").count(), 3);
    let out = pipecast(&[
        "sim",
        "--topology",
        HUB,
        "--msize",
        "1M",
        "--tree",
        "linear",
    ]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("linear") && table.contains("completion_us"));
}

/// `--link-rate` takes tc's spelling, as `lab up --rate` does, and a bare number of Gbit/s as
/// it always did: 100mbit and 0.1 simulate alike (issue 28).
#[test]
fn link_rate_takes_tc_spelling_or_bare_gbit() {
    let sim = |rate: &str| {
        let v = pipecast_json(&[
            "sim",
            "--topology",
            HUB,
            "--tree",
            "linear",
            "--msize",
            "1M",
            "--link-rate",
            rate,
            "--json",
        ]);
        v["results"][0]["completion_us"].as_f64().unwrap()
    };
    let bare = sim("0.1");
    assert_eq!(sim("100mbit"), bare);
    assert_eq!(sim("100Mbit"), bare);
    assert!(sim("1gbit") < bare);
}

/// Issue 28: with `--link-rate` and no `--profile`, `auto` and the segment size are chosen by
/// the profile of that rate (`Timing::rate_profile`), so the model's prediction is the network
/// simulated: within 10 % of the simulated time at 100 Mbit/s and at 10 Gbit/s. A profile given
/// still wins, and prices another network (100 Mbit/s Table 2 on a 10 Gbit/s simulation).
#[test]
fn link_rate_chooses_by_its_own_profile() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "sim",
            "--topology",
            HUB,
            "--tree",
            "auto",
            "--msize",
            "16M",
            "--json",
        ];
        args.extend_from_slice(extra);
        let v = pipecast_json(&args);
        let r = &v["results"][0];
        (
            r["predicted_us"].as_f64().unwrap(),
            r["completion_us"].as_f64().unwrap(),
        )
    };
    for rate in ["100mbit", "10gbit"] {
        let (predicted, simulated) = run(&["--link-rate", rate]);
        assert!(
            (predicted / simulated - 1.0).abs() < 0.1,
            "{rate}: predicted {predicted} µs, simulated {simulated} µs"
        );
    }
    let (predicted, simulated) = run(&["--link-rate", "10gbit", "--profile", "100mbit"]);
    assert!(predicted > 10.0 * simulated, "{predicted} {simulated}");
}

#[test]
fn bad_input_is_a_clear_error() {
    for (args, want) in [
        (vec!["--msize", "1M", "--root", "99"], "--root 99"),
        (vec![], "--msize"),
        (vec!["--msize", "1M", "--tree", "nope"], "--tree"),
        (vec!["--msize", "1M", "--link-rate", "0"], "--link-rate"),
        // tc's byte rates are refused: a topology's `gbps` is Gbit/s.
        (vec!["--msize", "1M", "--link-rate", "10gbps"], "10gbit"),
        (vec!["--msize", "1M", "--link-rate", "1e3"], "--link-rate"),
        (vec!["--msize", "1M", "--segment", "0"], "--segment"),
    ] {
        let mut all = vec!["sim", "--topology", HUB];
        all.extend(args);
        let out = pipecast(&all);
        assert!(!out.status.success(), "{all:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{all:?}: {err}");
    }
}

/// Issue 32: `multicast` in the tree list runs the multicast simulator beside the trees; its
/// row checks delivery at every rank (also with loss), and is faster than linear at 16 MiB.
#[test]
fn multicast_beside_the_trees() {
    for loss in ["0", "0.01"] {
        let v = pipecast_json(&[
            "sim",
            "--topology",
            INTERLEAVED,
            "--tree",
            "linear,multicast",
            "--sizes",
            "1,65537,16M",
            "--loss",
            loss,
            "--json",
        ]);
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 6);
        for pair in results.chunks(2) {
            let (linear, mc) = (&pair[0], &pair[1]);
            assert_eq!(mc["tree"], "multicast");
            let m = &mc["multicast"];
            let segments = m["segments"].as_u64().unwrap();
            assert_eq!(m["delivered"].as_u64().unwrap(), 15 * segments);
            assert_eq!(mc["ranks_us"].as_array().unwrap().len(), 16);
            assert!(mc["predicted_us"].as_f64().unwrap() > 0.0);
            if loss == "0" {
                assert_eq!(m["repairs"], 0);
                if mc["bytes"] == 16 << 20 {
                    let (l, t) = (
                        linear["completion_us"].as_f64().unwrap(),
                        mc["completion_us"].as_f64().unwrap(),
                    );
                    assert!(t < l, "multicast {t} us, linear {l} us");
                }
            }
        }
    }
    let out = pipecast(&[
        "sim",
        "--topology",
        HUB,
        "--tree",
        "multicast",
        "--msize",
        "1K",
        "--loss",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--loss"));
}
