//! The short load test of `oncelake serve`: 16 clients for a few seconds against one server; its
//! memory stays bounded and every acknowledged commit is there afterwards, through the server
//! and after reopening the store (the long run is `oncelake-bench serve-load`, BENCHMARKS.md).

use crate::support;

use oncelake_bench::serve_load::{serve_load, LoadOptions};
use std::time::Duration;

#[test]
fn sixteen_clients_lose_nothing_and_server_memory_stays_bounded() {
    let scratch = tempfile::tempdir().unwrap();
    let opts = LoadOptions {
        clients: 16,
        duration: Duration::from_secs(4),
        units_per_client: 16,
        ..LoadOptions::default()
    };
    let r = serve_load(support::oncelake(), scratch.path(), &opts).unwrap();
    assert_eq!(r.error_count, 0, "{:?}", r.errors);
    assert!(r.committed > 0 && r.model_units > 0, "{r:?}");
    assert!(r.served_mismatches.is_empty(), "{:?}", r.served_mismatches);
    assert!(
        r.reopened_mismatches.is_empty(),
        "{:?}",
        r.reopened_mismatches
    );
    assert!(r.model_holds());
    assert!(r.clean_exit, "the server did not exit 0 on SIGTERM");
    assert!(
        r.rss_kib.len() >= 3,
        "too few memory samples: {:?}",
        r.rss_kib
    );
    // With glibc the server reports its heap (`/metrics`), sampled once a second: what is
    // allocated never exceeds what the allocator holds.
    if cfg!(all(target_os = "linux", target_env = "gnu")) {
        assert!(r.heap_in_use_kib.len() >= 2, "{:?}", r.heap_in_use_kib);
        for (used, held) in r.heap_in_use_kib.iter().zip(&r.heap_held_kib) {
            assert!(used.1 > 0 && used.1 <= held.1, "{used:?} {held:?}");
        }
        assert_eq!(r.heap_in_use_peaks_by(10).len(), 10);
    }
    assert!(
        r.memory_bounded(32 * 1024),
        "server RSS peaks by third: {} / {} / {} KiB",
        r.third_peak_kib(0),
        r.third_peak_kib(1),
        r.third_peak_kib(2)
    );
}
