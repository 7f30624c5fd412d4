//! Batched dedup decisions: many "is unit@version committed, with what hash?" questions answered
//! under one acquisition of the dedup index's lock.
//!
//! [`Store::lookup`] takes the index's read lock per call. That atomic read-modify-write also keeps
//! the CPU from overlapping the cache misses of consecutive lookups, and at a million units every
//! lookup misses. Here all keys are hashed first and the probes then run in a tight loop, so many
//! misses are in flight at once.

use crate::error::Result;
use crate::index::{key_hash, Lookup};
use crate::store::{Committed, Store};

/// Probes per lock acquisition: long enough to overlap many misses, short enough not to hold up
/// the commit leader, which needs the write lock to publish a group.
const CHUNK: usize = 256;

impl Store {
    /// [`Store::lookup`] for many units at once: `out` receives one answer per unit, in order
    /// (it is cleared first).
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = oncelake::Store::open(dir.path().join("lake"))?;
    /// store.put("a", 3, b"x")?;
    /// let mut out = Vec::new();
    /// store.lookup_many(&["a", "b"], &mut out)?;
    /// assert_eq!(out[0].map(|c| c.source_version), Some(3));
    /// assert!(out[1].is_none());
    /// # Ok(()) }
    /// ```
    pub fn lookup_many<S: AsRef<str>>(
        &self,
        units: &[S],
        out: &mut Vec<Option<Committed>>,
    ) -> Result<()> {
        out.clear();
        out.reserve(units.len());
        let mut hashes = [0u64; CHUNK];
        let mut ambiguous = Vec::new();
        for (c, chunk) in units.chunks(CHUNK).enumerate() {
            for (h, u) in hashes.iter_mut().zip(chunk) {
                *h = key_hash(u.as_ref());
            }
            let index = self.inner.index.read();
            for (i, h) in hashes[..chunk.len()].iter().enumerate() {
                out.push(match index.get_by_hash(*h) {
                    Lookup::Absent => None,
                    Lookup::Present(s) => Some(Committed {
                        source_version: s.source_version,
                        object: s.object,
                        seq: s.seq,
                    }),
                    Lookup::Ambiguous => {
                        ambiguous.push(c * CHUNK + i);
                        None
                    }
                });
            }
        }
        // Units whose key hash another unit shares: ask the database (rare).
        if !ambiguous.is_empty() {
            let snap = self.snapshot()?;
            for i in ambiguous {
                out[i] = snap.get(units[i].as_ref())?.map(|e| Committed {
                    source_version: e.source_version,
                    object: e.object.id,
                    seq: e.seq,
                });
            }
        }
        Ok(())
    }
}
