//! Shared by the tests that build a lab with `pipecast lab up` (`lab_discover`, `raweth_comm`,
//! `ompi_lab`, `demo`): running the pipecast binary (as this user or, from root, as `nobody`
//! through `setpriv`: the lab without root), what a lab test lacks here (a skip, or a failure
//! under `PIPECAST_REQUIRE`: tests/common/requirements.rs), and a lab that is taken down when
//! dropped. Each test binary compiles this module on its own, so an item one
//! of them does not use carries `#[allow(dead_code)]`.

use crate::common::requirements::{self, Missing};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[allow(unused_imports)] // lab_rails and mpich_lab run everything through a `User`
pub use crate::common::{pipecast, pipecast_within};
pub use crate::common::{text, EXE};

/// Who runs the pipecast commands of a test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum User {
    /// The user running the tests (root in CI).
    Me,
    /// `nobody` (uid 65534), through `setpriv` from root: labs in a user namespace.
    Nobody,
}

/// Runs `test` as this user and as `nobody` (which needs root: CI), each where it can build a
/// lab here; says why it skips the other, or fails when `PIPECAST_REQUIRE` names what is
/// missing.
#[allow(dead_code)]
pub fn as_each_user(mut test: impl FnMut(User)) {
    for user in [User::Me, User::Nobody] {
        match user.missing() {
            Some(m) => requirements::skip_or_fail(m.kind, format!("as {user:?}: {}", m.reason)),
            None => test(user),
        }
    }
}

impl User {
    /// A command running `program` as this user.
    pub fn command(self, program: &str) -> Command {
        match self {
            User::Me => Command::new(program),
            User::Nobody => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(program)
                    // Its own lab directory (the default, /tmp/pipecast-lab-65534).
                    .env_remove("PIPECAST_LAB_DIR");
                c
            }
        }
    }

    /// Runs `pipecast ARGS` as this user to completion.
    pub fn pipecast(self, args: &[&str]) -> Output {
        self.command(EXE)
            .args(args)
            .output()
            .expect("runs pipecast")
    }

    /// What this user lacks to build a lab here, if anything.
    #[allow(dead_code)] // ompi_lab runs as root only
    pub fn missing(self) -> Option<Missing> {
        match self {
            User::Me => self::missing(),
            User::Nobody => {
                if !pipecast::lab::is_root() {
                    return Some(requirements::missing(
                        "root",
                        "not root: cannot switch to nobody",
                    ));
                }
                let out = self
                    .command("unshare")
                    .args(["--user", "--map-root-user", "--net", "--mount", "true"])
                    .output();
                match out {
                    Err(e) => Some(requirements::missing(
                        "util-linux",
                        format!("setpriv (util-linux) cannot run: {e}"),
                    )),
                    Ok(o) if !o.status.success() => Some(requirements::missing(
                        "userns",
                        format!(
                            "nobody gets no user namespace here: {}",
                            String::from_utf8_lossy(&o.stderr).trim()
                        ),
                    )),
                    Ok(_) => self::missing(),
                }
            }
        }
    }

    /// Lets this user write in `path` (a scratch directory or file made by root).
    pub fn own(self, path: &Path) {
        if self == User::Nobody {
            std::os::unix::fs::chown(path, Some(65_534), Some(65_534)).unwrap();
        }
    }
}

/// Rank 0's JSON report in the output of `lab run … pipecast bench --json` (its lines are
/// prefixed `[r0] `).
#[allow(dead_code)]
pub fn rank0_json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("[r0] ").filter(|j| j.starts_with('{')))
        .unwrap_or_else(|| panic!("no JSON from rank 0: {}", text(out)));
    serde_json::from_str(line).unwrap()
}

/// What this user lacks to build a lab here (a tool, named by its package; without root: user
/// namespaces), if anything.
pub fn missing() -> Option<Missing> {
    use pipecast::lab::LabError;
    requirements::required_kinds();
    match pipecast::lab::require_tools() {
        Ok(()) => None,
        Err(LabError::MissingTool { tool, package }) => {
            let kind = requirements::KINDS
                .iter()
                .map(|(k, _)| *k)
                .find(|k| *k == package)
                .unwrap_or_else(|| panic!("lab tool {tool}'s package {package} is no kind"));
            Some(requirements::missing(
                kind,
                format!("{tool} not installed (apt-get install {package})"),
            ))
        }
        Err(e @ LabError::UserNamespaces(_)) => Some(requirements::missing("userns", e)),
        Err(e) => panic!("pipecast::lab::require_tools: {e}"),
    }
}

/// Returns from the test (skipped, or failed under `PIPECAST_REQUIRE`) when no lab can be
/// built here ([`missing`]), or when one of the optional further `Option<Missing>`
/// expressions (evaluated in order, only if a lab can be built) finds something missing.
macro_rules! require_lab {
    ($($also:expr),* $(,)?) => {
        $crate::common::require!($crate::lab::missing() $(, $also)*)
    };
}
pub(crate) use require_lab;

/// A lab name unique to this test process: `tag` (at most 3 characters, one per test) and
/// the process id, within the 8 characters a lab name may have.
pub fn unique_name(tag: &str) -> String {
    assert!(
        (1..=3).contains(&tag.len()),
        "lab tag {tag:?}: use 1 to 3 characters"
    );
    format!("{tag}{}", std::process::id() % 100_000)
}

/// An empty scratch directory for the lab `name`, under the system temp directory.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pipecast-test-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A lab built by `pipecast lab up` and taken down when dropped, also when the test fails;
/// its scratch directory holds the topology file and whatever the test writes there.
pub struct Lab {
    name: String,
    dir: PathBuf,
    user: User,
}

impl Lab {
    /// `pipecast lab up --name <tag><pid> --topology <dir>/topology.json EXTRA`, with
    /// `topology_json` written to that file; panics when the lab cannot be built.
    #[allow(dead_code)] // lab_rails and mpich_lab build their labs with `up_as`
    pub fn up(tag: &str, topology_json: &str, extra: &[&str]) -> Lab {
        Lab::up_as(User::Me, tag, topology_json, extra)
    }

    /// [`Lab::up`] as `user`, whose commands then run and remove the lab.
    pub fn up_as(user: User, tag: &str, topology_json: &str, extra: &[&str]) -> Lab {
        let name = unique_name(tag);
        let dir = scratch_dir(&name);
        user.own(&dir);
        let lab = Lab { name, dir, user };
        let file = lab.topology_file();
        std::fs::write(&file, topology_json).unwrap();
        let mut args = vec![
            "lab",
            "up",
            "--name",
            &lab.name,
            "--topology",
            file.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = user.pipecast(&args);
        // A failed `up` may leave parts behind: the guard, dropped by the panic, removes them.
        assert!(out.status.success(), "lab up failed: {}", text(&out));
        lab
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    #[allow(dead_code)]
    pub fn user(&self) -> User {
        self.user
    }

    /// The lab's scratch directory.
    #[allow(dead_code)]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The topology file the lab was built from.
    pub fn topology_file(&self) -> PathBuf {
        self.dir.join("topology.json")
    }

    /// `pipecast lab run --name N --timeout 30 -- ARGS`
    #[allow(dead_code)] // ompi_lab starts its ranks with `lab mpirun`
    pub fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["lab", "run", "--name", &self.name, "--timeout", "30", "--"];
        all.extend_from_slice(args);
        self.user.pipecast(&all)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let out = self.user.pipecast(&["lab", "down", "--name", &self.name]);
        // A test may have taken the lab down itself.
        if !out.status.success() && !text(&out).contains("no lab named") {
            eprintln!("lab down {}: {}", self.name, text(&out));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
