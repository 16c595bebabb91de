//! `pipecast scale`: connections, descriptors and memory per rank on paper, from the real
//! planner (docs/scale.md, "On paper"). For each job size and tree it builds the plans of a
//! set of roots on a generated hub topology (64 switches: a hub and 63 edge switches, P/64
//! machines on each), counts every rank's distinct tree neighbours over those plans (the peers
//! it would connect to with connections made on first use of a tree edge), and sets them
//! against today's full mesh (every rank connected to every other). With `--per-host K`,
//! K ranks share each machine (a host) and the plans are two-level (`plan::two_level`): the
//! tree between hosts over TCP, each host's ranks fed through shared memory; a rank's
//! neighbours are then split into TCP peers (other hosts) and shared-memory peers (its host).
//! Per rank it also counts tree edges in (parents) and out (children) over the plans, and the
//! memory the runtime holds for them: socket buffers per TCP stream, and one shared-memory
//! staging ring per rank of a host of several (the peers' rings are mapped, shared pages).

use crate::CliResult;
use pipecast::plan::{self, TreeKind};
use pipecast::topology::{gen, hosts};
use std::collections::BTreeSet;

/// Streams a rank holds per neighbour over TCP (one, carrying both directions).
const STREAMS_PER_PEER: u64 = 1;
/// Streams per peer of the full mesh the runtime made before issue 30 (one each way).
const MESH_STREAMS_PER_PEER: u64 = 2;
/// What one stream costs in the kernel before autotuning grows it: Linux's default receive and
/// send buffers (`net.ipv4.tcp_rmem` and `tcp_wmem`, middle values 131072 and 16384).
const STREAM_BYTES: u64 = 131_072 + 16_384;
/// Switches of the generated topology (the hub and its edge switches).
const SWITCHES: usize = 64;
/// The shared-memory link's staging ring, one per rank of a host of several
/// (`transport::shm`, `RING_BYTES`).
const RING_BYTES: u64 = 8 << 20;

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
    /// Ranks per host: comma list (1: every rank a machine of its own; K > 1: two-level plans,
    /// each host's ranks fed through shared memory). P/64 must be a multiple of K.
    #[arg(long, default_value = "1")]
    per_host: String,
    /// One JSON object per row instead of a Markdown table.
    #[arg(long)]
    json: bool,
}

/// One row: a tree at one size over some roots.
struct Row {
    ranks: usize,
    tree: String,
    roots: usize,
    per_host: usize,
    /// Per rank, max and median; `Err` when the planner refused.
    counts: Result<Counts, String>,
}

/// Max and median over ranks of each count.
struct Counts {
    /// Distinct neighbours (parents and children over every plan and lane).
    peers: (u64, u64),
    /// Distinct parents (tree edges in) and children (out).
    ins: (u64, u64),
    outs: (u64, u64),
    /// Neighbours on other hosts (TCP) and on the rank's host (shared memory).
    tcp: (u64, u64),
    shm: (u64, u64),
    /// Streams (descriptors) per TCP neighbour.
    streams: u64,
    /// Bytes: TCP socket buffers of the TCP neighbours' streams + the staging ring.
    memory: (u64, u64),
}

/// Max and median of `values`.
fn max_median(mut values: Vec<u64>) -> (u64, u64) {
    values.sort_unstable();
    let n = values.len();
    (values[n - 1], values[(n - 1) / 2])
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
    let per_host: Vec<usize> = args
        .per_host
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--per-host {:?}: {e}", args.per_host))?;
    for &p in &sizes {
        if let Some(k) = per_host
            .iter()
            .find(|&&k| k == 0 || (p / SWITCHES) % k != 0)
        {
            return Err(format!(
                "--per-host: {p}/{SWITCHES} ranks per switch is not a multiple of {k}"
            )
            .into());
        }
    }
    let mut rows = Vec::new();
    for &p in &sizes {
        for &k in &per_host {
            let file = gen::hub(SWITCHES - 1, p / SWITCHES / k, false);
            let topology = if k == 1 {
                file
            } else {
                hosts::expand(&file, Some(k))?
            };
            let host_of = |r: usize| topology.hosts().map_or(r, |h| h.host_of(r));
            for tree in &trees {
                let roots = args.roots.min(p);
                let mut parents: Vec<BTreeSet<usize>> = vec![Default::default(); p];
                let mut children: Vec<BTreeSet<usize>> = vec![Default::default(); p];
                let mut refused = None;
                for i in 0..roots {
                    let root = i * (p / roots);
                    match plan::build(&topology, root, tree, None) {
                        Ok(plan) => {
                            for lane in &plan.lanes {
                                for (r, parent) in lane.parents.iter().enumerate() {
                                    if let Some(q) = parent {
                                        parents[r].insert(*q);
                                        children[*q].insert(r);
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
                let counts = match refused {
                    Some(e) => Err(e),
                    None => {
                        let (mut peers, mut tcp, mut shm, mut memory) =
                            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                        for r in 0..p {
                            let all: BTreeSet<usize> =
                                parents[r].union(&children[r]).copied().collect();
                            let remote =
                                all.iter().filter(|&&q| host_of(q) != host_of(r)).count() as u64;
                            let ring = if k > 1 { RING_BYTES } else { 0 };
                            peers.push(all.len() as u64);
                            tcp.push(remote);
                            shm.push(all.len() as u64 - remote);
                            memory.push(remote * STREAMS_PER_PEER * STREAM_BYTES + ring);
                        }
                        Ok(Counts {
                            peers: max_median(peers),
                            ins: max_median(parents.iter().map(|s| s.len() as u64).collect()),
                            outs: max_median(children.iter().map(|s| s.len() as u64).collect()),
                            tcp: max_median(tcp),
                            shm: max_median(shm),
                            streams: STREAMS_PER_PEER,
                            memory: max_median(memory),
                        })
                    }
                };
                rows.push(Row {
                    ranks: p,
                    tree: tree.to_string(),
                    roots,
                    per_host: k,
                    counts,
                });
            }
        }
        let mesh = (p - 1) as u64;
        let m = (mesh, mesh);
        rows.push(Row {
            ranks: p,
            tree: "full mesh (before)".into(),
            roots: p,
            per_host: 1,
            counts: Ok(Counts {
                peers: m,
                ins: m,
                outs: m,
                tcp: m,
                shm: (0, 0),
                streams: MESH_STREAMS_PER_PEER,
                memory: (
                    mesh * MESH_STREAMS_PER_PEER * STREAM_BYTES,
                    mesh * MESH_STREAMS_PER_PEER * STREAM_BYTES,
                ),
            }),
        });
    }
    print_rows(&rows, args.json);
    Ok(())
}

fn print_rows(rows: &[Row], json: bool) {
    if !json {
        println!("| ranks | per host | tree | roots | neighbours max / median | edges in max / median | edges out max / median | TCP peers max / median | shm peers max | TCP descriptors max / median | memory max / median |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
    }
    for row in rows {
        let c = match &row.counts {
            Ok(c) => c,
            Err(e) => {
                if json {
                    println!(
                        "{}",
                        serde_json::json!({"ranks": row.ranks, "per_host": row.per_host, "tree": row.tree, "roots": row.roots, "refused": e})
                    );
                } else {
                    println!(
                        "| {} | {} | {} | {} | refused: {e} | | | | | | |",
                        row.ranks, row.per_host, row.tree, row.roots
                    );
                }
                continue;
            }
        };
        let fds = |n: u64| n * c.streams;
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "ranks": row.ranks, "per_host": row.per_host, "tree": row.tree,
                    "roots": row.roots,
                    "neighbours_max": c.peers.0, "neighbours_median": c.peers.1,
                    "in_max": c.ins.0, "in_median": c.ins.1,
                    "out_max": c.outs.0, "out_median": c.outs.1,
                    "tcp_max": c.tcp.0, "tcp_median": c.tcp.1,
                    "shm_max": c.shm.0, "shm_median": c.shm.1,
                    "descriptors_max": fds(c.tcp.0), "descriptors_median": fds(c.tcp.1),
                    "socket_bytes_max": fds(c.tcp.0) * STREAM_BYTES,
                    "socket_bytes_median": fds(c.tcp.1) * STREAM_BYTES,
                    "memory_bytes_max": c.memory.0, "memory_bytes_median": c.memory.1,
                })
            );
        } else {
            let pair = |(a, b): (u64, u64)| format!("{a} / {b}");
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
                row.ranks,
                row.per_host,
                row.tree,
                row.roots,
                pair(c.peers),
                pair(c.ins),
                pair(c.outs),
                pair(c.tcp),
                c.shm.0,
                pair((fds(c.tcp.0), fds(c.tcp.1))),
                size(c.memory.0),
                size(c.memory.1),
            );
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
