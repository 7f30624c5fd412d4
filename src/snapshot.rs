//! Consistent read-only views (SPEC R7): the manifest as of the newest commit or as of an older
//! seq within the kept history, object reads (bytes, file, memory map) and the change feed.
//!
//! A snapshot is a redb read transaction plus its *tail* (`tail`): the acknowledged groups the
//! backlog has not applied to the B-trees yet, read from their redo. Together they hold every
//! commit acknowledged before the snapshot began, so it sees every commit up to its seq and
//! nothing of any later one, and no reader ever sees part of a commit (I4); nor does it wait
//! for the applier.
//!
//! An open snapshot also *pins* its seq in the store's `ReaderPins` (`core`): GC prunes no history row
//! that a view as of a pinned seq reads, whatever the retention, so (I8) it keeps every object
//! such a view can read. Dropping the snapshot releases the pin. The argument is in docs/gc-verify-faults.md.

use crate::core::{Core, ReaderPin};
use crate::error::{DbContext, Error, IoContext, Result};
use crate::schema::log::{LogTable, Record};
use crate::schema::manifest::{Entry, EntryValue};
use crate::schema::meta::seq_and_horizon;
use crate::schema::{HISTORY, MANIFEST, MANIFEST_TABLE};
use crate::wal::tail::{Gone, LiveTail};
use parking_lot::RwLock;
use redb::ReadOnlyTable;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

/// A consistent view of the manifest as of one seq.
///
/// While it is open it pins what it can read: GC keeps the history rows it reads, and their
/// objects, whatever the retention. Dropping it releases the pin.
pub struct Snapshot {
    /// What its reads read: a read transaction, and the acknowledged groups it lacks (read in
    /// place from the backlog). Replaced by a newer transaction read as of the same seq once the
    /// backlog applied those groups ([`Snapshot::reread`]).
    view: RwLock<Arc<View>>,
    /// The newest seq this view contains.
    seq: u64,
    /// The newest group it contains.
    group: u64,
    history_from: u64,
    core: Arc<Core>,
    /// Keeps GC from pruning the rows (and deleting the objects) this view reads.
    _pin: ReaderPin,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // In a forked child this may be the last reference to the parent's open store, whose
        // close must not run here (`owner`): leak one.
        if !self.core.owner.is_current() {
            std::mem::forget(Arc::clone(&self.core));
        }
    }
}

/// One read transaction's tables and the tail of acknowledged groups it lacks, read as of the
/// snapshot's seq.
struct View {
    manifest: ReadOnlyTable<&'static str, &'static [u8]>,
    history: ReadOnlyTable<(&'static str, u64), &'static [u8]>,
    log: LogTable,
    /// Set when the transaction is newer than the snapshot's seq: reads go to the history (the
    /// tail, whose seqs are all newer than the transaction's, plays no part).
    at: Option<u64>,
    /// The acknowledged groups the transaction lacks; their entries of the snapshot's seq or
    /// older answer before the transaction's.
    tail: LiveTail,
}

/// The current manifest's rows and the tail's entries over them ([`Snapshot::current_manifest`]).
pub(crate) type CurrentManifest = (
    redb::Range<'static, &'static str, &'static [u8]>,
    std::collections::BTreeMap<String, EntryValue>,
);

/// Entries in key order.
pub type Entries = Box<dyn Iterator<Item = Result<Entry>>>;

impl Snapshot {
    pub(crate) fn new(core: &Arc<Core>, at: Option<u64>) -> Result<Snapshot> {
        crate::error::contain(|| Self::begin(core, at))
    }

    fn begin(core: &Arc<Core>, at: Option<u64>) -> Result<Snapshot> {
        let readers = &core.readers;
        // Pinned before the read begins, at or before the seq it reads as of, so a prune either
        // sees the pin or keeps this view whole (`ReaderPins`).
        let pin = match at {
            Some(seq) => readers.register_at(seq),
            None => readers.register_newest(),
        };
        let (txn, tail) = core.begin_read_live(None)?;
        let (txn_newest, txn_from) = seq_and_horizon(&txn)?;
        let (newest, history_from) = tail.seq_and_horizon().unwrap_or((txn_newest, txn_from));
        if let Some(asked) = at {
            if asked > newest || asked < history_from {
                return Err(Error::SeqOutOfRange {
                    asked,
                    oldest: history_from,
                    newest,
                });
            }
        }
        let seq = at.unwrap_or(newest);
        let group = tail.upto();
        Ok(Snapshot {
            view: RwLock::new(Arc::new(View::open(&txn, seq, tail)?)),
            seq,
            group,
            history_from,
            core: core.clone(),
            _pin: pin,
        })
    }

    /// Runs a read on the current view; when the backlog applied groups the view read from its
    /// queue, on a view of a newer transaction as of the same seq.
    fn read<T>(&self, mut f: impl FnMut(&View) -> Result<Result<T, Gone>>) -> Result<T> {
        loop {
            let view = self.view.read().clone();
            match f(&view)? {
                Ok(t) => return Ok(t),
                Err(Gone) => self.reread(&view)?,
            }
        }
    }

    /// Replaces `stale` (unless another read did) by a view of a new read transaction, which holds
    /// the groups applied since, with the tail cut at this snapshot's group and the reads as of
    /// its seq. The pin keeps every history row such a read needs (I8). So a snapshot keeps no
    /// group's redo alive: what open snapshots hold in memory is bounded by the backlog alone.
    fn reread(&self, stale: &Arc<View>) -> Result<()> {
        let mut view = self.view.write();
        if !Arc::ptr_eq(&view, stale) {
            return Ok(());
        }
        let (txn, tail) = self.core.begin_read_live(Some(self.group))?;
        *view = Arc::new(View::open(&txn, self.seq, tail)?);
        Ok(())
    }

    /// The newest seq visible in this view.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// When this view reads the newest rows of its transaction: the current manifest's rows
    /// and, by unit, the tail's entries that replace or add to them (reconcile walks the two
    /// directly, merging them, to avoid building whole entries).
    pub(crate) fn current_manifest(&self) -> Result<Option<CurrentManifest>> {
        self.read(|v| {
            if v.at.is_some() {
                return Ok(Ok(None));
            }
            let tail = match v.tail.groups(&self.core.backlog)? {
                Ok(tail) => tail,
                Err(gone) => return Ok(Err(gone)),
            };
            let entries = tail.entries("", None, self.seq)?;
            let rows = v.manifest.range::<&str>(..).db("scan the manifest")?;
            Ok(Ok(Some((rows, entries))))
        })
    }

    /// The oldest seq that can still be read as of.
    pub fn history_from(&self) -> u64 {
        self.history_from
    }

    /// The unit's entry as of this view.
    pub fn get(&self, unit: &str) -> Result<Option<Entry>> {
        crate::error::contain(|| {
            self.read(|v| match v.at {
                None => match v.tail.entry(&self.core.backlog, unit)? {
                    Ok(Some(e)) => Ok(Ok(Some(e.into_entry(unit)))),
                    Ok(None) => v.get_current(unit).map(Ok),
                    Err(gone) => Ok(Err(gone)),
                },
                Some(at) => v.get_as_of(unit, at).map(Ok),
            })
        })
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> Result<Entries> {
        self.range("", None)
    }

    /// The entries whose key starts with `prefix`, in key order.
    pub fn prefix(&self, prefix: &str) -> Result<Entries> {
        let p = prefix.to_string();
        let it = self.range(prefix, None)?;
        Ok(Box::new(it.take_while(move |e| match e {
            Ok(e) => e.unit.starts_with(&p),
            Err(_) => true,
        })))
    }

    /// The entries with `start <= key < end` (no end: to the last key), in key order.
    pub fn range(&self, start: &str, end: Option<&str>) -> Result<Entries> {
        let entries = crate::error::contain(|| {
            self.read(|v| v.range(&self.core.backlog, self.seq, start, end))
        })?;
        Ok(Box::new(crate::error::Contained::new(entries)))
    }

    /// The path of the entry's object.
    pub fn object_path(&self, entry: &Entry) -> PathBuf {
        self.core.stager.object_path(&entry.object.id)
    }

    /// Opens the entry's object for streaming reads.
    pub fn open_object(&self, entry: &Entry) -> Result<File> {
        let path = self.object_path(entry);
        // A lake node started from a checkpoint fetches objects when first read (SPEC R23).
        #[cfg(feature = "lake")]
        let _pin = match &self.core.lake {
            Some(lake) if !path.exists() => {
                Some(lake.fetch(&entry.object, entry.seq, &self.core.stager)?)
            }
            _ => None,
        };
        File::open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::MissingObject {
                object: entry.object.id.to_hex(),
                unit: entry.unit.clone(),
            },
            _ => Error::io(format!("open {}", path.display()), e),
        })
    }

    /// Reads the entry's object and checks its size and CRC32 against the manifest (I2).
    pub fn read_object(&self, entry: &Entry) -> Result<Vec<u8>> {
        let mut f = self.open_object(entry)?;
        let mut buf = Vec::with_capacity(entry.object.size as usize);
        f.read_to_end(&mut buf)
            .ctx(|| format!("read object {}", entry.object.id))?;
        check_object(entry, &buf)?;
        Ok(buf)
    }

    /// Maps the entry's object into memory, after checking its size and CRC32.
    pub fn map_object(&self, entry: &Entry) -> Result<memmap2::Mmap> {
        let f = self.open_object(entry)?;
        if entry.object.size == 0 {
            // An empty file cannot be mapped; an empty anonymous map reads the same.
            return memmap2::MmapOptions::new()
                .len(0)
                .map_anon()
                .and_then(|m| m.make_read_only())
                .ctx(|| "map an empty object");
        }
        // SAFETY: objects are immutable: they are published read-only under their content hash
        // and never modified in place. GC may unlink one, which keeps an existing mapping valid.
        // A file damaged by someone outside the engine is caught by the CRC check below.
        let map =
            unsafe { memmap2::Mmap::map(&f) }.ctx(|| format!("map object {}", entry.object.id))?;
        check_object(entry, &map)?;
        Ok(map)
    }

    /// The log records after `seq`, oldest first, streaming.
    pub fn changes_since(&self, seq: u64) -> Result<impl Iterator<Item = Result<Record>>> {
        let upto = self.seq;
        let (rows, tail) = crate::error::contain(|| {
            self.read(|v| {
                let tail = match v.tail.groups(&self.core.backlog)? {
                    Ok(tail) => tail,
                    Err(gone) => return Ok(Err(gone)),
                };
                // The tail's records are all newer than the transaction's.
                let records = tail.records(seq, upto)?;
                Ok(Ok((v.log.range(seq.saturating_add(1)..)?, records)))
            })
        })?;
        let records = rows.map(|row| {
            let (key, rec) = row?;
            let rec = rec?;
            if rec.seq != key {
                return Err(Error::corrupt_record(
                    "log",
                    &format!("seq {key}"),
                    format!("its row holds the record of seq {}", rec.seq),
                ));
            }
            Ok(rec)
        });
        Ok(crate::error::Contained::new(records)
            .take_while(move |r| r.as_ref().map_or(true, |r| r.seq <= upto))
            .chain(tail.into_iter().map(Ok)))
    }
}

impl View {
    /// The tables of `txn`, with `tail` over them, read as of `seq`.
    fn open(txn: &redb::ReadTransaction, seq: u64, tail: LiveTail) -> Result<View> {
        let (txn_newest, _) = seq_and_horizon(txn)?;
        let at = (seq < txn_newest).then_some(seq);
        Ok(View {
            manifest: txn.open_table(MANIFEST).db("open the manifest")?,
            history: txn.open_table(HISTORY).db("open the history")?,
            log: LogTable::open(txn)?,
            at,
            tail: match at {
                Some(_) => tail.emptied(),
                None => tail.as_of(seq),
            },
        })
    }

    fn get_current(&self, unit: &str) -> Result<Option<Entry>> {
        let v = crate::schema::codec::get_sealed(
            &self.manifest,
            MANIFEST_TABLE,
            unit,
            EntryValue::decode,
        )?;
        Ok(v.map(|v| v.into_entry(unit)))
    }

    fn get_as_of(&self, unit: &str, at: u64) -> Result<Option<Entry>> {
        // The current entry lives in the manifest only; the history holds the entries it
        // replaced. So the view as of `at` is the current entry when that is old enough.
        if let Some(current) = self.get_current(unit)? {
            if current.seq <= at {
                return Ok(Some(current));
            }
        }
        let mut rows = self
            .history
            .range((unit, 0)..=(unit, at))
            .db("read the history")?;
        let found = match rows.next_back() {
            None => None,
            Some(row) => {
                let (k, v) = row.db("read the history")?;
                let (_, seq) = k.value();
                Some(EntryValue::decode_history(unit, seq, v.value())?.into_entry(unit))
            }
        };
        // As for the manifest: a damaged key next to the answer could hide a newer row.
        let next = self
            .history
            .range((unit, at.saturating_add(1))..)
            .db("read the history")?;
        let prev = self.history.range(..(unit, 0)).db("read the history")?;
        for row in next.take(1).chain(prev.rev().take(1)) {
            let (k, v) = row.db("read the history")?;
            let (u, seq) = k.value();
            EntryValue::decode_history(u, seq, v.value())?;
        }
        Ok(found)
    }

    fn range(
        &self,
        backlog: &crate::wal::backlog::Backlog<crate::wal::redo::GroupRedo>,
        seq: u64,
        start: &str,
        end: Option<&str>,
    ) -> Result<Result<Entries, Gone>> {
        let tail = match self.at {
            None => match self.tail.groups(backlog)? {
                Ok(tail) => tail.entries(start, end, seq)?,
                Err(gone) => return Ok(Err(gone)),
            },
            Some(_) => Default::default(),
        };
        let end = end.map(str::to_string);
        let before_end = move |unit: &str| end.as_deref().is_none_or(|e| unit < e);
        match self.at {
            None => {
                let rows = self
                    .manifest
                    .range::<&str>(start..)
                    .db("scan the manifest")?;
                let table = rows
                    .map(|row| {
                        let (k, v) = row.db("scan the manifest")?;
                        Ok(EntryValue::decode(k.value(), v.value())?.into_entry(k.value()))
                    })
                    .take_while(move |e: &Result<Entry>| match e {
                        Ok(e) => before_end(&e.unit),
                        Err(_) => true,
                    });
                if tail.is_empty() {
                    return Ok(Ok(Box::new(table)));
                }
                Ok(Ok(Box::new(OverTail {
                    table: table.peekable(),
                    tail: tail.into_iter().peekable(),
                })))
            }
            Some(at) => {
                let manifest = self
                    .manifest
                    .range::<&str>(start..)
                    .db("scan the manifest")?;
                let history = self
                    .history
                    .range::<(&str, u64)>((start, 0)..)
                    .db("scan the history")?
                    .peekable();
                Ok(Ok(Box::new(
                    AsOf {
                        manifest,
                        history,
                        at,
                        done: false,
                    }
                    .take_while(move |e: &Result<Entry>| match e {
                        Ok(e) => before_end(&e.unit),
                        Err(_) => true,
                    }),
                )))
            }
        }
    }
}

/// Checks bytes read for `entry` against its size and CRC32 (I2): `Error::Corrupt` if they differ.
/// For bytes read some other way than [`Snapshot::read_object`], e.g. through a server.
pub fn check_object(entry: &Entry, bytes: &[u8]) -> Result<()> {
    if bytes.len() as u64 != entry.object.size || crc32fast::hash(bytes) != entry.object.crc32 {
        return Err(Error::Corrupt {
            path: format!("objects/{}", entry.object.id.rel_path()).into(),
            detail: format!(
                "object of unit {:?} has {} bytes / crc32 {:08x}, the manifest records {} / {:08x}",
                entry.unit,
                bytes.len(),
                crc32fast::hash(bytes),
                entry.object.size,
                entry.object.crc32
            ),
        });
    }
    Ok(())
}

/// A scan of the transaction's current entries with the tail's laid over them: for a unit both
/// hold, the tail's entry (newer) replaces the transaction's. Both come in key order.
struct OverTail<T: Iterator<Item = Result<Entry>>> {
    table: std::iter::Peekable<T>,
    tail: std::iter::Peekable<std::collections::btree_map::IntoIter<String, EntryValue>>,
}

impl<T: Iterator<Item = Result<Entry>>> Iterator for OverTail<T> {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        use std::cmp::Ordering::{Greater, Less};
        let table = self
            .table
            .peek()
            .map(|r| r.as_ref().map(|e| e.unit.as_str()).map_err(|_| ()));
        let order = crate::wal::tail::merge_step(table, self.tail.peek().map(|(u, _)| u.as_str()))?;
        if order != Greater {
            let row = self.table.next();
            if order == Less {
                return row;
            }
        }
        let (unit, v) = self.tail.next()?;
        Some(Ok(v.into_entry(&unit)))
    }
}

/// Walks the manifest and the history side by side in unit order and yields, per unit, its entry
/// as of `at`: the current one if it is that old, else the newest history row at or before `at`
/// (a unit none of whose entries is that old is left out).
struct AsOf {
    manifest: redb::Range<'static, &'static str, &'static [u8]>,
    history: std::iter::Peekable<redb::Range<'static, (&'static str, u64), &'static [u8]>>,
    at: u64,
    done: bool,
}

impl AsOf {
    /// The entry of the next manifest unit as of `at`, `Ok(None)` where it has none.
    fn step(&mut self) -> Option<Result<Option<Entry>>> {
        let row = match self.manifest.next() {
            Some(row) => row,
            None => {
                // A history row after the last unit would belong to a unit without a current
                // entry: damage (there is no delete), reported rather than dropped (SPEC I9).
                return self.history.next().map(|row| {
                    let (k, _) = row.db("scan the history")?;
                    Err(orphan_row(k.value().0, k.value().1))
                });
            }
        };
        Some((|| {
            let (k, v) = row.db("scan the manifest")?;
            let unit = k.value();
            let current = EntryValue::decode(unit, v.value())?;
            let mut older = None;
            while let Some(peeked) = self.history.peek() {
                let next_unit = match peeked {
                    Ok((hk, _)) => hk.value().0,
                    Err(_) => "",
                };
                if peeked.is_ok() && next_unit > unit {
                    break;
                }
                let (hk, hv) = match self.history.next() {
                    Some(r) => r.db("scan the history")?,
                    None => unreachable!("invariant: a row was just peeked"),
                };
                let (u, seq) = hk.value();
                if u != unit {
                    return Err(orphan_row(u, seq));
                }
                // Every row is checked, also those after `at`: a row whose seq was damaged into
                // a later one must not silently drop out of the view (SPEC I9).
                let row = EntryValue::decode_history(u, seq, hv.value())?;
                if seq <= self.at {
                    older = Some(row);
                }
            }
            Ok(if current.seq <= self.at {
                Some(current.into_entry(unit))
            } else {
                older.map(|v| v.into_entry(unit))
            })
        })())
    }
}

fn orphan_row(unit: &str, seq: u64) -> Error {
    Error::corrupt_record(
        crate::schema::HISTORY_TABLE,
        unit,
        format!("its history row of seq {seq} has no current entry in the manifest"),
    )
}

impl Iterator for AsOf {
    type Item = Result<Entry>;
    fn next(&mut self) -> Option<Result<Entry>> {
        while !self.done {
            match self.step() {
                None => self.done = true,
                Some(Ok(None)) => {}
                Some(Ok(Some(e))) => return Some(Ok(e)),
                Some(Err(e)) => return Some(Err(e)),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use crate::{Options, Store};

    /// A snapshot begins without copying the backlog's groups and keeps none of them: open
    /// snapshots and their reads leave a queued group with its one holder (the backlog), and
    /// once it is applied nobody holds it, while every snapshot still reads as of its seq.
    #[test]
    fn snapshots_keep_no_group_of_the_backlog_alive() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(dir.path().join("lake"), Options::held_backlog()).unwrap();
        for i in 0..50 {
            store.put(&format!("u{i}"), 1, b"v1").unwrap();
        }
        let (_, _, newest) = store.core().backlog.listing().unwrap();
        let newest = newest.unwrap();
        assert_eq!(newest.holders(), 2, "the backlog and this test");
        let snaps: Vec<_> = (0..20).map(|_| store.snapshot().unwrap()).collect();
        for s in &snaps {
            assert_eq!(s.get("u49").unwrap().unwrap().source_version, 1);
            assert_eq!(s.iter().unwrap().count(), 50);
        }
        assert_eq!(newest.holders(), 2, "no snapshot holds the group");
        store.put("u0", 2, b"v2").unwrap();
        store.flush().unwrap();
        assert_eq!(newest.holders(), 1, "applied: only this test holds it");
        for s in &snaps {
            assert_eq!(s.get("u0").unwrap().unwrap().source_version, 1);
            assert_eq!(s.get("u49").unwrap().unwrap().source_version, 1);
            assert_eq!(s.iter().unwrap().count(), 50);
        }
        assert_eq!(store.get("u0").unwrap().unwrap().source_version, 2);
    }
}
