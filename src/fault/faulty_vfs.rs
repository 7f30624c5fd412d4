//! The [`Vfs`] wrapper: every file operation through the seam asks the [`FaultPlan`] first, and
//! records what it did for the power-loss model.

use super::power_loss::{save, EntryKind, FileData};
use super::FaultPlan;
use crate::vfs::{UnnamedFile, Vfs, VfsDir, VfsFile};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

pub(super) struct FaultyFile {
    pub(super) inner: Box<dyn VfsFile>,
    pub(super) plan: Arc<FaultPlan>,
    pub(super) id: u64,
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
pub(super) struct FaultyDir {
    pub(super) vfs: FaultyVfs,
    pub(super) path: PathBuf,
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
