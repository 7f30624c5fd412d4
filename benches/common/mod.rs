//! What the criterion benches share.

/// The store sizes to bench, from `ONCELAKE_BENCH_UNITS` (comma-separated; default
/// 10000,100000,1000000).
pub fn sizes() -> Vec<u64> {
    std::env::var("ONCELAKE_BENCH_UNITS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000])
}
