//! `pipecast lab` — an emulated multi-switch Ethernet cluster in network namespaces: root's,
//! or without root inside a user namespace of the user's own (no lldpd there).

use crate::CliResult;
use pipecast::lab::{self, RunOptions, UpOptions};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(clap::Subcommand)]
enum LabCommand {
    /// Build a lab from a topology file: namespaces, bridges, shaped links, lldpd.
    Up(UpArgs),
    /// Run a command once per rank (K per machine, rank r on machine r / K) and wait for all.
    Run(RunArgs),
    /// Run a command on one machine.
    Exec(ExecArgs),
    /// Write each switch's lldpd neighbour table to DIR/<switch>.json.
    Lldp(LldpArgs),
    /// Remove a lab: stop lldpd, delete its namespaces and run directory.
    Down(NameArg),
    /// List the labs on this machine.
    Status,
    /// TCP throughput probe to check the lab's links: `recv` in one machine, `send` in another.
    #[command(subcommand)]
    Tput(Tput),
    /// Remote-shell agent for launchers (Open MPI's plm_rsh_agent): run CMD on HOST, where
    /// HOST is a machine name or one of its addresses.
    Rsh(RshArgs),
    /// Run Open MPI's mpirun (or MPICH's mpiexec, --mpi mpich; Open MPI 5, --mpi ompi5) in the management namespace
    /// with ranks on the lab's machines.
    Mpirun(MpirunArgs),
    /// (internal) Send one broadcast from this machine so that the bridges learn its MAC.
    #[command(hide = true)]
    Announce,
}

#[derive(clap::Subcommand)]
enum Tput {
    /// Accept one connection, read until it closes, print Mbit/s.
    Recv {
        #[arg(long, default_value_t = 5001)]
        port: u16,
    },
    /// Connect to ADDR:PORT and send for SECONDS.
    Send {
        #[arg(long)]
        to: String,
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
}

#[derive(clap::Args)]
struct NameArg {
    /// Lab name (prefix of its namespaces).
    #[arg(long, default_value = "pc")]
    name: String,
}

#[derive(clap::Args)]
struct UpArgs {
    /// Topology file (JSON, see DESIGN.md).
    #[arg(long)]
    topology: PathBuf,
    #[arg(long, default_value = "pc")]
    name: String,
    /// Rate of every link direction: tc's spelling (100mbit, 2.5gbit, 10gbit) or a bare number
    /// of Gbit/s; a link's `gbps` in the file overrides it.
    #[arg(long, default_value = "100mbit")]
    rate: String,
    /// MTU of the data links.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Seconds to wait for every switch's lldpd to see its neighbour switches (0: don't wait).
    #[arg(long, default_value_t = 15)]
    lldp_wait: u64,
    /// The switches snoop IGMP and run a querier (bridge mcast_snooping 1, mcast_querier 1):
    /// IP multicast then reaches only the machines that joined the group. Default: off (every
    /// switch floods multicast).
    #[arg(long)]
    igmp_snooping: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    #[arg(long, default_value = "pc")]
    name: String,
    /// Deadline in seconds for all ranks; the rest are killed when it passes.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Rendezvous TCP port on rank 0 (PIPECAST_RENDEZVOUS).
    #[arg(long, default_value_t = 47_800)]
    port: u16,
    /// Ranks per machine: rank r runs on machine r / K (the order of a topology file's
    /// `ranks` and of `pipecast plan --ranks-per-machine K`). Default: the `ranks` of the
    /// topology file the lab was built from (1 where it gives none), machine 0's first.
    #[arg(long, value_name = "K")]
    ranks_per_machine: Option<usize>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    command: Vec<String>,
}

#[derive(clap::Args)]
struct ExecArgs {
    #[arg(long, default_value = "pc")]
    name: String,
    /// Machine name as in the topology file.
    machine: String,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    command: Vec<String>,
}

#[derive(clap::Args)]
struct RshArgs {
    #[arg(long, default_value = "pc")]
    name: String,
    /// Machine name, data address or management address.
    host: String,
    /// The command line (joined with spaces and run by sh, as ssh does).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    command: Vec<String>,
}

#[derive(clap::Args)]
struct MpirunArgs {
    #[arg(long, default_value = "pc")]
    name: String,
    /// Slots per machine: K ranks on every machine, rank r on machine r / K. Default: the
    /// `ranks` of the topology file the lab was built from (1 where it gives none), machine
    /// 0's first.
    #[arg(long, value_name = "K")]
    ranks_per_machine: Option<usize>,
    /// Which MPI: openmpi (mpirun), mpich (mpiexec.mpich, hydra) or ompi5 (Open MPI 5's mpirun
    /// inside the Debian 13 root of `bench/ompi5.sh root`; needs root).
    #[arg(long, value_enum, default_value = "openmpi")]
    mpi: MpiKind,
    /// Arguments for mpirun (program and its arguments last); -np defaults to all slots.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    args: Vec<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum MpiKind {
    Openmpi,
    Mpich,
    Ompi5,
}

#[derive(clap::Args)]
struct LldpArgs {
    #[arg(long, default_value = "pc")]
    name: String,
    /// Directory to write <switch>.json files into.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> CliResult {
    match args.command {
        LabCommand::Up(a) => up(a),
        LabCommand::Run(a) => run_all(a),
        LabCommand::Exec(a) => {
            let state = lab::load(&a.name)?;
            let code = lab::exec(&state, &a.machine, &a.command)?;
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        LabCommand::Lldp(a) => {
            let state = lab::load(&a.name)?;
            for path in lab::lldp_dump(&state, &a.out)? {
                println!("{}", path.display());
            }
            Ok(())
        }
        LabCommand::Down(a) => {
            lab::down(&a.name)?;
            eprintln!("lab {} removed", a.name);
            Ok(())
        }
        LabCommand::Rsh(a) => {
            let state = lab::load(&a.name)?;
            let code = lab::rsh(&state, &a.host, &a.command)?;
            std::process::exit(code);
        }
        LabCommand::Mpirun(a) => {
            let state = lab::load(&a.name)?;
            let exe = std::env::current_exe()?;
            let mpi = match a.mpi {
                MpiKind::Openmpi => lab::Mpi::OpenMpi,
                MpiKind::Mpich => lab::Mpi::Mpich,
                MpiKind::Ompi5 => lab::Mpi::OpenMpi5,
            };
            let code = lab::mpirun_with(mpi, &state, &exe, &a.args, a.ranks_per_machine)?;
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        LabCommand::Status => status(),
        LabCommand::Tput(t) => tput(t),
        LabCommand::Announce => announce(),
    }
}

fn up(a: UpArgs) -> CliResult {
    lab::require_tools()?;
    let topology =
        pipecast::input::read_topology(&a.topology, pipecast::comm::settings::max_input_bytes()?)?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    // Ctrl-C during `up` abandons the build; `up` then removes what it built.
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))?;
    let rate_bits = lab::parse_rate(&a.rate)?;
    let opts = UpOptions {
        rate_bits,
        mtu: a.mtu,
        announce_exe: std::env::current_exe().ok(),
        lldp_wait: Duration::from_secs(a.lldp_wait),
        interrupted: Some(interrupted),
        igmp_snooping: a.igmp_snooping,
        ..UpOptions::new(a.name.clone())
    };
    let state = lab::up(&topology, &opts)?;
    println!(
        "lab {} is up: {} switches, {} machines, {} per link direction, MTU {}{}{}",
        state.name,
        state.switches.len(),
        state.machines.len(),
        pipecast::input::rate_name(rate_bits),
        state.mtu,
        if state.igmp_snooping {
            ", IGMP snooping with a querier"
        } else {
            ""
        },
        match state.owner {
            lab::Owner::Root => String::new(),
            lab::Owner::UserNamespace { keeper, .. } => {
                format!(", in a user namespace held by process {keeper}")
            }
        }
    );
    if !state.owner.runs_lldpd() {
        println!("note: {}", lab::NO_LLDPD);
    }
    for (rank, m) in state.machines.iter().enumerate() {
        println!(
            "  r{rank:<3} {:<12} on {:<8} eth0 {:<14} mgmt0 {:<14} netns {}",
            m.name, m.switch, m.address, m.mgmt_address, m.netns
        );
    }
    println!(
        "try: pipecast lab run --name {0} -- hostname; pipecast lab down --name {0}",
        state.name
    );
    Ok(())
}

fn run_all(a: RunArgs) -> CliResult {
    let state = lab::load(&a.name)?;
    if !state.complete {
        return Err(format!(
            "lab {0} is not completely built (did `up` fail?): `pipecast lab down --name {0}` and build it again",
            a.name
        )
        .into());
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    // Ctrl-C kills every rank (they run in their own process groups).
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))?;
    let opts = RunOptions {
        timeout: Duration::from_secs(a.timeout),
        port: a.port,
        interrupted: Some(interrupted.clone()),
        ranks_per_machine: a.ranks_per_machine,
        rank0_only: false,
    };
    let outcomes = lab::run(&state, &a.command, &opts)?;
    if interrupted.load(Ordering::SeqCst) {
        return Err("interrupted: every rank was killed".into());
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.success())
        .map(|o| {
            if o.timed_out {
                format!(
                    "r{} ({}) killed at the {} s deadline",
                    o.rank, o.machine, a.timeout
                )
            } else {
                match o.code {
                    Some(c) => format!("r{} ({}) exited with {c}", o.rank, o.machine),
                    None => format!("r{} ({}) was killed by a signal", o.rank, o.machine),
                }
            }
        })
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} ranks failed: {}",
            failed.len(),
            outcomes.len(),
            failed.join("; ")
        )
        .into())
    }
}

fn status() -> CliResult {
    let names = lab::labs();
    if names.is_empty() {
        println!("no labs (state under {})", lab::run_root().display());
    }
    for name in names {
        match lab::load(&name) {
            Ok(s) => {
                let missing = lab::missing_namespaces(&s)?;
                let health = if !s.complete {
                    " (incomplete: run `pipecast lab down`)".to_string()
                } else if !missing.is_empty() {
                    format!(
                        " (broken: namespaces {} are gone; run `pipecast lab down`)",
                        missing.join(", ")
                    )
                } else {
                    String::new()
                };
                println!(
                    "{name}: {} switches, {} machines, {} per link direction, MTU {}, run dir {}{health}",
                    s.switches.len(),
                    s.machines.len(),
                    pipecast::input::rate_name(s.rate_bits),
                    s.mtu,
                    s.run_dir
                );
            }
            Err(e) => println!("{name}: {e}"),
        }
    }
    Ok(())
}

/// One UDP broadcast on the data network (to the discard port): every bridge on the way
/// learns this machine's MAC.
fn announce() -> CliResult {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    socket.set_broadcast(true)?;
    socket.send_to(b"pipecast lab announce", "198.18.255.255:9")?;
    Ok(())
}

fn tput(t: Tput) -> CliResult {
    use std::io::{Read, Write};
    use std::time::Instant;
    match t {
        Tput::Recv { port } => {
            let listener = std::net::TcpListener::bind(("0.0.0.0", port))?;
            let (mut conn, peer) = listener.accept()?;
            let mut buf = vec![0u8; 1 << 16];
            let mut bytes = 0u64;
            let mut start = None;
            loop {
                let n = conn.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                start.get_or_insert_with(Instant::now);
                bytes += n as u64;
            }
            let secs = start.map_or(0.0, |s| s.elapsed().as_secs_f64());
            if secs <= 0.0 {
                return Err(format!("no data from {peer}").into());
            }
            println!(
                "{:.1} Mbit/s from {peer} ({bytes} bytes in {secs:.2} s)",
                bytes as f64 * 8.0 / secs / 1e6
            );
            Ok(())
        }
        Tput::Send { to, seconds } => {
            if !(seconds > 0.0 && seconds <= 3600.0) {
                return Err("--seconds must be between 0 and 3600".into());
            }
            // The receiver may start a moment later: retry for up to 5 s.
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut conn = loop {
                match std::net::TcpStream::connect(&to) {
                    Ok(c) => break c,
                    Err(e) if Instant::now() > deadline => {
                        return Err(format!("cannot connect to {to}: {e}").into())
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            };
            let buf = vec![0x5au8; 1 << 16];
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            while Instant::now() < end {
                conn.write_all(&buf)?;
            }
            Ok(())
        }
    }
}
