//! `pipecast hetero`: seed 004's broadcast-tree heuristics and the LP optimum on a platform file,
//! and `pipecast hetero gen` to make random and Tiers-like platforms.

use crate::CliResult;
use pipecast::hetero::{self, Model, Platform, HEURISTICS};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    gen: Option<GenCommand>,
    /// Platform file (JSON: nodes, source, edges with from, to, time and optional send).
    #[arg(long)]
    platform: Option<PathBuf>,
    /// Heuristic: prune-simple, prune-degree, grow, binomial, multiport-grow, lp-prune,
    /// lp-grow, or all.
    #[arg(long, default_value = "all")]
    heuristic: String,
    /// Model under which the trees' period is computed: one-port or multi-port. The LP optimum
    /// is always the one-port one (seed 004 §5.2.2), so multi-port ratios can exceed 1.
    #[arg(long, default_value = "one-port")]
    model: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum GenCommand {
    /// Generate a platform (seed 004 §5.1) and print it as JSON.
    Gen(GenArgs),
}

#[derive(clap::Args)]
struct GenArgs {
    /// random (Table 2) or tiers (three-level WAN/MAN/LAN).
    #[arg(long, default_value = "random")]
    kind: String,
    /// Number of nodes.
    #[arg(long, default_value_t = 30)]
    nodes: usize,
    /// Probability that two nodes are linked (random platforms only).
    #[arg(long, default_value_t = 0.1)]
    density: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write to this file instead of stdout.
    #[arg(long, short)]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> CliResult {
    if let Some(GenCommand::Gen(g)) = args.gen {
        return generate(g);
    }
    let Some(path) = args.platform else {
        return Err("pipecast hetero: give --platform FILE (or use `pipecast hetero gen`)".into());
    };
    let platform =
        pipecast::input::read_platform(&path, pipecast::comm::settings::max_input_bytes()?)?;
    let model: Model = args.model.parse()?;
    let names: Vec<&str> = if args.heuristic == "all" {
        HEURISTICS.to_vec()
    } else {
        if !HEURISTICS.contains(&args.heuristic.as_str()) {
            return Err(hetero::HeteroError::UnknownHeuristic(args.heuristic).into());
        }
        vec![args.heuristic.as_str()]
    };
    let lp = hetero::ssb(&platform)?;
    // Each heuristic's tree, or why it does not apply to this platform (e.g. `binomial` on a
    // directed platform where one of its transfers has no path): one inapplicable heuristic
    // does not hide the others' results.
    let mut rows = Vec::new();
    for name in &names {
        let built = hetero::build(&platform, name, Some(&lp)).map(|tree| {
            let period = hetero::period(&platform, &tree, model);
            (tree, period)
        });
        rows.push((*name, built));
    }
    if let [(_, Err(e))] = rows.as_slice() {
        // The one heuristic asked for does not apply: that is the command's error.
        return Err(e.to_string().into());
    }
    if rows.iter().all(|(_, r)| r.is_err()) {
        let why: Vec<String> = rows
            .iter()
            .filter_map(|(name, r)| r.as_ref().err().map(|e| format!("{name}: {e}")))
            .collect();
        return Err(format!("no heuristic applies to this platform: {}", why.join("; ")).into());
    }
    if args.json {
        let heuristics: Vec<Value> = rows
            .iter()
            .map(|(name, built)| match built {
                Ok((tree, period)) => json!({
                    "name": name,
                    "parents": parents_json(&platform, tree),
                    "period": period,
                    "throughput": 1.0 / period,
                    "ratio": 1.0 / period / lp.throughput,
                }),
                Err(e) => json!({
                    "name": name,
                    "applies": false,
                    "error": e.to_string(),
                }),
            })
            .collect();
        let out = json!({
            "model": model.name(),
            "lp_optimum": lp.throughput,
            "heuristics": heuristics,
        });
        emit(serde_json::to_string_pretty(&out)? + "\n")
    } else {
        let mut text = String::new();
        writeln!(
            text,
            "platform {}: {} nodes, {} edges (density {:.3}), source {}; model {}",
            path.display(),
            platform.size(),
            platform.edges().len(),
            platform.density(),
            platform.nodes()[platform.source()],
            model.name()
        )?;
        writeln!(
            text,
            "LP optimum (several trees, one-port): {:.6} slices per time unit",
            lp.throughput
        )?;
        writeln!(
            text,
            "{:<16} {:>12} {:>12} {:>8}  height",
            "heuristic", "period", "throughput", "ratio"
        )?;
        for (name, built) in &rows {
            match built {
                Ok((tree, period)) => writeln!(
                    text,
                    "{:<16} {:>12.6} {:>12.6} {:>7.1}%  {}",
                    name,
                    period,
                    1.0 / period,
                    100.0 / period / lp.throughput,
                    height(tree)
                )?,
                Err(e) => writeln!(text, "{name:<16} does not apply: {e}")?,
            }
        }
        emit(text)
    }
}

/// Prints on stdout; a closed pipe (`| head`) is not an error.
fn emit(text: String) -> CliResult {
    match std::io::stdout().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn parents_json(platform: &Platform, tree: &hetero::Tree) -> Value {
    let mut map = Map::new();
    for (v, p) in tree.parent.iter().enumerate() {
        if let Some(p) = p {
            map.insert(
                platform.nodes()[v].clone(),
                Value::from(platform.nodes()[*p].clone()),
            );
        }
    }
    Value::Object(map)
}

fn height(tree: &hetero::Tree) -> usize {
    (0..tree.parent.len())
        .map(|mut v| {
            let mut d = 0;
            while let Some(p) = tree.parent[v] {
                v = p;
                d += 1;
            }
            d
        })
        .max()
        .unwrap_or(0)
}

fn generate(g: GenArgs) -> CliResult {
    let platform = match g.kind.as_str() {
        "random" => hetero::gen::random(g.nodes, g.density, g.seed)?,
        "tiers" => hetero::gen::tiers(g.nodes, g.seed)?,
        other => {
            return Err(format!("unknown platform kind {other:?}: use random or tiers").into())
        }
    };
    let text = serde_json::to_string_pretty(&platform.to_json())?;
    match g.output {
        Some(path) => std::fs::write(&path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
        None => emit(text + "\n")?,
    }
    Ok(())
}
