//! The real file operations with a test's changes: a [`Hook`] says what it changes (a wait, a
//! count, an injected failure, a file without syncs) and [`Hooked`] passes every other call on
//! to the wrapped `Vfs`, so that a test's wrapper is only what it changes. Needs the engine's
//! `testing` feature (`oncelake::vfs`), hence its own file beside `common/mod.rs`.

use oncelake::vfs::{Vfs, VfsFile};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// What a test changes in the file operations; each default changes nothing.
pub trait Hook: Send + Sync + std::fmt::Debug {
    /// Before a link of `to` (then the link is made).
    fn before_link(&self, _to: &Path) {}
    /// Before a removal of `path` (then it is removed).
    fn before_remove(&self, _path: &Path) {}
    /// `Some` answers a directory sync instead of the wrapped `Vfs`.
    fn sync_dir(&self, _path: &Path) -> Option<io::Result<()>> {
        None
    }
    /// `Some` answers whether creations are read-only instead of the wrapped `Vfs`.
    fn creates_read_only(&self) -> Option<bool> {
        None
    }
    /// The file a creation hands out.
    fn file(&self, file: Box<dyn VfsFile>) -> Box<dyn VfsFile> {
        file
    }
}

/// `inner`'s file operations with `hook`'s changes.
#[derive(Debug)]
pub struct Hooked<H> {
    pub inner: Arc<dyn Vfs>,
    pub hook: H,
}

impl<H: Hook> Hooked<H> {
    /// The real file system with `hook`'s changes.
    pub fn real(hook: H) -> Self {
        Hooked {
            inner: Arc::new(oncelake::vfs::RealVfs),
            hook,
        }
    }
}

impl<H: Hook + 'static> Vfs for Hooked<H> {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        Ok(self.hook.file(self.inner.create_new(path)?))
    }
    fn link_no_replace(&self, from: &Path, to: &Path) -> io::Result<bool> {
        self.hook.before_link(to);
        self.inner.link_no_replace(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.hook.before_remove(path);
        self.inner.remove(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        match self.hook.sync_dir(path) {
            Some(answer) => answer,
            None => self.inner.sync_dir(path),
        }
    }
    fn set_read_only(&self, path: &Path) -> io::Result<()> {
        self.inner.set_read_only(path)
    }
    fn creates_read_only(&self) -> bool {
        self.hook
            .creates_read_only()
            .unwrap_or_else(|| self.inner.creates_read_only())
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn metadata(&self, path: &Path) -> io::Result<std::fs::Metadata> {
        self.inner.metadata(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
}
