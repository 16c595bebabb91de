//! Criterion benchmark of the planners and the checker at P = 256 and 1024 (8 machines per
//! switch, `topology::gen::random_cluster`). Algorithm 1's chain is the reference each run is
//! read against. Run: `cargo bench --bench planner`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pipecast::plan::{self, binary, kary, linear, Plan, TreeKind};
use pipecast::topology::gen;
use std::hint::black_box;
use std::time::Duration;

fn planners(c: &mut Criterion) {
    let mut group = c.benchmark_group("planner");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    for p in [256usize, 1024] {
        let topology = gen::random_cluster(p / 8, p, 42);
        group.bench_with_input(BenchmarkId::new("linear", p), &topology, |b, t| {
            b.iter(|| linear::build(black_box(t), 0))
        });
        group.bench_with_input(BenchmarkId::new("binary", p), &topology, |b, t| {
            b.iter(|| binary::build(black_box(t), 0).unwrap())
        });
        for k in [3, 4] {
            group.bench_with_input(
                BenchmarkId::new(format!("kary:{k}"), p),
                &topology,
                |b, t| b.iter(|| kary::build(black_box(t), 0, k).unwrap()),
            );
        }
        let plans: Vec<Plan> = [TreeKind::Binary, TreeKind::Binomial]
            .iter()
            .map(|kind| plan::build(&topology, 0, kind, None).unwrap())
            .collect();
        for plan in plans {
            group.bench_with_input(
                BenchmarkId::new(format!("check {}", plan.tree), p),
                &plan,
                |b, plan| b.iter(|| plan::check(black_box(plan), &topology)),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, planners);
criterion_main!(benches);
