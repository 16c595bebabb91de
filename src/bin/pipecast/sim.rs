//! `pipecast sim`: simulate whole broadcasts on a topology (the real engine at every rank on
//! a simulated network, `pipecast::sim::simulate`) and report their times, the busy time of
//! every directed edge, the bottleneck and the contention; sweep sizes and trees; plot.

use crate::bench::parse_sizes;
use crate::CliResult;
use pipecast::comm::{resolve, schedule, Algorithm};
use pipecast::input::read_topology;
use pipecast::model::Profile;
use pipecast::sim::{simulate_on_rails, Report, Timing};
use pipecast::topology::{hosts, Topology};
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Topology file (rank r on machine r; per-link `gbps` sets edge rates).
    #[arg(long)]
    topology: std::path::PathBuf,
    /// Trees: comma list of `pipecast plan`'s trees (auto included), scatter-allgather, or
    /// multicast (issue 32: the group send with its repair and ack tree, simulated by
    /// `sim::multicast`; docs/multicast.md).
    #[arg(long, default_value = "auto")]
    tree: String,
    /// Multicast only: chance that one 1500-byte frame is lost on one link (0 to below 1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Multicast only: seed of the loss draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Message size (K/M/G suffixes, binary units).
    #[arg(long, conflicts_with = "sizes")]
    msize: Option<String>,
    /// Message sizes: comma list (K/M/G suffixes).
    #[arg(long)]
    sizes: Option<String>,
    /// Segment size of the pipelined trees (default: the model's choice, as bench does).
    #[arg(long)]
    segment: Option<String>,
    /// Root of the broadcasts.
    #[arg(long, default_value_t = 0)]
    root: usize,
    /// Calibration profile: L(m), g(m) of seed 003 §4.2 (a JSON file, or 100mbit, 1gbit). It
    /// also gives `auto` and the segment sizes. Default: 100mbit, or with --link-rate the
    /// profile of that rate (`model::network`, no CPU cost: what the simulator charges).
    #[arg(long)]
    profile: Option<String>,
    /// Time by link rate alone (edges without `gbps`; no L, no g): tc's spelling (100mbit,
    /// 2.5gbit, 10gbit) or a bare number of Gbit/s. Unless --profile is given, `auto` and the
    /// segment sizes are chosen by the profile of this rate.
    #[arg(long, value_name = "RATE")]
    link_rate: Option<String>,
    /// Print one JSON object (the contract of docs/sim.md).
    #[arg(long)]
    json: bool,
    /// Output format (svg: completion time against message size, one line per tree).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// With the table: also every rank's completion.
    #[arg(long)]
    per_rank: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Table,
    Json,
    Svg,
}

/// One simulated broadcast: the JSON contract of `pipecast sim --json` (docs/sim.md).
#[derive(Serialize)]
struct Row {
    tree: String,
    bytes: u64,
    segment_bytes: u64,
    completion_us: f64,
    bottleneck: Option<String>,
    edges: Vec<EdgeRow>,
    /// Extension: every rank's completion (µs), by rank.
    ranks_us: Vec<f64>,
    /// Extension: edges where different senders' data overlapped.
    contention: Vec<ContentionRow>,
    /// Extension: the model's prediction for this tree and segment (µs).
    predicted_us: f64,
    /// Extension: engine messages sent (segments and credits); multicast: group frames,
    /// repairs, NACKs, acknowledgements and status frames' senders' messages.
    messages: u64,
    /// Extension (multicast only): what the reliability did.
    #[serde(skip_serializing_if = "Option::is_none")]
    multicast: Option<McRow>,
}

/// What a multicast run's reliability did (`sim::multicast::Report`).
#[derive(Serialize)]
struct McRow {
    loss: f64,
    seed: u64,
    repairs: u64,
    root_repairs: u64,
    nacks: u64,
    acks: u64,
    lost: u64,
    duplicates: u64,
    stalls: u64,
    /// (rank, segment) pairs held at the end: checked to be (ranks − 1) × segments.
    delivered: u64,
    segments: u64,
}

#[derive(Serialize)]
struct EdgeRow {
    edge: String,
    busy_us: f64,
}

#[derive(Serialize)]
struct ContentionRow {
    edge: String,
    senders: usize,
    overlap_us: f64,
}

#[derive(Serialize)]
struct Output<'a> {
    ranks: usize,
    results: &'a [Row],
}

pub fn run(args: Args) -> CliResult {
    let topology = hosts::expand(
        &read_topology(&args.topology, pipecast::comm::settings::max_input_bytes()?)?,
        None,
    )?;
    let size = topology.size();
    if args.root >= size {
        return Err(format!(
            "--root {} is not a rank of this {size}-rank topology",
            args.root
        )
        .into());
    }
    let sizes = match (&args.msize, &args.sizes) {
        (Some(m), _) => parse_sizes(m)?,
        (None, Some(list)) => parse_sizes(list)?,
        (None, None) => return Err("give --msize SIZE or --sizes LIST".into()),
    };
    // Multicast is simulated here but refused by the communicator's names (no carrier yet).
    let mut trees = Vec::new();
    for name in args.tree.split(',').map(str::trim) {
        match name {
            "multicast" => trees.push(None),
            _ => trees.push(Some(crate::bench::parse_trees(name)?.remove(0))),
        }
    }
    if !(0.0..1.0).contains(&args.loss) {
        return Err(format!("--loss must be at least 0 and below 1, not {}", args.loss).into());
    }
    let segment = args
        .segment
        .as_deref()
        .map(crate::bench::parse_size)
        .transpose()?;
    if segment == Some(0) || segment.is_some_and(|s| s > u64::from(u32::MAX)) {
        return Err("--segment must be between 1 byte and 4 GiB".into());
    }
    let rate = match args.link_rate.as_deref() {
        Some(text) => Some(pipecast::input::parse_rate(text).ok_or_else(|| {
            let spelling = pipecast::input::RATE_SPELLING;
            format!("--link-rate {text:?} is not a rate: write {spelling}")
        })?),
        None => None,
    };
    let profile = match (&args.profile, rate) {
        (Some(p), _) => {
            pipecast::input::load_profile(p, pipecast::comm::settings::max_input_bytes()?)?
        }
        (None, Some(bits)) => Timing::rate_profile(bits),
        (None, None) => {
            pipecast::input::load_profile("100mbit", pipecast::comm::settings::max_input_bytes()?)?
        }
    };
    let timing = match rate {
        Some(bits) => Timing::Rate {
            gbps: bits as f64 / 1e9,
        },
        None => Timing::Profile(profile.clone()),
    };
    let mut rows = Vec::new();
    for &bytes in &sizes {
        for tree in &trees {
            rows.push(match tree {
                Some(tree) => one(
                    &topology, args.root, tree, bytes, segment, &profile, &timing,
                )?,
                None => one_multicast(
                    &topology, args.root, bytes, segment, &profile, &timing, args.loss, args.seed,
                )?,
            });
        }
    }
    let format = if args.json { Format::Json } else { args.format };
    match format {
        Format::Json => println!(
            "{}",
            serde_json::to_string(&Output {
                ranks: size,
                results: &rows
            })?
        ),
        Format::Svg => print!("{}", svg(size, &rows)),
        Format::Table => table(size, &rows, args.per_rank),
    }
    Ok(())
}

/// Simulates `tree` (resolved as `bench` resolves it) for `bytes`.
fn one(
    topology: &Topology,
    root: usize,
    tree: &Algorithm,
    bytes: u64,
    segment: Option<u64>,
    profile: &Profile,
    timing: &Timing,
) -> Result<Row, Box<dyn std::error::Error>> {
    let (ran, seg) = resolve(topology, root, tree, bytes, segment, profile)?;
    let segments = bytes.div_ceil(seg.max(1)).max(1);
    let (lanes, rails) = schedule(topology, root, &ran, segments)?;
    let lanes: Arc<[_]> = lanes.into();
    let report = simulate_on_rails(topology, lanes.clone(), &rails, root, bytes, seg, timing)
        .map_err(|e| format!("{tree} at {bytes} B: {e}"))?;
    let name = if ran.to_string() == tree.to_string() {
        tree.to_string()
    } else {
        format!("{tree}={ran}")
    };
    let predicted_us = match &ran {
        Algorithm::Tree(kind) => {
            let plan = pipecast::plan::Plan {
                tree: kind.clone(),
                root,
                lanes: lanes.to_vec(),
                rails,
            };
            pipecast::model::predict(&plan, profile, bytes, seg)
        }
        _ => f64::NAN,
    };
    Ok(row(topology, name, bytes, seg, &report, predicted_us))
}

/// Simulates the multicast schedule for `bytes` (segment: given, else the multicast model's).
#[allow(clippy::too_many_arguments)]
fn one_multicast(
    topology: &Topology,
    root: usize,
    bytes: u64,
    segment: Option<u64>,
    profile: &Profile,
    timing: &Timing,
    loss: f64,
    seed: u64,
) -> Result<Row, Box<dyn std::error::Error>> {
    use pipecast::model::multicast as model;
    let choice = model::plan_for(topology, root, profile, bytes, loss)?;
    let shape = model::Shape::of(&choice.plan, Some(topology));
    let seg = segment.unwrap_or(choice.segment_bytes).max(1);
    let predicted_us = model::predict(shape, profile, bytes, seg, loss);
    let options = pipecast::sim::multicast::Options {
        loss,
        seed,
        window: None,
    };
    let r = pipecast::sim::multicast::simulate_multicast(
        topology,
        &choice.plan,
        bytes,
        seg,
        timing,
        options,
    )
    .map_err(|e| format!("multicast at {bytes} B: {e}"))?;
    let report = Report {
        completion_ns: r.completion_ns,
        finished_ns: r.holds_ns.clone(),
        holds_ns: r.holds_ns.clone(),
        edges: r.edges.clone(),
        bottleneck: r.bottleneck,
        contention: Vec::new(),
        messages: r.group_frames + r.repairs + r.nacks + r.acks,
    };
    let mut row = row(
        topology,
        "multicast".into(),
        bytes,
        seg.min(bytes.max(1)),
        &report,
        predicted_us,
    );
    row.multicast = Some(McRow {
        loss,
        seed,
        repairs: r.repairs,
        root_repairs: r.root_repairs,
        nacks: r.nacks,
        acks: r.acks,
        lost: r.lost,
        duplicates: r.duplicates,
        stalls: r.stalls,
        delivered: r.delivered,
        segments: r.segments,
    });
    Ok(row)
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn row(
    topology: &Topology,
    tree: String,
    bytes: u64,
    segment_bytes: u64,
    r: &Report,
    predicted_us: f64,
) -> Row {
    Row {
        tree,
        bytes,
        segment_bytes,
        completion_us: us(r.completion_ns),
        bottleneck: r.bottleneck.map(|b| topology.edge_name(b.edge)),
        edges: r
            .edges
            .iter()
            .map(|e| EdgeRow {
                edge: topology.edge_name(e.edge),
                busy_us: us(e.busy_ns),
            })
            .collect(),
        ranks_us: r.finished_ns.iter().map(|&t| us(t)).collect(),
        contention: r
            .contention
            .iter()
            .map(|c| ContentionRow {
                edge: topology.edge_name(c.edge),
                senders: c.senders,
                overlap_us: us(c.overlap_ns),
            })
            .collect(),
        predicted_us,
        messages: r.messages,
        multicast: None,
    }
}

fn table(size: usize, rows: &[Row], per_rank: bool) {
    println!("# pipecast sim: {size} ranks; completion = the slowest rank's bcast returning (simulated); busiest edge and its busy time; contention = edges where different senders' data overlapped");
    println!(
        "{:>10} {:>22} {:>9} {:>14} {:>14} {:>24} {:>12} {:>10}",
        "bytes",
        "tree",
        "segment",
        "completion_us",
        "predicted_us",
        "bottleneck",
        "busy_us",
        "contended"
    );
    for r in rows {
        let busiest = r
            .bottleneck
            .as_ref()
            .and_then(|b| r.edges.iter().find(|e| &e.edge == b));
        println!(
            "{:>10} {:>22} {:>9} {:>14.1} {:>14.1} {:>24} {:>12.1} {:>10}",
            r.bytes,
            r.tree,
            r.segment_bytes,
            r.completion_us,
            r.predicted_us,
            r.bottleneck.as_deref().unwrap_or("-"),
            busiest.map_or(0.0, |e| e.busy_us),
            r.contention.len()
        );
        if per_rank {
            for (rank, t) in r.ranks_us.iter().enumerate() {
                println!("{:>10} rank {rank}: {t:.1} us", "");
            }
        }
    }
}

/// The tree as given: one line per tree even where its resolution changes with the size
/// (`auto=binary`, then `auto=linear`; `kbinomial=kbinomial:2`, then `kbinomial:1`).
fn requested(tree: &str) -> &str {
    tree.split('=').next().unwrap_or(tree)
}

/// Completion time against message size, log-log, one line per tree.
fn svg(size: usize, rows: &[Row]) -> String {
    let (w, h, left, bottom, top, right) = (720.0, 480.0, 70.0, 50.0, 40.0, 170.0);
    let mut trees: Vec<&str> = Vec::new();
    for r in rows {
        if !trees.contains(&requested(&r.tree)) {
            trees.push(requested(&r.tree));
        }
    }
    let lg = |v: f64| v.max(1e-3).log10();
    let (xs, ys): (Vec<f64>, Vec<f64>) = rows
        .iter()
        .map(|r| (lg(r.bytes.max(1) as f64), lg(r.completion_us)))
        .unzip();
    let span = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min).floor();
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max).ceil();
        if lo.is_finite() && hi > lo {
            (lo, hi)
        } else {
            (0.0, 1.0)
        }
    };
    let ((x0, x1), (y0, y1)) = (span(&xs), span(&ys));
    let px = |x: f64| left + (x - x0) / (x1 - x0) * (w - left - right);
    let py = |y: f64| h - bottom - (y - y0) / (y1 - y0) * (h - bottom - top);
    let colors = [
        "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf",
    ];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"20\">pipecast sim: {size} ranks, simulated completion time (µs) vs message size (bytes), log-log</text>\n"
    );
    let _ = writeln!(
        s,
        "<path d=\"M{l} {t} V{b} H{r}\" stroke=\"black\" fill=\"none\"/>",
        l = left,
        t = top,
        b = h - bottom,
        r = w - right
    );
    for d in x0 as i64..=x1 as i64 {
        let x = px(d as f64);
        let _ = writeln!(
            s,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">1e{d}</text>",
            h - bottom + 18.0
        );
    }
    for d in y0 as i64..=y1 as i64 {
        let y = py(d as f64);
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{y:.1}\" text-anchor=\"end\">1e{d}</text><path d=\"M{left} {y:.1} H{:.1}\" stroke=\"#ddd\"/>",
            left - 6.0,
            w - right
        );
    }
    for (i, tree) in trees.iter().enumerate() {
        let color = colors[i % colors.len()];
        let points: Vec<String> = rows
            .iter()
            .filter(|r| requested(&r.tree) == *tree)
            .map(|r| {
                format!(
                    "{:.1},{:.1}",
                    px(lg(r.bytes.max(1) as f64)),
                    py(lg(r.completion_us))
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>",
            points.join(" ")
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">{}</text>",
            w - right + 10.0,
            top + 16.0 * (i as f64 + 1.0),
            escape(tree)
        );
    }
    s + "</svg>\n"
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
