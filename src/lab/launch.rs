//! `lab run`, `lab exec` and `lab lldp`: using a built lab.

use super::command;
use super::state::{LabState, MachineState};
use super::userns::Owner;
use super::LabError;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to run a command on every machine.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Deadline for all ranks together; the rest are killed when it passes.
    pub timeout: Duration,
    /// TCP port of the rendezvous on rank 0's data address.
    pub port: u16,
    /// Set (e.g. by a Ctrl-C handler) to kill every rank now. Ranks run in their own process
    /// groups, so a terminal's Ctrl-C reaches only us.
    pub interrupted: Option<Arc<AtomicBool>>,
    /// Ranks per machine: rank r runs on machine r / K ([`super::block`]); `None`: the
    /// `ranks` of the topology file the lab was built from (1 where it gives none), machine
    /// 0's ranks first ([`super::fill`]).
    pub ranks_per_machine: Option<usize>,
    /// Show rank 0's output as its own (no `[r0] ` prefix) and drop the other ranks' standard
    /// output (their errors still show, prefixed): for a job whose rank 0 reports for all.
    pub rank0_only: bool,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            timeout: Duration::from_secs(60),
            port: 47_800,
            interrupted: None,
            ranks_per_machine: None,
            rank0_only: false,
        }
    }
}

/// How one rank ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RankOutcome {
    pub rank: usize,
    pub machine: String,
    /// Exit code; `None` if killed by a signal (or by the deadline).
    pub code: Option<i32>,
    pub timed_out: bool,
}

impl RankOutcome {
    pub fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }
}

/// A command on machine `m`, to which the caller adds the program and its arguments: in its
/// network namespace (`ip netns exec`) and in a host-name (UTS) namespace of its own whose
/// host name is the machine's name, as on a real cluster; or why the lab cannot be used.
/// The host name matters to MPIs that tell machines apart by it: with one name for all,
/// Open MPI 5's node-local communicators disagree between ranks and `coll/han` hangs.
pub(super) fn machine_exec(state: &LabState, m: &MachineState) -> Result<Command, LabError> {
    if !state.owner.alive() {
        return Err(LabError::Gone(state.name.clone()));
    }
    let mut c = command::command(&state.owner, "ip")?;
    c.args([
        "netns", "exec", &m.netns, "unshare", "--uts", "--", "sh", "-c",
    ])
    // `hostname` (Debian's essential package) calls sethostname(2), which the namespace's
    // owner may do without root; /proc/sys/kernel/hostname refuses an unprivileged lab.
    .args([r#"hostname "$0" && exec "$@""#, &m.name]);
    Ok(c)
}

/// The environment of rank `rank` of `placed.len()`, running on machine `placed[rank]`
/// ([`super::block`]): `PIPECAST_RANK`, `PIPECAST_SIZE`, `PIPECAST_RENDEZVOUS` (rank 0's data
/// address and `port`), `PIPECAST_MACHINE`, `PIPECAST_LAB` and (unless set)
/// `PIPECAST_LINK_RATE`, the machine's shaped rate. Ranks on one machine share
/// its name and address, so pipecast groups them as one host (two-level plans).
pub fn rank_env(
    state: &LabState,
    placed: &[usize],
    rank: usize,
    port: u16,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("PIPECAST_RANK".into(), rank.to_string()),
        ("PIPECAST_SIZE".into(), placed.len().to_string()),
        (
            "PIPECAST_RENDEZVOUS".into(),
            format!("{}:{port}", state.machines[placed[0]].address),
        ),
        (
            "PIPECAST_MACHINE".into(),
            state.machines[placed[rank]].name.clone(),
        ),
        ("PIPECAST_LAB".into(), state.name.clone()),
    ];
    env.extend(state.link_rate_env(placed[rank]));
    // A machine with several NICs listens on each (one per rail), unless the caller chose.
    if let Some(iface) = state.machines[placed[rank]].iface() {
        if crate::comm::Settings::from_env().iface.is_none() {
            env.push(("PIPECAST_IFACE".into(), iface));
        }
    }
    env
}

/// Copies a child's output line by line to ours (to nowhere when `drop`), each line prefixed
/// with `prefix` (e.g. `[rN] `).
fn forward(
    from: impl std::io::Read + Send + 'static,
    prefix: String,
    to_stderr: bool,
    drop: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if drop {
                continue;
            }
            if to_stderr {
                let _ = writeln!(std::io::stderr().lock(), "{prefix}{line}");
            } else {
                let _ = writeln!(std::io::stdout().lock(), "{prefix}{line}");
            }
        }
    })
}

fn kill_group(child: &Child) {
    // Each rank leads its own process group, so its children go too.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
}

/// Runs `cmd` once per rank — `opts.ranks_per_machine` in every machine namespace, rank r on
/// machine r / K ([`super::block`]), or the topology file's `ranks` in each ([`super::fill`])
/// — and waits for all of them, printing each rank's output
/// prefixed `[rN]`. Ranks still running at the deadline are killed.
pub fn run(
    state: &LabState,
    cmd: &[String],
    opts: &RunOptions,
) -> Result<Vec<RankOutcome>, LabError> {
    if cmd.is_empty() {
        return Err(LabError::Command(
            "no command given: write `pipecast lab run --name N -- CMD ARGS…`".into(),
        ));
    }
    let placed = super::fill(&super::machine_ranks(state, opts.ranks_per_machine)?)?;
    let mut children = Vec::with_capacity(placed.len());
    let mut pumps = Vec::new();
    for (rank, &machine) in placed.iter().enumerate() {
        let m = &state.machines[machine];
        let spawned = machine_exec(state, m)?
            .args(cmd)
            .envs(rank_env(state, &placed, rank, opts.port))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                for c in &children {
                    kill_group(c);
                }
                return Err(LabError::Command(format!("cannot start rank {rank}: {e}")));
            }
        };
        let prefix = if opts.rank0_only && rank == 0 {
            String::new()
        } else {
            format!("[r{rank}] ")
        };
        let quiet = opts.rank0_only && rank != 0;
        if let Some(out) = child.stdout.take() {
            pumps.push(forward(out, prefix.clone(), false, quiet));
        }
        if let Some(err) = child.stderr.take() {
            pumps.push(forward(err, prefix, true, false));
        }
        children.push(child);
    }
    let deadline = Instant::now() + opts.timeout;
    let mut codes: Vec<Option<Option<i32>>> = vec![None; children.len()];
    let mut timed_out = false;
    while codes.iter().any(Option::is_none) {
        for (code, child) in codes.iter_mut().zip(children.iter_mut()) {
            if code.is_none() {
                if let Ok(Some(status)) = child.try_wait() {
                    *code = Some(status.code());
                }
            }
        }
        if Instant::now() > deadline {
            timed_out = true;
            break;
        }
        if opts
            .interrupted
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut outcomes = Vec::with_capacity(children.len());
    for (rank, (code, mut child)) in codes.into_iter().zip(children).enumerate() {
        let late = code.is_none();
        let code = match code {
            Some(c) => c,
            None => {
                kill_group(&child);
                child.wait().ok().and_then(|s| s.code())
            }
        };
        outcomes.push(RankOutcome {
            rank,
            machine: state.machines[placed[rank]].name.clone(),
            code,
            timed_out: late && timed_out,
        });
    }
    for p in pumps {
        let _ = p.join();
    }
    Ok(outcomes)
}

/// Runs `cmd` in one machine's namespace with the terminal attached (`PIPECAST_MACHINE` and
/// `PIPECAST_LAB` set, no rank variables); returns its exit code.
pub fn exec(state: &LabState, machine: &str, cmd: &[String]) -> Result<i32, LabError> {
    let rank = state
        .machines
        .iter()
        .position(|m| m.name == machine)
        .ok_or_else(|| LabError::NoSuchMachine {
            lab: state.name.clone(),
            machine: machine.into(),
            known: state
                .machines
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    if cmd.is_empty() {
        return Err(LabError::Command(
            "no command given: write `pipecast lab exec --name N MACHINE -- CMD ARGS…`".into(),
        ));
    }
    let status = machine_exec(state, &state.machines[rank])?
        .args(cmd)
        // Not a job: only the machine's identity (a lone PIPECAST_RANK would make pipecast
        // wait for the other ranks).
        .env("PIPECAST_MACHINE", &state.machines[rank].name)
        .env("PIPECAST_LAB", &state.name)
        .status()
        .map_err(|e| LabError::Command(format!("cannot run {}: {e}", cmd[0])))?;
    Ok(status.code().unwrap_or(128))
}

/// Writes each switch's `lldpcli -f json0 show neighbors` to `dir/<switch>.json`; returns the
/// files written.
pub fn lldp_dump(state: &LabState, dir: &Path) -> Result<Vec<std::path::PathBuf>, LabError> {
    if !state.owner.runs_lldpd() {
        return Err(LabError::NoLldpd(state.name.clone()));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::Io(format!("cannot create {}: {e}", dir.display())))?;
    let mut written = Vec::new();
    for s in &state.switches {
        let out = command::run(
            &Owner::Root,
            "lldpcli",
            &["-u", &s.lldp_socket, "-f", "json0", "show", "neighbors"],
        )?;
        let path = dir.join(format!("{}.json", s.name));
        std::fs::write(&path, out)
            .map_err(|e| LabError::Io(format!("cannot write {}: {e}", path.display())))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_environment() {
        let state = crate::lab::state::sample_state();
        let env = rank_env(&state, &[0, 1], 1, 4000);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("PIPECAST_RANK").as_deref(), Some("1"));
        assert_eq!(get("PIPECAST_SIZE").as_deref(), Some("2"));
        assert_eq!(
            get("PIPECAST_RENDEZVOUS").as_deref(),
            Some("198.18.0.1:4000")
        );
        assert_eq!(get("PIPECAST_MACHINE").as_deref(), Some("h1"));
        // Three ranks per machine: rank 4 is machine h1's second.
        let placed = crate::lab::block(2, 3).unwrap();
        let env = rank_env(&state, &placed, 4, 4000);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("PIPECAST_SIZE").as_deref(), Some("6"));
        assert_eq!(get("PIPECAST_MACHINE").as_deref(), Some("h1"));
        assert_eq!(
            get("PIPECAST_RENDEZVOUS").as_deref(),
            Some("198.18.0.1:4000")
        );
    }

    #[test]
    fn empty_commands_are_refused() {
        let state = crate::lab::state::sample_state();
        assert!(run(&state, &[], &RunOptions::default()).is_err());
        let zero = RunOptions {
            ranks_per_machine: Some(0),
            ..RunOptions::default()
        };
        let e = run(&state, &["true".into()], &zero)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--ranks-per-machine 0"), "{e}");
        let e = exec(&state, "h7", &["true".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("h0, h1"), "{e}");
    }
}
