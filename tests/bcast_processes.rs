//! Broadcasts between real processes (`pipecast bench`, which verifies every byte at every
//! rank and exits non-zero otherwise), a killed rank, and ranks that disagree. Ranks on one
//! host move segments through shared memory (single copy by cross-memory attach, or the
//! two-copy ring), or over TCP loopback with `PIPECAST_SHM=off`; both are tested.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::EXE;

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

/// Runs a local bench (shared memory, single copy); returns the parsed JSON.
fn run_ok(n: usize, args: &[&str]) -> serde_json::Value {
    run_ok_over(n, args, &[], "shm:cma")
}

/// Runs a local bench with `env`, expecting link `link`.
fn run_ok_over(n: usize, args: &[&str], env: &[(&str, &str)], link: &str) -> serde_json::Value {
    let out = bench_local_env(n, args, env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench {n} {args:?} failed:\n{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["ranks"], n);
    assert_eq!(json["transport"], link);
    let results = json["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for r in results {
        assert_eq!(r["verified"], true, "{r}");
        assert!(r["avg_us"].as_f64().unwrap() > 0.0);
        assert!(r["p2p_us"].as_f64().unwrap() > 0.0);
    }
    // Local ranks share the host's clock: every row also times the broadcast alone.
    assert_eq!(json["shared_clock"], true, "{json}");
    for r in results {
        broadcast_alone_within_the_iteration(r);
    }
    json
}

/// A row's broadcast alone (root's start to the last rank's completion) lies inside each
/// iteration's time (which adds the closing barrier, that no rank leaves before every rank
/// completed): an order of events, not a speed.
fn broadcast_alone_within_the_iteration(r: &serde_json::Value) {
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
    let times = r["times_us"].as_array().unwrap();
    let alone = r["bcast_times_us"].as_array().expect("bcast_times_us");
    assert_eq!(times.len(), alone.len(), "{r}");
    for (t, a) in times.iter().zip(alone) {
        let (t, a) = (t.as_f64().unwrap(), a.as_f64().unwrap());
        assert!(
            a >= 0.0 && a <= t + 1.0,
            "alone {a} us, iteration {t} us: {r}"
        );
    }
    assert!(f("bcast_min_us") <= f("bcast_avg_us") && f("bcast_avg_us") <= f("bcast_max_us"));
    assert!(f("bcast_max_us") <= f("max_us") + 1.0, "{r}");
    assert!(
        f("p2p_bcast_us") >= 0.0 && f("p2p_bcast_us") <= f("p2p_us") + 1.0,
        "{r}"
    );
}

#[test]
fn every_tree_every_root_awkward_sizes() {
    every_tree_every_root(&[], "shm:cma");
}

#[test]
fn every_tree_every_root_over_tcp_loopback() {
    every_tree_every_root(&[("PIPECAST_SHM", "off")], "tcp");
}

fn every_tree_every_root(env: &[(&str, &str)], link: &str) {
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
        let json = run_ok_over(4, &args, env, link);
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
    }
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

/// Shared-memory pairs kept under `PIPECAST_MAX_CONNECTIONS=2` (issue 30): 8 ranks, every
/// rank root in turn over chains and binary trees, so each rank talks to new peers at almost
/// every broadcast and closes idle pairs beyond two (a goodbye each way) and sets them up
/// again; sizes 0, 1, odd, not a multiple of the segment, and 5 MiB + 3, by address and
/// through the ring. Every byte verified at every rank; no rank's descriptors beyond what it
/// held after setup plus a root's fan-out (7 pairs), its ring and one pair closing.
#[test]
fn shared_memory_pairs_stay_bounded_and_byte_exact_with_rotating_roots() {
    let n = 8;
    let args = [
        "--sizes",
        "0,1,7,100003,5242883",
        "--segment",
        "64K",
        "--iters",
        "8",
        "--tree",
        "linear,binary",
    ];
    for (mode, link) in [("auto", "shm:cma"), ("ring", "shm:ring")] {
        let env = [("PIPECAST_MAX_CONNECTIONS", "2"), ("PIPECAST_SHM", mode)];
        let json = run_ok_over(n, &args, &env, link);
        let fds = &json["fds"];
        let (setup, rest) = (fds["after_setup"].as_u64(), fds["peak_rest"].as_u64());
        assert!(
            rest.unwrap() <= setup.unwrap() + n as u64 + 2,
            "{mode}: {fds}"
        );
    }
}

/// The two-copy ring, forced: 2 to 8 ranks, awkward sizes (a segment bigger than a ring
/// chunk included), every root.
#[test]
fn ring_between_two_to_eight_ranks() {
    for n in [2, 4, 8] {
        let iters = n.to_string();
        let args = [
            "--sizes",
            "0,1,7,65537,5000011",
            "--segment",
            "3M",
            "--iters",
            &iters,
            "--tree",
            "linear,flat",
        ];
        run_ok_over(n, &args, &[("PIPECAST_SHM", "ring")], "shm:ring");
    }
}

/// The default on a wide host (6 ranks): small messages by cross-memory attach, large ones
/// (from 4 MiB) through each writer's staging ring, copied in once for all its readers; both
/// in one run, byte-exact at every rank for every root, awkward sizes included.
#[test]
fn wide_hosts_stage_large_messages_and_attach_small_ones() {
    staged_from(6, (4 << 20) + 3, "0,1,7,1000003", "auto,flat");
}

/// Two ranks: one reader attaches below 32 MiB (16 MiB included) and is fed through the
/// writer's staging ring from 32 MiB (the writer's copy in and the reader's copy out run on
/// two cores at once); byte-exact for both roots.
#[test]
fn two_ranks_stage_from_32_mib() {
    staged_from(2, (32 << 20) + 3, "7,1000003,16777216", "auto");
}

/// `bench --local n` over `small` sizes and `large`, every rank root once: each root copies
/// `large` into its staging ring about once (not once per reader), and attaches the rest.
fn staged_from(n: usize, large: u64, small: &str, trees: &str) {
    let iters = n.to_string();
    let sizes = format!("{small},{large}");
    let args = ["--sizes", &sizes, "--iters", &iters, "--tree", trees];
    let json = run_ok(n, &args);
    for r in json["results"].as_array().unwrap() {
        let counters = &r["transport_counters"];
        let staged = counters["shm_staged_bytes"].as_u64().unwrap_or(0);
        let attached = counters["shm_cma_bytes"].as_u64().unwrap_or(0);
        if r["bytes"] == large {
            assert!(staged >= large * n as u64, "{r}");
            assert!(staged < 2 * large * n as u64, "{r}");
        } else if r["bytes"].as_u64().unwrap() > 1 {
            assert_eq!(staged, 0, "{r}");
            assert!(attached > 0, "{r}");
        }
    }
}

/// A process that may not use cross-memory attach (a seccomp filter, as container runtimes
/// install, makes `process_vm_readv` fail with EPERM) reaches the ring on its own, and says so.
#[test]
fn ring_when_cross_memory_attach_is_refused() {
    let Some(no_cma) = build_no_cma() else {
        return;
    };
    let out = Command::new(&no_cma)
        .arg(EXE)
        .args(["bench", "--local", "3", "--json"])
        .args([
            "--sizes",
            "1,1048579",
            "--iters",
            "3",
            "--tree",
            "flat,linear",
        ])
        .env("PIPECAST_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["transport"], "shm:ring", "{stderr}");
    assert!(json["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["verified"] == true));
    assert!(
        stderr.contains("cross-memory attach is refused"),
        "the log says why: {stderr}"
    );
    // Forcing single copy there is a clear error at every rank, not a hang.
    let out = Command::new(&no_cma)
        .arg(EXE)
        .args(["bench", "--local", "2", "--sizes", "1K", "--iters", "2"])
        .env("PIPECAST_SHM", "cma")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("PIPECAST_SHM=cma"), "{stderr}");
}

/// Builds tests/c/no_cma.c (runs a command under a seccomp filter that refuses
/// process_vm_readv), or None without a C compiler (skipped, or failed under
/// `PIPECAST_REQUIRE`).
fn build_no_cma() -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join("no_cma");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/no_cma.c");
    match Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(src)
        .status()
    {
        Ok(s) => {
            assert!(s.success(), "tests/c/no_cma.c does not compile");
            Some(exe)
        }
        Err(e) => {
            common::skip_or_fail("cc", format!("no C compiler (cc): {e}"));
            None
        }
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
    let out = bench_local_env(
        3,
        &args,
        &[("PIPECAST_IO_URING", "0"), ("PIPECAST_SHM", "off")],
    );
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
    spawn_rank_env(rank, n, port, args, &[])
}

fn spawn_rank_env(rank: usize, n: usize, port: u16, args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(EXE)
        .arg("bench")
        .args(args)
        .env("PIPECAST_RANK", rank.to_string())
        .env("PIPECAST_SIZE", n.to_string())
        .env("PIPECAST_RENDEZVOUS", format!("127.0.0.1:{port}"))
        .env("PIPECAST_LOG", "off")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rank")
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
    killed_rank(&[]);
}

#[test]
fn killed_rank_over_the_ring_leaves_nothing_behind() {
    killed_rank(&[("PIPECAST_SHM", "ring")]);
}

#[test]
fn killed_rank_over_tcp_loopback() {
    killed_rank(&[("PIPECAST_SHM", "off")]);
}

/// Shared-memory names a rank left: files in /dev/shm, abstract sockets `@pipecast.IP:PORT`
/// of the given listening ports.
fn leftovers(ports: &[String]) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("pipecast"))
                .collect()
        })
        .unwrap_or_default();
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    found.extend(
        unix.lines()
            .filter_map(|l| l.split_whitespace().nth(7))
            .filter(|name| ports.iter().any(|p| name.ends_with(&format!(":{p}"))))
            .map(str::to_string),
    );
    found
}

/// The abstract socket names of the pipecast listeners of processes `pids`.
fn listener_ports(pids: &[u32]) -> Vec<String> {
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let names: Vec<&str> = unix
        .lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|n| n.starts_with("@pipecast."))
        .collect();
    // A listener's name holds its TCP port; keep those whose port a rank of ours listens on.
    let mut ports = Vec::new();
    for pid in pids {
        let Ok(out) = Command::new("ss").args(["-ltnpH"]).output() else {
            break;
        };
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if l.contains(&format!("pid={pid},")) {
                if let Some(port) = l
                    .split_whitespace()
                    .nth(3)
                    .and_then(|a| a.rsplit(':').next())
                {
                    if names.iter().any(|n| n.ends_with(&format!(":{port}"))) {
                        ports.push(port.to_string());
                    }
                }
            }
        }
    }
    ports
}

fn killed_rank(env: &[(&str, &str)]) {
    let n = 4;
    let port = common::free_port();
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
    let mut ranks: Vec<Child> = (0..n)
        .map(|r| spawn_rank_env(r, n, port, &args, env))
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    for (r, c) in ranks.iter_mut().enumerate() {
        assert!(
            c.try_wait().unwrap().is_none(),
            "rank {r} ended before the kill"
        );
    }
    let pids: Vec<u32> = ranks.iter().map(Child::id).collect();
    let ports = listener_ports(&pids);
    if env.is_empty() {
        match common::requirements::tool("iproute2", "ss", &["-V"]) {
            None => assert!(
                !ports.is_empty(),
                "the ranks listen on shared-memory sockets"
            ),
            Some(m) => {
                common::skip_or_fail(m.kind, format!("the check for left sockets: {}", m.reason))
            }
        }
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
    assert_eq!(
        leftovers(&ports),
        Vec::<String>::new(),
        "nothing left behind"
    );
}

#[test]
fn mismatched_message_sizes_are_reported() {
    let n = 3;
    let port = common::free_port();
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
    let port = common::free_port();
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

/// Hosts with 1, 2 and 3 ranks in one job (host names from PIPECAST_MACHINE): shared memory
/// inside each host, TCP between them, every byte checked at every rank, every root.
#[test]
fn mixed_hosts_of_one_two_and_three_ranks() {
    let hosts = ["a", "b", "b", "c", "c", "c"];
    let n = hosts.len();
    let port = common::free_port();
    let args = [
        "--sizes",
        "0,1,65537,1048579",
        "--segment",
        "64K",
        "--iters",
        "6",
        "--tree",
        "auto,linear,binomial",
    ];
    let mut ranks: Vec<Child> = hosts
        .iter()
        .enumerate()
        .map(|(r, h)| {
            spawn_rank_env(
                r,
                n,
                port,
                &args,
                &[("PIPECAST_MACHINE", h), ("PIPECAST_LOG", "info")],
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    for (r, c) in ranks.iter_mut().enumerate() {
        let status = wait_until(c, deadline, &format!("rank {r}"));
        let mut err = String::new();
        std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(status.success(), "rank {r}: {err}");
        let err = strip_ansi(&err);
        let link = if r == 0 {
            "transport=tcp"
        } else {
            "transport=tcp+shm:cma"
        };
        assert!(err.contains(link), "rank {r} runs {link}: {err}");
    }
}

/// Log text without terminal colours.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
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
        String::from_utf8_lossy(&out.stderr).contains("with 6 ranks on them"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The processes whose parent is `pid` (from /proc/PID/stat: `pid (comm) state ppid …`).
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A process may end between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            children.push(child);
        }
    }
    children
}

/// Issue 14: a rank of `bench --local` killed by a signal (the out-of-memory killer, say) is
/// reported as such, and `--local` refuses absurd rank counts.
#[test]
fn local_ranks_killed_by_a_signal_are_named() {
    let mut parent = Command::new(EXE)
        .args([
            "bench", "--local", "3", "--sizes", "1K", "--iters", "1000000",
        ])
        .args(["--tree", "flat", "--timeout-ms", "2000"])
        .env("PIPECAST_LOG", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // A rank of the parent, once it runs (a loaded machine may take seconds to start one).
    let deadline = Instant::now() + Duration::from_secs(30);
    let child = loop {
        if let Some(child) = children_of(parent.id()).first() {
            break *child;
        }
        if Instant::now() > deadline || parent.try_wait().unwrap().is_some() {
            parent.kill().ok();
            let out = parent.wait_with_output().unwrap();
            panic!("bench --local 3 started no rank: {}", common::text(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(Command::new("kill")
        .args(["-9", &child.to_string()])
        .status()
        .unwrap()
        .success());
    let status = wait_until(
        &mut parent,
        Instant::now() + Duration::from_secs(30),
        "bench --local",
    );
    let mut err = String::new();
    std::io::Read::read_to_string(parent.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("was killed by signal 9 (SIGKILL"), "{err}");
    let out = bench_local(100_000, &["--sizes", "1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at most 256 local ranks"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 28: no broadcast may wait out a whole driver round. With the round raised to 1 s
/// (`PIPECAST_ROUND_MS`), 200 broadcasts of 1 MiB over 4 ranks, one after the other as MPI
/// programs post them, by attach and through the ring: a lost wake-up (a round that sleeps on
/// its sockets with data already in hand, as the shared-memory link did with segments that
/// came before their broadcast was posted) would show as an iteration of a second or more,
/// where one takes a few milliseconds even in a debug build on a busy host.
#[test]
fn back_to_back_broadcasts_never_wait_out_a_round() {
    for (shm, link) in [("cma", "shm:cma"), ("ring", "shm:ring")] {
        let args = ["--sizes", "1M", "--tree", "flat,linear", "--iters", "200"];
        let env = [("PIPECAST_ROUND_MS", "1000"), ("PIPECAST_SHM", shm)];
        let json = run_ok_over(4, &args, &env, link);
        for r in json["results"].as_array().unwrap() {
            let max = r["max_us"].as_f64().unwrap();
            assert!(
                max < 900_000.0,
                "PIPECAST_SHM={shm}: an iteration took {max} µs, a whole 1 s round: {r}"
            );
        }
    }
}

/// Issue 28: a job whose ranks know their link's rate (here `PIPECAST_LINK_RATE`, different at
/// each rank) plans on the profile every rank derives alike from everybody's blobs: the
/// slowest rate, the costliest host. The host's cost is measured once and cached
/// (`XDG_CACHE_HOME/pipecast`); every byte is checked at every rank.
#[test]
fn ranks_derive_one_profile_from_the_slowest_link() {
    let cache = std::env::temp_dir().join(format!("pipecast-cache-{}", std::process::id()));
    std::fs::remove_dir_all(&cache).ok();
    let n = 3;
    let port = common::free_port();
    let rates = ["10gbit", "1gbit", "25gbit"];
    let ranks: Vec<Child> = (0..n)
        .map(|r| {
            Command::new(EXE)
                .args([
                    "bench",
                    "--json",
                    "--sizes",
                    "0,1,1000003",
                    "--tree",
                    "auto",
                ])
                .args(["--iters", "3"])
                .env("PIPECAST_RANK", r.to_string())
                .env("PIPECAST_SIZE", n.to_string())
                .env("PIPECAST_RENDEZVOUS", format!("127.0.0.1:{port}"))
                .env("PIPECAST_LOG", "off")
                .env("PIPECAST_SHM", "off")
                .env("PIPECAST_LINK_RATE", rates[r])
                .env("XDG_CACHE_HOME", &cache)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    let outs: Vec<Output> = ranks
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let json: serde_json::Value = serde_json::from_slice(&outs[0].stdout).expect("rank 0's JSON");
    let profile = json["profile"].as_str().unwrap();
    assert!(profile.starts_with("derived: 1000 Mbit/s"), "{profile}");
    for row in json["results"].as_array().unwrap() {
        assert_eq!(row["verified"], true, "{row}");
    }
    let cached: Vec<_> = std::fs::read_dir(cache.join("pipecast"))
        .expect("the cache directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("host-cost-"))
        .collect();
    assert!(!cached.is_empty(), "the host's cost is cached");
    std::fs::remove_dir_all(&cache).ok();
}

/// `--comms N`: the broadcasts run round robin over N views of the job's communicator
/// (issue 30), every root and awkward sizes byte-exact, over shared memory and over TCP; a
/// rank's peak descriptors with 64 views are no more than with one.
#[test]
fn broadcasts_round_robin_over_views() {
    for (n, env, link) in [
        (4, &[][..], "shm:cma"),
        (3, &[("PIPECAST_SHM", "off")][..], "tcp"),
    ] {
        let iters = (2 * n * 8).to_string();
        let args = [
            "--sizes",
            "0,1,7,65535,65537",
            "--segment",
            "64K",
            "--tree",
            "linear,binomial",
            "--iters",
            &iters,
            "--comms",
            "8",
        ];
        let json = run_ok_over(n, &args, env, link);
        assert_eq!(json["comms"], 8, "{json}");
    }
    let peak = |comms: &str| {
        let args = [
            "--sizes", "1,65537", "--tree", "linear", "--iters", "4", "--comms", comms,
        ];
        let json = run_ok_over(4, &args, &[("PIPECAST_SHM", "off")], "tcp");
        assert_eq!(json["comms"].as_u64().unwrap().to_string(), comms);
        json["fds"]["peak"].as_u64()
    };
    let (one, many) = (peak("1"), peak("64"));
    match (one, many) {
        (Some(one), Some(many)) => assert!(
            many <= one,
            "peak descriptors: {one} with 1 view, {many} with 64"
        ),
        _ => eprintln!("skipped: no descriptor counts (no /proc)"),
    }
}

/// Shared memory sets a pair up on first use, only on the tree edges the broadcasts use
/// (issue 30): byte-exact at every rank with 8 and 16 ranks, from every root, with awkward
/// sizes (0, 1, odd, not a multiple of the segment, and large enough for the staging ring)
/// and several trees (flat: a root's neighbours are every rank).
#[test]
fn lazy_shared_memory_is_byte_exact_from_every_root() {
    for n in [8, 16] {
        let iters = n.to_string();
        let args = [
            "--sizes",
            "0,1,7,100003,5242883",
            "--segment",
            "64K",
            "--iters",
            &iters,
            "--tree",
            "linear,binary,binomial,flat",
        ];
        run_ok(n, &args);
    }
}

/// A rank's descriptors grow with its tree neighbours, not with the ranks of its host: the
/// median rank (a leaf of the one-host plans, which fan out from the root and a second
/// feeder) holds as many with 16 ranks as with 8, where a full mesh held 2 more per rank
/// added (43 at 16 ranks before issue 30's lazy setup).
#[test]
fn shared_memory_descriptors_follow_tree_neighbours_not_ranks() {
    let fds = |n: usize| {
        let args = [
            "--sizes",
            "64K,1M",
            "--iters",
            "3",
            "--root",
            "0",
            "--tree",
            "linear,binary",
        ];
        run_ok(n, &args)["fds"].clone()
    };
    let (f8, f16) = (fds(8), fds(16));
    if f8.is_null() || f16.is_null() {
        eprintln!("skipped: no /proc/self/fd to count descriptors");
        return;
    }
    let at = |f: &serde_json::Value, k: &str| f[k].as_u64().unwrap();
    for k in ["peak_median", "peak_min"] {
        assert!(
            at(&f16, k) <= at(&f8, k) + 1,
            "{k}: 16 ranks {f16}, 8 ranks {f8}"
        );
    }
}

/// Follows a rank's log (stderr, `PIPECAST_LOG=info`) on a thread; the receiver hears once
/// the rank joined its communicator.
fn on_join(child: &mut Child) -> std::sync::mpsc::Receiver<()> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("piped");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("joined") {
                tx.send(()).ok();
            }
        }
    });
    rx
}

/// Four ranks on one host; rank 2 logs at info so that the test sees it join.
fn spawn_watched(port: u16, args: &[&str]) -> (Vec<Child>, std::sync::mpsc::Receiver<()>) {
    let n = 4;
    let mut ranks: Vec<Child> = (0..n)
        .map(|r| {
            let log = if r == 2 { "info" } else { "off" };
            spawn_rank_env(r, n, port, args, &[("PIPECAST_LOG", log)])
        })
        .collect();
    let joined = on_join(&mut ranks[2]);
    joined
        .recv_timeout(Duration::from_secs(60))
        .expect("rank 2 joins");
    (ranks, joined)
}

/// MPI has no timeouts: a rank stopped for 20 s right after it joined, before its first
/// broadcast (so before any of its shared-memory pairs is set up: its neighbours' setups
/// wait on its socket), is late, not gone. Everybody finishes, every byte checked.
#[test]
fn a_rank_20_s_late_to_its_first_broadcast_is_waited_for() {
    let port = common::free_port();
    let args = [
        "--sizes",
        "0,7,1000003",
        "--iters",
        "4",
        "--tree",
        "linear,binary",
        "--timeout-ms",
        "1000",
    ];
    let (mut ranks, _joined) = spawn_watched(port, &args);
    let pid = ranks[2].id().to_string();
    let signal = |sig: &str| Command::new("kill").args([sig, &pid]).status().unwrap();
    assert!(signal("-STOP").success());
    std::thread::sleep(Duration::from_secs(20));
    for r in [0, 1, 3] {
        assert!(
            ranks[r].try_wait().unwrap().is_none(),
            "rank {r} ended while rank 2 was stopped"
        );
    }
    assert!(signal("-CONT").success());
    let deadline = Instant::now() + Duration::from_secs(120);
    for (r, c) in ranks.iter_mut().enumerate() {
        let status = wait_until(c, deadline, &format!("rank {r}"));
        assert!(
            status.success(),
            "rank {r} must finish after rank 2 resumed"
        );
    }
}

/// A rank killed right after it joined, before any of its shared-memory pairs is set up:
/// its socket is gone, so its neighbours' setups are refused (or reset) and fail their
/// broadcast with an error, and the rest fail through them; nobody hangs.
#[test]
fn a_rank_killed_before_its_first_broadcast_fails_the_others() {
    let port = common::free_port();
    let args = [
        "--sizes",
        "1M",
        "--iters",
        "1000",
        "--tree",
        "linear",
        "--timeout-ms",
        "2000",
    ];
    let (mut ranks, _joined) = spawn_watched(port, &args);
    ranks[2].kill().unwrap();
    ranks[2].wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    for r in [0, 1, 3] {
        let status = wait_until(&mut ranks[r], deadline, &format!("rank {r}"));
        assert!(!status.success(), "rank {r} must report the dead peer");
        let mut err = String::new();
        std::io::Read::read_to_string(ranks[r].stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(err.contains("pipecast:"), "rank {r} prints an error: {err}");
    }
}

/// `--shared-clock no`: the rows leave out the broadcast alone (nothing is made up where the
/// ranks' clocks are not known to be one), the data is still verified, the old columns stay.
#[test]
fn without_a_shared_clock_the_broadcast_alone_is_left_out() {
    let out = bench_local(
        3,
        &[
            "--sizes",
            "0,1,100003",
            "--tree",
            "linear",
            "--iters",
            "2",
            "--shared-clock",
            "no",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["shared_clock"], false);
    for r in json["results"].as_array().unwrap() {
        assert_eq!(r["verified"], true, "{r}");
        assert!(r["times_us"].as_array().unwrap().len() == 2);
        assert!(
            r.get("bcast_avg_us").is_none() && r.get("p2p_bcast_us").is_none(),
            "{r}"
        );
    }
}
