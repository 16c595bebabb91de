//! Time SSB(G) (cut generation) on random platforms of seed 004 Table 2, and optionally compare
//! with the direct |V|·|E| program: `cargo run --release --example hetero_lp_time [-- --nodes 65
//! --density 0.15 --platforms 3 --direct]`; `-- --cluster 64` times every heuristic through
//! `plan_on_topology` on a random 64-machine switched cluster (64 KiB slices) instead.

use pipecast::hetero::{self, gen};
use std::time::Instant;

fn arg<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a number")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: usize = arg("--nodes", 65)?;
    let density: f64 = arg("--density", 0.15)?;
    let platforms: u64 = arg("--platforms", 3)?;
    let direct = std::env::args().any(|a| a == "--direct");
    let cluster: usize = arg("--cluster", 0)?;
    if cluster > 0 {
        let topo = pipecast::topology::gen::random_cluster(cluster.div_ceil(8), cluster, 1);
        for name in hetero::HEURISTICS {
            let start = Instant::now();
            let (lane, tp) = hetero::plan_on_topology(&topo, 0, name, 65536)?;
            println!(
                "{cluster} machines, {name}: {tp:.1} slices/s, height {}, max degree {}, {:.3} s",
                lane.height(),
                lane.max_degree(),
                start.elapsed().as_secs_f64()
            );
        }
        return Ok(());
    }
    for seed in 1..=platforms {
        let p = gen::random(nodes, density, seed)?;
        let start = Instant::now();
        let lp = hetero::ssb(&p)?;
        let t = start.elapsed().as_secs_f64();
        print!(
            "n={nodes} density={:.3} edges={} seed={seed}: TP={:.6} in {t:.3} s ({} cuts, {} rounds)",
            p.density(),
            p.edges().len(),
            lp.throughput,
            lp.cuts,
            lp.rounds
        );
        if direct {
            let start = Instant::now();
            let d = hetero::ssb_direct(&p)?;
            print!(
                "; direct TP={d:.6} in {:.3} s (rel. diff {:.1e})",
                start.elapsed().as_secs_f64(),
                (d - lp.throughput).abs() / d
            );
        }
        println!();
    }
    Ok(())
}
