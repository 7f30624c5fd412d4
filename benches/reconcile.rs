//! P3: full reconcile (one merge pass) of a listing of every unit with 1% changed, and
//! incremental reconcile of just the changes, against one redb point lookup per listed unit.
//!
//! `cargo bench --bench reconcile`; sizes from `ONCELAKE_BENCH_UNITS` (default
//! 10000,100000,1000000).

mod common;

use common::sizes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oncelake::reconcile::{
    reconcile_changes, reconcile_full, ListingFormat, ListingReader, Pairs, PlanItem,
    ReconcileOptions,
};
use oncelake_bench::bench_fixtures as fixtures;
use std::time::Duration;

/// The plan's sink: each item is looked at (so it is not optimised away) and dropped.
fn discard(item: PlanItem<'_>) -> std::io::Result<()> {
    std::hint::black_box(item);
    Ok(())
}

fn reconcile(c: &mut Criterion) {
    let mut group = c.benchmark_group("reconcile");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let opts = ReconcileOptions::default();
    for n in sizes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = fixtures::open_bench_store(&dir.path().join("store")).expect("open");
        fixtures::fill_store(&store, n).expect("fill");
        let w = fixtures::reconcile_workload(n);
        let snap = store.snapshot().expect("snapshot");
        // Throughput in manifest units, so the figures read as P3's "units/s".
        group.throughput(Throughput::Elements(n));
        group.bench_function(BenchmarkId::new("full_pairs", n), |b| {
            b.iter(|| {
                let listing = Pairs::new(w.listing.iter().map(|(u, v)| (u.as_str(), *v)));
                reconcile_full(&snap, listing, opts, discard).expect("full")
            })
        });
        group.bench_function(BenchmarkId::new("full_csv", n), |b| {
            b.iter(|| {
                let listing = ListingReader::new(w.csv.as_slice(), ListingFormat::Csv);
                reconcile_full(&snap, listing, opts, discard).expect("full")
            })
        });
        group.bench_function(BenchmarkId::new("incremental_1pct", n), |b| {
            b.iter(|| {
                let changes = Pairs::new(w.changes.iter().map(|(u, v)| (u.as_str(), *v)));
                reconcile_changes(&store, changes, opts, discard).expect("incremental")
            })
        });
        group.bench_function(BenchmarkId::new("naive_get_per_unit_baseline", n), |b| {
            b.iter(|| {
                let mut work = 0u64;
                for (unit, version) in &w.listing {
                    match snap.get(unit).expect("get") {
                        Some(e) if e.source_version >= *version => {}
                        _ => work += 1,
                    }
                }
                work
            })
        });
    }
    group.finish();
}

criterion_group!(benches, reconcile);
criterion_main!(benches);
