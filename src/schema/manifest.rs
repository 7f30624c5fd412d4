//! Manifest entries and their fixed-size encoding in the `MANIFEST` and `HISTORY` tables, and
//! the plan of a history prune (GC's, run by the commit leader), which lives with the history it
//! prunes.
//!
//! The current entry of a unit lives in `MANIFEST` (unit → entry). Every entry it replaced lives
//! in `HISTORY` under (unit, seq) until GC prunes it (format 4; format 3 also kept the current
//! entry there, and a store upgraded from it may still hold such copies, which every reader
//! tolerates). Together they serve reads as of an older seq (SPEC R7) and tell garbage
//! collection what the retention window still references. Writing a history row only when an
//! entry is replaced halves the random B-tree inserts of a store whose commits are mostly new
//! units, and the row is written by whoever applies the replacing commit, from the manifest row
//! it overwrites (`wal::redo`).

use super::codec::{put_u32, put_u64, seal, unseal, Reader};
use super::{HISTORY_TABLE, MANIFEST_TABLE};
use crate::error::{DbContext, Error, Result};
use crate::object::ObjectId as Id;
use crate::object::{ObjectId, ObjectMeta};
use redb::ReadableTable;
use std::collections::HashSet;

/// One committed output of a unit: what it was derived from and which object holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Entry {
    /// The unit key.
    pub unit: String,
    /// The source version the output was derived from.
    pub source_version: u64,
    /// 0 for the first output of this source version; +1 for every deliberate correction.
    pub revision: u32,
    /// The object (content hash), size and CRC32.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub object: ObjectMeta,
    /// The sequence number of the commit that made this entry visible.
    pub seq: u64,
    /// Wall-clock time of that commit, in milliseconds since the Unix epoch (informational; safety
    /// never depends on it).
    pub committed_at_ms: u64,
}

/// The payload of an entry value, before its seal.
pub(crate) const ENTRY_LEN: usize = 8 + 4 + 32 + 8 + 4 + 8 + 8;

/// The part of an entry stored as a manifest or history value (the unit is the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryValue {
    pub source_version: u64,
    pub revision: u32,
    pub object: ObjectMeta,
    pub seq: u64,
    pub committed_at_ms: u64,
}

/// The key of a history row as its seal covers it: the unit, then the seq.
fn history_key(unit: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(unit.len() + 8);
    k.extend_from_slice(unit.as_bytes());
    put_u64(&mut k, seq);
    k
}

impl EntryValue {
    fn payload(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(ENTRY_LEN + super::codec::SEAL_LEN);
        put_u64(&mut b, self.source_version);
        put_u32(&mut b, self.revision);
        b.extend_from_slice(&self.object.id.0);
        put_u64(&mut b, self.object.size);
        put_u32(&mut b, self.object.crc32);
        put_u64(&mut b, self.seq);
        put_u64(&mut b, self.committed_at_ms);
        b
    }

    /// The sealed value of `unit`'s row in `MANIFEST`.
    pub(crate) fn encode(&self, unit: &str) -> Vec<u8> {
        seal(MANIFEST_TABLE, unit.as_bytes(), self.payload())
    }

    /// The sealed value of the `(unit, seq)` row in `HISTORY` (`seq` is the entry's own seq).
    pub(crate) fn encode_history(&self, unit: &str) -> Vec<u8> {
        seal(HISTORY_TABLE, &history_key(unit, self.seq), self.payload())
    }

    /// Decodes `unit`'s `MANIFEST` value, checking its seal.
    pub(crate) fn decode(unit: &str, b: &[u8]) -> Result<Self> {
        let payload = unseal(MANIFEST_TABLE, unit.as_bytes(), unit, b)?;
        Self::decode_payload(MANIFEST_TABLE, unit, payload)
    }

    /// Decodes the `(unit, seq)` `HISTORY` value, checking its seal and that it is the entry of
    /// that seq.
    pub(crate) fn decode_history(unit: &str, seq: u64, b: &[u8]) -> Result<Self> {
        let payload = unseal(HISTORY_TABLE, &history_key(unit, seq), unit, b)?;
        let v = Self::decode_payload(HISTORY_TABLE, unit, payload)?;
        if v.seq != seq {
            return Err(Error::corrupt_record(
                HISTORY_TABLE,
                unit,
                format!("the row of seq {seq} holds the entry of seq {}", v.seq),
            ));
        }
        Ok(v)
    }

    /// Decodes an unsealed payload (a checked seal's content, or a format-1 value).
    pub(crate) fn decode_payload(table: &'static str, unit: &str, b: &[u8]) -> Result<Self> {
        if b.len() != ENTRY_LEN {
            return Err(Error::corrupt_record(
                table,
                unit,
                format!("the value has {} bytes, expected {ENTRY_LEN}", b.len()),
            ));
        }
        let mut r = Reader::new(b, "manifest entry");
        let bad = |e: Error| Error::corrupt_record(table, unit, e.to_string());
        let source_version = r.u64().map_err(bad)?;
        let revision = r.u32().map_err(bad)?;
        let mut id = [0u8; 32];
        id.copy_from_slice(r.take(32).map_err(bad)?);
        Ok(EntryValue {
            source_version,
            revision,
            object: ObjectMeta {
                id: ObjectId(id),
                size: r.u64().map_err(bad)?,
                crc32: r.u32().map_err(bad)?,
            },
            seq: r.u64().map_err(bad)?,
            committed_at_ms: r.u64().map_err(bad)?,
        })
    }

    pub(crate) fn into_entry(self, unit: &str) -> Entry {
        Entry {
            unit: unit.to_string(),
            source_version: self.source_version,
            revision: self.revision,
            object: self.object,
            seq: self.seq,
            committed_at_ms: self.committed_at_ms,
        }
    }
}

impl Entry {
    pub(crate) fn value(&self) -> EntryValue {
        EntryValue {
            source_version: self.source_version,
            revision: self.revision,
            object: self.object,
            seq: self.seq,
            committed_at_ms: self.committed_at_ms,
        }
    }
}

/// The history rows a prune removes, and the horizon that makes that safe.
#[derive(Debug, Default)]
pub(crate) struct PrunePlan {
    /// (unit, seq) of every row to delete.
    pub rows: Vec<(String, u64)>,
    /// The lowest seq that reads may still ask for: every pruned row's successor has a seq at or
    /// below it, so a view as of any seq from here on finds the successor (or a newer row).
    pub horizon: u64,
}

/// Plans a prune: every history row whose successor (the unit's next history row, or for its
/// newest row the current entry in the manifest) was committed at or before `cutoff_ms` (so a
/// retention of zero prunes everything superseded so far, also in the current millisecond) — and,
/// when snapshots are open, at or before `keep_for_seq`, the lowest seq one of them reads as of
/// (a view as of `s` reads a row exactly while `s` is below its successor's seq). One ordered
/// pass over the history, and one manifest lookup per unit it holds rows of.
///
/// A row of the current entry itself (left by format 3, which kept every entry in the history)
/// has no successor and is kept: no read needs it, and removing it could race a group that
/// supersedes the entry and writes that very row.
pub(crate) fn plan_prune<H, M>(
    history: &H,
    manifest: &M,
    cutoff_ms: u64,
    keep_for_seq: Option<u64>,
) -> Result<PrunePlan>
where
    H: ReadableTable<(&'static str, u64), &'static [u8]>,
    M: ReadableTable<&'static str, &'static [u8]>,
{
    let mut plan = PrunePlan::default();
    let mut consider = |unit: &str, seq: u64, successor: &EntryValue| {
        if keep_for_seq.is_none_or(|pinned| successor.seq <= pinned)
            && successor.committed_at_ms <= cutoff_ms
        {
            plan.rows.push((unit.to_string(), seq));
            plan.horizon = plan.horizon.max(successor.seq);
        }
    };
    let mut prev: Option<(String, u64)> = None;
    for row in history.iter().db("scan the history")? {
        let (k, v) = row.db("scan the history")?;
        let (unit, seq) = k.value();
        if let Some((prev_unit, prev_seq)) = prev.take() {
            if prev_unit == unit {
                consider(
                    &prev_unit,
                    prev_seq,
                    &EntryValue::decode_history(unit, seq, v.value())?,
                );
            } else if let Some(current) = current_successor(manifest, &prev_unit, prev_seq)? {
                consider(&prev_unit, prev_seq, &current);
            }
        }
        prev = Some((unit.to_string(), seq));
    }
    if let Some((unit, seq)) = prev {
        if let Some(current) = current_successor(manifest, &unit, seq)? {
            consider(&unit, seq, &current);
        }
    }
    Ok(plan)
}

/// The current entry of `unit` as the successor of its newest history row, of seq `seq`: `None`
/// when that row is the current entry itself (format 3's copy). A unit with history and no
/// current entry, or a current entry older than its history, is damage.
fn current_successor<M>(manifest: &M, unit: &str, seq: u64) -> Result<Option<EntryValue>>
where
    M: ReadableTable<&'static str, &'static [u8]>,
{
    let current = super::codec::get_sealed(manifest, MANIFEST_TABLE, unit, EntryValue::decode)?
        .ok_or_else(|| {
            Error::corrupt_record(
                HISTORY_TABLE,
                unit,
                format!("its history row of seq {seq} has no current entry in the manifest"),
            )
        })?;
    match current.seq.cmp(&seq) {
        std::cmp::Ordering::Greater => Ok(Some(current)),
        std::cmp::Ordering::Equal => Ok(None),
        std::cmp::Ordering::Less => Err(Error::corrupt_record(
            HISTORY_TABLE,
            unit,
            format!(
                "its history row of seq {seq} is newer than its current entry (seq {})",
                current.seq
            ),
        )),
    }
}

/// [`plan_prune`] on the history as of `txn` (GC's dry run).
pub(crate) fn plan_prune_as_of(
    txn: &redb::ReadTransaction,
    cutoff_ms: u64,
    keep_for_seq: Option<u64>,
) -> Result<PrunePlan> {
    let history = txn.open_table(super::HISTORY).db("open the history")?;
    let manifest = txn.open_table(super::MANIFEST).db("open the manifest")?;
    plan_prune(&history, &manifest, cutoff_ms, keep_for_seq)
}

/// Adds every object a kept entry references, as of `txn`: the manifest and the history.
pub(crate) fn referenced_objects(
    txn: &redb::ReadTransaction,
    skip_rows: &HashSet<(String, u64)>,
) -> Result<HashSet<Id>> {
    let mut set = HashSet::new();
    let manifest = txn.open_table(super::MANIFEST).db("open the manifest")?;
    for row in manifest.iter().db("scan the manifest")? {
        let (k, v) = row.db("scan the manifest")?;
        set.insert(EntryValue::decode(k.value(), v.value())?.object.id);
    }
    let history = txn.open_table(super::HISTORY).db("open the history")?;
    for row in history.iter().db("scan the history")? {
        let (k, v) = row.db("scan the history")?;
        let (unit, seq) = k.value();
        if !skip_rows.is_empty() && skip_rows.contains(&(unit.to_string(), seq)) {
            continue;
        }
        set.insert(EntryValue::decode_history(unit, seq, v.value())?.object.id);
    }
    Ok(set)
}

/// An entry of `seq` at `version` with an object named after its seq, for unit tests.
#[cfg(test)]
pub(crate) fn test_entry(seq: u64, version: u64) -> EntryValue {
    EntryValue {
        source_version: version,
        revision: 0,
        object: ObjectMeta {
            id: ObjectId::of(&seq.to_le_bytes()),
            size: 8,
            crc32: 0,
        },
        seq,
        committed_at_ms: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_value_round_trips() {
        let v = EntryValue {
            source_version: u64::MAX - 3,
            revision: 7,
            object: ObjectMeta {
                id: ObjectId::of(b"x"),
                size: 12345,
                crc32: 0xdead_beef,
            },
            seq: 99,
            committed_at_ms: 1_700_000_000_000,
        };
        assert_eq!(EntryValue::decode("u", &v.encode("u")).unwrap(), v);
        assert!(EntryValue::decode("u", &v.encode("u")[..10]).is_err());
        assert!(
            EntryValue::decode("v", &v.encode("u")).is_err(),
            "another key"
        );
        let h = v.encode_history("u");
        assert_eq!(EntryValue::decode_history("u", 99, &h).unwrap(), v);
        assert!(
            EntryValue::decode_history("u", 98, &h).is_err(),
            "another seq"
        );
        assert!(
            EntryValue::decode("u", &h).is_err(),
            "a history value in the manifest"
        );
    }
}
