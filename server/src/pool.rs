//! The store threads: a fixed set of threads, made when the server starts, that stage the small
//! uploads (read whole by the connection thread; staging is a write and an fsync), so that the
//! connection threads never block on the disk and a burst of small puts adds no thread (tokio's
//! blocking pool makes a thread per call in flight and keeps it). The writes a request waits on
//! go to the committers (`committer.rs`); long calls (streamed uploads, reads, listings,
//! verify...) to the blocking pool.
//!
//! At most this many stagings run at once; the others queue, oldest first.

use crate::workers::{Queue, Workers};

/// Store threads a server starts unless told otherwise: one per client of the P7 benchmark, so
/// that 64 clients putting small objects at once have their fsyncs in flight together.
pub const DEFAULT_STORE_THREADS: usize = 64;

/// Stack of a store thread: staging needs no more, and 64 threads at the default 2 MiB would
/// reserve 128 MiB of address space.
const STACK: usize = 1 << 20;

type Job = Box<dyn FnOnce() + Send>;

/// The store threads. Dropping them lets them finish what is queued and joins them.
pub(crate) struct StoreThreads {
    workers: Workers<Job>,
}

/// The call did not finish: it panicked.
#[derive(Debug)]
pub(crate) struct Panicked;

impl StoreThreads {
    /// Starts `n` (at least one) store threads.
    pub(crate) fn start(n: usize) -> std::io::Result<StoreThreads> {
        let workers = Workers::start(n, "oncelake-store", Some(STACK), |q: &Queue<Job>| {
            while let Some(jobs) = q.take(1) {
                jobs.into_iter().for_each(|job| job());
            }
        })?;
        Ok(StoreThreads { workers })
    }

    /// Runs `f` on a store thread and waits for its result; a panic in `f` is `Err(Panicked)`
    /// and the thread lives on.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Panicked> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            if let Ok(v) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                // A request that went away (its client disconnected) no longer wants it.
                let _ = tx.send(v);
            }
        });
        let queue = self.workers.queue();
        queue.push(job);
        queue.wake_one();
        rx.await.map_err(|_| Panicked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a test runtime")
    }

    #[test]
    fn calls_run_at_once_on_the_fixed_threads_and_a_panic_is_an_answer() {
        let pool = StoreThreads::start(8).expect("start");
        let rt = runtime();
        // Eight calls that each wait for all eight: they finish only if the eight threads run
        // them at the same time.
        let line = Arc::new(Barrier::new(8));
        let names = rt.block_on(futures_util::future::join_all((0..8).map(|_| {
            let line = line.clone();
            pool.run(move || {
                line.wait();
                std::thread::current().name().map(str::to_string)
            })
        })));
        let mut names: Vec<String> = names
            .into_iter()
            .map(|n| n.expect("no panic").expect("named"))
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 8, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("oncelake-store-")));
        assert!(rt.block_on(pool.run(|| panic!("boom"))).is_err());
        assert_eq!(rt.block_on(pool.run(|| 7)).ok(), Some(7));
    }

    #[test]
    fn dropping_runs_what_was_queued_and_joins() {
        let pool = StoreThreads::start(1).expect("start");
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let rt = runtime();
        // Queue three calls without awaiting them to the end: each is pushed on its first poll.
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let ran = ran.clone();
                Box::pin(pool.run(move || {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }))
            })
            .collect();
        let mut calls = calls;
        rt.block_on(async {
            for c in &mut calls {
                let _ = futures_util::future::poll_immediate(c.as_mut()).await;
            }
        });
        drop(calls);
        drop(pool);
        assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
