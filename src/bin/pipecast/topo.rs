//! `pipecast topo`: generate and check topology files (the JSON contract of DESIGN.md).
//!
//! ```text
//! pipecast topo gen random --switches 16 --machines 128 --seed 7 -o cluster.json
//! pipecast topo gen hub --edges 3 --per-switch 4 --interleaved
//! pipecast topo gen hub --edges 3 --per-switch 4 --rails 2
//! pipecast topo gen single --machines 16
//! pipecast topo check cluster.json
//! pipecast topo import --format mpich-coords coords.txt -o cluster.json
//! pipecast topo import --format slurm /etc/slurm/topology.conf
//! ```

use crate::CliResult;
use pipecast::input::{read_text, read_topology};
use pipecast::topology::mpich_coords::import_mpich_coords;
use pipecast::topology::slurm::parse_slurm_topology;
use pipecast::topology::{gen, to_json, Topology};
use serde_json::Value;
use std::path::PathBuf;

/// Generous limits so that a typo cannot ask for gigabytes.
const MAX_MACHINES: u64 = 1_000_000;
const MAX_SWITCHES: u64 = 100_000;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Generate a topology file (JSON on stdout, or to -o FILE).
    Gen(GenArgs),
    /// Validate a topology file and print a summary; a bad file exits non-zero with the reason.
    Check {
        /// The topology file.
        file: PathBuf,
    },
    /// Run on every rank of a job: learn each rank's switch and port by LLDP, exchange the
    /// observations, and write the topology file with machines in rank order.
    Discover(crate::discover::DiscoverArgs),
    /// Convert a site's own description of the network into a topology file (JSON on stdout,
    /// or to -o FILE): MPICH's coordinates file or Slurm's topology.conf.
    Import(ImportArgs),
}

#[derive(clap::Args)]
struct ImportArgs {
    /// The format of FILE.
    #[arg(long, value_enum)]
    format: ImportFormat,
    /// The file to import.
    file: PathBuf,
    /// Write the topology to FILE instead of stdout.
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ImportFormat {
    /// MPICH's network coordinates (MPIR_CVAR_COORDINATES_FILE): a header line, then
    /// `RANK: GROUP SWITCH PORT` per rank; machines in rank order.
    MpichCoords,
    /// Slurm's topology.conf (topology/tree): machines are its nodes in file order.
    Slurm,
}

#[derive(clap::Args)]
struct GenArgs {
    #[command(subcommand)]
    shape: Shape,
    /// Write the topology to FILE instead of stdout.
    #[arg(short, long, global = true, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Shape {
    /// Seed 003's random cluster: a random switch tree, machines placed uniformly at random.
    Random {
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_SWITCHES))]
        switches: u64,
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_MACHINES))]
        machines: u64,
        /// Random seed: the same seed gives the same file.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Hub switch s0 linked to EDGES edge switches, PER_SWITCH machines on every switch.
    Hub {
        #[arg(long, value_parser = clap::value_parser!(u64).range(0..MAX_SWITCHES))]
        edges: u64,
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_MACHINES))]
        per_switch: u64,
        /// Rank r on switch r mod (EDGES+1) instead of grouped by switch (contention-prone
        /// for rank-order trees, like seed 000's topology (5)).
        #[arg(long)]
        interleaved: bool,
        /// Machines with RAILS NICs: one such hub per rail (switches a0…, b0…), NIC i of
        /// every machine on rail i at the same place (seed 002's multi-lane NICs).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=pipecast::topology::MAX_NICS as u64))]
        rails: u64,
    },
    /// One switch s0 with N machines.
    Single {
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_MACHINES))]
        machines: u64,
    },
}

pub fn run(args: Args) -> CliResult {
    match args.command {
        Command::Gen(args) => generate(args),
        Command::Check { file } => {
            let topology = read_topology(&file, pipecast::comm::settings::max_input_bytes()?)?;
            print!("{}", summary(&file.display().to_string(), &topology));
            Ok(())
        }
        Command::Discover(args) => crate::discover::run(args),
        Command::Import(args) => import(args),
    }
}

fn import(args: ImportArgs) -> CliResult {
    let name = args.file.display().to_string();
    let text = pipecast::comm::settings::max_input_bytes()
        .and_then(|limit| read_text(&args.file, limit))
        .map_err(|e| format!("{name}: cannot read: {e}"))?;
    let (topology, notes) = match args.format {
        ImportFormat::MpichCoords => {
            import_mpich_coords(&text).map_err(|e| format!("{name}: {e}"))?
        }
        ImportFormat::Slurm => {
            let conf = parse_slurm_topology(&text).map_err(|e| format!("{name}: {e}"))?;
            let t = conf.to_topology().map_err(|e| format!("{name}: {e}"))?;
            (t, Vec::new())
        }
    };
    for note in notes {
        eprintln!("pipecast topo import: {name}: {note}");
    }
    write_topology(&topology, args.output)
}

/// The topology as a file (-o) or on stdout.
fn write_topology(topology: &Topology, output: Option<PathBuf>) -> CliResult {
    let text = render(&to_json(topology))?;
    match output {
        Some(path) => std::fs::write(&path, text)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

fn generate(args: GenArgs) -> CliResult {
    let topology = match args.shape {
        Shape::Random {
            switches,
            machines,
            seed,
        } => gen::random_cluster(switches as usize, machines as usize, seed),
        Shape::Hub {
            edges,
            per_switch,
            interleaved,
            rails,
        } => {
            if (edges + 1) * per_switch > MAX_MACHINES {
                return Err(format!(
                    "a hub of {} switches with {per_switch} machines each exceeds {MAX_MACHINES} machines: use fewer",
                    edges + 1
                )
                .into());
            }
            if rails > 1 {
                gen::rails(
                    rails as usize,
                    edges as usize,
                    per_switch as usize,
                    interleaved,
                )
            } else {
                gen::hub(edges as usize, per_switch as usize, interleaved)
            }
        }
        Shape::Single { machines } => Topology::single_switch(machines as usize),
    };
    write_topology(&topology, args.output)
}

/// The file as people like to read it: switches on one line, one link or machine per line.
fn render(value: &Value) -> Result<String, serde_json::Error> {
    let Some(object) = value.as_object() else {
        return serde_json::to_string_pretty(value);
    };
    let first = ["switches", "links", "machines"];
    let keys = first
        .iter()
        .copied()
        .filter(|k| object.contains_key(*k))
        .chain(
            object
                .keys()
                .map(String::as_str)
                .filter(|k| !first.contains(k)),
        );
    let mut fields = Vec::new();
    for key in keys {
        let value = &object[key];
        let text = match value.as_array() {
            Some(items) if items.iter().any(|v| v.is_object() || v.is_array()) => {
                let lines: Result<Vec<String>, _> = items
                    .iter()
                    .map(|v| serde_json::to_string(v).map(|t| format!("    {t}")))
                    .collect();
                format!("[\n{}\n  ]", lines?.join(",\n"))
            }
            _ => serde_json::to_string(value)?,
        };
        fields.push(format!("  {}: {text}", serde_json::to_string(key)?));
    }
    Ok(format!("{{\n{}\n}}\n", fields.join(",\n")))
}

/// Switches, links and machines per switch, for people.
fn summary(name: &str, t: &Topology) -> String {
    let mut per_switch = vec![0usize; t.switches().len()];
    for m in 0..t.size() {
        for rail in 0..t.rails() {
            per_switch[t.nic_switch(m, rail)] += 1;
        }
    }
    let mut out = format!(
        "{name}: valid topology: {} switches, {} links, {} machines\n",
        t.switches().len(),
        t.links().len(),
        t.size()
    );
    if t.rails() > 1 {
        // Seed 002's multi-lane NICs: `multilane` puts lane i on rail i (docs/topology.md).
        let rail_switches: Vec<String> = (0..t.rails())
            .map(|rail| {
                let mut names: Vec<&str> = (0..t.size())
                    .map(|m| t.switches()[t.nic_switch(m, rail)].name.as_str())
                    .collect();
                names.sort_unstable();
                names.dedup();
                format!("rail {rail}: {}", names.join(" "))
            })
            .collect();
        out += &format!(
            "{} NICs per machine, NIC i on rail i ({})\n",
            t.rails(),
            rail_switches.join("; ")
        );
    }
    if t.ranks() != t.size() {
        // The machines' `ranks`: plans on this file are two-level (docs/planner.md).
        out += &format!(
            "{} ranks (machines with several ranks share their NIC)\n",
            t.ranks()
        );
    }
    let width = t
        .switches()
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0)
        .max("switch".len())
        // Longer names overflow their column (a width above 65535 would panic `format!`).
        .min(64);
    out += &format!("{:width$}  machines  linked to\n", "switch");
    // (machines: NICs plugged into the switch, one per machine and rail)
    for (s, switch) in t.switches().iter().enumerate() {
        let neighbours: Vec<&str> = t
            .neighbours(s)
            .iter()
            .map(|&(n, _)| t.switches()[n].name.as_str())
            .collect();
        out += &format!(
            "{:width$}  {:>8}  {}\n",
            switch.name,
            per_switch[s],
            neighbours.join(" ")
        );
    }
    out
}
