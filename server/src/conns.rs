//! The server's connection threads: a fixed set of threads, started with the server and never
//! exiting before it stops, each running a single-threaded tokio runtime that serves the
//! connections handed to it. A request that waits for a commit group (a commit, a put's commit,
//! a claim, a renewal, a release) calls the store right there, on the thread that read the
//! request, and the answer goes out from the same thread when the call returns.
//!
//! Why: a commit through the server used to take two thread hops besides the engine's own wait —
//! the async worker handed the call to a write thread (a condition variable, one wake-up) and
//! the write thread handed the answer back (a oneshot, waking the worker) — and its allocations
//! were made on one thread and freed on another. Per commit that was about 4.7 futex calls on
//! the server (BENCHMARKS.md, "Server", serve5's profile). Here the path is the one of an
//! in-process writer plus the socket: the client's request wakes the connection's thread out of
//! `epoll_wait`, the engine parks and wakes it as it would any writer, and its answer wakes the
//! client. A blocked thread blocks only the connections it serves, which is why each connection
//! gets a thread of its own while there are free ones (the one serving the fewest connections
//! otherwise). Measured (BENCHMARKS.md, "Server", serve6): 2.7 futex calls per commit instead of
//! 4.7, and a thread count fixed from the start under load; the throughput through the server at
//! 64 clients on 2 cores did not change measurably, since each request now wakes its own thread
//! where the async workers used to take many ready sockets per wake-up.
//!
//! Enough threads must wait in the engine's queue at once for commits from many connections to
//! share groups: a group holds at most one call per thread, and connections sharing a thread
//! commit one after the other.
//!
//! Store calls that do not wait for a commit group but may take long (uploads' staging, reads,
//! listings, verify, gc...) still go to the main runtime's blocking pool ([`spawn_blocking`]), so
//! they hold no connection thread, and the threads' runtimes make no blocking pools of their own.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Connection threads a server starts unless told otherwise: the 64 client connections of the
/// P7 benchmark each get a thread of their own, with room for the streamed answers' connections.
pub const DEFAULT_CONNECTION_THREADS: usize = 128;

/// Stack of a connection thread. It polls the connections' futures (whose state lives on the
/// heap) and runs the engine's commit (a leader writes the group's redb transaction); 128 of
/// them at the default 2 MiB would reserve 256 MiB of address space, though not of memory.
const STACK: usize = 1 << 20;

thread_local! {
    /// Set on the connection threads only: the main runtime, whose blocking pool runs their
    /// store calls that may take long.
    static MAIN: OnceCell<tokio::runtime::Handle> = const { OnceCell::new() };
}

/// Runs `f` on the main runtime's blocking pool when called on a connection thread (so the
/// connection threads' own runtimes never start blocking pools: one pool for the whole server,
/// its threads kept as `run.rs` configures them), else on the current runtime's.
pub(crate) fn spawn_blocking<F, R>(f: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    MAIN.with(|m| match m.get() {
        Some(main) => main.spawn_blocking(f),
        None => tokio::task::spawn_blocking(f),
    })
}

/// Whether the calling thread is a connection thread (where blocking in a store call blocks only
/// this thread's connections).
pub(crate) fn on_connection_thread() -> bool {
    MAIN.with(|m| m.get().is_some())
}

struct ConnThread {
    /// The thread's runtime; connections are spawned onto it from the accept loop.
    handle: tokio::runtime::Handle,
    /// Connections this thread serves now.
    connections: Arc<AtomicUsize>,
    /// Ends the thread's runtime (dropping whatever connections it still has).
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<JoinHandle<()>>,
}

/// The connection threads. Dropping them stops every thread's runtime and joins the threads, so
/// whatever their connections held (clones of the `App`, and so of the store) is released by
/// then; drain the connections first.
pub(crate) struct ConnThreads {
    threads: Vec<ConnThread>,
}

/// A connection's place on a thread: where to spawn it, and its count, given back on drop.
pub(crate) struct Slot {
    pub handle: tokio::runtime::Handle,
    count: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnThreads {
    /// Starts `n` (at least one) connection threads; `main` is the runtime whose blocking pool
    /// their long store calls use.
    pub(crate) fn start(n: usize, main: tokio::runtime::Handle) -> std::io::Result<ConnThreads> {
        let mut set = ConnThreads {
            threads: Vec::new(),
        };
        for i in 0..n.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = rt.handle().clone();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let main = main.clone();
            // Any thread not started is an error, and `set`'s drop stops those that were.
            let join = std::thread::Builder::new()
                .name(format!("oncelake-conn-{i}"))
                .stack_size(STACK)
                .spawn(move || {
                    MAIN.with(|m| {
                        let _ = m.set(main);
                    });
                    // Serves the connections spawned onto it until told to stop (or the sender
                    // is dropped); the runtime, and any connection left, is dropped here, on
                    // this thread, outside any async context.
                    let _ = rt.block_on(stopped);
                })?;
            set.threads.push(ConnThread {
                handle,
                connections: Arc::default(),
                stop: Some(stop),
                join: Some(join),
            });
        }
        Ok(set)
    }

    /// The number of connection threads.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// A place for a new connection on the thread serving the fewest now (the first such). Only
    /// the accept loop picks, so the counts cannot change under it but downwards.
    pub(crate) fn pick(&self) -> Slot {
        let t = self
            .threads
            .iter()
            .min_by_key(|t| t.connections.load(Ordering::Relaxed))
            .expect("invariant: a ConnThreads holds at least one thread (start makes n.max(1))");
        t.connections.fetch_add(1, Ordering::Relaxed);
        Slot {
            handle: t.handle.clone(),
            count: t.connections.clone(),
        }
    }
}

impl Drop for ConnThreads {
    fn drop(&mut self) {
        for t in &mut self.threads {
            if let Some(stop) = t.stop.take() {
                let _ = stop.send(());
            }
        }
        // A connection thread never drops the set (its tasks hold the `App`, not this); were it
        // to, joining itself would deadlock, so it is skipped.
        let me = std::thread::current().id();
        for t in &mut self.threads {
            if let Some(j) = t.join.take() {
                if j.thread().id() != me {
                    let _ = j.join();
                }
            }
        }
    }
}

/// Runs a store call that waits for a commit group: right here on a connection thread (blocking
/// only this thread's connections, as an in-process writer blocks its own thread), else on the
/// blocking pool. A panic in `f` is caught and answered `Err(Panicked)`; the thread lives on.
pub(crate) async fn run_commit<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Panicked> {
    if on_connection_thread() {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| Panicked)
    } else {
        spawn_blocking(f).await.map_err(|_| Panicked)
    }
}

/// The call did not finish: it panicked (its answer was never made).
#[derive(Debug)]
pub(crate) struct Panicked;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    fn main_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a test runtime")
    }

    /// Spawns `f`'s future on `slot`'s thread and waits for its result.
    fn on<T: Send + 'static>(
        slot: &Slot,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> std::sync::mpsc::Receiver<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        slot.handle.spawn(async move {
            let _ = tx.send(f.await);
        });
        rx
    }

    #[test]
    fn connections_spread_one_per_thread_then_share_the_least_loaded() {
        let main = main_runtime();
        let c = ConnThreads::start(3, main.handle().clone()).expect("start");
        assert_eq!(c.len(), 3);
        let slots: Vec<Slot> = (0..3).map(|_| c.pick()).collect();
        let names: Vec<String> = slots
            .iter()
            .map(|s| {
                on(s, async {
                    std::thread::current().name().map(str::to_string)
                })
                .recv()
                .expect("ran")
                .expect("named")
            })
            .collect();
        let mut distinct = names.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 3, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("oncelake-conn-")));
        // A fourth shares a thread; after one connection ends, its thread is the next pick.
        let fourth = c.pick();
        drop(fourth);
        let freed = names[1].clone();
        let mut slots = slots;
        drop(slots.remove(1));
        let next = c.pick();
        let name = on(&next, async {
            std::thread::current().name().map(str::to_string)
        })
        .recv()
        .expect("ran");
        assert_eq!(name.as_deref(), Some(freed.as_str()));
    }

    #[test]
    fn commits_run_on_the_connection_threads_and_all_of_them_wait_at_once() {
        let main = main_runtime();
        let c = ConnThreads::start(8, main.handle().clone()).expect("start");
        // Eight calls that each wait for all eight: they finish only if eight connection threads
        // run them at the same time (as eight commits must, to share a group).
        let line = Arc::new(Barrier::new(8));
        let slots: Vec<Slot> = (0..8).map(|_| c.pick()).collect();
        let waits: Vec<_> = slots
            .iter()
            .map(|s| {
                let line = line.clone();
                on(s, async move {
                    run_commit(move || {
                        line.wait();
                        std::thread::current().name().map(str::to_string)
                    })
                    .await
                })
            })
            .collect();
        let mut names: Vec<String> = waits
            .into_iter()
            .map(|r| r.recv().expect("ran").expect("no panic").expect("named"))
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 8, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("oncelake-conn-")));
    }

    #[test]
    fn long_calls_go_to_the_main_pool_and_a_panic_is_an_answer() {
        let main = main_runtime();
        let c = ConnThreads::start(1, main.handle().clone()).expect("start");
        let s = c.pick();
        let name = on(&s, async {
            spawn_blocking(|| std::thread::current().name().map(str::to_string))
                .await
                .expect("ran")
        })
        .recv()
        .expect("ran");
        assert!(
            !name.is_some_and(|n| n.starts_with("oncelake-conn-")),
            "a long call ran on a connection thread"
        );
        let r = on(&s, async { run_commit(|| panic!("boom")).await.is_err() })
            .recv()
            .expect("the thread survived the panic");
        assert!(r);
        let seven = on(&s, async { run_commit(|| 7).await.ok() })
            .recv()
            .expect("ran");
        assert_eq!(seven, Some(7));
    }

    #[test]
    fn dropping_stops_and_joins_the_threads_and_releases_what_they_held() {
        let main = main_runtime();
        let held = Arc::new(());
        let c = ConnThreads::start(2, main.handle().clone()).expect("start");
        for _ in 0..2 {
            let s = c.pick();
            let held = held.clone();
            // A connection that never ends by itself.
            s.handle.clone().spawn(async move {
                let _held = held;
                let _s = s;
                std::future::pending::<()>().await
            });
        }
        drop(c);
        assert_eq!(Arc::strong_count(&held), 1);
    }
}
