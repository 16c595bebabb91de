//! Open MPI 5 (issue 31): the coll component and the `LD_PRELOAD` shim built for Open MPI
//! 5.0.x and run by its `mpirun`, inside the Debian 13 root `bench/ompi5.sh root` makes
//! (`.ci/run` makes it; Debian 12 has no Open MPI 5). The same C programs as the Open MPI 4.1
//! tests: byte-exact broadcasts of every size class from every root on WORLD, a dup and a
//! split (contiguous and strided), `MPI_Ibcast`, mpi4py's broadcast tests, and the faults: a
//! late rank is waited for, a killed rank ends the job, one misconfigured rank makes every rank
//! decline; and between the machines of a lab (`pipecast lab mpirun --mpi ompi5`), Open MPI
//! 5's own broadcast (HAN) and the component. Without the root (or without root rights) every test says it skipped, unless
//! `PIPECAST_REQUIRE` names `ompi5` (`.ci/run` does): then it fails.

mod common;
mod lab;
use common::mpi::{self, serial, Glue};
use common::{carried, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{MutexGuard, OnceLock};
use std::time::Duration;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn script() -> PathBuf {
    repo().join("bench/ompi5.sh")
}

/// Whether the root is there and usable (we are root: chroot and mounts).
fn root_ready() -> Result<(), String> {
    if !pipecast::lab::is_root() {
        return Err("not root (the Open MPI 5 root is entered with chroot)".into());
    }
    let out = Command::new(script())
        .arg("path")
        .output()
        .map_err(|e| e.to_string())?;
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !root.join(".pipecast-ready").exists() {
        return Err(format!(
            "no Open MPI 5 root at {} (make it with `bench/ompi5.sh root`; .ci/run does)",
            root.display()
        ));
    }
    Ok(())
}

/// `cmd` inside the root (bench/ompi5.sh run).
fn in_root(cmd: &[&str]) -> Output {
    Command::new(script())
        .arg("run")
        .args(cmd)
        .output()
        .expect("run bench/ompi5.sh")
}

fn must(out: Output, what: &str) {
    assert!(out.status.success(), "{what} failed:\n{}", text(&out));
}

/// The component, the shim and the C test programs built for Open MPI 5, once per test run;
/// None (and "skipped: …" said) without the root.
fn build() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Err(why) = root_ready() {
            common::skip_or_fail("ompi5", format!("Open MPI 5 tests: {why}"));
            return None;
        }
        let out = common::artifact_dir("ompi5");
        let lib = common::built_lib_dir();
        let profile = lib.file_name().and_then(|n| n.to_str()).expect("profile");
        let target = lib.parent().expect("target").display().to_string();
        let build = format!("BUILD={}", out.display());
        let targets = [
            out.join("mca_coll_pipecast.so"),
            out.join("libpipecast_preload.so"),
        ];
        let mut args: Vec<String> = vec![
            "build".into(),
            format!("PROFILE={profile}"),
            format!("TARGET_DIR={target}"),
            build,
        ];
        args.extend(targets.iter().map(|t| t.display().to_string()));
        let make = Command::new(script())
            .args(&args)
            .output()
            .expect("run bench/ompi5.sh build");
        must(make, "bench/ompi5.sh build");
        for (src, exe) in [
            ("mpi_bcast_test.c", "mpi_bcast_test"),
            ("mpi_ibcast_test.c", "mpi_ibcast_test"),
            ("mpi_fault_test.c", "mpi_fault_test"),
            ("mpi_views_test.c", "mpi_views_test"),
        ] {
            let src = repo().join("tests/c").join(src).display().to_string();
            let exe = out.join(exe).display().to_string();
            must(
                in_root(&[
                    "mpicc", "-O1", "-Wall", "-Werror", "-pthread", "-o", &exe, &src,
                ]),
                "mpicc (Open MPI 5)",
            );
        }
        Some(out)
    })
    .as_deref()
}

/// This test's turn to run MPI jobs ([`serial`], held while it runs), the build directory and
/// its `mpi_fault_test`; `None` as [`build`].
fn fault_test() -> Option<(MutexGuard<'static, ()>, &'static Path, String)> {
    let turn = serial();
    let dir = build()?;
    Some((turn, dir, dir.join("mpi_fault_test").display().to_string()))
}

/// Open MPI 5's mpirun of `np` ranks of `program` with `extra` options under `glue`, inside the
/// root, within `limit` seconds, on this host over TCP (`btl self,tcp` on lo); pipecast takes
/// every size (its one-host default leaves small ones to the MPI). One app context: Open MPI
/// 5.0.7's mpirun crashes on MPMD lines. Returns the output and how long it took.
fn mpirun(
    glue: Glue,
    dir: &Path,
    np: usize,
    extra: &[&str],
    program: &[&str],
    limit: u64,
) -> (Output, Duration) {
    let mut cmd = Command::new(script());
    cmd.args(["run", "timeout", &limit.to_string(), "mpirun"]);
    mpi::one_host(&mut cmd);
    cmd.args(["--bind-to", "none", "-np", &np.to_string()]);
    cmd.args(glue.args(dir));
    cmd.args([
        "-x",
        "PIPECAST_HOST_MIN_BYTES=0",
        "-x",
        "PIPECAST_TIMEOUT_MS",
    ]);
    cmd.args(extra);
    cmd.args(program);
    cmd.env("PIPECAST_TIMEOUT_MS", "5000");
    mpi::timed(&mut cmd)
}

#[test]
fn ompi_info_lists_the_component_its_release_and_user_level_parameters() {
    let _serial = serial();
    let Some(dir) = build() else { return };
    // ompi_info reads the component path from the environment only (its --mca comes late).
    let path = format!(
        "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi40:{}",
        dir.display()
    );
    let info = |level: &[&str]| {
        let mut cmd = Command::new(script());
        cmd.args(["run", "ompi_info", "--param", "coll", "pipecast"])
            .args(level)
            .env("OMPI_MCA_mca_base_component_path", &path);
        cmd.output().expect("run ompi_info")
    };
    let all = info(&["--level", "3"]);
    let listing = text(&all);
    assert!(all.status.success(), "{listing}");
    assert!(listing.contains("MCA coll: pipecast"), "{listing}");
    assert!(listing.contains("for Open MPI 5.0"), "{listing}");
    for p in [
        "min_bytes",
        "transport",
        "host_min_bytes",
        "shm",
        "poll_us",
        "log",
        "window",
        "pml_below",
        "timeout_ms",
    ] {
        assert!(
            listing.contains(&format!("coll_pipecast_{p}\"")),
            "{p} at levels 1-3: {listing}"
        );
    }
    // The basic ones show at ompi_info's default level.
    let basic = text(&info(&[]));
    assert!(basic.contains("coll_pipecast_transport\""), "{basic}");
    assert!(!basic.contains("coll_pipecast_poll_us\""), "{basic}");
}

/// Runs `program` (`{dir}`: the build directory) on 4 ranks under each glue: it must print `ok`
/// (its every-byte check), no rank may report wrong data or a failed broadcast, and pipecast
/// must carry at least `at_least` broadcasts (its verbose summaries).
fn each_glue_byte_exact(program: &[&str], ok: &str, at_least: u64) {
    let _serial = serial();
    let Some(dir) = build() else { return };
    let program: Vec<String> = program
        .iter()
        .map(|p| p.replace("{dir}", &dir.display().to_string()))
        .collect();
    let program: Vec<&str> = program.iter().map(String::as_str).collect();
    for glue in [Glue::Component, Glue::Shim] {
        let (out, _) = mpirun(glue, dir, 4, &[], &program, 300);
        let all = mpi::assert_byte_exact(&out, ok, glue);
        let n = carried(&String::from_utf8_lossy(&out.stderr), glue.marker());
        assert!(n >= at_least, "{glue:?}: pipecast carried only {n}: {all}");
    }
}

/// WORLD, a dup and a split carry the large contiguous broadcasts of every root at every rank.
#[test]
fn every_size_and_root_arrives_byte_exact() {
    each_glue_byte_exact(&["{dir}/mpi_bcast_test"], "mpi_bcast_test: ok", 4 * 3 * 4);
}

#[test]
fn mpi_ibcast_arrives_byte_exact() {
    each_glue_byte_exact(&["{dir}/mpi_ibcast_test"], "mpi_ibcast_test: ok", 1);
}

/// 66 communicators on one engine per process, only `MPI_Ibcast` on each from its first call
/// (`tests/c/mpi_views_test.c`, as in tests/ompi.rs): pipecast carries every broadcast of at
/// least 512 KiB, with at most 2 threads of its own per process and no descriptor more.
/// Open MPI 5 gives a communicator a context id that every member shares only where its
/// index is global; elsewhere the component agrees one at the first blocking broadcast, so
/// this counts what the program expects minus the ibcasts before it.
#[test]
fn communicators_are_views_of_one_engine() {
    let _serial = serial();
    let Some(dir) = build() else { return };
    let program = dir.join("mpi_views_test").display().to_string();
    for glue in [Glue::Component, Glue::Shim] {
        let (out, _) = mpirun(glue, dir, 4, &[], &[&program], 300);
        mpi::assert_views(&out, glue.marker());
    }
}

#[test]
fn a_late_rank_is_waited_for() {
    let Some((_serial, dir, program)) = fault_test() else {
        return;
    };
    for glue in [Glue::Component, Glue::Shim] {
        // Late by 8 s, beyond the 5 s timeout: MPI has none, so it is waited for.
        let sleep = ["-x", "PIPECAST_TEST_SLEEP=8"];
        let (out, _) = mpirun(glue, dir, 4, &sleep, &[&program, "late"], 120);
        mpi::assert_byte_exact(&out, "mpi_fault_test: ok", glue);
        assert!(carried(&String::from_utf8_lossy(&out.stderr), glue.marker()) > 0);
    }
}

#[test]
fn a_killed_rank_ends_the_job_without_wrong_data() {
    let Some((_serial, dir, program)) = fault_test() else {
        return;
    };
    for glue in [Glue::Component, Glue::Shim] {
        let (out, took) = mpirun(glue, dir, 4, &[], &[&program, "kill"], 120);
        mpi::assert_ended_without_wrong_data(&out, took, glue);
    }
}

#[test]
fn one_misconfigured_rank_makes_every_rank_decline() {
    let Some((_serial, dir, program)) = fault_test() else {
        return;
    };
    for (glue, bad, reason) in [
        (Glue::Component, "PIPECAST_IFACE=nosuch0", "nosuch0"),
        (Glue::Shim, "PIPECAST_IFACE=nosuch0", "nosuch0"),
        (
            Glue::Component,
            "OMPI_MCA_coll_pipecast_min_bytes=1000",
            "ranks differ",
        ),
        (Glue::Shim, "PIPECAST_MIN_BYTES=1000", "ranks differ"),
        (Glue::Shim, "PIPECAST_PML_BELOW=lots", "unparsable"),
    ] {
        // One app context, rank 3 setting its variable itself: Open MPI 5.0.7's mpirun
        // (PRRTE 3.0.8) crashes on MPMD lines (`-np 3 prog : -np 1 prog`).
        let line = format!(
            "if [ \"$OMPI_COMM_WORLD_RANK\" = 3 ]; then export {bad}; fi; exec {program} plain"
        );
        let (out, took) = mpirun(glue, dir, 4, &[], &["sh", "-c", &line], 120);
        mpi::assert_declined_together(&out, took, glue.marker(), reason, (glue, bad));
    }
}

/// mpi4py (Debian 13's python3-mpi4py, 4.0) broadcasting through pipecast: `Comm.Bcast` of
/// buffers of every size class from every root, `Comm.bcast` of a pickled object (its two
/// broadcasts: the size, then the bytes), `Comm.Ibcast` after a `Bcast` set pipecast up; every
/// rank checks every byte. mpi4py's own 3.1.4 test suite (tests/ompi.rs) targets 3.1, not the
/// 4.0 in the root.
#[test]
fn mpi4py_broadcasts_arrive_byte_exact() {
    let Some(dir) = build() else { return };
    if !in_root(&["python3", "-c", "import mpi4py.MPI"])
        .status
        .success()
    {
        common::skip_or_fail("ompi5", "python3-mpi4py is not in the Open MPI 5 root");
        return;
    }
    let script = dir.join("bcast_mpi4py.py");
    std::fs::write(
        &script,
        r#"from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
wrong = 0
def pattern(n, seed):
    return bytes((i * 131 + seed * 7 + (i >> 8)) & 0xFF for i in range(n))
for n in [0, 1, 4099, 65536, 200003, (1 << 20) + 3, (4 << 20) + 5]:
    for root in range(size):
        want = pattern(n, root + n)
        buf = bytearray(want) if rank == root else bytearray(n)
        comm.Bcast([buf, MPI.BYTE], root=root)
        wrong += bytes(buf) != want
obj = {"rank": 0, "blob": pattern(3 << 20, 9)}
got = comm.bcast(obj if rank == 0 else None, root=0)
wrong += got != obj
for n in [(1 << 20) + 7, (4 << 20) + 1]:
    root = n % size
    want = pattern(n, 3)
    buf = bytearray(want) if rank == root else bytearray(n)
    comm.Ibcast([buf, MPI.BYTE], root=root).Wait()
    wrong += bytes(buf) != want
total = comm.allreduce(wrong)
if rank == 0:
    print("bcast_mpi4py: ok" if total == 0 else "bcast_mpi4py: %d WRONG" % total, flush=True)
"#,
    )
    .expect("write the mpi4py script");
    // Of the broadcasts from 64 KiB: 4 sizes from 4 roots at 4 ranks.
    each_glue_byte_exact(
        &["python3", "{dir}/bcast_mpi4py.py"],
        "bcast_mpi4py: ok",
        4 * 4 * 4,
    );
}

/// Between machines: a 4-machine lab (two switches), one rank per machine started by
/// `pipecast lab mpirun --mpi ompi5`, `tests/c/mpi_bcast_test.c` byte-exact first under Open
/// MPI 5's own broadcast (HAN, its default: it hung in its first broadcast while the lab's
/// machines shared one host name, their node-local communicators disagreeing), then with the
/// component, which must carry the broadcasts (no fallback).
#[test]
fn han_and_the_component_between_lab_machines() {
    lab::require_lab!();
    let Some(built) = build() else { return };
    let lab = lab::Lab::up(
        "o5",
        r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
            "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s1"},
                         {"name": "h2", "switch": "s0"}, {"name": "h3", "switch": "s1"}]}"#,
        &["--rate", "1gbit", "--lldp-wait", "0"],
    );
    let _serial = serial();
    let program = built.join("mpi_bcast_test").display().to_string();
    let topology = lab.topology_file().display().to_string();
    // Open MPI 5's launcher (prterun, its daemons started by the lab's rsh) once hung here
    // with every daemon connected and `hostname` never reported (14 minutes, in CI on this
    // machine; the same test passed 20 minutes before): bounded, and tried once more if it
    // ran out of time. Nothing of pipecast's runs in this probe.
    let probe = || {
        lab::pipecast_within(
            120,
            &[
                "lab",
                "mpirun",
                "--mpi",
                "ompi5",
                "--name",
                lab.name(),
                "--",
                "hostname",
            ],
        )
    };
    let mut hostnames = probe();
    if hostnames.status.code() == Some(124) {
        eprintln!("Open MPI 5's launcher hung for 120 s on `hostname`: once more");
        hostnames = probe();
    }
    let mut names: Vec<String> = String::from_utf8_lossy(&hostnames.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["h0", "h1", "h2", "h3"], "{}", text(&hostnames));
    for with_component in [false, true] {
        let mut cmd = Command::new("timeout");
        cmd.args(["300", lab::EXE, "lab", "mpirun", "--mpi", "ompi5"])
            .args(["--name", lab.name(), "--"]);
        if with_component {
            cmd.args(Glue::Component.args(built))
                .args(["--mca", "coll_pipecast_timeout_ms", "20000"])
                .args(["--mca", "coll_pipecast_topology", &topology]);
        }
        let out = cmd.arg(&program).output().expect("run pipecast lab mpirun");
        let what = if with_component {
            "the component"
        } else {
            "HAN"
        };
        assert!(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains("mpi_bcast_test: ok"),
            "{what} between lab machines: {}",
            text(&out)
        );
        if with_component {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("falling back"), "{}", text(&out));
            let n = carried(&stderr, Glue::Component.marker());
            assert!(n >= 4 * 3 * 4, "pipecast carried only {n}: {}", text(&out));
        }
    }
    drop(lab);
}

/// mpi4py 4.0.3's own collective tests (`test_cco*`, 524 tests; the sdist's `test/` directory
/// named by PIPECAST_MPI4PY4_TESTS, which `.ci/run` downloads: Debian's package does not ship
/// them) against the root's python3-mpi4py 4.0.3, every broadcast of every size through
/// pipecast (threshold 1 byte), via the component and via the shim, on 4 ranks: every rank
/// runs the whole suite and passes it, and pipecast carried broadcasts on WORLD and the
/// communicators the suite derives from it. Its non-contiguous and intercommunicator cases
/// take the fallback path.
#[test]
fn mpi4py_own_suite() {
    let tests = std::env::var("PIPECAST_MPI4PY4_TESTS").unwrap_or_default();
    if tests.is_empty() {
        common::skip_or_fail(
            "mpi4py",
            "set PIPECAST_MPI4PY4_TESTS to mpi4py 4.0.3's test/ directory (.ci/run does)",
        );
        return;
    }
    let _serial = serial();
    let Some(dir) = build() else { return };
    let runtests = format!("{tests}/runtests.py");
    for glue in [Glue::Component, Glue::Shim] {
        let every_size: &[&str] = match glue {
            Glue::Component => &["--mca", "coll_pipecast_min_bytes", "1"],
            _ => &["-x", "PIPECAST_MIN_BYTES=1"],
        };
        let mut cmd = Command::new(script());
        cmd.args(["run", "timeout", "600", "mpirun"]);
        mpi::one_host(&mut cmd);
        cmd.args(["--bind-to", "none", "-np", "4"])
            .args(glue.args(dir))
            .args(["-x", "PIPECAST_HOST_MIN_BYTES=0"])
            .args(every_size)
            .args(["python3", &runtests, "-q", "-i", "test_cco"])
            // The root sees the suite's directory at the same path.
            .env("PIPECAST_OMPI5_BIND", &tests);
        let (out, _) = mpi::timed(&mut cmd);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "{glue:?}: mpi4py's tests failed:\n{all}"
        );
        assert_eq!(all.matches("Ran 524 tests").count(), 4, "{glue:?}: {all}");
        assert!(!all.contains("FAILED ("), "{glue:?}: {all}");
        assert!(!all.contains("falling back"), "{glue:?}: {all}");
        let n = carried(&String::from_utf8_lossy(&out.stderr), glue.marker());
        // Seen: the component 19240 (every communicator), the shim 3224.
        assert!(n >= 4 * 500, "{glue:?}: pipecast carried only {n}:\n{all}");
    }
}
