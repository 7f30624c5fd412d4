//! Typed reads of the string-keyed tables for the layers above (pipelines, the dedup index's
//! fallback): the store's tables as of one read transaction, with the newest rows of the
//! acknowledged groups it lacks laid over them (the tail, `super`).

use super::{merge_step, Tail};
use crate::error::{DbContext, Error, Result};
use crate::schema::claim::ClaimRecord;
use crate::schema::manifest::EntryValue;
use crate::schema::{
    codec, extension, CLAIMS, CLAIMS_TABLE, EXTENSIONS, EXTENSIONS_TABLE, HISTORY, MANIFEST,
    MANIFEST_TABLE,
};
use crate::wal::redo::Keyed;
use redb::ReadOnlyTable;
use std::cell::OnceCell;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

type StrTable = ReadOnlyTable<&'static str, &'static [u8]>;

/// Typed reads of the unit-keyed tables as of one read transaction *and* the acknowledged groups
/// it does not hold yet (its tail, [`super::Tail`]): the internal API higher layers (pipelines)
/// use instead of opening tables and decoding values. Together the two hold every group
/// acknowledged before they were taken (`Core::begin_read_with_tail`), so a reader sees every
/// acknowledged commit without waiting for the backlog. A row the tail holds for a key is newer
/// than the transaction's, so the tail answers first.
pub(crate) struct Tables {
    manifest: StrTable,
    claims: StrTable,
    /// `None` in a store whose B-trees hold no extension yet (its tail may).
    extensions: Option<StrTable>,
    /// Superseded manifest entries by (unit, seq), for [`Tables::entry_before`].
    history: ReadOnlyTable<(&'static str, u64), &'static [u8]>,
    tail: Tail,
    /// The tail's manifest rows by unit, built on the first [`Tables::entry_before`].
    tail_entries: OnceCell<HashMap<String, Vec<EntryValue>>>,
}

impl Tables {
    /// Opens the tables as of `txn`, with `tail` over them.
    pub(crate) fn open(txn: &redb::ReadTransaction, tail: Tail) -> Result<Tables> {
        let extensions = match txn.open_table(EXTENSIONS) {
            Ok(t) => Some(t),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(Error::db("open the extensions table", e)),
        };
        Ok(Tables {
            manifest: txn.open_table(MANIFEST).db("open the manifest")?,
            claims: txn.open_table(CLAIMS).db("open the claims")?,
            extensions,
            history: txn.open_table(HISTORY).db("open the history")?,
            tail,
            tail_entries: OnceCell::new(),
        })
    }

    /// `unit`'s current entry (checked as `codec::get_sealed` checks).
    pub(crate) fn entry(&self, unit: &str) -> Result<Option<EntryValue>> {
        // The snapshot's `get` reads the tail the same way (with its own seq as the bound).
        if let Some(v) = self.tail.entry(unit)? {
            return Ok(Some(v));
        }
        codec::get_sealed(&self.manifest, MANIFEST_TABLE, unit, EntryValue::decode)
    }

    /// `unit`'s newest entry of seq below `before_seq` and source version at most `max_version`,
    /// current or superseded: the tail's rows first (all newer than the transaction's), then the
    /// transaction's current entry, then its history rows. `None` when there is none, also when
    /// GC pruned the history row that would answer.
    pub(crate) fn entry_before(
        &self,
        unit: &str,
        before_seq: u64,
        max_version: u64,
    ) -> Result<Option<EntryValue>> {
        let fits = |v: &EntryValue| v.seq < before_seq && v.source_version <= max_version;
        let tail = match self.tail_entries.get() {
            Some(t) => t,
            None => {
                let built = self.tail.entries_by_unit()?;
                self.tail_entries.get_or_init(|| built)
            }
        };
        if let Some(v) = tail
            .get(unit)
            .and_then(|rows| rows.iter().rev().find(|v| fits(v)))
        {
            return Ok(Some(*v));
        }
        let current = codec::get_sealed(&self.manifest, MANIFEST_TABLE, unit, EntryValue::decode)?;
        if let Some(v) = current.filter(fits) {
            return Ok(Some(v));
        }
        let rows = self
            .history
            .range((unit, 0)..(unit, before_seq))
            .db("read the history")?;
        for row in rows.rev() {
            let (k, v) = row.db("read the history")?;
            let (_, seq) = k.value();
            let v = EntryValue::decode_history(unit, seq, v.value())?;
            if fits(&v) {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// `unit`'s newest lease.
    pub(crate) fn claim(&self, unit: &str) -> Result<Option<ClaimRecord>> {
        if let Some(v) = self.tail.newest(Keyed::Claims, unit)? {
            return ClaimRecord::decode(unit, v).map(Some);
        }
        codec::get_sealed(&self.claims, CLAIMS_TABLE, unit, ClaimRecord::decode)
    }

    /// `key`'s extension record: the seq that wrote it and its data.
    pub(crate) fn extension(&self, key: &str) -> Result<Option<(u64, Vec<u8>)>> {
        let split = |k: &str, v: &[u8]| extension::decode(k, v).map(|(s, d)| (s, d.to_vec()));
        if let Some(v) = self.tail.newest(Keyed::Extensions, key)? {
            return split(key, v).map(Some);
        }
        let Some(t) = &self.extensions else {
            return Ok(None);
        };
        codec::get_sealed(t, EXTENSIONS_TABLE, key, split)
    }

    /// Calls `f` on every manifest entry whose unit starts with `prefix`, in key order.
    pub(crate) fn entries_with_prefix(
        &self,
        prefix: &str,
        mut f: impl FnMut(&str, EntryValue) -> Result<()>,
    ) -> Result<()> {
        self.scan(Keyed::Manifest, Some(&self.manifest), prefix, |k, v| {
            f(k, EntryValue::decode(k, v)?)
        })
    }

    /// Calls `f` on every lease whose unit starts with `prefix`, in key order.
    pub(crate) fn claims_with_prefix(
        &self,
        prefix: &str,
        mut f: impl FnMut(&str, ClaimRecord) -> Result<()>,
    ) -> Result<()> {
        self.scan(Keyed::Claims, Some(&self.claims), prefix, |k, v| {
            f(k, ClaimRecord::decode(k, v)?)
        })
    }

    /// Calls `f` on every extension record (key, seq, data) whose key starts with `prefix`.
    pub(crate) fn extensions_with_prefix(
        &self,
        prefix: &str,
        mut f: impl FnMut(&str, u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        self.scan(
            Keyed::Extensions,
            self.extensions.as_ref(),
            prefix,
            |k, v| {
                let (seq, data) = extension::decode(k, v)?;
                f(k, seq, data)
            },
        )
    }

    /// Calls `f` on every row (key, stored value) of `table`, `keyed` in the tail, whose key
    /// starts with `prefix`, in key order: the tail's newest value over the table's.
    fn scan(
        &self,
        keyed: Keyed,
        table: Option<&StrTable>,
        prefix: &str,
        f: impl FnMut(&str, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let rows = self.tail.newest_with_prefix(keyed, prefix)?;
        scan_prefix(table, rows, prefix, f)
    }
}

type Row = (
    redb::AccessGuard<'static, &'static str>,
    redb::AccessGuard<'static, &'static [u8]>,
);

/// Calls `f` on every row of `table` (if it exists) whose key starts with `prefix`, in key
/// order, with the tail's newest rows of those keys (`tail`) laid over it: a key the tail holds
/// is read from the tail only.
fn scan_prefix(
    table: Option<&StrTable>,
    tail: BTreeMap<&str, &[u8]>,
    prefix: &str,
    mut f: impl FnMut(&str, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut scan = match table {
        Some(t) => Some(t.range::<&str>(prefix..).db("scan a table")?),
        None => None,
    };
    let mut next_row = || -> Result<Option<Row>> {
        let Some(range) = scan.as_mut() else {
            return Ok(None);
        };
        if let Some(row) = range.next() {
            let row = row.db("scan a table")?;
            if row.0.value().starts_with(prefix) {
                return Ok(Some(row));
            }
        }
        // Past the prefix (or the table's end): nothing more of the table is read.
        scan = None;
        Ok(None)
    };
    let mut row = next_row()?;
    let mut tail = tail.into_iter().peekable();
    loop {
        let step = merge_step(
            row.as_ref().map(|(k, _)| Ok(k.value())),
            tail.peek().map(|(k, _)| *k),
        );
        match step {
            None => return Ok(()),
            // merge_step takes a side only when it has a row.
            Some(Ordering::Less) => {
                if let Some((k, v)) = row.take() {
                    f(k.value(), v.value())?;
                }
                row = next_row()?;
            }
            Some(step) => {
                if step == Ordering::Equal {
                    row = next_row()?;
                }
                if let Some((k, v)) = tail.next() {
                    f(k, v)?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::claim::ClaimOutcome;
    use crate::pipeline::{Pipeline, PipelineDef};
    use crate::{Options, Store};
    use std::time::Duration;

    fn pipeline(code: u64) -> Pipeline {
        Pipeline::new(
            PipelineDef::builder()
                .stage("a", code, &[])
                .build()
                .unwrap(),
        )
    }

    /// Every read of `Tables` — point reads and prefix scans of the manifest, the claims and
    /// the extensions — as the store's tables plus a tail of newer rows of the same and of other
    /// keys (some in the same group twice), and what the same read gives once the tail is
    /// applied.
    fn reads(store: &Store) -> Vec<String> {
        let t = store.core().tables().unwrap();
        let keys = [
            ".pipeline/definition",
            ".pipeline/source/u0",
            ".pipeline/source/u1",
            ".pipeline/source/u9",
            "c0",
            "c1",
            "c2",
            "c3",
            "zz",
        ];
        let mut out = Vec::new();
        for k in keys {
            out.push(format!("entry {k}: {:?}", t.entry(k).unwrap()));
            out.push(format!("claim {k}: {:?}", t.claim(k).unwrap()));
            out.push(format!("extension {k}: {:?}", t.extension(k).unwrap()));
        }
        for prefix in ["", ".pipeline/", ".pipeline/source/u1", "c", "c1", "d"] {
            t.entries_with_prefix(prefix, |k, v| {
                out.push(format!("entries {prefix:?}: {k} {v:?}"));
                Ok(())
            })
            .unwrap();
            t.claims_with_prefix(prefix, |k, v| {
                out.push(format!("claims {prefix:?}: {k} {v:?}"));
                Ok(())
            })
            .unwrap();
            t.extensions_with_prefix(prefix, |k, s, d| {
                out.push(format!("extensions {prefix:?}: {k} {s} {d:?}"));
                Ok(())
            })
            .unwrap();
        }
        out
    }

    fn lease(outcome: ClaimOutcome) -> crate::claim::Lease {
        match outcome {
            ClaimOutcome::Granted { lease, .. } => lease,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[test]
    fn tables_over_a_tail_read_what_the_applied_tables_hold() {
        let dir = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(600);
        let store = Store::open_with(dir.path().join("lake"), Options::held_backlog()).unwrap();
        // Applied: sources, leases and a definition.
        let p1 = pipeline(1);
        for u in ["u0", "u1"] {
            p1.set_source_version(&store, u, 1, b"v1").unwrap();
        }
        lease(store.claim("c0", 1, "w0", ttl).unwrap());
        let c1 = lease(store.claim("c1", 1, "w1", ttl).unwrap());
        p1.record_definition(&store).unwrap();
        store.flush().unwrap();
        let applied = reads(&store);
        // In the tail only: a new version, a new unit, a released and retaken lease, a new
        // lease, a new definition, and a lease released again (so a key's newest row is in a
        // later group than another row of it).
        p1.set_source_version(&store, "u1", 2, b"v2").unwrap();
        p1.set_source_version(&store, "u9", 1, b"v1").unwrap();
        store.release(&c1).unwrap();
        let c1 = lease(store.claim("c1", 1, "w2", ttl).unwrap());
        lease(store.claim("c2", 1, "w2", ttl).unwrap());
        pipeline(2).record_definition(&store).unwrap();
        store.release(&c1).unwrap();
        let waiting = store.backlog();
        assert!(waiting.units > 0, "the newer rows wait in the backlog");
        let over_tail = reads(&store);
        assert_eq!(store.backlog(), waiting, "a read leaves the backlog alone");
        assert_ne!(over_tail, applied, "the tail's rows are read");
        store.flush().unwrap();
        assert_eq!(store.backlog().units, 0);
        assert_eq!(reads(&store), over_tail);
    }
}
