//! Shared by the tests that link the library from C: `cargo test` builds only the rlib, so
//! they build the cdylib and staticlib themselves (once per test binary).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

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
