//! How a store is opened and how it behaves ([`Options`]): durability, group and backlog bounds,
//! the lock wait, the clock and file seams, the page cache, read-only and lake binding.

use crate::clock::{Clock, SystemClock};
use crate::fault::FaultPlan;
use crate::vfs::{RealVfs, Vfs};
use std::sync::Arc;
use std::time::Duration;

/// When a commit is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Only after it is on disk (one sync per commit group). The default.
    #[default]
    Durable,
    /// Groups are written without a sync; a synced group is written at least every `max_delay`
    /// while commits arrive, and on [`Store::flush`](crate::Store::flush) and close. A crash can lose the commits
    /// acknowledged since the last synced group — at most `max_delay` of them, or all of those
    /// since the last commit if commits stopped before the delay ran out — but never tears one.
    Relaxed {
        /// The longest time between two synced groups while commits keep coming.
        max_delay: Duration,
    },
}

/// See [`Options::lock_wait_stop`]: `true` to stop waiting for the store's lock.
#[derive(Clone)]
pub struct LockWaitStop(pub Arc<dyn Fn() -> bool + Send + Sync>);

impl std::fmt::Debug for LockWaitStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockWaitStop(..)")
    }
}

/// How to open a store.
#[derive(Clone, Debug)]
pub struct Options {
    /// When commits are acknowledged.
    pub durability: Durability,
    /// The most units one commit group (one redb transaction) may carry.
    pub max_group_units: usize,
    /// How long to wait for another process to release the store (0: fail at once).
    pub lock_wait: Duration,
    /// Stop waiting for the lock before `lock_wait` ends when this says so: the open then fails
    /// with [`crate::Error::Locked`] at once. Asked after every wake-up that did not get the lock
    /// — a release, or a file created or renamed into the store directory (as a server's
    /// address file is) — so a waiter whose holder turned out to be a server can use the server
    /// instead of waiting for a lock that will not be released.
    pub lock_wait_stop: Option<LockWaitStop>,
    /// The clock for leases and timestamps.
    pub clock: Arc<dyn Clock>,
    /// File operations on objects and staging.
    pub vfs: Arc<dyn Vfs>,
    /// Fault injection for the database file (tests).
    pub faults: Option<Arc<FaultPlan>>,
    /// redb's page cache, bytes. The default (64 MiB) keeps a 1,000,000-unit store within P6's
    /// 200 bytes a unit; a larger cache speeds up commits on stores much bigger than it.
    pub cache_bytes: usize,
    /// The write-ahead backlog's bound, bytes of redo: above it the commit leader waits for the
    /// B-trees to catch up (back-pressure). It bounds the backlog's memory (a snapshot reads the
    /// unapplied commits from it, and an open snapshot keeps those it read), and how long a
    /// reader of the tables that waits for them (GC, verify, claim reads) may wait. Default
    /// 32 MiB (about 70,000 one-unit commits). Must be at least `apply_batch_bytes`.
    pub backlog_bytes: usize,
    /// The most redo bytes one transaction applying the backlog to the B-trees takes. Larger
    /// batches dirty fewer B-tree pages per unit (several units share a leaf) and pay one
    /// transaction commit for more units; a table reader (or a writer under back-pressure) that
    /// applies a batch waits for it.
    /// Default 4 MiB.
    pub apply_batch_bytes: usize,
    /// The redo bytes that must wait before the backlog is applied (by the store's applier
    /// thread, or with `background_apply` off by the writer whose commit finds them); below
    /// it the groups wait for more (a batch of them costs the B-trees less per unit than one
    /// transaction each), durable in the write-ahead log. Visibility does not depend on it: a
    /// snapshot reads what waits from the backlog, and a reader of the tables (GC, verify, claim
    /// reads) applies it first, so this also bounds how long such a reader that comes after a
    /// run of commits may spend applying them. Default 256 KiB (about 500
    /// one-unit commits); 0 applies after every commit; above `apply_batch_bytes` it counts as
    /// that (a batch never takes more).
    pub apply_min_bytes: usize,
    /// Who applies the backlog once `apply_min_bytes` wait: a thread of the store's own (the
    /// default), so no writer's call is held while a batch is written to the B-trees; or, when
    /// `false`, the writer whose commit finds that much waiting, after its answer (then a store
    /// runs no thread of its own, and a single-threaded caller applies every batch on its own
    /// thread, in the same order every run, as the deterministic tests need). Readers, flushes,
    /// back-pressure and the close apply what they need themselves either way.
    pub background_apply: bool,
    /// The lake to bind a new node directory to (SPEC R23): `s3://BUCKET/PREFIX`,
    /// `file:///PATH` or `memory://NAME`; needs the `lake` feature. A node directory keeps its
    /// binding (the file `LAKE`), so later opens need not repeat it; an open that names another
    /// lake than the bound one is refused, and so is binding a store that holds commits.
    pub lake: Option<String>,
    /// On a lake node: after winning a segment whose number is a multiple of this, write a
    /// checkpoint of the replica into the lake in the background, so a new node starts from
    /// it instead of replaying the whole log (docs/lake.md). 0: only on demand
    /// (`Store::checkpoint`). Default 1,000 segments.
    pub lake_checkpoint_every: u64,
    /// Open for reading only: nothing in the directory is written (not even redb's header),
    /// other readers may share the store, and every write is refused with
    /// [`Error::ReadOnly`](crate::Error::ReadOnly). For stores on read-only media. The store must exist, be of the
    /// current format and not need crash recovery.
    pub read_only: bool,
    /// Benchmarks only: parts of the durable commit path switched off, to measure what the rest
    /// costs (`oncelake-bench commit --floor`). Either switch breaks durability or reads, so it
    /// exists only with the `testing` feature and is off by default.
    #[cfg(feature = "testing")]
    pub floor: Floor,
}

/// What [`Options::floor`] switches off (benchmarks only; see there).
#[cfg(feature = "testing")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Floor {
    /// The backlog is dropped instead of applied to the B-trees: the tables never see a commit
    /// of this opening (the write-ahead log alone carries them), so reads and a reopen are wrong.
    pub skip_apply: bool,
    /// The write-ahead append is committed without its sync: nothing acknowledged is durable.
    pub skip_wal_sync: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Durable,
            max_group_units: 4096,
            lock_wait: Duration::ZERO,
            lock_wait_stop: None,
            clock: Arc::new(SystemClock),
            vfs: Arc::new(RealVfs),
            faults: None,
            cache_bytes: 64 << 20,
            backlog_bytes: crate::wal::backlog::DEFAULT_BOUND_BYTES,
            apply_batch_bytes: crate::wal::backlog::DEFAULT_BATCH_BYTES,
            apply_min_bytes: crate::wal::backlog::DEFAULT_MIN_BYTES,
            background_apply: true,
            read_only: false,
            lake: None,
            lake_checkpoint_every: 1_000,
            #[cfg(feature = "testing")]
            floor: Floor::default(),
        }
    }
}

#[cfg(test)]
impl Options {
    /// Applied by nobody unless asked: every group stays in the backlog until a reader of the
    /// tables, a flush or a close needs it (the unit tests of reads over the backlog).
    pub(crate) fn held_backlog() -> Options {
        Options {
            background_apply: false,
            apply_min_bytes: 64 << 20,
            ..Options::default()
        }
    }
}
