//! The Open MPI `coll` component and the `LD_PRELOAD` shim under real `mpirun` (Open MPI 4.1.4
//! from Debian; `.ci/run` installs it): `tests/c/mpi_bcast_test.c` broadcasts on WORLD, a dup
//! and a split, every root, sizes around the threshold, contiguous and strided datatypes, and
//! checks every byte; the component's own verbose summary proves pipecast carried broadcasts
//! (an unloadable component silently falls back, OMPI.md).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn have(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Where the test's artifacts go, built once per test binary run.
fn build() -> Option<PathBuf> {
    if !have("mpicc", &["--version"]) || !have("pkg-config", &["--exists", "ompi-c"]) {
        eprintln!("SKIPPED: Open MPI development files not installed (apt-get install openmpi-bin libopenmpi-dev pkg-config)");
        return None;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let target = profile_dir.parent().unwrap();
    let profile = profile_dir.file_name().unwrap().to_str().unwrap();
    let out = std::env::temp_dir().join(format!("pipecast-ompi-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let make = Command::new("make")
        .arg("-C")
        .arg(root.join("ffi"))
        .arg(format!("PROFILE={profile}"))
        .arg(format!("TARGET_DIR={}", target.display()))
        .arg("CARGO=true")
        .arg(format!("BUILD={}", out.display()))
        .output()
        .expect("run make");
    assert!(
        make.status.success(),
        "make -C ffi failed:\n{}\n{}",
        String::from_utf8_lossy(&make.stdout),
        String::from_utf8_lossy(&make.stderr)
    );
    let cc = Command::new("mpicc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(out.join("mpi_bcast_test"))
        .arg(root.join("tests/c/mpi_bcast_test.c"))
        .status()
        .unwrap();
    assert!(cc.success(), "mpi_bcast_test.c does not compile");
    Some(out)
}

fn mpirun(np: usize, extra: &[&str], program: &[&str]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.args(["300", "mpirun", "--oversubscribe", "-np", &np.to_string()]);
    // mpirun refuses to run as root without this flag.
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
    cmd.args(extra).args(program);
    cmd.env("PIPECAST_TIMEOUT_MS", "20000");
    cmd.output().expect("run mpirun")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Sum of "N broadcasts by pipecast" over the ranks' summary lines.
fn carried(stderr: &str, marker: &str) -> u64 {
    stderr
        .lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| {
            let i = l.find(" broadcasts by pipecast")?;
            l[..i].rsplit(' ').next()?.parse::<u64>().ok()
        })
        .sum()
}

fn check(out: &Output, marker: &str, ranks: u64) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("mpi_bcast_test: ok"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let n = carried(&stderr, marker);
    // World, dup and split each carry the large contiguous broadcasts of every root at every rank.
    assert!(
        n >= ranks * 3 * 4,
        "pipecast carried only {n} broadcasts:\n{stderr}"
    );
    assert!(
        !stderr.contains("falling back"),
        "a pipecast broadcast failed:\n{stderr}"
    );
}

#[test]
fn component_and_preload_under_mpirun() {
    let Some(dir) = build() else { return };
    let component_path = format!("SYS_DEFAULT:{}", dir.display());
    let test = dir.join("mpi_bcast_test");
    let test = test.to_str().unwrap();
    for np in [4, 8] {
        let out = mpirun(
            np,
            &[
                "--mca",
                "mca_base_component_path",
                &component_path,
                "--mca",
                "coll_pipecast_verbose",
                "1",
            ],
            &[test],
        );
        check(&out, "coll:pipecast", np as u64);
    }
    let out = mpirun(
        4,
        &[
            "--mca",
            "mca_base_component_path",
            &component_path,
            "--mca",
            "coll_pipecast_verbose",
            "1",
        ],
        &[test, "multiple"],
    );
    check(&out, "coll:pipecast", 4);
    let preload = dir.join("libpipecast_preload.so");
    let out = mpirun(
        4,
        &[
            "-x",
            &format!("LD_PRELOAD={}", preload.display()),
            "-x",
            "PIPECAST_VERBOSE=1",
        ],
        &[test],
    );
    check(&out, "pipecast-preload", 4);
    let _ = std::fs::remove_dir_all(&dir);
}
