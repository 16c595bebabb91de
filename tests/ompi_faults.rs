//! Faults under real `mpirun` with the Open MPI component and the `LD_PRELOAD` shim
//! (`tests/c/mpi_fault_test.c`, 4 ranks, every byte checked at every rank):
//! - a rank late by 20 s (four times the timeout) is waited for: every broadcast correct;
//! - one rank with a bad setting (an interface that does not exist, an unreadable topology
//!   file; an MPMD run): every rank declines pipecast together, the MPI's own broadcast
//!   carries everything byte-exact, and the job ends in seconds (it used to hang);
//! - a rank SIGKILLed in the middle of a broadcast: the job ends, and no rank reports a
//!   broadcast that returned with wrong data.

mod common;
use common::{carried, have};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// mpirun jobs of this file run one at a time: the machine has 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn build() -> Option<PathBuf> {
    if !have("mpicc", &["--version"]) || !have("pkg-config", &["--exists", "ompi-c"]) {
        eprintln!("SKIPPED: Open MPI development files not installed (apt-get install openmpi-bin libopenmpi-dev pkg-config)");
        return None;
    }
    let out = std::env::temp_dir().join(format!("pipecast-ompi-faults-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    common::build_ffi_and_mpi_test(&out, &[]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cc = Command::new("mpicc")
        .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(out.join("mpi_fault_test"))
        .arg(root.join("tests/c/mpi_fault_test.c"))
        .status()
        .expect("run mpicc");
    assert!(cc.success(), "mpi_fault_test.c does not compile");
    Some(out)
}

/// The two ways pipecast runs under Open MPI.
#[derive(Clone, Copy, Debug)]
enum Glue {
    Component,
    Shim,
}

impl Glue {
    fn marker(self) -> &'static str {
        match self {
            Glue::Component => "coll:pipecast",
            Glue::Shim => "pipecast-preload",
        }
    }

    /// mpirun options that load this glue (verbose: its summary shows what it carried).
    fn args(self, dir: &Path) -> Vec<String> {
        match self {
            Glue::Component => vec![
                "--mca".into(),
                "mca_base_component_path".into(),
                format!("SYS_DEFAULT:{}", dir.display()),
                "--mca".into(),
                "coll_pipecast_verbose".into(),
                "1".into(),
            ],
            Glue::Shim => vec![
                "-x".into(),
                format!(
                    "LD_PRELOAD={}",
                    dir.join("libpipecast_preload.so").display()
                ),
                "-x".into(),
                "PIPECAST_VERBOSE=1".into(),
            ],
        }
    }
}

/// `mpirun` of `contexts` (MPMD: each is `-np N [-x VAR=VALUE…] program mode`), within
/// `limit`; returns the output and how long it took.
fn mpirun(glue_args: &[String], contexts: &[Vec<String>], limit: u64) -> (Output, Duration) {
    let mut cmd = Command::new("timeout");
    cmd.args([limit.to_string().as_str(), "mpirun", "--oversubscribe"]);
    if is_root() {
        cmd.arg("--allow-run-as-root");
    }
    cmd.args([
        "--mca",
        "btl",
        "self,tcp",
        "--mca",
        "btl_tcp_if_include",
        "lo",
    ]);
    // `-x` binds to one app context of an MPMD line: give each context the glue's options.
    for (i, c) in contexts.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(glue_args);
        cmd.args(c);
    }
    cmd.env_remove("PIPECAST_TIMEOUT_MS");
    let t0 = Instant::now();
    let out = cmd.output().expect("run mpirun");
    (out, t0.elapsed())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn context(np: usize, env: &[&str], program: &Path, mode: &str) -> Vec<String> {
    let mut c = vec!["-np".to_string(), np.to_string()];
    for e in env {
        c.push("-x".into());
        c.push(e.to_string());
    }
    c.push(program.display().to_string());
    c.push(mode.into());
    c
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_rank_late_by_twenty_seconds_is_waited_for() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = build() else { return };
    let program = dir.join("mpi_fault_test");
    for glue in [Glue::Component, Glue::Shim] {
        let (out, _) = mpirun(
            &glue.args(&dir),
            &[context(4, &["PIPECAST_TEST_SLEEP=20"], &program, "late")],
            240,
        );
        let all = text(&out);
        assert!(
            out.status.success() && all.contains("mpi_fault_test: ok"),
            "{glue:?}: {all}"
        );
        assert!(
            !all.contains("WRONG DATA") && !all.contains("broadcast failed"),
            "{glue:?}: {all}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        // 8 broadcasts at each of 4 ranks, all large enough for pipecast.
        assert_eq!(carried(&stderr, glue.marker()), 32, "{glue:?}: {all}");
    }
}

/// MPMD: three ranks are fine, one has `env` (a bad setting). Every rank must decline
/// together: the MPI's own broadcast carries everything, byte-exact, in seconds.
fn one_bad_rank(env: &str, reason: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = build() else { return };
    let program = dir.join("mpi_fault_test");
    for glue in [Glue::Component, Glue::Shim] {
        let (out, took) = mpirun(
            &glue.args(&dir),
            &[
                context(3, &[], &program, "plain"),
                context(1, &[env], &program, "plain"),
            ],
            120,
        );
        let all = text(&out);
        assert!(
            out.status.success() && all.contains("mpi_fault_test: ok"),
            "{glue:?} with {env}: {all}"
        );
        assert!(!all.contains("WRONG DATA"), "{glue:?}: {all}");
        assert!(
            all.contains("declined at every rank") && all.contains(reason),
            "{glue:?}: the reason is logged once: {all}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(carried(&stderr, glue.marker()), 0, "{glue:?}: {all}");
        assert!(took < Duration::from_secs(60), "{glue:?} took {took:?}");
    }
}

#[test]
fn one_rank_naming_no_interface_makes_every_rank_decline_together() {
    one_bad_rank("PIPECAST_IFACE=nosuch0", "nosuch0");
}

#[test]
fn one_rank_unable_to_read_the_topology_makes_every_rank_decline_together() {
    one_bad_rank(
        "PIPECAST_TOPOLOGY=/nonexistent/pipecast-topology.json",
        "PIPECAST_TOPOLOGY",
    );
}

#[test]
fn a_rank_killed_mid_broadcast_ends_the_job_without_wrong_data() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = build() else { return };
    let program = dir.join("mpi_fault_test");
    for glue in [Glue::Component, Glue::Shim] {
        let (out, took) = mpirun(&glue.args(&dir), &[context(4, &[], &program, "kill")], 120);
        let all = text(&out);
        assert!(
            !out.status.success(),
            "{glue:?}: the job must end in error: {all}"
        );
        assert_ne!(out.status.code(), Some(124), "{glue:?}: mpirun hung: {all}");
        assert!(!all.contains("WRONG DATA"), "{glue:?}: {all}");
        assert!(
            took < Duration::from_secs(60),
            "{glue:?} took {took:?}: {all}"
        );
    }
}
