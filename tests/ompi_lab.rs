//! The Open MPI component across hosts: a 4-machine lab (network namespaces, two switches,
//! `pipecast lab`), one MPI rank per machine through `pipecast lab mpirun`, the component
//! carrying `tests/c/mpi_bcast_test.c`'s broadcasts (every root, WORLD/dup/split, byte-exact)
//! between the namespaces. Before multi-host addressing a rank listened on 127.0.0.1, which no
//! other namespace can reach, and every broadcast fell back; here the component's counters
//! must show pipecast carried them, no fallback, and the data NIC `eth0` (not the management
//! NIC `mgmt0`) must have carried the bytes. Needs the lab's tools and Open MPI; skips
//! otherwise (fails under `PIPECAST_REQUIRE`: tests/common/requirements.rs).

mod common;
mod lab;

use common::requirements::openmpi;
use lab::{pipecast, require_lab, text, Lab, EXE};
use std::path::Path;
use std::process::Command;

/// The component and the test program, built into a directory of this test's own.
fn build(out: &Path) {
    common::build_ffi_and_mpi_test(out, &["mca_coll_pipecast.so"]);
}

/// Bytes sent so far by `iface` of each machine.
fn tx_bytes(lab: &str, machines: &[&str], iface: &str) -> Vec<u64> {
    machines
        .iter()
        .map(|m| {
            let path = format!("/sys/class/net/{iface}/statistics/tx_bytes");
            let out = pipecast(&["lab", "exec", "--name", lab, m, "--", "cat", &path]);
            assert!(out.status.success(), "{}", text(&out));
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        })
        .collect()
}

#[test]
fn component_carries_broadcasts_between_lab_hosts() {
    require_lab!(openmpi());
    let lab = Lab::up(
        "om",
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s1"},
                         {"name": "h2", "switch": "s0"}, {"name": "h3", "switch": "s1"}]}"#,
        &["--rate", "1gbit", "--lldp-wait", "0"],
    );
    let (name, dir, topology) = (lab.name(), lab.dir(), lab.topology_file());
    build(dir);
    let machines = ["h0", "h1", "h2", "h3"];
    let (eth0, mgmt0) = (
        tx_bytes(name, &machines, "eth0"),
        tx_bytes(name, &machines, "mgmt0"),
    );
    let component_path = format!("SYS_DEFAULT:{}", dir.display());
    let program = dir.join("mpi_bcast_test");
    // No coll_pipecast_if_include: the default must pick eth0 and avoid mgmt0. The topology
    // file maps rank r to machine r (the ranks share one host name and are told apart by
    // address, so the file's machine names do not match them).
    let out = Command::new("timeout")
        .args(["240", EXE, "lab", "mpirun", "--name", name, "--"])
        .args(["--mca", "mca_base_component_path", &component_path])
        .args(["--mca", "coll_pipecast_verbose", "1"])
        .args(["--mca", "coll_pipecast_timeout_ms", "20000"])
        .args(["--mca", "coll_pipecast_topology"])
        .arg(&topology)
        .arg(&program)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("mpi_bcast_test: ok"),
        "{}",
        text(&out)
    );
    assert!(
        !stderr.contains("falling back"),
        "a pipecast broadcast failed: {}",
        text(&out)
    );
    // WORLD, dup and split each carry the large contiguous broadcasts of every root.
    let n = common::carried(&stderr, "coll:pipecast");
    assert!(n >= 4 * 3 * 4, "pipecast carried only {n}: {}", text(&out));
    let sent = |before: &[u64], after: Vec<u64>| -> u64 {
        after.iter().zip(before).map(|(a, b)| a - b).sum()
    };
    let data = sent(&eth0, tx_bytes(name, &machines, "eth0"));
    let mgmt = sent(&mgmt0, tx_bytes(name, &machines, "mgmt0"));
    // Each rank receives at least 3 × 4 roots × 4 MiB (plus the smaller sizes) over eth0.
    assert!(
        data > 3 * 4 * 3 * (4 << 20),
        "eth0 sent only {data} bytes (mgmt0 {mgmt})"
    );
    assert!(
        mgmt * 10 < data,
        "mgmt0 carried {mgmt} bytes against eth0's {data}: data went over the management NIC"
    );
    // Two ranks per host (`--map-by node`: rank r on machine r mod 4), so each host is a
    // host switch with two machines behind its NIC; through the file (PIPECAST_MACHINE names
    // the machine) and without it (hosts behind one switch).
    for with_file in [true, false] {
        let mut cmd = Command::new("timeout");
        cmd.args(["240", EXE, "lab", "mpirun", "--name", name, "--"])
            .args(["-np", "8", "--oversubscribe", "--map-by", "node"])
            .args(["--mca", "mca_base_component_path", &component_path])
            .args(["--mca", "coll_pipecast_verbose", "1"])
            .args(["--mca", "coll_pipecast_timeout_ms", "20000"]);
        if with_file {
            cmd.args(["--mca", "coll_pipecast_topology"]).arg(&topology);
        }
        let out = cmd.arg(&program).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains("mpi_bcast_test: ok"),
            "8 ranks on 4 hosts (file: {with_file}): {}",
            text(&out)
        );
        assert!(
            !stderr.contains("falling back"),
            "8 ranks on 4 hosts (file: {with_file}): {}",
            text(&out)
        );
        let n = common::carried(&stderr, "coll:pipecast");
        assert!(n >= 8 * 3 * 8, "pipecast carried only {n}: {}", text(&out));
    }
    drop(lab);
}
