//! Broadcasts between real processes (`pipecast bench`, which verifies every byte at every
//! rank and exits non-zero otherwise), a killed rank, and ranks that disagree.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_pipecast");

fn bench_local(n: usize, args: &[&str]) -> Output {
    bench_local_env(n, args, &[])
}

fn bench_local_env(n: usize, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(EXE)
        .args(["bench", "--local", &n.to_string(), "--json"])
        .args(args)
        .env("PIPECAST_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("run pipecast")
}

/// Runs a local bench; returns the parsed JSON, or None if the tree is not implemented yet.
fn run_ok(n: usize, args: &[&str]) -> Option<serde_json::Value> {
    let out = bench_local(n, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("not implemented yet") {
        eprintln!("skipped (planner not merged yet): {args:?}");
        return None;
    }
    assert!(out.status.success(), "bench {n} {args:?} failed:\n{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["ranks"], n);
    assert_eq!(json["transport"], "tcp");
    let results = json["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for r in results {
        assert_eq!(r["verified"], true, "{r}");
        assert!(r["avg_us"].as_f64().unwrap() > 0.0);
        assert!(r["p2p_us"].as_f64().unwrap() > 0.0);
    }
    Some(json)
}

#[test]
fn every_tree_every_root_awkward_sizes() {
    // Segment 64 KiB: sizes 0, 1, 7, segment − 1, segment + 1; 4 iterations = every root.
    let trees = [
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
        "scatter-allgather",
    ];
    let mut ran = 0;
    for tree in trees {
        let args = [
            "--sizes",
            "0,1,7,65535,65537",
            "--segment",
            "64K",
            "--iters",
            "4",
            "--tree",
            tree,
        ];
        if let Some(json) = run_ok(4, &args) {
            let results = json["results"].as_array().unwrap();
            assert_eq!(results.len(), 5);
            for r in results {
                let bytes = r["bytes"].as_u64().unwrap();
                let want = match tree {
                    "flat" | "binomial" => bytes.max(1),
                    "scatter-allgather" => bytes.div_ceil(3).max(1),
                    _ => 65536,
                };
                assert_eq!(r["segment_bytes"], want, "{tree}: {r}");
            }
            ran += 1;
        }
    }
    assert!(ran >= 7, "the baselines and linear always run");
}

#[test]
fn two_to_eight_ranks_odd_size() {
    for n in [2, 3, 5, 8] {
        let iters = n.to_string();
        let args = [
            "--sizes",
            "1048579",
            "--segment",
            "16K",
            "--iters",
            &iters,
            "--tree",
            "linear,binomial,scatter-allgather",
        ];
        run_ok(n, &args);
    }
}

#[test]
fn plain_sendmsg_without_io_uring() {
    let args = [
        "--sizes",
        "7,300000",
        "--segment",
        "8K",
        "--iters",
        "3",
        "--tree",
        "flat,scatter-allgather",
    ];
    let out = bench_local_env(3, &args, &[("PIPECAST_IO_URING", "0")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = json["results"].as_array().unwrap();
    assert!(results.iter().all(|r| r["verified"] == true));
}

#[test]
fn sixty_four_mebibytes() {
    run_ok(3, &["--sizes", "64M", "--iters", "2", "--tree", "auto"]);
}

fn spawn_rank(rank: usize, n: usize, port: u16, args: &[&str]) -> Child {
    Command::new(EXE)
        .arg("bench")
        .args(args)
        .env("PIPECAST_RANK", rank.to_string())
        .env("PIPECAST_SIZE", n.to_string())
        .env("PIPECAST_RENDEZVOUS", format!("127.0.0.1:{port}"))
        .env("PIPECAST_LOG", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rank")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits for `child` until `deadline`; kills it and panics on a hang.
fn wait_until(child: &mut Child, deadline: Instant, what: &str) -> std::process::ExitStatus {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("{what} hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn killed_rank_makes_the_others_fail_within_the_timeout() {
    let n = 4;
    let port = free_port();
    let args = [
        "--sizes",
        "1M",
        "--iters",
        "100000",
        "--tree",
        "linear",
        "--timeout-ms",
        "2000",
    ];
    let mut ranks: Vec<Child> = (0..n).map(|r| spawn_rank(r, n, port, &args)).collect();
    std::thread::sleep(Duration::from_millis(1500));
    for (r, c) in ranks.iter_mut().enumerate() {
        assert!(
            c.try_wait().unwrap().is_none(),
            "rank {r} ended before the kill"
        );
    }
    ranks[2].kill().unwrap();
    ranks[2].wait().unwrap();
    let killed_at = Instant::now();
    // Error within the timeout (2 s), plus slack for a loaded machine.
    let deadline = killed_at + Duration::from_secs(8);
    for r in [0, 1, 3] {
        let status = wait_until(&mut ranks[r], deadline, &format!("rank {r}"));
        assert!(!status.success(), "rank {r} must report the dead peer");
        let mut err = String::new();
        std::io::Read::read_to_string(ranks[r].stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(err.contains("pipecast:"), "rank {r} prints an error: {err}");
    }
}

#[test]
fn mismatched_message_sizes_are_reported() {
    let n = 3;
    let port = free_port();
    let common = ["--iters", "1", "--tree", "flat", "--timeout-ms", "3000"];
    let mut ranks: Vec<Child> = (0..n)
        .map(|r| {
            let sizes = if r == 1 { "2K" } else { "1K" };
            let mut args = vec!["--sizes", sizes];
            args.extend(common);
            spawn_rank(r, n, port, &args)
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut errors = String::new();
    for (r, c) in ranks.iter_mut().enumerate() {
        let status = wait_until(c, deadline, &format!("rank {r}"));
        assert!(!status.success(), "rank {r} must fail");
        std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut errors).unwrap();
    }
    assert!(
        errors.contains("message size 1024 but this rank has 2048"),
        "the size mismatch is named: {errors}"
    );
}

/// MPI has no timeouts: a rank that is stopped (or computing) for longer than the timeout is
/// late, not gone; its kernel keeps its connections open, and the others wait for it.
#[test]
fn stopped_rank_is_waited_for_beyond_the_timeout() {
    let n = 3;
    let port = free_port();
    let args = [
        "--sizes",
        "256K",
        "--iters",
        "40",
        "--tree",
        "naive-linear",
        "--timeout-ms",
        "1000",
    ];
    let mut ranks: Vec<Child> = (0..n).map(|r| spawn_rank(r, n, port, &args)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let signal = |sig: &str| {
        let pid = ranks[1].id().to_string();
        Command::new("kill").args([sig, &pid]).status().unwrap()
    };
    assert!(signal("-STOP").success());
    std::thread::sleep(Duration::from_millis(3500));
    assert!(signal("-CONT").success());
    let deadline = Instant::now() + Duration::from_secs(60);
    for (r, c) in ranks.iter_mut().enumerate() {
        let status = wait_until(c, deadline, &format!("rank {r}"));
        let mut err = String::new();
        std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(
            status.success(),
            "rank {r} must finish after the stopped rank resumed: {err}"
        );
    }
}

#[test]
fn calibrate_writes_a_profile() {
    let dir = std::env::temp_dir().join(format!("pipecast-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("profile.json");
    let out = Command::new(EXE)
        .args([
            "calibrate",
            "--local",
            "--sizes",
            "256,4K,64K",
            "--count",
            "50",
            "--reps",
            "10",
            "-o",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let points = profile["points"].as_array().unwrap();
    let sizes: Vec<u64> = points
        .iter()
        .map(|p| p["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, vec![256, 4096, 65536]);
    for p in points {
        assert!(p["g_us"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["L_us"].as_f64().unwrap() >= 0.0, "{p}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn topology_file_maps_ranks_to_machines() {
    let dir = std::env::temp_dir().join(format!("pipecast-topo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("two-switches.json");
    std::fs::write(
        &path,
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "n0", "switch": "s0"}, {"name": "n1", "switch": "s1"},
                         {"name": "n2", "switch": "s0"}, {"name": "n3", "switch": "s1"}]}"#,
    )
    .unwrap();
    let topo = path.to_str().unwrap();
    let args = [
        "--topology",
        topo,
        "--sizes",
        "100003",
        "--segment",
        "8K",
        "--iters",
        "4",
        "--tree",
        "linear,binary,naive-linear",
    ];
    run_ok(4, &args);
    // A topology of another size is refused up front.
    let out = bench_local(3, &args);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("4 machines"));
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 11: three ranks on each of two machines (the file's `ranks`) broadcast over a
/// two-level plan — leaders across, the others fed by their leader — byte-exact, every root.
#[test]
fn ranks_sharing_machines_broadcast_over_two_levels() {
    let dir = std::env::temp_dir().join(format!("pipecast-two-level-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.json");
    std::fs::write(
        &file,
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "n0", "switch": "s0", "ranks": 3},
                         {"name": "n1", "switch": "s1", "ranks": 3}]}"#,
    )
    .unwrap();
    let file = file.to_str().unwrap();
    for tree in ["auto", "linear", "binary", "multilane", "flat"] {
        let args = [
            "--topology",
            file,
            "--sizes",
            "1,65537,1M",
            "--iters",
            "6",
            "--tree",
            tree,
        ];
        run_ok(6, &args);
    }
    let out = bench_local(4, &["--topology", file, "--sizes", "1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("6 ranks on its machines"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
