//! Multicast broadcasts through the communicator under every fault at once (issue 32), the
//! small version of `bench/mcast_soak.sh`'s soak: a lab of 4 machines behind 2 switches
//! (`pipecast lab up`), 1 % loss, 1 % duplicates and 1 % reordering of the UDP frames on every
//! link (`bench/mcast_impair.sh`: nftables and a classic-BPF-picked HTB class under each
//! link's tbf, as this kernel has no netem), and a foreign sender on the job's group
//! (`bench/mcast_flood.py` on the last machine: junk, another job's frames, spoofed and
//! replayed frames of this job). `pipecast bench --tree multicast` runs 100 broadcasts (sizes
//! 0, 1, 1409, 100 003 and 1 MiB, rotating roots) and checks every byte at every rank; every
//! broadcast must end (a progress timeout of 5 s, the run's own deadline 300 s), and the ranks
//! must have dropped the flood's frames (counted).
//!
//! Needs root, nft and python3; without them it says "skipped" (and fails under
//! `PIPECAST_REQUIRE`).

mod common;
mod lab;

use common::requirements::{root, tool};
use lab::{require_lab, text, Lab, EXE};
use std::process::{Command, Stdio};
use std::time::Instant;

const TOPOLOGY: &str = r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
 "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s0"},
              {"name": "h2", "switch": "s1"}, {"name": "h3", "switch": "s1"}]}"#;

/// Kills the flood when dropped (also when the test fails).
struct Flood(std::process::Child);

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

#[test]
fn multicast_is_byte_exact_under_loss_duplicates_reordering_and_a_foreign_flood() {
    require_lab!(
        root(),
        tool("nftables", "nft", &["--version"]),
        tool("python3", "python3", &["--version"])
    );
    let bench_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/bench");
    let lab = Lab::up("mcq", TOPOLOGY, &["--lldp-wait", "0"]);
    let impair = Command::new("sh")
        .arg(format!("{bench_dir}/mcast_impair.sh"))
        .args([lab.name(), "1", "1", "1"])
        .output()
        .unwrap();
    assert!(impair.status.success(), "impair: {}", text(&impair));
    let flood_log = lab.dir().join("flood.err");
    let flood = Flood(
        Command::new("ip")
            .args(["netns", "exec", &format!("{}-h3", lab.name()), "python3"])
            .arg(format!("{bench_dir}/mcast_flood.py"))
            .args(["--iface", "eth0", "--pps", "1000", "--seconds", "600"])
            .stderr(std::fs::File::create(&flood_log).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let topology = lab.topology_file();
    let start = Instant::now();
    let out = Command::new(EXE)
        .args(["lab", "run", "--name", lab.name(), "--timeout", "300", "--"])
        .args([EXE, "bench", "--json", "--topology"])
        .arg(&topology)
        .args([
            "--tree",
            "multicast",
            "--sizes",
            "0,1,1409,100003,1M",
            "--iters",
            "20",
            "--timeout-ms",
            "5000",
        ])
        .output()
        .unwrap();
    let took = start.elapsed();
    drop(flood);
    let flooded = std::fs::read_to_string(&flood_log).unwrap_or_default();
    assert!(
        out.status.success(),
        "bench failed after {took:?}: {}\nflood: {flooded}",
        text(&out)
    );
    let report = lab::rank0_json(&out);
    let rows = report["results"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "{report}");
    let mut counters = std::collections::BTreeMap::<String, u64>::new();
    for row in rows {
        assert_eq!(row["verified"], true, "{row}");
        assert_eq!(row["ran"], "multicast", "{row}");
        for (k, v) in row["transport_counters"].as_object().unwrap() {
            *counters.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
        }
    }
    let dropped = |k: &str| counters.get(k).copied().unwrap_or(0);
    assert!(
        flooded.contains("flood: group"),
        "the flood never saw the group: {flooded}"
    );
    assert!(
        dropped("mcast_drop_spoofed") > 0 && dropped("mcast_drop_foreign") > 0,
        "the flood's frames were not dropped as spoofed and foreign: {counters:?}\n{flooded}"
    );
    eprintln!("100 broadcasts in {took:?}, byte-exact; {counters:?}; {flooded}");
}
