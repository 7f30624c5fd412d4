//! A shared lake (SPEC R23): several nodes, each a store directory of its own, commit to one
//! log in object storage, the only distributed system involved. The log is the truth; a node's
//! redb database is its replica of it. See `docs/lake.md` for the protocol and why it is
//! correct.
//!
//! This module is the lake's I/O and formats, below the core: the connection ([`url`]), the
//! segment format ([`segment`]), the log's put-if-absent with lost responses resolved by reading
//! back ([`log`]), objects ([`objects`]), checkpoints ([`checkpoint`]) and starting a node from
//! one ([`seed`]), deleting from the lake ([`gc`]), and the node directory's binding ([`node`]). The
//! leader's lake path, which decides, publishes and applies, is `commit::lake`.

pub(crate) mod checkpoint;
pub mod faults;
pub(crate) mod floor;
pub(crate) mod gc;
pub(crate) mod log;
pub(crate) mod node;
pub(crate) mod objects;
pub(crate) mod seed;
pub(crate) mod segment;
pub(crate) mod timings;
pub(crate) mod url;

use crate::error::{Error, Result};
use crate::object::ObjectId;
use object_store::ObjectStore;
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a request that keeps failing (errors other than an answer) is retried before the
/// error is returned (and the store failed: whether the group won is then decided by the log
/// when the node is reopened).
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(60);

/// What this node has applied of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    /// The newest segment applied (0: none).
    pub applied: u64,
    /// BLAKE3 of that segment (zeros for none): what segment `applied + 1` must name.
    pub hash: [u8; 32],
    /// Its log time.
    pub time_ms: u64,
}

/// A node's connection to its lake.
pub(crate) struct Lake {
    pub(crate) url: String,
    store: Arc<dyn ObjectStore>,
    /// The object store client's runtime (a small one, owned by the handle).
    rt: tokio::runtime::Runtime,
    /// This node's id (its store id): written into every segment it publishes.
    pub(crate) node: u64,
    /// Held by whoever applies segments or publishes one: the leader's lake path and `sync`.
    head: Mutex<Head>,
    uploaded: Mutex<HashSet<(ObjectId, u64)>>,
    /// The store-scope counts of this node's groups that logged nothing (duplicates and
    /// refusals) since its last won segment: carried into the next segment it wins, so every
    /// refusal is counted once in the lake's counters. The leader's counters are always the
    /// replica's plus these (`commit::lake::reload`).
    pub(crate) unlogged: Mutex<crate::metrics::Counters>,
    /// Write a checkpoint after winning every segment whose number is a multiple of this
    /// (0: only on demand).
    pub(crate) checkpoint_every: u64,
    /// Set while a background checkpoint runs: at most one at a time.
    pub(crate) checkpointing: std::sync::atomic::AtomicBool,
    /// Set by a background checkpoint that found this node's replica diverged from the lake;
    /// the next commit or sync fails the store with it.
    pub(crate) diverged: Mutex<Option<Error>>,
}

impl std::fmt::Debug for Lake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lake")
            .field("url", &self.url)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Lake {
    /// Connects node `node` to the lake at `url`, its replica having applied segment
    /// `applied`; reads that segment back to learn its hash (a replica ahead of the lake, or
    /// bound to another lake, is refused).
    pub(crate) fn connect(url: &str, node: u64, applied: u64) -> Result<Lake> {
        let bad = |detail: String| Error::Lake {
            url: url.to_string(),
            what: "connecting".into(),
            detail,
            todo: "check the URL and the AWS_* environment variables",
        };
        let store = url::LakeUrl::parse(url)
            .and_then(|u| u.connect())
            .map(|s| faults::wrap_for_url(url, s))
            .map_err(bad)?;
        let rt = Lake::client_runtime()?;
        let lake = Lake {
            url: url.to_string(),
            store,
            rt,
            node,
            head: Mutex::new(Head {
                applied: 0,
                hash: [0; 32],
                time_ms: 0,
            }),
            uploaded: Mutex::new(HashSet::new()),
            unlogged: Mutex::new(crate::metrics::Counters::default()),
            checkpoint_every: 0,
            checkpointing: std::sync::atomic::AtomicBool::new(false),
            diverged: Mutex::new(None),
        };
        if applied > 0 {
            let Some(bytes) = lake.read_segment(applied)? else {
                return Err(lake.error(
                    format!("finding segment {applied}, which this node has applied"),
                    "the lake has no such segment".into(),
                    "this node's replica is not of this lake (or the lake lost segments): \
                     initialise a new node directory with --lake",
                ));
            };
            let seg = segment::Segment::decode(applied, &bytes).map_err(|d| lake.corrupt(d))?;
            *lake.head.lock() = Head {
                applied,
                hash: segment::hash(&bytes),
                time_ms: seg.time_ms,
            };
        }
        Ok(lake)
    }

    /// The runtime of a node's lake client. Two workers: with one, a group's 32 requests in
    /// flight and their connections shared one thread (the P10 bench's single node: 1,174 →
    /// 1,700 units/s, one run each).
    pub(crate) fn client_runtime() -> Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("oncelake-lake")
            .enable_all()
            .build()
            .map_err(|e| Error::io("start the lake client's runtime", e))
    }

    /// The lake's object store (the lake tables list definitions and copy versions through it).
    pub(crate) fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Takes the head: whoever applies or publishes segments holds it.
    pub(crate) fn head(&self) -> MutexGuard<'_, Head> {
        self.head.lock()
    }

    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// An error of this lake.
    pub(crate) fn error(&self, what: String, detail: String, todo: &'static str) -> Error {
        Error::Lake {
            url: self.url.clone(),
            what,
            detail,
            todo,
        }
    }

    /// Damage found in the lake's log.
    pub(crate) fn corrupt(&self, detail: String) -> Error {
        Error::Corrupt {
            path: std::path::PathBuf::from(format!("{}/log", self.url)),
            detail,
        }
    }
}

/// Retries of one request: jittered exponential backoff from 5 ms to 1 s, for at most
/// [`RETRY_FOR`] without an answer.
pub(crate) struct Retry {
    started: Instant,
    attempt: u32,
}

impl Retry {
    pub(crate) fn new() -> Retry {
        Retry {
            started: Instant::now(),
            attempt: 0,
        }
    }

    /// Sleeps before the next attempt, or returns the error once retrying has lasted too long
    /// (at once for a refusal no retry changes: see [`refused`]).
    pub(crate) fn wait_or_fail(
        &mut self,
        lake: &Lake,
        what: &str,
        e: &object_store::Error,
    ) -> Result<()> {
        std::thread::sleep(self.next_wait(lake, what, e)?);
        Ok(())
    }

    /// [`Retry::wait_or_fail`] for async callers: the time to wait before the next attempt,
    /// or the error.
    pub(crate) fn next_wait(
        &mut self,
        lake: &Lake,
        what: &str,
        e: &object_store::Error,
    ) -> Result<Duration> {
        if refused(e) {
            return Err(lake.error(
                what.to_string(),
                e.to_string(),
                "the object store refused the request; check the credentials and the bucket's \
                 permissions, then reopen the node (the log decides whether the last group was \
                 written)",
            ));
        }
        if self.started.elapsed() >= RETRY_FOR {
            return Err(lake.error(
                what.to_string(),
                e.to_string(),
                "the object store kept failing; check it is reachable and the credentials, \
                 then reopen the node (the log decides whether the last group was written)",
            ));
        }
        let wait = backoff_for(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        Ok(wait)
    }
}

/// Whether the object store refused a request for good (403, 401): retrying is pointless, and
/// whether a refused create took effect is left to the log when the node is reopened.
pub(crate) fn refused(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    )
}

/// Sleeps a jittered exponential backoff for attempt `attempt` (5 ms doubling, at most 1 s).
pub(crate) fn backoff(attempt: u32) {
    std::thread::sleep(backoff_for(attempt));
}

/// The jittered wait of [`backoff`].
fn backoff_for(attempt: u32) -> Duration {
    let cap = 5u64.saturating_mul(1 << attempt.min(8)).min(1_000);
    Duration::from_millis(segment::nonce() % cap.max(1) + 1)
}
