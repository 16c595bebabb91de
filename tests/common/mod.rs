//! Shared by the tests that link the library from C: `cargo test` builds only the rlib, so
//! they build the cdylib and staticlib themselves (once per test binary).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

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
    stderr
        .lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| {
            let i = l.find(" broadcasts by pipecast")?;
            l[..i].rsplit(' ').next()?.parse::<u64>().ok()
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cc = Command::new("mpicc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(out.join("mpi_bcast_test"))
        .arg(root.join("tests/c/mpi_bcast_test.c"))
        .status()
        .expect("run mpicc");
    assert!(cc.success(), "mpi_bcast_test.c does not compile");
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
/// unprivileged paths of tests that run as root; `None` when setpriv is missing.
#[allow(dead_code)] // used by the raw Ethernet tests only
pub fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> Option<Command> {
    if !have("setpriv", &["--version"]) {
        return None;
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
    Some(cmd)
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
