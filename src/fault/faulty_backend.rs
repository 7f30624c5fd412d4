//! The redb [`StorageBackend`] wrapper: the database file's writes, resizes and syncs ask the
//! [`FaultPlan`] first, and the power-loss model keeps the file as of its last sync.

use super::power_loss::{DbChange, DbModel};
use super::FaultPlan;
use redb::{backends::FileBackend, BackendError, StorageBackend};
use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

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

    pub(super) fn pending(&self, c: DbChange) {
        if let Some(m) = self.plan.durable.lock().dbs.get_mut(self.model) {
            m.pending.push(c);
        }
    }

    pub(super) fn image(&self) -> io::Result<Vec<u8>> {
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
