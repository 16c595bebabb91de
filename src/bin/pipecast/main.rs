//! The `pipecast` command-line tool: topology, plans, benchmarks, calibration, the lab.

mod bench;
mod calibrate;
mod demo;
mod discover;
mod doctor;
mod hetero;
mod lab;
mod launch;
mod observe;
mod plan;
mod scale;
mod sim;
mod topo;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Errors reach `main`, which prints them on stderr and exits non-zero.
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "pipecast",
    version,
    about = "Contention-free pipelined broadcast for switched Ethernet clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// What pipecast is for, without root: a 16-machine, 4-switch lab, the plan, and
    /// broadcasts against classic MPI trees (the local benchmark where no lab can be built).
    Demo(demo::Args),
    /// Topology files: generate, check, discover.
    Topo(topo::Args),
    /// Plan a broadcast tree on a topology and print it (table, JSON or Graphviz).
    Plan(plan::Args),
    /// Heterogeneous platforms (seed 004): heuristics and the LP optimum.
    Hetero(hetero::Args),
    /// Run and time real broadcasts between processes.
    Bench(bench::Args),
    /// Simulate whole broadcasts on a topology: times, busy edges, contention.
    Sim(sim::Args),
    /// Connections, descriptors and memory per rank on paper: tree neighbours from the
    /// planner against the full mesh, at large job sizes.
    Scale(scale::Args),
    /// Measure L(m) and g(m) and write a calibration profile.
    Calibrate(calibrate::Args),
    /// Emulated multi-switch cluster in network namespaces (without root: in a user namespace).
    Lab(lab::Args),
    /// Check what a site needs (Open MPI release, CAP_NET_RAW, LLDP, MTU, io_uring, user
    /// namespaces, cross-memory attach, shared memory, RDMA) and say how to fix each problem.
    Doctor(doctor::Args),
}

/// `pipecast plan … | head -1`: when the reader of stdout goes away, exit quietly with the
/// shell's status for SIGPIPE (128 + 13), as `ls` does. Rust ignores SIGPIPE, so `println!`
/// panics on the broken pipe instead; this hook turns exactly that panic into the quiet exit.
fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.contains("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    exit_quietly_on_broken_pipe();
    let filter = match pipecast::comm::settings::log_filter()
        .map(|f| tracing_subscriber::EnvFilter::try_new(&f).map_err(|e| (f, e)))
    {
        Some(Ok(filter)) => filter,
        Some(Err((f, e))) => {
            eprintln!(
                "pipecast: PIPECAST_LOG={f:?} is not a tracing filter ({e}): logging warnings only"
            );
            tracing_subscriber::EnvFilter::new("warn")
        }
        None => tracing_subscriber::EnvFilter::new("warn"),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Topo(args) => topo::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Hetero(args) => hetero::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Scale(args) => scale::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Lab(args) => lab::run(args),
        Command::Doctor(args) => doctor::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pipecast: {e}");
            ExitCode::FAILURE
        }
    }
}
