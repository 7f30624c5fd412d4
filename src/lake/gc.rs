//! Deleting from the lake (SPEC R23, I8): a GC round's deletions, decided at a position of the
//! log, and carried out after it.
//!
//! The fence is the segment `A` the node's replica has applied when the round decides (after the
//! round's own history prune, itself a segment): every seq below `next_seq(A)` is decided for
//! good by segments up to `A`, and every later segment commits seqs of at least `next_seq(A)`.
//! A lake object's name carries the seq of the commit it was uploaded for (`lake::objects`), so
//! a name with a seq below `next_seq(A)` that no entry at `A` (manifest or kept history)
//! references can never be referenced again. A later commit takes a seq of at least
//! `next_seq(A)`. A paused uploader decided on some `A'` and took `next_seq(A')`: below
//! `next_seq(A)` only if `A' < A`, and then its segment can only be `A' + 1 <= A` — either it is
//! (the entry references the name at `A`: kept) or another segment holds that slot (its create
//! fails, it decides again with a new seq and uploads under a new name). So the deletes may run
//! late, twice, or on two nodes at once (overlapping rounds), and a round paused between
//! deciding and deleting deletes nothing that became referenced meanwhile. Names at or above
//! `next_seq(A)` (uploads of groups not decided yet) are never touched.
//!
//! A round also deletes every checkpoint but the newest [`CHECKPOINTS_KEPT`]; segments stay, so
//! the log is still replayable from segment 1.

use super::objects::{parse_name, path_of};
use super::{Lake, Retry};
use crate::error::{DbContext, Result};
use crate::object::ObjectId;
use crate::schema::manifest::EntryValue;
use crate::schema::{meta, HISTORY, MANIFEST, META};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use redb::{ReadTransaction, ReadableTable};
use std::collections::HashSet;

/// Checkpoints a GC round keeps, newest first: one more than the newest, so a damaged newest
/// one still leaves a checkpoint to start a node from.
pub(crate) const CHECKPOINTS_KEPT: usize = 2;

/// A round's decision.
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    /// The names to delete.
    pub doomed: Vec<ObjectPath>,
    /// Names listed and kept (referenced, or of a seq not decided at the fence).
    pub kept: u64,
}

/// Every (object, seq) an entry references as of `txn` (the manifest and the kept history),
/// and the seq the next commit gets.
fn referenced(txn: &ReadTransaction) -> Result<(HashSet<(ObjectId, u64)>, u64)> {
    let mut set = HashSet::new();
    let manifest = txn.open_table(MANIFEST).db("open the manifest")?;
    for row in manifest.iter().db("scan the manifest")? {
        let (k, v) = row.db("scan the manifest")?;
        let e = EntryValue::decode(k.value(), v.value())?;
        set.insert((e.object.id, e.seq));
    }
    let history = txn.open_table(HISTORY).db("open the history")?;
    for row in history.iter().db("scan the history")? {
        let (k, v) = row.db("scan the history")?;
        let (unit, seq) = k.value();
        let e = EntryValue::decode_history(unit, seq, v.value())?;
        set.insert((e.object.id, e.seq));
    }
    let next = meta::get(
        &txn.open_table(META).db("open the meta table")?,
        meta::NEXT_SEQ,
    )?;
    Ok((set, next))
}

impl Lake {
    /// Decides a round's deletions at the replica read by `txn` (the fence; see the module
    /// documentation) and the checkpoints beyond the newest kept. A listing that lags only misses
    /// names, which stay for a later round.
    pub(crate) fn plan_sweep(&self, txn: &ReadTransaction) -> Result<Sweep> {
        use futures_util::StreamExt;
        let (referenced, below) = referenced(txn)?;
        let prefix = ObjectPath::from("objects");
        let mut retry = Retry::new();
        let listed = loop {
            let listed: Vec<_> = self.block_on(self.store.list(Some(&prefix)).collect());
            match listed.into_iter().collect::<Result<Vec<_>, _>>() {
                Ok(l) => break l,
                Err(e) => retry.wait_or_fail(self, "list the lake's objects", &e)?,
            }
        };
        let mut sweep = Sweep::default();
        // Checkpoints are shortcuts through the log: all but the newest few listed go. A lagging
        // listing only misses the newest, so at least that many stay whole.
        for n in self.list_checkpoints()?.iter().skip(CHECKPOINTS_KEPT) {
            sweep
                .doomed
                .push(ObjectPath::from(super::checkpoint::path(*n)));
        }
        for meta in listed {
            match parse_name(meta.location.as_ref()) {
                Some((id, seq)) if seq < below && !referenced.contains(&(id, seq)) => {
                    sweep.doomed.push(path_of(&id, seq));
                }
                // Not an object's name: not ours to delete.
                _ => sweep.kept += 1,
            }
        }
        Ok(sweep)
    }

    /// Deletes `path` from the lake; one already gone counts as deleted.
    pub(crate) fn delete_object(&self, path: &ObjectPath) -> Result<()> {
        let mut retry = Retry::new();
        loop {
            match self.block_on(self.store.delete(path)) {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => return Ok(()),
                Err(e) => retry.wait_or_fail(self, &format!("delete {path}"), &e)?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_object_and_the_seq() {
        let id = ObjectId::of(b"x");
        let p = path_of(&id, 42);
        assert_eq!(parse_name(p.as_ref()), Some((id, 42)));
        let hex = id.to_hex();
        for bad in [
            format!("objects/{}/{hex}", &hex[..2]),
            format!("objects/zz/{hex}.1"),
            format!("objects/{}/{hex}.x", &hex[..2]),
            format!("log/{hex}.1"),
        ] {
            assert_eq!(parse_name(&bad), None, "{bad}");
        }
    }
}
