//! MPI on the lab (LAB.md "MPI ranks inside host namespaces"). Open MPI: mpirun runs in the
//! management namespace, reaches every machine over `mgmt0` and starts one orted per machine
//! through [`rsh`] (its `plm_rsh_agent`), so each rank talks to a local orted; MPI traffic is
//! pinned to the shaped data network (`btl tcp,self`, `btl_tcp_if_include 198.18.0.0/16`).
//! MPICH: hydra's mpiexec runs in the management namespace the same way, its proxies started
//! through [`rsh`] (`-launcher rsh -launcher-exec`, a script in the run directory) and dialing
//! back over the management bridge (`-iface br0`); UCX is pinned to the data NIC
//! (`UCX_NET_DEVICES=eth0`, `UCX_TLS=tcp,self`).
//! Open MPI 5 (issue 31): Debian 12 has none, so mpirun runs inside the Debian 13 root that
//! `bench/ompi5.sh root` makes ([`ompi5_root`]), entered through a script in the run directory
//! ([`ompi5_enter_script`]: a private mount namespace, the host's /run, /tmp, /dev, the working
//! directory and this program's directory bound at the same paths, then chroot). Everything it
//! starts — `pipecast lab rsh` (PRRTE's `plm_ssh_agent`), the prted daemons, the ranks —
//! inherits the root; so the program must be built for it (the root's `mpicc`).

use super::command::find_tool;
use super::state::LabState;
use super::LabError;
use std::path::{Path, PathBuf};

/// Which MPI `lab mpirun` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mpi {
    /// Open MPI's `mpirun` (Debian's `openmpi-bin`).
    #[default]
    OpenMpi,
    /// MPICH's hydra `mpiexec.mpich` (Debian's `mpich`).
    Mpich,
    /// Open MPI 5's `mpirun` (PRRTE) inside the Debian 13 root of `bench/ompi5.sh`.
    OpenMpi5,
}

/// Where `bench/ompi5.sh` keeps the Debian 13 root with Open MPI 5: `PIPECAST_OMPI5_ROOT`,
/// else `${XDG_CACHE_HOME:-~/.cache}/pipecast/ompi5-root`. It is ready when it holds
/// `.pipecast-ready`.
pub fn ompi5_root() -> PathBuf {
    if let Some(root) = crate::comm::settings::ompi5_root() {
        return root;
    }
    crate::comm::settings::cache_home()
        .unwrap_or_else(|| PathBuf::from("/root/.cache"))
        .join("pipecast")
        .join("ompi5-root")
}

/// Finds the machine by name, data address or management address.
fn machine_index(state: &LabState, host: &str) -> Result<usize, LabError> {
    state
        .machines
        .iter()
        .position(|m| m.name == host || m.address == host || m.mgmt_address == host)
        .ok_or_else(|| LabError::NoSuchMachine {
            lab: state.name.clone(),
            machine: host.into(),
            known: state
                .machines
                .iter()
                .map(|m| format!("{} ({})", m.name, m.mgmt_address))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Runs a command line on a machine as ssh would: the words joined by spaces, run by `sh -c`
/// in the machine's namespace with our stdin/stdout/stderr. Returns the exit code.
pub fn rsh(state: &LabState, host: &str, command: &[String]) -> Result<i32, LabError> {
    let machine = machine_index(state, host)?;
    let status = super::launch::machine_exec(state, &state.machines[machine])?
        .args(["sh", "-c", &command.join(" ")])
        .envs(state.link_rate_env(machine))
        .env("OMPI_MCA_orte_tmpdir_base", session_base(state, host))
        .env("TMPDIR", session_base(state, host))
        .env("PIPECAST_MACHINE", machine_name(state, host))
        .status()
        .map_err(|e| LabError::Command(format!("cannot run the command on {host}: {e}")))?;
    Ok(status.code().unwrap_or(255))
}

/// The machine a host argument (name, data or management address) names; the argument itself
/// when none does. The orted and its ranks get it as `PIPECAST_MACHINE`, which pipecast uses
/// to place ranks on the topology's machines.
fn machine_name<'a>(state: &'a LabState, host: &'a str) -> &'a str {
    state
        .machines
        .iter()
        .find(|m| m.name == host || m.address == host || m.mgmt_address == host)
        .map_or(host, |m| m.name.as_str())
}

/// Open MPI's session-directory base for one machine (or `mg` for mpirun): the machines share
/// one /tmp, and orteds whose host names were alike (before each machine had its own,
/// [`super::launch::machine_exec`]) collided in `<base>/ompi.<hostname>.<uid>/…`
/// ("orte_session_dir failed … File exists") and the launch hung. A base per machine keeps
/// each machine's session files apart, whatever its name.
fn session_base(state: &LabState, machine: &str) -> String {
    Path::new(&state.run_dir)
        .join("ompi")
        .join(machine_name(state, machine))
        .display()
        .to_string()
}

/// Writes `<run dir>/hostfile`: one management address per machine with its `slots` (one
/// count per machine, [`super::machine_ranks`]), in rank order (so mpirun's default by-slot
/// mapping puts machine 0's ranks first, then machine 1's: the lab's block placement,
/// [`super::fill`]).
pub fn hostfile(state: &LabState, slots: &[usize]) -> Result<std::path::PathBuf, LabError> {
    write_hostfile(state, "hostfile", slots, |address, k| {
        format!("{address} slots={k}\n")
    })
}

/// Writes `<run dir>/NAME`: a line per machine, in rank order, of its management address and
/// its count of `slots` as `line` writes them.
fn write_hostfile(
    state: &LabState,
    name: &str,
    slots: &[usize],
    line: impl Fn(&str, usize) -> String,
) -> Result<PathBuf, LabError> {
    let text: String = state
        .machines
        .iter()
        .zip(slots)
        .map(|(m, &k)| line(&m.mgmt_address, k))
        .collect();
    write_run_file(state, name, &text, 0o644)
}

/// The mpirun command line for the lab (without the user's arguments).
pub fn mpirun_command(state: &LabState, exe: &Path, hostfile: &Path) -> Vec<String> {
    let agent = format!("{} lab rsh --name {}", exe.display(), state.name);
    mpirun_line(state, &agent, hostfile, None)
}

/// Open MPI's mpirun line for the lab: run from the management namespace, starting its daemons
/// through `agent` over the management network (one hop each, no tree), MPI data over the TCP
/// BTL on the data networks. `ompi5_enter`: Open MPI 5's mpirun, entered into its root through
/// that script, which PRRTE launches (its own names for the launcher's settings) and binds to
/// no CPU; `None`: Open MPI 4's (ORTE).
fn mpirun_line(
    state: &LabState,
    agent: &str,
    hostfile: &Path,
    ompi5_enter: Option<&Path>,
) -> Vec<String> {
    let (set, plm) = match ompi5_enter {
        Some(_) => ("--prtemca", "plm_ssh"),
        None => ("--mca", "plm_rsh"),
    };
    let mut cmd: Vec<String> = vec!["ip".into(), "netns".into(), "exec".into()];
    cmd.push(state.mgmt_netns.clone());
    cmd.extend(ompi5_enter.map(|e| e.display().to_string()));
    cmd.extend(
        [
            "mpirun",
            "--allow-run-as-root",
            "--hostfile",
            &hostfile.display().to_string(),
            set,
            &format!("{plm}_agent"),
            agent,
            set,
            &format!("{plm}_no_tree_spawn"),
            "1",
            set,
            "oob_tcp_if_include",
            "198.19.0.0/16",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    if ompi5_enter.is_some() {
        cmd.extend(["--bind-to".into(), "none".into()]);
    }
    cmd.extend(
        ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include"]
            .iter()
            .map(|s| s.to_string()),
    );
    cmd.push(data_networks(state));
    cmd.extend(["-x".into(), "PIPECAST_LAB".into()]);
    cmd
}

/// Every data NIC's network, for `btl_tcp_if_include`: on a lab with rails the TCP BTL stripes
/// over them (10.i.0.0/16 is rail i's network, `build::rail_address`).
fn data_networks(state: &LabState) -> String {
    let rails = state.machines.first().map_or(0, |m| m.rails.len());
    let nets: Vec<String> = std::iter::once("198.18.0.0/16".to_string())
        .chain((1..=rails).map(|r| format!("10.{r}.0.0/16")))
        .collect();
    nets.join(",")
}

/// Writes `<run dir>/hostfile-mpich`: `ADDRESS:K` per machine (management addresses), in
/// rank order, as hydra reads it.
fn mpich_hostfile(state: &LabState, slots: &[usize]) -> Result<PathBuf, LabError> {
    write_hostfile(state, "hostfile-mpich", slots, |address, k| {
        format!("{address}:{k}\n")
    })
}

/// Writes `<run dir>/lab-rsh`: hydra's `-launcher-exec` and PRRTE's `plm_ssh_agent` take one
/// program, not a command line (PRRTE keeps the first word), so this script runs `pipecast lab
/// rsh` (and names the lab directory: inside a rootless lab's user namespace the default would
/// be root's).
fn rsh_script(state: &LabState, exe: &Path) -> Result<PathBuf, LabError> {
    let root = super::state::run_root();
    let text = format!(
        "#!/bin/sh\nPIPECAST_LAB_DIR={} exec {} lab rsh --name {} \"$@\"\n",
        shell_quote(&root.display().to_string()),
        shell_quote(&exe.display().to_string()),
        shell_quote(&state.name),
    );
    write_run_file(state, "lab-rsh", &text, 0o755)
}

/// `text` quoted for sh.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn write_run_file(
    state: &LabState,
    name: &str,
    text: &str,
    mode: u32,
) -> Result<PathBuf, LabError> {
    use std::os::unix::fs::PermissionsExt;
    let path = Path::new(&state.run_dir).join(name);
    std::fs::write(&path, text)
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)))
        .map_err(|e| LabError::Io(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

/// The `mpiexec.mpich` command line for the lab (without the user's arguments).
pub fn mpiexec_command(state: &LabState, rsh: &Path, hostfile: &Path) -> Vec<String> {
    [
        "ip",
        "netns",
        "exec",
        &state.mgmt_netns,
        "mpiexec.mpich",
        "-iface",
        "br0",
        "-launcher",
        "rsh",
        "-launcher-exec",
        &rsh.display().to_string(),
        "-f",
        &hostfile.display().to_string(),
        "-genv",
        "UCX_NET_DEVICES",
        "eth0",
        "-genv",
        "UCX_TLS",
        "tcp,self",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs `mpi`'s launcher with the lab's settings and the user's arguments, `per_machine` slots
/// on every machine, or without it the topology file's `ranks` ([`super::machine_ranks`];
/// `-np`/`-n` defaults to all of them, machine 0's ranks first); returns the launcher's exit
/// code.
pub fn mpirun_with(
    mpi: Mpi,
    state: &LabState,
    exe: &Path,
    args: &[String],
    per_machine: Option<usize>,
) -> Result<i32, LabError> {
    match mpi {
        Mpi::OpenMpi => mpirun(state, exe, args, per_machine),
        Mpi::Mpich => mpiexec_mpich(state, exe, args, per_machine),
        Mpi::OpenMpi5 => mpirun_ompi5(state, exe, args, per_machine),
    }
}

/// Writes `<run dir>/ompi5-enter`: runs its arguments inside `root` (module comment), in the
/// caller's working directory.
fn ompi5_enter_script(state: &LabState, root: &Path, exe: &Path) -> Result<PathBuf, LabError> {
    let exe_dir = exe.parent().unwrap_or(Path::new("/"));
    let text = format!(
        r#"#!/bin/sh
# Runs "$@" inside the Open MPI 5 root (pipecast lab mpirun --mpi ompi5): a private mount
# namespace, the host's /run, /tmp, /dev and /sys, the working directory, pipecast's directory
# and $PIPECAST_OMPI5_BIND bound at the same paths, then chroot.
exec unshare --mount --propagation private -- sh -ec '
root=$1; exe_dir=$2; shift 2
# The root a mount point of its own: `ip netns exec` inside it remounts / (make-rslave).
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
for d in /run /tmp "$PWD" "$exe_dir" $PIPECAST_OMPI5_BIND; do
  mkdir -p "$root$d" && mount --rbind "$d" "$root$d"
done
exec chroot "$root" sh -c "cd "\$0" && exec "\$@"" "$PWD" "$@"
' sh {root} {exe_dir} "$@"
"#,
        exe_dir = shell_quote(&exe_dir.display().to_string()),
        root = shell_quote(&root.display().to_string()),
    );
    write_run_file(state, "ompi5-enter", &text, 0o755)
}

/// The Open MPI 5 mpirun command line for the lab (without the user's arguments): as
/// [`mpirun_command`], with PRRTE's names for the launcher's settings, entered into the root
/// through `enter`.
pub fn mpirun5_command(state: &LabState, rsh: &Path, hostfile: &Path, enter: &Path) -> Vec<String> {
    mpirun_line(state, &rsh.display().to_string(), hostfile, Some(enter))
}

/// [`mpirun_with`] for Open MPI 5 (module comment). Needs root (mounts, chroot) and the root
/// `bench/ompi5.sh root` makes.
fn mpirun_ompi5(
    state: &LabState,
    exe: &Path,
    args: &[String],
    per_machine: Option<usize>,
) -> Result<i32, LabError> {
    let root = ompi5_root();
    if !root.join(".pipecast-ready").exists() {
        return Err(LabError::Command(format!(
            "no Open MPI 5 root at {}: make it with `bench/ompi5.sh root` (or set PIPECAST_OMPI5_ROOT)",
            root.display()
        )));
    }
    if !super::is_root() {
        return Err(LabError::Command(
            "--mpi ompi5 enters the Open MPI 5 root with chroot: run as root".into(),
        ));
    }
    prepare(state, ("unshare", "util-linux"), &["mg"])?;
    let slots = super::machine_ranks(state, per_machine)?;
    let hostfile = hostfile(state, &slots)?;
    let enter = ompi5_enter_script(state, &root, exe)?;
    let rsh = rsh_script(state, exe)?;
    let cmd = mpirun5_command(state, &rsh, &hostfile, &enter);
    launch_mpirun(state, cmd, args, &slots)
}

/// [`mpirun_with`] for MPICH. Hydra passes mpiexec's environment on to the ranks, so
/// `PIPECAST_LAB` (and the caller's `PIPECAST_*`) reach them; each proxy's `lab rsh` sets
/// `PIPECAST_MACHINE`, which no `-genv` overrides.
fn mpiexec_mpich(
    state: &LabState,
    exe: &Path,
    args: &[String],
    per_machine: Option<usize>,
) -> Result<i32, LabError> {
    prepare(state, ("mpiexec.mpich", "mpich"), &[])?;
    let slots = super::machine_ranks(state, per_machine)?;
    let hostfile = mpich_hostfile(state, &slots)?;
    let rsh = rsh_script(state, exe)?;
    let cmd = mpiexec_command(state, &rsh, &hostfile);
    launch(
        state,
        cmd,
        ("-n", &["-n", "-np"]),
        args,
        slots.iter().sum(),
        None,
    )
}

/// Runs mpirun with the lab's settings and the user's arguments, `per_machine` slots on every
/// machine or the topology file's `ranks` ([`super::machine_ranks`]; `-np` defaults to all of
/// them, machine 0's ranks first); returns mpirun's exit code.
pub fn mpirun(
    state: &LabState,
    exe: &Path,
    args: &[String],
    per_machine: Option<usize>,
) -> Result<i32, LabError> {
    prepare(state, ("mpirun", "openmpi-bin"), &["mg"])?;
    let slots = super::machine_ranks(state, per_machine)?;
    let hostfile = hostfile(state, &slots)?;
    let cmd = mpirun_command(state, exe, &hostfile);
    launch_mpirun(state, cmd, args, &slots)
}

/// Runs Open MPI's mpirun line `cmd` with the user's `args` ([`launch`]): `-np` every one of
/// the `slots` unless `args` say otherwise, mpirun's session directory under the management
/// namespace's (TMPDIR, not an MCA parameter: mpirun forwards MCA parameters to every orted).
fn launch_mpirun(
    state: &LabState,
    cmd: Vec<String>,
    args: &[String],
    slots: &[usize],
) -> Result<i32, LabError> {
    let tmpdir = Some(session_base(state, "mg"));
    launch(
        state,
        cmd,
        ("-np", &["-np", "-n", "--np"]),
        args,
        slots.iter().sum(),
        tmpdir,
    )
}

/// Checks that the launcher `(tool, package)` is installed and creates the session directory
/// of every machine and of `more` ([`session_base`]).
fn prepare(state: &LabState, launcher: (&str, &str), more: &[&str]) -> Result<(), LabError> {
    if find_tool(launcher.0).is_none() {
        return Err(LabError::MissingTool {
            tool: launcher.0.into(),
            package: launcher.1.into(),
        });
    }
    let machines = state.machines.iter().map(|m| m.name.as_str());
    for name in machines.chain(more.iter().copied()) {
        let dir = session_base(state, name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| LabError::Io(format!("cannot create {dir}: {e}")))?;
    }
    Ok(())
}

/// Runs the launcher command line `cmd` (`ip netns exec …`) with the user's `args`, adding
/// `count.0 = ranks` unless an argument starts with one of `count.1`; `tmpdir` for the
/// launcher itself. Returns the launcher's exit code.
fn launch(
    state: &LabState,
    mut cmd: Vec<String>,
    count: (&str, &[&str]),
    args: &[String],
    ranks: usize,
    tmpdir: Option<String>,
) -> Result<i32, LabError> {
    let (flag, spellings) = count;
    if !args.iter().any(|a| {
        spellings
            .iter()
            .any(|s| a == s || (s.starts_with("--") && a.starts_with(s)))
    }) {
        cmd.extend([flag.into(), ranks.to_string()]);
    }
    cmd.extend(args.iter().cloned());
    let mut c = super::command::command(&state.owner, "ip")?;
    c.args(&cmd[1..]).env("PIPECAST_LAB", &state.name);
    if let Some(dir) = tmpdir {
        c.env("TMPDIR", dir);
    }
    let status = c
        .status()
        .map_err(|e| LabError::Command(format!("cannot run {}: {e}", cmd[4..6].join(" "))))?;
    Ok(status.code().unwrap_or(255))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word after `key` in `cmd`.
    fn after<'a>(cmd: &'a [String], key: &str) -> Option<&'a str> {
        let i = cmd.iter().position(|a| a == key)?;
        cmd.get(i + 1).map(String::as_str)
    }

    #[test]
    fn mpirun_keeps_mpi_data_on_the_shaped_network() {
        let state = crate::lab::state::sample_state();
        let cmd = mpirun_command(&state, Path::new("/bin/pipecast"), Path::new("/x/hostfile"));
        let after = |k: &str| super::tests::after(&cmd, k);
        assert_eq!(&cmd[..5], ["ip", "netns", "exec", "t-mg", "mpirun"]);
        assert_eq!(after("btl"), Some("tcp,self"));
        assert_eq!(after("btl_tcp_if_include"), Some("198.18.0.0/16"));
        assert_eq!(after("oob_tcp_if_include"), Some("198.19.0.0/16"));
        assert_eq!(
            after("plm_rsh_agent"),
            Some("/bin/pipecast lab rsh --name t")
        );
        assert_eq!(after("plm_rsh_no_tree_spawn"), Some("1"));
        assert_eq!(
            (after("--bind-to"), after("-x")),
            (None, Some("PIPECAST_LAB"))
        );
        assert_eq!(machine_index(&state, "198.19.0.2").unwrap(), 1);
        let cmd = mpiexec_command(&state, Path::new("/r/mpich-rsh"), Path::new("/r/hosts"));
        let after = |k: &str| super::tests::after(&cmd, k);
        assert_eq!(&cmd[..5], ["ip", "netns", "exec", "t-mg", "mpiexec.mpich"]);
        assert_eq!(after("-iface"), Some("br0"));
        assert_eq!(after("-launcher-exec"), Some("/r/mpich-rsh"));
        assert_eq!(after("UCX_NET_DEVICES"), Some("eth0"));
        assert_eq!(after("UCX_TLS"), Some("tcp,self"));
        assert_eq!(shell_quote("a'b c"), r"'a'\''b c'");
        assert_eq!(machine_index(&state, "h0").unwrap(), 0);
        assert!(machine_index(&state, "10.0.0.1").is_err());
        let mut two = state.clone();
        for m in &mut two.machines {
            m.rails.push(crate::lab::state::RailNic {
                switch: "b".into(),
                address: "10.1.0.1".into(),
            });
        }
        let cmd = mpirun_command(&two, Path::new("/bin/pipecast"), Path::new("/x/hostfile"));
        let after = |k: &str| cmd.iter().position(|a| a == k).map(|i| cmd[i + 1].as_str());
        assert_eq!(
            after("btl_tcp_if_include"),
            Some("198.18.0.0/16,10.1.0.0/16")
        );
        // Open MPI 5: entered into its root, PRRTE's names for the launcher's settings.
        let cmd = mpirun5_command(
            &state,
            Path::new("/r/lab-rsh"),
            Path::new("/x/hostfile"),
            Path::new("/r/ompi5-enter"),
        );
        let after = |k: &str| super::tests::after(&cmd, k);
        assert_eq!(
            &cmd[..6],
            ["ip", "netns", "exec", "t-mg", "/r/ompi5-enter", "mpirun"]
        );
        assert_eq!(after("plm_ssh_agent"), Some("/r/lab-rsh"));
        assert_eq!(after("plm_ssh_no_tree_spawn"), Some("1"));
        assert_eq!(after("--prtemca"), Some("plm_ssh_agent"));
        assert_eq!(
            (after("--bind-to"), after("-x")),
            (Some("none"), Some("PIPECAST_LAB"))
        );
        assert_eq!(after("oob_tcp_if_include"), Some("198.19.0.0/16"));
        assert_eq!(after("btl_tcp_if_include"), Some("198.18.0.0/16"));
    }
}
