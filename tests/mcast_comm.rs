//! Multicast broadcasts through the communicator, end to end (issue 32): `pipecast bench
//! --tree multicast` in a lab built by `pipecast lab up` (hosts in network namespaces joined
//! by bridges), every byte checked at every rank (bench's seeded pattern), over sizes 0, 1,
//! odd, not a multiple of the segment and large, from every root (bench rotates them):
//!
//! - with the bridges' IGMP snooping off (they flood) and on with a querier, as this user and
//!   as `nobody` (UDP multicast needs no privilege);
//! - with ranks sharing hosts (2, 1 and 3 on the machines), every rank a root;
//! - with 1 % of the UDP frames dropped at the switch (nftables: this kernel has no netem);
//! - a rank whose host drops the group (an nftables rule) makes every rank use the trees,
//!   and every rank says why at `PIPECAST_LOG=info`, naming it;
//! - a killed rank ends the broadcast with an error at every survivor, well within the
//!   lab's own timeout (no hang);
//! - a rank 6 s late is waited for (ranks as threads, each in a lab namespace);
//! - over raw Ethernet frames to the group MAC (`PIPECAST_MULTICAST=ether`): byte-exact with
//!   snooping off, with snooping and a querier, and with 1 % of its frames dropped; as a user
//!   whose ranks cannot open a raw socket, and with ranks sharing a host (one MAC), every
//!   rank uses the trees and says why.
//!
//! Needs what `pipecast lab up` needs (root or user namespaces); the tests that add
//! nftables rules or enter namespaces need root and `nft`. Without them each test says
//! "skipped" (and fails under `PIPECAST_REQUIRE`).

mod common;
mod lab;

use common::requirements::{root, tool};
use lab::{as_each_user, require_lab, text, Lab, EXE};
use std::process::Command;
use std::time::{Duration, Instant};

/// Two switches, two machines behind each (group frames cross the switch link).
const TOPOLOGY: &str = r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
 "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s0"},
              {"name": "h2", "switch": "s1"}, {"name": "h3", "switch": "s1"}]}"#;

const SIZES: &str = "0,1,1409,100003,1M";
const SIZE_LIST: [u64; 5] = [0, 1, 1409, 100_003, 1 << 20];

/// `pipecast bench --json --topology T ARGS` on every machine, with `env`; its output.
fn bench_out(lab: &Lab, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let topology = lab.topology_file();
    let mut cmd = lab.user().command(EXE);
    cmd.args(["lab", "run", "--name", lab.name(), "--timeout", "120", "--"])
        .args([
            EXE,
            "bench",
            "--json",
            "--topology",
            topology.to_str().unwrap(),
        ])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("runs pipecast lab run")
}

fn bench(lab: &Lab, env: &[(&str, &str)], args: &[&str]) -> serde_json::Value {
    let out = bench_out(lab, env, args);
    assert!(out.status.success(), "bench failed: {}", text(&out));
    lab::rank0_json(&out)
}

/// Every size × tree row present and verified; `ran` is what the row of `tree` ran.
fn check(report: &serde_json::Value, sizes: &[u64], tree: &str, ran: impl Fn(&str) -> bool) {
    let rows = report["results"].as_array().unwrap();
    for &bytes in sizes {
        let row = rows
            .iter()
            .find(|r| r["bytes"] == bytes && r["tree"] == tree)
            .unwrap_or_else(|| panic!("no row {bytes} B {tree}: {report}"));
        assert_eq!(row["verified"], true, "{bytes} B {tree}: {row}");
        let r = row["ran"].as_str().unwrap();
        assert!(ran(r), "{bytes} B {tree} ran {r}: {row}");
    }
}

#[test]
fn multicast_is_byte_exact_with_snooping_off_and_on_as_each_user() {
    require_lab!();
    as_each_user(|user| {
        for snooping in [false, true] {
            let extra: &[&str] = if snooping {
                &["--lldp-wait", "0", "--igmp-snooping"]
            } else {
                &["--lldp-wait", "0"]
            };
            let lab = Lab::up_as(user, "mcb", TOPOLOGY, extra);
            if snooping {
                // The querier forwards the group only to ports that joined once it has
                // waited its response interval (the lab sets 1 s).
                std::thread::sleep(Duration::from_millis(1500));
            }
            let report = bench(
                &lab,
                &[],
                &[
                    "--tree",
                    "multicast,auto,linear",
                    "--sizes",
                    SIZES,
                    "--iters",
                    "4",
                ],
            );
            let what = format!("{user:?}, snooping {snooping}");
            check(&report, &SIZE_LIST, "multicast", |r| r == "multicast");
            check(&report, &SIZE_LIST, "linear", |r| r == "linear");
            check(&report, &SIZE_LIST, "auto", |_| true);
            eprintln!("{what}: ok");
        }
    });
}

/// Ranks that share a host: the host's other ranks hear its root through the kernel's loop
/// (`IP_MULTICAST_LOOP`), and a rank drops its own looped-back frames.
#[test]
fn multicast_reaches_ranks_that_share_a_host() {
    require_lab!();
    const SHARED: &str = r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
     "machines": [{"name": "h0", "switch": "s0", "ranks": 2}, {"name": "h1", "switch": "s0"},
                  {"name": "h2", "switch": "s1", "ranks": 3}]}"#;
    let lab = Lab::up("mcs", SHARED, &["--lldp-wait", "0"]);
    // Six iterations: every rank is a root once.
    let report = bench(
        &lab,
        &[],
        &["--tree", "multicast", "--sizes", SIZES, "--iters", "6"],
    );
    assert_eq!(report["ranks"], 6, "{report}");
    check(&report, &SIZE_LIST, "multicast", |r| r == "multicast");
}

/// Runs `nft -f` with `rules` in namespace `ns`.
fn nft(ns: &str, rules: &str) {
    common::netns::nft(ns, rules);
}

#[test]
fn multicast_is_byte_exact_with_one_percent_loss() {
    require_lab!(root(), tool("nftables", "nft", &["--version"]));
    let lab = Lab::up("mcl", TOPOLOGY, &["--lldp-wait", "0"]);
    // 1 % of the UDP frames each switch forwards dropped (per outgoing port: each receiver
    // loses its own, and a loss on the switch link a whole side's).
    for sw in ["s0", "s1"] {
        nft(
            &format!("{}-{sw}", lab.name()),
            "table bridge pcmloss {\n chain lossy {\n  type filter hook forward priority 0; \
             policy accept;\n  meta l4proto udp numgen random mod 100 < 1 counter drop\n }\n}\n",
        );
    }
    let report = bench(
        &lab,
        &[],
        &["--tree", "multicast", "--sizes", SIZES, "--iters", "4"],
    );
    check(&report, &SIZE_LIST, "multicast", |r| r == "multicast");
}

#[test]
fn a_rank_that_cannot_receive_the_group_makes_every_rank_use_the_trees() {
    require_lab!(root(), tool("nftables", "nft", &["--version"]));
    let lab = Lab::up("mcn", TOPOLOGY, &["--lldp-wait", "0"]);
    // Host h2 drops every datagram to the organization-local multicast scope.
    nft(
        &format!("{}-h2", lab.name()),
        "table ip pcmblock {\n chain input {\n  type filter hook input priority 0; \
         policy accept;\n  ip daddr 239.192.0.0/14 counter drop\n }\n}\n",
    );
    let out = bench_out(
        &lab,
        &[("PIPECAST_LOG", "info")],
        &[
            "--tree",
            "multicast",
            "--sizes",
            "1409,100003",
            "--iters",
            "4",
        ],
    );
    assert!(out.status.success(), "bench failed: {}", text(&out));
    let report = lab::rank0_json(&out);
    check(&report, &[1409, 100_003], "multicast", |r| r != "multicast");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for rank in 0..4 {
        let said = stderr.lines().any(|l| {
            l.starts_with(&format!("[r{rank}]"))
                && l.contains("multicast off")
                && l.contains("ranks [2] did not receive")
        });
        assert!(said, "rank {rank} did not say why: {}", text(&out));
    }
}

#[test]
fn a_killed_rank_fails_every_survivor_without_a_hang() {
    require_lab!(root());
    let lab = Lab::up("mck", TOPOLOGY, &["--lldp-wait", "0"]);
    let topology = lab.topology_file();
    let start = Instant::now();
    let child = Command::new(EXE)
        .args(["lab", "run", "--name", lab.name(), "--timeout", "300", "--"])
        .args([EXE, "bench", "--topology", topology.to_str().unwrap()])
        .args([
            "--tree",
            "multicast",
            "--sizes",
            "4M",
            "--iters",
            "200",
            "--timeout-ms",
            "3000",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Let the broadcasts run, then kill rank 3's process.
    std::thread::sleep(Duration::from_secs(6));
    let pids = common::netns::sh_out(&["ip", "netns", "pids", &format!("{}-h3", lab.name())]);
    let mut killed = 0;
    for pid in pids.split_whitespace() {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if exe.to_string_lossy().contains("pipecast") {
            let _ = Command::new("kill").args(["-9", pid]).status();
            killed += 1;
        }
    }
    assert!(killed > 0, "no pipecast process in h3: {pids}");
    let killed_at = start.elapsed();
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed() - killed_at;
    assert!(!out.status.success(), "the job went on: {}", text(&out));
    // Every survivor ended with an error of its own (not the lab's timeout).
    let stderr = String::from_utf8_lossy(&out.stderr);
    for rank in 0..3 {
        let failed = stderr
            .lines()
            .any(|l| l.starts_with(&format!("[r{rank}]")) && l.contains("pipecast:"));
        assert!(failed, "rank {rank} reported no error: {}", text(&out));
    }
    assert!(
        took < Duration::from_secs(120),
        "survivors took {took:?} after the kill: {}",
        text(&out)
    );
    eprintln!("survivors failed {took:?} after the kill");
}

#[test]
fn a_late_rank_is_waited_for() {
    require_lab!(root());
    let lab = Lab::up("mcw", TOPOLOGY, &["--lldp-wait", "0"]);
    let rendezvous = format!("198.18.0.1:{}", common::free_port());
    let threads: Vec<_> = (0..4)
        .map(|rank| {
            let ns = format!("{}-h{rank}", lab.name());
            let rendezvous = rendezvous.clone();
            std::thread::spawn(move || {
                pipecast::transport::raweth::socket::RawSocket::enter_netns(&ns).unwrap();
                let config = pipecast::comm::Config {
                    ip: Some(format!("198.18.0.{}", rank + 1)),
                    machine: Some(format!("h{rank}")),
                    multicast: pipecast::comm::MulticastMode::Auto,
                    algorithm: "multicast".parse().unwrap(),
                    timeout: Duration::from_secs(2),
                    ..Default::default()
                };
                let boot = pipecast::comm::TcpRendezvous::new(
                    rank,
                    4,
                    &rendezvous,
                    Duration::from_secs(30),
                )
                .unwrap();
                let mut comm = pipecast::comm::Comm::new(rank, 4, Box::new(boot), config).unwrap();
                let mut results = Vec::new();
                for (i, msize) in [100_003usize, 1 << 20].into_iter().enumerate() {
                    let root = i % 4;
                    let want = common::pattern(msize, root + msize);
                    let mut buf = if rank == root {
                        want.clone()
                    } else {
                        vec![0; msize]
                    };
                    if rank == 3 {
                        // Longer than the liveness timeout (2 s) and the root's syncs.
                        std::thread::sleep(Duration::from_secs(6));
                    }
                    let info = comm
                        .bcast_with(&mut buf, root, &"multicast".parse().unwrap(), None)
                        .unwrap();
                    assert_eq!(info.tree.to_string(), "multicast");
                    results.push(buf == want);
                }
                results
            })
        })
        .collect();
    for (rank, t) in threads.into_iter().enumerate() {
        let ok = t.join().unwrap();
        assert!(ok.iter().all(|&b| b), "rank {rank}: {ok:?}");
    }
}

/// `pipecast bench` with `PIPECAST_MULTICAST=ether`: every rank said at `PIPECAST_LOG=info`
/// that multicast is off and why (`why`), and every byte of the trees was right.
fn ether_falls_back(lab: &Lab, ranks: usize, why: &str) {
    let out = bench_out(
        lab,
        &[("PIPECAST_MULTICAST", "ether"), ("PIPECAST_LOG", "info")],
        &["--tree", "multicast", "--sizes", SIZES, "--iters", "4"],
    );
    assert!(out.status.success(), "bench failed: {}", text(&out));
    let report = lab::rank0_json(&out);
    check(&report, &SIZE_LIST, "multicast", |r| r != "multicast");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for rank in 0..ranks {
        let said = stderr.lines().any(|l| {
            l.starts_with(&format!("[r{rank}]")) && l.contains("multicast off") && l.contains(why)
        });
        assert!(said, "rank {rank} did not say {why:?}: {}", text(&out));
    }
}

/// A given profile (as the Open MPI component gives one) decides the plans, and the root
/// still paces by the link rate the ranks agree on: unpaced, it stalled on its socket and ran
/// late (docs/multicast.md, "A late root").
#[test]
fn with_a_given_profile_the_root_still_paces_and_every_byte_arrives() {
    require_lab!();
    let lab = Lab::up("mcg", TOPOLOGY, &["--lldp-wait", "0"]);
    let out = bench_out(
        &lab,
        &[("PIPECAST_PROFILE", "100mbit"), ("PIPECAST_LOG", "info")],
        &["--tree", "multicast", "--sizes", SIZES, "--iters", "3"],
    );
    assert!(out.status.success(), "bench failed: {}", text(&out));
    check(&lab::rank0_json(&out), &SIZE_LIST, "multicast", |r| {
        r == "multicast"
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("multicast broadcasts over"))
        .unwrap_or_else(|| panic!("no multicast setup line: {}", text(&out)));
    assert!(line.contains(", paced at "), "{line}");
}

/// Raw Ethernet frames to the job's group MAC: flooded by the bridges with snooping off and
/// on (snooping filters IP multicast only), repaired after 1 % loss at the switches; where a
/// rank cannot open a raw socket (no CAP_NET_RAW), every rank uses the trees.
#[test]
fn raw_ethernet_multicast_is_byte_exact_or_every_rank_uses_the_trees() {
    require_lab!();
    as_each_user(|user| {
        let lab = Lab::up_as(user, "mce", TOPOLOGY, &["--lldp-wait", "0"]);
        let out = bench_out(
            &lab,
            &[("PIPECAST_MULTICAST", "ether"), ("PIPECAST_LOG", "info")],
            &[
                "--tree",
                "multicast,linear",
                "--sizes",
                SIZES,
                "--iters",
                "4",
            ],
        );
        assert!(out.status.success(), "bench failed: {}", text(&out));
        let report = lab::rank0_json(&out);
        check(&report, &SIZE_LIST, "linear", |r| r == "linear");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let carried = stderr.contains("multicast broadcasts over ether:");
        if !carried {
            // Only where the ranks have no raw sockets, and then every rank says so.
            assert_eq!(user, lab::User::Nobody, "{}", text(&out));
            ether_falls_back(&lab, 4, "could not open the raw Ethernet multicast carrier");
            eprintln!("{user:?}: no raw sockets, every rank used the trees");
            return;
        }
        check(&report, &SIZE_LIST, "multicast", |r| r == "multicast");
        eprintln!("{user:?}: raw Ethernet multicast ok");
    });
    if let Some(m) = root() {
        common::requirements::skip_or_fail(m.kind, format!("snooping and loss: {}", m.reason));
        return;
    }
    // Snooping with a querier: the group MAC is not an IP group, so the bridges flood it.
    let lab = Lab::up("mcq", TOPOLOGY, &["--lldp-wait", "0", "--igmp-snooping"]);
    std::thread::sleep(Duration::from_millis(1500));
    let ether = [("PIPECAST_MULTICAST", "ether")];
    let args = ["--tree", "multicast", "--sizes", SIZES, "--iters", "4"];
    check(&bench(&lab, &ether, &args), &SIZE_LIST, "multicast", |r| {
        r == "multicast"
    });
    drop(lab);
    if let Some(m) = tool("nftables", "nft", &["--version"]) {
        common::requirements::skip_or_fail(m.kind, format!("1 % loss: {}", m.reason));
        return;
    }
    let lab = Lab::up("mcx", TOPOLOGY, &["--lldp-wait", "0"]);
    for sw in ["s0", "s1"] {
        nft(
            &format!("{}-{sw}", lab.name()),
            "table bridge pcmloss {\n chain lossy {\n  type filter hook forward priority 0; \
             policy accept;\n  ether type 0x88b6 numgen random mod 100 < 1 counter drop\n }\n}\n",
        );
    }
    check(&bench(&lab, &ether, &args), &SIZE_LIST, "multicast", |r| {
        r == "multicast"
    });
}

/// Ranks sharing a host share its MAC: the raw Ethernet carrier cannot tell them apart, so
/// every rank uses the trees and names them.
#[test]
fn raw_ethernet_multicast_with_ranks_sharing_a_host_uses_the_trees() {
    require_lab!(root());
    const SHARED: &str = r#"{"switches": ["s0"], "links": [],
     "machines": [{"name": "h0", "switch": "s0", "ranks": 2}, {"name": "h1", "switch": "s0"}]}"#;
    let lab = Lab::up("mcm", SHARED, &["--lldp-wait", "0"]);
    ether_falls_back(&lab, 3, "share the MAC");
}
