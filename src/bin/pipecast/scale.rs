//! `pipecast scale`: connections, descriptors and memory per rank on paper, from the real
//! planner (docs/scale.md, "On paper"). For each job size and tree it builds the plans of a
//! set of roots on a generated hub topology (64 switches: a hub and 63 edge switches, P/64
//! machines on each), counts every rank's distinct tree neighbours over those plans (the peers
//! it would connect to with connections made on first use of a tree edge), and sets them
//! against today's full mesh (every rank connected to every other).

use crate::CliResult;
use pipecast::plan::{self, TreeKind};
use pipecast::topology::gen;

/// Streams a rank opens per neighbour over TCP (one each way).
const STREAMS_PER_PEER: u64 = 2;
/// What one stream costs in the kernel before autotuning grows it: Linux's default receive and
/// send buffers (`net.ipv4.tcp_rmem` and `tcp_wmem`, middle values 131072 and 16384).
const STREAM_BYTES: u64 = 131_072 + 16_384;
/// Switches of the generated topology (the hub and its edge switches).
const SWITCHES: usize = 64;

#[derive(clap::Args)]
pub struct Args {
    /// Job sizes: comma list of multiples of 64.
    #[arg(long, default_value = "4096,65536")]
    ranks: String,
    /// Trees, as `pipecast plan --tree` names them.
    #[arg(long, default_value = "linear,binary,kbinomial")]
    trees: String,
    /// Roots per tree: that many evenly spaced roots (0, P/N, 2P/N, …); a rank's neighbours are
    /// counted over all of their plans. 1: the one root 0.
    #[arg(long, default_value_t = 1)]
    roots: usize,
    /// One JSON object per row instead of a Markdown table.
    #[arg(long)]
    json: bool,
}

/// One row: a tree at one size over some roots.
struct Row {
    ranks: usize,
    tree: String,
    roots: usize,
    /// Distinct neighbours per rank: max and median; `None` when the planner refused.
    peers: Result<(u64, u64), String>,
}

pub fn run(args: Args) -> CliResult {
    let sizes: Vec<usize> = args
        .ranks
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--ranks {:?}: {e}", args.ranks))?;
    if let Some(p) = sizes.iter().find(|p| **p < SWITCHES || **p % SWITCHES != 0) {
        return Err(
            format!("--ranks: {p} is not a multiple of {SWITCHES} (at least {SWITCHES})").into(),
        );
    }
    if args.roots == 0 {
        return Err("--roots: at least 1".into());
    }
    let trees: Vec<TreeKind> = args
        .trees
        .split(',')
        .map(|t| t.trim().parse::<TreeKind>())
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
    for &p in &sizes {
        let topology = gen::hub(SWITCHES - 1, p / SWITCHES, false);
        for tree in &trees {
            let roots = args.roots.min(p);
            let mut neighbours: Vec<std::collections::BTreeSet<usize>> =
                vec![Default::default(); p];
            let mut refused = None;
            for i in 0..roots {
                let root = i * (p / roots);
                match plan::build(&topology, root, tree, None) {
                    Ok(plan) => {
                        for lane in &plan.lanes {
                            for (r, parent) in lane.parents.iter().enumerate() {
                                if let Some(q) = parent {
                                    neighbours[r].insert(*q);
                                    neighbours[*q].insert(r);
                                }
                            }
                        }
                    }
                    Err(e) => {
                        refused = Some(e.to_string());
                        break;
                    }
                }
            }
            let peers = match refused {
                Some(e) => Err(e),
                None => {
                    let mut counts: Vec<u64> = neighbours.iter().map(|n| n.len() as u64).collect();
                    counts.sort_unstable();
                    Ok((counts[p - 1], counts[(p - 1) / 2]))
                }
            };
            rows.push(Row {
                ranks: p,
                tree: tree.to_string(),
                roots,
                peers,
            });
        }
        let mesh = (p - 1) as u64;
        rows.push(Row {
            ranks: p,
            tree: "full mesh (today)".into(),
            roots: p,
            peers: Ok((mesh, mesh)),
        });
    }
    print_rows(&rows, args.json);
    Ok(())
}

fn print_rows(rows: &[Row], json: bool) {
    if !json {
        println!("| ranks | tree | roots | neighbours max / median | descriptors max / median | socket memory max / median |");
        println!("|---|---|---|---|---|---|");
    }
    for row in rows {
        match &row.peers {
            Ok((max, median)) => {
                let fds = |n: u64| n * STREAMS_PER_PEER;
                let mem = |n: u64| fds(n) * STREAM_BYTES;
                if json {
                    println!(
                        "{}",
                        serde_json::json!({
                            "ranks": row.ranks, "tree": row.tree, "roots": row.roots,
                            "neighbours_max": max, "neighbours_median": median,
                            "descriptors_max": fds(*max), "descriptors_median": fds(*median),
                            "socket_bytes_max": mem(*max), "socket_bytes_median": mem(*median),
                        })
                    );
                } else {
                    println!(
                        "| {} | {} | {} | {max} / {median} | {} / {} | {} / {} |",
                        row.ranks,
                        row.tree,
                        row.roots,
                        fds(*max),
                        fds(*median),
                        size(mem(*max)),
                        size(mem(*median)),
                    );
                }
            }
            Err(e) => {
                if json {
                    println!(
                        "{}",
                        serde_json::json!({"ranks": row.ranks, "tree": row.tree, "roots": row.roots, "refused": e})
                    );
                } else {
                    println!(
                        "| {} | {} | {} | refused: {e} | | |",
                        row.ranks, row.tree, row.roots
                    );
                }
            }
        }
    }
}

/// Bytes in KiB, MiB or GiB, one decimal.
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}
