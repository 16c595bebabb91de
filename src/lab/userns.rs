//! A lab without root (LAB.md "Without root"): a user namespace with its own network and mount
//! namespaces owns the lab's namespaces.
//!
//! `lab up` run by an ordinary user starts a *keeper*: util-linux `unshare --user
//! --map-root-user --net --mount` around a shell that mounts a private tmpfs on `/run/netns`
//! (or on `/run` where that directory does not exist: `ip netns add` must make it a shared
//! mount, which only its owner may) and then sleeps. Every later command of the lab — `ip`,
//! `tc`, the ranks of `lab run` — enters the keeper's namespaces with `nsenter
//! --preserve-credentials` (the user's own uid is root there; `setgroups` is refused in such a
//! namespace, so nsenter must not switch credentials) and `--wd=.`, in the caller's working
//! directory (entering a mount namespace moves a process to its root). The lab lives as long
//! as the keeper and the processes in it; `lab down` ends them all.
//!
//! lldpd does not run there: its privilege separation drops to user `_lldpd` with
//! `setgroups()`, which the kernel refuses in a user namespace whose group map an unprivileged
//! process wrote (`/proc/PID/setgroups` is `deny`), and Debian's `lldpcli` is setuid `_lldpd`,
//! executable only by root and group `adm`. A rootless lab is therefore built without lldpd;
//! discovery over LLDP needs a lab built by root.

use super::command::find_tool;
use super::LabError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};

/// Who owns a lab's namespaces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Owner {
    /// The machine's own namespaces (the lab was built by root).
    #[default]
    Root,
    /// A user namespace held by the keeper process `keeper`, started at `started` (clock
    /// ticks since boot, field 22 of /proc/PID/stat: a reused pid does not pass for it).
    UserNamespace { keeper: u32, started: u64 },
}

/// Why a rootless lab has no lldpd (see the module documentation).
pub const NO_LLDPD: &str = "lldpd cannot run in a lab built without root: its privilege \
separation calls setgroups(), which the kernel refuses in an unprivileged user namespace, and \
lldpcli is setuid _lldpd; build the lab as root to discover it over LLDP";

impl Owner {
    /// A command running `program` in the owner's namespaces (before any `ip netns exec`).
    pub fn command(&self, program: &Path) -> Command {
        match self {
            Owner::Root => Command::new(program),
            Owner::UserNamespace { keeper, .. } => {
                let mut c = Command::new(find_tool("nsenter").unwrap_or_else(|| "nsenter".into()));
                c.arg(format!("--target={keeper}"));
                // Already in it (a launcher inside the lab calling back, as MPICH's hydra
                // calls `lab rsh`): entering one's own user namespace again is refused, and
                // its root may enter the keeper's network and mount namespaces directly (`ip
                // netns exec` gave this process a mount namespace of its own).
                if !in_user_namespace_of(*keeper) {
                    c.args(["--user", "--preserve-credentials"]);
                }
                // Entering the mount namespace moves the process to its root, `/`, which broke
                // every relative path of `lab run -- ./pipecast bench --topology t.json`
                // (issue 28). nsenter opens `--wd`'s directory before it enters and changes to
                // it after: the caller's own directory, also where the keeper's mounts differ.
                c.args(["--net", "--mount", "--wd=.", "--"]).arg(program);
                c
            }
        }
    }

    /// Whether lldpd can run in the lab.
    pub fn runs_lldpd(&self) -> bool {
        matches!(self, Owner::Root)
    }

    /// Whether the namespaces still exist: always for root; for a user namespace, while its
    /// keeper runs.
    pub fn alive(&self) -> bool {
        match *self {
            Owner::Root => true,
            Owner::UserNamespace { keeper, started } => {
                process_start(keeper).is_some_and(|(s, zombie)| s == started && !zombie)
            }
        }
    }

    /// Ends the keeper (after the lab's processes and namespaces are gone, the user namespace
    /// goes with it).
    pub fn stop(&self) {
        if let Owner::UserNamespace { keeper, .. } = *self {
            if self.alive() {
                super::command::kill(&[keeper], "KILL");
                // A killed process needs a moment to exit.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while self.alive() && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
    }
}

/// Whether this process already runs in `keeper`'s user namespace.
fn in_user_namespace_of(keeper: u32) -> bool {
    let mine = std::fs::read_link("/proc/self/ns/user");
    let theirs = std::fs::read_link(format!("/proc/{keeper}/ns/user"));
    matches!((mine, theirs), (Ok(a), Ok(b)) if a == b)
}

/// Start time (clock ticks after boot) of process `pid` and whether it is a zombie.
fn process_start(pid: u32) -> Option<(u64, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); starttime is field 22.
    let zombie = fields.first().is_some_and(|s| *s == "Z" || *s == "X");
    Some((fields.get(19)?.parse().ok()?, zombie))
}

/// The keeper's shell script: a private tmpfs for `ip netns`, then sleep until killed.
const KEEPER: &str = "mount -t tmpfs -o mode=755 pipecast-lab /run/netns 2>/dev/null || \
{ mount -t tmpfs -o mode=755 pipecast-lab /run && mkdir /run/netns; } || exit 1; \
echo ready; exec sleep infinity </dev/null >/dev/null 2>&1";

/// Starts a keeper: a user namespace with its own network and mount namespaces, ready for
/// `ip netns add`. On failure the error names the setting that refuses user namespaces.
pub fn start_keeper() -> Result<Owner, LabError> {
    let unshare = find_tool("unshare").ok_or_else(|| LabError::MissingTool {
        tool: "unshare".into(),
        package: "util-linux".into(),
    })?;
    let mut child = std::os::unix::process::CommandExt::process_group(
        Command::new(unshare)
            .args([
                "--user",
                "--map-root-user",
                "--net",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                KEEPER,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        // Its own process group: a terminal's Ctrl-C reaches `lab up`, which tears down.
        0,
    )
    .spawn()
    .map_err(|e| LabError::Command(format!("cannot run unshare: {e}")))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    if line.trim() != "ready" {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let _ = child.kill();
        let _ = child.wait();
        return Err(LabError::UserNamespaces(refusal_message(
            err.trim(),
            &current_settings(),
        )));
    }
    let keeper = child.id();
    let started = process_start(keeper)
        .map(|(s, _)| s)
        .ok_or_else(|| LabError::Command("the lab's user namespace ended at once".into()))?;
    // Reap the keeper when it is killed (a long-lived caller such as `pipecast demo` would
    // otherwise keep a zombie).
    std::thread::spawn(move || child.wait());
    Ok(Owner::UserNamespace { keeper, started })
}

/// Why this machine refuses an ordinary user a user namespace, if it does (one `unshare`).
pub fn refusal() -> Option<String> {
    let unshare = find_tool("unshare")?;
    let out = Command::new(unshare)
        .args(["--user", "--map-root-user", "--net", "--mount", "true"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(refusal_message(
            String::from_utf8_lossy(&o.stderr).trim(),
            &current_settings(),
        )),
        Err(e) => Some(refusal_message(&e.to_string(), &current_settings())),
    }
}

/// The kernel settings that can refuse unprivileged user namespaces: (sysctl, value that
/// allows them, value that refuses them).
const SETTINGS: [(&str, &str, &str); 3] = [
    // Debian's and older Ubuntu kernels.
    ("kernel.unprivileged_userns_clone", "1", "0"),
    // Ubuntu 23.10 and later (AppArmor).
    ("kernel.apparmor_restrict_unprivileged_userns", "0", "1"),
    // Any kernel: 0 namespaces allowed.
    ("user.max_user_namespaces", "15000", "0"),
];

/// The values of [`SETTINGS`] on this machine (absent ones left out).
fn current_settings() -> Vec<(String, String)> {
    SETTINGS
        .iter()
        .filter_map(|(name, _, _)| {
            let path = format!("/proc/sys/{}", name.replace('.', "/"));
            let value = std::fs::read_to_string(path).ok()?;
            Some((name.to_string(), value.trim().to_string()))
        })
        .collect()
}

/// The error when `unshare` failed with `why`, naming the setting among `settings` (name,
/// value) that refuses user namespaces, or all candidates when none does visibly.
fn refusal_message(why: &str, settings: &[(String, String)]) -> String {
    let blocking: Vec<String> = SETTINGS
        .iter()
        .filter(|(name, _, refuses)| settings.iter().any(|(n, v)| n == name && v == refuses))
        .map(|(name, allows, _)| format!("sysctl -w {name}={allows}"))
        .collect();
    let fix = if blocking.is_empty() {
        let all: Vec<String> = SETTINGS
            .iter()
            .map(|(name, allows, _)| format!("{name}={allows}"))
            .collect();
        format!(
            "check the settings that can refuse them ({}), an AppArmor or seccomp profile, or a \
             container that forbids them",
            all.join(", ")
        )
    } else {
        format!("as root, allow them with `{}`", blocking.join("` and `"))
    };
    let why = if why.is_empty() { "refused" } else { why };
    format!(
        "the lab without root needs unprivileged user namespaces, and this machine refuses them \
         ({why}): {fix}; or run the lab as root"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn refusals_name_the_setting_to_change() {
        let m = refusal_message(
            "unshare: unshare failed: Operation not permitted",
            &set(&[("kernel.apparmor_restrict_unprivileged_userns", "1")]),
        );
        assert!(
            m.contains("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
            "{m}"
        );
        assert!(m.contains("Operation not permitted"), "{m}");
        let m = refusal_message(
            "",
            &set(&[
                ("kernel.unprivileged_userns_clone", "0"),
                ("user.max_user_namespaces", "63000"),
            ]),
        );
        assert!(
            m.contains("sysctl -w kernel.unprivileged_userns_clone=1"),
            "{m}"
        );
        assert!(!m.contains("max_user_namespaces"), "{m}");
        let m = refusal_message("x", &set(&[("user.max_user_namespaces", "0")]));
        assert!(m.contains("user.max_user_namespaces=15000"), "{m}");
        // Nothing visibly refuses: every candidate is named.
        let m = refusal_message("x", &set(&[("user.max_user_namespaces", "63000")]));
        assert!(m.contains("kernel.unprivileged_userns_clone=1"), "{m}");
        assert!(m.contains("apparmor_restrict_unprivileged_userns=0"), "{m}");
        assert!(m.contains("run the lab as root"), "{m}");
    }

    #[test]
    fn start_time_of_this_process() {
        let (start, zombie) = process_start(std::process::id()).unwrap();
        assert!(start > 0 && !zombie);
        assert!(Owner::Root.alive());
        let gone = Owner::UserNamespace {
            keeper: std::process::id(),
            started: start + 1,
        };
        assert!(!gone.alive());
    }

    #[test]
    fn a_process_inside_the_keepers_user_namespace_does_not_enter_it_again() {
        let me = std::process::id();
        assert!(in_user_namespace_of(me));
        assert!(!in_user_namespace_of(u32::MAX));
        let owner = Owner::UserNamespace {
            keeper: me,
            started: 0,
        };
        let cmd = owner.command(Path::new("ip"));
        let args: Vec<_> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                format!("--target={me}"),
                "--net".into(),
                "--mount".into(),
                "--wd=.".into(),
                "--".into(),
                "ip".into()
            ]
        );
    }

    #[test]
    fn owner_round_trips_through_json() {
        let o = Owner::UserNamespace {
            keeper: 7,
            started: 9,
        };
        let text = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<Owner>(&text).unwrap(), o);
        assert_eq!(
            serde_json::from_str::<Owner>(r#"{"kind": "root"}"#).unwrap(),
            Owner::Root
        );
    }
}
