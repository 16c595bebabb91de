//! How often k-binomial (seed 001 Fig. 11) and multi-lane (seed 002) plans contend under the
//! pipelined 1-port model, on seed 003's random clusters (32 machines, random switch trees).
//! Counts pairs of transfers with different senders that share a directed edge
//! (`model::contention::conflicts`), per lane. The linear tree (Algorithm 1) is the control: it
//! must show none.
//!
//! Run: `cargo run --release --example lane_conflicts`

use pipecast::model::contention::conflicts;
use pipecast::plan::{self, TreeKind};
use pipecast::topology::gen;

fn main() {
    let kinds: [(&str, TreeKind); 6] = [
        ("linear", TreeKind::Linear),
        ("kbinomial:2", TreeKind::KBinomial(Some(2))),
        ("kbinomial:3", TreeKind::KBinomial(Some(3))),
        ("kbinomial:5 (binomial)", TreeKind::KBinomial(Some(5))),
        ("multilane", TreeKind::Multilane),
        ("binary (as merged)", TreeKind::Binary),
    ];
    let seeds = 0..200u64;
    println!("| switches | tree | topologies with conflicts | mean conflicting pairs |");
    println!("|---|---|---|---|");
    for switches in [1usize, 4, 8, 16] {
        for (name, kind) in &kinds {
            let (mut with, mut pairs) = (0usize, 0usize);
            for seed in seeds.clone() {
                let t = gen::random_cluster(switches, 32, seed);
                let p = plan::build(&t, (seed % 32) as usize, kind, None).expect("plan");
                let n: usize = p
                    .lanes
                    .iter()
                    .map(|l| conflicts(l, &t, usize::MAX).len())
                    .sum();
                with += usize::from(n > 0);
                pairs += n;
            }
            let total = seeds.end as usize;
            println!(
                "| {switches} | {name} | {with}/{total} | {:.1} |",
                pairs as f64 / total as f64
            );
        }
    }
}
