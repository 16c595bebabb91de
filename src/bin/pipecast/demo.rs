//! `pipecast demo`: what pipecast is for, in one command and without root. It builds a
//! 16-machine, 4-switch lab at 100 mbit with the interleaved placement (seed 000 §6's
//! contention-prone case: rank-order trees cross the switch links again and again), learns
//! its topology over LLDP where lldpd runs (a lab built by root) or takes it from the file it
//! was built from, shows the plan `auto` picks (table; SVG to a file), broadcasts 1–16 MiB
//! with `auto` against `naive-linear`, `binomial` and `scatter-allgather` — every byte
//! verified at every rank, times as ratios to T(msize), the point-to-point time of the message
//! measured in the same run — and tears the lab down, also on Ctrl-C. Where no lab can be
//! built it runs the local benchmark instead, saying so in one line.
//!
//! It is `pipecast lab up`, `lab run … topo discover`, `plan` and `lab run … bench` in a row
//! (the same library calls and subcommands), not a second implementation of any of them.

use crate::CliResult;
use pipecast::input::read_topology;
use pipecast::lab::{self, LabState, RunOptions, UpOptions};
use pipecast::topology::{gen, to_json, Topology};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Prints a line on stdout, ignoring a closed pipe (`pipecast demo | head`): the demo must go
/// on to take its lab down, which the quiet exit on a broken pipe (main.rs) would skip.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// [`say!`] without the newline.
macro_rules! say_raw {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

/// The schedules the demo compares: pipecast's choice and three classic MPI broadcasts.
const TREES: &str = "auto,naive-linear,binomial,scatter-allgather";

#[derive(clap::Args)]
pub struct Args {
    /// Machines in the lab (spread over the switches in rank order: interleaved).
    #[arg(long, default_value_t = 16)]
    machines: usize,
    /// Switches: a hub and SWITCHES-1 edge switches around it.
    #[arg(long, default_value_t = 4)]
    switches: usize,
    /// Rate of every link direction: tc's spelling (100mbit, 1gbit) or a bare number of Gbit/s.
    #[arg(long, default_value = "100mbit")]
    rate: String,
    /// Message sizes (K/M suffixes, binary units).
    #[arg(long, default_value = "1M,4M,16M")]
    sizes: String,
    /// Timed broadcasts per size and schedule, after one untimed warm-up broadcast.
    #[arg(long, default_value_t = 1)]
    iters: usize,
    /// Where to write the plan as SVG (Graphviz `dot`; skipped with a note when missing).
    #[arg(long, default_value = "pipecast-demo-plan.svg")]
    svg: PathBuf,
    /// Ranks of the local benchmark when no lab can be built.
    #[arg(long, default_value_t = 8)]
    local: usize,
}

pub fn run(args: Args) -> CliResult {
    let started = Instant::now();
    if !(2..=64).contains(&args.machines) || !(1..=16).contains(&args.switches) {
        return Err("--machines must be 2 to 64 and --switches 1 to 16".into());
    }
    if args.machines % args.switches != 0 {
        return Err(format!(
            "--machines {} is not a multiple of --switches {}: every switch gets as many machines",
            args.machines, args.switches
        )
        .into());
    }
    let sizes = crate::bench::parse_sizes(&args.sizes)?;
    let rate_bits = lab::parse_rate(&args.rate)?;
    let exe = std::env::current_exe()?;
    if let Err(why) = lab::require_tools() {
        say!(
            "note: no lab here ({why}); running the local benchmark instead: {} processes on this host, no switch, nothing to avoid",
            args.local
        );
        return local(&exe, &args);
    }
    let topology = gen::hub(args.switches - 1, args.machines / args.switches, true);
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    // Ctrl-C stops what runs (the build, the ranks); the lab is then taken down below.
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))?;
    let name = format!("demo{}", std::process::id() % 10_000);
    say!(
        "building lab {name}: {} machines on {} switches (hub s0), {} per link direction, rank r on switch r mod {}{}",
        args.machines,
        args.switches,
        pipecast::input::rate_name(rate_bits),
        args.switches,
        if lab::is_root() {
            ""
        } else {
            ", in a user namespace (no root)"
        }
    );
    let opts = UpOptions {
        rate_bits,
        announce_exe: Some(exe.clone()),
        interrupted: Some(interrupted.clone()),
        ..UpOptions::new(name.clone())
    };
    let state = lab::up(&topology, &opts)?;
    let result = in_lab(&state, &topology, &exe, &args, &sizes, &interrupted);
    let down = lab::down(&state.name);
    match &down {
        Ok(()) => say!("lab {} removed", state.name),
        Err(e) => eprintln!("pipecast: removing lab {}: {e}", state.name),
    }
    if interrupted.load(Ordering::SeqCst) {
        return Err("interrupted: the lab was removed".into());
    }
    result?;
    down?;
    say!("whole run: {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Everything between `lab up` and `lab down`.
fn in_lab(
    state: &LabState,
    built: &Topology,
    exe: &Path,
    args: &Args,
    sizes: &[u64],
    interrupted: &Arc<AtomicBool>,
) -> CliResult {
    let dir = PathBuf::from(&state.run_dir);
    let file = dir.join("topology.json");
    std::fs::write(&file, serde_json::to_string_pretty(&to_json(built))?)?;
    let run_opts = |timeout: u64| RunOptions {
        timeout: Duration::from_secs(timeout),
        interrupted: Some(interrupted.clone()),
        rank0_only: true,
        ..RunOptions::default()
    };
    let topology_file = if state.owner.runs_lldpd() {
        learn_by_lldp(state, exe, &dir, built, &run_opts(60))?
    } else {
        say!(
            "topology: from the file the lab was built from ({})",
            lab::NO_LLDPD
        );
        file
    };
    check_interrupt(interrupted)?;
    show_plan(&topology_file, sizes, &args.svg)?;
    // The lab runs at 100 mbit: the cost model's segment sizes from seed 003 Table 2's
    // 100 Mbit/s column (as bench/lab_bcast.sh does).
    if state.rate_bits == 100_000_000 && pipecast::comm::Settings::from_env().profile.is_none() {
        std::env::set_var("PIPECAST_PROFILE", "100mbit");
    }
    let report = dir.join("bench.json");
    let size_list = args.sizes.clone();
    let iters = args.iters.max(1).to_string();
    let topology_arg = topology_file.display().to_string();
    let report_arg = report.display().to_string();
    let mut cmd: Vec<String> = [
        &exe.display().to_string(),
        "bench",
        "--topology",
        &topology_arg,
        "--sizes",
        &size_list,
        "--tree",
        TREES,
        "--iters",
        &iters,
        "--warmup",
        "1",
        "--root",
        "0",
        "--timeout-ms",
        "60000",
        "--report",
        &report_arg,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if std::io::stderr().is_terminal() {
        cmd.push("--progress".into());
    }
    say!(
        "\nbroadcasting {} from rank 0 with {TREES}, {} times each after a warm-up, every byte checked at every rank:",
        sizes
            .iter()
            .map(|&b| crate::bench::size_name(b))
            .collect::<Vec<_>>()
            .join(", "),
        args.iters
    );
    let outcomes = lab::run(state, &cmd, &run_opts(600))?;
    check_interrupt(interrupted)?;
    if let Some(bad) = outcomes.iter().find(|o| !o.success()) {
        return Err(format!(
            "the benchmark failed on rank {} ({}): see its messages above",
            bad.rank, bad.machine
        )
        .into());
    }
    summary(&std::fs::read_to_string(&report)?)
}

fn check_interrupt(flag: &AtomicBool) -> CliResult {
    if flag.load(Ordering::SeqCst) {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

/// `lab lldp` and `lab run … topo discover`: the topology as LLDP tells it, written next to
/// the lab's state; says whether it matches the lab that was built.
fn learn_by_lldp(
    state: &LabState,
    exe: &Path,
    dir: &Path,
    built: &Topology,
    opts: &RunOptions,
) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let dumps = dir.join("lldp");
    lab::lldp_dump(state, &dumps)?;
    let found = dir.join("discovered.json");
    let cmd: Vec<String> = [
        &exe.display().to_string(),
        "topo",
        "discover",
        "--switch-lldp",
        &dumps.display().to_string(),
        "--listen-seconds",
        "5",
        "-o",
        &found.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let outcomes = lab::run(state, &cmd, opts)?;
    if outcomes.iter().any(|o| !o.success()) {
        return Err("discovering the topology over LLDP failed (see the messages above)".into());
    }
    let learned = read_topology(&found, pipecast::comm::settings::max_input_bytes()?)?;
    let same = to_json(&learned) == to_json(built)
        || (learned.size() == built.size()
            && learned.switches().len() == built.switches().len()
            && (0..built.size()).all(|r| {
                learned.switches()[learned.switch_of(r)].name
                    == built.switches()[built.switch_of(r)].name
            }));
    say!(
        "topology: learned over LLDP from {} switches and {} machines{}",
        learned.switches().len(),
        learned.size(),
        if same {
            ", the lab as built"
        } else {
            " — NOT the lab as built; using what LLDP says"
        }
    );
    Ok(found)
}

/// The plan `auto` picks for the largest size: the table of `pipecast plan`, and its SVG.
fn show_plan(topology_file: &Path, sizes: &[u64], svg_path: &Path) -> CliResult {
    use pipecast::plan::TreeKind;
    let topology = read_topology(topology_file, pipecast::comm::settings::max_input_bytes()?)?;
    let msize = sizes.iter().copied().max().unwrap_or(1 << 20).max(1);
    let profile = "100mbit";
    let chosen = pipecast::hetero::plan_for(
        &topology,
        0,
        &TreeKind::Auto,
        &pipecast::input::load_profile(profile, pipecast::comm::settings::max_input_bytes()?)?,
        msize,
    )?;
    let priced = Some((msize, chosen.segment_bytes, chosen.predicted_us));
    say!(
        "\nthe plan for {} from rank 0 (`pipecast plan --topology FILE --msize {msize}`):",
        crate::bench::size_name(msize)
    );
    say_raw!(
        "{}",
        crate::plan::table(&chosen.plan, &topology, priced, profile)
    );
    match crate::plan::svg(&crate::plan::dot(&chosen.plan, &topology)) {
        Ok(svg) => match std::fs::write(svg_path, svg) {
            Ok(()) => say!("plan drawn in {}", svg_path.display()),
            Err(e) => say!("no SVG: cannot write {}: {e}", svg_path.display()),
        },
        Err(e) => say!("no SVG: {e}"),
    }
    Ok(())
}

/// One line per size: each schedule's time as a ratio to T(msize), and how much faster
/// `auto` was than the best of the others.
fn summary(report: &str) -> CliResult {
    let report: serde_json::Value = serde_json::from_str(report)?;
    let rows = report["results"].as_array().cloned().unwrap_or_default();
    let mut sizes: Vec<u64> = rows.iter().filter_map(|r| r["bytes"].as_u64()).collect();
    sizes.dedup();
    say!("\nsummary (time / T(msize), lower is better; T = one point-to-point transfer of the message, same run):");
    let mut all_verified = true;
    for bytes in sizes {
        let of_size: Vec<&serde_json::Value> =
            rows.iter().filter(|r| r["bytes"] == bytes).collect();
        let ratio = |r: &serde_json::Value| {
            r["avg_us"].as_f64().unwrap_or(0.0) / r["p2p_us"].as_f64().unwrap_or(1.0).max(1e-9)
        };
        all_verified &= of_size.iter().all(|r| r["verified"] == true);
        let parts: Vec<String> = of_size
            .iter()
            .map(|r| {
                let tree = r["tree"].as_str().unwrap_or("?");
                let ran = r["ran"].as_str().unwrap_or(tree);
                let label = if ran == tree {
                    tree.to_string()
                } else {
                    format!("{tree} ({ran})")
                };
                format!("{label} {:.2}", ratio(r))
            })
            .collect();
        let auto = of_size
            .iter()
            .find(|r| r["tree"] == "auto")
            .map(|r| ratio(r));
        let best_other = of_size
            .iter()
            .filter(|r| r["tree"] != "auto")
            .map(|r| (ratio(r), r["tree"].as_str().unwrap_or("?")))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let verdict = match (auto, best_other) {
            (Some(a), Some((b, name))) if a > 0.0 && b >= a => {
                format!(" → auto {:.1}× faster than the best other ({name})", b / a)
            }
            (Some(a), Some((b, name))) if b > 0.0 => {
                format!(" → auto {:.1}× slower than {name}", a / b)
            }
            _ => String::new(),
        };
        say!(
            "  {:>7}: {}{verdict}",
            crate::bench::size_name(bytes),
            parts.join(", ")
        );
    }
    say!(
        "every byte verified at every rank: {}",
        if all_verified { "yes" } else { "NO" }
    );
    if !all_verified {
        return Err("some rank received wrong bytes".into());
    }
    Ok(())
}

/// No lab here: the local benchmark (`pipecast bench --local N`) with the same schedules.
fn local(exe: &Path, args: &Args) -> CliResult {
    let status = std::process::Command::new(exe)
        .args([
            "bench",
            "--local",
            &args.local.to_string(),
            "--sizes",
            &args.sizes,
            "--tree",
            TREES,
            "--iters",
            &args.iters.max(1).to_string(),
            "--warmup",
            "1",
            "--root",
            "0",
        ])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err("the local benchmark failed (see above)".into())
    }
}
