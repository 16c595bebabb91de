//! Criterion benchmark of the simulator (`pipecast::sim::simulate`, the engine of
//! `pipecast sim`): one linear-tree broadcast of 64 KiB segments on seed 003's random clusters
//! (`topology::gen::random_cluster`, 32 machines per switch), timing only, at 1 Gbit/s. Run:
//! `cargo bench --bench sim`.
//!
//! The scale point (4096 machines, 64 MiB, about 4 million segment-hops) takes seconds
//! per run, too long for criterion's samples: time it with the CLI, as docs/sim.md says
//! (`pipecast topo gen random --switches 128 --machines 4096 --seed 1 -o r4096.json`, then
//! `time pipecast sim --topology r4096.json --tree linear --msize 64M --segment 64K
//! --link-rate 1`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pipecast::comm::{lanes, Algorithm};
use pipecast::plan::TreeKind;
use pipecast::sim::{simulate, Timing};
use pipecast::topology::gen;
use std::sync::Arc;
use std::time::Duration;

const SEGMENT: u64 = 64 << 10;

fn sim(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim linear 64K segments");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    for (p, msize) in [(256usize, 4u64 << 20), (1024, 4 << 20), (1024, 16 << 20)] {
        let topology = gen::random_cluster(p / 32, p, 42);
        let segments = msize.div_ceil(SEGMENT);
        let lanes: Arc<[_]> = lanes(&topology, 0, &Algorithm::Tree(TreeKind::Linear), segments)
            .unwrap()
            .into();
        // Segment-hops: every segment crosses every tree edge once.
        group.throughput(Throughput::Elements(segments * (p as u64 - 1)));
        let id = BenchmarkId::new(format!("{} MiB", msize >> 20), p);
        group.bench_with_input(id, &topology, |b, t| {
            b.iter(|| {
                let timing = Timing::Rate { gbps: 1.0 };
                simulate(t, lanes.clone(), 0, msize, SEGMENT, &timing).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, sim);
criterion_main!(benches);
