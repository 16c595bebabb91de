//! Seed 003 Fig. 5 (`003_f72e5e0868946953.txt` §4.1.2): average height of Algorithm 2's
//! contention-free binary tree over 20 random clusters per size (switch tree from random links,
//! machines placed uniformly at random — `topology::gen::random_cluster`), on average 8 and 16
//! machines per switch, next to the complete binary tree's height ⌊log2 P⌋ (a lower bound).
//! A second table gives the k-ary extension's heights on the same clusters (8/switch).
//!
//! Run: `cargo run --release --example fig5_binary_height`. Deterministic (seeded); the time
//! column is the mean wall time of one `binary::build` and varies with the machine.

use pipecast::plan::{binary, kary};
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
    println!("| P | complete binary ⌊log2 P⌋ | Algorithm 2, 8/switch | Algorithm 2, 16/switch | mean plan time (8/switch) |");
    println!("|---:|---:|---:|---:|---:|");
    for p in SIZES {
        let mut cells = Vec::new();
        let mut time_8 = 0.0;
        for per_switch in [8usize, 16] {
            let mut total = 0usize;
            let mut seconds = 0.0;
            for topology in clusters(p, per_switch) {
                let start = Instant::now();
                let lane = binary::build(&topology, 0).expect("P ≤ 1024 is within the limit");
                seconds += start.elapsed().as_secs_f64();
                total += lane.height();
            }
            cells.push(mean(total));
            if per_switch == 8 {
                time_8 = seconds / TOPOLOGIES as f64;
            }
        }
        println!(
            "| {p} | {} | {} | {} | {:.1} ms |",
            p.ilog2(),
            cells[0],
            cells[1],
            time_8 * 1e3
        );
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
