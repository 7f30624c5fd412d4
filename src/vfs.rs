//! The narrow seam under every file operation the engine makes outside redb: create, write,
//! fsync, link, rename, remove, directory sync, and the reads of the engine's own small files.
//! Production uses [`RealVfs`]; the fault-injection tests and the deterministic simulation put
//! [`crate::fault::FaultyVfs`] here, which fails or "crashes" at the N-th operation and models
//! what a power cut keeps of everything that went through it.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

/// A file being written through the seam.
pub trait VfsFile: Write + Send {
    /// Makes the written bytes durable (`fdatasync`/`fsync`).
    fn sync(&mut self) -> io::Result<()>;
}

/// A file without a name (Linux `O_TMPFILE`) being written, that gets its one name when it is
/// published. A crash before that leaves nothing behind, and naming it costs no directory entry
/// to create and remove in `staging/`.
pub trait UnnamedFile: VfsFile {
    /// Gives the file its name `to` atomically without replacing anything: `Ok(true)` when linked,
    /// `Ok(false)` when `to` already exists (as [`Vfs::link_no_replace`]).
    fn link_no_replace(&mut self, to: &Path) -> io::Result<bool>;
    /// Gives the file the name `name` in the open directory `dir`, as
    /// [`UnnamedFile::link_no_replace`] does with a path. `dir` must come from the same [`Vfs`]
    /// (its [`Vfs::open_dir`]); another implementation's handle is refused as unsupported.
    fn link_no_replace_in(&mut self, dir: &dyn VfsDir, name: &str) -> io::Result<bool> {
        let _ = (dir, name);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this file cannot be linked relative to an open directory",
        ))
    }
}

/// A directory held open through the seam, where the system offers that (see [`Vfs::open_dir`]):
/// creating, naming and syncing relative to it costs no walk of the directory's path and no open
/// and close per sync.
pub trait VfsDir: Send + Sync + Debug {
    /// Makes the directory's entries durable, as [`Vfs::sync_dir`] on its path.
    fn sync(&self) -> io::Result<()>;
    /// Creates a file without a name in this directory, as [`Vfs::create_unnamed`] on its path.
    fn create_unnamed(&self) -> io::Result<Option<Box<dyn UnnamedFile>>>;
    /// The implementation behind the handle, so that an [`UnnamedFile`] of the same
    /// implementation can link itself into it.
    fn as_any(&self) -> &dyn std::any::Any;
    /// Links the file at `from` (relative to `from_dir`, a handle of the same [`Vfs`]) as `name`
    /// in this directory without replacing anything, as [`Vfs::link_no_replace`] does with
    /// paths, but the system resolves only the relative names. The default offers none
    /// (`Unsupported`): the caller then links by path, and the fault model sees every link by path.
    fn link_from(&self, from_dir: &dyn VfsDir, from: &Path, name: &str) -> io::Result<bool> {
        let _ = (from_dir, from, name);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this directory cannot link relative to an open directory",
        ))
    }
}

/// File operations the engine performs on its object and staging directories.
pub trait Vfs: Send + Sync + Debug {
    /// Opens directory `path` for repeated creates, links and syncs relative to it, where the
    /// system offers that; `Ok(None)` where it does not, and the stager then names every file by
    /// its full path. The default offers none: the fault model sees every operation by path.
    fn open_dir(&self, path: &Path) -> io::Result<Option<Arc<dyn VfsDir>>> {
        let _ = path;
        Ok(None)
    }
    /// Creates a file without a name in directory `dir`, read-only once closed like
    /// [`Vfs::create_new`]'s, where the system offers that; `Ok(None)` where it does not, and the
    /// stager then writes a named staging file. The default offers none: the fault model sees
    /// every staging file by name.
    fn create_unnamed(&self, dir: &Path) -> io::Result<Option<Box<dyn UnnamedFile>>> {
        let _ = dir;
        Ok(None)
    }
    /// Creates a new file, failing if it exists. The returned handle is writable even when the
    /// implementation creates the file read-only (see [`Vfs::creates_read_only`]).
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn VfsFile>>;
    /// Creates a new file, failing if it exists, that stays writable for its owner once closed:
    /// the index snapshot, which is replaced by rename but which tools may rewrite in place. The
    /// default is [`Vfs::create_new`].
    fn create_new_writable(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        self.create_new(path)
    }
    /// Publishes `from` at `to` atomically without replacing anything: `Ok(true)` when linked,
    /// `Ok(false)` when `to` already exists.
    fn link_no_replace(&self, from: &Path, to: &Path) -> io::Result<bool>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes a directory's entries durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Makes a file read-only for everyone.
    fn set_read_only(&self, path: &Path) -> io::Result<()>;
    /// Whether [`Vfs::create_new`] creates files read-only for everyone already, so that the
    /// stager may skip [`Vfs::set_read_only`] after writing. Off unless an implementation says so.
    fn creates_read_only(&self) -> bool {
        false
    }
    /// Creates a directory (and parents) if missing.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to` atomically, replacing `to` if it exists (`rename(2)`). Durable only
    /// once the directory of `to` is synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// The metadata of a file (following links), as `std::fs::metadata` gives it.
    fn metadata(&self, path: &Path) -> io::Result<std::fs::Metadata>;
    /// Reads a whole (small) file: markers, the index snapshot.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Opens a file for a streaming read (the index snapshot, which can be most of a gigabyte and
    /// must not be held twice in memory). The default reads the whole file with [`Vfs::read`].
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(io::Cursor::new(self.read(path)?)))
    }
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealVfs;

struct RealFile(File);

impl Write for RealFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl VfsFile for RealFile {
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
}

#[cfg(target_os = "linux")]
impl UnnamedFile for RealFile {
    fn link_no_replace(&mut self, to: &Path) -> io::Result<bool> {
        link_unnamed(&self.0, rustix::fs::CWD, to, || to_parent_missing(to))
    }

    fn link_no_replace_in(&mut self, dir: &dyn VfsDir, name: &str) -> io::Result<bool> {
        use std::os::fd::AsFd;
        let Some(dir) = dir.as_any().downcast_ref::<RealDir>() else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a directory handle of another file system layer",
            ));
        };
        let fd = dir.0.as_fd();
        // A directory that was removed while open has no links left: ENOENT is about it then.
        let gone = || rustix::fs::fstat(fd).is_ok_and(|st| st.st_nlink == 0);
        link_unnamed(&self.0, fd, Path::new(name), gone)
    }
}

/// Links the unnamed `file` at `to` relative to `dir` without replacing anything. `dir_missing`
/// tells whether ENOENT means that the target directory is gone.
///
/// linkat(2) names an O_TMPFILE file by its descriptor with AT_EMPTY_PATH where the kernel allows
/// that to this process (Linux 6.10+ for the file's opener, or CAP_DAC_READ_SEARCH), else through
/// its /proc magic link with AT_SYMLINK_FOLLOW, which costs a walk of /proc.
#[cfg(target_os = "linux")]
fn link_unnamed(
    file: &File,
    dir: std::os::fd::BorrowedFd<'_>,
    to: &Path,
    dir_missing: impl Fn() -> bool,
) -> io::Result<bool> {
    use rustix::fs::{linkat, AtFlags, CWD};
    use rustix::io::Errno;
    use std::sync::atomic::{AtomicBool, Ordering};
    static NO_EMPTY_PATH: AtomicBool = AtomicBool::new(false);
    let by_fd = if NO_EMPTY_PATH.load(Ordering::Relaxed) {
        None
    } else {
        match linkat(file, "", dir, to, AtFlags::EMPTY_PATH) {
            Err(Errno::PERM | Errno::NOENT | Errno::INVAL) if !dir_missing() => {
                NO_EMPTY_PATH.store(true, Ordering::Relaxed);
                None
            }
            other => Some(other),
        }
    };
    let linked = by_fd.unwrap_or_else(|| {
        use std::os::fd::AsRawFd;
        let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
        linkat(CWD, &proc_path, dir, to, AtFlags::SYMLINK_FOLLOW)
    });
    match linked {
        Ok(()) => Ok(true),
        Err(Errno::EXIST) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether the directory `to` would be linked into is missing (then ENOENT is about `to`, not
/// about the kernel refusing AT_EMPTY_PATH).
#[cfg(target_os = "linux")]
fn to_parent_missing(to: &Path) -> bool {
    to.parent().is_some_and(|p| !p.is_dir())
}

/// An open directory of the real file system.
#[cfg(target_os = "linux")]
#[derive(Debug)]
struct RealDir(std::os::fd::OwnedFd);

#[cfg(target_os = "linux")]
impl VfsDir for RealDir {
    fn sync(&self) -> io::Result<()> {
        Ok(rustix::fs::fsync(&self.0)?)
    }

    fn create_unnamed(&self) -> io::Result<Option<Box<dyn UnnamedFile>>> {
        create_unnamed_at(&self.0, Path::new("."))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn link_from(&self, from_dir: &dyn VfsDir, from: &Path, name: &str) -> io::Result<bool> {
        let Some(src) = from_dir.as_any().downcast_ref::<RealDir>() else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a directory handle of another file system layer",
            ));
        };
        match rustix::fs::linkat(&src.0, from, &self.0, name, rustix::fs::AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::EXIST) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Opens an unnamed file (`O_TMPFILE`, 0444) in directory `path` relative to `dir`; `Ok(None)`
/// where the system cannot.
#[cfg(target_os = "linux")]
fn create_unnamed_at(
    dir: impl std::os::fd::AsFd,
    path: &Path,
) -> io::Result<Option<Box<dyn UnnamedFile>>> {
    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;
    // Without /proc the file could never be named where AT_EMPTY_PATH is refused: take the named
    // path instead.
    static PROC_FD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*PROC_FD.get_or_init(|| Path::new("/proc/self/fd").is_dir()) {
        return Ok(None);
    }
    let flags = OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC;
    match rustix::fs::openat(dir, path, flags, Mode::from_raw_mode(0o444)) {
        Ok(fd) => Ok(Some(Box::new(RealFile(File::from(fd))))),
        // The kernel or the file system has no O_TMPFILE (EISDIR on kernels before 3.11).
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL | Errno::NOSYS) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl Vfs for RealVfs {
    #[cfg(target_os = "linux")]
    fn create_unnamed(&self, dir: &Path) -> io::Result<Option<Box<dyn UnnamedFile>>> {
        create_unnamed_at(rustix::fs::CWD, dir)
    }

    #[cfg(target_os = "linux")]
    fn open_dir(&self, path: &Path) -> io::Result<Option<Arc<dyn VfsDir>>> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(Arc::new(RealDir(fd)))),
            // A handle is an optimisation: without a descriptor to spare, go by path.
            Err(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        // Created read-only (0444; the umask can only remove bits): the open handle still writes,
        // and the stager is spared a stat and a chmod per object.
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o444);
        Ok(Box::new(RealFile(options.open(path)?)))
    }

    fn create_new_writable(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(RealFile(file)))
    }

    fn link_no_replace(&self, from: &Path, to: &Path) -> io::Result<bool> {
        match std::fs::hard_link(from, to) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn set_read_only(&self, path: &Path) -> io::Result<()> {
        let mut perm = std::fs::metadata(path)?.permissions();
        perm.set_readonly(true);
        std::fs::set_permissions(path, perm)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn creates_read_only(&self) -> bool {
        cfg!(unix)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn metadata(&self, path: &Path) -> io::Result<std::fs::Metadata> {
        std::fs::metadata(path)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(File::open(path)?))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// An unnamed file is invisible until it is linked, gets its one name read-only with its
    /// bytes, is never linked over an existing name, and reports a missing directory as such.
    #[test]
    fn an_unnamed_file_gets_exactly_one_name() {
        let dir = tempfile::tempdir().unwrap();
        let Some(mut file) = RealVfs.create_unnamed(dir.path()).unwrap() else {
            eprintln!("no O_TMPFILE on this file system: the named path is used");
            return;
        };
        file.write_all(b"object bytes").unwrap();
        file.sync().unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let first = dir.path().join("first");
        assert!(file.link_no_replace(&first).unwrap());
        assert_eq!(std::fs::read(&first).unwrap(), b"object bytes");
        let mode = std::fs::metadata(&first).unwrap().permissions().mode();
        assert_eq!(mode & 0o222, 0, "published read-only: {mode:o}");
        std::fs::write(dir.path().join("taken"), b"other").unwrap();
        assert!(!file.link_no_replace(&dir.path().join("taken")).unwrap());
        assert_eq!(std::fs::read(dir.path().join("taken")).unwrap(), b"other");
        let missing = dir.path().join("no-such-dir").join("x");
        let err = file.link_no_replace(&missing).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        drop(file);
        assert_eq!(std::fs::read(&first).unwrap(), b"object bytes");
    }
}
