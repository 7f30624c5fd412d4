//! The timing harness every in-process write benchmark shares: writer threads that prepare
//! their own state, start together, and time each operation until the work or the time runs out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// How much work the writers share and for how long.
pub(crate) struct Run {
    /// Writer threads (at least one).
    pub threads: usize,
    /// Work items one operation takes (units per commit, or 1 object).
    pub step: u64,
    /// Work items in all; the writers stop when they are taken.
    pub limit: u64,
    /// The writers stop after this long in any case.
    pub max_time: Duration,
}

/// Runs `run.threads` writers, each with its own state from `setup(thread)` (made before the
/// common start, so it is not timed; an error is returned once every writer reached the start),
/// calling `op` until the work or the time is used up. Returns every operation's latency in µs
/// and the wall time from the start.
pub(crate) fn drive<S, W, F>(run: &Run, setup: S, op: F) -> Result<(Vec<u32>, Duration), String>
where
    S: Fn(usize) -> Result<W, String> + Sync,
    F: Fn(&mut W) -> Result<(), String> + Sync,
{
    let threads = run.threads.max(1);
    let next = AtomicU64::new(0);
    let start_line = Barrier::new(threads + 1);
    let start = OnceLock::new();
    let results: Vec<Result<Vec<u32>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (setup, op, next, start_line, start) =
                    (&setup, &op, &next, &start_line, &start);
                s.spawn(move || {
                    let state = setup(t);
                    start_line.wait();
                    let mut state = state?;
                    let start: &Instant = start.wait();
                    let mut lat = Vec::new();
                    while next.fetch_add(run.step, Ordering::Relaxed) < run.limit
                        && start.elapsed() < run.max_time
                    {
                        let t0 = Instant::now();
                        op(&mut state)?;
                        lat.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    }
                    Ok(lat)
                })
            })
            .collect();
        start_line.wait();
        let _ = start.set(Instant::now());
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into())))
            .collect()
    });
    let elapsed = start.get().map(|s| s.elapsed()).unwrap_or_default();
    let mut latencies = Vec::new();
    for r in results {
        latencies.extend(r?);
    }
    Ok((latencies, elapsed))
}
