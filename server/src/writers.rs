//! The server's write threads: a fixed set of threads, started with the server and never
//! exiting before it stops, that run the store calls which wait for a commit group (commits,
//! puts, claims, renewals, releases) for the request handlers.
//!
//! Why not tokio's `block_in_place`, which the server used before: it hands the async worker's
//! scheduler to another thread (one taken from the blocking pool, or a new one) for every commit,
//! so the scheduler moved between threads all the time and the server had as many threads as
//! calls in flight at the highest peak so far (growing through a run). Here the threads are made
//! once: a handler queues its call and awaits the answer, the async workers stay on their own
//! threads, and a burst of commits adds no thread. Together with the client's leaner requests of
//! the same change, commits through the server at 64 clients got faster (BENCHMARKS.md, "Server",
//! P7; the two changes were not measured apart).
//!
//! Enough threads must wait in the engine's queue at once for commits from many connections to
//! share groups: a call finding every write thread busy waits here for the next free one (and
//! so joins a later group), which bounds a group at the number of threads.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Write threads a server starts unless told otherwise: at least the 64 client connections of
/// the P7 benchmark can each have a commit waiting in the engine's queue.
pub const DEFAULT_WRITE_THREADS: usize = 128;

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    ready: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// No more jobs come; the threads exit once the queue is empty.
    closed: bool,
}

/// The write threads and their queue. Dropping it lets queued calls finish, then joins the
/// threads (so whatever they hold, such as clones of the store, is released by then).
pub(crate) struct Writers {
    queue: Arc<Queue>,
    threads: Vec<JoinHandle<()>>,
}

/// The call did not finish: it panicked (its answer was never sent).
#[derive(Debug)]
pub(crate) struct Panicked;

impl Writers {
    /// Starts `n` (at least one) write threads.
    pub(crate) fn start(n: usize) -> std::io::Result<Writers> {
        let queue = Arc::new(Queue::default());
        let mut w = Writers {
            queue,
            threads: Vec::new(),
        };
        for i in 0..n.max(1) {
            let q = w.queue.clone();
            // Small stacks: the threads only call into the engine (128 of them at the default
            // 2 MiB would reserve 256 MiB of address space, though not of memory). Any thread
            // not started is an error, and `w`'s drop stops those that were.
            let t = std::thread::Builder::new()
                .name(format!("oncelake-write-{i}"))
                .stack_size(512 << 10)
                .spawn(move || work(&q))?;
            w.threads.push(t);
        }
        Ok(w)
    }

    /// The number of write threads.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Runs `f` on a write thread and waits (asynchronously) for its result. A panic in `f` is
    /// caught on the write thread, which lives on, and answered `Panicked`. If the waiting
    /// handler is dropped (its client went away), `f` still runs to its end; only the answer
    /// is lost, as it would be with the connection.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Panicked> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            // An `Err` here is a handler that stopped waiting: nothing to tell.
            let _ = tx.send(r.map_err(|_| Panicked));
        }));
        // A job dropped unrun (only possible once closed, see `submit`) drops `tx`: `Panicked`.
        rx.await.unwrap_or(Err(Panicked))
    }

    /// Queues a job for the next free thread.
    fn submit(&self, job: Job) {
        {
            let mut s = self.queue.state.lock().unwrap_or_else(|p| p.into_inner());
            // Only `drop` closes the queue, and it owns `self`: a closed queue is unreachable
            // here. Were it not, the job would be dropped unrun, i.e. answered as failed.
            if s.closed {
                return;
            }
            s.jobs.push_back(job);
        }
        self.queue.ready.notify_one();
    }
}

fn work(q: &Queue) {
    loop {
        let job = {
            let mut s = q.state.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(j) = s.jobs.pop_front() {
                    break j;
                }
                if s.closed {
                    return;
                }
                s = q.ready.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        };
        // Panics are caught inside the job (see `run`), so this thread never unwinds.
        job();
    }
}

impl Drop for Writers {
    fn drop(&mut self) {
        self.queue
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .closed = true;
        self.queue.ready.notify_all();
        // A write thread never drops its own pool (jobs hold clones of the store, not the pool's
        // owner); were it to, joining itself would deadlock, so it is skipped.
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("a test runtime")
    }

    #[test]
    fn calls_run_on_the_fixed_threads_and_all_of_them_wait_at_once() {
        let rt = runtime();
        let w = Arc::new(Writers::start(8).expect("start"));
        assert_eq!(w.len(), 8);
        // Eight calls that each wait for all eight: they finish only if eight threads run them
        // at the same time (as eight commits must, to share a group).
        let line = Arc::new(Barrier::new(8));
        let names = rt.block_on(async {
            let calls: Vec<_> = (0..8)
                .map(|_| {
                    let (w, line) = (w.clone(), line.clone());
                    tokio::spawn(async move {
                        w.run(move || {
                            line.wait();
                            std::thread::current().name().map(str::to_string)
                        })
                        .await
                    })
                })
                .collect();
            let mut names = Vec::new();
            for c in calls {
                names.push(c.await.expect("task").expect("call"));
            }
            names
        });
        let mut names: Vec<String> = names.into_iter().flatten().collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 8, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("oncelake-write-")));
    }

    #[test]
    fn a_panic_is_an_answer_and_the_thread_lives_on() {
        let rt = runtime();
        let w = Writers::start(1).expect("start");
        rt.block_on(async {
            assert!(w.run(|| panic!("boom")).await.is_err());
            assert_eq!(w.run(|| 7).await.expect("the one thread still runs"), 7);
        });
    }

    #[test]
    fn dropping_runs_the_queued_calls_then_joins_the_threads() {
        let done = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(());
        let w = Writers::start(2).expect("start");
        for _ in 0..20 {
            let (done, held) = (done.clone(), held.clone());
            w.submit(Box::new(move || {
                let _held = held;
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        drop(w);
        // Every queued job ran, and none is still running or holding what it captured.
        assert_eq!(done.load(Ordering::SeqCst), 20);
        assert_eq!(Arc::strong_count(&held), 1);
    }
}
