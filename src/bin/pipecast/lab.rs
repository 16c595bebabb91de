//! `pipecast lab` — an emulated multi-switch Ethernet cluster in network namespaces (root only).

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
    /// Run a command once on every machine (rank = machine index) and wait for all.
    Run(RunArgs),
    /// Run a command on one machine.
    Exec(ExecArgs),
    /// Write each switch's lldpd neighbour table to DIR/<switch>.json.
    Lldp(LldpArgs),
    /// Remove a lab: stop lldpd, delete its namespaces and run directory.
    Down(NameArg),
    /// List the labs on this machine.
    Status,
    /// (internal) Send one broadcast from this machine so that the bridges learn its MAC.
    #[command(hide = true)]
    Announce,
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
    /// Rate of every link direction (tc syntax); a link's `gbps` in the file overrides it.
    #[arg(long, default_value = "100mbit")]
    rate: String,
    /// MTU of the data links.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Seconds to wait for every switch's lldpd to see its neighbour switches (0: don't wait).
    #[arg(long, default_value_t = 15)]
    lldp_wait: u64,
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
        LabCommand::Status => status(),
        LabCommand::Announce => announce(),
    }
}

fn up(a: UpArgs) -> CliResult {
    lab::require_tools()?;
    let topology = pipecast::topology::read_topology(&a.topology)?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    // Ctrl-C during `up` abandons the build; `up` then removes what it built.
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))?;
    let opts = UpOptions {
        rate_bits: lab::parse_rate(&a.rate)?,
        mtu: a.mtu,
        announce_exe: std::env::current_exe().ok(),
        lldp_wait: Duration::from_secs(a.lldp_wait),
        interrupted: Some(interrupted),
        ..UpOptions::new(a.name.clone())
    };
    let state = lab::up(&topology, &opts)?;
    println!(
        "lab {} is up: {} switches, {} machines, {} per link direction, MTU {}",
        state.name,
        state.switches.len(),
        state.machines.len(),
        a.rate,
        state.mtu
    );
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
    let opts = RunOptions {
        timeout: Duration::from_secs(a.timeout),
        port: a.port,
    };
    let outcomes = lab::run(&state, &a.command, &opts)?;
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
            Ok(s) => println!(
                "{name}: {} switches, {} machines, {} bit/s, MTU {}{}",
                s.switches.len(),
                s.machines.len(),
                s.rate_bits,
                s.mtu,
                if s.complete {
                    ""
                } else {
                    " (incomplete: run `pipecast lab down`)"
                }
            ),
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
