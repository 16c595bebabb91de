//! What the MPI tests on this host share (tests/ompi.rs, ompi_faults.rs, ompi5.rs): one job at
//! a time, how pipecast is loaded into a job (the glue), the options of a one-host `mpirun`,
//! the C test programs built, and what a job's output must show.

// Each test binary compiles this module on its own and uses a part of it.
#![allow(dead_code)]

use super::{carried, text};
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Held while a test runs its MPI jobs: they run one at a time (the machine has 2 cores).
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The ways pipecast runs under an MPI.
#[derive(Clone, Copy, Debug)]
pub enum Glue {
    /// The Open MPI coll component.
    Component,
    /// The preload shim under Open MPI.
    Shim,
    /// The preload shim under MPICH.
    Mpich,
}

impl Glue {
    /// What starts the lines of its verbose summary (what [`carried`] counts).
    pub fn marker(self) -> &'static str {
        match self {
            Glue::Component => "coll:pipecast",
            Glue::Shim | Glue::Mpich => "pipecast-preload",
        }
    }

    /// Options that load this glue from `dir` into one app context (verbose: its summary
    /// shows what it carried).
    pub fn args(self, dir: &Path) -> Vec<String> {
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
            Glue::Mpich => vec![
                "-env".into(),
                "LD_PRELOAD".into(),
                dir.join("libpipecast_preload_mpich.so")
                    .display()
                    .to_string(),
                "-env".into(),
                "PIPECAST_VERBOSE".into(),
                "1".into(),
            ],
        }
    }

    /// `VAR=VALUE` for one app context.
    pub fn env(self, var: &str) -> Vec<String> {
        let (name, value) = var.split_once('=').expect("VAR=VALUE");
        match self {
            Glue::Component | Glue::Shim => vec!["-x".into(), var.into()],
            Glue::Mpich => vec!["-env".into(), name.into(), value.into()],
        }
    }
}

/// Open MPI's `mpirun` options for a job of this host: more ranks than CPUs, root allowed
/// when we are root (mpirun refuses it without the flag), the TCP BTL over loopback.
pub fn one_host(cmd: &mut Command) {
    cmd.arg("--oversubscribe");
    if pipecast::lab::is_root() {
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
}

/// Runs the job `cmd` to its end: its output and how long it took.
pub fn timed(cmd: &mut Command) -> (Output, Duration) {
    let t0 = Instant::now();
    let out = cmd.output().expect("run mpirun");
    (out, t0.elapsed())
}

/// ffi/ (component and shims) and tests/c/mpi_bcast_test.c built for Open MPI into a fresh
/// artifact directory `name`; `None` (skipped, said why, or failed under `PIPECAST_REQUIRE`)
/// without Open MPI.
pub fn build_for_open_mpi(name: &str) -> Option<PathBuf> {
    if let Some(missing) = super::requirements::openmpi() {
        missing.skip();
        return None;
    }
    let out = super::artifact_dir(name);
    super::build_ffi_and_mpi_test(&out, &[]);
    Some(out)
}

/// `mpicc` (or `mpicc.mpich`) of `tests/c/<name>.c` with `flags` into `program`.
pub fn compile(mpicc: &str, name: &str, program: &Path, flags: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cc = Command::new(mpicc)
        .args(["-O1", "-Wall", "-Werror"])
        .args(flags)
        .arg("-o")
        .arg(program)
        .arg(root.join(format!("tests/c/{name}.c")))
        .status()
        .unwrap_or_else(|e| panic!("run {mpicc}: {e}"));
    assert!(cc.success(), "{name}.c does not compile with {mpicc}");
}

/// The job ended well and printed `ok` (its program's check of every byte at every rank), no
/// rank said WRONG and no pipecast broadcast failed. Returns the job's whole output; `what`
/// names the run in messages.
pub fn assert_byte_exact(out: &Output, ok: &str, what: impl Debug) -> String {
    let all = text(out);
    assert!(out.status.success() && all.contains(ok), "{what:?}: {all}");
    assert!(
        !all.contains("WRONG") && !all.contains("broadcast failed"),
        "{what:?}: {all}"
    );
    all
}

/// Every rank declined pipecast together (`mpi_fault_test` with one rank set apart): the MPI's
/// own broadcast carried everything byte-exact, `reason` is logged, pipecast carried nothing
/// (the summaries of `marker`), and the job ended in seconds.
pub fn assert_declined_together(
    out: &Output,
    took: Duration,
    marker: &str,
    reason: &str,
    what: impl Debug,
) {
    let all = assert_byte_exact(out, "mpi_fault_test: ok", &what);
    assert!(
        all.contains(reason),
        "{what:?}: the reason is logged: {all}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(carried(&stderr, marker), 0, "{what:?}: {all}");
    assert!(took < Duration::from_secs(60), "{what:?} took {took:?}");
}

/// A rank was killed mid-broadcast: the job ended in error, by itself (not by `timeout`: a
/// hang) and within a minute, and no rank saw wrong data.
pub fn assert_ended_without_wrong_data(out: &Output, took: Duration, what: impl Debug) {
    let all = text(out);
    assert!(
        !out.status.success(),
        "{what:?}: the job must end in error: {all}"
    );
    assert_ne!(out.status.code(), Some(124), "{what:?}: mpirun hung: {all}");
    assert!(!all.contains("WRONG DATA"), "{what:?}: {all}");
    assert!(
        took < Duration::from_secs(60),
        "{what:?} took {took:?}: {all}"
    );
}

/// `tests/c/mpi_views_test.c` ended byte-exact, pipecast carried every broadcast its ranks
/// expected (the summaries of `marker`), and no rank's pipecast threads (at most 2) or
/// descriptors grew with its communicators.
pub fn assert_views(out: &Output, marker: &str) {
    let all = assert_byte_exact(out, "mpi_views_test: ok", marker);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reports: Vec<Vec<i64>> = stderr
        .lines()
        .filter_map(|l| l.split_once("mpi_views_test: rank "))
        .map(|(_, rest)| {
            rest.split(|c: char| !c.is_ascii_digit() && c != '-')
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .collect();
    assert_eq!(reports.len(), 4, "{marker}: one report per rank:\n{all}");
    let mut expected = 0;
    for r in &reports {
        // rank, expects, threads before, after, descriptors before, after, communicators
        let [_, expects, t0, t1, f0, f1, _] = r[..] else {
            panic!("{marker}: unreadable report {r:?}:\n{all}")
        };
        expected += expects as u64;
        // The engine's thread may not have named itself yet at the first count.
        assert!(
            (1..=2).contains(&t1) && t0 <= t1,
            "{marker}: pipecast threads {t0} then {t1}:\n{all}"
        );
        // The MPI's own may open a few; pipecast's would be 2 or more per communicator. Its
        // shared memory sets a pair up on first use (after the first count): one stream per
        // peer of the host and its own staging ring, at most as many as ranks, once.
        let ranks = reports.len() as i64;
        assert!(
            f1 <= f0 + 4 + ranks,
            "{marker}: descriptors {f0} then {f1}:\n{all}"
        );
    }
    // A summary torn by another rank's output (Open MPI's forwarding does not keep lines
    // whole) loses its count: at most 4 broadcasts (3 ibcasts and a blocking one) per
    // communicator.
    let torn = stderr
        .lines()
        .filter(|l| l.matches(marker).count() > 1)
        .count() as u64;
    let n = carried(&stderr, marker);
    assert!(
        n <= expected && n + 4 * torn >= expected,
        "{marker}: pipecast carried {n} of {expected} ({torn} torn summaries):\n{all}"
    );
}
