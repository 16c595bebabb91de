//! Seed 003 Fig. 5 (`003_f72e5e0868946953.txt` §4.1.2): average height of Algorithm 2's
//! contention-free binary tree over 20 random clusters per size (switch tree from random links,
//! machines placed uniformly at random — `topology::gen::random_cluster`), on average 8 and 16
//! machines per switch, next to the complete binary tree's height ⌊log2 P⌋ (a lower bound).
//!
//! Run: `cargo run --release --example fig5_binary_height`. Deterministic (seeded); the time
//! column is the mean wall time of one `binary::build` and varies with the machine.

use pipecast::plan::binary;
use pipecast::topology::gen;
use std::time::Instant;

const TOPOLOGIES: u64 = 20;

fn main() {
    println!("| P | complete binary ⌊log2 P⌋ | Algorithm 2, 8/switch | Algorithm 2, 16/switch | mean plan time (8/switch) |");
    println!("|---:|---:|---:|---:|---:|");
    for p in [32usize, 64, 128, 256, 512, 1024] {
        let mut cells = Vec::new();
        let mut time_8 = 0.0;
        for per_switch in [8usize, 16] {
            let mut total = 0usize;
            let mut seconds = 0.0;
            for i in 0..TOPOLOGIES {
                let seed = (p as u64) * 1000 + per_switch as u64 * 100 + i;
                let topology = gen::random_cluster(p / per_switch, p, seed);
                let start = Instant::now();
                let lane =
                    binary::build(&topology, 0).expect("P ≤ 1024 is within the planner's limit");
                seconds += start.elapsed().as_secs_f64();
                total += lane.height();
            }
            cells.push(format!("{:.2}", total as f64 / TOPOLOGIES as f64));
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
}
