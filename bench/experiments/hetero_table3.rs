//! Seed 004 Table 3 (§5.2.3): relative throughput (heuristic / LP optimum, one-port) on
//! Tiers-like platforms of 30 and 65 nodes, next to the paper's numbers.
//!
//! `cargo run --release --example hetero_table3 [-- --platforms N --seed S]` (default 10
//! platforms per size; the paper used 100).

use pipecast::hetero::{self, gen, Model};
use std::time::Instant;

/// The paper's Table 3: prune-simple, prune-degree, grow, lp-grow, lp-prune, binomial.
const PAPER: [(usize, [f64; 6]); 2] = [
    (30, [46.0, 82.0, 75.0, 82.0, 82.0, 11.0]),
    (65, [30.0, 73.0, 71.0, 73.0, 74.0, 5.0]),
];
const COLUMNS: [&str; 6] = [
    "prune-simple",
    "prune-degree",
    "grow",
    "lp-grow",
    "lp-prune",
    "binomial",
];

fn arg(name: &str, default: u64) -> Result<u64, String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} takes a whole number")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let platforms = arg("--platforms", 10)? as usize;
    let seed = arg("--seed", 1)?;
    println!("Seed 004 Table 3: relative throughput on Tiers-like platforms, {platforms} per size");
    println!("(mean ± standard deviation over platforms; paper's value in brackets)\n");
    print!("{:>5} {:>7} {:>8}", "nodes", "density", "LP s");
    for c in COLUMNS {
        print!(" {:>17}", c);
    }
    println!();
    for (nodes, paper) in PAPER {
        let mut ratios = vec![Vec::new(); COLUMNS.len()];
        let (mut density, mut lp_time) = (0.0, 0.0);
        for i in 0..platforms {
            let platform = gen::tiers(nodes, seed * 1000 + i as u64)?;
            density += platform.density() / platforms as f64;
            let start = Instant::now();
            let lp = hetero::ssb(&platform)?;
            lp_time += start.elapsed().as_secs_f64() / platforms as f64;
            for (c, name) in COLUMNS.iter().enumerate() {
                let tree = hetero::build(&platform, name, Some(&lp))?;
                ratios[c]
                    .push(hetero::throughput(&platform, &tree, Model::OnePort) / lp.throughput);
            }
        }
        print!("{nodes:>5} {density:>7.3} {lp_time:>8.3}");
        for (c, r) in ratios.iter().enumerate() {
            let mean = r.iter().sum::<f64>() / r.len() as f64;
            let var = r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / r.len() as f64;
            print!(
                " {:>4.0}%±{:<3.0} [{:>3.0}%]",
                100.0 * mean,
                100.0 * var.sqrt(),
                paper[c]
            );
        }
        println!();
    }
    Ok(())
}
