//! Connections only on tree edges (issue 30), between real processes over TCP loopback
//! (`PIPECAST_SHM=off`), each rank under its own descriptor limit (`ulimit -n` in a shell
//! that then runs the rank): a job that a full mesh could not run passes with every byte
//! verified; a limit too low even for the tree fails at every rank, naming the limit, with no
//! hang; a cache of two connections closes and reopens them between roots, byte-exact.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::EXE;

/// Rank `rank` of `n` running `pipecast bench ARGS --json` under `ulimit -n limit`.
fn spawn(
    rank: usize,
    n: usize,
    port: u16,
    limit: u32,
    args: &[&str],
    env: &[(&str, &str)],
) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n {limit} && exec \"$0\" bench --json \"$@\""
        ))
        .arg(EXE)
        .args(args)
        .env("PIPECAST_RANK", rank.to_string())
        .env("PIPECAST_SIZE", n.to_string())
        .env("PIPECAST_RENDEZVOUS", format!("127.0.0.1:{port}"))
        .env("PIPECAST_SHM", "off")
        .env("PIPECAST_LOG", "off")
        .envs(env.iter().copied())
        .stdout(if rank == 0 {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a rank")
}

/// How each rank of a job ended: success, its stderr, and rank 0's stdout.
struct Ended {
    ok: Vec<bool>,
    stderr: Vec<String>,
    stdout: String,
}

/// Runs `n` ranks, rank r under `limit(r)` descriptors; panics if one is still running
/// after `within` (a hang).
fn job(
    n: usize,
    limit: impl Fn(usize) -> u32,
    args: &[&str],
    env: &[(&str, &str)],
    within: Duration,
) -> Ended {
    let port = common::free_port();
    let mut ranks: Vec<Child> = (0..n)
        .map(|r| spawn(r, n, port, limit(r), args, env))
        .collect();
    // Drain every rank's stderr while it runs (a full pipe must not stall a rank).
    let readers: Vec<_> = ranks
        .iter_mut()
        .map(|c| {
            let mut err = c.stderr.take().unwrap();
            std::thread::spawn(move || {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut err, &mut s).ok();
                s
            })
        })
        .collect();
    let mut out = ranks[0].stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).ok();
        s
    });
    let deadline = Instant::now() + within;
    let mut ok = Vec::new();
    for (r, c) in ranks.iter_mut().enumerate() {
        let status = loop {
            if let Some(s) = c.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                for c in &mut ranks {
                    c.kill().ok();
                }
                panic!("rank {r} hangs");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        ok.push(status.success());
    }
    Ended {
        ok,
        stderr: readers.into_iter().map(|t| t.join().unwrap()).collect(),
        stdout: stdout.join().unwrap(),
    }
}

/// Sizes 0, 1, odd, not a multiple of the segment, and large; rotating roots.
const SIZES: &str = "0,1,4097,100003,1M";

fn verified(e: &Ended, what: &str) -> serde_json::Value {
    for (r, ok) in e.ok.iter().enumerate() {
        assert!(ok, "{what}: rank {r} failed:\n{}", e.stderr[r]);
    }
    let json: serde_json::Value = serde_json::from_str(&e.stdout).expect("rank 0's JSON");
    let rows = json["results"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        assert_eq!(row["verified"], true, "{what}: {row}");
    }
    json
}

/// 48 ranks, all but rank 0 under `ulimit -n 52`: a full mesh needs 48 + 9 descriptors at
/// such a rank; connections only on tree edges fit, with linear and binary trees from
/// several roots, every byte verified at every rank. Rank 0 gets more: it also holds the
/// standalone rendezvous's connections. (`auto` picks among the trees the model prices; a
/// flat tree's root talks to every rank at once, and a limit too low for that fails, as the
/// next test shows.)
#[test]
fn forty_eight_ranks_fit_under_a_limit_a_mesh_exceeds() {
    let n = 48;
    let args = [
        "--sizes",
        SIZES,
        "--tree",
        "linear,binary,auto",
        "--segment",
        "16K",
        "--iters",
        "3",
        "--warmup",
        "0",
    ];
    let limit = |r: usize| if r == 0 { 1024 } else { 52 };
    let e = job(n, limit, &args, &[], Duration::from_secs(300));
    let json = verified(&e, "48 ranks under ulimit -n 52");
    let rest = json["fds"]["peak_rest"].as_u64().unwrap();
    assert!(rest <= 52, "{}", json["fds"]);
}

/// A flat tree's root talks to every rank at once: under a limit that the job's setup fits
/// in but the root's connections do not, every rank fails (no hang), and the root's error
/// names the limit and the fix.
#[test]
fn a_limit_too_low_for_the_tree_fails_at_every_rank_and_is_named() {
    let n = 12;
    let args = [
        "--sizes",
        "4097",
        "--tree",
        "flat",
        "--root",
        "0",
        "--iters",
        "2",
        "--warmup",
        "0",
        "--timeout-ms",
        "2000",
    ];
    let e = job(n, |_| 26, &args, &[], Duration::from_secs(120));
    for (r, ok) in e.ok.iter().enumerate() {
        assert!(!ok, "rank {r} must fail: {}", e.stderr[r]);
        assert!(
            e.stderr[r].contains("pipecast:"),
            "rank {r}: {}",
            e.stderr[r]
        );
    }
    let root = &e.stderr[0];
    for want in [
        "out of file descriptors",
        "ulimit -n",
        "soft 26",
        "raise the limit",
    ] {
        assert!(root.contains(want), "{want}: {root}");
    }
}

/// `PIPECAST_MAX_CONNECTIONS=2`: binary and linear trees from every root make each rank
/// close idle connections and reopen them; every byte still arrives.
#[test]
fn a_cache_of_two_connections_stays_byte_exact() {
    let n = 8;
    let args = [
        "--sizes",
        SIZES,
        "--tree",
        "binary,linear",
        "--segment",
        "16K",
        "--iters",
        "8",
        "--warmup",
        "0",
    ];
    let env = [("PIPECAST_MAX_CONNECTIONS", "2")];
    let e = job(n, |_| 1024, &args, &env, Duration::from_secs(240));
    verified(&e, "a cache of two");
}

/// Streams others open to a rank are bounded too (`PIPECAST_MAX_CONNECTIONS=2`): with roots
/// rotating over every rank and several tree kinds, a rank is a child of many different
/// parents, and beyond the bound it closes the least recently used idle streams whoever
/// dialled them (a goodbye, answered by the peer's). Every byte verified at every rank, each
/// rank but 0 under `ulimit -n 64`. (With a stream each way, a rank between samples, with a
/// k-binomial root's children, accepted streams and closing ones, was seen to reach 32.)
#[test]
fn streams_others_open_stay_bounded_with_rotating_roots() {
    let n = 16;
    let args = [
        "--sizes",
        SIZES,
        "--tree",
        "binomial,binary,kbinomial,linear",
        "--segment",
        "16K",
        "--iters",
        "16",
        "--warmup",
        "0",
    ];
    let env = [("PIPECAST_MAX_CONNECTIONS", "2")];
    let limit = |r: usize| if r == 0 { 1024 } else { 64 };
    let e = job(n, limit, &args, &env, Duration::from_secs(300));
    let json = verified(&e, "16 ranks, a bound of 2, rotating roots");
    let rest = json["fds"]["peak_rest"].as_u64().unwrap();
    assert!(rest <= 64, "{}", json["fds"]);
}

/// The default bound of 16 keeps one host's fan-out over sockets up to 17 ranks, capped at
/// `plan::two_level::SOCKET_FAN_OUT` (11) streams from the leader: with 13 and 17 ranks the
/// last ranks are fed one hop further, by the leader's first children. Roots rotating over
/// every rank (so every rank leads once), pipelined and two-lane trees, every byte verified
/// at every rank.
#[test]
fn a_capped_fan_out_over_sockets_stays_byte_exact() {
    for n in [13, 17] {
        let iters = n.to_string();
        let args = [
            "--sizes",
            SIZES,
            "--tree",
            "linear,multilane,auto",
            "--segment",
            "16K",
            "--iters",
            &iters,
            "--warmup",
            "0",
        ];
        let e = job(n, |_| 1024, &args, &[], Duration::from_secs(300));
        verified(&e, &format!("{n} ranks, a capped fan-out"));
    }
}
