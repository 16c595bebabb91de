//! The verbs transport where no RDMA device exists (these machines; issue 17): `verbs` fails
//! at every rank with an error that names the problem, and `auto` falls back to TCP with
//! every byte correct. Built with `--features verbs` the error is libibverbs' "no device";
//! without it, the missing feature. (On a host with a device, `verbs` runs instead, and the
//! test checks its bytes.)

mod common;
use common::text;
use std::process::{Command, Output};

use common::EXE;

fn bench(transport: &str, ranks: &str) -> Output {
    Command::new(EXE)
        .args([
            "bench",
            "--local",
            ranks,
            "--transport",
            transport,
            "--sizes",
            "0,1,1001,70001",
            "--iters",
            "1",
            "--tree",
            "binary",
            "--json",
        ])
        // Ranks of one host would otherwise use shared memory, not the network link.
        .env("PIPECAST_SHM", "off")
        .env("PIPECAST_LOG", "info")
        .env("PIPECAST_TIMEOUT_MS", "10000")
        .output()
        .expect("runs pipecast")
}

/// Every row of a bench report verified at every rank.
fn all_verified(out: &Output) -> serde_json::Value {
    let report: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim())
            .unwrap_or_else(|e| panic!("{e}: {}", text(out)));
    let rows = report["results"].as_array().expect("results");
    assert_eq!(rows.len(), 4, "{report}");
    assert!(rows.iter().all(|r| r["verified"] == true), "{report}");
    report
}

#[test]
fn verbs_without_a_device_fails_at_every_rank_naming_the_problem() {
    let out = bench("verbs", "3");
    if out.status.success() {
        eprintln!("an RDMA device is usable here: checking the verbs run instead");
        let report = all_verified(&out);
        assert!(
            report["transport"].as_str().unwrap().starts_with("verbs:"),
            "{report}"
        );
        return;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let why = if cfg!(feature = "verbs") {
        "no RDMA device: ibv_get_device_list returned none"
    } else {
        "this pipecast was built without RDMA verbs"
    };
    for rank in 0..3 {
        assert!(
            err.contains(&format!("rank {rank}: transport verbs: {why}")),
            "{}",
            text(&out)
        );
    }
    assert!(
        err.contains("PIPECAST_TRANSPORT=tcp or auto"),
        "{}",
        text(&out)
    );
}

#[test]
fn auto_without_a_device_falls_back_to_tcp_byte_exact_and_says_why() {
    let out = bench("auto", "3");
    assert!(out.status.success(), "{}", text(&out));
    let report = all_verified(&out);
    let transport = report["transport"].as_str().unwrap();
    if transport.starts_with("verbs:") {
        eprintln!("an RDMA device is usable here: auto picked {transport}");
        return;
    }
    assert_eq!(transport, "tcp", "{report}");
    let err = String::from_utf8_lossy(&out.stderr);
    let why = if cfg!(feature = "verbs") {
        "transport auto: not verbs: no RDMA device: ibv_get_device_list returned none"
    } else {
        "transport auto: not verbs: this pipecast was built without RDMA verbs"
    };
    assert!(err.contains(why), "{}", text(&out));
}
