//! What a test needs that a machine may lack (root, a tool, an MPI), and `PIPECAST_REQUIRE`,
//! which turns a test's "skipped: no X" into a failure. A test that cannot run here says why
//! and passes, so that `cargo test` passes on a laptop without MPI or root; where everything
//! is meant to be there (CI: `.ci/run` names everything it installs), a missing piece is a
//! broken install, and a test that skips would hide it.
//!
//! `PIPECAST_REQUIRE` is a comma-separated list of the [`KINDS`] (or `all`); an unknown name
//! fails every test that checks a requirement, so a misspelt kind cannot require nothing.

// Each test binary compiles this module on its own and uses a part of it.
#![allow(dead_code)]

use std::fmt::Display;

/// Every kind of thing a test may need and a machine may lack, and what it stands for. The
/// names of tools are their Debian packages (`.ci/run` installs them).
pub const KINDS: &[(&str, &str)] = &[
    (
        "root",
        "running as root: network namespaces, CAP_NET_RAW, labs as root and, through setpriv, \
         running pipecast as `nobody`",
    ),
    (
        "userns",
        "user namespaces: `nobody` (or, without root, this user) gets one of its own, for a \
         lab without root",
    ),
    ("iproute2", "`ip`, `tc`, `ss`"),
    (
        "lldpd",
        "`lldpd` and `lldpcli` (a lab built as root runs them)",
    ),
    ("nftables", "`nft` (tests that drop frames on purpose)"),
    (
        "python3",
        "`python3` (bench scripts a test runs, e.g. the multicast soak's foreign sender)",
    ),
    ("util-linux", "`setpriv`, `unshare`, `nsenter`, `taskset`"),
    ("graphviz", "`dot` (plans drawn as SVG)"),
    ("cc", "a C compiler (`cc`)"),
    ("pkg-config", "`pkg-config`"),
    (
        "openmpi",
        "Open MPI and its development files (`mpicc`, `mpirun`, `ompi_info`, `pkg-config ompi-c`)",
    ),
    (
        "mpich",
        "MPICH and its development files (`mpicc.mpich`, `mpiexec.mpich`)",
    ),
    (
        "ompi5",
        "the Debian 13 root with Open MPI 5 that `bench/ompi5.sh root` makes (root, and the \
         network to the Debian archive once; `.ci/run` makes it)",
    ),
    (
        "mpi4py",
        "python3-mpi4py, and mpi4py 3.1.4's test suite in the directory PIPECAST_MPI4PY_TESTS \
         names (`.ci/run` downloads it)",
    ),
];

/// The environment variable naming the kinds that must be there.
pub const VAR: &str = "PIPECAST_REQUIRE";

/// The kinds `PIPECAST_REQUIRE` names (every kind for `all`). Panics on a name that is not
/// one of the [`KINDS`]: every check below reads it, so that a misspelt kind fails the tests
/// that check anything, not only those that would have skipped.
pub fn required_kinds() -> Vec<&'static str> {
    let names = std::env::var(VAR).unwrap_or_default();
    let mut kinds = Vec::new();
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name == "all" {
            kinds.extend(KINDS.iter().map(|(k, _)| *k));
            continue;
        }
        let kind = KINDS.iter().map(|(k, _)| *k).find(|k| *k == name);
        kinds.push(kind.unwrap_or_else(|| {
            panic!(
                "{VAR}={names}: unknown kind {name:?}; the kinds are all, {} \
                 (tests/common/requirements.rs)",
                KINDS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
            )
        }));
    }
    kinds
}

/// Whether `PIPECAST_REQUIRE` names `kind` (or is `all`). Panics on a name that is not one of
/// the [`KINDS`], in the variable or in `kind`.
pub fn required(kind: &str) -> bool {
    assert!(
        KINDS.iter().any(|(k, _)| *k == kind),
        "the test asks for requirement {kind:?}, which is not in tests/common/requirements.rs KINDS"
    );
    required_kinds().contains(&kind)
}

/// Something a test needs that is missing here: its kind (one of [`KINDS`]) and why.
#[derive(Debug)]
pub struct Missing {
    pub kind: &'static str,
    pub reason: String,
}

/// A [`Missing`] of `kind`, saying `reason`.
pub fn missing(kind: &'static str, reason: impl Display) -> Missing {
    Missing {
        kind,
        reason: reason.to_string(),
    }
}

impl Missing {
    /// Says that the test (or the part of it that needs this) is skipped, or fails the test
    /// when `PIPECAST_REQUIRE` names this kind.
    pub fn skip(self) {
        skip_or_fail(self.kind, self.reason);
    }
}

/// Prints `skipped: REASON`, or panics when `PIPECAST_REQUIRE` names `kind`: what a test
/// calls where it cannot run here, before returning.
pub fn skip_or_fail(kind: &str, reason: impl Display) {
    if required(kind) {
        panic!("{VAR} requires {kind:?}, but: {reason}");
    }
    eprintln!("skipped: {reason}");
}

/// `Some` when this process is not root.
pub fn root() -> Option<Missing> {
    required_kinds();
    (!pipecast::lab::is_root()).then(|| missing("root", "not root"))
}

/// `Some(kind)` when `cmd args` does not run and succeed (`kind`'s tool is not installed).
pub fn tool(kind: &'static str, cmd: &str, args: &[&str]) -> Option<Missing> {
    required(kind);
    (!super::have(cmd, args)).then(|| {
        missing(
            kind,
            format!("{kind} missing: `{cmd} {}` fails", args.join(" ")),
        )
    })
}

/// `Some` when Open MPI's compiler wrapper or development files are missing.
pub fn openmpi() -> Option<Missing> {
    required_kinds();
    (!super::have("mpicc", &["--version"]) || !super::have("pkg-config", &["--exists", "ompi-c"]))
        .then(|| {
            missing(
                "openmpi",
                "Open MPI development files not installed \
                 (apt-get install openmpi-bin libopenmpi-dev pkg-config)",
            )
        })
}

/// `Some` when MPICH (its compiler wrapper and launcher) is missing.
pub fn mpich() -> Option<Missing> {
    required_kinds();
    (!super::have("mpicc.mpich", &["-show"]) || !super::have("mpiexec.mpich", &["--version"])).then(
        || {
            missing(
                "mpich",
                "MPICH not installed (apt-get install mpich libmpich-dev)",
            )
        },
    )
}

/// Returns from the test when the `Option<Missing>` expression says something is missing
/// ([`Missing::skip`]: a failure when `PIPECAST_REQUIRE` names it). Several expressions are
/// checked in order, each only when the ones before it found nothing missing.
#[allow(unused_macros)]
macro_rules! require {
    ($($missing:expr),+ $(,)?) => {
        $(
            if let Some(missing) = $missing {
                missing.skip();
                return;
            }
        )+
    };
}
pub(crate) use require;
