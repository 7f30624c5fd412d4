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
use crate::schema::wal::{GroupRedo, Keyed};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

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

/// The unapplied groups a snapshot reads over its read transaction, oldest first, numbered one
/// after the other from the transaction's newest group on.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    groups: Vec<GroupRedo>,
}

impl Tail {
    pub(crate) fn new(groups: Vec<GroupRedo>) -> Tail {
        assert!(
            groups
                .windows(2)
                .all(|w| w[1].number() == w[0].number() + 1),
            "invariant: a tail's groups follow one another"
        );
        Tail { groups }
    }

    /// The store's newest seq and history horizon once the tail is applied (`None` for an empty
    /// tail: the transaction's own hold).
    pub(crate) fn seq_and_horizon(&self) -> Result<Option<(u64, u64)>> {
        let Some(last) = self.groups.last() else {
            return Ok(None);
        };
        let (next_seq, history_from) = last.seq_rows()?;
        Ok(Some((next_seq.saturating_sub(1), history_from)))
    }

    /// The unit's newest entry of seq `upto` or older that the tail holds; `None` when it holds
    /// none (the transaction's current entry then answers, which is older than any of the tail's).
    pub(crate) fn entry(&self, unit: &str, upto: u64) -> Result<Option<EntryValue>> {
        for g in self.groups.iter().rev() {
            for (key, value) in g.keyed_rows(Keyed::Manifest)?.rev() {
                if key != unit.as_bytes() {
                    continue;
                }
                let v = EntryValue::decode(unit, value)?;
                if v.seq <= upto {
                    return Ok(Some(v));
                }
            }
        }
        Ok(None)
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
        for g in self.groups.iter().rev() {
            if let Some((_, v)) = g
                .keyed_rows(table)?
                .rev()
                .find(|(k, _)| *k == key.as_bytes())
            {
                return Ok(Some(v));
            }
        }
        Ok(None)
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
    use crate::schema::wal::Redo;

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
