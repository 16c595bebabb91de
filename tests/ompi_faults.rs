//! Faults under real `mpirun` with the Open MPI component, the `LD_PRELOAD` shim under Open MPI
//! and the shim under MPICH (`mpiexec.mpich`, when installed) (`tests/c/mpi_fault_test.c`, 4
//! ranks, every byte checked at every rank):
//! - a rank late by 20 s (four times the timeout) is waited for: every broadcast correct
//!   (and one late by 8 s in an `MPI_Ibcast` + `MPI_Wait`);
//! - one rank with a bad setting (an interface that does not exist, an unreadable topology
//!   file, another threshold, an unreadable one; an MPMD run): every rank declines pipecast
//!   together, the MPI's own broadcast carries everything byte-exact, and the job ends in
//!   seconds (it used to hang);
//! - datatype layouts that differ between ranks (same signature): one path, byte-exact;
//! - a rank SIGKILLed in the middle of a broadcast: the job ends, and no rank reports a
//!   broadcast that returned success with wrong data (errors are returned to the program,
//!   which checks every broadcast that succeeded); the same in an `MPI_Ibcast`.

mod common;
use common::carried;
use common::mpi::{self, serial, Glue};
use common::requirements::mpich;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn build() -> Option<PathBuf> {
    let out = mpi::build_for_open_mpi("ompi-faults")?;
    for (mpicc, program) in [
        ("mpicc", "mpi_fault_test"),
        ("mpicc.mpich", "mpi_fault_test_mpich"),
    ] {
        if mpicc == "mpicc.mpich" && mpich().is_some() {
            continue;
        }
        mpi::compile(mpicc, "mpi_fault_test", &out.join(program), &["-pthread"]);
    }
    Some(out)
}

/// The glues this machine has (MPICH is optional, but for `PIPECAST_REQUIRE=mpich`).
fn glues() -> Vec<Glue> {
    let mut glues = vec![Glue::Component, Glue::Shim];
    match mpich() {
        None => glues.push(Glue::Mpich),
        Some(missing) => {
            common::skip_or_fail(missing.kind, format!("the MPICH part: {}", missing.reason))
        }
    }
    glues
}

/// The test program built for `glue`'s MPI.
fn program(glue: Glue, dir: &Path) -> PathBuf {
    match glue {
        Glue::Component | Glue::Shim => dir.join("mpi_fault_test"),
        Glue::Mpich => dir.join("mpi_fault_test_mpich"),
    }
}

/// One app context of an MPMD line: `np` ranks of the test program in `mode`, with `env`.
struct Context<'a> {
    np: usize,
    env: &'a [&'a str],
    mode: &'a str,
}

/// `mpirun` (or `mpiexec.mpich`) of `contexts` under `glue`, within `limit` seconds; returns
/// the output and how long it took.
fn mpirun(glue: Glue, dir: &Path, contexts: &[Context], limit: u64) -> (Output, Duration) {
    let mut cmd = Command::new("timeout");
    cmd.arg(limit.to_string());
    match glue {
        Glue::Component | Glue::Shim => {
            cmd.arg("mpirun");
            mpi::one_host(&mut cmd);
        }
        Glue::Mpich => {
            cmd.arg("mpiexec.mpich");
        }
    }
    // Options bind to one app context of an MPMD line: give each context the glue's.
    for (i, c) in contexts.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-np", &c.np.to_string()]);
        cmd.args(glue.args(dir));
        for e in c.env {
            cmd.args(glue.env(e));
        }
        cmd.arg(program(glue, dir)).arg(c.mode);
    }
    cmd.env_remove("PIPECAST_TIMEOUT_MS");
    // One host: pipecast takes every size (its default leaves small ones to the MPI).
    cmd.env("PIPECAST_HOST_MIN_BYTES", "0");
    mpi::timed(&mut cmd)
}

/// [`mpirun`] of one app context: 4 ranks in `mode`, with `env`.
fn four_ranks(glue: Glue, dir: &Path, env: &[&str], mode: &str, limit: u64) -> (Output, Duration) {
    let context = Context { np: 4, env, mode };
    mpirun(glue, dir, &[context], limit)
}

#[test]
fn a_rank_late_by_twenty_seconds_is_waited_for() {
    let _serial = serial();
    let Some(dir) = build() else { return };
    // Blocking broadcasts late by 20 s; MPI_Ibcast + MPI_Wait late by 8 s (still beyond the
    // 5 s timeout; shorter to keep the test quick).
    for (glue, mode, sleep) in glues()
        .into_iter()
        .flat_map(|g| [(g, "late", "20"), (g, "ilate", "8")])
    {
        let sleep = format!("PIPECAST_TEST_SLEEP={sleep}");
        let (out, _) = four_ranks(glue, &dir, &[&sleep], mode, 240);
        let all = mpi::assert_byte_exact(&out, "mpi_fault_test: ok", (glue, mode));
        let stderr = String::from_utf8_lossy(&out.stderr);
        // 8 broadcasts at each of 4 ranks, all large enough for pipecast; of the ibcasts
        // pipecast takes those from pml_below (512 KiB): the 4 MiB ones.
        let want = if mode == "late" { 32 } else { 16 };
        assert_eq!(
            carried(&stderr, glue.marker()),
            want,
            "{glue:?} {mode}: {all}"
        );
    }
}

/// A rank SIGSTOPped mid-broadcast (all its threads, so its progress thread answers nothing)
/// for longer than the timeout is stopped, not gone: the job waits, then every broadcast is
/// byte-exact and carried by pipecast. `PIPECAST_SOAK_STOP_S` sets the stop (default 8 s;
/// `bench/soak.sh` uses 30).
#[test]
fn a_rank_stopped_mid_broadcast_is_waited_for() {
    let _serial = serial();
    let Some(dir) = build() else { return };
    let stop_s: u64 = std::env::var("PIPECAST_SOAK_STOP_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let sleep = format!("PIPECAST_TEST_SLEEP={stop_s}");
    for glue in glues() {
        let (out, took) = four_ranks(glue, &dir, &[&sleep], "stop", stop_s + 180);
        let all = mpi::assert_byte_exact(&out, "mpi_fault_test: ok", glue);
        assert!(took >= Duration::from_secs(stop_s), "{glue:?}: {took:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(carried(&stderr, glue.marker()), 32, "{glue:?}: {all}");
        eprintln!("soak: {glue:?}: a rank stopped for {stop_s} s; the job took {took:?}, every byte right");
    }
}

/// MPMD: three ranks are fine, one has `env` (a bad setting, for each glue; `None`: the glue
/// has no such setting). Every rank must decline together: the MPI's own broadcast carries
/// everything, byte-exact, in seconds, and rank 0 logs `reason`.
fn one_bad_rank(env: impl Fn(Glue) -> Option<&'static str>, reason: &str) {
    let _serial = serial();
    let Some(dir) = build() else { return };
    for glue in glues() {
        let Some(env) = env(glue) else { continue };
        let (out, took) = mpirun(
            glue,
            &dir,
            &[
                Context {
                    np: 3,
                    env: &[],
                    mode: "plain",
                },
                Context {
                    np: 1,
                    env: &[env],
                    mode: "plain",
                },
            ],
            120,
        );
        mpi::assert_declined_together(&out, took, glue.marker(), reason, (glue, env));
    }
}

#[test]
fn one_rank_naming_no_interface_makes_every_rank_decline_together() {
    one_bad_rank(|_| Some("PIPECAST_IFACE=nosuch0"), "nosuch0");
}

#[test]
fn one_rank_unable_to_read_the_topology_makes_every_rank_decline_together() {
    one_bad_rank(
        |glue| match glue {
            Glue::Component => {
                Some("OMPI_MCA_coll_pipecast_topology=/nonexistent/pipecast-topology.json")
            }
            Glue::Shim | Glue::Mpich => {
                Some("PIPECAST_TOPOLOGY=/nonexistent/pipecast-topology.json")
            }
        },
        "pipecast-topology.json",
    );
}

/// The glue's own threshold differs on one rank (it used to decide alone and hang).
#[test]
fn one_rank_with_another_threshold_makes_every_rank_decline_together() {
    one_bad_rank(
        |glue| match glue {
            Glue::Component => Some("OMPI_MCA_coll_pipecast_min_bytes=1000"),
            Glue::Shim | Glue::Mpich => Some("PIPECAST_MIN_BYTES=1000"),
        },
        "ranks differ",
    );
    // A value the shim cannot read (Open MPI itself refuses a bad MCA integer), and one out
    // of range (pipecast_glue_settings_check: the window is 1 to 16).
    one_bad_rank(
        |glue| match glue {
            Glue::Component => Some("OMPI_MCA_coll_pipecast_pml_window=17"),
            Glue::Shim | Glue::Mpich => Some("PIPECAST_PML_BELOW=lots"),
        },
        "unparsable",
    );
}

/// Datatype layouts may differ between ranks (same type signature): contiguous ints at even
/// ranks, a strided vector at odd ones. Every rank takes pipecast's path (the strided ones
/// packed around it), byte-exact.
#[test]
fn ranks_with_different_datatype_layouts_take_one_path() {
    let _serial = serial();
    let Some(dir) = build() else { return };
    for glue in glues() {
        let (out, _) = four_ranks(glue, &dir, &[], "layouts", 120);
        let all = mpi::assert_byte_exact(&out, "mpi_fault_test: ok", glue);
        // Per rank: the loop's 8, then 2 sizes from each of 4 roots.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(carried(&stderr, glue.marker()), 4 * 16, "{glue:?}: {all}");
    }
}

#[test]
fn a_rank_killed_mid_broadcast_ends_the_job_without_wrong_data() {
    let _serial = serial();
    let Some(dir) = build() else { return };
    for (glue, mode) in glues()
        .into_iter()
        .flat_map(|g| [(g, "kill"), (g, "ikill")])
    {
        let (out, took) = four_ranks(glue, &dir, &[], mode, 120);
        mpi::assert_ended_without_wrong_data(&out, took, (glue, mode));
    }
}
