//! The engine's core, below [`crate::Store`]: the open database and the in-memory state derived
//! from it ([`Core`]), how a store is opened (`Options`), the snapshot pins, and the small
//! internal API the higher layers use instead of the tables (typed reads, batched index probes,
//! the log reader).
//!
//! Layering (see `docs/layers.md`): the core uses the schema, the index and staging; the commit
//! leader and snapshots use the core; the store uses those; nothing here names the store.

use crate::backlog::Backlog;
use crate::clock::{Clock, SystemClock};
use crate::error::{DbContext, Error, Result};
use crate::fault::FaultPlan;
use crate::index::{DedupIndex, Lookup};
use crate::index_snap::OpenReport;
use crate::metrics::Metrics;
use crate::object::ObjectId;
use crate::overlay::LeaderState;
use crate::owner::Owner;
use crate::schema::meta::{self, seq_and_horizon};
use crate::schema::wal::GroupRedo;
use crate::schema::{MANIFEST, META};
use crate::stage::Stager;
use crate::tail::{LiveTail, Tables};
use crate::vfs::{RealVfs, Vfs};
use parking_lot::{Mutex, RwLock};
use redb::{ReadableDatabase, ReadableTableMetadata};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// When a commit is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Only after it is on disk (one sync per commit group). The default.
    #[default]
    Durable,
    /// Groups are written without a sync; a synced group is written at least every `max_delay`
    /// while commits arrive, and on [`Store::flush`] and close. A crash can lose the commits
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
    /// [`Error::ReadOnly`]. For stores on read-only media. The store must exist, be of the
    /// current format and not need crash recovery.
    pub read_only: bool,
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
            backlog_bytes: crate::backlog::DEFAULT_BOUND_BYTES,
            apply_batch_bytes: crate::backlog::DEFAULT_BATCH_BYTES,
            apply_min_bytes: crate::backlog::DEFAULT_MIN_BYTES,
            background_apply: true,
            read_only: false,
            lake: None,
            lake_checkpoint_every: 1_000,
        }
    }
}

/// What the dedup fast path knows about a unit's current entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Committed {
    /// The committed source version.
    pub source_version: u64,
    /// Its object.
    pub object: ObjectId,
    /// The commit that made it visible.
    pub seq: u64,
}

/// The database, writable or opened read-only. Reads go through [`ReadableDatabase`] (deref);
/// writes through [`Db::begin_write`].
pub(crate) enum Db {
    /// Opened read-write (the normal case).
    Write(redb::Database),
    /// Opened with [`Options::read_only`]: never written.
    Read(redb::ReadOnlyDatabase),
    /// Opened over a shadow of its files (`store::shadow`): redb's repair and the write-ahead
    /// log's replay were written to memory only. Read-only, like [`Db::Read`].
    Shadow(redb::Database),
}

impl std::ops::Deref for Db {
    type Target = dyn ReadableDatabase;
    fn deref(&self) -> &Self::Target {
        match self {
            Db::Write(db) | Db::Shadow(db) => db,
            Db::Read(db) => db,
        }
    }
}

impl Db {
    /// Begins a write transaction; refused on a read-only open.
    pub(crate) fn begin_write(&self) -> Result<redb::WriteTransaction> {
        match self {
            Db::Write(db) => db.begin_write().db("begin a write transaction"),
            Db::Read(_) | Db::Shadow(_) => Err(Error::InvalidRequest(
                "the store is open read-only; writes are refused".into(),
            )),
        }
    }
}

/// How the core applies decided groups (see [`Core::applier`]).
pub(crate) type Applier = fn(&Core, &[GroupRedo], bool) -> Result<()>;

/// The engine's state below [`crate::Store`]: the database, the dedup index, staging, the
/// snapshot pins, the failed flag, options and metrics. The commit leader (`commit::apply`) works
/// on it; higher layers reach it through `Store::core` and the small functions below.
pub(crate) struct Core {
    pub(crate) dir: PathBuf,
    /// Dropped by hand at the end of `Core`'s drop, where a panic of redb's own drop is
    /// contained (see there).
    pub(crate) db: std::mem::ManuallyDrop<Db>,
    pub(crate) stager: Stager,
    /// The seqs open snapshots read as of; GC keeps what they can read.
    pub(crate) readers: Arc<ReaderPins>,
    pub(crate) index: RwLock<DedupIndex>,
    pub(crate) failed: Mutex<Option<String>>,
    pub(crate) options: Options,
    pub(crate) metrics: Metrics,
    pub(crate) last_durable_ms: AtomicU64,
    /// The write-ahead log (`None` on a read-only open).
    pub(crate) wal: Option<crate::schema::wal::Wal>,
    /// Durable groups not yet applied to the B-trees (`commit::backlog`).
    pub(crate) backlog: Backlog<GroupRedo>,
    /// What the commit leader decides from (`commit::view`); only the leader locks it.
    pub(crate) leader: Mutex<LeaderState>,
    /// The shared lake of a lake node (SPEC R23): its log is the truth, the database its replica.
    #[cfg(feature = "lake")]
    pub(crate) lake: Option<Arc<crate::lake::Lake>>,
    /// Writes decided groups to the B-trees in one transaction, synced or not
    /// (`commit::apply::apply_groups`, handed in by the store: the core is below the leader).
    pub(crate) applier: Applier,
    /// This store's identity (META `store_id`).
    pub(crate) store_id: u64,
    /// Whether this open created the store (or completed an interrupted creation).
    pub(crate) created: bool,
    /// How opening built the dedup index.
    pub(crate) open_report: OpenReport,
    /// Set when a commit leader panicked: its transaction may be durable without its index
    /// update, so the index must not be persisted (the next open replays or scans instead).
    pub(crate) index_suspect: AtomicBool,
    /// The process that opened the store: a forked child's copy is neither used nor closed
    /// (`owner`).
    pub(crate) owner: Owner,
    /// Last field: dropped after the database is closed.
    pub(crate) _lock: StoreLock,
}

/// The store's exclusive lock on `LOCK`, released explicitly when dropped.
///
/// Closing the descriptor is not enough: a `flock` belongs to the open file description, and a
/// child process that another thread is spawning holds a copy of every descriptor between its
/// fork and its exec. Closing ours would leave the store locked until that exec, so a reopen
/// right after the drop could fail with `Locked`. Unlocking releases the description's lock
/// whoever else holds a copy.
///
/// In a forked child the lock is not released: the child shares the description with its
/// parent, so unlocking would release the parent's lock (`owner`).
pub(crate) struct StoreLock {
    pub(crate) file: File,
    pub(crate) owner: Owner,
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        if !self.owner.is_current() {
            return;
        }
        // The holder's record (pid and command line, for a waiter to name it; `store::holder`)
        // goes first, while the lock is still ours. Best effort: a stale record only misnames.
        let _ = self.file.set_len(0);
        // Best effort: if it fails, closing the descriptor releases the lock as before.
        let _ = self.file.unlock();
    }
}

/// The seqs that open snapshots read as of, shared by a store's snapshots and its GC.
///
/// A snapshot registers its pin *before* it begins its read, at a seq no newer than the one it
/// will read as of: the seq it asked for, or for a view of the newest seq the newest seq
/// published so far ([`ReaderPins::publish`], a lower bound of what its read will find). A prune
/// decides which rows it keeps in the leader, on a drained backlog, from the lowest pin and the
/// published seq ([`ReaderPins::begin_prune`]), and holds that decision until its group is
/// durable: so a snapshot either is pinned when the prune decides, or registers afterwards at a
/// seq the prune keeps whole. Only a view as of a seq older than that (an old `snapshot_at`)
/// waits, for the prune's own synced commit: never for the backlog's drain, and a view of the
/// newest seq never waits (docs/gc-verify-faults.md).
#[derive(Debug, Default)]
pub(crate) struct ReaderPins {
    state: Mutex<PinsState>,
    /// Notified when a prune's decision is durable.
    pruned: parking_lot::Condvar,
    /// The newest seq whose group a new read can see (a lower bound: set after the group is
    /// queued or applied).
    published: AtomicU64,
}

#[derive(Debug, Default)]
struct PinsState {
    /// Open snapshots per seq.
    seqs: BTreeMap<u64, usize>,
    /// While a prune's group is decided and written: the seq it keeps every view at or after.
    pruning: Option<u64>,
}

impl ReaderPins {
    /// Pins with `newest` published (the store's newest seq at open).
    pub(crate) fn new(newest: u64) -> ReaderPins {
        ReaderPins {
            published: AtomicU64::new(newest),
            ..ReaderPins::default()
        }
    }

    /// Notes that every seq up to `seq` is visible to a read begun from now on (the leader, after
    /// queuing or applying a group).
    pub(crate) fn publish(&self, seq: u64) {
        self.published.fetch_max(seq, Ordering::SeqCst);
    }

    /// The lowest seq an open snapshot reads as of, if any snapshot is open.
    pub(crate) fn min_pinned(&self) -> Option<u64> {
        self.state.lock().seqs.keys().next().copied()
    }

    /// The leader, deciding a prune: the seq every view at or after which the prune must keep
    /// whole (the lowest pin, or the published seq — the newest any view begun from now on can
    /// be older than), held until the guard is dropped once the prune is durable (or failed).
    pub(crate) fn begin_prune(self: &Arc<Self>) -> (u64, PruneGuard) {
        let mut s = self.state.lock();
        let published = self.published.load(Ordering::SeqCst);
        let keep = s
            .seqs
            .keys()
            .next()
            .map_or(published, |&p| p.min(published));
        s.pruning = Some(keep);
        (keep, PruneGuard { pins: self.clone() })
    }

    /// Pins the newest seq for a snapshot about to begin its read: the seq returned is at or
    /// before the one it will read. Never waits.
    pub(crate) fn register_newest(self: &Arc<Self>) -> ReaderPin {
        let mut s = self.state.lock();
        let seq = self.published.load(Ordering::SeqCst);
        *s.seqs.entry(seq).or_insert(0) += 1;
        ReaderPin {
            seq,
            pins: self.clone(),
        }
    }

    /// Pins `seq` for a snapshot as of it, about to begin its read. Waits only while a prune
    /// that keeps views from a newer seq on is being written (it may remove rows this view reads;
    /// once it is durable the view's read sees the new horizon and is refused if it is past it).
    pub(crate) fn register_at(self: &Arc<Self>, seq: u64) -> ReaderPin {
        let mut s = self.state.lock();
        while s.pruning.is_some_and(|keep| seq < keep) {
            self.pruned.wait(&mut s);
        }
        *s.seqs.entry(seq).or_insert(0) += 1;
        ReaderPin {
            seq,
            pins: self.clone(),
        }
    }
}

/// A prune's decision being written (see [`ReaderPins::begin_prune`]); dropping it lets views as
/// of older seqs register again.
pub(crate) struct PruneGuard {
    pins: Arc<ReaderPins>,
}

impl Drop for PruneGuard {
    fn drop(&mut self) {
        self.pins.state.lock().pruning = None;
        self.pins.pruned.notify_all();
    }
}

/// One open snapshot's pin; released on drop.
pub(crate) struct ReaderPin {
    seq: u64,
    pins: Arc<ReaderPins>,
}

impl Drop for ReaderPin {
    fn drop(&mut self) {
        let seqs = &mut self.pins.state.lock().seqs;
        if let Some(n) = seqs.get_mut(&self.seq) {
            *n -= 1;
            if *n == 0 {
                seqs.remove(&self.seq);
            }
        }
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        self.close();
        // A panic inside redb (in its storage backend, while a group that then failed the store
        // was written) leaves redb's own locks poisoned, and dropping such a database panics
        // again. The store is failed and writes nothing more; contain that panic (quietly, as
        // damage) so that dropping a failed store never unwinds into its owner.
        let wal = self.wal.take();
        let _ = crate::error::contain(|| {
            drop(wal);
            Ok(())
        });
        let _ = crate::error::contain(|| {
            // SAFETY: this is the last use of `db`: `close` above is done with it, no other
            // field refers to it, and `Core` is being dropped, so nothing can reach it again.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.db) };
            Ok(())
        });
    }
}

impl Core {
    /// What a drop does before the databases close: drain, sync and trim a store in good order.
    fn close(&mut self) {
        // A forked child's copy never gets here (its store handles and snapshots leak the core,
        // see `owner`); if it did, draining and syncing would write the parent's files.
        if self.options.read_only || !self.owner.is_current() {
            return;
        }
        if self.failed.lock().is_some() {
            // The durable state is unknown: neither sync nor persist an index that may not match.
            return;
        }
        // Every acknowledged group reaches the B-trees before the close sync below.
        if self.drain().is_err() {
            return;
        }
        // Make the acknowledged tail durable in the database on a clean close (relaxed mode's
        // unsynced groups, the durable mode's groups since the last checkpoint), then trim the
        // write-ahead log it covered: a cleanly closed store has nothing to replay.
        // The counts of groups that changed no row (duplicates, refusals) were written with no
        // group of their own: the close writes them.
        let counters = self.leader.lock().counters.clone();
        let synced = self.db.begin_write().is_ok_and(|mut txn| {
            txn.set_durability(redb::Durability::Immediate).is_ok()
                && write_counters(&txn, &counters).is_ok()
                && txn.commit().is_ok()
        });
        if !synced {
            return;
        }
        if let Some(wal) = &self.wal {
            if wal.trim_all().is_err() {
                return;
            }
        }
        if self.index_suspect.load(Ordering::SeqCst)
            || self.options.faults.as_ref().is_some_and(|p| p.crashed())
        {
            return;
        }
        // Best effort: a missing or stale snapshot only costs the next open a scan or a replay.
        let _ = self.persist_index();
    }
}

/// See [`Core::fail_on_unwind`].
pub(crate) struct FailOnUnwind<'a> {
    core: &'a Core,
    cause: &'static str,
    excuse: Option<&'a std::cell::Cell<bool>>,
}

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.excuse.is_some_and(std::cell::Cell::get) {
            // The index may hold part of what the panicked step published: never persist it.
            self.core.index_suspect.store(true, Ordering::SeqCst);
            self.core.fail(self.cause);
        }
    }
}

/// Writes the leader's cumulative store-scope counters into `txn`'s meta table (none yet: nothing).
fn write_counters(txn: &redb::WriteTransaction, counters: &[(String, u64)]) -> Result<()> {
    if counters.is_empty() {
        return Ok(());
    }
    let mut t = txn.open_table(META).db("open the meta table")?;
    t.insert(meta::COUNTERS, meta::sealed_counters(counters).as_slice())
        .db("write the counters")?;
    Ok(())
}

/// Index probes are hashed and run in chunks of this many under one read lock: long enough to
/// overlap many cache misses, short enough not to hold up the commit leader, which needs the
/// write lock to publish a group.
const PROBE_CHUNK: usize = 256;

impl Core {
    /// Begins a read transaction that sees every group acknowledged before the call: it waits
    /// for (or applies itself) the durable groups still in the backlog. So a commit is visible
    /// to every reader of the tables from the moment it is acknowledged, and never before it is
    /// durable. Snapshots and [`Core::tables`] do not wait: they read the backlog
    /// ([`Core::begin_read_with_tail`]).
    pub(crate) fn begin_read(&self) -> Result<redb::ReadTransaction> {
        self.owner.check(&self.dir)?;
        self.backlog
            .wait_applied(|groups| self.apply_backlog(groups))
            .map_err(|e| self.stopped(e))?;
        self.db.begin_read().db("begin a read transaction")
    }

    /// Begins a read transaction without waiting for the backlog, and returns with it the
    /// acknowledged groups it does not contain yet, oldest first: together they hold every
    /// group acknowledged before the call (a snapshot reads through both, `tail`). The list is
    /// taken before the transaction begins, and the B-trees only move forward, so it reaches
    /// back to the transaction's own newest group; the groups the transaction already holds are
    /// dropped from it.
    pub(crate) fn begin_read_with_tail(&self) -> Result<(redb::ReadTransaction, Vec<GroupRedo>)> {
        self.owner.check(&self.dir)?;
        let (applied, mut groups) = self.backlog.unapplied().map_err(|e| self.stopped(e))?;
        let (txn, in_txn) = self.begin_read_after(applied)?;
        groups.retain(|g| g.number() > in_txn);
        assert!(
            groups.first().is_none_or(|g| g.number() == in_txn + 1),
            "invariant: the unapplied groups continue the read transaction without a gap"
        );
        Ok((txn, groups))
    }

    /// A read transaction begun after the backlog reported group `applied` applied, and the
    /// newest group it holds (at least that one: the B-trees only move forward).
    fn begin_read_after(&self, applied: u64) -> Result<(redb::ReadTransaction, u64)> {
        let txn = self.db.begin_read().db("begin a read transaction")?;
        let in_txn =
            crate::schema::wal::applied_group(&txn.open_table(META).db("open the meta table")?)?;
        assert!(
            in_txn >= applied,
            "invariant: a read transaction holds every group the backlog reported applied \
             before it began (it holds {in_txn}, the backlog said {applied})"
        );
        Ok((txn, in_txn))
    }

    /// The objects the commits after seq `after` reference, as of every group acknowledged
    /// before the call: the applied log's records and the backlog's, without waiting for the
    /// backlog (GC and verify ask under the pin lock, which every stager needs).
    pub(crate) fn objects_committed_after(
        &self,
        after: u64,
    ) -> Result<std::collections::HashSet<ObjectId>> {
        let (txn, groups) = self.begin_read_with_tail()?;
        let (txn_seq, _) = seq_and_horizon(&txn)?;
        let mut ids = if txn_seq > after {
            crate::schema::log::LogTable::open(&txn)?.objects_committed(after + 1..=txn_seq)?
        } else {
            Default::default()
        };
        for rec in crate::tail::Tail::new(groups).records(after, u64::MAX)? {
            if let crate::schema::log::RecordBody::Commit { entries } = rec.body {
                ids.extend(entries.iter().map(|e| e.object.id));
            }
        }
        Ok(ids)
    }

    /// Begins a read transaction without waiting for the backlog, with the acknowledged groups it
    /// lacks as a [`LiveTail`] (their numbers only, read in place from the backlog): a snapshot's
    /// start, in constant time whatever the backlog holds. With `limit` the tail stops at that
    /// group (a snapshot that reads again from a newer transaction keeps its own seq).
    pub(crate) fn begin_read_live(
        &self,
        limit: Option<u64>,
    ) -> Result<(redb::ReadTransaction, LiveTail)> {
        self.owner.check(&self.dir)?;
        let (applied, acked, newest) = self.backlog.listing().map_err(|e| self.stopped(e))?;
        let (txn, in_txn) = self.begin_read_after(applied)?;
        let upto = limit.map_or(acked, |l| l.min(acked));
        // The newest listed group gives the tail's seq; a tail cut at `limit` needs none (its
        // snapshot knows its seq).
        let newest = newest.filter(|g| g.number() == upto);
        let tail = LiveTail::new(in_txn, upto, newest.as_ref())?;
        Ok((txn, tail))
    }

    /// Applies pending groups of the backlog if nobody else is (every writer calls it once its
    /// commit returned), unless the store's applier thread does ([`Options::background_apply`]).
    pub(crate) fn help_apply(&self) {
        if self.options.background_apply {
            return;
        }
        self.backlog
            .help_if_due(|groups| self.apply_backlog(groups));
    }

    /// The applier thread's loop ([`Options::background_apply`]): a batch each time one is due,
    /// until the store closes.
    pub(crate) fn run_applier(&self) {
        while self.backlog.next_batch_due() {
            self.backlog
                .help_if_due(|groups| self.apply_backlog(groups));
        }
    }

    /// Waits until the backlog is empty, applying it when nobody else does.
    pub(crate) fn drain(&self) -> Result<()> {
        self.owner.check(&self.dir)?;
        self.backlog
            .drain(|groups| self.apply_backlog(groups))
            .map_err(|e| self.stopped(e))
    }

    /// Back-pressure: holds the leader while the backlog is over its bound.
    pub(crate) fn make_room(&self) -> Result<()> {
        self.backlog
            .make_room(|groups| self.apply_backlog(groups))
            .map_err(|e| self.stopped(e))
    }

    /// Puts the store into its failed state (SPEC R5): every later write, and every read that
    /// would need a group the B-trees no longer follow, is refused until the store is reopened.
    ///
    /// The backlog goes on: its groups were acknowledged and are durable in the write-ahead
    /// log, so applying them is what the reopen's replay would do, and the reads of the failed
    /// store keep seeing them. Only a failed apply stops it (the B-trees then no longer follow
    /// the log).
    pub(crate) fn fail(&self, cause: &str) {
        self.failed.lock().get_or_insert_with(|| cause.to_string());
    }

    /// A guard that puts the store into its failed state if it is dropped while its thread
    /// unwinds from a panic (SPEC I10), and does nothing otherwise. Whoever holds state that a
    /// panic may leave half-changed (the leader's overlay and counters, the backlog's batch)
    /// keeps one alive across the change, declared after anything that must outlive the
    /// failure (the group's pins).
    pub(crate) fn fail_on_unwind(&self, cause: &'static str) -> FailOnUnwind<'_> {
        FailOnUnwind {
            core: self,
            cause,
            excuse: None,
        }
    }

    /// [`Core::fail_on_unwind`], except for a panic of the caller's own code that the caller's
    /// thread reports by setting `callers_panic` (a panicking `Read` of the caller's, while it
    /// stages): that one unwinds to the caller and leaves the store as it is, since nothing the
    /// engine shares was half-changed by it.
    pub(crate) fn fail_on_unwind_unless<'a>(
        &'a self,
        cause: &'static str,
        callers_panic: &'a std::cell::Cell<bool>,
    ) -> FailOnUnwind<'a> {
        FailOnUnwind {
            core: self,
            cause,
            excuse: Some(callers_panic),
        }
    }

    fn stopped(&self, e: crate::backlog::Stopped) -> Error {
        Error::Failed { cause: e.0 }
    }

    /// The applier's step: one batch of the backlog in one write transaction, synced when a
    /// checkpoint is due (then the write-ahead records it covers may be trimmed). A failure, or
    /// a panic of redb or of a debug invariant check, fails the store.
    fn apply_backlog(&self, groups: &[GroupRedo]) -> Result<()> {
        // The clock is the caller's code: it may panic like any other step of the apply.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let now_ms = self.now_ms();
            let synced = self.wal.as_ref().is_some_and(|w| w.checkpoint_due(now_ms));
            crate::error::contain(|| self.apply_groups(groups, synced))?;
            self.after_apply(groups, synced, now_ms)
        }))
        .unwrap_or_else(|p| {
            Err(Error::Failed {
                cause: format!(
                    "applying a commit group panicked: {}",
                    crate::text::panic_text(&p)
                ),
            })
        });
        match r {
            Ok(()) => Ok(()),
            Err(e) => {
                let cause = e.to_string();
                self.fail(&cause);
                crate::metrics::add(&self.metrics.c.sync_failures, 1);
                Err(e)
            }
        }
    }

    /// Applies one group in place (the leader, on a drained backlog): a checkpoint when `synced`.
    pub(crate) fn apply_in_place(&self, group: &GroupRedo, synced: bool) -> Result<()> {
        let now_ms = self.now_ms();
        self.apply_groups(std::slice::from_ref(group), synced)?;
        self.backlog
            .applied_in_place(crate::backlog::Group::number(group));
        if synced {
            self.synced_through(std::slice::from_ref(group), now_ms);
        }
        Ok(())
    }

    /// After the applier's batch: a checkpoint (`synced`) makes the write-ahead records it covers
    /// removable, and the applier removes them itself, so no commit's append carries the trim.
    fn after_apply(&self, groups: &[GroupRedo], synced: bool, now_ms: u64) -> Result<()> {
        if !synced {
            return Ok(());
        }
        self.synced_through(groups, now_ms);
        match &self.wal {
            Some(wal) => wal.trim(),
            None => Ok(()),
        }
    }

    fn synced_through(&self, groups: &[GroupRedo], now_ms: u64) {
        self.last_durable_ms.store(now_ms, Ordering::Relaxed);
        if let (Some(wal), Some(last)) = (&self.wal, groups.last()) {
            wal.checkpointed(crate::backlog::Group::number(last), now_ms);
        }
    }

    /// Writes decided groups to the B-trees in one transaction (synced: a checkpoint).
    fn apply_groups(&self, groups: &[GroupRedo], synced: bool) -> Result<()> {
        (self.applier)(self, groups, synced)
    }

    /// Typed reads of the unit-keyed tables as of a new read transaction and the acknowledged
    /// groups it lacks: like a snapshot, it holds every commit acknowledged before the call and
    /// neither waits for the backlog nor applies it.
    pub(crate) fn tables(&self) -> Result<Tables> {
        let (txn, groups) = self.begin_read_with_tail()?;
        Tables::open(&txn, crate::tail::Tail::new(groups))
    }

    /// The clock's time, ms since the Unix epoch.
    pub(crate) fn now_ms(&self) -> u64 {
        self.options.clock.now_ms()
    }

    /// The store's file operations.
    pub(crate) fn vfs(&self) -> &Arc<dyn Vfs> {
        &self.options.vfs
    }

    /// The dedup fast path for one unit: the index, or the manifest when the unit's key hash is
    /// ambiguous (see [`Core::probe_many`]).
    pub(crate) fn probe(&self, unit: &str) -> Result<Option<Committed>> {
        match self.index.read().get(unit) {
            Lookup::Absent => return Ok(None),
            Lookup::Present(s) => return Ok(Some(Committed::from_slot(s))),
            Lookup::Ambiguous => {}
        }
        let mut out = vec![None];
        self.resolve_ambiguous(&[0], |_| unit, &mut out)?;
        Ok(out[0])
    }

    /// Probes the dedup index for `n` units, the i-th with key hash `hash(i)` and key `unit(i)`,
    /// into `out` (cleared first). The hashes of a chunk are computed before its read lock is
    /// taken, so the probes under it run in a tight loop with many cache misses in flight. Units
    /// whose key hash another unit shares (ambiguous, rare) are read from the manifest afterwards:
    /// the one fallback path of every batched probe.
    pub(crate) fn probe_many<'a>(
        &self,
        n: usize,
        hash: impl Fn(usize) -> u64,
        unit: impl Fn(usize) -> &'a str,
        out: &mut Vec<Option<Committed>>,
    ) -> Result<()> {
        out.clear();
        out.reserve(n);
        let mut hashes = [0u64; PROBE_CHUNK];
        let mut ambiguous = Vec::new();
        for start in (0..n).step_by(PROBE_CHUNK) {
            let len = PROBE_CHUNK.min(n - start);
            for (k, h) in hashes[..len].iter_mut().enumerate() {
                *h = hash(start + k);
            }
            let index = self.index.read();
            for (k, h) in hashes[..len].iter().enumerate() {
                out.push(match index.get_by_hash(*h) {
                    Lookup::Absent => None,
                    Lookup::Present(s) => Some(Committed::from_slot(s)),
                    Lookup::Ambiguous => {
                        ambiguous.push(start + k);
                        None
                    }
                });
            }
        }
        self.resolve_ambiguous(&ambiguous, unit, out)
    }

    /// Answers the probes at `positions` from the manifest, as of one read transaction.
    fn resolve_ambiguous<'a>(
        &self,
        positions: &[usize],
        unit: impl Fn(usize) -> &'a str,
        out: &mut [Option<Committed>],
    ) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        let tables = crate::error::contain(|| self.tables())?;
        for &i in positions {
            let u = unit(i);
            out[i] = crate::error::contain(|| tables.entry(u))?.map(|v| Committed {
                source_version: v.source_version,
                object: v.object.id,
                seq: v.seq,
            });
        }
        Ok(())
    }
}

impl Committed {
    fn from_slot(s: crate::index::Slot) -> Committed {
        Committed {
            source_version: s.source_version,
            object: s.object,
            seq: s.seq,
        }
    }
}

/// Below this many units a snapshot is a few MB at most: rewrite it on every close that changed
/// anything, so the next open replays nothing.
const SMALL_INDEX_UNITS: usize = 65_536;

/// Whether a clean close should rewrite `index.snap`. Rewriting costs ~80 bytes a unit (80 MB at
/// 1M units); replaying costs a little per log record. So a large index's snapshot is kept while
/// the tail the next open must replay stays within 1/16 of the units: a short session (one
/// `oncelake put` on a big store) does not rewrite 80 MB, and an open replays at most that tail.
fn needs_rewrite(units: usize, snapshot_seq: Option<u64>, seq: u64) -> bool {
    match snapshot_seq {
        None => true,
        Some(snap) if snap == seq => false,
        Some(_) if units < SMALL_INDEX_UNITS => true,
        Some(snap) => seq.saturating_sub(snap) > units as u64 / 16,
    }
}

impl Core {
    /// Writes the dedup index as `index.snap`, unless the one on disk already reflects the last
    /// seq. Called on a clean close only, when no commit can run (the last handle is gone), so the
    /// index reflects exactly the durable seq read here.
    fn persist_index(&self) -> Result<()> {
        let txn = self.db.begin_read().db("begin a read transaction")?;
        let (seq, _) = seq_and_horizon(&txn)?;
        let vfs = self.options.vfs.as_ref();
        let keep = vfs
            .metadata(&self.dir.join(crate::index_snap::SNAP_FILE))
            .is_ok()
            && !needs_rewrite(self.index.read().len(), self.open_report.snapshot_seq, seq);
        if keep {
            return Ok(());
        }
        let Some(crc) = crate::index_snap::record_crc(&txn, seq)? else {
            return Ok(());
        };
        let index = self.index.read();
        let units = txn
            .open_table(MANIFEST)
            .db("open the manifest")?
            .len()
            .db("count the manifest")?;
        // A cheap cross-check before persisting: without collisions, one slot per unit.
        if index.ambiguous_len() == 0 && index.len() as u64 != units {
            return Ok(());
        }
        crate::index_snap::write(vfs, &self.dir, self.store_id, seq, crc, &index)
    }
}

/// Reads what must be in memory: the store id, and the dedup index, from the persisted snapshot
/// when it checks out (see `index_snap`), else from a full manifest scan.
pub(crate) fn load_state(
    db: &Db,
    dir: &Path,
    vfs: &dyn Vfs,
) -> Result<(u64, DedupIndex, OpenReport)> {
    let started = std::time::Instant::now();
    let txn = db.begin_read().db("begin a read transaction")?;
    let store_id = meta::get(
        &txn.open_table(META).db("open the meta table")?,
        meta::STORE_ID,
    )?;
    let manifest = txn.open_table(MANIFEST).db("open the manifest")?;
    let n = manifest.len().db("count the manifest")?;
    let (last_seq, _) = seq_and_horizon(&txn)?;
    let fallback = match crate::index_snap::load(vfs, dir, &txn, store_id, last_seq, n) {
        Ok(l) => {
            let report = OpenReport {
                index_from_snapshot: true,
                snapshot_seq: Some(l.snapshot_seq),
                replayed_records: l.replayed_records,
                fallback: None,
                ambiguous: l.index.ambiguous_len() as u64,
                index_micros: started.elapsed().as_micros() as u64,
            };
            return Ok((store_id, l.index, report));
        }
        Err(why) => why,
    };
    drop(manifest);
    let index = DedupIndex::from_manifest(&txn, n)?;
    let report = OpenReport {
        fallback: Some(fallback),
        ambiguous: index.ambiguous_len() as u64,
        index_micros: started.elapsed().as_micros() as u64,
        ..OpenReport::default()
    };
    Ok((store_id, index, report))
}

#[cfg(test)]
mod rewrite_tests {
    use super::needs_rewrite;

    #[test]
    fn a_large_index_is_rewritten_only_when_the_tail_grows() {
        assert!(needs_rewrite(10, None, 5), "no snapshot used: write one");
        assert!(!needs_rewrite(10, Some(5), 5), "unchanged: keep");
        assert!(needs_rewrite(10, Some(4), 5), "small index: always rewrite");
        assert!(
            !needs_rewrite(1_000_000, Some(100), 100 + 62_500),
            "tail within 1/16: keep"
        );
        assert!(
            needs_rewrite(1_000_000, Some(100), 100 + 62_501),
            "tail beyond 1/16: rewrite"
        );
    }
}
