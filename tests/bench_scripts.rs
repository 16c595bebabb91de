//! The bench scripts no other test runs: every `bench/*.sh` parses (`sh -n`, or `bash -n` for
//! those that say so), and
//! `bench/osu_build.sh` (which builds OSU's benchmarks outside the repository) ends with a clear
//! error, before building anything, when its source is not OSU's or its build directory is in
//! the repository. Nothing here needs MPI (`MPICC=true`) or a network.

use std::path::Path;
use std::process::{Command, Output};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
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
fn every_bench_script_parses() {
    let mut checked = 0;
    for entry in std::fs::read_dir(repo().join("bench")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "sh") {
            // Parsed by the shell its first line names (bash for two), else sh.
            let first = std::fs::read_to_string(&path).unwrap();
            let shell = if first.starts_with("#!/bin/bash") {
                "bash"
            } else {
                "sh"
            };
            let out = Command::new(shell).arg("-n").arg(&path).output().unwrap();
            assert!(out.status.success(), "{}: {}", path.display(), text(&out));
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} scripts in bench/");
}

/// `sh bench/osu_build.sh BUILD_DIR` with OSU_SRC set to `src`.
fn osu_build(src: &str, build_dir: &Path) -> Output {
    Command::new("sh")
        .arg(repo().join("bench/osu_build.sh"))
        .arg(build_dir)
        .env("MPICC", "true")
        .env("OSU_SRC", src)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn fails_saying(out: &Output, words: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", text(out));
    assert!(stderr.contains(words), "no {words:?} in: {}", text(out));
    assert!(out.stdout.is_empty(), "printed a path: {}", text(out));
}

#[test]
fn osu_build_says_what_is_wrong_with_its_source() {
    let dir = std::env::temp_dir().join(format!("pipecast-osu-build-test-{}", std::process::id()));
    let missing = dir.join("no-such-source");
    fails_saying(
        &osu_build(missing.to_str().unwrap(), &dir.join("a")),
        "no such file or directory",
    );
    // A directory that is not OSU's source (this repository's tests).
    let not_osu = repo().join("tests");
    fails_saying(
        &osu_build(not_osu.to_str().unwrap(), &dir.join("b")),
        "not OSU Micro-Benchmarks",
    );
    // A file that is not a tarball.
    let not_tar = repo().join("Cargo.toml");
    fails_saying(
        &osu_build(not_tar.to_str().unwrap(), &dir.join("c")),
        "not a tarball",
    );
    // The build directory inside the repository: refused before anything is written there.
    let inside = repo().join("osu-build-test");
    fails_saying(
        &osu_build(missing.to_str().unwrap(), &inside),
        "inside the repository",
    );
    assert!(!inside.exists(), "made {}", inside.display());
    let _ = std::fs::remove_dir_all(&dir);
}
