//! The server's shared state, below every handler: the store, the limits, the leases and
//! staging registries, the live counters and the pools the calls run on.

use crate::api_error::{joined, ApiError, ApiResult};
use crate::live::Live;
use oncelake::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Limits that protect the server from a buggy or hostile client (SPEC R20). The `*_per_client`
/// bounds count what one client holds ([`crate::bounds`]: a process on the Unix socket, a host on
/// TCP); the others what all clients hold together.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest JSON request body (413 beyond).
    pub max_json: usize,
    /// Largest upload (413 beyond; the staging is discarded).
    pub max_upload: u64,
    /// Longest wait for the next piece of a request body before it is abandoned (408); also the
    /// window over which an upload's rate is checked against `min_body_rate`.
    pub body_idle: Duration,
    /// Slowest upload accepted, in bytes per second, averaged over each `body_idle` window (408
    /// below it, the staging discarded): a client trickling bytes must not hold its upload,
    /// its file and its thread forever. 0 checks no rate.
    pub min_body_rate: u64,
    /// Longest long-poll wait a client may ask for.
    pub max_poll: Duration,
    /// How long an uncommitted staging handle is kept after its upload.
    pub staged_ttl: Duration,
    /// Open connections, all clients together. When full, the connection idle longest is
    /// closed to make room; when none is idle, a new one gets `503`.
    pub max_connections: usize,
    /// Open connections of one client (`503` beyond).
    pub max_connections_per_client: usize,
    /// Store calls running on the blocking pool at once (streamed uploads and answers, reads,
    /// listings, verify, gc, pipeline and table calls), all clients together (`503` beyond).
    /// The pool has this many threads plus a few kept for `/healthz`.
    pub max_blocking: usize,
    /// Store calls of one client on the blocking pool at once (`503` beyond).
    pub max_blocking_per_client: usize,
    /// Uncommitted staging handles, all clients together (`503` beyond).
    pub max_staged: usize,
    /// Uncommitted staging handles of one client (`429 too_many_staged` beyond).
    pub max_staged_per_client: usize,
    /// Largest pipeline definition, in bytes of its text (`413` beyond).
    pub max_definition: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_json: 16 << 20,
            max_upload: 64 << 30,
            body_idle: Duration::from_secs(30),
            min_body_rate: 64,
            max_poll: Duration::from_secs(60),
            staged_ttl: Duration::from_secs(600),
            max_connections: 1024,
            max_connections_per_client: 256,
            max_blocking: 128,
            max_blocking_per_client: 32,
            max_staged: 65_536,
            max_staged_per_client: 4096,
            max_definition: 1 << 20,
        }
    }
}

/// What every handler shares.
pub(crate) struct App {
    pub store: Store,
    pub dir: PathBuf,
    pub limits: Limits,
    pub live: Live,
    pub staged: crate::staging::Registry,
    pub snapshots: crate::snapshot_leases::Leases,
    /// The newest seq this server has seen committed; long-polls wait on it.
    pub seq: tokio::sync::watch::Sender<u64>,
    /// Where commits go ([`commit_queued`]).
    pub committers: crate::committer::Committers,
    /// Where small uploads are staged ([`upload`]).
    pub store_threads: crate::pool::StoreThreads,
    /// The calls on the blocking pool, per client and in total ([`App::spawn_blocking`]).
    pub pool_calls: Arc<crate::bounds::Quota>,
    /// The latest GC and verify, for the status page.
    pub recent: crate::recent::Recent,
}

impl App {
    pub(crate) fn new(
        store: Store,
        dir: PathBuf,
        limits: Limits,
        committers: crate::committer::Committers,
        store_threads: crate::pool::StoreThreads,
    ) -> oncelake::Result<App> {
        let seq = store.last_seq()?;
        Ok(App {
            pool_calls: crate::bounds::Quota::new(
                "calls on the server's blocking pool",
                limits.max_blocking_per_client,
                limits.max_blocking,
            ),
            staged: crate::staging::Registry::new(limits.max_staged_per_client, limits.max_staged),
            committers,
            store_threads,
            store,
            dir,
            limits,
            live: Live::default(),
            snapshots: Default::default(),
            recent: Default::default(),
            seq: tokio::sync::watch::channel(seq).0,
        })
    }

    pub(crate) fn note_seq(&self, seq: Option<u64>) {
        if let Some(s) = seq {
            self.seq.send_if_modified(|cur| {
                let newer = s > *cur;
                if newer {
                    *cur = s;
                }
                newer
            });
        }
    }

    /// Runs `f` on the blocking pool as the current request's client's call: refused at once
    /// ([`crate::bounds::Overloaded`], a `503`) when that client, or all clients together, run
    /// as many as they may. The call's place is given back when `f` returns, so a producer
    /// that waits for a slow client holds it for as long as it waits.
    pub(crate) fn spawn_blocking<F, R>(
        &self,
        f: F,
    ) -> Result<tokio::task::JoinHandle<R>, crate::bounds::Overloaded>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let permit = self.pool_calls.take(crate::bounds::current_client())?;
        Ok(crate::conns::spawn_blocking(move || {
            let _permit = permit;
            f()
        }))
    }

    /// Runs a store call on the blocking pool ([`App::spawn_blocking`]) and waits for it.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> oncelake::Result<T> + Send + 'static,
    ) -> ApiResult<T> {
        joined(self.spawn_blocking(f)?.await)?.map_err(ApiError::from)
    }

    /// [`App::blocking`] of a call on the served store (the pool's thread holds the app).
    pub(crate) async fn with_store<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Store) -> oncelake::Result<T> + Send + 'static,
    ) -> ApiResult<T> {
        let app = self.clone();
        self.blocking(move || f(&app.store)).await
    }

    /// Drops staging handles no commit named within the TTL (their objects become orphans
    /// that GC collects).
    pub(crate) fn expire_staged(&self) {
        self.live.set_staged_handles(self.staged.expire() as u64);
        self.snapshots.expire();
    }
}

/// A connection's hold on the shared state: counted open while it lives, closed when dropped.
pub(crate) struct ConnGuard(Arc<App>);

impl ConnGuard {
    /// Counts a new connection open (and in the total).
    pub(crate) fn open(app: &Arc<App>) -> ConnGuard {
        app.live.connection_opened();
        ConnGuard(app.clone())
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.live.connection_closed();
    }
}
