//! The store: one directory holding the redb file (manifest, commit log, claims), `objects/`
//! and `staging/` (SPEC R1). Opening validates before it touches anything; writes go through the
//! group-commit queue; reads go through snapshots. Opening is in `open`.

mod each;
mod holder;
mod inflight;
mod lake;
mod lock_wait;
mod open;
mod shadow;
mod submit;

use crate::claim::{validate_worker, ClaimOutcome, Lease, ReleaseOutcome, RenewOutcome};
use crate::commit::apply::{self, Done, Op};
use crate::commit::queue::WriteQueue;
use crate::commit::{Batch, CommitReport, UnitOutcome};
use crate::core::{Core, ReaderPins, StoreLock};
use crate::error::{Error, IoContext, Result};
use crate::key::{validate_key, validate_user_key};
use crate::metrics::MetricsSnapshot;
use crate::object::ObjectId;
use crate::schema::manifest::Entry;
use crate::snapshot::Snapshot;
use crate::stage::{Staged, Stager};
pub use holder::{lock_holder, LockHolder};
use open::{open_read_only, open_read_write};
use parking_lot::{Mutex, RwLock};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

pub use crate::core::{Committed, Durability, LockWaitStop, Options};
pub use crate::layout::{DB_FILE, MARKER_FILE};
pub use each::{Write, Written};
pub use inflight::CommitHandle;

/// The newest store format this build reads and writes. Format 2 seals every redb value with a
/// checksum over its table, key and value (`schema::codec::seal`); format 3 adds the write-ahead
/// log (`wal.redb`, `wal::redo`) and the database's applied-group counter; format 4 keeps only
/// the entries a newer one replaced in the history, the current entry in the manifest alone.
/// No older format was ever released: a store of one (from a development build) is refused by
/// every open with [`Error::OlderFormat`], unchanged; none is upgraded.
pub const FORMAT_VERSION: u32 = 4;
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// What a store handle shares: the write queue in front of the core.
struct Inner {
    queue: WriteQueue<submit::Request, submit::Answer>,
    core: Arc<Core>,
    /// The thread that applies the backlog (`Options::background_apply`, durable read-write
    /// opens only). It holds a reference to the core; the last store handle stops and joins it
    /// before the core is dropped, so a store is closed when its last handle is.
    applier: Option<std::thread::JoinHandle<()>>,
    /// [`Store::submit`]'s queue and threads (started at the first submission).
    submissions: inflight::Submissions,
    /// The lake checkpoint the open started this node from.
    seeded_from: Option<u64>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.core.owner.is_current() {
            // A forked child's copy (`owner`): its applier thread does not exist here, and the
            // core's close would write the parent's files. One reference leaked keeps the core
            // from ever being dropped in this process.
            std::mem::forget(self.applier.take());
            std::mem::forget(Arc::clone(&self.core));
            self.submissions.forget();
            return;
        }
        self.submissions.stop();
        if let Some(thread) = self.applier.take() {
            self.core.backlog.stop();
            // A panic in the thread was already turned into the failed state (`apply_backlog`).
            let _ = thread.join();
        }
    }
}

/// An open store. Cheap to clone; share it between threads.
///
/// # Its methods, by job
///
/// | job | methods |
/// |---|---|
/// | open and identify | [`Store::open`], [`Store::open_with`], [`Store::open_read_only`], [`Store::created`], [`Store::path`], [`Store::store_id`], [`Store::open_report`] |
/// | stage an object | [`Store::stage_bytes`], [`Store::stage_reader`], [`Store::stage_file`] |
/// | commit | [`Store::commit`] (a [`Batch`]), [`Store::submit`] (many in flight from one thread), [`Store::put`] and [`Store::correct`] (one unit), [`Store::write_each`] / [`Store::write_each_then`] (many independent writes) |
/// | ask what is done | [`Store::lookup`], [`Store::lookup_many`], [`Store::is_done`], [`Store::last_seq`] |
/// | do work exactly once | [`Store::run_once`], [`Store::run_once_many`], [`Store::run_optimistic`], [`Store::run_optimistic_many`], [`Store::begin_run`]; pipelines: [`crate::pipeline`] |
/// | claims and fencing | [`Store::claim`], [`Store::claim_many`], [`Store::renew`], [`Store::release`] |
/// | read | [`Store::get`], [`Store::snapshot`], [`Store::snapshot_at`] (time travel), [`Store::changes_since`] (the change feed), [`Store::object_path`] |
/// | maintain | [`Store::gc`], [`Store::verify`], [`Store::verify_with_progress`], [`Store::check_invariants`], [`Store::flush`], [`Store::wait_applied`]; reconcile a listing: [`crate::reconcile`] |
/// | publish tables | [`Store::create_table`], [`Store::tables`], [`Store::table`], [`Store::table_dir`], `Store::publish_table` / `publish_tables` (feature `tables`) |
/// | a shared lake node | [`Store::sync`], [`Store::checkpoint`], [`Store::lake_url`], [`Store::lake_seeded_from`], [`Store::lake_sweep_plan`], [`Store::lake_sweep_delete`] |
/// | health | [`Store::metrics`], [`Store::failure`], [`Store::backlog`], [`Store::has_applier_thread`] |
///
/// The same operations, for a store in this process or one a server holds, are the
/// [`crate::UnitStore`] trait.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.core.dir)
            .finish_non_exhaustive()
    }
}

/// What an open reads of the store's own state.
struct Loaded {
    store_id: u64,
    index: crate::index::DedupIndex,
    open_report: crate::index_snap::OpenReport,
    persisted: Vec<(String, u64)>,
    leader: crate::wal::overlay::LeaderState,
}

impl Loaded {
    /// The store's own state from `db`; for a read-write open of an existing store it is first
    /// read over the validated shadow (`open`), before anything is written.
    fn read(db: &crate::core::Db, dir: &Path, options: &Options) -> Result<Loaded> {
        let (store_id, index, open_report) =
            crate::error::contain(|| crate::core::load_state(db, dir, options.vfs.as_ref()))?;
        let persisted = crate::error::contain(|| crate::schema::meta::stored_counters(&**db))?;
        // A read-only open never leads a group: it starts empty.
        let leader = if options.read_only {
            crate::wal::overlay::LeaderState::default()
        } else {
            crate::error::contain(|| crate::wal::overlay::LeaderState::load(&**db))?
        };
        Ok(Loaded {
            store_id,
            index,
            open_report,
            persisted,
            leader,
        })
    }
}

/// Starts the thread that applies the backlog, for a durable read-write open whose options ask
/// for it (`Options::background_apply`); otherwise committers apply it themselves.
fn start_applier(core: &Arc<Core>) -> Result<Option<std::thread::JoinHandle<()>>> {
    if !(core.options.background_apply
        && core.wal.is_some()
        && core.options.durability == crate::core::Durability::Durable)
    {
        return Ok(None);
    }
    let c = core.clone();
    std::thread::Builder::new()
        .name("oncelake-apply".into())
        .spawn(move || c.run_applier())
        .map(Some)
        .map_err(|e| Error::io("start the store's applier thread", e))
}

/// Refuses backlog limits that could never hold a group, before anything is opened.
fn check_backlog_limits(o: &Options) -> Result<()> {
    if o.apply_batch_bytes == 0 || o.backlog_bytes < o.apply_batch_bytes {
        return Err(Error::InvalidRequest(format!(
            "Options: apply_batch_bytes ({}) must be above 0 and at most backlog_bytes ({}); \
             leave both at their defaults unless you measured otherwise",
            o.apply_batch_bytes, o.backlog_bytes
        )));
    }
    Ok(())
}

impl Store {
    /// Opens the store in `dir`, creating it if the directory is missing or empty.
    ///
    /// Refuses, without changing anything, a directory that is not a store, a store of a newer
    /// or an older format, a damaged store (everything the open reads is read, over a shadow of
    /// its files, before anything is written: SPEC I9), and a store another process has open.
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
        check_backlog_limits(&options)?;
        // A new lake node starts from the lake's newest checkpoint, if it has one.
        let seeded_from = lake::seed(&dir, &options)?;
        let (db, lock, created, wal, loaded) = if options.read_only {
            let (db, lock) = crate::error::contain(|| open_read_only(&dir, &options))?;
            let loaded = Loaded::read(&db, &dir, &options)?;
            (db, lock, false, None, loaded)
        } else {
            let read_state = |db: &crate::core::Db| Loaded::read(db, &dir, &options);
            let o = crate::error::contain(|| open_read_write(&dir, &options, read_state))?;
            // Recovery: the groups the write-ahead log holds beyond the database go in before
            // anything reads the database (the state below included).
            if let crate::core::Db::Write(main) = &o.db {
                crate::error::contain(|| o.wal.recover(main))?;
            }
            let loaded = match o.checked {
                Some(loaded) => loaded,
                None => Loaded::read(&o.db, &dir, &options)?,
            };
            (o.db, o.lock, o.created, Some(o.wal), loaded)
        };
        let Loaded {
            store_id,
            index,
            open_report,
            persisted,
            leader,
        } = loaded;
        let lake_url = lake::binding(&dir, &options, &leader)?;
        #[cfg(feature = "lake")]
        let lake = lake::connect(lake_url, store_id, &leader, &options)?;
        #[cfg(not(feature = "lake"))]
        let _ = lake_url;
        let backlog = crate::wal::backlog::Backlog::with_start(
            leader.group,
            options.backlog_bytes,
            options.apply_batch_bytes,
            options.apply_min_bytes,
        );
        let owner = crate::owner::Owner::this_process();
        let lock = StoreLock { file: lock, owner };
        if !options.read_only {
            // For a process that waits for the lock: who holds it (see `holder`).
            holder::record(&lock.file);
        }
        let now = options.clock.now_ms();
        let stager = Stager::new(&dir, options.vfs.clone());
        let queue = WriteQueue::new(options.max_group_units);
        let core = Core {
            stager,
            readers: Arc::new(ReaderPins::new(leader.next_seq.saturating_sub(1))),
            index: RwLock::new(index),
            failed: Mutex::new(None),
            metrics: crate::metrics::Metrics::from_persisted(&persisted),
            last_durable_ms: AtomicU64::new(now),
            wal,
            backlog,
            leader: Mutex::new(leader),
            #[cfg(feature = "lake")]
            lake,
            applier: &apply::GroupWriter,
            options,
            db: std::mem::ManuallyDrop::new(db),
            dir,
            store_id,
            created,
            open_report,
            index_suspect: AtomicBool::new(false),
            owner,
            _lock: lock,
        };
        let core = Arc::new(core);
        let applier = start_applier(&core)?;
        let store = Store {
            inner: Arc::new(Inner {
                queue,
                core,
                applier,
                submissions: inflight::Submissions::default(),
                seeded_from,
            }),
        };
        lake::catch_up(&store.inner.core)?;
        Ok(store)
    }

    /// Brings a lake node up to date with its lake (SPEC R23): applies every group other nodes
    /// committed since this node last looked, so that what is read next includes every commit
    /// acknowledged anywhere before the call (read-after-write across nodes). Every commit syncs
    /// first by itself. On a local store it does nothing.
    pub fn sync(&self) -> Result<()> {
        lake::catch_up(&self.inner.core)
    }

    /// Writes a checkpoint of a lake node's replica into the lake (SPEC R23), after syncing:
    /// a new node then starts from it and the segments after it instead of replaying the whole
    /// log. If the lake holds one at that segment already, this node's replica is compared with
    /// it instead, and a difference is [`Error::Corrupt`] naming what diverged (the store is
    /// then failed). Lake nodes also write one by themselves every
    /// [`Options::lake_checkpoint_every`] segments. Refused on a local store.
    pub fn checkpoint(&self) -> Result<crate::commit::CheckpointReport> {
        lake::checkpoint(&self.inner.core)
    }

    /// The lake checkpoint this handle's open started the node from (a new node directory
    /// opened on a lake that had one); `None` otherwise.
    pub fn lake_seeded_from(&self) -> Option<u64> {
        self.inner.seeded_from
    }

    /// On a lake node, fetches object `meta` (as the commit of `seq` references it) from the
    /// lake into `objects/` if this node lacks it (a node started from a checkpoint fetches
    /// objects when first read).
    pub(crate) fn fetch_from_lake(&self, meta: &crate::object::ObjectMeta, seq: u64) -> Result<()> {
        #[cfg(feature = "lake")]
        if let Some(lake) = &self.inner.core.lake {
            if !self.object_path(&meta.id).exists() {
                lake.fetch(meta, seq, &self.inner.core.stager)?;
            }
        }
        let _ = (meta, seq);
        Ok(())
    }

    /// The URL of the lake this store is a node of, if it is one.
    pub fn lake_url(&self) -> Option<String> {
        #[cfg(feature = "lake")]
        return self.inner.core.lake.as_ref().map(|l| l.url.clone());
        #[cfg(not(feature = "lake"))]
        None
    }

    /// The core below the store: what the higher layers (GC, verify, pipelines, reconcile, runs)
    /// read through its internal API.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }

    /// Waits, at most `within`, until the store at `dir` is closed in this process, and says
    /// whether it is: its lock is free, or another process holds it.
    ///
    /// Dropping a handle closes the store only when it is the last one, and the last may be held
    /// by one of the store's own threads: a [`Store::submit_then`] thread answering a write whose
    /// caller let go. The store then closes on that thread (the tail applied, the index snapshot
    /// written, the lock let go), which nobody joins. A process about to exit calls this after
    /// dropping its handles so that it does not end in the middle of that close (the store
    /// would still be consistent, but the next open would replay the log).
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// # let tmp = tempfile::tempdir().unwrap();
    /// let dir = tmp.path().join("lake");
    /// let store = oncelake::Store::open(&dir)?;
    /// drop(store);
    /// assert!(oncelake::Store::wait_closed(&dir, std::time::Duration::from_secs(5)));
    /// # Ok(()) }
    /// ```
    pub fn wait_closed(dir: impl AsRef<Path>, within: Duration) -> bool {
        let dir = dir.as_ref();
        let deadline = std::time::Instant::now() + within;
        lock_wait::closed(dir, &dir.join(crate::layout::LOCK_FILE), deadline)
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
        self.inner.core.created
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.inner.core.dir
    }

    /// The store's random 64-bit identity, made when it was created (a copy of the directory
    /// carries the same one). `oncelake serve` proves it to its clients (SPEC R20).
    pub fn store_id(&self) -> u64 {
        self.inner.core.store_id
    }

    /// Stages `bytes` as an object (hash, CRC32, fsync, atomic publish).
    pub fn stage_bytes(&self, bytes: &[u8]) -> Result<Staged> {
        self.stage_reader(bytes)
    }

    /// Stages an object from a reader, streaming: memory use does not grow with its size.
    pub fn stage_reader(&self, reader: impl Read) -> Result<Staged> {
        self.check_writable()?;
        // A panic of the engine's while staging fails the store (SPEC I10); one of the caller's
        // reader only unwinds to the caller.
        let callers_panic = std::cell::Cell::new(false);
        let mut reader = CallersReader {
            inner: reader,
            panicked: &callers_panic,
        };
        let core = &self.inner.core;
        let _fence = core.fail_on_unwind_unless("staging an object panicked", &callers_panic);
        let staged = core.stager.stage_reader(&mut reader)?;
        crate::metrics::add(&self.inner.core.metrics.c.objects_staged, 1);
        crate::metrics::add(&self.inner.core.metrics.c.bytes_staged, staged.meta().size);
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
        self.check_batch(&batch)?;
        match self.submit_op(Op::Commit(batch))? {
            Done::Commit(r) => Ok(r),
            other => {
                unreachable!("invariant: a commit op is answered by a commit report, got {other:?}")
            }
        }
    }

    /// What [`Store::commit`] checks before a batch reaches the queue.
    pub(crate) fn check_batch(&self, batch: &Batch) -> Result<()> {
        batch.validate()?;
        for item in &batch.items {
            self.inner
                .core
                .stager
                .check_handle(&item.unit, &item.staged)?;
        }
        Ok(())
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
        validate_user_key(unit)?;
        let staged = self.stage_bytes(bytes)?;
        let mut r = self.commit(Batch::new().put(unit, source_version, &staged))?;
        Ok(r.units.remove(0))
    }

    /// Stages `bytes` and commits them as a deliberate correction of `unit` at `source_version`
    /// (revision + 1; the old entry stays in the history).
    pub fn correct(&self, unit: &str, source_version: u64, bytes: &[u8]) -> Result<UnitOutcome> {
        validate_user_key(unit)?;
        let staged = self.stage_bytes(bytes)?;
        let mut r = self.commit(Batch::new().correct(unit, source_version, &staged))?;
        Ok(r.units.remove(0))
    }

    /// The dedup fast path: the unit's current version, object and seq, from memory.
    pub fn lookup(&self, unit: &str) -> Result<Option<Committed>> {
        self.inner.core.probe(unit)
    }

    /// Whether `unit` is committed at `source_version` or newer.
    pub fn is_done(&self, unit: &str, source_version: u64) -> Result<bool> {
        Ok(self
            .lookup(unit)?
            .is_some_and(|c| c.source_version >= source_version))
    }

    /// A consistent read-only view as of the newest commit.
    pub fn snapshot(&self) -> Result<Snapshot> {
        Snapshot::new(&self.inner.core, None)
    }

    /// A consistent read-only view as of an older `seq`, within the kept history.
    pub fn snapshot_at(&self, seq: u64) -> Result<Snapshot> {
        Snapshot::new(&self.inner.core, Some(seq))
    }

    /// The unit's current entry.
    pub fn get(&self, unit: &str) -> Result<Option<Entry>> {
        self.snapshot()?.get(unit)
    }

    /// Claims `unit` for `worker` to produce `source_version`, for `ttl` (coordinator mode).
    ///
    /// Internal units (`.pipeline/...`) are refused: a lease on one would block the pipeline
    /// engine's own cells, which it claims through [`crate::pipeline`].
    pub fn claim(
        &self,
        unit: &str,
        source_version: u64,
        worker: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome> {
        validate_user_key(unit)?;
        self.submit_claim(claim_op(
            unit.to_string(),
            source_version,
            worker.to_string(),
            ttl,
        )?)
    }

    /// Submits a claim made by [`claim_op`], of any key, internal units included (the pipeline
    /// engine claims its cells so).
    pub(crate) fn submit_claim(&self, claim: Op) -> Result<ClaimOutcome> {
        match self.submit_op(claim)? {
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
            validate_user_key(unit)?;
        }
        if units.is_empty() {
            return Ok(Vec::new());
        }
        match self.submit_op(Op::ClaimMany {
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
        match self.submit_op(Op::Renew {
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
        match self.submit_op(release_op(lease.clone())?)? {
            Done::Release(r) => Ok(r),
            other => unreachable!(
                "invariant: a release op is answered by a release outcome, got {other:?}"
            ),
        }
    }

    /// Makes everything acknowledged so far durable (useful with [`Durability::Relaxed`]).
    pub fn flush(&self) -> Result<()> {
        self.submit_op(Op::Flush).map(|_| ())
    }

    /// The newest seq (0 for an empty log).
    pub fn last_seq(&self) -> Result<u64> {
        Ok(self.snapshot()?.seq())
    }

    /// A copy of the engine's counters and histograms.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.core.metrics.snapshot()
    }

    /// `Some(cause)` once a failed write has put the store in its failed state.
    pub fn failure(&self) -> Option<String> {
        self.inner.core.failed.lock().clone()
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        self.inner.core.owner.check(&self.inner.core.dir)?;
        if self.inner.core.options.read_only {
            return Err(Error::ReadOnly {
                path: self.inner.core.dir.clone(),
                why: "it was opened read-only, explicitly or because its media cannot be written"
                    .into(),
            });
        }
        match self.failure() {
            Some(cause) => Err(Error::Failed { cause }),
            None => Ok(()),
        }
    }

    /// The durable groups not yet applied to the B-trees (benchmarks report it).
    #[doc(hidden)]
    pub fn backlog(&self) -> crate::wal::backlog::BacklogSize {
        self.inner.core.backlog.size()
    }

    /// How many records the write-ahead log holds (0 without one): tests see what a group
    /// appended and what a checkpoint trimmed.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn wal_records(&self) -> Result<u64> {
        match &self.inner.core.wal {
            Some(wal) => wal.records(),
            None => Ok(0),
        }
    }

    /// Whether a thread of the store's own applies its backlog (`Options::background_apply` on a
    /// durable read-write open), rather than the writers after their commits.
    #[doc(hidden)]
    pub fn has_applier_thread(&self) -> bool {
        self.inner.applier.is_some()
    }

    /// Waits until every acknowledged group is applied to the B-trees (benchmarks time it).
    #[doc(hidden)]
    pub fn wait_applied(&self) -> Result<()> {
        self.inner.core.drain()
    }

    /// How opening built the dedup index: from the persisted snapshot (and how much log it
    /// replayed) or from a full manifest scan, and why.
    #[doc(hidden)]
    pub fn open_report(&self) -> crate::index_snap::OpenReport {
        self.inner.core.open_report.clone()
    }

    /// The path of an object in this store.
    pub fn object_path(&self, id: &ObjectId) -> PathBuf {
        self.inner.core.stager.object_path(id)
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

/// A claim of any key (internal ones included), checked: the operation of [`Store::claim_any`]
/// and of a claim in [`Store::write_each`].
pub(crate) fn claim_op(
    unit: String,
    source_version: u64,
    worker: String,
    ttl: Duration,
) -> Result<Op> {
    validate_key(&unit)?;
    validate_worker(&worker)?;
    Ok(Op::Claim {
        unit,
        source_version,
        worker,
        ttl_ms: ttl.as_millis() as u64,
    })
}

/// A release, checked: the operation of [`Store::release`] and of a release in
/// [`Store::write_each`].
pub(crate) fn release_op(lease: Lease) -> Result<Op> {
    validate_key(&lease.unit)?;
    validate_worker(&lease.worker)?;
    Ok(Op::Release { lease })
}

/// The caller's reader while it is staged: marks a panic of its own before letting it unwind,
/// so that the engine tells it from one of its own (see [`Core::fail_on_unwind_unless`]).
struct CallersReader<'a, R> {
    inner: R,
    panicked: &'a std::cell::Cell<bool>,
}

impl<R: Read> Read for CallersReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let inner = &mut self.inner;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.read(buf))) {
            Ok(r) => r,
            Err(payload) => {
                self.panicked.set(true);
                std::panic::resume_unwind(payload)
            }
        }
    }
}
