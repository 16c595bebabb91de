//! Criterion benchmark of the raw Ethernet frame checksum (CRC32C, `wire::frame::checksum`)
//! against a memcpy of the same bytes, measured in the same run: the payload of a frame at
//! MTU 1500 (1408 bytes), at MTU 9000 (8908 bytes), and a 64 KiB segment. Read the
//! throughputs as a ratio to the memcpy's (docs/raweth.md, "Checksum"). Run:
//! `cargo bench --bench checksum`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pipecast::wire::frame::{checksum, Repr, HEADER_LEN};
use std::hint::black_box;
use std::time::Duration;

fn sums(c: &mut Criterion) {
    let mut group = c.benchmark_group("checksum");
    group.measurement_time(Duration::from_secs(3));
    let header = Repr::default().to_bytes_unsealed();
    let (to, from) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    for len in [1408usize, 8908, 65536] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 131) as u8).collect();
        let mut copy = vec![0u8; len];
        group.throughput(Throughput::Bytes((HEADER_LEN + len) as u64));
        group.bench_with_input(BenchmarkId::new("crc32c", len), &payload, |b, p| {
            b.iter(|| checksum(&to, &from, black_box(&header), black_box(p)))
        });
        group.bench_with_input(BenchmarkId::new("memcpy", len), &payload, |b, p| {
            b.iter(|| {
                copy.copy_from_slice(black_box(p));
                black_box(&copy);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, sums);
criterion_main!(benches);
