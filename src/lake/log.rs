//! The lake's log: segments created with put-if-absent, read back to resolve every ambiguous
//! answer (SPEC R23, I11).
//!
//! `AlreadyExists` never proves a loss on S3 (object_store retries a 5xx, and the retry of a PUT
//! that took effect answers 412; any 409 maps to it as well), and a timeout proves nothing at
//! all. So whatever the PUT answers other than success, the segment is read back: our bytes
//! (they hold our nonce) mean we won; other bytes mean we lost and must apply them; nothing
//! there means the PUT did not take effect and the same slot is tried again.

use super::{Lake, Retry};
use crate::error::Result;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

/// The outcome of publishing a segment.
#[derive(Debug)]
pub(crate) enum Published {
    /// The slot holds our segment: the group is durable in the lake.
    Won,
    /// Another node's segment holds the slot; its bytes.
    Lost(Vec<u8>),
}

impl Lake {
    /// Reads segment `n`'s bytes, or `None` if there is none (yet). Transient errors are
    /// retried; one that outlasts [`super::RETRY_FOR`] is returned.
    pub(crate) fn read_segment(&self, n: u64) -> Result<Option<Vec<u8>>> {
        let path = ObjectPath::from(super::segment::path(n));
        self.read_if_present(&path, &format!("segment {n}"))
    }

    /// Publishes `bytes` as segment `n` with put-if-absent, resolving every answer but success
    /// by reading the slot back (see the module documentation).
    pub(crate) fn publish(&self, n: u64, bytes: &[u8]) -> Result<Published> {
        let path = ObjectPath::from(super::segment::path(n));
        self.create_once(&path, bytes, &format!("segment {n}"))
    }

    /// Reads the immutable object at `path` (`what` names it in errors), or `None` if there is
    /// none (yet); transient errors are retried as long as [`Retry`] allows.
    pub(crate) fn read_if_present(&self, path: &ObjectPath, what: &str) -> Result<Option<Vec<u8>>> {
        let mut retry = Retry::new();
        loop {
            let r = self.block_on(async {
                match self.store.get_opts(path, Default::default()).await {
                    Ok(g) => g.bytes().await.map(Some),
                    Err(e) => Err(e),
                }
            });
            match r {
                Ok(b) => return Ok(b.map(|b| b.to_vec())),
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => retry.wait_or_fail(self, &format!("read {what}"), &e)?,
            }
        }
    }

    /// Creates the immutable object at `path` once, with put-if-absent: every answer but
    /// success is resolved by reading it back (the module documentation says why), so a lost
    /// response is `Won` and another writer's bytes are `Lost` with them. Segments and
    /// checkpoints are created this way.
    pub(crate) fn create_once(
        &self,
        path: &ObjectPath,
        bytes: &[u8],
        what: &str,
    ) -> Result<Published> {
        let mut retry = Retry::new();
        loop {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            let payload = PutPayload::from(bytes.to_vec());
            let err = match self.block_on(self.store.put_opts(path, payload, opts)) {
                Ok(_) => return Ok(Published::Won),
                Err(e) => e,
            };
            if super::refused(&err) {
                retry.wait_or_fail(self, &format!("create {what}"), &err)?;
            }
            match self.read_if_present(path, what)? {
                Some(found) if found == bytes => return Ok(Published::Won),
                Some(found) => return Ok(Published::Lost(found)),
                // Not there: the PUT did not take effect (a 409 mapped to AlreadyExists, an
                // error before the write). The same slot is still free to race for.
                None => retry.wait_or_fail(self, &format!("create {what}"), &err)?,
            }
        }
    }
}
