//! Seed 003 Fig. 5 (`003_f72e5e0868946953.txt` §4.1.2): average height of Algorithm 2's
//! contention-free binary tree over 20 random clusters per size (switch tree from random links,
//! machines placed uniformly at random — `topology::gen::random_cluster`), on average 8 and 16
//! machines per switch, next to the complete binary tree's height ⌊log2 P⌋ (a lower bound).
//! Beside Algorithm 2 (lowest over its DFS walks): the tree built switch by switch
//! (`plan::switch_tree`, beyond the papers; "n/20" where it applies), the one that also feeds
//! chains of switches from their far end (`plan::jump_tree`, beyond the papers) and `binary`,
//! the lowest of the three. A second table gives the k-ary extension's heights on the same clusters
//! (8/switch).
//!
//! Run: `cargo run --release --example fig5_binary_height`. Deterministic (seeded); the time
//! column is the mean wall time of one `binary::build` and varies with the machine.

use pipecast::plan::{binary, jump_tree, kary, switch_tree};
use pipecast::topology::{gen, Topology};
use std::time::Instant;

const TOPOLOGIES: u64 = 20;
const SIZES: [usize; 6] = [32, 64, 128, 256, 512, 1024];

fn clusters(p: usize, per_switch: usize) -> impl Iterator<Item = Topology> {
    (0..TOPOLOGIES).map(move |i| {
        let seed = (p as u64) * 1000 + per_switch as u64 * 100 + i;
        gen::random_cluster(p / per_switch, p, seed)
    })
}

fn mean(total: usize) -> String {
    format!("{:.2}", total as f64 / TOPOLOGIES as f64)
}

fn main() {
    println!("| P | ⌊log2 P⌋ | per switch | Algorithm 2 | by switch (applies) | both ends (applies) | binary | binary / log2 P | mean plan time |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for p in SIZES {
        for per_switch in [8usize, 16] {
            let (mut alg2, mut by_switch, mut applies, mut best) = (0usize, 0usize, 0usize, 0usize);
            let (mut jump, mut jumps) = (0usize, 0usize);
            let mut seconds = 0.0;
            for topology in clusters(p, per_switch) {
                let a = binary::algorithm2(&topology, 0).expect("P ≤ 1024 is within the limit");
                alg2 += a.height();
                if let Some(s) = switch_tree::build(&topology, 0, 2) {
                    by_switch += s.height();
                    applies += 1;
                }
                if let Some(s) = jump_tree::build(&topology, 0, 2) {
                    jump += s.height();
                    jumps += 1;
                }
                let start = Instant::now();
                let lane = binary::build(&topology, 0).expect("P ≤ 1024 is within the limit");
                seconds += start.elapsed().as_secs_f64();
                best += lane.height();
            }
            let (by_switch, jump) = (applied(by_switch, applies), applied(jump, jumps));
            println!(
                "| {p} | {} | {per_switch} | {} | {by_switch} | {jump} | {} | {:.2} | {:.1} ms |",
                p.ilog2(),
                mean(alg2),
                mean(best),
                best as f64 / TOPOLOGIES as f64 / p.ilog2() as f64,
                seconds / TOPOLOGIES as f64 * 1e3
            );
        }
    }
    println!();
    println!("| P | kary:2 | kary:3 | kary:4 | complete 3-ary | complete 4-ary |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for p in SIZES {
        let cells: Vec<String> = [2, 3, 4]
            .iter()
            .map(|&k| {
                let total: usize = clusters(p, 8)
                    .map(|t| kary::build(&t, 0, k).expect("within the limit").height())
                    .sum();
                mean(total)
            })
            .collect();
        println!(
            "| {p} | {} | {} | {} | {} | {} |",
            cells[0],
            cells[1],
            cells[2],
            complete_height(p, 3),
            complete_height(p, 4)
        );
    }
}

/// A mean height over the topologies where a construction applies, and on how many.
fn applied(total: usize, applies: usize) -> String {
    if applies > 0 {
        format!(
            "{:.2} ({applies}/{TOPOLOGIES})",
            total as f64 / applies as f64
        )
    } else {
        format!("– (0/{TOPOLOGIES})")
    }
}

/// Height of the complete k-ary tree on `p` nodes.
fn complete_height(p: usize, k: usize) -> usize {
    let (mut height, mut level, mut covered) = (0, 1, 1);
    while covered < p {
        level *= k;
        covered += level;
        height += 1;
    }
    height
}
