//! Benchmark support (not API): the same commit workload as `bench/commit_threads.py`, driven by
//! Rust threads in the same process and build, so that BENCHMARKS.md can put the Python figure next
//! to the Rust one of the same run.

use crate::convert::Py2;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Opens a fresh store at `path` and commits, from `threads` Rust threads for `seconds`, one
/// distinct unit per commit carrying one pre-staged object. Returns (units committed, seconds).
#[pyfunction]
pub(crate) fn _rust_commit_bench(
    py: Python<'_>,
    path: std::path::PathBuf,
    threads: usize,
    seconds: f64,
) -> PyResult<(u64, f64)> {
    let limit = crate::wire::seconds("seconds", seconds)?;
    py.detach(|| -> oncelake::Result<(u64, f64)> {
        let store = oncelake::Store::open(&path)?;
        let staged = store.stage_bytes(&[7u8; 100])?;
        let done = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let barrier = Barrier::new(threads + 1);
        let elapsed = std::thread::scope(|s| -> oncelake::Result<Duration> {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let (store, staged, done, stop, barrier) =
                        (&store, &staged, &done, &stop, &barrier);
                    s.spawn(move || -> oncelake::Result<()> {
                        barrier.wait();
                        let mut i = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            store.commit(oncelake::Batch::new().put(
                                format!("t{t}/u{i}"),
                                1,
                                staged,
                            ))?;
                            done.fetch_add(1, Ordering::Relaxed);
                            i += 1;
                        }
                        Ok(())
                    })
                })
                .collect();
            barrier.wait();
            let start = Instant::now();
            std::thread::sleep(limit);
            stop.store(true, Ordering::Relaxed);
            for w in workers {
                w.join().map_err(|_| {
                    oncelake::Error::InvalidRequest("a benchmark thread panicked".into())
                })??;
            }
            Ok(start.elapsed())
        })?;
        Ok((done.load(Ordering::Relaxed), elapsed.as_secs_f64()))
    })
    .py(py)
}
