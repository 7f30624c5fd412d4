//! Staging: writing an object privately, making it durable, and publishing it under its content
//! hash with an atomic no-replace link (SPEC R2).
//!
//! A staged object is *pinned* from before it is published until every handle to it is dropped.
//! Garbage collection never removes a pinned object, which closes the race in which identical
//! content is staged again (the publish is then a no-op on an old, unreferenced file) while GC is
//! about to delete that file. GC decides what to delete under the pin lock and marks those
//! objects *doomed*; it unlinks them after releasing the lock. Publishing an object that is doomed
//! waits until GC has unlinked it (and then links a fresh copy), so a doomed file is never
//! mistaken for a published one.
//!
//! Staging files are named `<pid>-<session>-<n>.part`: the process and the opening of the store
//! that wrote them. Only one opening holds a store at a time (its lock), so a staging file of any
//! other opening belongs to a writer that is gone (see [`StagingOwner`]).

use crate::error::{Error, IoContext, Result};
use crate::object::{IdHash, ObjectId, ObjectMeta};
use crate::vfs::{Vfs, VfsDir, VfsFile};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const BUF: usize = 256 * 1024;

thread_local! {
    /// The staging buffer of this thread, reused across objects.
    static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Objects that staging holds on to, and objects GC is about to unlink; GC decides under its lock.
#[derive(Debug, Default)]
pub(crate) struct PinSet {
    state: Mutex<PinState>,
    /// Signalled whenever GC has unlinked (or given up on) a doomed object.
    undoomed: Condvar,
}

/// What the pin lock protects.
#[derive(Debug, Default)]
pub(crate) struct PinState {
    /// Pinned objects and how many handles pin each.
    pins: HashMap<ObjectId, usize, IdHash>,
    /// Objects a GC decided to delete and has not unlinked yet.
    doomed: HashSet<ObjectId, IdHash>,
    /// Publishers waiting for a doomed object to be unlinked (for tests and reports).
    waiting: usize,
}

impl PinState {
    /// Whether a handle pins `id`.
    pub(crate) fn is_pinned(&self, id: &ObjectId) -> bool {
        self.pins.contains_key(id)
    }

    /// Marks `id` for deletion; `false` if another GC already did. The caller must unlink it
    /// and then call [`PinSet::undoom`], whatever the outcome of the unlink.
    pub(crate) fn doom(&mut self, id: ObjectId) -> bool {
        debug_assert!(!self.is_pinned(&id), "a pinned object is never doomed");
        self.doomed.insert(id)
    }
}

impl PinSet {
    pub(crate) fn lock(&self) -> MutexGuard<'_, PinState> {
        self.state.lock()
    }

    /// Pins `id`, first waiting until no GC is about to unlink it: a publisher that found a doomed
    /// file "already there" would otherwise reference a file that is about to vanish.
    fn pin(self: &Arc<Self>, id: ObjectId) -> Pin {
        let mut state = self.state.lock();
        if state.doomed.contains(&id) {
            state.waiting += 1;
            while state.doomed.contains(&id) {
                self.undoomed.wait(&mut state);
            }
            state.waiting -= 1;
        }
        *state.pins.entry(id).or_insert(0) += 1;
        Pin {
            id,
            set: self.clone(),
        }
    }

    /// GC is done with a doomed object (unlinked, already gone, or failed): publishers of the same
    /// content may go on.
    pub(crate) fn undoom(&self, id: &ObjectId) {
        let mut state = self.state.lock();
        state.doomed.remove(id);
        if state.waiting > 0 {
            self.undoomed.notify_all();
        }
    }

    /// How many publishers wait for GC to unlink a doomed copy of their object.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn waiting(&self) -> usize {
        self.state.lock().waiting
    }
}

/// A durable, published object, ready to be committed. Cloning it keeps the pin.
///
/// A handle belongs to the store (the opening of it) that staged it: only that store's GC knows
/// its pin, so committing it into another store is refused.
#[derive(Clone, Debug)]
pub struct Staged {
    meta: ObjectMeta,
    pin: Arc<Pin>,
}

impl Staged {
    /// Hash, size and CRC32 of the object.
    pub fn meta(&self) -> ObjectMeta {
        self.meta
    }
    /// The content hash.
    pub fn id(&self) -> ObjectId {
        self.meta.id
    }
}

#[derive(Debug)]
struct Pin {
    id: ObjectId,
    set: Arc<PinSet>,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut state = self.set.lock();
        if let Some(n) = state.pins.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                state.pins.remove(&self.id);
            }
        }
    }
}

/// Who wrote a staging file, read off its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StagingOwner {
    /// Named by this opening of the store: in use exactly while it is in the in-flight set.
    This,
    /// Named by another opening (of this or another process). Only one opening holds the store's
    /// lock at a time and this one holds it now, so that writer is gone: the file is garbage.
    Gone,
    /// Not a name the stager makes (another build, someone else): its writer cannot be told.
    Unknown,
}

/// Every opening in this process gets a session number above the previous one's, so that two
/// openings never share staging names even when the clock does not move or moves back.
static LAST_SESSION: AtomicU64 = AtomicU64::new(0);

fn new_session() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let prev = LAST_SESSION
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(now.max(last.wrapping_add(1)))
        })
        .unwrap_or(0);
    now.max(prev.wrapping_add(1))
}

/// The `(pid, session)` in a staging file name `<pid>-<session hex>-<n>.part`.
fn parse_staging_name(name: &str) -> Option<(u32, u64)> {
    let mut parts = name.strip_suffix(".part")?.split('-');
    let pid = parts.next()?;
    let session = parts.next()?;
    let n = parts.next()?;
    let digits = |s: &str, hex: bool| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_digit() || hex && b.is_ascii_hexdigit())
    };
    if parts.next().is_some() || !digits(pid, false) || !digits(session, true) || !digits(n, false)
    {
        return None;
    }
    Some((pid.parse().ok()?, u64::from_str_radix(session, 16).ok()?))
}

/// The staging half of a store: owns `staging/` and publishes into `objects/`.
#[derive(Debug)]
pub(crate) struct Stager {
    pub(crate) objects: PathBuf,
    pub(crate) staging: PathBuf,
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) pins: Arc<PinSet>,
    /// Staging files being written right now; GC never removes these, whatever their age.
    pub(crate) in_flight: Mutex<HashSet<PathBuf>>,
    /// Distinguishes this opening of the store from earlier ones of a process with the same pid
    /// (a restarted container often gets the same pid), whose crash may have left staging files
    /// with the names this opening would otherwise reuse.
    session: u64,
    /// Per object, the publishers that linked it (or may be about to) and have not yet made its
    /// directory entry durable, plus any whose directory sync failed. Someone who finds such an
    /// object "already there" syncs the directory itself before relying on it.
    unsynced: Mutex<HashMap<ObjectId, usize, IdHash>>,
    /// Per fan-out directory (by the first byte of the hash): whether a directory sync that began
    /// during this opening succeeded. Such a sync made every entry linked before this opening
    /// durable; without one, whether an entry an earlier opening linked is durable is unknown
    /// (that opening may have crashed between its link and its sync).
    fanout_synced: Vec<AtomicBool>,
    /// The staging and fan-out directories held open, where the vfs offers that.
    dirs: OpenDirs,
    counter: AtomicU64,
}

/// A directory slot: not opened yet, or its open handle.
type DirSlot = Mutex<Option<Arc<dyn VfsDir>>>;

/// Directory handles of the stager (see [`Vfs::open_dir`]), opened on first use. With them, a
/// staged object costs no walk of the store's path and no open and close of its fan-out directory
/// to sync it: one fewer `openat`/`close` pair and two fewer path walks per object, which on a fast
/// file system is a large share of staging a small object. A store that is staged into holds up
/// to 257 descriptors this way (`staging/` and the 256 fan-out directories); where the process has
/// no descriptor left for one, [`Vfs::open_dir`] offers none and the object is staged by path.
#[derive(Debug)]
struct OpenDirs {
    /// The handle of `staging/` once asked for, `None` inside where the vfs offers no handles
    /// (then no directory is held open).
    staging: std::sync::OnceLock<Option<Arc<dyn VfsDir>>>,
    /// By the first byte of the hash.
    fanouts: Vec<DirSlot>,
}

/// A fan-out directory: its path, and its open handle where there is one.
struct Fanout {
    path: PathBuf,
    dir: Option<Arc<dyn VfsDir>>,
}

/// Where publishing names an object: its full path, and where the directory is held open, the
/// handle and the name in it.
pub(crate) struct Dest<'a> {
    path: &'a Path,
    at: Option<(&'a dyn VfsDir, &'a str)>,
}

/// Copies `reader` into `out` in buffer-sized writes: the buffer is filled before each write, so
/// that writes stay large whatever chunks the reader (a pipe, a socket) hands out.
fn copy_filled(
    reader: &mut dyn Read,
    out: &mut Tee<'_>,
    buf: &mut [u8],
    shown: &Path,
) -> Result<()> {
    let mut eof = false;
    while !eof {
        let mut filled = 0;
        while filled < buf.len() {
            match reader.read(&mut buf[filled..]) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("read the object's input", e)),
            }
        }
        out.write_all(&buf[..filled])
            .ctx(|| format!("write staging file {}", shown.display()))?;
    }
    Ok(())
}

fn file_sync(file: &mut dyn VfsFile, shown: &Path) -> Result<()> {
    file.sync()
        .ctx(|| format!("fsync staging file {}", shown.display()))
}

/// Hashes, checksums and counts bytes while they are written.
struct Tee<'a> {
    out: &'a mut dyn VfsFile,
    hash: blake3::Hasher,
    crc: crc32fast::Hasher,
    size: u64,
}

impl Write for Tee<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hash.update(&buf[..n]);
        self.crc.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl Stager {
    pub(crate) fn new(dir: &Path, vfs: Arc<dyn Vfs>) -> Self {
        Stager {
            objects: dir.join("objects"),
            staging: dir.join("staging"),
            vfs,
            pins: Arc::new(PinSet::default()),
            in_flight: Mutex::new(HashSet::new()),
            session: new_session(),
            unsynced: Mutex::new(HashMap::default()),
            fanout_synced: (0..256).map(|_| AtomicBool::new(false)).collect(),
            dirs: OpenDirs {
                staging: std::sync::OnceLock::new(),
                fanouts: (0..256).map(|_| Mutex::new(None)).collect(),
            },
            counter: AtomicU64::new(0),
        }
    }

    /// Who wrote the staging file called `name` (see [`StagingOwner`]).
    pub(crate) fn staging_owner(&self, name: &str) -> StagingOwner {
        match parse_staging_name(name) {
            Some(owner) if owner == (std::process::id(), self.session) => StagingOwner::This,
            Some(_) => StagingOwner::Gone,
            None => StagingOwner::Unknown,
        }
    }

    /// Refuses a handle that another store (or another opening of this one) staged: this store's
    /// GC does not see its pin, and the object may not even exist here.
    pub(crate) fn check_handle(&self, unit: &str, staged: &Staged) -> Result<()> {
        if Arc::ptr_eq(&staged.pin.set, &self.pins) {
            return Ok(());
        }
        Err(Error::InvalidRequest(format!(
            "the object {} for unit {unit:?} was staged by another store (or an earlier opening \
             of this one); stage it with this store before committing it here. Nothing was \
             committed",
            staged.meta.id
        )))
    }

    /// The open handle of `staging/`, opened on first use; `None` where the vfs offers none.
    fn staging_dir(&self) -> Result<Option<&Arc<dyn VfsDir>>> {
        if let Some(dir) = self.dirs.staging.get() {
            return Ok(dir.as_ref());
        }
        let opened = self
            .vfs
            .open_dir(&self.staging)
            .ctx(|| format!("open {}", self.staging.display()))?;
        // Another thread may have opened it meanwhile: keep one.
        Ok(self.dirs.staging.get_or_init(|| opened).as_ref())
    }

    /// Whether directory handles are offered (the vfs is asked once, with `staging/`).
    fn dirs_offered(&self) -> Result<bool> {
        Ok(self.staging_dir()?.is_some())
    }

    /// The open handle of `path` kept in `slot`, opening it if needed; `None` where the vfs
    /// offers no handles (or has no descriptor left): the caller then goes by path.
    fn open_dir(&self, slot: &DirSlot, path: &Path) -> Result<Option<Arc<dyn VfsDir>>> {
        if !self.dirs_offered()? {
            return Ok(None);
        }
        if let Some(dir) = &*slot.lock() {
            return Ok(Some(dir.clone()));
        }
        let opened = self
            .vfs
            .open_dir(path)
            .ctx(|| format!("open {}", path.display()))?;
        // Another thread may have opened it meanwhile: keep one.
        Ok(opened.map(|dir| slot.lock().get_or_insert(dir).clone()))
    }

    /// The fan-out directory of `id`, created (and `objects/` synced) if missing, and open where
    /// handles are offered.
    fn fanout(&self, id: &ObjectId) -> Result<Fanout> {
        let path = self.objects.join(&id.to_hex()[..2]);
        let slot = &self.dirs.fanouts[id.0[0] as usize];
        let dir = match self.open_dir(slot, &path) {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                self.create_fanout(&path)?;
                self.open_dir(slot, &path)?
            }
            other => other?,
        };
        Ok(Fanout { path, dir })
    }

    /// Creates the fan-out directory `path` and makes its entry in `objects/` durable.
    fn create_fanout(&self, path: &Path) -> Result<()> {
        self.vfs
            .create_dir_all(path)
            .ctx(|| format!("create {}", path.display()))?;
        self.vfs
            .sync_dir(&self.objects)
            .ctx(|| format!("fsync {}", self.objects.display()))
    }

    /// Syncs the fan-out directory `fanout` of `id`, and remembers that it succeeded.
    fn sync_fanout(&self, id: &ObjectId, fanout: &Fanout) -> Result<()> {
        match &fanout.dir {
            Some(dir) => dir.sync(),
            None => self.vfs.sync_dir(&fanout.path),
        }
        .ctx(|| format!("fsync {}", fanout.path.display()))?;
        self.fanout_synced[id.0[0] as usize].store(true, Ordering::SeqCst);
        Ok(())
    }

    /// One publisher of `id` is done with it (its directory entry is durable or was not created).
    fn settle(&self, id: ObjectId) {
        let mut u = self.unsynced.lock();
        if let Some(n) = u.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                u.remove(&id);
            }
        }
    }

    /// Where an object lives.
    pub(crate) fn object_path(&self, id: &ObjectId) -> PathBuf {
        self.objects.join(id.rel_path())
    }

    /// Streams `reader` into a staging file, then publishes it. Memory use is one buffer,
    /// whatever the object's size.
    ///
    /// Where the system offers unnamed files (Linux `O_TMPFILE`), the staging file has no name
    /// until it is published as the object: a crash leaves nothing to reclaim, and staging costs
    /// no directory entry to create and remove. Elsewhere it is a named file in `staging/`.
    pub(crate) fn stage_reader(&self, reader: &mut dyn Read) -> Result<Staged> {
        let unnamed = match self.staging_dir()? {
            Some(dir) => dir.create_unnamed(),
            None => self.vfs.create_unnamed(&self.staging),
        }
        .ctx(|| {
            format!(
                "create an unnamed staging file in {}",
                self.staging.display()
            )
        })?;
        match unnamed {
            Some(mut file) => {
                let meta = self.write_durably(&mut *file, reader, &self.staging)?;
                self.publish(meta, &mut |dst| match dst.at {
                    Some((dir, name)) => file.link_no_replace_in(dir, name),
                    None => file.link_no_replace(dst.path),
                })
            }
            None => self.stage_named(reader),
        }
    }

    fn stage_named(&self, reader: &mut dyn Read) -> Result<Staged> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let tmp = self.staging.join(format!(
            "{}-{:x}-{n}.part",
            std::process::id(),
            self.session
        ));
        self.in_flight.lock().insert(tmp.clone());
        let result = self.write_and_publish(&tmp, reader);
        // The staging file is only a name for the bytes until they are linked (or found to exist
        // already): it is removed on success and on failure. A crash leaves it for GC.
        let _ = self.vfs.remove(&tmp);
        self.in_flight.lock().remove(&tmp);
        result
    }

    fn write_and_publish(&self, tmp: &Path, reader: &mut dyn Read) -> Result<Staged> {
        let mut file = self
            .vfs
            .create_new(tmp)
            .ctx(|| format!("create staging file {}", tmp.display()))?;
        let meta = self.write_durably(&mut *file, reader, tmp)?;
        drop(file);
        if !self.vfs.creates_read_only() {
            self.vfs
                .set_read_only(tmp)
                .ctx(|| format!("make {} read-only", tmp.display()))?;
        }
        self.publish(meta, &mut |dst| self.vfs.link_no_replace(tmp, dst.path))
    }

    /// Streams `reader` into `file` while hashing it, and makes the bytes durable. `shown` names
    /// the file in errors.
    fn write_durably(
        &self,
        file: &mut dyn VfsFile,
        reader: &mut dyn Read,
        shown: &Path,
    ) -> Result<ObjectMeta> {
        let mut tee = Tee {
            out: file,
            hash: blake3::Hasher::new(),
            crc: crc32fast::Hasher::new(),
            size: 0,
        };
        // One reused buffer per thread: allocating (and zeroing) 256 KiB per object cost more
        // than staging a small object itself.
        let mut buf = BUFFER.with(|b| b.take());
        buf.resize(BUF, 0);
        let copied = copy_filled(reader, &mut tee, &mut buf, shown);
        BUFFER.with(|b| b.replace(buf));
        copied?;
        let meta = ObjectMeta {
            id: ObjectId(*tee.hash.finalize().as_bytes()),
            size: tee.size,
            crc32: tee.crc.clone().finalize(),
        };
        tee.out
            .flush()
            .ctx(|| format!("write staging file {}", shown.display()))?;
        file_sync(&mut *tee.out, shown)?;
        Ok(meta)
    }

    /// Links the staged bytes at `dst`, the path of object `id`, through `link`, relative to the
    /// open fan-out directory where there is one; creates the fan-out directory if missing.
    /// Returns whether it linked (`false`: already there) and the fan-out directory.
    fn link_object(
        &self,
        id: &ObjectId,
        dst: &Path,
        link: &mut dyn FnMut(&Dest<'_>) -> std::io::Result<bool>,
    ) -> Result<(bool, Fanout)> {
        let name = id.to_hex();
        let mut attempt = |fan: &Fanout| {
            link(&Dest {
                path: dst,
                at: fan.dir.as_deref().map(|d| (d, name.as_str())),
            })
        };
        let mut fan = self.fanout(id)?;
        let mut linked = attempt(&fan);
        if matches!(&linked, Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            // The fan-out directory is missing (without handles it is first created here) or
            // went away since it was opened (removed by hand): forget its handle, create it.
            self.dirs.fanouts[id.0[0] as usize].lock().take();
            self.create_fanout(&fan.path)?;
            fan = self.fanout(id)?;
            linked = attempt(&fan);
        }
        let linked = linked.ctx(|| format!("publish object {}", dst.display()))?;
        Ok((linked, fan))
    }

    /// Pins the object, then links it into place. The pin comes first so that GC, which decides
    /// under the pin lock and deletes only objects unpinned at that moment, cannot remove an
    /// existing copy between our "already there" and our commit. If a GC has already decided to
    /// delete the existing copy (it is doomed), pinning waits until that copy is unlinked, and
    /// the link below then publishes ours.
    /// `link` gives the staged bytes the name it is passed, without replacing anything.
    fn publish(
        &self,
        meta: ObjectMeta,
        link: &mut dyn FnMut(&Dest<'_>) -> std::io::Result<bool>,
    ) -> Result<Staged> {
        let pin = Arc::new(self.pins.pin(meta.id));
        let dst = self.object_path(&meta.id);
        *self.unsynced.lock().entry(meta.id).or_insert(0) += 1;
        let (linked, fanout) = match self.link_object(&meta.id, &dst, link) {
            Ok(done) => done,
            Err(e) => {
                self.settle(meta.id);
                return Err(e);
            }
        };
        // A failed directory sync below returns without settling: the mark stays, and whoever
        // publishes this object later syncs the directory again.
        if linked {
            self.sync_fanout(&meta.id, &fanout)?;
            self.settle(meta.id);
        } else {
            // Found already there. Unless its directory entry is known to be durable, a commit
            // of ours could become durable before the entry does: make it durable first. It is
            // not known when another publisher of this opening linked it and has not (yet, or
            // successfully) synced, nor when an earlier opening linked it and no sync of the
            // directory has succeeded since this opening began (that opening may have crashed
            // before its sync, and what it knew is gone with it).
            let others = self.unsynced.lock().get(&meta.id).is_some_and(|&n| n > 1);
            let unknown = !self.fanout_synced[meta.id.0[0] as usize].load(Ordering::SeqCst);
            if others || unknown {
                self.sync_fanout(&meta.id, &fanout)?;
            }
            self.settle(meta.id);
            // Identical content is already published: a no-op, provided the file is what its name
            // says. A size mismatch means someone damaged it; refuse rather than reference it.
            let len = self
                .vfs
                .metadata(&dst)
                .ctx(|| format!("stat {}", dst.display()))?
                .len();
            if len != meta.size {
                return Err(Error::Corrupt {
                    path: dst,
                    detail: format!(
                        "published object has {len} bytes but its content hash names {} bytes",
                        meta.size
                    ),
                });
            }
        }
        Ok(Staged { meta, pin })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real file system, with its directory handles counted: how many were opened, and how
    /// many syncs went through them.
    #[cfg(target_os = "linux")]
    #[derive(Debug, Default)]
    struct CountingVfs {
        opened: Mutex<Vec<PathBuf>>,
        syncs: Arc<AtomicU64>,
    }

    #[cfg(target_os = "linux")]
    #[derive(Debug)]
    struct CountingDir {
        inner: Arc<dyn VfsDir>,
        syncs: Arc<AtomicU64>,
    }

    #[cfg(target_os = "linux")]
    impl VfsDir for CountingDir {
        fn sync(&self) -> std::io::Result<()> {
            self.syncs.fetch_add(1, Ordering::SeqCst);
            self.inner.sync()
        }
        fn create_unnamed(&self) -> std::io::Result<Option<Box<dyn crate::vfs::UnnamedFile>>> {
            self.inner.create_unnamed()
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self.inner.as_any()
        }
    }

    #[cfg(target_os = "linux")]
    impl Vfs for CountingVfs {
        fn open_dir(&self, path: &Path) -> std::io::Result<Option<Arc<dyn VfsDir>>> {
            self.opened.lock().push(path.to_path_buf());
            let inner = crate::vfs::RealVfs.open_dir(path)?;
            Ok(inner.map(|inner| {
                Arc::new(CountingDir {
                    inner,
                    syncs: self.syncs.clone(),
                }) as Arc<dyn VfsDir>
            }))
        }
        fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn VfsFile>> {
            crate::vfs::RealVfs.create_new(path)
        }
        fn link_no_replace(&self, from: &Path, to: &Path) -> std::io::Result<bool> {
            crate::vfs::RealVfs.link_no_replace(from, to)
        }
        fn remove(&self, path: &Path) -> std::io::Result<()> {
            crate::vfs::RealVfs.remove(path)
        }
        fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
            crate::vfs::RealVfs.sync_dir(path)
        }
        fn set_read_only(&self, path: &Path) -> std::io::Result<()> {
            crate::vfs::RealVfs.set_read_only(path)
        }
        fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
            crate::vfs::RealVfs.create_dir_all(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            crate::vfs::RealVfs.rename(from, to)
        }
        fn metadata(&self, path: &Path) -> std::io::Result<std::fs::Metadata> {
            crate::vfs::RealVfs.metadata(path)
        }
        fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
            crate::vfs::RealVfs.read(path)
        }
    }

    /// Through open directory handles: every new object is published with its bytes and synced
    /// in its fan-out directory (one sync each), each directory is opened once, and a fan-out
    /// directory removed by hand while open is created again rather than linked into.
    #[cfg(target_os = "linux")]
    #[test]
    fn publishing_through_open_directories_keeps_every_object_and_sync() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("staging")).unwrap();
        std::fs::create_dir_all(dir.path().join("objects")).unwrap();
        let vfs = Arc::new(CountingVfs::default());
        let stager = Stager::new(dir.path(), vfs.clone());
        let stage = |bytes: &[u8]| stager.stage_reader(&mut &bytes[..]).unwrap();
        if !stager.dirs_offered().unwrap() {
            eprintln!("no directory handles here: the path-based publishing is used");
            return;
        }
        let mut model = std::collections::BTreeMap::new();
        for i in 0..1000u32 {
            let bytes = format!("object {i}").into_bytes();
            let staged = stage(&bytes);
            assert_eq!(staged.meta().size, bytes.len() as u64);
            model.insert(staged.id(), bytes);
        }
        for (id, bytes) in &model {
            assert_eq!(&std::fs::read(stager.object_path(id)).unwrap(), bytes);
        }
        // The first staging saw `objects/` without its fan-out directories; a handle is opened
        // once per directory (the first tries of the missing ones fail and are not kept).
        let opened = vfs.opened.lock().clone();
        let unique: HashSet<&PathBuf> = opened.iter().collect();
        let fanouts: HashSet<u8> = model.keys().map(|id| id.0[0]).collect();
        assert_eq!(
            unique.len(),
            1 + fanouts.len(),
            "staging/ and each fan-out used"
        );
        assert!(
            opened.len() <= unique.len() + fanouts.len(),
            "{} opens",
            opened.len()
        );
        assert_eq!(
            vfs.syncs.load(Ordering::SeqCst),
            1000,
            "one sync per new object"
        );

        // Already there: a no-op that syncs nothing more (this opening synced the directory).
        let again = stage(b"object 7");
        assert_eq!(
            std::fs::read(stager.object_path(&again.id())).unwrap(),
            b"object 7"
        );
        assert_eq!(vfs.syncs.load(Ordering::SeqCst), 1000);

        // Someone removes a fan-out directory whose handle is open.
        let victim = again.id();
        let fanout = stager.object_path(&victim).parent().unwrap().to_path_buf();
        std::fs::remove_dir_all(&fanout).unwrap();
        let back = stage(b"object 7");
        assert_eq!(back.id(), victim);
        assert_eq!(
            std::fs::read(stager.object_path(&victim)).unwrap(),
            b"object 7"
        );
        assert_eq!(vfs.syncs.load(Ordering::SeqCst), 1001);
    }

    #[test]
    fn staging_names_tell_their_owner() {
        assert_eq!(parse_staging_name("4242-ff01-7.part"), Some((4242, 0xff01)));
        for foreign in [
            "4242-0.part",
            "4242-ff01-7.tmp",
            "sim-crash-3.part",
            "4242-ff01-7-1.part",
            "-ff01-7.part",
            "4242-xyz-7.part",
            "4242-ff01-.part",
            "99999999999-ff01-7.part",
        ] {
            assert_eq!(parse_staging_name(foreign), None, "{foreign}");
        }
        let dir = tempfile::tempdir().unwrap();
        let stager = Stager::new(dir.path(), Arc::new(crate::vfs::RealVfs));
        let ours = format!("{}-{:x}-0.part", std::process::id(), stager.session);
        assert_eq!(stager.staging_owner(&ours), StagingOwner::This);
        let earlier = format!("{}-{:x}-0.part", std::process::id(), stager.session - 1);
        assert_eq!(stager.staging_owner(&earlier), StagingOwner::Gone);
        assert_eq!(stager.staging_owner("notes.txt"), StagingOwner::Unknown);
        // Two openings in one process never share a session.
        let again = Stager::new(dir.path(), Arc::new(crate::vfs::RealVfs));
        assert!(again.session > stager.session);
    }
}
