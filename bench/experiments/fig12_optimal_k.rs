//! Seed 001 Fig. 12 (`../shared/seeds/001_27b88991baebfc43.txt` §5.1): the optimal k of the
//! k-binomial tree (Theorem 3) (a) for fixed multicast set sizes n as the number of packets m
//! grows, and (b) for fixed m as n grows. The paper gives the curves only as a figure; its text
//! states the checks printed at the end.
//!
//! Run: `cargo run --release --example fig12_optimal_k`

use pipecast::plan::kbinomial::{ceil_log2, first_packet_steps, optimal_k, steps};

fn main() {
    let ns = [8u64, 16, 32, 64, 128, 256];
    let ms = [1u64, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 128];
    println!("(a) optimal k, fixed n (columns), packets m (rows)\n");
    print!("| m |");
    for n in ns {
        print!(" n={n} |");
    }
    println!("\n|---|{}", "---|".repeat(ns.len()));
    for m in ms {
        print!("| {m} |");
        for n in ns {
            print!(" {} |", optimal_k(n, m));
        }
        println!();
    }

    let ns_b = [4u64, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536];
    let ms_b = [1u64, 2, 4, 8, 16, 32];
    println!("\n(b) optimal k, fixed m (columns), set size n (rows)\n");
    print!("| n |");
    for m in ms_b {
        print!(" m={m} |");
    }
    println!("\n|---|{}", "---|".repeat(ms_b.len()));
    for n in ns_b {
        print!("| {n} |");
        for m in ms_b {
            print!(" {} |", optimal_k(n, m));
        }
        println!();
    }

    println!("\nfirst m at which the chain (k = 1) becomes optimal:");
    for n in ns {
        let m = (1..10_000u64).find(|&m| optimal_k(n, m) == 1).unwrap_or(0);
        println!(
            "  n = {n:>4}: m = {m} (chain: {} steps, binomial: {} steps)",
            steps(first_packet_steps(n, 1), 1, m),
            steps(first_packet_steps(n, ceil_log2(n)), ceil_log2(n), m)
        );
    }

    println!("\nchecks against the paper's text (§5.1):");
    let one_packet = ns.iter().all(|&n| optimal_k(n, 1) == ceil_log2(n));
    println!("  m = 1 gives k = ceil(log2 n) for every n above: {one_packet}");
    let small_sets_first = (1..10_000u64).find(|&m| optimal_k(16, m) == 1)
        < (1..10_000u64).find(|&m| optimal_k(32, m) == 1);
    println!("  n = 16 reaches k = 1 at a smaller m than n = 32: {small_sets_first}");
    let k2 = [16u64, 32, 64]
        .iter()
        .all(|&n| optimal_k(n, 4) == 2 && optimal_k(n, 8) == 2);
    println!("  m = 4 and m = 8 give k = 2 for n = 16 … 64: {k2}");
    let grows = optimal_k(65536, 4) > 2 || optimal_k(65536, 8) > 2;
    println!("  for m = 4 or 8, k grows above 2 for large n (beyond 64): {grows}");
}
