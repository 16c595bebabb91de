//! The Open MPI `coll` component and the `LD_PRELOAD` shim under real `mpirun` (Open MPI 4.1.4
//! from Debian; `.ci/run` installs it): `tests/c/mpi_bcast_test.c` broadcasts on WORLD, a dup
//! and a split, every root, sizes around the threshold, contiguous and strided datatypes, and
//! checks every byte; the component's own verbose summary proves pipecast carried broadcasts
//! (an unloadable component silently falls back, OMPI.md).

mod common;
use common::mpi::{self, assert_byte_exact, serial, Glue};
use common::requirements::{mpich, tool};
use common::{carried, missing, require};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::MutexGuard;

/// This test's turn to run MPI jobs ([`serial`], held while it runs) and where its artifacts
/// go, built anew; `None` (skipped, said why, or failed under `PIPECAST_REQUIRE`) without
/// Open MPI.
fn build() -> Option<Built> {
    let turn = serial();
    let dir = mpi::build_for_open_mpi("ompi")?;
    Some(Built { dir, _turn: turn })
}

/// A test's artifacts and its turn: the artifacts are removed when the test passes (kept
/// for a look when it fails), then the next test may run its jobs.
struct Built {
    dir: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

impl std::ops::Deref for Built {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Built {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn mpirun(np: usize, extra: &[&str], program: &[&str]) -> Output {
    mpirun_env(np, extra, program, Some("0"))
}

/// `mpirun` with pipecast's default for ranks of one host.
fn mpirun_default(np: usize, extra: &[&str], program: &[&str]) -> Output {
    mpirun_env(np, extra, program, None)
}

fn mpirun_env(np: usize, extra: &[&str], program: &[&str], host_min: Option<&str>) -> Output {
    mpirun_on(&[], np, extra, program, host_min)
}

/// `mpirun` started by `prefix` (`taskset -c 0`, say: its ranks inherit the CPUs).
fn mpirun_on(
    prefix: &[&str],
    np: usize,
    extra: &[&str],
    program: &[&str],
    host_min: Option<&str>,
) -> Output {
    let mut cmd = Command::new(prefix.first().copied().unwrap_or("timeout"));
    if !prefix.is_empty() {
        cmd.args(&prefix[1..]).arg("timeout");
    }
    cmd.args(["300", "mpirun"]);
    mpi::one_host(&mut cmd);
    cmd.args(["-np", &np.to_string()]);
    cmd.args(extra).args(program);
    cmd.env("PIPECAST_TIMEOUT_MS", "20000");
    // Every rank runs on this one host, where pipecast leaves broadcasts below 1 MiB to the
    // MPI by default: these tests are about pipecast's own paths, so it takes every size
    // (`one_host_defers_small_broadcasts_by_default` tests the default).
    match host_min {
        Some(v) => cmd.env("PIPECAST_HOST_MIN_BYTES", v),
        None => cmd.env_remove("PIPECAST_HOST_MIN_BYTES"),
    };
    cmd.output().expect("run mpirun")
}

/// Sum of "(N of them over … point-to-point)" over the summary lines containing `marker`: the
/// broadcasts that followed pipecast's tree over the MPI's own point-to-point layer.
fn over_pml(stderr: &str, marker: &str) -> u64 {
    common::summed(stderr, marker, " of them over ", '(')
}

fn check(out: &Output, marker: &str, ranks: u64) {
    assert_byte_exact(out, "mpi_bcast_test: ok", marker);
    let stderr = String::from_utf8_lossy(&out.stderr);
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
    // With the default threshold (512 KiB) 65536 … 200003 bytes follow pipecast's tree over
    // the MPI's point-to-point layer, 1 MiB + 3 and up go through pipecast's transport.
    let pml = over_pml(&stderr, marker);
    assert!(
        pml >= ranks * 3 * 4 && n - pml >= ranks * 3 * 4,
        "{pml} of {n} broadcasts over point-to-point:\n{stderr}"
    );
}

/// The test program of [`build`]: broadcasts of every size class and root, checked.
fn bcast_test(dir: &Path) -> String {
    dir.join("mpi_bcast_test").display().to_string()
}

/// The component's options (verbose 1) and `extra`.
fn component_args(dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = Glue::Component.args(dir);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// At its default settings, on one host, pipecast leaves broadcasts below 4 MiB to Open MPI's
/// own broadcast, faster there, and with two ranks those below 32 MiB and with three those
/// below 64 MiB (a fan-out to one or two readers, whose copies Open MPI makes as well: all of
/// this test's), and says so once at verbose 1.
/// Byte-exact either way (the test program checks every rank).
#[test]
fn one_host_defers_small_broadcasts_by_default() {
    let Some(dir) = build() else { return };
    let test = bcast_test(&dir);
    let args = component_args(&dir, &[]);
    for np in [4, 3, 2] {
        let said = match np {
            2 => "a fan-out to one reader, which the MPI's own broadcast makes at least as fast below 33554432 bytes",
            3 => "a fan-out to two readers, which the MPI's own broadcast makes at least as fast below 67108864 bytes",
            _ => "broadcasts below 4194304 bytes go to the MPI's own broadcast",
        };
        let out = mpirun_default(np, &strs(&args), &[&test]);
        assert_byte_exact(&out, "mpi_bcast_test: ok", np);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(said), "{np} ranks: {stderr}");
        assert_eq!(over_pml(&stderr, "coll:pipecast"), 0, "{stderr}");
        // With 4 ranks the test's 4 MiB broadcasts (every root) on the world and its
        // duplicate, at every rank, by pipecast; with 3 or 2 (and on the split halves) none.
        let n = carried(&stderr, "coll:pipecast");
        if np < 4 {
            assert_eq!(n, 0, "{stderr}");
        } else {
            assert!(n >= (np * 2 * np) as u64, "{n}: {stderr}");
        }
    }
}

/// More ranks than the host's CPUs can carry (3 ranks on one CPU, more than 2 per CPU): at
/// its default settings pipecast leaves broadcasts below 16 MiB (all of this test's) to Open
/// MPI's own, which was measured faster there (docs/results-ompi.md), and says why at verbose
/// 1; every rank decides alike from the CPUs agreed in the bootstrap. Forced
/// (`PIPECAST_HOST_MIN_BYTES`), pipecast runs.
#[test]
fn one_host_oversubscribed_defers_below_16_mib() {
    let Some(dir) = build() else { return };
    require!(tool("util-linux", "taskset", &["--version"]));
    let test = bcast_test(&dir);
    let args = component_args(&dir, &[]);
    let one_cpu = ["taskset", "-c", "0"];
    let out = mpirun_on(&one_cpu, 3, &strs(&args), &[&test], None);
    assert_byte_exact(&out, "mpi_bcast_test: ok", "3 ranks on one CPU");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("3 ranks on 1 CPU (more than 2 per CPU): broadcasts below 16777216 bytes go to the MPI's own broadcast"),
        "{stderr}"
    );
    // WORLD and its duplicate (3 ranks) defer every size; so do the split halves (2 ranks
    // always defer on one host, 1 rank has nothing to broadcast to).
    assert_eq!(carried(&stderr, "comm MPI_COMM_WORLD:"), 0, "{stderr}");
    assert_eq!(carried(&stderr, "DUP FROM 0:"), 0, "{stderr}");
    assert_eq!(carried(&stderr, "SPLIT FROM 0:"), 0, "{stderr}");
    let forced = mpirun_on(&one_cpu, 3, &strs(&args), &[&test], Some("0"));
    check(&forced, "coll:pipecast", 3);
}

#[test]
fn component_under_mpirun() {
    let Some(dir) = build() else { return };
    let test = &bcast_test(&dir);
    let args = component_args(&dir, &[]);
    for np in [4, 8] {
        let out = mpirun(np, &strs(&args), &[test]);
        check(&out, "coll:pipecast", np as u64);
    }
    // Everything through pipecast's transport (the point-to-point path off).
    let engine_only = component_args(&dir, &["--mca", "coll_pipecast_pml_below", "0"]);
    let out = mpirun(4, &strs(&engine_only), &[test]);
    assert_byte_exact(&out, "mpi_bcast_test: ok", "pml_below 0");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(carried(&stderr, "coll:pipecast") >= 4 * 3 * 4, "{stderr}");
    assert!(!stderr.contains("falling back"), "{stderr}");
    assert_eq!(over_pml(&stderr, "coll:pipecast"), 0);
    // Verbose 1 names the link: every rank of this job shares one host.
    assert!(stderr.contains("pipecast ready over shm:"), "{stderr}");
    // MPI_THREAD_MULTIPLE: nothing may block in module enable (OMPI.md).
    let out = mpirun(4, &strs(&args), &[test, "multiple"]);
    check(&out, "coll:pipecast", 4);
}

/// Issue 17, on these machines without an RDMA device: `coll_pipecast_transport auto` runs
/// pipecast over TCP (shared memory off), byte-exact, and says at verbose 1 why not verbs;
/// the device, port, GID index and queue pair bound are MCA parameters, a bad one declined
/// at every rank;
/// `verbs` makes pipecast decline at every rank, naming the problem, and Open MPI's own
/// broadcast runs, byte-exact.
#[test]
fn component_transport_auto_and_verbs_without_a_device() {
    let Some(dir) = build() else { return };
    let test = &bcast_test(&dir);
    let run_with = |transport: &str, gid_index: &str, max_qps: &str| {
        let args = component_args(
            &dir,
            &[
                "--mca",
                "coll_pipecast_transport",
                transport,
                "--mca",
                "coll_pipecast_verbs_device",
                "nosuch0",
                "--mca",
                "coll_pipecast_verbs_port",
                "1",
                "--mca",
                "coll_pipecast_verbs_gid_index",
                gid_index,
                "--mca",
                "coll_pipecast_verbs_max_qps",
                max_qps,
                "-x",
                "PIPECAST_SHM=off",
            ],
        );
        mpirun(2, &strs(&args), &[test])
    };
    let run = |transport: &str| run_with(transport, "3", "16");
    let out = run("auto");
    assert_byte_exact(&out, "mpi_bcast_test: ok", "auto");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.contains("pipecast ready over verbs:") {
        assert!(stderr.contains("pipecast ready over tcp"), "{stderr}");
        assert!(
            stderr.contains("transport auto chose tcp: not verbs at rank 0: "),
            "{stderr}"
        );
    }
    assert!(carried(&stderr, "coll:pipecast") >= 2 * 3 * 4, "{stderr}");
    assert!(!stderr.contains("falling back"), "{stderr}");
    let out = run("verbs");
    assert_byte_exact(&out, "mpi_bcast_test: ok", "verbs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.contains("pipecast ready over verbs:") {
        assert!(
            stderr.contains("pipecast declined at every rank")
                && (stderr.contains("no RDMA device: ibv_get_device_list returned none")
                    || stderr.contains("built without RDMA verbs")),
            "{stderr}"
        );
    }
    // A GID index past the table, or a queue pair bound below 1: a bad setting at every
    // rank, declined everywhere.
    for (gid_index, max_qps, names) in [
        ("300", "16", "PIPECAST_VERBS_GID_INDEX"),
        ("3", "-1", "PIPECAST_VERBS_MAX_QPS"),
    ] {
        let out = run_with("auto", gid_index, max_qps);
        assert_byte_exact(&out, "mpi_bcast_test: ok", names);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("pipecast declined at every rank") && stderr.contains(names),
            "{stderr}"
        );
        assert_eq!(carried(&stderr, "coll:pipecast"), 0, "{stderr}");
    }
}

#[test]
fn preload_under_open_mpi() {
    let Some(dir) = build() else { return };
    let test = bcast_test(&dir);
    let shim = Glue::Shim.args(&dir);
    let out = mpirun(4, &strs(&shim), &[&test]);
    check(&out, "pipecast-preload", 4);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("pipecast-preload: pipecast ready over shm:"),
        "{stderr}"
    );
}

#[test]
fn preload_under_mpich() {
    let Some(dir) = build_mpich() else { return };
    let test = compile(
        "mpicc.mpich",
        &dir,
        "mpi_bcast_test",
        "mpi_bcast_test_mpich",
    );
    let timeout = ["-env", "PIPECAST_TIMEOUT_MS", "20000"];
    let out = mpiexec_mpich_with_shim("300", 4, &dir, &timeout, &test);
    check(&out, "pipecast-preload", 4);
}

/// A send still pending at its sender while pipecast carries a broadcast
/// (`tests/c/mpi_pending_send.c`): rank 0 starts `MPI_Isend` of 4 MiB to rank 1 and enters
/// `MPI_Bcast`; rank 1 receives first. MPICH moves a rendezvous send only from the sender's
/// progress engine, so this ends only because the shim keeps the MPI progressing while its
/// broadcast runs; before, every such job hung (the 2-ranks-per-machine hang of
/// `tests/mpich_lab.rs`, deterministic here). Bounded by `timeout`: a hang fails the test.
#[test]
fn a_send_pending_across_a_shim_broadcast_under_mpich() {
    let Some(dir) = build_mpich() else { return };
    let program = compile("mpicc.mpich", &dir, "mpi_pending_send", "mpi_pending_send");
    let out = mpiexec_mpich_with_shim("60", 2, &dir, &[], &program);
    check_pending_send(&out, "pipecast-preload");
}

/// `program` under MPICH's `mpiexec`, `np` ranks on this host, the MPICH shim of `dir`
/// loaded, verbose 1, pipecast taking every size on one host, `extra` options; ended after
/// `secs` seconds.
fn mpiexec_mpich_with_shim(
    secs: &str,
    np: usize,
    dir: &Path,
    extra: &[&str],
    program: &Path,
) -> Output {
    Command::new("timeout")
        .args([secs, "mpiexec.mpich", "-np", &np.to_string()])
        .args(Glue::Mpich.args(dir))
        .args(["-env", "PIPECAST_HOST_MIN_BYTES", "0"])
        .args(extra)
        .arg(program)
        .output()
        .expect("run mpiexec.mpich")
}

/// `mpi_pending_send` ended well, and the three 1 MiB + 3 broadcasts at each of its 2 ranks
/// went through pipecast's transport (the summaries of `marker`).
fn check_pending_send(out: &Output, marker: &str) {
    assert_byte_exact(out, "mpi_pending_send: ok", marker);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(carried(&stderr, marker), 2 * 3, "{stderr}");
}

/// The same pending send under Open MPI, through the component: over `btl tcp` a rendezvous
/// send moves only from the sender's progress (`opal_progress`), so rank 0, inside a broadcast
/// that pipecast carries, must keep Open MPI progressing while it waits, or rank 1 (still in
/// `MPI_Recv`) never joins and each waits for the other. Bounded by `timeout`: a hang fails
/// the test.
#[test]
fn a_send_pending_across_a_component_broadcast() {
    let Some(dir) = build() else { return };
    let program = compile("mpicc", &dir, "mpi_pending_send", "mpi_pending_send");
    // mpirun's own bound: it ends the job after 90 s.
    let args = component_args(&dir, &["--timeout", "90"]);
    let out = mpirun(2, &strs(&args), &[program.to_str().unwrap()]);
    check_pending_send(&out, "coll:pipecast");
}

/// [`build`] with the MPICH shim; `None` (skipped, said why, or failed under
/// `PIPECAST_REQUIRE`) where MPICH or Open MPI is missing.
fn build_mpich() -> Option<Built> {
    if let Some(missing) = mpich() {
        missing.skip();
        return None;
    }
    let dir = build()?;
    let preload = dir.join("libpipecast_preload_mpich.so");
    assert!(
        preload.exists(),
        "make -C ffi built no MPICH shim although mpicc.mpich exists"
    );
    Some(dir)
}

/// `mpicc` (or `mpicc.mpich`) of `tests/c/<name>.c` into `dir/<output>`.
fn compile(mpicc: &str, dir: &Path, name: &str, output: &str) -> PathBuf {
    let program = dir.join(output);
    mpi::compile(mpicc, name, &program, &[]);
    program
}

/// Rounds of 8 overlapping `MPI_Ibcast`s (0, 1, 7, 65537, 600001, 1 MiB + 3, 4 MiB + 1, 2 MiB
/// bytes, every rank a root), one before any `MPI_Bcast` (the MPI's own ibcast), then after a
/// blocking broadcast that sets pipecast up, waited with `MPI_Wait` in reverse order,
/// `MPI_Waitall`, an `MPI_Testall` loop and `MPI_Waitany`, plus a strided datatype
/// (`tests/c/mpi_ibcast_test.c`): through the component (`coll_ibcast`, completed from Open
/// MPI's progress), the shim under Open MPI and the shim under MPICH (generalized requests
/// completed by the interposed wait/test calls).
#[test]
fn overlapping_ibcasts() {
    let Some(dir) = build() else { return };
    under_each_glue(&dir, "mpi_ibcast_test", "120", check_ibcast);
}

/// `tests/c/<name>.c` on 4 ranks under each glue: the component and the shim under Open MPI,
/// then (where MPICH is installed) the shim under MPICH, ended after `mpich_secs` seconds;
/// `check` judges each run's output, given the glue's marker.
fn under_each_glue(dir: &Path, name: &str, mpich_secs: &str, check: fn(&Output, &str)) {
    let program = compile("mpicc", dir, name, name);
    let program = program.to_str().unwrap();
    let out = mpirun(4, &strs(&component_args(dir, &[])), &[program]);
    check(&out, "coll:pipecast");
    let out = mpirun(4, &strs(&Glue::Shim.args(dir)), &[program]);
    check(&out, "pipecast-preload");
    if let Some(missing) = mpich() {
        common::skip_or_fail(missing.kind, format!("the MPICH part: {}", missing.reason));
        return;
    }
    let program = compile("mpicc.mpich", dir, name, &format!("{name}_mpich"));
    let out = mpiexec_mpich_with_shim(mpich_secs, 4, dir, &[], &program);
    check(&out, "pipecast-preload");
}

fn check_ibcast(out: &Output, marker: &str) {
    assert_byte_exact(out, "mpi_ibcast_test: ok", marker);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("failed"), "{marker}: {stderr}");
    // Per rank: the blocking 1 MiB broadcast, then in each of 4 rounds the 4 ibcasts of at
    // least pml_below (512 KiB), and the strided one. The round before the blocking broadcast:
    // the shim made the process's engine at MPI_Init, so pipecast carries its 4 large
    // ibcasts too; the component makes it at WORLD's first blocking broadcast, so the MPI's
    // own ibcast carries them.
    let first = if marker == "pipecast-preload" { 4 } else { 0 };
    let n = carried(&stderr, marker);
    assert_eq!(
        n,
        4 * (1 + first + 4 * 4 + 1),
        "{marker}: pipecast carried {n}:\n{stderr}"
    );
}

/// Many communicators on one engine per process (`tests/c/mpi_views_test.c`): 64 duplicates
/// of WORLD, a split into halves and the odd ranks' communicator, only `MPI_Ibcast` on each
/// from its first call (posted in opposite orders at even and odd ranks), then an ibcast and
/// a blocking broadcast in flight together on each; every byte checked at every rank. Through
/// the component, the shim under Open MPI and the shim under MPICH: pipecast carries every
/// broadcast of at least 512 KiB (each rank says how many it made), with at most 2 threads of
/// pipecast's per process and no descriptor more after 66 communicators than before them.
#[test]
fn communicators_are_views_of_one_engine() {
    let Some(dir) = build() else { return };
    under_each_glue(&dir, "mpi_views_test", "240", mpi::assert_views);
}

/// mpi4py's own collective tests (`test_cco`, 350 tests; the sdist's `test/` directory named by
/// PIPECAST_MPI4PY_TESTS, which `.ci/run` downloads) with every broadcast forced through
/// pipecast (threshold 1 byte), via the component and via the preload shim. Its
/// non-contiguous and intercommunicator cases must take the fallback path.
#[test]
fn mpi4py_suite() {
    let tests = std::env::var("PIPECAST_MPI4PY_TESTS").unwrap_or_default();
    require!(
        tests.is_empty().then(|| missing(
            "mpi4py",
            "set PIPECAST_MPI4PY_TESTS to mpi4py 3.1.4's test/ directory (.ci/run does)"
        )),
        tool("mpi4py", "/usr/bin/python3", &["-c", "import mpi4py"]),
    );
    let Some(dir) = build() else { return };
    let runtests = format!("{tests}/runtests.py");
    let suite = ["/usr/bin/python3", &runtests, "-q", "-i", "test_cco"];
    // The component taking every size, over the PML below `pml_below` bytes.
    let every_size = |pml_below: &str| {
        component_args(
            &dir,
            &[
                "--mca",
                "coll_pipecast_min_bytes",
                "1",
                "--mca",
                "coll_pipecast_pml_below",
                pml_below,
            ],
        )
    };
    // Through pipecast's transport, then along its trees over Open MPI's PML.
    for pml_below in ["0", "1000000000"] {
        let out = mpirun(4, &strs(&every_size(pml_below)), &suite);
        check_suite(&out, "coll:pipecast");
        let pml = over_pml(&String::from_utf8_lossy(&out.stderr), "coll:pipecast");
        assert_eq!(pml > 0, pml_below != "0", "{pml} broadcasts over the PML");
    }
    let mut shim = Glue::Shim.args(&dir);
    shim.extend(["-x".into(), "PIPECAST_MIN_BYTES=1".into()]);
    let out = mpirun(4, &strs(&shim), &suite);
    check_suite(&out, "pipecast-preload");
    // mpi4py's MPI_Ibcast tests (test_cco_nb_buf's Bcast cases: contiguous arrays of every
    // type and indexed datatypes, waited with Request.Wait) after its MPI_Bcast tests
    // (test_cco_buf), which set pipecast up on WORLD: from then on WORLD's Ibcasts go
    // through pipecast too (an MPI_Ibcast never sets pipecast up: it must not block).
    let ibcast = [
        "/usr/bin/python3",
        &runtests,
        "-q",
        "-i",
        "test_cco_buf|test_cco_nb_buf",
        "-k",
        "Bcast",
    ];
    let out = mpirun(4, &strs(&every_size("0")), &ibcast);
    check_ibcast_suite(&out, "coll:pipecast");
    shim.extend(["-x".into(), "PIPECAST_PML_BELOW=0".into()]);
    let out = mpirun(4, &strs(&shim), &ibcast);
    check_ibcast_suite(&out, "pipecast-preload");
}

fn check_ibcast_suite(out: &Output, marker: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{marker}: mpi4py's tests failed:\n{stderr}"
    );
    assert_eq!(
        stderr.matches("Ran 16 tests").count(),
        4,
        "{marker}: {stderr}"
    );
    assert!(
        !stderr.contains("FAILED (") && !stderr.contains("failed:"),
        "{marker}: {stderr}"
    );
    // Per rank: 231 MPI_Bcast and 231 MPI_Ibcast on WORLD, 63 + 168 MPI_Bcast on the
    // duplicates (whose Ibcasts run before any MPI_Bcast there: the previous module's).
    let n = carried(&stderr, marker);
    assert!(
        n >= 4 * (2 * 231 + 63 + 168),
        "{marker}: pipecast carried only {n}:\n{stderr}"
    );
}

fn check_suite(out: &Output, marker: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mpi4py's tests failed:\n{stderr}");
    // Every rank ran the whole suite and none reported a failure (the 4 ranks' reports
    // interleave on one stderr, so "OK" need not start a line).
    assert_eq!(stderr.matches("Ran 350 tests").count(), 4, "{stderr}");
    assert!(
        !stderr.contains("FAILED (") && stderr.matches("OK").count() >= 4,
        "{stderr}"
    );
    let n = carried(&stderr, marker);
    assert!(
        n >= 4 * 100,
        "pipecast carried only {n} broadcasts:\n{stderr}"
    );
    assert!(
        !stderr.contains("falling back"),
        "a pipecast broadcast failed:\n{stderr}"
    );
}

/// `ompi_info` lists the component's MCA parameters (OMPI.md: it ignores `--mca` for the
/// component path, so the path goes through the environment).
#[test]
fn ompi_info_lists_the_parameters() {
    let Some(dir) = build() else { return };
    let out = Command::new("ompi_info")
        .args(["--param", "coll", "pipecast", "--level", "9"])
        .env(
            "OMPI_MCA_mca_base_component_path",
            format!(
                "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3:{}",
                dir.display()
            ),
        )
        .output()
        .expect("run ompi_info");
    let text = String::from_utf8_lossy(&out.stdout);
    for p in [
        "priority",
        "pml_below",
        "pml_segment_bytes",
        "pml_window",
        "min_bytes",
        "transport",
        "tree",
        "segment_bytes",
        "topology",
        "profile",
        "if_include",
        "timeout_ms",
        "verbose",
    ] {
        assert!(
            text.contains(&format!("parameter \"coll_pipecast_{p}\"")),
            "ompi_info does not list coll_pipecast_{p}:\n{text}"
        );
    }
}

/// Processes of another job on one engine per process (`tests/c/mpi_spawn_test.c`): 2 ranks
/// (each its engine, made at WORLD's first barrier) spawn 2 (theirs made the same way) and
/// merge the intercommunicator; with shared memory off (`PIPECAST_SHM=off`) the component makes
/// the merged communicator on the engines (`pipecast_comm_create_on`), and verbose 1 says so.
/// At the defaults (shared memory on) processes of the two jobs share this host, so every
/// member of the first merged communicator makes it with an engine of its own (shared memory
/// between them, where joined they would talk over TCP): the parents then hold 2 engines, so
/// a second spawn, merged apart, joins the engines (a third engine would break "at most 2
/// pipecast threads per process", issue 30), and rank 0 says why at info. Either way: every
/// byte of 0 … 4 MiB + 1 from every root on every merged communicator and on each job's
/// WORLD, interleaved, at every rank, pipecast carrying them, at most 2 pipecast threads per
/// process.
#[test]
fn spawned_processes_join_the_engines() {
    let Some(dir) = build() else { return };
    let program = dir.join("mpi_spawn_test");
    mpi::compile("mpicc", "mpi_spawn_test", &program, &[]);
    // (PIPECAST_SHM, spawns, ranks of merged communicators on the engines)
    for (shm, spawns, on_the_engines) in [("off", 1, 4), ("auto", 2, 4)] {
        let shm_env = format!("PIPECAST_SHM={shm}");
        let log = "PIPECAST_LOG=warn,pipecast::comm::grow=info";
        let args = component_args(&dir, &["-x", &shm_env, "-x", log]);
        let program = [program.to_str().unwrap(), "2", &spawns.to_string()];
        let out = mpirun(2, &strs(&args), &program);
        let all = common::text(&out);
        if !out.status.success() && !all.contains("mpi_spawn_test: rank") && all.contains("spawn") {
            common::skip_or_fail(
                "openmpi",
                format!("MPI_Comm_spawn does not run here:\n{all}"),
            );
            return;
        }
        assert_byte_exact(&out, "mpi_spawn_test: ok", ("spawn + merge", shm));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let threads: Vec<(i64, i64)> = stderr
            .lines()
            .filter_map(|l| l.split_once("mpi_spawn_test: rank "))
            .map(|(_, rest)| {
                let w: Vec<i64> = rest
                    .split(|c: char| !c.is_ascii_digit() && c != '-')
                    .filter_map(|w| w.parse().ok())
                    .collect();
                (w[1], w[2])
            })
            .collect();
        // One report per process and merged communicator: 2 parents and 2 children per spawn.
        assert_eq!(threads.len(), 4 * spawns, "one report per process:\n{all}");
        for (t0, t1) in threads {
            assert!(
                (1..=2).contains(&t1) && t0 <= t1,
                "pipecast threads {t0} then {t1}:\n{all}"
            );
        }
        // The verbose 1 lines (pipecast's own info says "joined on this process's engine").
        let on_engines = stderr.matches("), on this process's engine (id").count();
        assert_eq!(
            on_engines, on_the_engines,
            "ranks of merged communicators on the engines:\n{all}"
        );
        if shm == "auto" {
            // The first spawn's: an engine of its own; the second's: joined, rank 0 says why.
            assert!(
                all.contains("gets its own engine (thread, links): ranks 0 and"),
                "{all}"
            );
            assert!(
                all.contains("joins the engines: ranks 0 and") && all.contains("holds 2 engines"),
                "{all}"
            );
        }
        assert!(
            carried(&stderr, "coll:pipecast") > 0,
            "pipecast carried nothing:\n{all}"
        );
    }
}
