//! `pipecast hetero` and `pipecast hetero gen`: the JSON contract and clear errors.

mod common;

use std::path::PathBuf;

/// `pipecast ARGS`: whether it succeeded, its stdout and its stderr.
fn pipecast(args: &[&str]) -> (bool, String, String) {
    let out = common::pipecast(args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("hetero-cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn gen_then_all_heuristics_as_json() {
    let file = temp("p.json");
    let f = file.to_str().unwrap();
    let (ok, _, err) = pipecast(&[
        "hetero",
        "gen",
        "--nodes",
        "12",
        "--density",
        "0.2",
        "--seed",
        "4",
        "-o",
        f,
    ]);
    assert!(ok, "{err}");
    let (ok, out, err) = pipecast(&["hetero", "--platform", f, "--heuristic", "all", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["model"], "one-port");
    let lp = v["lp_optimum"].as_f64().unwrap();
    assert!(lp > 0.0);
    let hs = v["heuristics"].as_array().unwrap();
    assert_eq!(hs.len(), 7);
    for h in hs {
        let name = h["name"].as_str().unwrap();
        let parents = h["parents"].as_object().unwrap();
        assert_eq!(parents.len(), 11, "{name}: every node but the source");
        assert!(
            !parents.contains_key("p0"),
            "{name}: the source has no entry"
        );
        let (period, tp, ratio) = (
            h["period"].as_f64().unwrap(),
            h["throughput"].as_f64().unwrap(),
            h["ratio"].as_f64().unwrap(),
        );
        assert!((tp * period - 1.0).abs() < 1e-9);
        assert!((ratio - tp / lp).abs() < 1e-9);
        assert!(ratio <= 1.0 + 1e-9, "{name}: one-port ratio {ratio}");
    }
    let (ok, out, err) = pipecast(&[
        "hetero",
        "--platform",
        f,
        "--heuristic",
        "multiport-grow",
        "--model",
        "multi-port",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["model"], "multi-port");
    assert_eq!(v["heuristics"].as_array().unwrap().len(), 1);
    let (ok, out, _) = pipecast(&["hetero", "--platform", f]);
    assert!(
        ok && out.contains("lp-grow") && out.contains("LP optimum"),
        "{out}"
    );
}

#[test]
fn tiers_generator_from_the_cli() {
    let (ok, out, err) = pipecast(&[
        "hetero", "gen", "--kind", "tiers", "--nodes", "20", "--seed", "2",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["nodes"].as_array().unwrap().len(), 20);
}

#[test]
fn errors_are_clear() {
    let file = temp("bad.json");
    std::fs::write(
        &file,
        r#"{"nodes": ["a", "b"], "source": "a", "edges": [{"from": "a", "to": "c", "time": 1}]}"#,
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let (ok, _, err) = pipecast(&["hetero", "--platform", f]);
    assert!(!ok && err.contains("unknown node \"c\""), "{err}");
    let (ok, _, err) = pipecast(&["hetero"]);
    assert!(!ok && err.contains("--platform"), "{err}");
    std::fs::write(
        &file,
        r#"{"nodes": ["a", "b"], "source": "a", "edges": [{"from": "a", "to": "b", "time": 1}]}"#,
    )
    .unwrap();
    let (ok, _, err) = pipecast(&["hetero", "--platform", f, "--heuristic", "fastest"]);
    assert!(
        !ok && err.contains("unknown heuristic \"fastest\""),
        "{err}"
    );
    let (ok, _, err) = pipecast(&["hetero", "--platform", f, "--model", "two-port"]);
    assert!(!ok && err.contains("one-port or multi-port"), "{err}");
    let (ok, _, err) = pipecast(&["hetero", "gen", "--kind", "mesh"]);
    assert!(!ok && err.contains("random or tiers"), "{err}");
}

/// Issue 12: on a directed platform where rank 2 (p2) cannot reach rank 3 (p3), `binomial`
/// does not apply; `--heuristic all` still reports every other heuristic and says why
/// `binomial` is missing, in the table and in JSON; asked alone, binomial is the error.
#[test]
fn all_reports_the_heuristics_that_apply_and_why_one_does_not() {
    let file = temp("directed.json");
    std::fs::write(
        &file,
        r#"{"nodes": ["p0", "p1", "p2", "p3"], "source": "p0",
            "edges": [{"from": "p0", "to": "p1", "time": 1.0},
                      {"from": "p0", "to": "p2", "time": 2.0},
                      {"from": "p1", "to": "p3", "time": 1.0}]}"#,
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let (ok, out, err) = pipecast(&["hetero", "--platform", f]);
    assert!(ok, "{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}: {out}"))
            .to_string()
    };
    assert!(line("binomial").contains("does not apply"), "{out}");
    assert!(line("binomial").contains("p3"), "{out}");
    for name in ["prune-simple", "prune-degree", "grow", "lp-grow"] {
        assert!(line(name).contains('%'), "{name}: {out}");
    }
    let (ok, out, err) = pipecast(&["hetero", "--platform", f, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let hs = v["heuristics"].as_array().unwrap();
    assert_eq!(hs.len(), 7, "{out}");
    for h in hs {
        if h["name"] == "binomial" {
            assert_eq!(h["applies"], false, "{h}");
            assert!(h["error"].as_str().unwrap().contains("p3"), "{h}");
        } else {
            assert!(h["period"].as_f64().unwrap() > 0.0, "{h}");
            assert_eq!(h["parents"].as_object().unwrap().len(), 3, "{h}");
        }
    }
    let (ok, _, err) = pipecast(&["hetero", "--platform", f, "--heuristic", "binomial"]);
    assert!(!ok);
    assert!(err.contains("binomial") && err.contains("p3"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
