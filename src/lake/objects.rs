//! Objects in the lake: uploaded before the segment that references them, fetched into the
//! node's own `objects/` before a segment that references them is applied, or when first read
//! on a node started from a checkpoint (SPEC R23, I2).
//!
//! Names are unique per commit: `objects/<hh>/<blake3>.<seq>`, the content hash and the seq of
//! the commit that references the object (decided before the upload). A fetch needs nothing
//! but the entry (its object and its seq), and no name is ever referenced by two commits: a seq
//! is committed once, and every segment after a node's replica at `A` commits seqs of at least
//! `next_seq(A)`. That is what makes deleting from the lake safe (`lake::gc`): a name whose seq
//! is below `next_seq(A)` and that nothing at `A` references can never be referenced again, so
//! a paused uploader's object may be deleted only when its segment can no longer land.

use super::{Lake, Retry};
use crate::error::{Error, IoContext, Result};
use crate::object::{ObjectId, ObjectMeta};
use crate::stage::{Staged, Stager};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutOptions, PutPayload};
use std::path::{Path, PathBuf};

/// Requests for one group's objects (its uploads, or a segment's fetches) in flight at once:
/// enough to hide a round trip per object, few enough not to swamp the object store (or the
/// client's one thread).
const UPLOADS_AT_ONCE: usize = 32;

/// The lake's name of object `id` as referenced by the commit of `seq`.
pub(crate) fn path_of(id: &ObjectId, seq: u64) -> ObjectPath {
    ObjectPath::from(format!("objects/{}.{seq}", id.rel_path()))
}

/// The object and seq a lake object's name is for, if it is one (`objects/<hh>/<hex>.<seq>`).
pub(crate) fn parse_name(name: &str) -> Option<(ObjectId, u64)> {
    let rest = name.strip_prefix("objects/")?;
    let (fan, file) = rest.split_once('/')?;
    let (hex, seq) = file.split_once('.')?;
    let id: ObjectId = hex.parse().ok()?;
    (fan.len() == 2 && hex.starts_with(fan) && hex.len() == 64)
        .then(|| seq.parse().ok().map(|s| (id, s)))
        .flatten()
}

impl Lake {
    /// Uploads each object `(id, seq, local)` as `id` for the commit of `seq`, unless this node
    /// uploaded it under that name already; at most [`UPLOADS_AT_ONCE`] PUTs in flight. Returns
    /// once every one is in the lake, or with the first error (whatever else took effect is an
    /// unreferenced object, as an uploader's crash leaves).
    pub(crate) fn upload_all(&self, objects: &[(ObjectId, u64, PathBuf)]) -> Result<u64> {
        let todo: Vec<_> = {
            let up = self.uploaded.lock();
            objects
                .iter()
                .filter(|(id, seq, _)| !up.contains(&(*id, *seq)))
                .collect()
        };
        let done = self.block_on(
            futures_util::stream::iter(todo)
                .map(|(id, seq, local)| async move {
                    self.upload_one(id, *seq, local).await.map(|()| (*id, *seq))
                })
                .buffer_unordered(UPLOADS_AT_ONCE)
                .collect::<Vec<_>>(),
        );
        let mut up = self.uploaded.lock();
        // A bound on memory; forgetting only costs a repeated (idempotent) upload.
        if up.len() >= 1 << 16 {
            up.clear();
        }
        let mut first_err = None;
        let mut count = 0;
        for r in done {
            match r {
                Ok(name) => {
                    up.insert(name);
                    count += 1;
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(count), Err)
    }

    /// One upload of [`Lake::upload_all`], retried like any request.
    async fn upload_one(&self, id: &ObjectId, seq: u64, local: &Path) -> Result<()> {
        // Objects are small and local: reading one blocks the client's thread for less than
        // the request it feeds.
        let bytes = Bytes::from(
            std::fs::read(local).ctx(|| format!("read {} to upload it", local.display()))?,
        );
        let path = path_of(id, seq);
        let mut retry = Retry::new();
        loop {
            let payload = PutPayload::from(bytes.clone());
            match self
                .store
                .put_opts(&path, payload, PutOptions::default())
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) => {
                    let wait = retry.next_wait(self, &format!("upload object {id}"), &e)?;
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Fetches object `meta`, as the commit of `seq` references it, into the node's `objects/`
    /// (through staging, so it is checked against its hash, size and CRC like any staged
    /// object); the handle pins it.
    pub(crate) fn fetch(&self, meta: &ObjectMeta, seq: u64, stager: &Stager) -> Result<Staged> {
        self.fetch_if_present(meta, seq, stager)?.ok_or_else(|| {
            self.error(
                format!("fetch object {}", meta.id),
                format!("{} is not in the lake", path_of(&meta.id, seq)),
                "the log references an object the lake does not hold: it was deleted by hand, \
                 or by GC after its history was pruned, or the lake is damaged; restore it \
                 from a backup",
            )
        })
    }

    /// [`Lake::fetch`], or `None` if the lake does not hold the object.
    pub(crate) fn fetch_if_present(
        &self,
        meta: &ObjectMeta,
        seq: u64,
        stager: &Stager,
    ) -> Result<Option<Staged>> {
        let t = std::time::Instant::now();
        let got = match self.block_on(self.get_object(meta, seq))? {
            Some(bytes) => self.stage_checked(meta, seq, &bytes, stager).map(Some),
            None => Ok(None),
        };
        super::timings::add(super::timings::Phase::Fetch, t);
        got
    }

    /// [`Lake::fetch_if_present`] of each `(meta, seq)` (a segment from another node references
    /// objects this node has never seen; a table publish links objects a node started from a
    /// checkpoint has not read yet): [`UPLOADS_AT_ONCE`] at a time, their GETs in flight
    /// together and their durable writes on threads of their own (each one waits for a sync).
    /// The handles of those the lake holds, or the first error.
    pub(crate) fn fetch_all_if_present(
        &self,
        wanted: &[(ObjectMeta, u64)],
        stager: &Stager,
    ) -> Result<Vec<Staged>> {
        let t = std::time::Instant::now();
        let mut pins = Vec::with_capacity(wanted.len());
        for chunk in wanted.chunks(UPLOADS_AT_ONCE) {
            let got = self.block_on(futures_util::future::join_all(
                chunk.iter().map(|(meta, seq)| self.get_object(meta, *seq)),
            ));
            let staged = std::thread::scope(|s| {
                let handles: Vec<_> = chunk
                    .iter()
                    .zip(got)
                    .map(|((meta, seq), got)| {
                        s.spawn(move || match got? {
                            Some(b) => self.stage_checked(meta, *seq, &b, stager).map(Some),
                            None => Ok(None),
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect::<Vec<_>>()
            });
            for r in staged {
                pins.extend(r?);
            }
        }
        super::timings::add(super::timings::Phase::Fetch, t);
        Ok(pins)
    }

    /// The bytes of object `meta` as the commit of `seq` references it, or `None` if the lake
    /// does not hold it; retried like any request.
    async fn get_object(&self, meta: &ObjectMeta, seq: u64) -> Result<Option<Bytes>> {
        let path = path_of(&meta.id, seq);
        let mut retry = Retry::new();
        loop {
            let r = match self.store.get_opts(&path, Default::default()).await {
                Ok(g) => g.bytes().await,
                Err(e) => Err(e),
            };
            match r {
                Ok(b) => return Ok(Some(b)),
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => {
                    let wait = retry.next_wait(self, &format!("fetch object {}", meta.id), &e)?;
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Stages a fetched object, checked against its hash, size and CRC as the log records them.
    fn stage_checked(
        &self,
        meta: &ObjectMeta,
        seq: u64,
        bytes: &[u8],
        stager: &Stager,
    ) -> Result<Staged> {
        let staged = stager.stage_reader(&mut &bytes[..])?;
        if staged.meta() != *meta {
            return Err(Error::Corrupt {
                path: std::path::PathBuf::from(format!("{}/{}", self.url, path_of(&meta.id, seq))),
                detail: format!(
                    "the lake's object {} reads back as {:?}, not as the log records it ({meta:?})",
                    meta.id,
                    staged.meta()
                ),
            });
        }
        Ok(staged)
    }
}
