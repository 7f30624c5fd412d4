//! Opening a store (SPEC R1): creating it, completing an interrupted creation, validating an
//! existing one before writing it, and opening read-only.
//!
//! The protocol, and why it holds:
//!
//! * **Decided under the lock.** A lockless look at the directory only refuses what can never be
//!   a store (other files, a newer format) — without writing anything, not even `LOCK`. Whether
//!   to create is decided only after `LOCK` is held, from what the directory then holds. Only
//!   a lock holder creates anything, so that decision cannot be overtaken: N threads or processes
//!   opening the same missing directory end with one store, created by the first one to get the
//!   lock; the others find it complete.
//! * **Never re-initialised.** The initial transaction (format, seq, tokens, horizon, store id)
//!   runs only when the database holds no metadata at all; an existing database is only ever
//!   completed (marker).
//! * **Crash-safe and idempotent creation.** Creation writes, in order: `LOCK`, the layout
//!   (`objects/00..ff`, `staging/`, each `create_dir_all`, then directory syncs), the database
//!   with its initial transaction, then the marker (`ONCELAKE.tmp`, fsync, rename, directory
//!   fsync). Nothing can commit data before the marker exists (open returns only after it is
//!   written), so a directory without a marker holding only those leftovers is an unfinished
//!   creation, and the next open completes it — each step again, idempotently; a database file
//!   redb cannot open there holds no data and is recreated. Anything else without a marker is
//!   refused untouched.
//! * **Validated before anything is written (I9).** An existing store is first opened over a
//!   shadow of its files (`shadow`: redb's repair and the write-ahead log's replay write to
//!   memory only), and everything the open reads — format, log, counters, the dedup index — is
//!   read there. Only a store that passes is opened for writing; a refused one is left exactly
//!   as it was found (only `LOCK`, which holds no data, may be created). A read-only open reads
//!   a store not closed cleanly the same way, so reading never writes a store either.
//! * **No upgrades.** No build before format 4 was ever released: a store of an older format
//!   can only come from a development build of this repository. It is refused, unchanged,
//!   by every open (see `docs/format.md`).
//!
//! Every file operation of creation goes through the [`Vfs`] seam except `LOCK` (it needs a file
//! descriptor to `flock`) and the database file (redb's own I/O, under the fault backend).

use super::shadow::ShadowFile;
use super::{new_store_id, FORMAT_VERSION, REDB_MAGIC};
use crate::core::{Db, Options};
use crate::error::{DbContext, Error, IoContext, Result};
use crate::fault::FaultyBackend;
use crate::layout::{DB_FILE, LOCK_FILE, MARKER_FILE};
use crate::schema::meta::{
    self, FORMAT as META_FORMAT, HISTORY_FROM as META_HISTORY_FROM, NEXT_SEQ as META_NEXT_SEQ,
    NEXT_TOKEN as META_NEXT_TOKEN, STORE_ID as META_STORE_ID, WAL_GROUP as META_WAL_GROUP,
};
use crate::schema::{CLAIMS, HISTORY, LOG, MANIFEST, META, META_V1};
use crate::vfs::Vfs;
use crate::wal::redo::{Wal, WAL_FILE};
use redb::ReadableDatabase;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

const MARKER_TMP: &str = "ONCELAKE.tmp";
/// The mode the files that are locked are created with (`LOCK`, `oncelake.redb`, `wal.redb`):
/// a `flock` or a byte-range lock needs only a descriptor open for reading, so a user who can
/// read them could lock the owner out (R20). The umask can only narrow it further.
const OWNER_ONLY: u32 = 0o600;

/// What a directory holds, as far as opening it is concerned.
#[derive(Debug)]
enum DirState {
    /// A store (its marker's format, not newer than this build's).
    Store(u32),
    /// Empty, or an unfinished creation: create (or complete) the store here.
    Creatable,
    /// Holds something else.
    Foreign,
}

/// What a read-write open hands back.
pub(super) struct Opened<T> {
    pub(super) db: Db,
    pub(super) lock: File,
    /// Whether this open created (or completed) the store.
    pub(super) created: bool,
    pub(super) wal: Wal,
    /// What `check` answered on the validated shadow: the store's state after recovery, since
    /// the recovery of the real files replays the same write-ahead groups onto the same database
    /// the shadow started from (deterministically, under the lock). `None` for a store this open
    /// created.
    pub(super) checked: Option<T>,
}

/// Opens (creating or completing if need be) the store for reading and writing.
///
/// An existing store is validated first, without writing it: opened over a shadow of its files
/// (`dry_open`), then handed to `check` (the store's own reads of its state); an error of either
/// refuses the store with every file as it was.
pub(super) fn open_read_write<T>(
    dir: &Path,
    options: &Options,
    check: impl FnOnce(&Db) -> Result<T>,
) -> Result<Opened<T>> {
    let vfs = options.vfs.as_ref();
    refuse_nesting(dir, vfs)?;
    ensure_dir(dir, vfs)?;
    // Lockless: refuse what can never be opened without writing anything, not even LOCK.
    match classify(dir, vfs)? {
        DirState::Foreign => return Err(not_a_store(dir)),
        DirState::Store(marker) if marker < FORMAT_VERSION => return Err(older(dir, marker)),
        _ => {}
    }
    let lock = acquire_lock(dir, options, false)?;
    match classify(dir, vfs)? {
        DirState::Foreign => Err(not_a_store(dir)),
        DirState::Store(marker) if marker < FORMAT_VERSION => Err(older(dir, marker)),
        DirState::Store(_) => {
            let path = dir.join(DB_FILE);
            check_magic(&path)?;
            let dry = dry_open(dir, options)?;
            let checked = check(&Db::Shadow(dry))?;
            let db = open_db(&path, options, false)?;
            let wal = open_wal(dir, options, false)?;
            Ok(Opened {
                db: Db::Write(db),
                lock,
                created: false,
                wal,
                checked: Some(checked),
            })
        }
        DirState::Creatable => {
            let (db, wal) = create(dir, options)?;
            Ok(Opened {
                db: Db::Write(db),
                lock,
                created: true,
                wal,
                checked: None,
            })
        }
    }
}

/// Opens an existing store of the current format without writing anything. A store not closed
/// cleanly (its database needs redb's repair, or its write-ahead log holds unapplied groups) is
/// read over a shadow of its files, recovered in memory.
pub(super) fn open_read_only(dir: &Path, options: &Options) -> Result<(Db, File)> {
    let vfs = options.vfs.as_ref();
    match classify(dir, vfs) {
        Ok(DirState::Store(marker)) if marker < FORMAT_VERSION => return Err(older(dir, marker)),
        Ok(DirState::Store(_)) => {}
        Ok(_) => return Err(not_a_store(dir)),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::io(
                format!("open {} read-only: there is no store there", dir.display()),
                source,
            ))
        }
        Err(e) => return Err(e),
    }
    let lock = acquire_lock(dir, options, true)?;
    let path = dir.join(DB_FILE);
    check_magic(&path)?;
    let mut b = redb::Builder::new();
    b.set_cache_size(options.cache_bytes);
    let db = match b.open_read_only(&path) {
        Ok(db) => db,
        Err(redb::DatabaseError::RepairAborted) => {
            return Ok((Db::Shadow(dry_open(dir, options)?), lock))
        }
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(locked(dir)),
        Err(e) => return Err(corrupt(&path, e.to_string())),
    };
    check_format(dir, &path, read_format(&db)?)?;
    if crate::wal::redo::has_unapplied(dir, &db)? {
        drop(db);
        return Ok((Db::Shadow(dry_open(dir, options)?), lock));
    }
    Ok((Db::Read(db), lock))
}

/// Opens the store's database and write-ahead log over shadows of their files and replays the
/// log's unapplied groups there: the store as a read-write open would find it after recovery,
/// with nothing written.
fn dry_open(dir: &Path, options: &Options) -> Result<redb::Database> {
    let path = dir.join(DB_FILE);
    let main = open_shadow(&path, options)?;
    check_format(dir, &path, read_format(&main)?)?;
    let wal_path = dir.join(WAL_FILE);
    if !wal_path.exists() {
        return Err(crate::wal::redo::damaged(
            &wal_path,
            "the file is missing, and with it any commit not yet checkpointed",
        ));
    }
    let wal_db = match open_shadow(&wal_path, options) {
        Err(Error::Corrupt { detail, .. }) => {
            return Err(crate::wal::redo::damaged(&wal_path, detail))
        }
        r => r?,
    };
    let wal = Wal::new(wal_db, wal_path, options.clock.now_ms())?;
    wal.recover(&main)?;
    Ok(main)
}

/// Opens the redb file at `path` over a [`ShadowFile`]: writable, but only in memory.
fn open_shadow(path: &Path, options: &Options) -> Result<redb::Database> {
    check_magic(path)?;
    let file = File::open(path).ctx(|| format!("open {}", path.display()))?;
    let shadow = ShadowFile::new(file).ctx(|| format!("stat {}", path.display()))?;
    let mut b = redb::Builder::new();
    b.set_cache_size(options.cache_bytes);
    match b.create_with_backend(shadow) {
        Ok(db) => Ok(db),
        Err(redb::DatabaseError::Storage(redb::StorageError::Io(e)))
            if e.kind() != std::io::ErrorKind::UnexpectedEof
                && e.kind() != std::io::ErrorKind::InvalidData =>
        {
            Err(Error::io(format!("read {}", path.display()), e))
        }
        Err(e) => Err(corrupt(path, e.to_string())),
    }
}

/// Refuses a database whose stamped format is not this build's.
fn check_format(dir: &Path, path: &Path, format: Option<u32>) -> Result<()> {
    match format {
        Some(FORMAT_VERSION) => Ok(()),
        Some(f) if f > FORMAT_VERSION => Err(newer(dir, f)),
        Some(f) => Err(older(dir, f)),
        None => Err(corrupt(path, "no format version is stamped".into())),
    }
}

fn not_a_store(dir: &Path) -> Error {
    Error::NotAStore {
        path: dir.to_path_buf(),
        marker: MARKER_FILE,
    }
}

fn locked(dir: &Path) -> Error {
    Error::Locked {
        path: dir.to_path_buf(),
    }
}

fn newer(dir: &Path, found: u32) -> Error {
    Error::NewerFormat {
        path: dir.to_path_buf(),
        found,
        supported: FORMAT_VERSION,
    }
}

fn older(dir: &Path, found: u32) -> Error {
    Error::OlderFormat {
        path: dir.to_path_buf(),
        found,
        supported: FORMAT_VERSION,
    }
}

fn corrupt(path: &Path, detail: String) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        detail,
    }
}

/// Refuses to create a store inside another store's directory tree, before anything is written
/// (not even the missing directories): the outer store's GC and verify would take the inner
/// store's files for strays. An existing store (its marker present) is opened wherever it is.
fn refuse_nesting(dir: &Path, vfs: &dyn Vfs) -> Result<()> {
    let has_marker = |d: &Path| {
        vfs.metadata(&d.join(MARKER_FILE))
            .is_ok_and(|m| m.is_file())
    };
    if has_marker(dir) {
        return Ok(());
    }
    let abs = std::path::absolute(dir).ctx(|| format!("resolve {}", dir.display()))?;
    match abs.ancestors().skip(1).find(|a| has_marker(a)) {
        Some(outer) => Err(Error::NestedStore {
            path: dir.to_path_buf(),
            outer: outer.to_path_buf(),
        }),
        None => Ok(()),
    }
}

/// Creates a missing store directory; refuses a path that is not a directory.
fn ensure_dir(dir: &Path, vfs: &dyn Vfs) -> Result<()> {
    match vfs.metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(not_a_store(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_durably(dir, vfs),
        Err(e) => Err(Error::io(format!("stat {}", dir.display()), e)),
    }
}

/// Creates `dir` and its missing ancestors, then syncs the parent of each one it created: a
/// directory entry is durable only once its parent is synced, and a power cut must not take
/// the whole store (database included) away after commits were acknowledged in it.
fn create_durably(dir: &Path, vfs: &dyn Vfs) -> Result<()> {
    let mut missing = Vec::new();
    let mut p = dir;
    while matches!(vfs.metadata(p), Err(ref e) if e.kind() == std::io::ErrorKind::NotFound) {
        missing.push(p);
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => break,
        }
    }
    vfs.create_dir_all(dir)
        .ctx(|| format!("create {}", dir.display()))?;
    for created in missing.iter().rev() {
        let parent = match created.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        vfs.sync_dir(parent)
            .ctx(|| format!("fsync {}", parent.display()))?;
    }
    Ok(())
}

/// Looks at `dir`: a store (marker), something creation may have left (or nothing), or
/// something else. Refuses a marker of a newer format or one that does not parse.
fn classify(dir: &Path, vfs: &dyn Vfs) -> Result<DirState> {
    let marker = dir.join(MARKER_FILE);
    match vfs.read(&marker) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let found = parse_marker(&text)
                .ok_or_else(|| corrupt(&marker, "the store marker is unreadable".into()))?;
            if found > FORMAT_VERSION {
                return Err(newer(dir, found));
            }
            Ok(DirState::Store(found))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let entries = std::fs::read_dir(dir).ctx(|| format!("list {}", dir.display()))?;
            for entry in entries {
                let entry = entry.ctx(|| format!("list {}", dir.display()))?;
                let name = entry.file_name();
                if name == MARKER_FILE {
                    // Another opener (holding the lock) just finished creating it.
                    return classify(dir, vfs);
                }
                if !is_creation_leftover(&entry)? {
                    return Ok(DirState::Foreign);
                }
            }
            Ok(DirState::Creatable)
        }
        Err(e) => Err(Error::io(format!("read {}", marker.display()), e)),
    }
}

/// Whether `entry` is something creation writes before the marker: `LOCK`, the database file, a
/// lake node's binding,
/// the marker's temp file, an empty `staging/`, or `objects/` holding only empty `00`..`ff`.
fn is_creation_leftover(entry: &std::fs::DirEntry) -> Result<bool> {
    let path = entry.path();
    let kind = entry
        .file_type()
        .ctx(|| format!("stat {}", path.display()))?;
    let name = entry.file_name();
    let Some(name) = name.to_str() else {
        return Ok(false);
    };
    let empty_dir = |p: &Path| -> Result<bool> {
        Ok(std::fs::read_dir(p)
            .ctx(|| format!("list {}", p.display()))?
            .next()
            .is_none())
    };
    Ok(match name {
        LOCK_FILE | DB_FILE | MARKER_TMP | crate::wal::redo::WAL_FILE => kind.is_file(),
        // A new lake node's binding, written before the lake's checkpoint is installed as its
        // database (`lake::seed`); the name `lake::node` gives it.
        "LAKE" => kind.is_file(),
        "staging" => kind.is_dir() && empty_dir(&path)?,
        "objects" if kind.is_dir() => {
            for sub in std::fs::read_dir(&path).ctx(|| format!("list {}", path.display()))? {
                let sub = sub.ctx(|| format!("list {}", path.display()))?;
                let hex = sub.file_name().to_str().is_some_and(|n| {
                    n.len() == 2 && n.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                });
                let is_dir = sub.file_type().is_ok_and(|t| t.is_dir());
                if !hex || !is_dir || !empty_dir(&sub.path())? {
                    return Ok(false);
                }
            }
            true
        }
        _ => false,
    })
}

pub(super) fn marker_text(format: u32) -> String {
    format!("oncelake store\nformat {format}\n")
}

fn parse_marker(text: &str) -> Option<u32> {
    let mut lines = text.lines();
    if lines.next()? != "oncelake store" {
        return None;
    }
    lines.next()?.strip_prefix("format ")?.trim().parse().ok()
}

/// Takes the store's process lock (shared for a read-only open), waiting up to `lock_wait` for
/// another holder to let go (or until `lock_wait_stop` says to stop).
fn acquire_lock(dir: &Path, options: &Options, shared: bool) -> Result<File> {
    let wait = options.lock_wait;
    let path = dir.join(LOCK_FILE);
    let mut how = OpenOptions::new();
    if shared {
        how.read(true);
    } else {
        how.read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(OWNER_ONLY);
    }
    let file = how
        .open(&path)
        .ctx(|| format!("open lock file {}", path.display()))?;
    // Wakes when the holder lets go (see `lock_wait`), not on a polling timer.
    let stop = options
        .lock_wait_stop
        .as_ref()
        .map(|s| &*s.0 as &dyn Fn() -> bool);
    match super::lock_wait::acquire(&file, &path, Instant::now() + wait, shared, &|| {}, stop) {
        Ok(Some(_)) => Ok(file),
        Ok(None) => Err(locked(dir)),
        Err(e) => Err(Error::io(format!("lock {}", path.display()), e)),
    }
}

/// Creates the store in a directory found empty or unfinished under the lock, or completes it.
fn create(dir: &Path, options: &Options) -> Result<(redb::Database, Wal)> {
    let vfs = options.vfs.as_ref();
    init_layout(dir, vfs)?;
    let path = dir.join(DB_FILE);
    let db = match open_db(&path, options, true) {
        Ok(db) => db,
        // A creation cut while redb wrote its first pages: without a marker nothing was ever
        // committed to it, so it is recreated.
        Err(Error::Locked { .. }) => return Err(locked(dir)),
        Err(_) if path.exists() => {
            vfs.remove(&path)
                .ctx(|| format!("remove the unfinished {}", path.display()))?;
            open_db(&path, options, true)?
        }
        Err(e) => return Err(e),
    };
    if read_format(&db)?.is_none() {
        initialise(&db)?;
    }
    finish(db, dir, options)
}

/// Completes a creation: checks the database's format, creates the write-ahead log (anew: no
/// group was ever appended before the marker exists, since commits begin only after an open
/// returned and every open that returns has written it), then writes the marker.
fn finish(db: redb::Database, dir: &Path, options: &Options) -> Result<(redb::Database, Wal)> {
    let vfs = options.vfs.as_ref();
    check_format(dir, &dir.join(DB_FILE), read_format(&db)?)?;
    let wal = open_wal(dir, options, true)?;
    write_marker(dir, vfs)?;
    Ok((db, wal))
}

fn init_layout(dir: &Path, vfs: &dyn Vfs) -> Result<()> {
    let objects = dir.join("objects");
    for i in 0..=255u8 {
        let d = objects.join(format!("{i:02x}"));
        vfs.create_dir_all(&d)
            .ctx(|| format!("create {}", d.display()))?;
    }
    let staging = dir.join("staging");
    vfs.create_dir_all(&staging)
        .ctx(|| format!("create {}", staging.display()))?;
    vfs.sync_dir(&objects)
        .ctx(|| format!("fsync {}", objects.display()))?;
    vfs.sync_dir(dir).ctx(|| format!("fsync {}", dir.display()))
}

/// Opens the write-ahead log `dir/wal.redb` through the store's fault plan; with `fresh`, first
/// removes whatever is there and creates it empty (see [`finish`] for when that is safe).
/// Without it, a missing or unreadable log is damage: it may hold acknowledged groups.
fn open_wal(dir: &Path, options: &Options, fresh: bool) -> Result<Wal> {
    let path = dir.join(WAL_FILE);
    let vfs = options.vfs.as_ref();
    if fresh {
        match vfs.remove(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(format!("remove {}", path.display()), e))
            }
            _ => {}
        }
    } else if !path.exists() {
        return Err(crate::wal::redo::damaged(
            &path,
            "the file is missing, and with it any commit not yet checkpointed",
        ));
    }
    let db = match open_db(&path, options, fresh) {
        Err(Error::Corrupt { detail, .. }) => return Err(crate::wal::redo::damaged(&path, detail)),
        // redb reports a file that is not a database (bad magic number) as invalid data.
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::InvalidData => {
            return Err(crate::wal::redo::damaged(&path, source.to_string()))
        }
        r => r?,
    };
    let wal = Wal::new(db, path, options.clock.now_ms())?;
    if fresh {
        vfs.sync_dir(dir)
            .ctx(|| format!("fsync {}", dir.display()))?;
    }
    Ok(wal)
}

/// Writes the marker atomically: temp file, fsync, rename over, directory fsync.
fn write_marker(dir: &Path, vfs: &dyn Vfs) -> Result<()> {
    let tmp = dir.join(MARKER_TMP);
    let marker = dir.join(MARKER_FILE);
    match vfs.remove(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io(format!("remove {}", tmp.display()), e))
        }
        _ => {}
    }
    let mut f = vfs
        .create_new(&tmp)
        .ctx(|| format!("create {}", tmp.display()))?;
    f.write_all(marker_text(FORMAT_VERSION).as_bytes())
        .ctx(|| format!("write {}", tmp.display()))?;
    f.sync().ctx(|| format!("fsync {}", tmp.display()))?;
    drop(f);
    vfs.rename(&tmp, &marker)
        .ctx(|| format!("rename to {}", marker.display()))?;
    vfs.sync_dir(dir).ctx(|| format!("fsync {}", dir.display()))
}

fn check_magic(path: &Path) -> Result<()> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt(path, "the database file is missing".into()))
        }
        Err(e) => return Err(Error::io(format!("open {}", path.display()), e)),
    };
    let mut magic = [0u8; 9];
    if f.read_exact(&mut magic).is_err() || magic != REDB_MAGIC {
        return Err(corrupt(
            path,
            "it is not a redb database (bad magic number)".into(),
        ));
    }
    Ok(())
}

/// The database's format: from the sealed meta table (format 2 on), from format 1's plain one,
/// or `None` when it holds no metadata at all (a creation cut before its first transaction).
pub(super) fn read_format(db: &dyn ReadableDatabase) -> Result<Option<u32>> {
    let txn = db.begin_read().db("begin a read transaction")?;
    let format = match txn.open_table(META) {
        Ok(meta) => meta::get(&meta, META_FORMAT)?,
        Err(redb::TableError::TableDoesNotExist(_)) => match txn.open_table(META_V1) {
            Ok(meta) => meta
                .get(META_FORMAT)
                .db("read the format version")?
                .map(|g| g.value())
                .ok_or_else(|| Error::corrupt_record("meta", META_FORMAT, "it is missing"))?,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(Error::db("open the meta table", e)),
        },
        Err(e) => return Err(Error::db("open the meta table", e)),
    };
    u32::try_from(format)
        .map(Some)
        .map_err(|_| Error::corrupt_record("meta", META_FORMAT, format!("format {format}")))
}

fn open_db(path: &Path, options: &Options, create: bool) -> Result<redb::Database> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(OWNER_ONLY)
        .open(path)
        .ctx(|| format!("open {}", path.display()))?;
    let mut b = redb::Builder::new();
    b.set_cache_size(options.cache_bytes);
    let backend =
        redb::backends::FileBackend::new(file).map_err(|e| corrupt(path, e.to_string()))?;
    let opened = match &options.faults {
        Some(plan) => b.create_with_backend(FaultyBackend::new(backend, plan.clone(), path)),
        None => b.create_with_backend(backend),
    };
    match opened {
        Ok(db) => Ok(db),
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => Err(locked(path.parent().unwrap_or(path))),
        Err(redb::DatabaseError::Storage(redb::StorageError::Io(e))) => {
            Err(Error::io(format!("open {}", path.display()), e))
        }
        Err(e) => Err(corrupt(path, e.to_string())),
    }
}

/// The initial transaction: stamps the format and the counters, creates the tables.
fn initialise(db: &redb::Database) -> Result<()> {
    let txn = db.begin_write().db("begin the initial transaction")?;
    {
        let mut meta = txn.open_table(META).db("create the meta table")?;
        meta::put(&mut meta, META_FORMAT, FORMAT_VERSION as u64)?;
        meta::put(&mut meta, META_NEXT_SEQ, 1)?;
        meta::put(&mut meta, META_NEXT_TOKEN, 1)?;
        meta::put(&mut meta, META_HISTORY_FROM, 0)?;
        meta::put(&mut meta, META_STORE_ID, new_store_id())?;
        meta::put(&mut meta, META_WAL_GROUP, 0)?;
        txn.open_table(MANIFEST).db("create the manifest")?;
        txn.open_table(HISTORY).db("create the history")?;
        txn.open_table(LOG).db("create the log")?;
        txn.open_table(CLAIMS).db("create the claims")?;
    }
    txn.commit().db("create the store")
}
