//! Batched dedup decisions: many "is unit@version committed, with what hash?" questions answered
//! under one acquisition of the dedup index's lock.
//!
//! [`Store::lookup`] takes the index's read lock per call. That atomic read-modify-write also keeps
//! the CPU from overlapping the cache misses of consecutive lookups, and at a million units every
//! lookup misses. Here all keys are hashed first and the probes then run in a tight loop, so many
//! misses are in flight at once.

use crate::error::Result;
use crate::index::key_hash;
use crate::store::{Committed, Store};

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
        self.core().probe_many(
            units.len(),
            |i| key_hash(units[i].as_ref()),
            |i| units[i].as_ref(),
            out,
        )
    }
}
