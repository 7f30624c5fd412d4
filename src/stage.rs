//! Staging: writing an object privately, making it durable, and publishing it under its content
//! hash with an atomic no-replace link (SPEC R2).
//!
//! A staged object is *pinned* from before it is published until every handle to it is dropped.
//! Garbage collection never removes a pinned object, which closes the race in which identical
//! content is staged again (the publish is then a no-op on an old, unreferenced file) while GC is
//! about to delete that file.

use crate::error::{Error, IoContext, Result};
use crate::object::{ObjectId, ObjectMeta};
use crate::vfs::Vfs;
use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const BUF: usize = 256 * 1024;

thread_local! {
    /// The staging buffer of this thread, reused across objects.
    static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Objects that staging holds on to; GC consults it under its lock.
#[derive(Debug, Default)]
pub(crate) struct PinSet {
    pins: Mutex<HashMap<ObjectId, usize>>,
}

impl PinSet {
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<ObjectId, usize>> {
        self.pins.lock()
    }
}

/// A durable, published object, ready to be committed. Cloning it keeps the pin.
#[derive(Clone, Debug)]
pub struct Staged {
    meta: ObjectMeta,
    _pin: Arc<Pin>,
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
        let mut pins = self.set.lock();
        if let Some(n) = pins.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&self.id);
            }
        }
    }
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
    unsynced: Mutex<HashMap<ObjectId, usize>>,
    counter: AtomicU64,
}

/// Hashes, checksums and counts bytes while they are written.
struct Tee<'a> {
    out: &'a mut dyn Write,
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
            session: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            unsynced: Mutex::new(HashMap::new()),
            counter: AtomicU64::new(0),
        }
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
    pub(crate) fn stage_reader(&self, reader: &mut dyn Read) -> Result<Staged> {
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
        let meta = {
            let mut tee = Tee {
                out: &mut file,
                hash: blake3::Hasher::new(),
                crc: crc32fast::Hasher::new(),
                size: 0,
            };
            // One reused buffer per thread: allocating (and zeroing) 256 KiB per object cost more
            // than staging a small object itself.
            let mut buf = BUFFER.with(|b| b.take());
            buf.resize(BUF, 0);
            let mut eof = false;
            while !eof {
                // Fill the buffer before writing, so that writes stay large whatever chunks the
                // reader (a pipe, a socket) hands out.
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
                tee.write_all(&buf[..filled])
                    .ctx(|| format!("write staging file {}", tmp.display()))?;
            }
            BUFFER.with(|b| b.replace(buf));
            let meta = ObjectMeta {
                id: ObjectId(*tee.hash.finalize().as_bytes()),
                size: tee.size,
                crc32: tee.crc.clone().finalize(),
            };
            tee.out
                .flush()
                .ctx(|| format!("write staging file {}", tmp.display()))?;
            meta
        };
        file.sync()
            .ctx(|| format!("fsync staging file {}", tmp.display()))?;
        drop(file);
        if !self.vfs.creates_read_only() {
            self.vfs
                .set_read_only(tmp)
                .ctx(|| format!("make {} read-only", tmp.display()))?;
        }
        self.publish(tmp, meta)
    }

    /// Pins the object, then links it into place. The pin comes first so that GC, which deletes
    /// only unpinned objects and does so under the pin lock, cannot remove an existing copy
    /// between our "already there" and our commit.
    fn publish(&self, tmp: &Path, meta: ObjectMeta) -> Result<Staged> {
        let pin = {
            let mut pins = self.pins.lock();
            *pins.entry(meta.id).or_insert(0) += 1;
            Arc::new(Pin {
                id: meta.id,
                set: self.pins.clone(),
            })
        };
        let dst = self.object_path(&meta.id);
        let fanout = dst
            .parent()
            .expect("invariant: object paths have a fan-out parent")
            .to_path_buf();
        *self.unsynced.lock().entry(meta.id).or_insert(0) += 1;
        let link = || -> Result<bool> {
            match self.vfs.link_no_replace(tmp, &dst) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.vfs
                        .create_dir_all(&fanout)
                        .ctx(|| format!("create {}", fanout.display()))?;
                    self.vfs
                        .sync_dir(&self.objects)
                        .ctx(|| format!("fsync {}", self.objects.display()))?;
                    self.vfs.link_no_replace(tmp, &dst)
                }
                other => other,
            }
            .ctx(|| format!("publish object {}", dst.display()))
        };
        let linked = match link() {
            Ok(l) => l,
            Err(e) => {
                self.settle(meta.id);
                return Err(e);
            }
        };
        // A failed directory sync below returns without settling: the mark stays, and whoever
        // publishes this object later syncs the directory again.
        if linked {
            self.vfs
                .sync_dir(&fanout)
                .ctx(|| format!("fsync {}", fanout.display()))?;
            self.settle(meta.id);
        } else {
            // Found already there. If another publisher linked it and its directory sync has
            // not (successfully) completed, a commit of ours could become durable before the
            // entry does: make the entry durable ourselves first.
            let others = self.unsynced.lock().get(&meta.id).is_some_and(|&n| n > 1);
            if others {
                self.vfs
                    .sync_dir(&fanout)
                    .ctx(|| format!("fsync {}", fanout.display()))?;
            }
            self.settle(meta.id);
            // Identical content is already published: a no-op, provided the file is what its name
            // says. A size mismatch means someone damaged it; refuse rather than reference it.
            let len = std::fs::metadata(&dst)
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
        Ok(Staged { meta, _pin: pin })
    }
}
