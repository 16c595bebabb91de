//! `pipecast plan`: build a broadcast tree on a topology file and print it as a table, as the
//! DESIGN.md JSON contract, or as Graphviz (dot / svg).

use crate::CliResult;
use pipecast::hetero;
use pipecast::input::read_topology;
use pipecast::model::contention;
use pipecast::plan::{self, multicast, Plan, TreeKind};
use pipecast::topology::{hosts, Topology};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[derive(clap::Args)]
pub struct Args {
    /// Topology file (JSON, see `pipecast topo`).
    #[arg(long)]
    topology: PathBuf,
    /// Root rank of the broadcast.
    #[arg(long, default_value_t = 0)]
    root: usize,
    /// Tree algorithm: linear, binary, kary:K, kbinomial, kbinomial:K, multilane, flat,
    /// binomial, naive-linear, naive-binary, auto, multicast (the group send plus its ack
    /// tree; docs/multicast.md). Default: auto with --msize, else linear (auto never picks
    /// multicast).
    #[arg(long)]
    tree: Option<String>,
    /// Message size in bytes (suffixes K, M, G = 2^10, 2^20, 2^30): adds the model's segment
    /// size and predicted time.
    #[arg(long, value_parser = parse_bytes)]
    msize: Option<u64>,
    /// Calibration profile: a JSON file, or a built-in: 100mbit, 1gbit (seed 003 Table 2).
    #[arg(long, default_value = "100mbit")]
    profile: String,
    /// Ranks on every machine (overrides the file's `ranks`): rank order fills machine 0
    /// first. Ranks sharing a machine get a two-level plan (leaders between machines, the
    /// rest fed through memory).
    #[arg(long, value_name = "K")]
    ranks_per_machine: Option<usize>,
    /// Print the JSON contract (same as --format json).
    #[arg(long)]
    json: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Table,
    Json,
    Dot,
    Svg,
}

/// `65536`, `64K`, `64KiB`, `1M`, `2G` (binary multiples, case-insensitive).
fn parse_bytes(text: &str) -> Result<u64, String> {
    pipecast::input::parse_bytes(text)
        .ok_or_else(|| format!("{text:?} is not a byte count: write e.g. 65536, 64K, 1M or 2G"))
}

pub fn run(args: Args) -> CliResult {
    let topology = hosts::expand(
        &read_topology(&args.topology, pipecast::comm::settings::max_input_bytes()?)?,
        args.ranks_per_machine,
    )?;
    let kind: TreeKind = match &args.tree {
        Some(name) => name.parse()?,
        None if args.msize.is_some() => TreeKind::Auto,
        None => TreeKind::Linear,
    };
    let (plan, priced) = match args.msize {
        Some(msize) => {
            let profile = pipecast::input::load_profile(
                &args.profile,
                pipecast::comm::settings::max_input_bytes()?,
            )?;
            let c = hetero::plan_for(&topology, args.root, &kind, &profile, msize)?;
            (c.plan, Some((msize, c.segment_bytes, c.predicted_us)))
        }
        None => (hetero::build_plan(&topology, args.root, &kind, None)?, None),
    };
    let format = if args.json { Format::Json } else { args.format };
    let out = match format {
        Format::Json => plan_json(&plan, &topology, priced),
        Format::Table => table(&plan, &topology, priced, &args.profile),
        Format::Dot => dot(&plan, &topology),
        Format::Svg => svg(&dot(&plan, &topology))?,
    };
    print!("{out}");
    Ok(())
}

/// The DESIGN.md `pipecast plan` JSON contract (written by the library, as the C API's).
fn plan_json(plan: &Plan, topology: &Topology, priced: Option<(u64, u64, f64)>) -> String {
    let json = pipecast::comm::plan_json(&pipecast::comm::PlanReport {
        tree: plan.tree.to_string(),
        root: plan.root,
        lanes: &plan.lanes,
        rails: &plan.rails,
        topology,
        priced: priced.map(|(_, segment, predicted)| (segment, Some(predicted))),
        throughput: hetero_throughput(plan, topology, priced),
    });
    match multicast_json(plan, topology) {
        // The contract's last field: the line ends in "}\n".
        Some(field) => format!(
            "{},\"multicast\":{field}}}\n",
            json.trim_end().trim_end_matches('}')
        ),
        None => json,
    }
}

/// Issue 32: a multicast plan's group send (docs/multicast.md). `lanes` hold its ack tree.
fn multicast_json(plan: &Plan, topology: &Topology) -> Option<serde_json::Value> {
    if plan.tree != TreeKind::Multicast {
        return None;
    }
    let edges: Vec<String> = multicast::group_edges(topology, plan.root)
        .into_iter()
        .map(|e| topology.edge_name(e))
        .collect();
    Some(serde_json::json!({
        "sender": plan.root,
        "receivers": multicast::receivers(plan),
        "group_edges": edges,
        "ack_tree": "lanes[0]",
    }))
}

/// For `hetero:NAME` plans: the slice size and the heuristic's throughput (slices/s) on the
/// platform graph of the topology, with slices of the model's segment size when priced.
fn hetero_throughput(
    plan: &Plan,
    topology: &Topology,
    priced: Option<(u64, u64, f64)>,
) -> Option<(u64, f64)> {
    let TreeKind::Hetero(name) = &plan.tree else {
        return None;
    };
    let slice = priced.map_or(hetero::PLAN_SLICE, |(_, segment, _)| segment.max(1));
    // Two-level plans: the heuristic's tree runs between the hosts' leaders.
    let (network, root) = match topology.hosts() {
        Some(h) => (h.network(), h.host_of(plan.root)),
        None => (topology, plan.root),
    };
    hetero::plan_on_topology(network, root, name, slice)
        .ok()
        .map(|(_, throughput)| (slice, throughput))
}

pub(crate) fn table(
    plan: &Plan,
    topology: &Topology,
    priced: Option<(u64, u64, f64)>,
    profile: &str,
) -> String {
    let report = plan::check(plan, topology);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tree {}, root {}, {} ranks, {} lane{}, height {}, max degree {}, contention-free: {}",
        plan.tree,
        plan.root,
        plan.size(),
        plan.lanes.len(),
        if plan.lanes.len() == 1 { "" } else { "s" },
        plan.height(),
        plan.max_degree(),
        if report.contention_free { "yes" } else { "no" },
    );
    if let Some((slice, throughput)) = hetero_throughput(plan, topology, priced) {
        let _ = writeln!(
            s,
            "seed 004 one-port throughput: {throughput:.1} slices/s of {slice} bytes ({:.1} MB/s); the model ignores shared switch links",
            throughput * slice as f64 / 1e6
        );
    }
    if plan.tree == TreeKind::Multicast {
        let _ = writeln!(
            s,
            "multicast: rank {} sends each segment once to the group; the switches copy it over {} directed edges (each once) and every other rank receives it directly. Lane 0 is the ack/repair tree: acks aggregated to the parent, NACKs to the parent, repairs by unicast from it (the communicator runs it over UDP multicast where every rank received the setup's probe)",
            plan.root,
            multicast::group_edges(topology, plan.root).len()
        );
    }
    if let Some((msize, segment, predicted)) = priced {
        let _ = writeln!(
            s,
            "message {msize} B, segment {segment} B, predicted {predicted:.1} us (profile {profile})"
        );
    }
    let name = |r: usize| topology.machines()[r].name.as_str();
    if let Some(hosts) = topology.hosts() {
        let _ = writeln!(
            s,
            "two-level: {} between {} hosts' leaders, each leader then feeds its host's other ranks through memory",
            plan.tree,
            hosts.count()
        );
        let _ = writeln!(s, "{:<12} {:>6}  ranks", "host", "leader");
        for h in 0..hosts.count() {
            let ranks: Vec<String> = hosts.ranks(h).iter().map(|r| r.to_string()).collect();
            let _ = writeln!(
                s,
                "{:<12} {:>6}  {}",
                hosts.name(h),
                hosts.leader(h, plan.root),
                ranks.join(" ")
            );
        }
    }
    for (i, lane) in plan.lanes.iter().enumerate() {
        let rail = plan.rail(i);
        if plan.rails.is_empty() {
            let _ = writeln!(s, "\nlane {i}");
        } else {
            // Multilane on rails: the lane leaves and enters every machine through NIC `rail`.
            let _ = writeln!(s, "\nlane {i} (rail {rail}: NIC {rail} of every machine)");
        }
        let _ = writeln!(
            s,
            "{:>5}  {:<12} {:<10} {:<12} children (send order)",
            "rank", "machine", "switch", "parent"
        );
        for r in 0..plan.size() {
            let parent = lane.parents[r].map_or("-".to_string(), |p| format!("{p} {}", name(p)));
            let kids: Vec<String> = lane.children[r].iter().map(|c| c.to_string()).collect();
            let _ = writeln!(
                s,
                "{:>5}  {:<12} {:<10} {:<12} {}",
                r,
                name(r),
                topology.switches()[topology.nic_switch(r, rail.min(topology.rails() - 1))].name,
                parent,
                kids.join(" ")
            );
        }
        const SHOWN: usize = 20;
        let found = contention::conflicts_on(lane, rail, topology, SHOWN + 1);
        if !found.is_empty() || !report.contention_free {
            let _ = writeln!(s, "conflicts in lane {i} (pipelined 1-port model):");
            for c in found.iter().take(SHOWN) {
                let _ = writeln!(
                    s,
                    "  {}->{} and {}->{} both use {}",
                    name(c.first.0),
                    name(c.first.1),
                    name(c.second.0),
                    name(c.second.1),
                    topology.edge_name(c.edge)
                );
            }
            if found.len() > SHOWN {
                let _ = writeln!(s, "  … and more");
            }
        }
    }
    s
}

/// Graphviz: switches as boxes joined by their links, machines as ellipses under their switch,
/// and the broadcast tree drawn over them (one color per lane, labels = send order).
pub(crate) fn dot(plan: &Plan, topology: &Topology) -> String {
    const COLORS: [&str; 4] = ["red", "blue", "darkgreen", "darkorange"];
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let q = |s: &str| format!("\"{}\"", esc(s));
    let sw = |i: usize| q(&format!("switch {}", topology.switches()[i].name));
    let m = |r: usize| q(&format!("machine {}", topology.machines()[r].name));
    let mut s = String::from("digraph pipecast {\n  graph [rankdir=TB, fontname=\"Helvetica\"];\n");
    let _ = writeln!(
        s,
        "  label={};\n  labelloc=t;",
        q(&format!(
            "pipecast plan: {} rooted at rank {}",
            plan.tree, plan.root
        ))
    );
    for (i, switch) in topology.switches().iter().enumerate() {
        let _ = writeln!(s, "  {} [shape=box, label={}];", sw(i), q(&switch.name));
    }
    for link in topology.links() {
        let _ = writeln!(
            s,
            "  {} -> {} [dir=none, color=gray40, penwidth=2];",
            sw(link.a),
            sw(link.b)
        );
    }
    for (r, machine) in topology.machines().iter().enumerate() {
        let style = if r == plan.root { ", style=bold" } else { "" };
        let _ = writeln!(
            s,
            "  {} [shape=ellipse, label=\"{}\\nrank {r}\"{style}];",
            m(r),
            esc(&machine.name),
        );
        for rail in 0..topology.rails() {
            let _ = writeln!(
                s,
                "  {} -> {} [dir=none, color=gray70];",
                sw(topology.nic_switch(r, rail)),
                m(r)
            );
        }
    }
    if plan.tree == TreeKind::Multicast {
        // The group send: each directed edge the switches copy the frame over, once.
        let group = "[color=purple, style=dashed, penwidth=2, label=\"group\", fontcolor=purple, constraint=false]";
        let _ = writeln!(
            s,
            "  {} -> {} {group};",
            m(plan.root),
            sw(topology.switch_of(plan.root))
        );
        for (switch, from) in multicast::switch_order(topology, plan.root) {
            if from.is_some() {
                let (up, _) = topology
                    .neighbours(switch)
                    .iter()
                    .copied()
                    .find(|&(n, l)| from == Some(topology.link_edge(l, n)))
                    .expect("a copied-into switch has the link it came by");
                let _ = writeln!(s, "  {} -> {} {group};", sw(up), sw(switch));
            }
            for r in topology.machines_on(switch).filter(|&r| r != plan.root) {
                let _ = writeln!(s, "  {} -> {} {group};", sw(switch), m(r));
            }
        }
    }
    for (i, lane) in plan.lanes.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        for (p, kids) in lane.children.iter().enumerate() {
            for (pos, &c) in kids.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "  {} -> {} [color={color}, fontcolor={color}, label=\"{}\", constraint=false];",
                    m(p),
                    m(c),
                    pos + 1
                );
            }
        }
    }
    s.push_str("}\n");
    s
}

/// Pipes dot text through Graphviz's `dot -Tsvg`.
pub(crate) fn svg(dot_text: &str) -> Result<String, Box<dyn std::error::Error>> {
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "--format svg runs Graphviz `dot`, which could not be started ({e}): install \
                 graphviz (e.g. apt-get install graphviz) or use --format dot"
            )
        })?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(dot_text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!(
            "Graphviz dot failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_suffixes() {
        assert_eq!(parse_bytes("65536"), Ok(65536));
        assert_eq!(parse_bytes("64K"), Ok(65536));
        assert_eq!(parse_bytes("64kib"), Ok(65536));
        assert_eq!(parse_bytes("1M"), Ok(1 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("M").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("99999999999999G").is_err());
    }
}
