//! `pipecast topo discover` — learn the topology from LLDP, on every rank of a job.

use crate::observe::{observe_by_listening, observe_with_lldpd};
use crate::CliResult;
use pipecast::comm::{Bootstrap, TcpRendezvous};
use pipecast::topology::discover::{self, DiscoverError, LldpDump, Observation, SwitchLayer};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where a rank learns its own switch and port.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LldpSource {
    /// The host's lldpd if it runs, else listen on the wire.
    Auto,
    /// Only the host's lldpd.
    Lldpd,
    /// Only listen for an LLDPDU (AF_PACKET; root or CAP_NET_RAW).
    Listen,
    /// Don't look; the switch layer must place every machine.
    None,
}

/// Run on every rank (PIPECAST_RANK/SIZE/RENDEZVOUS, e.g. under `pipecast lab run`); rank 0
/// writes the topology file, machines in rank order.
#[derive(clap::Args)]
pub struct DiscoverArgs {
    /// Directory of switch lldpd dumps (<switch>.json, `lldpcli -f json0 show neighbors`).
    #[arg(long)]
    pub switch_lldp: Option<PathBuf>,
    /// Slurm topology.conf giving the switch tree.
    #[arg(long)]
    pub slurm: Option<PathBuf>,
    /// Topology file giving the switch tree (machines are still placed by LLDP).
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// Output file (default: standard output).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Where this rank learns its own switch and port.
    #[arg(long, value_enum, default_value = "auto")]
    pub lldp: LldpSource,
    /// How long to listen for an LLDPDU (one LLDP interval; 30 s by default on switches).
    #[arg(long, default_value_t = 35)]
    pub listen_seconds: u64,
    /// lldpd control socket of this host (default /run/lldpd.socket).
    #[arg(long)]
    pub lldpd_socket: Option<PathBuf>,
    /// Use LLDP of this interface only (default: every Ethernet interface that is up). A
    /// machine with several NICs lists one interface per NIC, NIC 0 first (`eth0,eth1`): NIC i
    /// is on rail i.
    #[arg(long)]
    pub iface: Option<String>,
    /// This machine's name (default: PIPECAST_MACHINE, else the host name).
    #[arg(long)]
    pub machine: Option<String>,
    /// Deadline for the exchange between ranks.
    #[arg(long, default_value_t = 120)]
    pub exchange_seconds: u64,
}

fn machine_name(args: &DiscoverArgs) -> Result<String, String> {
    let machine = match &args.machine {
        Some(m) => Some(m.clone()),
        None => pipecast::comm::Settings::from_env()
            .machine
            .map(|m| {
                pipecast::comm::settings::check_machine(&m)
                    .map_err(|e| format!("PIPECAST_MACHINE: {e}"))
            })
            .transpose()?,
    };
    Ok(pipecast::comm::hosts::host_name(machine.as_deref()))
}

pub fn run(args: DiscoverArgs) -> CliResult {
    let sources = [&args.switch_lldp, &args.slurm, &args.topology]
        .iter()
        .filter(|s| s.is_some())
        .count();
    if sources > 1 {
        return Err("give at most one of --switch-lldp, --slurm, --topology".into());
    }
    let machine = machine_name(&args)?;
    // `--iface eth0,eth1`: one interface per NIC, NIC i on rail i; each is observed alone.
    let ifaces: Vec<Option<String>> = match &args.iface {
        Some(list) => list
            .split(',')
            .map(|i| Some(i.trim().to_string()))
            .collect(),
        None => vec![None],
    };
    let mut nics = Vec::with_capacity(ifaces.len());
    for iface in &ifaces {
        nics.push(observe(&args, &machine, iface.as_deref())?);
    }
    let mut mine = nics.remove(0);
    mine.rails = nics.into_iter().map(Into::into).collect();
    tracing::info!(?mine, "local observation");
    exchange_and_assemble(&args, mine)
}

/// What this machine's NIC on `iface` (any interface when `None`) is plugged into.
fn observe(
    args: &DiscoverArgs,
    machine: &str,
    iface: Option<&str>,
) -> Result<Observation, Box<dyn std::error::Error>> {
    let listen = Duration::from_secs(args.listen_seconds);
    let silent = Observation::unheard(machine);
    Ok(match args.lldp {
        LldpSource::Auto => {
            match observe_with_lldpd(machine, args.lldpd_socket.as_deref(), iface) {
                Some(o) => o,
                // Without the right to listen, the switch layer may still place this machine.
                None => {
                    match observe_by_listening(machine, listen, iface) {
                        Ok(o) => o,
                        Err(e) => {
                            eprintln!("pipecast topo discover: {machine}: {e}; relying on the switch layer");
                            silent.clone()
                        }
                    }
                }
            }
        }
        LldpSource::Lldpd => {
            observe_with_lldpd(machine, args.lldpd_socket.as_deref(), iface).unwrap_or(silent)
        }
        LldpSource::Listen => observe_by_listening(machine, listen, iface)?,
        LldpSource::None => silent,
    })
}

/// Shares `mine` with the job's other ranks and (on rank 0) assembles and prints the topology.
fn exchange_and_assemble(args: &DiscoverArgs, mine: Observation) -> CliResult {
    let job = job_from_env()?;
    let all: Vec<Observation> = match &job {
        None => vec![mine],
        Some((rank, size, addr)) => {
            let blob = serde_json::to_vec(&mine)?;
            let timeout = Duration::from_secs(args.exchange_seconds);
            let blobs = TcpRendezvous::new(*rank, *size, addr, timeout)?.allgather(&blob)?;
            blobs
                .iter()
                .enumerate()
                .map(|(rank, b)| {
                    serde_json::from_slice(b).map_err(|e| DiscoverError::BadObservation {
                        rank,
                        reason: e.to_string(),
                    })
                })
                .collect::<Result<_, _>>()?
        }
    };
    if job.as_ref().is_some_and(|(rank, _, _)| *rank != 0) {
        return Ok(());
    }
    let layer = if let Some(dir) = &args.switch_lldp {
        read_switch_lldp(dir)?
    } else if let Some(path) = &args.slurm {
        read_slurm(path)?
    } else if let Some(path) = &args.topology {
        SwitchLayer::File(pipecast::input::read_topology(
            path,
            pipecast::comm::settings::max_input_bytes()?,
        )?)
    } else {
        SwitchLayer::None
    };
    let found = discover::assemble(&all, &layer)?;
    for note in &found.notes {
        eprintln!("pipecast topo discover: note: {note}");
    }
    let text = serde_json::to_string_pretty(&pipecast::topology::to_json(&found.topology))? + "\n";
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// Reads a directory of lldpd dumps (`<switch>.json`, as `pipecast lab lldp` writes them).
fn read_switch_lldp(dir: &Path) -> Result<SwitchLayer, DiscoverError> {
    let io = |e: std::io::Error| DiscoverError::Io {
        path: dir.display().to_string(),
        reason: e.to_string(),
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut dumps = Vec::new();
    for path in files {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = pipecast::comm::settings::max_input_bytes()
            .and_then(|limit| pipecast::input::read_text(&path, limit))
            .map_err(|reason| DiscoverError::Io {
                path: path.display().to_string(),
                reason,
            })?;
        dumps.push(LldpDump {
            switch: name,
            path: path.display().to_string(),
            text,
        });
    }
    discover::parse_switch_lldp(&dir.display().to_string(), &dumps)
}

/// Reads a Slurm topology.conf.
fn read_slurm(path: &Path) -> Result<SwitchLayer, DiscoverError> {
    let text = pipecast::comm::settings::max_input_bytes()
        .and_then(|limit| pipecast::input::read_text(path, limit))
        .map_err(|reason| DiscoverError::Io {
            path: path.display().to_string(),
            reason,
        })?;
    discover::parse_slurm_layer(&path.display().to_string(), &text)
}

/// `PIPECAST_RANK`, `PIPECAST_SIZE`, `PIPECAST_RENDEZVOUS` (host:port of rank 0) when this
/// process is one rank of a job (`pipecast lab run` sets them); `None` for a lone process.
fn job_from_env() -> Result<Option<(usize, usize, String)>, String> {
    let job = pipecast::comm::settings::Job::from_env().map_err(|e| e.to_string())?;
    Ok(job.map(|j| (j.rank, j.size, j.rendezvous)))
}
