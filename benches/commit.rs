//! SPEC P1 under criterion: durable commits of one pre-staged unit each at 1, 4, 16 and 64
//! threads, for oncelake and its two baselines (one redb transaction per commit; the seed 001
//! pattern on SQLite). The workload is the very code `oncelake-bench commit` runs.
//!
//! `cargo bench --bench commit` (one criterion element = one committed unit; one iteration
//! commits `8 × threads` units, so that every writer commits several times per iteration). Each
//! system's store is preloaded once with SPEC P1's 1,000,000 units (not timed) and keeps growing
//! through the samples; keys are P1's random mix of new units and new versions.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;

use oncelake_bench::bench_commit::{Bench, Plan, System, Workload};

fn commit(c: &mut Criterion) {
    let scratch = std::env::temp_dir();
    let mut group = c.benchmark_group("commit");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for system in System::ALL {
        let mut bench = Bench::new(system, Workload::P1, &scratch)
            .unwrap_or_else(|e| panic!("{} preload: {e}", system.name()));
        for threads in [1usize, 4, 16, 64] {
            let units_per_iter = 8 * threads;
            group.throughput(Throughput::Elements(units_per_iter as u64));
            group.bench_with_input(
                BenchmarkId::new(system.name(), threads),
                &threads,
                |b, &threads| {
                    b.iter_custom(|iters| {
                        let plan = Plan::new(
                            threads,
                            iters.max(1) as usize * units_per_iter,
                            Duration::MAX,
                        );
                        bench
                            .run(plan)
                            .unwrap_or_else(|e| panic!("{}: {e}", system.name()))
                            .elapsed
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, commit);
criterion_main!(benches);
