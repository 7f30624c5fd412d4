//! Objects in the lake: uploaded before the segment that references them, fetched into the
//! node's own `objects/` before a segment that references them is applied (SPEC R23, I2).
//!
//! Names are content addressed (`objects/<hh>/<blake3>`), the same relative path as in a store
//! directory, so an upload is idempotent and a fetch needs nothing but the entry. That is safe
//! only while nothing deletes objects from the lake: the GC fence of the design (unique names,
//! deletes after a fence record) is not built yet, and no command deletes lake objects.

use super::{Lake, Retry};
use crate::error::{Error, IoContext, Result};
use crate::object::{ObjectId, ObjectMeta};
use crate::stage::{Staged, Stager};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutOptions, PutPayload};

fn path_of(id: &ObjectId) -> ObjectPath {
    ObjectPath::from(format!("objects/{}", id.rel_path()))
}

impl Lake {
    /// Uploads the object at `local` as `id`, unless this node uploaded it already.
    pub(crate) fn upload(&self, id: &ObjectId, local: &std::path::Path) -> Result<()> {
        if self.uploaded.lock().contains(id) {
            return Ok(());
        }
        let bytes =
            std::fs::read(local).ctx(|| format!("read {} to upload it", local.display()))?;
        let path = path_of(id);
        let mut retry = Retry::new();
        loop {
            let payload = PutPayload::from(bytes.clone());
            match self.block_on(self.store.put_opts(&path, payload, PutOptions::default())) {
                Ok(_) => break,
                Err(e) => retry.wait_or_fail(self, &format!("upload object {id}"), &e)?,
            }
        }
        let mut up = self.uploaded.lock();
        // A bound on memory; forgetting only costs a repeated (idempotent) upload.
        if up.len() >= 1 << 16 {
            up.clear();
        }
        up.insert(*id);
        Ok(())
    }

    /// Fetches object `meta` into the node's `objects/` (through staging, so it is checked
    /// against its hash, size and CRC like any staged object); the handle pins it.
    pub(crate) fn fetch(&self, meta: &ObjectMeta, stager: &Stager) -> Result<Staged> {
        let path = path_of(&meta.id);
        let mut retry = Retry::new();
        let bytes = loop {
            let r = self.block_on(async {
                match self.store.get_opts(&path, Default::default()).await {
                    Ok(g) => g.bytes().await,
                    Err(e) => Err(e),
                }
            });
            match r {
                Ok(b) => break b,
                Err(e @ object_store::Error::NotFound { .. }) => {
                    return Err(self.error(
                        format!("fetch object {}", meta.id),
                        e.to_string(),
                        "the log references an object the lake does not hold: it was deleted \
                         by hand or the lake is damaged; restore it from a backup",
                    ))
                }
                Err(e) => retry.wait_or_fail(self, &format!("fetch object {}", meta.id), &e)?,
            }
        };
        let staged = stager.stage_reader(&mut &bytes[..])?;
        if staged.meta() != *meta {
            return Err(Error::Corrupt {
                path: std::path::PathBuf::from(format!("{}/{}", self.url, path)),
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
