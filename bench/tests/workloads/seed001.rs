//! Seed 001's scenario through a server with worker *processes* (P9's shape, small): no batch
//! written twice, every batch committed once, every delivery accounted for.

use crate::support;

#[test]
fn seed001_worker_processes_write_no_batch_twice() {
    let scratch = tempfile::tempdir().unwrap();
    let (workers, batches) = (4, 60);
    let r = oncelake_bench::seed001::seed001_via_server(
        support::oncelake(),
        support::oncelake_bench_path(),
        scratch.path(),
        workers,
        batches,
    )
    .unwrap();
    assert_eq!(r.workers, workers);
    assert_eq!(r.deliveries, 2 * batches as u64);
    assert_eq!(r.written_twice, 0, "{r:?}");
    assert_eq!(r.committed, batches as u64, "{r:?}");
    // Each delivery either did the work, found the batch done, or found it held.
    assert_eq!(
        r.computations + r.already_done + r.held,
        r.deliveries,
        "{r:?}"
    );
    // A batch is computed at least once and, with 60 s leases and no crash, at most once.
    assert_eq!(r.computations, batches as u64, "{r:?}");
    assert!(r.wall_with_startup >= r.elapsed);
}
