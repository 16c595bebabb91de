//! Shared by the tests that build a lab with `pipecast lab up` (`lab_discover`, `raweth_comm`,
//! `ompi_lab`): running the pipecast binary, the reason a lab test skips, and a lab that is
//! taken down when dropped. Each test binary compiles this module on its own, so an item one
//! of them does not use carries `#[allow(dead_code)]`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The pipecast binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_pipecast");

/// Runs `pipecast ARGS` to completion.
pub fn pipecast(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .output()
        .expect("runs pipecast")
}

/// Status, stdout and stderr of a finished command, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Why no lab can be built here (not root, or one of the lab's tools missing), if so.
pub fn skip_reason() -> Option<String> {
    if !pipecast::lab::is_root() {
        return Some("not root".into());
    }
    if let Err(e) = pipecast::lab::require_tools() {
        return Some(e.to_string());
    }
    None
}

/// Returns from the test, saying why, when no lab can be built here ([`skip_reason`]) or when
/// the optional `Option<String>` expression, evaluated only if a lab can be built, gives a
/// reason (a further tool the test needs).
macro_rules! require_lab {
    () => {
        if let Some(reason) = $crate::lab::skip_reason() {
            eprintln!("skipping: {reason}");
            return;
        }
    };
    ($also:expr) => {
        if let Some(reason) = $crate::lab::skip_reason().or_else(|| $also) {
            eprintln!("skipping: {reason}");
            return;
        }
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
}

impl Lab {
    /// `pipecast lab up --name <tag><pid> --topology <dir>/topology.json EXTRA`, with
    /// `topology_json` written to that file; panics when the lab cannot be built.
    pub fn up(tag: &str, topology_json: &str, extra: &[&str]) -> Lab {
        let name = unique_name(tag);
        let dir = scratch_dir(&name);
        let lab = Lab { name, dir };
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
        let out = pipecast(&args);
        // A failed `up` may leave parts behind: the guard, dropped by the panic, removes them.
        assert!(out.status.success(), "lab up failed: {}", text(&out));
        lab
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lab's scratch directory.
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
        pipecast(&all)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let out = pipecast(&["lab", "down", "--name", &self.name]);
        // A test may have taken the lab down itself.
        if !out.status.success() && !text(&out).contains("no lab named") {
            eprintln!("lab down {}: {}", self.name, text(&out));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
