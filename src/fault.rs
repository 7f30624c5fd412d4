//! Fault injection: a plan that fails or "crashes" the N-th file operation, shared by a [`Vfs`]
//! wrapper (object and staging files) and a redb [`StorageBackend`] wrapper (the database file),
//! so that one operation counter covers every write, sync, link and remove the engine makes.
//!
//! * `fail_at(n)`: operation n returns an I/O error; later operations work again (a transient
//!   error, like EIO on one fsync).
//! * `crash_at(n)`: operation n and every later one fails without touching the disk, as if the
//!   power had been cut just before it. Reopening the store with the real file system then shows
//!   what a crash at that point leaves behind. (Writes that reached the page cache before the cut
//!   are kept, which a real power cut might lose; the sweep therefore checks every acknowledged
//!   commit, and a later sweep could add a lost-writes model.)
//! * `fail_syncs(true)`: every sync fails until turned off.
//! * `lose_unsynced_writes(true)`: the pessimistic power cut. The plan then remembers what was
//!   made durable, and [`FaultPlan::apply_power_loss`] (called after the store is dropped) throws
//!   away everything that was not: the database file goes back to its image at its last
//!   successful sync, files written but never synced are emptied, and links whose directory was
//!   not synced afterwards disappear.

use crate::vfs::{Vfs, VfsFile};
use parking_lot::Mutex;
use redb::{backends::FileBackend, BackendError, StorageBackend};
use std::collections::HashSet;
use std::io::{self, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// Which operation to fail, shared by every wrapper built from it.
#[derive(Debug, Default)]
pub struct FaultPlan {
    ops: AtomicU64,
    fail_at: AtomicU64,
    crash_at: AtomicU64,
    crashed: AtomicBool,
    fail_syncs: AtomicBool,
    lose_unsynced: AtomicBool,
    durable: Mutex<Durable>,
}

/// What the lost-writes model knows about durability.
#[derive(Debug, Default)]
struct Durable {
    /// The database file as of its last successful sync (or as opened).
    db_image: Option<Vec<u8>>,
    /// Files created through the Vfs whose data was never synced.
    unsynced_files: HashSet<PathBuf>,
    /// Links made through the Vfs: (from, to), and whether `to`'s directory was synced since.
    links: Vec<(PathBuf, PathBuf, bool)>,
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
    /// Crashes at operation `n` (1-based): it and all later operations fail.
    pub fn crash_at(&self, n: u64) {
        self.crash_at.store(n, SeqCst);
    }
    /// Makes every sync fail (or work again).
    pub fn fail_syncs(&self, on: bool) {
        self.fail_syncs.store(on, SeqCst);
    }
    /// Models a power cut that loses every write not yet synced (see the module docs). Turn it
    /// on before the store is opened.
    pub fn lose_unsynced_writes(&self, on: bool) {
        self.lose_unsynced.store(on, SeqCst);
    }

    /// Throws away, on the real file system, everything that was not made durable: call it after
    /// the store is dropped and before it is reopened. `db_file` is the store's database file.
    pub fn apply_power_loss(&self, db_file: &Path) -> io::Result<()> {
        let d = std::mem::take(&mut *self.durable.lock());
        for (from, to, dir_synced) in &d.links {
            if !dir_synced {
                ignore_missing(std::fs::remove_file(to))?;
            } else if d.unsynced_files.contains(from) {
                empty_file(to)?;
            }
        }
        for f in &d.unsynced_files {
            empty_file(f)?;
        }
        if let Some(image) = d.db_image {
            std::fs::write(db_file, image)?;
        }
        Ok(())
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
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Empties a file that may be read-only (as published objects are).
fn empty_file(path: &Path) -> io::Result<()> {
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
        .set_len(0)?;
    std::fs::set_permissions(path, perm)
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
}

struct FaultyFile {
    inner: Box<dyn VfsFile>,
    plan: Arc<FaultPlan>,
    path: PathBuf,
}

impl Write for FaultyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.plan.check("write", false)?;
        self.inner.write(buf)
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
            self.plan.durable.lock().unsynced_files.remove(&self.path);
        }
        Ok(())
    }
}

impl Vfs for FaultyVfs {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        self.plan.check("create", false)?;
        let inner = self.inner.create_new(path)?;
        if self.plan.modelling() {
            self.plan
                .durable
                .lock()
                .unsynced_files
                .insert(path.to_path_buf());
        }
        Ok(Box::new(FaultyFile {
            inner,
            plan: self.plan.clone(),
            path: path.to_path_buf(),
        }))
    }
    fn link_no_replace(&self, from: &Path, to: &Path) -> io::Result<bool> {
        self.plan.check("link", false)?;
        let linked = self.inner.link_no_replace(from, to)?;
        if linked && self.plan.modelling() {
            self.plan
                .durable
                .lock()
                .links
                .push((from.to_path_buf(), to.to_path_buf(), false));
        }
        Ok(linked)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.plan.check("remove", false)?;
        self.inner.remove(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.plan.check("directory sync", true)?;
        self.inner.sync_dir(path)?;
        if self.plan.modelling() {
            for (_, to, synced) in self.plan.durable.lock().links.iter_mut() {
                if to.parent() == Some(path) {
                    *synced = true;
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
        self.inner.create_dir_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.plan.check("rename", false)?;
        self.inner.rename(from, to)
    }
    // Reads change nothing on disk, so they are neither counted nor failed: the operation
    // indices of the crash sweeps stay those of the writes.
    fn metadata(&self, path: &Path) -> io::Result<std::fs::Metadata> {
        self.inner.metadata(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
}

/// A redb backend over the real file that consults a [`FaultPlan`] before every write,
/// resize and sync.
#[derive(Debug)]
pub(crate) struct FaultyBackend {
    inner: FileBackend,
    plan: Arc<FaultPlan>,
}

impl FaultyBackend {
    pub(crate) fn new(inner: FileBackend, plan: Arc<FaultPlan>) -> Self {
        let b = FaultyBackend { inner, plan };
        if b.plan.modelling() {
            // What is on disk when the store opens is durable.
            b.plan.durable.lock().db_image = b.image().ok();
        }
        b
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
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.plan.check("database sync", true)?;
        self.inner.sync_data()?;
        if self.plan.modelling() {
            let image = self.image()?;
            self.plan.durable.lock().db_image = Some(image);
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.plan.check("database write", false)?;
        self.inner.write(offset, data)
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
