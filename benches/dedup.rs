//! P2: the dedup decision (is unit@version committed, with what hash) through the store's
//! in-memory index, against a plain redb point lookup of the same keys in the same run.
//!
//! `cargo bench --bench dedup`; sizes from `ONCELAKE_BENCH_UNITS` (default 10000,100000,1000000).

mod common;

use common::sizes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oncelake_bench::bench_fixtures as fixtures;
use std::time::Duration;

fn dedup(c: &mut Criterion) {
    let mut group = c.benchmark_group("dedup");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for n in sizes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = fixtures::open_bench_store(&dir.path().join("store")).expect("open");
        fixtures::fill_store(&store, n).expect("fill");
        let db = fixtures::build_baseline(&dir.path().join("baseline.redb"), n).expect("baseline");
        let queries = fixtures::dedup_queries(n, 100_000, n);
        group.throughput(Throughput::Elements(queries.len() as u64));
        group.bench_with_input(BenchmarkId::new("store_lookup", n), &queries, |b, q| {
            b.iter(|| fixtures::run_lookups(&store, q).expect("lookup"))
        });
        group.bench_with_input(
            BenchmarkId::new("store_lookup_many", n),
            &queries,
            |b, q| b.iter(|| fixtures::run_lookup_many(&store, q).expect("lookup_many")),
        );
        group.bench_with_input(
            BenchmarkId::new("redb_get_baseline", n),
            &queries,
            |b, q| b.iter(|| fixtures::run_redb_gets(&db, q).expect("get")),
        );
        group.bench_with_input(BenchmarkId::new("snapshot_get", n), &queries, |b, q| {
            b.iter(|| fixtures::run_snapshot_gets(&store, q).expect("get"))
        });
    }
    group.finish();
}

criterion_group!(benches, dedup);
criterion_main!(benches);
