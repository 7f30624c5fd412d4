//! A snapshot's *tail*: the groups acknowledged before the snapshot began that its read
//! transaction does not contain yet, because the backlog has not applied them to the B-trees.
//!
//! A commit is acknowledged once its group's record is durable in the write-ahead log; the
//! B-trees follow in large batches (`backlog`). A snapshot reads the B-trees as of its read
//! transaction *and* the redo of the groups after it (`Core::begin_read_with_tail`), so it sees
//! every acknowledged commit without waiting for the applier, and nothing that is not durable
//! (a group reaches the backlog only after its record synced). The groups are shared with the
//! backlog, not copied; the rows a reader needs are parsed once per group
//! (`GroupRedo::read_rows`).
//!
//! Every group's seqs are above every seq of the transaction and of the groups before it, so
//! the tail answers first for what it holds and the transaction for the rest. The argument is
//! in docs/commit.md ("Readers"). The typed table reads of the layers above ([`Tables`]) take
//! the same listing and lay the tail's newest manifest, claim and extension rows over their
//! transaction the same way.

mod tables;
pub(crate) use tables::Tables;

use crate::error::{Error, Result};
use crate::schema::log::Record;
use crate::schema::manifest::EntryValue;
use crate::wal::backlog::{Backlog, Unlisted};
use crate::wal::redo::{GroupRedo, Keyed};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

/// The next step of a merge of a scan of the read transaction's manifest with the tail's
/// entries (both in key order), from the key each side holds next (`Err` for a row of the scan
/// that failed): `Less` takes the scan's row (an error is reported where it occurs), `Equal`
/// both, the tail's entry replacing the row, and `Greater` the tail's entry; `None` when both
/// are done.
pub(crate) fn merge_step(table: Option<Result<&str, ()>>, tail: Option<&str>) -> Option<Ordering> {
    Some(match (table, tail) {
        (None, None) => return None,
        (Some(Err(())), _) | (Some(Ok(_)), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (Some(Ok(t)), Some(u)) => t.cmp(u),
    })
}

/// A snapshot's tail as it keeps it: the numbers of the groups its read transaction lacks
/// (`after + 1 ..= upto`), read in place from the backlog's queue and its key index, and the seq
/// and horizon the newest of them leaves. It holds no redo: a snapshot costs the same whatever the
/// backlog holds, a point read is one probe of the backlog's key index, and what open snapshots
/// keep in memory is nothing beyond the backlog itself (which the backlog's bound bounds). Once a
/// group of it is applied the backlog no longer lists it ([`Gone`]): the snapshot then reads as
/// of its seq from a newer read transaction, which holds the group (`snapshot`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveTail {
    after: u64,
    upto: u64,
    /// `(newest seq, history horizon)` once the tail is applied; `None` for an empty tail.
    seq_rows: Option<(u64, u64)>,
    /// Entries of a newer seq are not read (a view as of a seq within the tail).
    seq_limit: u64,
}

/// The groups of a [`LiveTail`] were applied meanwhile: read them from a newer read transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gone;

impl LiveTail {
    /// The groups `after + 1 ..= upto`; `newest` is group `upto` (when `upto > after`).
    pub(crate) fn new(after: u64, upto: u64, newest: Option<&GroupRedo>) -> Result<LiveTail> {
        let seq_rows = match newest {
            Some(g) if upto > after => {
                assert_eq!(
                    g.number(),
                    upto,
                    "invariant: a live tail's seq comes from its own newest group"
                );
                let (next_seq, history_from) = g.seq_rows()?;
                Some((next_seq.saturating_sub(1), history_from))
            }
            _ => None,
        };
        Ok(LiveTail {
            after,
            upto: upto.max(after),
            seq_rows,
            seq_limit: u64::MAX,
        })
    }

    /// The same tail read as of `seq`: entries of newer seqs are left out.
    pub(crate) fn as_of(self, seq: u64) -> LiveTail {
        LiveTail {
            seq_limit: seq,
            ..self
        }
    }

    /// The tail without its groups (a view that reads the transaction alone).
    pub(crate) fn emptied(self) -> LiveTail {
        LiveTail {
            upto: self.after,
            seq_rows: None,
            ..self
        }
    }

    /// The newest group it reaches (the transaction's own when it is empty).
    pub(crate) fn upto(&self) -> u64 {
        self.upto
    }

    /// The store's newest seq and history horizon once the tail is applied (`None` for an empty
    /// tail: the transaction's own hold).
    pub(crate) fn seq_and_horizon(&self) -> Option<(u64, u64)> {
        self.seq_rows
    }

    /// Whether it holds no group.
    pub(crate) fn is_empty(&self) -> bool {
        self.upto == self.after
    }

    /// The unit's newest entry the tail holds; `None` when it holds none (the transaction's
    /// current entry then answers, which is older than any of the tail's).
    pub(crate) fn entry(
        &self,
        backlog: &Backlog<GroupRedo>,
        unit: &str,
    ) -> Result<Result<Option<EntryValue>, Gone>> {
        if self.is_empty() {
            return Ok(Ok(None));
        }
        let rows = match backlog.rows_of(
            Keyed::Manifest.slot(),
            unit.as_bytes(),
            self.after,
            self.upto,
        ) {
            Ok(rows) => rows,
            Err(Unlisted::Applied) => return Ok(Err(Gone)),
            Err(Unlisted::Stopped(cause)) => return Err(Error::Failed { cause }),
        };
        for (group, row) in rows {
            let (_, value) = group.keyed_row(Keyed::Manifest, row)?;
            let v = EntryValue::decode(unit, value)?;
            // Rows come newest first (a group's own rows of the unit too): a view as of a seq
            // within the tail skips those of newer seqs.
            if v.seq <= self.seq_limit {
                return Ok(Ok(Some(v)));
            }
        }
        Ok(Ok(None))
    }

    /// Its groups, held for one read that walks them all (a range scan, the change feed).
    pub(crate) fn groups(&self, backlog: &Backlog<GroupRedo>) -> Result<Result<Tail, Gone>> {
        if self.is_empty() {
            return Ok(Ok(Tail::default()));
        }
        match backlog.between(self.after, self.upto) {
            Ok(groups) => Ok(Ok(Tail::new(groups))),
            Err(Unlisted::Applied) => Ok(Err(Gone)),
            Err(Unlisted::Stopped(cause)) => Err(Error::Failed { cause }),
        }
    }
}

/// Per table, per key: where its newest row is among a [`Tail`]'s groups (group, row).
type LocalIndex =
    [std::collections::HashMap<Box<[u8]>, (usize, u32)>; crate::wal::backlog::KEY_TABLES];

/// Unapplied groups held for the length of one read (a range scan, the change feed) or of one
/// call's typed table reads ([`Tables`]), oldest first, numbered one after the other from the
/// read transaction's newest group on.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    groups: Vec<GroupRedo>,
    /// Built by the first point read ([`Tail::newest`]), so each costs one probe after it.
    index: OnceLock<LocalIndex>,
}

impl Tail {
    pub(crate) fn new(groups: Vec<GroupRedo>) -> Tail {
        assert!(
            groups
                .windows(2)
                .all(|w| w[1].number() == w[0].number() + 1),
            "invariant: a tail's groups follow one another"
        );
        Tail {
            groups,
            index: OnceLock::new(),
        }
    }

    fn index(&self) -> Result<&LocalIndex> {
        if let Some(index) = self.index.get() {
            return Ok(index);
        }
        let mut index = LocalIndex::default();
        for (at, g) in self.groups.iter().enumerate() {
            g.parse_for_readers()?;
            // Oldest group first, rows in order: a later row of a key replaces an earlier one.
            for (table, key, row) in g.index_keys() {
                index[table].insert(key.into(), (at, row));
            }
        }
        Ok(self.index.get_or_init(|| index))
    }

    /// The unit's newest entry that the tail holds; `None` when it holds none (the
    /// transaction's current entry then answers, which is older than any of the tail's).
    pub(crate) fn entry(&self, unit: &str) -> Result<Option<EntryValue>> {
        match self.newest(Keyed::Manifest, unit)? {
            Some(v) => EntryValue::decode(unit, v).map(Some),
            None => Ok(None),
        }
    }

    /// Per unit with `start <= unit < end` (no end: every unit from `start`), the newest entry of
    /// seq `upto` or older that the tail holds, in key order.
    pub(crate) fn entries(
        &self,
        start: &str,
        end: Option<&str>,
        upto: u64,
    ) -> Result<BTreeMap<String, EntryValue>> {
        let mut out = BTreeMap::new();
        for g in &self.groups {
            for (key, value) in g.keyed_rows(Keyed::Manifest)? {
                let unit = utf8(key)?;
                if unit < start || end.is_some_and(|e| unit >= e) {
                    continue;
                }
                let v = EntryValue::decode(unit, value)?;
                // Groups and their rows come oldest first: a later row replaces an earlier one.
                if v.seq <= upto {
                    out.insert(unit.to_string(), v);
                }
            }
        }
        Ok(out)
    }

    /// Every manifest row the tail holds, by unit, oldest first (a reader that looks up many
    /// units' older entries builds this once instead of walking the groups per unit).
    pub(crate) fn entries_by_unit(&self) -> Result<HashMap<String, Vec<EntryValue>>> {
        let mut out: HashMap<String, Vec<EntryValue>> = HashMap::new();
        for g in &self.groups {
            for (key, value) in g.keyed_rows(Keyed::Manifest)? {
                let unit = utf8(key)?;
                let v = EntryValue::decode(unit, value)?;
                out.entry(unit.to_string()).or_default().push(v);
            }
        }
        Ok(out)
    }

    /// The newest row of `key` in `table` that the tail holds, as the table would store it;
    /// `None` when it holds none (the transaction's row then answers, which is older).
    pub(crate) fn newest(&self, table: Keyed, key: &str) -> Result<Option<&[u8]>> {
        let Some(&(at, row)) = self.index()?[table.slot()].get(key.as_bytes()) else {
            return Ok(None);
        };
        self.groups[at].keyed_row(table, row).map(|(_, v)| Some(v))
    }

    /// Per key of `table` that starts with `prefix`, the newest row the tail holds, in key
    /// order.
    pub(crate) fn newest_with_prefix(
        &self,
        table: Keyed,
        prefix: &str,
    ) -> Result<BTreeMap<&str, &[u8]>> {
        let mut out = BTreeMap::new();
        for g in &self.groups {
            for (key, value) in g.keyed_rows(table)? {
                let key = utf8(key)?;
                if key.starts_with(prefix) {
                    // Groups and their rows come oldest first: a later row replaces an earlier one.
                    out.insert(key, value);
                }
            }
        }
        Ok(out)
    }

    /// The log records with `after < seq <= upto`, oldest first.
    pub(crate) fn records(&self, after: u64, upto: u64) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for g in &self.groups {
            for (seq, bytes) in g.log_rows()? {
                if seq <= after || seq > upto {
                    continue;
                }
                let rec = Record::decode(bytes)?;
                if rec.seq != seq {
                    return Err(Error::corrupt_record(
                        "log",
                        &format!("seq {seq}"),
                        format!(
                            "a commit group in memory holds the record of seq {} under it",
                            rec.seq
                        ),
                    ));
                }
                out.push(rec);
            }
        }
        Ok(out)
    }
}

/// A key of a group in memory (the leader wrote it from a `&str`).
fn utf8(key: &[u8]) -> Result<&str> {
    std::str::from_utf8(key).map_err(|_| {
        Error::BadRecord("a commit group in memory holds a key that is not UTF-8".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::redo::Redo;

    fn group(number: u64, rows: &[(Keyed, &str, &str)]) -> GroupRedo {
        let mut redo = Redo::default();
        for (table, key, value) in rows {
            match table {
                Keyed::Manifest => redo.manifest(key, value.as_bytes()),
                Keyed::Claims => redo.claims(key, value.as_bytes()),
                Keyed::Extensions => redo.extensions(key, value.as_bytes()),
            }
        }
        GroupRedo::new(number, redo, rows.len())
    }

    /// A key's newest row is the last one of the newest group that has it, also when a group
    /// (several writers' commits decided together) holds two rows of it; rows of one table never
    /// answer for another.
    #[test]
    fn the_newest_row_of_a_key_answers_per_table() {
        use Keyed::*;
        let tail = Tail::new(vec![
            group(
                7,
                &[
                    (Claims, "k1", "c1 old"),
                    (Claims, "k2", "c2 old"),
                    (Manifest, "k1", "m1"),
                    (Claims, "k1", "c1 new"),
                    (Extensions, "k3", "e3"),
                ],
            ),
            group(8, &[(Claims, "k2", "c2 new"), (Claims, "j", "cj")]),
        ]);
        let newest = |t, k| {
            tail.newest(t, k)
                .unwrap()
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(newest(Claims, "k1").as_deref(), Some("c1 new"));
        assert_eq!(newest(Claims, "k2").as_deref(), Some("c2 new"));
        assert_eq!(newest(Manifest, "k1").as_deref(), Some("m1"));
        assert_eq!(newest(Extensions, "k3").as_deref(), Some("e3"));
        assert_eq!(newest(Claims, "k3"), None);
        assert_eq!(newest(Manifest, "k2"), None);
        let with_prefix = |t, p| {
            tail.newest_with_prefix(t, p)
                .unwrap()
                .into_iter()
                .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v)))
                .collect::<Vec<_>>()
        };
        assert_eq!(with_prefix(Claims, "k"), ["k1=c1 new", "k2=c2 new"]);
        assert_eq!(with_prefix(Claims, ""), ["j=cj", "k1=c1 new", "k2=c2 new"]);
        assert_eq!(with_prefix(Claims, "k2"), ["k2=c2 new"]);
        assert_eq!(with_prefix(Manifest, "k"), ["k1=m1"]);
        assert!(with_prefix(Extensions, "k1").is_empty());
    }
}
