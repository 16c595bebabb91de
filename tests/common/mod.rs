//! Shared by the integration tests: what a test needs that a machine may lack
//! ([`requirements`], `PIPECAST_REQUIRE`), running the pipecast binary, the seeded pattern
//! broadcasts are checked against, and for the tests that link the library from C, the
//! cdylib and staticlib (`cargo test` builds only the rlib; built once per test binary).

pub mod mpi;
pub mod netns;
#[allow(dead_code)] // not every test binary runs ranks as threads or kills one
pub mod ranks;
pub mod requirements;
#[allow(unused_imports)] // not every test binary checks what it needs
pub(crate) use requirements::require;
#[allow(unused_imports)]
pub use requirements::{missing, skip_or_fail, Missing};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The pipecast binary under test.
#[allow(dead_code)] // not every test binary runs it
pub const EXE: &str = env!("CARGO_BIN_EXE_pipecast");

/// A loopback port free a moment ago (for a job's rendezvous).
#[allow(dead_code)] // not every test binary starts a job
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `pipecast ARGS` to completion.
#[allow(dead_code)] // not every test binary runs it
pub fn pipecast(args: &[&str]) -> std::process::Output {
    Command::new(EXE)
        .args(args)
        .output()
        .expect("the pipecast binary runs")
}

/// Runs `pipecast ARGS` under `timeout SECS` (exit status 124 when it ran out of time), for
/// commands that start outside programs that could hang, e.g. an MPI launcher.
#[allow(dead_code)] // used by the lab MPI tests only
pub fn pipecast_within(secs: u32, args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .arg(secs.to_string())
        .arg(EXE)
        .args(args)
        .output()
        .expect("timeout and the pipecast binary run")
}

/// Runs `pipecast ARGS`, which must succeed and print one JSON object on one line; returns it.
#[allow(dead_code)] // used by the CLI tests only
/// `pipecast bench --floor MODES` between the namespaces `netns` ("SEND,RECV"), 1 MiB twice:
/// its rows (one per mode).
pub fn floor_rows(modes: &str, netns: &str) -> Vec<serde_json::Value> {
    let rows = pipecast_json(&[
        "bench",
        "--floor",
        modes,
        "--floor-netns",
        netns,
        "--sizes",
        "1M",
        "--iters",
        "2",
        "--json",
    ]);
    rows.as_array().expect("one row per mode").clone()
}

pub fn pipecast_json(args: &[&str]) -> serde_json::Value {
    let out = pipecast(args);
    assert!(
        out.status.success(),
        "pipecast {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        1,
        "one JSON object on one line: {text}"
    );
    serde_json::from_str(&text).unwrap()
}

/// `len` bytes of the seeded pattern a broadcast test sends: the crate's own tests' pattern.
#[allow(unused_imports)] // used by the tests that broadcast in process only
pub use pipecast::testing::pattern;

/// A fresh directory for a test binary's built artifacts (shared libraries, MPI programs),
/// inside cargo's `target/tmp`: reused by the next run and gone with `cargo clean`, where a
/// directory per process in /tmp would leave hundreds of megabytes behind after every run.
#[allow(dead_code)] // not every test binary builds artifacts
pub fn artifact_dir(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test's artifact directory");
    dir
}

/// `target/<dir>` holding `libpipecast.so` and `libpipecast.a`, built with the test profile.
#[allow(dead_code)] // not every test binary links the library from C
pub fn built_lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // tests run from target/<dir>/deps/<name>-<hash>
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<dir>")
            .to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--lib", "--profile", "test"])
            .env("CARGO_TARGET_DIR", dir.parent().expect("target"))
            .output()
            .expect("run cargo build --lib");
        assert!(
            out.status.success(),
            "cargo build --lib failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for lib in ["libpipecast.so", "libpipecast.a"] {
            assert!(dir.join(lib).exists(), "{} has no {lib}", dir.display());
        }
        dir
    })
}

/// Sum of "N broadcasts by pipecast" over the summary lines containing `marker` (the Open MPI
/// component's `coll:pipecast`, the shim's `pipecast-preload`).
#[allow(dead_code)] // used by the MPI tests only
pub fn carried(stderr: &str, marker: &str) -> u64 {
    summed(stderr, marker, " broadcasts by pipecast", ' ')
}

/// Sum of the numbers that stand right before `words` (from the last `opener` before them) on
/// the lines containing `marker`.
#[allow(dead_code)] // used by the MPI tests only
pub fn summed(stderr: &str, marker: &str, words: &str, opener: char) -> u64 {
    stderr
        .lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| {
            let i = l.find(words)?;
            l[..i].rsplit(opener).next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Whether `cmd args` runs and succeeds (a tool is installed).
#[allow(dead_code)] // used by the MPI tests only
pub fn have(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `make -C ffi` into `out` against the library of [`built_lib_dir`] (all of ffi/, or only
/// `targets`, paths inside `out`), then `mpicc` of tests/c/mpi_bcast_test.c into
/// `out/mpi_bcast_test`.
#[allow(dead_code)] // used by the Open MPI tests only
pub fn build_ffi_and_mpi_test(out: &Path, targets: &[&str]) {
    make_ffi(out, targets);
    mpi::compile("mpicc", "mpi_bcast_test", &out.join("mpi_bcast_test"), &[]);
}

/// `make -C ffi` into `out` against the library of [`built_lib_dir`] (all of ffi/, or only
/// `targets`, file names inside `out`).
#[allow(dead_code)] // used by the MPI tests only
pub fn make_ffi(out: &Path, targets: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let profile_dir = built_lib_dir();
    let target = profile_dir.parent().expect("target");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("profile directory name");
    let make = Command::new("make")
        .arg("-C")
        .arg(root.join("ffi"))
        .arg(format!("PROFILE={profile}"))
        .arg(format!("TARGET_DIR={}", target.display()))
        .arg("CARGO=true")
        .arg(format!("BUILD={}", out.display()))
        .args(targets.iter().map(|t| out.join(t)))
        .output()
        .expect("run make");
    assert!(
        make.status.success(),
        "make -C ffi failed:\n{}\n{}",
        String::from_utf8_lossy(&make.stdout),
        String::from_utf8_lossy(&make.stderr)
    );
}

/// `program` to be run as `nobody` without any capability (setpriv, util-linux), for the
/// unprivileged paths of tests that run as root; what is missing when this is not root or
/// setpriv is not installed.
#[allow(dead_code)] // used by the tests of unprivileged paths only
pub fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> Result<Command, Missing> {
    if let Some(missing) = requirements::root() {
        return Err(missing);
    }
    if let Some(missing) = requirements::tool("util-linux", "setpriv", &["--version"]) {
        return Err(missing);
    }
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ])
    .arg(program);
    Ok(cmd)
}

/// A finished process's status, stdout and stderr, for an assertion message.
#[allow(dead_code)] // not every test binary reports processes
pub fn text(out: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
