//! The store: one directory holding the redb file (manifest, commit log, claims), `objects/`
//! and `staging/` (SPEC R1). Opening validates before it touches anything; writes go through the
//! group-commit queue; reads go through snapshots. Opening is in `open`.

mod open;

use crate::claim::{validate_worker, ClaimOutcome, Lease, ReleaseOutcome, RenewOutcome};
use crate::clock::{Clock, SystemClock};
use crate::codec::{seal, unseal};
use crate::commit::apply::{self, Done, Op};
use crate::commit::queue::WriteQueue;
use crate::commit::{Batch, CommitReport, UnitOutcome};
use crate::error::{DbContext, Error, IoContext, Result};
use crate::fault::FaultPlan;
use crate::index::{DedupIndex, Lookup};
use crate::index_snap::OpenReport;
use crate::key::validate_key;
use crate::manifest::{Entry, EntryValue, MANIFEST};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::object::ObjectId;
use crate::snapshot::{ReaderPins, Snapshot};
use crate::stage::{Staged, Stager};
use crate::vfs::{RealVfs, Vfs};
use open::{open_read_only, open_read_write};
use parking_lot::{Mutex, RwLock};
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The newest store format this build reads and writes. Format 2 seals every redb value with a
/// checksum over its table, key and value (`codec::seal`); a format-1 store is upgraded in place
/// on its first read-write open (see `upgrade`).
pub const FORMAT_VERSION: u32 = 2;
/// The file that marks a directory as an oncelake store and stamps its format.
pub const MARKER_FILE: &str = "ONCELAKE";
/// The redb database inside a store.
pub const DB_FILE: &str = "oncelake.redb";
const LOCK_FILE: &str = "LOCK";
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// The store's counters and stamps, each value a sealed u64 (format 2).
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("store_meta");
/// Format 1's meta table (plain u64 values); only read by the upgrade, which deletes it.
const META_V1: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_TABLE: &str = "meta";
pub(crate) const META_FORMAT: &str = "format";
pub(crate) const META_NEXT_SEQ: &str = "next_seq";
pub(crate) const META_NEXT_TOKEN: &str = "next_token";
pub(crate) const META_HISTORY_FROM: &str = "history_from";
/// A random identity stamped at creation (or on the first open by a build that knows it), so a
/// persisted index snapshot from another store is never used.
pub(crate) const META_STORE_ID: &str = "store_id";

/// Reads the meta value `key`; every one is stamped at creation, so a missing one means the
/// table is damaged (a damaged key no longer finds its row), never a default.
pub(crate) fn meta_get(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<u64> {
    let guard = meta
        .get(key)
        .db("read the meta table")?
        .ok_or_else(|| Error::corrupt_record(META_TABLE, key, "it is missing"))?;
    let payload = unseal(META_TABLE, key.as_bytes(), key, guard.value())?;
    let mut r = crate::codec::Reader::new(payload, "meta value");
    let v = r.u64().and_then(|v| r.finish().map(|()| v));
    v.map_err(|e| Error::corrupt_record(META_TABLE, key, e.to_string()))
}

/// Writes the meta value `key`, sealed.
pub(crate) fn meta_put(meta: &mut redb::Table<&str, &[u8]>, key: &str, value: u64) -> Result<()> {
    let sealed = seal(META_TABLE, key.as_bytes(), value.to_le_bytes().to_vec());
    meta.insert(key, sealed.as_slice())
        .db("write the meta table")?;
    Ok(())
}

/// The newest committed seq (0 for an empty log) and the oldest seq still readable
/// (`history_from`), as of `txn`.
pub(crate) fn seq_and_horizon(txn: &redb::ReadTransaction) -> Result<(u64, u64)> {
    let meta = txn.open_table(META).db("open the meta table")?;
    let next = meta_get(&meta, META_NEXT_SEQ)?;
    let from = meta_get(&meta, META_HISTORY_FROM)?;
    Ok((next.saturating_sub(1), from))
}

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

/// How to open a store.
#[derive(Clone, Debug)]
pub struct Options {
    /// When commits are acknowledged.
    pub durability: Durability,
    /// The most units one commit group (one redb transaction) may carry.
    pub max_group_units: usize,
    /// How long to wait for another process to release the store (0: fail at once).
    pub lock_wait: Duration,
    /// The clock for leases and timestamps.
    pub clock: Arc<dyn Clock>,
    /// File operations on objects and staging.
    pub vfs: Arc<dyn Vfs>,
    /// Fault injection for the database file (tests).
    pub faults: Option<Arc<FaultPlan>>,
    /// redb's page cache, bytes. The default (64 MiB) keeps a 1,000,000-unit store within P6's
    /// 200 bytes a unit; a larger cache speeds up commits on stores much bigger than it.
    pub cache_bytes: usize,
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
            clock: Arc::new(SystemClock),
            vfs: Arc::new(RealVfs),
            faults: None,
            cache_bytes: 64 << 20,
            read_only: false,
        }
    }
}

/// What the dedup fast path knows about a unit's current entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

impl std::ops::Deref for Db {
    type Target = dyn ReadableDatabase;
    fn deref(&self) -> &Self::Target {
        match self {
            Db::Write(db) => db,
            Db::Read(db) => db,
        }
    }
}

impl Db {
    /// Begins a write transaction; refused on a read-only open.
    pub(crate) fn begin_write(&self) -> Result<redb::WriteTransaction> {
        match self {
            Db::Write(db) => db.begin_write().db("begin a write transaction"),
            Db::Read(_) => Err(Error::InvalidRequest(
                "the store is open read-only; writes are refused".into(),
            )),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) db: Db,
    pub(crate) stager: Stager,
    /// The seqs open snapshots read as of; GC keeps what they can read.
    pub(crate) readers: Arc<ReaderPins>,
    pub(crate) queue: WriteQueue<Op, Result<Done>>,
    pub(crate) index: RwLock<DedupIndex>,
    pub(crate) failed: Mutex<Option<String>>,
    pub(crate) options: Options,
    pub(crate) metrics: Metrics,
    pub(crate) last_durable_ms: AtomicU64,
    /// This store's identity (META `store_id`).
    pub(crate) store_id: u64,
    /// Whether this open created the store (or completed an interrupted creation).
    created: bool,
    /// How opening built the dedup index.
    open_report: OpenReport,
    /// Set when a commit leader panicked: its transaction may be durable without its index
    /// update, so the index must not be persisted (the next open replays or scans instead).
    index_suspect: AtomicBool,
    /// Last field: dropped after the database is closed.
    _lock: StoreLock,
}

/// The store's exclusive lock on `LOCK`, released explicitly when dropped.
///
/// Closing the descriptor is not enough: a `flock` belongs to the open file description, and a
/// child process that another thread is spawning holds a copy of every descriptor between its
/// fork and its exec. Closing ours would leave the store locked until that exec, so a reopen
/// right after the drop could fail with `Locked`. Unlocking releases the description's lock
/// whoever else holds a copy.
struct StoreLock(File);

impl Drop for StoreLock {
    fn drop(&mut self) {
        // Best effort: if it fails, closing the descriptor releases the lock as before.
        let _ = self.0.unlock();
    }
}

/// An open store. Cheap to clone; share it between threads.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the store in `dir`, creating it if the directory is missing or empty.
    ///
    /// Refuses, without changing anything, a directory that is not a store, a store of a newer
    /// format, a damaged database file, and a store another process has open.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Self::open_with(dir, Options::default())
    }

    /// [`Store::open`] with options.
    ///
    /// Safe under any concurrency: whether to create is decided under the store's lock, so any
    /// number of threads and processes opening the same missing or empty directory end with one
    /// store; a creation interrupted at any point is completed by the next open.
    pub fn open_with(dir: impl AsRef<Path>, options: Options) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        let (db, lock, created) = if options.read_only {
            let (db, lock) = crate::error::contain(|| open_read_only(&dir, &options))?;
            (db, lock, false)
        } else {
            crate::error::contain(|| open_read_write(&dir, &options))?
        };
        let (store_id, index, open_report) =
            crate::error::contain(|| load_state(&db, &dir, options.vfs.as_ref()))?;
        let lock = StoreLock(lock);
        let now = options.clock.now_ms();
        let stager = Stager::new(&dir, options.vfs.clone());
        Ok(Store {
            inner: Arc::new(Inner {
                stager,
                readers: Arc::default(),
                queue: WriteQueue::new(options.max_group_units),
                index: RwLock::new(index),
                failed: Mutex::new(None),
                metrics: Metrics::default(),
                last_durable_ms: AtomicU64::new(now),
                options,
                db,
                dir,
                store_id,
                created,
                open_report,
                index_suspect: AtomicBool::new(false),
                _lock: lock,
            }),
        })
    }

    /// Opens the store in `dir` for reading only (see [`Options::read_only`]).
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Store> {
        let options = Options {
            read_only: true,
            ..Options::default()
        };
        Self::open_with(dir, options)
    }

    /// Whether this open created the store (or completed a creation that was interrupted),
    /// rather than finding it complete.
    pub fn created(&self) -> bool {
        self.inner.created
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Stages `bytes` as an object (hash, CRC32, fsync, atomic publish).
    pub fn stage_bytes(&self, bytes: &[u8]) -> Result<Staged> {
        self.stage_reader(bytes)
    }

    /// Stages an object from a reader, streaming: memory use does not grow with its size.
    pub fn stage_reader(&self, mut reader: impl Read) -> Result<Staged> {
        self.check_writable()?;
        let staged = self.inner.stager.stage_reader(&mut reader)?;
        crate::metrics::add(&self.inner.metrics.c.objects_staged, 1);
        crate::metrics::add(&self.inner.metrics.c.bytes_staged, staged.meta().size);
        Ok(staged)
    }

    /// Stages a copy of the file at `path`.
    pub fn stage_file(&self, path: impl AsRef<Path>) -> Result<Staged> {
        let path = path.as_ref();
        let f = File::open(path).ctx(|| format!("open {}", path.display()))?;
        self.stage_reader(f)
    }

    /// Commits a batch through the group-commit path and reports every unit's outcome.
    ///
    /// `Err` means the commit could not be decided or made durable (I/O, failed store, bad
    /// request, a handle staged by another store); rejections by the commit rules are outcomes in
    /// the report.
    pub fn commit(&self, batch: Batch) -> Result<CommitReport> {
        batch.validate()?;
        for item in &batch.items {
            self.inner.stager.check_handle(&item.unit, &item.staged)?;
        }
        match self.submit(Op::Commit(batch))? {
            Done::Commit(r) => Ok(r),
            other => {
                unreachable!("invariant: a commit op is answered by a commit report, got {other:?}")
            }
        }
    }

    /// Stages `bytes` and commits them as the output of `unit` at `source_version`.
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = oncelake::Store::open(dir.path().join("lake"))?;
    /// let first = store.put("orders/date=2026-11-29", 7, b"rows")?;
    /// assert_eq!(first.outcome.name(), "committed");
    /// let retry = store.put("orders/date=2026-11-29", 7, b"rows")?;
    /// assert_eq!(retry.outcome.name(), "duplicate");
    /// # Ok(()) }
    /// ```
    pub fn put(&self, unit: &str, source_version: u64, bytes: &[u8]) -> Result<UnitOutcome> {
        validate_key(unit)?;
        let staged = self.stage_bytes(bytes)?;
        let mut r = self.commit(Batch::new().put(unit, source_version, &staged))?;
        Ok(r.units.remove(0))
    }

    /// Stages `bytes` and commits them as a deliberate correction of `unit` at `source_version`
    /// (revision + 1; the old entry stays in the history).
    pub fn correct(&self, unit: &str, source_version: u64, bytes: &[u8]) -> Result<UnitOutcome> {
        validate_key(unit)?;
        let staged = self.stage_bytes(bytes)?;
        let mut r = self.commit(Batch::new().correct(unit, source_version, &staged))?;
        Ok(r.units.remove(0))
    }

    /// The dedup fast path: the unit's current version, object and seq, from memory.
    pub fn lookup(&self, unit: &str) -> Result<Option<Committed>> {
        match self.inner.index.read().get(unit) {
            Lookup::Absent => return Ok(None),
            Lookup::Present(s) => {
                return Ok(Some(Committed {
                    source_version: s.source_version,
                    object: s.object,
                    seq: s.seq,
                }))
            }
            Lookup::Ambiguous => {}
        }
        Ok(self.snapshot()?.get(unit)?.map(|e| Committed {
            source_version: e.source_version,
            object: e.object.id,
            seq: e.seq,
        }))
    }

    /// Whether `unit` is committed at `source_version` or newer.
    pub fn is_done(&self, unit: &str, source_version: u64) -> Result<bool> {
        Ok(self
            .lookup(unit)?
            .is_some_and(|c| c.source_version >= source_version))
    }

    /// A consistent read-only view as of the newest commit.
    pub fn snapshot(&self) -> Result<Snapshot> {
        Snapshot::new(self, None)
    }

    /// A consistent read-only view as of an older `seq`, within the kept history.
    pub fn snapshot_at(&self, seq: u64) -> Result<Snapshot> {
        Snapshot::new(self, Some(seq))
    }

    /// The unit's current entry.
    pub fn get(&self, unit: &str) -> Result<Option<Entry>> {
        self.snapshot()?.get(unit)
    }

    /// Claims `unit` for `worker` to produce `source_version`, for `ttl` (coordinator mode).
    pub fn claim(
        &self,
        unit: &str,
        source_version: u64,
        worker: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome> {
        validate_key(unit)?;
        validate_worker(worker)?;
        match self.submit(Op::Claim {
            unit: unit.to_string(),
            source_version,
            worker: worker.to_string(),
            ttl_ms: ttl.as_millis() as u64,
        })? {
            Done::Claim(c) => Ok(c),
            other => {
                unreachable!("invariant: a claim op is answered by a claim outcome, got {other:?}")
            }
        }
    }

    /// Claims every `(unit, source_version)` of `units` for `worker`, for `ttl`, in one write
    /// transaction: the outcomes (in the order of `units`) are exactly those of as many
    /// [`Store::claim`] calls in a row, a unit named twice included (the second is an extension of
    /// the first). Every key is checked before anything is written; a bad one fails the whole call.
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = oncelake::Store::open(dir.path().join("lake"))?;
    /// let ttl = Duration::from_secs(30);
    /// let got = store.claim_many(&[("a", 1), ("b", 1)], "w1", ttl)?;
    /// assert!(got.iter().all(|c| matches!(c, oncelake::ClaimOutcome::Granted { .. })));
    /// # Ok(()) }
    /// ```
    pub fn claim_many(
        &self,
        units: &[(&str, u64)],
        worker: &str,
        ttl: Duration,
    ) -> Result<Vec<ClaimOutcome>> {
        validate_worker(worker)?;
        for (unit, _) in units {
            validate_key(unit)?;
        }
        if units.is_empty() {
            return Ok(Vec::new());
        }
        match self.submit(Op::ClaimMany {
            units: units.iter().map(|(u, v)| (u.to_string(), *v)).collect(),
            worker: worker.to_string(),
            ttl_ms: ttl.as_millis() as u64,
        })? {
            Done::ClaimMany(c) => Ok(c),
            other => unreachable!(
                "invariant: a batched claim is answered by its claim outcomes, got {other:?}"
            ),
        }
    }

    /// Extends a lease that is still yours.
    pub fn renew(&self, lease: &Lease, ttl: Duration) -> Result<RenewOutcome> {
        match self.submit(Op::Renew {
            lease: lease.clone(),
            ttl_ms: ttl.as_millis() as u64,
        })? {
            Done::Renew(r) => Ok(r),
            other => {
                unreachable!("invariant: a renew op is answered by a renew outcome, got {other:?}")
            }
        }
    }

    /// Gives a lease back. Only its holder can: `lease.worker` and `lease.token` must be those of
    /// the unit's live (or expired, not yet ended) lease; anything else is refused and changes
    /// nothing. After a release the token never commits.
    pub fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        validate_key(&lease.unit)?;
        validate_worker(&lease.worker)?;
        match self.submit(Op::Release {
            lease: lease.clone(),
        })? {
            Done::Release(r) => Ok(r),
            other => unreachable!(
                "invariant: a release op is answered by a release outcome, got {other:?}"
            ),
        }
    }

    /// Makes everything acknowledged so far durable (useful with [`Durability::Relaxed`]).
    pub fn flush(&self) -> Result<()> {
        self.submit(Op::Flush).map(|_| ())
    }

    /// The newest seq (0 for an empty log).
    pub fn last_seq(&self) -> Result<u64> {
        Ok(self.snapshot()?.seq())
    }

    /// A copy of the engine's counters and histograms.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// `Some(cause)` once a failed write has put the store in its failed state.
    pub fn failure(&self) -> Option<String> {
        self.inner.failed.lock().clone()
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.inner.options.read_only {
            return Err(Error::ReadOnly {
                path: self.inner.dir.clone(),
                why: "it was opened read-only, explicitly or because its media cannot be written"
                    .into(),
            });
        }
        match self.failure() {
            Some(cause) => Err(Error::Failed { cause }),
            None => Ok(()),
        }
    }

    pub(crate) fn submit(&self, op: Op) -> Result<Done> {
        self.check_writable()?;
        op.check_record_size()?;
        let start = Instant::now();
        let inner = &self.inner;
        let r = inner.queue.submit(op, |ops| {
            let n = ops.len();
            match crate::error::contain(|| Ok(apply::apply_group(inner, ops))) {
                Ok(dones) => dones,
                // redb panicked on a damaged page. Whether the group's transaction reached the
                // disk is unknown if it panicked while committing: fail the store (writes are
                // refused until a reopen, which reads what is durable) and persist no index.
                Err(e) => {
                    let detail = e.to_string();
                    inner.index_suspect.store(true, Ordering::SeqCst);
                    inner.failed.lock().get_or_insert_with(|| detail.clone());
                    (0..n)
                        .map(|_| {
                            Err(Error::Corrupt {
                                path: inner.dir.join(DB_FILE),
                                detail: detail.clone(),
                            })
                        })
                        .collect()
                }
            }
        });
        if matches!(r, Err(Error::LeaderPanicked)) {
            inner.index_suspect.store(true, Ordering::SeqCst);
        }
        inner
            .metrics
            .commit_latency_us
            .record(start.elapsed().as_micros() as u64);
        r
    }

    /// How opening built the dedup index: from the persisted snapshot (and how much log it
    /// replayed) or from a full manifest scan, and why.
    #[doc(hidden)]
    pub fn open_report(&self) -> OpenReport {
        self.inner.open_report.clone()
    }

    /// The path of an object in this store.
    pub fn object_path(&self, id: &ObjectId) -> PathBuf {
        self.inner.stager.object_path(id)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.options.read_only {
            return;
        }
        if self.failed.lock().is_some() {
            // The durable state is unknown: neither sync nor persist an index that may not match.
            return;
        }
        // Relaxed mode: make the acknowledged tail durable on a clean close.
        if matches!(self.options.durability, Durability::Relaxed { .. }) {
            let synced = self.db.begin_write().is_ok_and(|mut txn| {
                txn.set_durability(redb::Durability::Immediate).is_ok() && txn.commit().is_ok()
            });
            if !synced {
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

impl Inner {
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

/// A random 64-bit identity (std's per-process random hash keys, plus time and pid).
fn new_store_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// Reads what must be in memory: the store id, and the dedup index, from the persisted snapshot
/// when it checks out (see `index_snap`), else from a full manifest scan.
fn load_state(db: &Db, dir: &Path, vfs: &dyn Vfs) -> Result<(u64, DedupIndex, OpenReport)> {
    let txn = db.begin_read().db("begin a read transaction")?;
    let store_id = meta_get(
        &txn.open_table(META).db("open the meta table")?,
        META_STORE_ID,
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
            };
            return Ok((store_id, l.index, report));
        }
        Err(why) => why,
    };
    let mut index = DedupIndex::with_capacity(n as usize);
    for row in manifest.iter().db("scan the manifest")? {
        let (k, v) = row.db("scan the manifest")?;
        let value = EntryValue::decode(k.value(), v.value())?;
        index.upsert(k.value(), true, &value);
    }
    let report = OpenReport {
        fallback: Some(fallback),
        ambiguous: index.ambiguous_len() as u64,
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
