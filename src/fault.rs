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

use crate::vfs::{Vfs, VfsFile};
use redb::{backends::FileBackend, BackendError, StorageBackend};
use std::io::{self, Write};
use std::ops::Bound;
use std::path::Path;
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
        self.inner.sync()
    }
}

impl Vfs for FaultyVfs {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        self.plan.check("create", false)?;
        Ok(Box::new(FaultyFile {
            inner: self.inner.create_new(path)?,
            plan: self.plan.clone(),
        }))
    }
    fn link_no_replace(&self, from: &Path, to: &Path) -> io::Result<bool> {
        self.plan.check("link", false)?;
        self.inner.link_no_replace(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.plan.check("remove", false)?;
        self.inner.remove(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.plan.check("directory sync", true)?;
        self.inner.sync_dir(path)
    }
    fn set_read_only(&self, path: &Path) -> io::Result<()> {
        self.plan.check("chmod", false)?;
        self.inner.set_read_only(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.plan.check("mkdir", false)?;
        self.inner.create_dir_all(path)
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
        FaultyBackend { inner, plan }
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
        self.inner.sync_data()
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
