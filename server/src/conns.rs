//! The server's connection threads: a fixed set of threads, started with the server and never
//! exiting before it stops, each running a single-threaded tokio runtime that serves the
//! connections handed to it (a new one goes to the thread serving the fewest). They read
//! requests, answer them and never wait for the disk: writes go to the committers
//! (`committer.rs`), which take every write waiting at once; small uploads are staged on the store
//! threads (`pool.rs`); long calls (streamed uploads, reads, listings, verify, gc...) run on the
//! main runtime's blocking pool ([`spawn_blocking`]). So a few threads serve any number of
//! connections, and a burst of ready sockets is read in one wake-up of a thread.
//!
//! Why not a thread per connection that makes its commit itself, as an in-process writer does:
//! each commit then cost the server three wake-ups (the request waking its thread, the engine's
//! queue parking and waking it, the answer) against one in-process, and at 64 clients on two
//! cores the wake-ups were a third of the server's CPU (BENCHMARKS.md, "Server").
//!
//! Every connection has a place in the connection table ([`crate::bounds::ConnTable`]), bounded
//! per client and in total; [`tracked`] tells the table which connections are answering a
//! request, and [`refuse`] answers one the table has no place for.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Connection threads a server starts unless told otherwise: one per core of the machines this
/// is measured on (BENCHMARKS.md, "Server"); more only add threads that take turns.
pub const DEFAULT_CONNECTION_THREADS: usize = 2;

/// Stack of a connection thread. It only polls the connections' futures, whose state lives on
/// the heap.
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

/// The connection's service, tracked: each request runs as its connection's client
/// ([`crate::bounds::as_client`], for the per-client bounds) and marks the connection busy until
/// its answer has been sent, so that a full connection table evicts only connections that are
/// between requests or still waiting for a request's head. `on_shed` counts each request shed
/// with `Retry-After` (the server's live counters; passed in, so this module needs no `App`).
pub(crate) fn tracked<S>(
    inner: S,
    conn: Arc<crate::bounds::Conn>,
    on_shed: Arc<dyn Fn() + Send + Sync>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = TrackedFuture,
> + Clone
where
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    hyper::service::service_fn(move |req| {
        let busy = conn.request();
        let client = conn.client().clone();
        let answer = inner.call(req);
        let on_shed = on_shed.clone();
        let fut: TrackedFuture = Box::pin(async move {
            let resp = crate::bounds::as_client(client, answer).await?;
            // Only a shed request carries `Retry-After`.
            if resp.headers().contains_key(axum::http::header::RETRY_AFTER) {
                on_shed();
            }
            Ok(resp.map(|body| {
                axum::body::Body::new(Tracked {
                    inner: body,
                    _busy: busy,
                })
            }))
        });
        fut
    })
}

/// The future of a [`tracked`] service's call.
pub(crate) type TrackedFuture = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<axum::response::Response, std::convert::Infallible>>
            + Send,
    >,
>;

/// An answer's body that keeps its connection marked busy until it is sent or dropped.
struct Tracked {
    inner: axum::body::Body,
    _busy: crate::bounds::BusyGuard,
}

impl hyper::body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Refusals being written now at most; beyond, a refused connection is closed without a word
/// (a flood must not make the refusals themselves a resource it can exhaust).
const MAX_REFUSING: usize = 64;
static REFUSING: AtomicUsize = AtomicUsize::new(0);

/// Answers a connection the table refused with `503` and `Retry-After`, then closes it: the
/// client is told why instead of seeing a reset. The request is read (at most 64 KiB, for at
/// most a second) only so that closing does not reset the connection before the answer is read.
pub(crate) fn refuse<S>(mut stream: S, over: crate::bounds::Overloaded, live: &crate::live::Live)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    live.overloaded();
    if REFUSING.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSING {
        REFUSING.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body =
            serde_json::json!({"error": "overloaded", "message": over.message()}).to_string();
        let answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
             retry-after: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            crate::bounds::RETRY_AFTER_SECS,
            body.len()
        );
        let limit = std::time::Duration::from_secs(1);
        let _ = tokio::time::timeout(limit, async {
            stream.write_all(answer.as_bytes()).await?;
            stream.shutdown().await?;
            let mut sink = [0u8; 4096];
            let mut read = 0;
            while read < 64 << 10 {
                match stream.read(&mut sink).await? {
                    0 => break,
                    n => read += n,
                }
            }
            std::io::Result::Ok(())
        })
        .await;
        REFUSING.fetch_sub(1, Ordering::Relaxed);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn store_calls_go_to_the_main_pool() {
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
