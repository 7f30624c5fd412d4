//! Fault injection: a plan that fails or "crashes" the N-th file operation, shared by a [`Vfs`]
//! wrapper (object, staging and index-snapshot files) and a redb [`StorageBackend`] wrapper (the
//! database file), so that one operation counter covers every write, sync, link, rename and remove
//! the engine makes.
//!
//! * `fail_at(n)`: operation n returns an I/O error; later operations work again (a transient
//!   error, like EIO on one fsync).
//! * `crash_at(n)`: operation n and every later one fails without touching the disk, as if the
//!   power had been cut just before it; [`FaultPlan::crash_now`] cuts it at once. Reopening the
//!   store with the real file system then shows what a crash at that point leaves behind.
//! * `fail_syncs(true)`: every sync fails until turned off; `fail_reads(true)`: every streamed
//!   read through the seam (`open_read`: the index snapshot) fails until turned off (`metadata`
//!   and whole small files, `read`, fail only after a crash). Reads are never counted as
//!   operations, so the indices of the crash sweeps stay those of the writes.
//! * `lose_unsynced_writes(true)`: the power-loss model. The plan then records what was made
//!   durable and what was not, and after the store is dropped one of two calls rewrites the real
//!   file system into a state a power cut could have left:
//!   * [`FaultPlan::apply_power_loss`], the pessimistic cut: every unsynced write and every
//!     unsynced directory entry is lost, nothing is torn;
//!   * [`FaultPlan::apply_power_loss_seeded`], a cut drawn from a seed: the database file keeps a
//!     random subset of the writes since its last sync, the last of them possibly torn (a prefix
//!     of whole 512-byte sectors); each file written through the seam keeps a random prefix of its
//!     unsynced bytes (a torn last write); and the directory entries changed since their
//!     directory's last sync (creates, links, renames, removes, new directories) survive up to a
//!     random point in the order they were made, the rest being undone newest first.
//!
//! What the model holds durable: file data once the file is synced (it follows the file, not its
//! name, so a hard link or rename carries it); a directory entry once its directory is synced
//! after the change; the database file as of its last successful sync. Permissions and times are
//! not modelled.

use crate::vfs::{UnnamedFile, Vfs, VfsDir, VfsFile};
use parking_lot::Mutex;
use redb::{backends::FileBackend, BackendError, StorageBackend};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// The unit a torn database write keeps: whole sectors, as disks write them atomically.
const SECTOR: usize = 512;

/// Which operation to fail, shared by every wrapper built from it.
#[derive(Debug, Default)]
pub struct FaultPlan {
    ops: AtomicU64,
    fail_at: AtomicU64,
    panic_at: AtomicU64,
    crash_at: AtomicU64,
    /// Database syncs to let pass before the one that is the crash point (0: none planned).
    crash_at_db_sync: AtomicU64,
    crashed: AtomicBool,
    fail_syncs: AtomicBool,
    fail_reads: AtomicBool,
    lose_unsynced: AtomicBool,
    durable: Mutex<Durable>,
}

/// What the power-loss model knows about durability.
#[derive(Debug, Default)]
struct Durable {
    /// Each database file (the store's and its write-ahead log's), by path.
    dbs: Vec<DbModel>,
    /// Files created through the Vfs: each path's file ("inode").
    names: HashMap<PathBuf, u64>,
    /// Per file created through the Vfs: bytes written, and how many of them are synced.
    files: HashMap<u64, FileData>,
    next_file: u64,
    /// Directory entry changes through the Vfs, oldest first.
    entries: Vec<EntryChange>,
}

/// One database file as the power-loss model sees it.
#[derive(Debug)]
struct DbModel {
    path: PathBuf,
    /// The file as of its last successful sync (or as opened).
    image: Option<Vec<u8>>,
    /// The writes and resizes since then, in order.
    pending: Vec<DbChange>,
}

#[derive(Debug)]
enum DbChange {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default, Clone, Copy)]
struct FileData {
    written: u64,
    synced: u64,
}

/// A file's bytes and permissions, kept to undo a remove or a replacing rename.
#[derive(Debug)]
struct Saved {
    bytes: Vec<u8>,
    mode: u32,
    /// The file it was, when it was created through the Vfs (its unsynced tail is lost too).
    file: Option<u64>,
}

#[derive(Debug)]
struct EntryChange {
    /// The directory whose sync makes the change durable.
    dir: PathBuf,
    durable: bool,
    kind: EntryKind,
}

#[derive(Debug)]
enum EntryKind {
    Create(PathBuf),
    Link(PathBuf),
    Rename {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<Saved>,
    },
    Remove(PathBuf, Saved),
    Mkdir(PathBuf),
}

/// What a seeded power cut did (for the simulation's log and its counters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PowerLoss {
    /// Database writes and resizes since the last sync that were lost.
    pub db_changes_lost: usize,
    /// Database writes and resizes since the last sync that were kept.
    pub db_changes_kept: usize,
    /// Whether a kept database write was torn (only a prefix of its sectors kept).
    pub db_torn: bool,
    /// Files that lost all or part of their unsynced bytes.
    pub files_cut: usize,
    /// Files that kept a part, but not all, of their unsynced bytes.
    pub files_torn: usize,
    /// Directory entry changes undone (not yet durable, past the cut).
    pub entries_undone: usize,
    /// Directory entry changes that were not durable but survived.
    pub entries_kept: usize,
}

/// SplitMix64: small, fast, and the same sequence on every platform for a seed.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..=n`.
    fn upto(&mut self, n: u64) -> u64 {
        match n.checked_add(1) {
            Some(m) => self.next() % m,
            None => self.next(),
        }
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }
    /// How much of `n` unsynced units survive: none, all, or a uniform part, a third each.
    fn portion(&mut self, n: u64) -> u64 {
        match self.next() % 3 {
            0 => 0,
            1 => n,
            _ => self.upto(n),
        }
    }
}

impl FaultPlan {
    /// A plan that injects nothing (yet).
    pub fn new() -> Arc<Self> {
        Arc::new(FaultPlan::default())
    }
    /// Fails operation `n` (1-based) once.
    pub fn fail_at(&self, n: u64) {
        self.fail_at.store(n, SeqCst);
    }
    /// Panics at operation `n` (1-based), once: a bug in the code under the seam, or a caller's
    /// code reached at that step (SPEC I10). The panic unwinds quietly (no panic hook runs, as
    /// for `std::panic::resume_unwind`); its payload is a `String` that says what it interrupted.
    pub fn panic_at(&self, n: u64) {
        self.panic_at.store(n, SeqCst);
    }
    /// Disarms a panic planned with [`FaultPlan::panic_at`]; returns whether it came.
    pub fn disarm_panic(&self) -> bool {
        let at = self.panic_at.swap(0, SeqCst);
        at != 0 && self.ops.load(SeqCst) >= at
    }
    /// Crashes at operation `n` (1-based): it and all later operations fail.
    pub fn crash_at(&self, n: u64) {
        self.crash_at.store(n, SeqCst);
    }
    /// Crashes at the `n`-th database sync from now (1: the next): its writes have reached the
    /// page cache, the sync does not complete. With the seeded cut this is where an
    /// unacknowledged commit most often survives whole.
    pub fn crash_at_db_sync(&self, n: u64) {
        self.crash_at_db_sync.store(n, SeqCst);
    }
    /// Crashes now: every later operation fails, as after the power was cut.
    pub fn crash_now(&self) {
        self.crashed.store(true, SeqCst);
    }
    /// Makes every sync fail (or work again).
    pub fn fail_syncs(&self, on: bool) {
        self.fail_syncs.store(on, SeqCst);
    }
    /// Makes every read through the seam fail (or work again).
    pub fn fail_reads(&self, on: bool) {
        self.fail_reads.store(on, SeqCst);
    }
    /// Models a power cut that loses what was not made durable (see the module docs). Turn it
    /// on before the store is opened.
    pub fn lose_unsynced_writes(&self, on: bool) {
        self.lose_unsynced.store(on, SeqCst);
    }

    /// The pessimistic power cut: throws away, on the real file system, everything that was not
    /// made durable, tearing nothing. Call it after the store is dropped and before it is
    /// reopened. `db_file` is the store's database file; every other database file opened
    /// under the plan (the write-ahead log) is cut at the path it was opened at.
    pub fn apply_power_loss(&self, db_file: &Path) -> io::Result<()> {
        self.cut(db_file, None).map(|_| ())
    }

    /// A power cut drawn from `seed` (see the module docs): the same seed on the same history
    /// gives the same disk. Call it after the store is dropped and before it is reopened.
    pub fn apply_power_loss_seeded(&self, db_file: &Path, seed: u64) -> io::Result<PowerLoss> {
        self.cut(db_file, Some(Rng(seed)))
    }

    fn cut(&self, db_file: &Path, mut rng: Option<Rng>) -> io::Result<PowerLoss> {
        let d = std::mem::take(&mut *self.durable.lock());
        let mut report = PowerLoss::default();
        let kept = cut_files(&d, rng.as_mut(), &mut report)?;
        undo_entries(d.entries, &kept, rng.as_mut(), &mut report)?;
        for (i, db) in d.dbs.into_iter().enumerate() {
            if let Some(image) = db.image {
                let image = cut_db(image, db.pending, rng.as_mut(), &mut report);
                // The first database opened under the plan is the store's own.
                let path = if i == 0 { db_file } else { db.path.as_path() };
                std::fs::write(path, image)?;
            }
        }
        Ok(report)
    }

    fn modelling(&self) -> bool {
        self.lose_unsynced.load(SeqCst)
    }

    /// How many operations have been attempted.
    pub fn ops(&self) -> u64 {
        self.ops.load(SeqCst)
    }
    /// Whether the crash point was reached.
    pub fn crashed(&self) -> bool {
        self.crashed.load(SeqCst)
    }

    fn check(&self, what: &str, is_sync: bool) -> io::Result<()> {
        if self.crashed.load(SeqCst) {
            return Err(io::Error::other(format!(
                "injected crash: {what} after the cut"
            )));
        }
        let n = self.ops.fetch_add(1, SeqCst) + 1;
        if self.crash_at.load(SeqCst) == n {
            self.crashed.store(true, SeqCst);
            return Err(io::Error::other(format!(
                "injected crash at operation {n} ({what})"
            )));
        }
        if self.panic_at.load(SeqCst) == n {
            std::panic::resume_unwind(Box::new(format!(
                "injected panic at operation {n} ({what})"
            )));
        }
        if self.fail_at.load(SeqCst) == n {
            return Err(io::Error::other(format!(
                "injected failure of operation {n} ({what})"
            )));
        }
        if is_sync && self.fail_syncs.load(SeqCst) {
            return Err(io::Error::other(format!("injected sync failure ({what})")));
        }
        Ok(())
    }

    /// Reads are not operations (not counted, never the crash point), but they fail after a
    /// crash and while `fail_reads` is on.
    fn check_read(&self, what: &str) -> io::Result<()> {
        if self.crashed.load(SeqCst) {
            return Err(io::Error::other(format!(
                "injected crash: {what} after the cut"
            )));
        }
        if self.fail_reads.load(SeqCst) {
            return Err(io::Error::other(format!("injected read failure ({what})")));
        }
        Ok(())
    }

    /// Stats and small whole-file reads fail only after a crash.
    fn check_stat(&self) -> io::Result<()> {
        if self.crashed.load(SeqCst) {
            return Err(io::Error::other("injected crash: stat after the cut"));
        }
        Ok(())
    }

    fn record_entry(&self, dir: Option<&Path>, kind: EntryKind) {
        let dir = dir.map(Path::to_path_buf).unwrap_or_default();
        self.durable.lock().entries.push(EntryChange {
            dir,
            durable: false,
            kind,
        });
    }
}

/// Cuts every file written through the seam back to its synced bytes plus (seeded) a random
/// prefix of the rest; returns the length each file keeps.
fn cut_files(
    d: &Durable,
    mut rng: Option<&mut Rng>,
    report: &mut PowerLoss,
) -> io::Result<HashMap<u64, u64>> {
    let mut kept = HashMap::new();
    let mut ids: Vec<_> = d.files.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        let f = d.files[&id];
        let unsynced = f.written - f.synced;
        let extra = match rng.as_deref_mut() {
            Some(r) => r.portion(unsynced),
            None => 0,
        };
        kept.insert(id, f.synced + extra);
        if extra < unsynced {
            report.files_cut += 1;
            if extra > 0 {
                report.files_torn += 1;
            }
        }
    }
    let mut names: Vec<_> = d.names.iter().collect();
    names.sort();
    for (path, id) in names {
        let len = kept[id];
        if d.files[id].written > len {
            truncate(path, len)?;
        }
    }
    Ok(kept)
}

/// Undoes the directory entry changes that are not durable: all of them, or (seeded) those after
/// a random point in the order they were made, newest first.
fn undo_entries(
    entries: Vec<EntryChange>,
    kept: &HashMap<u64, u64>,
    rng: Option<&mut Rng>,
    report: &mut PowerLoss,
) -> io::Result<()> {
    let volatile = entries.iter().filter(|e| !e.durable).count() as u64;
    let survive = match rng {
        Some(r) => r.portion(volatile),
        None => 0,
    };
    let mut seen = 0u64;
    let mut undo = Vec::new();
    for e in entries {
        if e.durable {
            continue;
        }
        seen += 1;
        if seen <= survive {
            report.entries_kept += 1;
        } else {
            undo.push(e);
        }
    }
    for e in undo.into_iter().rev() {
        report.entries_undone += 1;
        match e.kind {
            EntryKind::Create(p) | EntryKind::Link(p) => ignore_missing(std::fs::remove_file(p))?,
            EntryKind::Mkdir(p) => ignore_missing(std::fs::remove_dir_all(p))?,
            EntryKind::Remove(p, saved) => restore(&p, &saved, kept)?,
            EntryKind::Rename { from, to, replaced } => {
                ignore_missing(std::fs::rename(&to, &from))?;
                if let Some(saved) = replaced {
                    restore(&to, &saved, kept)?;
                }
            }
        }
    }
    Ok(())
}

/// The database file a cut leaves: the synced image plus (seeded) a random subset of the changes
/// since, the last kept write possibly torn to a prefix of its sectors.
fn cut_db(
    mut image: Vec<u8>,
    pending: Vec<DbChange>,
    rng: Option<&mut Rng>,
    report: &mut PowerLoss,
) -> Vec<u8> {
    let Some(rng) = rng else {
        report.db_changes_lost = pending.len();
        return image;
    };
    let mode = rng.next() % 3;
    let mut kept: Vec<DbChange> = Vec::new();
    for c in pending {
        // Mode 0 keeps none, mode 1 every one, mode 2 each with probability 1/2.
        let keep = match mode {
            0 => false,
            1 => true,
            _ => rng.chance(2),
        };
        if keep {
            kept.push(c);
        } else {
            report.db_changes_lost += 1;
        }
    }
    report.db_changes_kept = kept.len();
    let tear = rng.chance(2);
    let last_write = kept
        .iter()
        .rposition(|c| matches!(c, DbChange::Write { .. }));
    for (i, c) in kept.into_iter().enumerate() {
        match c {
            DbChange::SetLen(len) => image.resize(len as usize, 0),
            DbChange::Write { offset, mut data } => {
                if tear && Some(i) == last_write {
                    let sectors = data.len().div_ceil(SECTOR) as u64;
                    let keep = (rng.upto(sectors.saturating_sub(1)) as usize) * SECTOR;
                    data.truncate(keep.min(data.len()));
                    report.db_torn = true;
                }
                let end = offset as usize + data.len();
                if image.len() < end {
                    image.resize(end, 0);
                }
                image[offset as usize..end].copy_from_slice(&data);
            }
        }
    }
    image
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Cuts a file that may be read-only (as published objects are) to `len` bytes.
fn truncate(path: &Path, len: u64) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let perm = match std::fs::metadata(path) {
        Ok(m) => m.permissions(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .set_len(len)?;
    std::fs::set_permissions(path, perm)
}

/// Puts a removed or replaced file back, with only the bytes the cut keeps of it.
fn restore(path: &Path, saved: &Saved, kept: &HashMap<u64, u64>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let len = saved
        .file
        .and_then(|id| kept.get(&id))
        .map_or(saved.bytes.len(), |&k| (k as usize).min(saved.bytes.len()));
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.is_file() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))?;
        }
    }
    std::fs::write(path, &saved.bytes[..len])?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(saved.mode))
}

/// A file's bytes and mode before a remove or a replacing rename, or `None` if it is not there.
fn save(path: &Path, file: Option<u64>) -> io::Result<Option<Saved>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m.permissions().mode(),
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(Saved {
        bytes: std::fs::read(path)?,
        mode,
        file,
    }))
}

/// A [`Vfs`] that consults a [`FaultPlan`] before each operation.
#[derive(Debug)]
pub struct FaultyVfs {
    inner: Arc<dyn Vfs>,
    plan: Arc<FaultPlan>,
}

impl FaultyVfs {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Vfs>, plan: Arc<FaultPlan>) -> Self {
        FaultyVfs { inner, plan }
    }

    /// A create (counted, and recorded by the power-loss model) done by `create`.
    fn create_with(
        &self,
        path: &Path,
        create: impl FnOnce(&Path) -> io::Result<Box<dyn VfsFile>>,
    ) -> io::Result<Box<dyn VfsFile>> {
        self.plan.check("create", false)?;
        let inner = create(path)?;
        let mut id = 0;
        if self.plan.modelling() {
            let mut d = self.plan.durable.lock();
            d.next_file += 1;
            id = d.next_file;
            d.files.insert(id, FileData::default());
            d.names.insert(path.to_path_buf(), id);
            drop(d);
            self.plan
                .record_entry(path.parent(), EntryKind::Create(path.to_path_buf()));
        }
        Ok(Box::new(FaultyFile {
            inner,
            plan: self.plan.clone(),
            id,
        }))
    }
}

struct FaultyFile {
    inner: Box<dyn VfsFile>,
    plan: Arc<FaultPlan>,
    id: u64,
}

impl Write for FaultyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.plan.check("write", false)?;
        let n = self.inner.write(buf)?;
        if self.plan.modelling() {
            if let Some(f) = self.plan.durable.lock().files.get_mut(&self.id) {
                f.written += n as u64;
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl VfsFile for FaultyFile {
    fn sync(&mut self) -> io::Result<()> {
        self.plan.check("fsync", true)?;
        self.inner.sync()?;
        if self.plan.modelling() {
            if let Some(f) = self.plan.durable.lock().files.get_mut(&self.id) {
                f.synced = f.written;
            }
        }
        Ok(())
    }
}

/// A directory "held open" under the fault model. Production stages through open directory
/// handles; so that the fault and power-loss sweeps exercise that path too (the handle cache, its
/// syncs, a directory removed while held), the model offers handles as well. A handle is its
/// path: every sync through it is the model's sync of that path, counted and cut like any other.
/// The model offers no unnamed files, so it sees every staging file by name.
#[derive(Debug)]
struct FaultyDir {
    vfs: FaultyVfs,
    path: PathBuf,
}

impl VfsDir for FaultyDir {
    fn sync(&self) -> io::Result<()> {
        self.vfs.sync_dir(&self.path)
    }
    fn create_unnamed(&self) -> io::Result<Option<Box<dyn UnnamedFile>>> {
        Ok(None)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Vfs for FaultyVfs {
    fn open_dir(&self, path: &Path) -> io::Result<Option<Arc<dyn VfsDir>>> {
        self.plan.check("open directory", false)?;
        // As a real open: a missing directory is NotFound, a file is not a directory.
        if !self.inner.metadata(path)?.is_dir() {
            return Err(io::Error::other(format!(
                "{} is not a directory",
                path.display()
            )));
        }
        let vfs = FaultyVfs::new(self.inner.clone(), self.plan.clone());
        Ok(Some(Arc::new(FaultyDir {
            vfs,
            path: path.to_path_buf(),
        })))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        self.create_with(path, |p| self.inner.create_new(p))
    }
    fn create_new_writable(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        self.create_with(path, |p| self.inner.create_new_writable(p))
    }
    fn link_no_replace(&self, from: &Path, to: &Path) -> io::Result<bool> {
        self.plan.check("link", false)?;
        let linked = self.inner.link_no_replace(from, to)?;
        if linked && self.plan.modelling() {
            let mut d = self.plan.durable.lock();
            if let Some(&id) = d.names.get(from) {
                d.names.insert(to.to_path_buf(), id);
            }
            drop(d);
            self.plan
                .record_entry(to.parent(), EntryKind::Link(to.to_path_buf()));
        }
        Ok(linked)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.plan.check("remove", false)?;
        if !self.plan.modelling() {
            return self.inner.remove(path);
        }
        let file = self.plan.durable.lock().names.get(path).copied();
        let saved = save(path, file)?;
        self.inner.remove(path)?;
        self.plan.durable.lock().names.remove(path);
        if let Some(saved) = saved {
            self.plan
                .record_entry(path.parent(), EntryKind::Remove(path.to_path_buf(), saved));
        }
        Ok(())
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.plan.check("directory sync", true)?;
        self.inner.sync_dir(path)?;
        if self.plan.modelling() {
            for e in self.plan.durable.lock().entries.iter_mut() {
                if e.dir == path {
                    e.durable = true;
                }
            }
        }
        Ok(())
    }
    fn set_read_only(&self, path: &Path) -> io::Result<()> {
        self.plan.check("chmod", false)?;
        self.inner.set_read_only(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.plan.check("mkdir", false)?;
        // The directories this call creates, outermost first: each is an entry of its parent.
        let mut missing = Vec::new();
        if self.plan.modelling() {
            let mut p = Some(path);
            while let Some(dir) = p.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                missing.push(dir.to_path_buf());
                p = dir.parent();
            }
        }
        self.inner.create_dir_all(path)?;
        for dir in missing.into_iter().rev() {
            let parent = dir.parent().map(Path::to_path_buf);
            self.plan
                .record_entry(parent.as_deref(), EntryKind::Mkdir(dir));
        }
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.plan.check("rename", false)?;
        if !self.plan.modelling() {
            return self.inner.rename(from, to);
        }
        let replaced_file = self.plan.durable.lock().names.get(to).copied();
        let replaced = save(to, replaced_file)?;
        self.inner.rename(from, to)?;
        let mut d = self.plan.durable.lock();
        d.names.remove(to);
        if let Some(id) = d.names.remove(from) {
            d.names.insert(to.to_path_buf(), id);
        }
        drop(d);
        self.plan.record_entry(
            to.parent(),
            EntryKind::Rename {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
                replaced,
            },
        );
        Ok(())
    }
    // `fail_reads` is about streamed reads (the index snapshot, which must fall back to a scan);
    // a stat or a whole small file (the marker) fails only after the cut.
    fn metadata(&self, path: &Path) -> io::Result<std::fs::Metadata> {
        self.plan.check_stat()?;
        self.inner.metadata(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.plan.check_stat()?;
        self.inner.read(path)
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        self.plan.check_read("open for reading")?;
        self.inner.open_read(path)
    }
}

/// A redb backend over the real file that consults a [`FaultPlan`] before every write,
/// resize and sync.
#[derive(Debug)]
pub(crate) struct FaultyBackend {
    inner: FileBackend,
    plan: Arc<FaultPlan>,
    /// This file's model in `plan.durable.dbs`.
    model: usize,
}

impl FaultyBackend {
    /// Wraps the database file at `path` (the power-loss model keeps one image per path).
    pub(crate) fn new(inner: FileBackend, plan: Arc<FaultPlan>, path: &Path) -> Self {
        let mut b = FaultyBackend {
            inner,
            plan,
            model: 0,
        };
        if b.plan.modelling() {
            // What is on disk when the file opens is durable.
            let image = b.image().ok();
            let mut d = b.plan.durable.lock();
            let i = match d.dbs.iter().position(|m| m.path == path) {
                Some(i) => i,
                None => {
                    d.dbs.push(DbModel {
                        path: path.to_path_buf(),
                        image: None,
                        pending: Vec::new(),
                    });
                    d.dbs.len() - 1
                }
            };
            d.dbs[i].image = image;
            d.dbs[i].pending.clear();
            drop(d);
            b.model = i;
        }
        b
    }

    fn pending(&self, c: DbChange) {
        if let Some(m) = self.plan.durable.lock().dbs.get_mut(self.model) {
            m.pending.push(c);
        }
    }

    fn image(&self) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; self.inner.len()? as usize];
        self.inner.read(0, &mut buf)?;
        Ok(buf)
    }
}

impl StorageBackend for FaultyBackend {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.plan.check("database resize", false)?;
        self.inner.set_len(len)?;
        if self.plan.modelling() {
            self.pending(DbChange::SetLen(len));
        }
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.plan.check("database sync", true)?;
        let planned = self.plan.crash_at_db_sync.load(SeqCst);
        if planned > 0 {
            self.plan.crash_at_db_sync.store(planned - 1, SeqCst);
            if planned == 1 {
                self.plan.crashed.store(true, SeqCst);
                return Err(io::Error::other("injected crash at a database sync"));
            }
        }
        self.inner.sync_data()?;
        if self.plan.modelling() {
            let mut d = self.plan.durable.lock();
            let Some(m) = d.dbs.get_mut(self.model) else {
                return Ok(());
            };
            let pending = std::mem::take(&mut m.pending);
            if let Some(image) = m.image.as_mut() {
                for c in pending {
                    match c {
                        DbChange::SetLen(len) => image.resize(len as usize, 0),
                        DbChange::Write { offset, data } => {
                            let end = offset as usize + data.len();
                            if image.len() < end {
                                image.resize(end, 0);
                            }
                            image[offset as usize..end].copy_from_slice(&data);
                        }
                    }
                }
            }
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.plan.check("database write", false)?;
        self.inner.write(offset, data)?;
        if self.plan.modelling() {
            self.pending(DbChange::Write {
                offset,
                data: data.to_vec(),
            });
        }
        Ok(())
    }
    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }
    fn try_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(s, e)
    }
    fn try_lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(s, e)
    }
    fn lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(s, e)
    }
    fn lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(s, e)
    }
    fn unlock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(s, e)
    }
    fn query_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(s, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::RealVfs;

    fn modelled() -> (tempfile::TempDir, Arc<FaultPlan>, FaultyVfs) {
        let dir = tempfile::tempdir().unwrap();
        let plan = FaultPlan::new();
        plan.lose_unsynced_writes(true);
        let vfs = FaultyVfs::new(Arc::new(RealVfs), plan.clone());
        (dir, plan, vfs)
    }

    #[test]
    fn the_pessimistic_cut_loses_unsynced_data_and_entries_and_keeps_synced_ones() {
        let (dir, plan, vfs) = modelled();
        let d = dir.path();
        let write = |path: &Path, bytes: &[u8], sync: bool| {
            let mut f = vfs.create_new(path).unwrap();
            f.write_all(bytes).unwrap();
            if sync {
                f.sync().unwrap();
            }
        };
        // Durable: written, synced, directory synced.
        write(&d.join("kept"), b"durable", true);
        vfs.create_dir_all(&d.join("sub")).unwrap();
        vfs.sync_dir(d).unwrap();
        // A durable entry with a synced prefix and an unsynced tail.
        let mut f = vfs.create_new(&d.join("sub/file")).unwrap();
        f.write_all(b"abc").unwrap();
        f.sync().unwrap();
        f.write_all(b"def").unwrap();
        drop(f);
        vfs.sync_dir(&d.join("sub")).unwrap();
        // Synced data, but neither its create nor its rename over `kept` is durable.
        write(&d.join("tmp"), b"new", true);
        vfs.rename(&d.join("tmp"), &d.join("kept")).unwrap();
        plan.crash_now();
        assert!(vfs.create_new(&d.join("late")).is_err(), "crashed");
        plan.apply_power_loss(&d.join("no-db")).unwrap();

        assert_eq!(std::fs::read(d.join("kept")).unwrap(), b"durable");
        assert!(
            !d.join("tmp").exists(),
            "the rename was undone, tmp's create too"
        );
        assert_eq!(std::fs::read(d.join("sub/file")).unwrap(), b"abc");
        assert!(!d.join("late").exists());
    }

    #[test]
    fn an_unsynced_remove_is_undone_and_a_new_directory_without_parent_sync_vanishes() {
        let (dir, plan, vfs) = modelled();
        let d = dir.path();
        std::fs::write(d.join("old"), b"old bytes").unwrap();
        vfs.remove(&d.join("old")).unwrap();
        vfs.create_dir_all(&d.join("a/b")).unwrap();
        let mut f = vfs.create_new(&d.join("a/b/f")).unwrap();
        f.write_all(b"x").unwrap();
        f.sync().unwrap();
        drop(f);
        vfs.sync_dir(&d.join("a/b")).unwrap();
        plan.apply_power_loss(&d.join("no-db")).unwrap();
        assert_eq!(std::fs::read(d.join("old")).unwrap(), b"old bytes");
        assert!(!d.join("a").exists(), "a's entry in d was never synced");
    }

    #[test]
    fn a_seeded_cut_is_reproducible_and_sometimes_tears() {
        let run = |seed: u64| {
            let (dir, plan, vfs) = modelled();
            let d = dir.path();
            for i in 0..20 {
                let mut f = vfs.create_new(&d.join(format!("f{i}"))).unwrap();
                f.write_all(&[b'a'; 1000]).unwrap();
                if i % 2 == 0 {
                    f.sync().unwrap();
                }
            }
            let report = plan
                .apply_power_loss_seeded(&d.join("no-db"), seed)
                .unwrap();
            let sizes: Vec<Option<u64>> = (0..20)
                .map(|i| {
                    std::fs::metadata(d.join(format!("f{i}")))
                        .ok()
                        .map(|m| m.len())
                })
                .collect();
            (report, sizes)
        };
        assert_eq!(run(7), run(7));
        let torn = (0..20u64).any(|s| run(s).0.files_torn > 0);
        assert!(torn, "no seed tore a file");
        let kept_some = (0..20u64).any(|s| run(s).0.entries_kept > 0);
        assert!(kept_some, "no seed kept an unsynced entry");
    }

    #[test]
    fn a_torn_database_write_keeps_whole_sectors_of_the_last_kept_write() {
        let mut report = PowerLoss::default();
        for seed in 0..64 {
            let pending = vec![
                DbChange::Write {
                    offset: 0,
                    data: vec![1; 2048],
                },
                DbChange::Write {
                    offset: 4096,
                    data: vec![2; 2048],
                },
            ];
            let image = cut_db(vec![0; 8192], pending, Some(&mut Rng(seed)), &mut report);
            assert_eq!(image.len(), 8192);
            for s in image.chunks(SECTOR) {
                assert!(
                    s.iter().all(|&b| b == s[0]),
                    "a sector was split: seed {seed}"
                );
            }
        }
        assert!(report.db_torn);
    }
}
