//! Integrity check (SPEC R15): re-reads every object a kept entry references and checks its size
//! and CRC32 (and, deep, its BLAKE3 content hash against its name), replays the commit log
//! against the manifest (I7), and lists missing and corrupt objects together with the units they
//! affect, and files in `objects/` that are not objects: those are problems. Space that normal
//! operation leaves for GC — objects nothing references (rejected puts among them) and staging
//! files no live writer uses — is reported apart, as reclaimable.

use crate::error::{DbContext, Result};
use crate::gc::{list_objects, ObjectListing};
use crate::object::{ObjectId, ObjectMeta};
use crate::replay::{replay, ReplayReport};
use crate::schema::log::{LogTable, RecordBody};
use crate::schema::manifest::EntryValue;
use crate::schema::meta::{self, seq_and_horizon};
use crate::schema::{HISTORY, MANIFEST, META};
use crate::store::Store;
use redb::{ReadableTable, ReadableTableMetadata};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

/// How thoroughly to verify.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Also hash every object (BLAKE3) and compare it with the object's name.
    pub deep: bool,
}

/// An entry that references an object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct UnitRef {
    /// The unit key.
    pub unit: String,
    /// The seq of the entry.
    pub seq: u64,
    /// Whether it is the unit's current entry (otherwise a kept history entry).
    pub current: bool,
}

/// A referenced object that is missing or damaged.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ObjectProblem {
    /// The object's content hash.
    pub object: ObjectId,
    /// Where it should be.
    #[cfg_attr(feature = "serde", serde(with = "crate::text::path_text"))]
    pub path: PathBuf,
    /// What is wrong.
    pub detail: String,
    /// The entries that reference it.
    pub units: Vec<UnitRef>,
}

/// A file in `objects/` that is not an object the engine wrote (not named by a content hash, or
/// in the wrong fan-out directory). A problem: someone put it there, and GC leaves it alone.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StrayFile {
    /// Its path.
    #[cfg_attr(feature = "serde", serde(with = "crate::text::path_text"))]
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
}

/// An object that no kept entry references and no in-flight commit is about to: the output of a
/// rejected put (conflict, stale, fenced, busy, a lost race), a handle dropped without a commit,
/// or an object of history that retention let go. `oncelake gc` removes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReclaimableObject {
    /// Its path.
    #[cfg_attr(feature = "serde", serde(with = "crate::text::path_text"))]
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
}

/// A staging file that no writer of this opening is writing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReclaimableStaging {
    /// Its path.
    #[cfg_attr(feature = "serde", serde(with = "crate::text::path_text"))]
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Its writer is gone (a put killed mid-write, a crashed process): the next GC removes it.
    /// Otherwise its writer cannot be told from its name, and GC removes it once it is older
    /// than the grace period.
    pub owner_gone: bool,
}

/// Space that normal operation leaves for GC to reclaim. Nothing in it is lost or damaged data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Reclaimable {
    /// Unreferenced objects.
    pub objects: Vec<ReclaimableObject>,
    /// Staging files no live writer uses.
    pub staging: Vec<ReclaimableStaging>,
}

impl Reclaimable {
    /// Bytes of the unreferenced objects.
    pub fn object_bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.bytes).sum()
    }
    /// Bytes of the staging files.
    pub fn staging_bytes(&self) -> u64 {
        self.staging.iter().map(|f| f.bytes).sum()
    }
    /// Whether there is nothing to reclaim.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.staging.is_empty()
    }
}

/// What [`Store::verify`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct VerifyReport {
    /// Whether BLAKE3 hashes were checked.
    pub deep: bool,
    /// The seq the check saw.
    pub seq: u64,
    /// Entries (current and kept history) whose objects were checked.
    pub entries_checked: u64,
    /// Distinct objects read.
    pub objects_checked: u64,
    /// Bytes read.
    pub bytes_checked: u64,
    /// Referenced objects that do not exist.
    pub missing: Vec<ObjectProblem>,
    /// Referenced objects with the wrong size, CRC32 or (deep) hash.
    pub corrupt: Vec<ObjectProblem>,
    /// Files in `objects/` that are not objects (problems).
    pub strays: Vec<StrayFile>,
    /// Space GC can reclaim (not problems): unreferenced objects (objects staged for an
    /// in-flight commit excluded) and staging files no live writer uses.
    pub reclaimable: Reclaimable,
    /// The log replayed against the manifest.
    pub replay: ReplayReport,
    /// Deep only: kept history rows that disagree with the log, and commits at or after the
    /// history horizon whose history rows are missing.
    pub history_problems: Vec<String>,
    /// The lake tables' data files: wrong or missing links, stray files.
    pub tables: crate::table::TableCheck,
    /// The whole-store invariant checks that do not hold (`crate::commit::invariants::check_state`).
    pub invariants: Vec<crate::commit::invariants::Violation>,
}

impl VerifyReport {
    /// Nothing at all to report: no problem and nothing to reclaim.
    pub fn is_clean(&self) -> bool {
        self.is_ok() && self.reclaimable.is_empty()
    }

    /// No problem: nothing missing, corrupt or stray, and the log reproduces the manifest.
    /// Reclaimable space is allowed (normal operation leaves it for GC). The CLI exits 0 exactly
    /// then.
    pub fn is_ok(&self) -> bool {
        self.is_intact() && self.strays.is_empty()
    }

    /// No data is lost or damaged (strays and reclaimable space only take room).
    pub fn is_intact(&self) -> bool {
        self.missing.is_empty()
            && self.corrupt.is_empty()
            && self.replay.is_clean()
            && self.history_problems.is_empty()
            && self.tables.problems.is_empty()
            && self.invariants.is_empty()
    }

    /// How many problems were found (reclaimable space is not a problem).
    pub fn problem_count(&self) -> usize {
        self.missing.len()
            + self.corrupt.len()
            + self.strays.len()
            + self.replay.problems.len()
            + self.history_problems.len()
            + self.tables.problems.len()
            + self.invariants.len()
    }

    /// Every unit that references a missing or corrupt object.
    pub fn affected_units(&self) -> BTreeSet<String> {
        self.missing
            .iter()
            .chain(&self.corrupt)
            .flat_map(|p| p.units.iter().map(|u| u.unit.clone()))
            .collect()
    }
}

/// What the entries say an object is, and who says it.
struct Expected {
    meta: ObjectMeta,
    units: Vec<UnitRef>,
    /// Entries that disagree about the object's size or CRC32 (an engine bug or damaged rows).
    disagreements: Vec<String>,
}

/// Every object the manifest and the history reference, with the entries that reference it
/// (entries that disagree on an object's size or checksum are noted on it); counts the entries
/// in `report`.
fn expected_objects(
    txn: &redb::ReadTransaction,
    report: &mut VerifyReport,
) -> Result<BTreeMap<ObjectId, Expected>> {
    let mut expected: BTreeMap<ObjectId, Expected> = BTreeMap::new();
    let mut note = |id: ObjectMeta, r: UnitRef| {
        let e = expected.entry(id.id).or_insert_with(|| Expected {
            meta: id,
            units: Vec::new(),
            disagreements: Vec::new(),
        });
        if e.meta != id {
            e.disagreements.push(format!(
                "unit {:?} seq {} records {} bytes / crc32 {:08x}, another entry {} / {:08x}",
                r.unit, r.seq, id.size, id.crc32, e.meta.size, e.meta.crc32
            ));
        }
        e.units.push(r);
    };
    let mut current_seq: HashSet<(String, u64)> = HashSet::new();
    {
        let manifest = txn.open_table(MANIFEST).db("open the manifest")?;
        for row in manifest.iter().db("scan the manifest")? {
            let (k, v) = row.db("scan the manifest")?;
            let v = EntryValue::decode(k.value(), v.value())?;
            current_seq.insert((k.value().to_string(), v.seq));
            note(
                v.object,
                UnitRef {
                    unit: k.value().to_string(),
                    seq: v.seq,
                    current: true,
                },
            );
            report.entries_checked += 1;
        }
        let history = txn.open_table(HISTORY).db("open the history")?;
        for row in history.iter().db("scan the history")? {
            let (k, v) = row.db("scan the history")?;
            let (unit, seq) = k.value();
            if current_seq.contains(&(unit.to_string(), seq)) {
                continue; // the current entry, already counted
            }
            let v = EntryValue::decode_history(unit, seq, v.value())?;
            note(
                v.object,
                UnitRef {
                    unit: unit.to_string(),
                    seq,
                    current: false,
                },
            );
            report.entries_checked += 1;
        }
    }
    drop(current_seq);
    for e in expected.values_mut() {
        e.units.sort();
    }
    Ok(expected)
}

impl Store {
    /// Verifies the store (SPEC R15). Safe while writers run; the check is as of one snapshot.
    pub fn verify(&self, options: VerifyOptions) -> Result<VerifyReport> {
        self.verify_with_progress(options, &mut |_, _| {})
    }

    /// [`Store::verify`], calling `progress(objects done, objects total)` as objects are read.
    pub fn verify_with_progress(
        &self,
        options: VerifyOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<VerifyReport> {
        crate::error::contain(|| self.verify_uncontained(options, progress))
    }

    fn verify_uncontained(
        &self,
        options: VerifyOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<VerifyReport> {
        let mut report = VerifyReport {
            deep: options.deep,
            ..VerifyReport::default()
        };
        let txn = self.core().begin_read()?;
        let s1_seq = seq_and_horizon(&txn)?.0;
        report.seq = s1_seq;
        report.invariants = crate::commit::invariants::check_state(&txn)?;
        let expected = expected_objects(&txn, &mut report)?;
        self.check_objects(&expected, options.deep, &mut report, progress);

        let listing = list_objects(&self.core().stager.objects, |id| !expected.contains_key(id))?;
        report.reclaimable.objects = self.unreferenced_objects(&listing, s1_seq)?;
        report.strays = listing
            .strays
            .into_iter()
            .map(|(path, bytes)| StrayFile { path, bytes })
            .collect();
        report.reclaimable.staging = self
            .staging_files()?
            .into_iter()
            .map(|f| ReclaimableStaging {
                path: f.path,
                bytes: f.bytes,
                owner_gone: f.owner_gone,
            })
            .collect();
        drop(txn);
        self.drop_vanished_references(&mut report)?;

        report.replay = replay(&self.snapshot()?)?;
        if options.deep {
            report.history_problems = self.check_history_against_log()?;
        }
        report.tables = crate::table::check::verify_tables(self, options.deep)?;
        Ok(report)
    }

    /// Reads every expected object file (checksums only when `deep`), reporting missing and
    /// corrupt ones with the entries that reference them.
    fn check_objects(
        &self,
        expected: &BTreeMap<ObjectId, Expected>,
        deep: bool,
        report: &mut VerifyReport,
        progress: &mut dyn FnMut(u64, u64),
    ) {
        let total = expected.len() as u64;
        for (i, (id, exp)) in expected.iter().enumerate() {
            let path = self.object_path(id);
            // A lake node started from a checkpoint fetches objects when first read (SPEC R23).
            let seq = exp.units.first().map_or(0, |u| u.seq);
            if let Err(e) = self.fetch_from_lake(&exp.meta, seq) {
                report.missing.push(ObjectProblem {
                    object: *id,
                    path,
                    detail: e.to_string(),
                    units: exp.units.clone(),
                });
                continue;
            }
            if !exp.disagreements.is_empty() {
                report.corrupt.push(ObjectProblem {
                    object: *id,
                    path: path.clone(),
                    detail: format!("entries disagree: {}", exp.disagreements.join("; ")),
                    units: exp.units.clone(),
                });
            }
            match check_object_file(&path, &exp.meta, deep) {
                Ok(bytes) => report.bytes_checked += bytes,
                Err(FileProblem::Missing) => report.missing.push(ObjectProblem {
                    object: *id,
                    path,
                    detail: "the object file does not exist".into(),
                    units: exp.units.clone(),
                }),
                Err(FileProblem::Bad(detail)) => report.corrupt.push(ObjectProblem {
                    object: *id,
                    path,
                    detail,
                    units: exp.units.clone(),
                }),
            }
            report.objects_checked += 1;
            progress(i as u64 + 1, total);
        }
    }

    /// The listed objects that are still unreferenced: like GC, re-check under the pin lock
    /// against the commits since the snapshot at `s1_seq`, so that an object staged or committed
    /// meanwhile is not reported.
    fn unreferenced_objects(
        &self,
        listing: &ObjectListing,
        s1_seq: u64,
    ) -> Result<Vec<ReclaimableObject>> {
        let mut unreferenced: Vec<(ObjectId, &Path, u64)> = listing.objects().collect();
        if unreferenced.is_empty() {
            return Ok(Vec::new());
        }
        let pins = self.core().stager.pins.lock();
        // Read from the backlog, not waited for: every stager needs the pin lock.
        let later = self.core().objects_committed_after(s1_seq)?;
        unreferenced.retain(|(id, _, _)| !later.contains(id) && !pins.is_pinned(id));
        Ok(unreferenced
            .into_iter()
            .map(|(_, path, bytes)| ReclaimableObject {
                path: path.to_path_buf(),
                bytes,
            })
            .collect())
    }

    /// Every kept history row must be what the log's commit record at its seq says, and every
    /// commit at or after the history horizon must have its rows (older ones may be pruned),
    /// but for the units whose current entry it is: the manifest holds those (format 4), and
    /// I7's replay checks them against the log.
    ///
    /// One pass over the log compares every commit entry with its history row and counts the
    /// rows it found; history keys are unique and a commit names each unit once, so the rows are
    /// all accounted for exactly when that count equals the number of history rows. Only then
    /// (a damaged store) does a second pass look up each row's record to name the strays:
    /// decoding a record per row would cost O(rows × record size), quadratic for one big batch.
    fn check_history_against_log(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let txn = self.core().begin_read()?;
        let from = {
            let meta = txn.open_table(META).db("open the meta table")?;
            meta::get(&meta, meta::HISTORY_FROM)?
        };
        let history = txn.open_table(HISTORY).db("open the history")?;
        let manifest = txn.open_table(MANIFEST).db("open the manifest")?;
        let is_current = |unit: &str, seq: u64| -> Result<bool> {
            let v = crate::schema::codec::get_sealed(
                &manifest,
                crate::schema::MANIFEST_TABLE,
                unit,
                EntryValue::decode,
            )?;
            Ok(v.is_some_and(|v| v.seq == seq))
        };
        let log = LogTable::open(&txn)?;
        let mut matched = 0u64;
        for row in log.iter()? {
            let Ok(rec) = row?.1 else {
                continue; // replay reports undecodable records
            };
            let RecordBody::Commit { entries } = &rec.body else {
                continue;
            };
            for e in entries {
                let key = (e.unit.as_str(), rec.seq);
                match history.get(key).db("read the history")? {
                    None if rec.seq >= from && !is_current(&e.unit, rec.seq)? => {
                        problems.push(format!(
                            "log seq {} commits unit {:?} but neither the history nor the manifest has it",
                            rec.seq, e.unit
                        ))
                    }
                    None => {} // pruned, or the current entry
                    Some(g) => {
                        matched += 1;
                        let stored = EntryValue::decode_history(&e.unit, rec.seq, g.value())?;
                        let want = crate::replay::history_entry(e, rec.seq, rec.time_ms);
                        if stored != want {
                            problems.push(format!(
                                "history row ({:?}, {}) is {stored:?}, the log says {want:?}",
                                e.unit, rec.seq
                            ));
                        }
                    }
                }
            }
        }
        let rows = history.len().db("count the history")?;
        if rows != matched {
            problems.extend(history_rows_without_commit(&history, &log)?);
        }
        Ok(problems)
    }

    /// A GC running alongside may prune a history row after our snapshot and then, rightly,
    /// remove its object: re-check each problem's entries against the store as it is now, and
    /// keep only the entries (and problems) that still exist.
    fn drop_vanished_references(&self, report: &mut VerifyReport) -> Result<()> {
        if report.missing.is_empty() && report.corrupt.is_empty() {
            return Ok(());
        }
        let txn = self.core().begin_read()?;
        let manifest = txn.open_table(MANIFEST).db("open the manifest")?;
        let history = txn.open_table(HISTORY).db("open the history")?;
        let still_there = |u: &UnitRef| -> Result<bool> {
            if history
                .get((u.unit.as_str(), u.seq))
                .db("read the history")?
                .is_some()
            {
                return Ok(true);
            }
            Ok(
                match manifest.get(u.unit.as_str()).db("read the manifest")? {
                    Some(v) => EntryValue::decode(&u.unit, v.value())?.seq == u.seq,
                    None => false,
                },
            )
        };
        for list in [&mut report.missing, &mut report.corrupt] {
            for p in list.iter_mut() {
                let mut kept = Vec::with_capacity(p.units.len());
                for u in p.units.drain(..) {
                    if still_there(&u)? {
                        kept.push(u);
                    }
                }
                p.units = kept;
            }
            list.retain(|p| !p.units.is_empty());
        }
        Ok(())
    }
}

enum FileProblem {
    Missing,
    Bad(String),
}

/// Checks one object file through a memory map; returns the bytes read.
fn check_object_file(
    path: &Path,
    meta: &ObjectMeta,
    deep: bool,
) -> std::result::Result<u64, FileProblem> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(FileProblem::Missing),
        Err(e) => return Err(FileProblem::Bad(format!("cannot open it: {e}"))),
    };
    let len = f
        .metadata()
        .map_err(|e| FileProblem::Bad(format!("cannot stat it: {e}")))?
        .len();
    if len != meta.size {
        return Err(FileProblem::Bad(format!(
            "it has {len} bytes, the entries record {} (truncated or extended)",
            meta.size
        )));
    }
    let empty: &[u8] = &[];
    let map;
    let bytes: &[u8] = if len == 0 {
        empty
    } else {
        // SAFETY: objects are immutable (published read-only, never written in place). A file
        // changed by someone outside the engine while mapped can at worst make this check see
        // mixed bytes and report corruption; the map is dropped before we return.
        map = unsafe { memmap2::Mmap::map(&f) }
            .map_err(|e| FileProblem::Bad(format!("cannot map it: {e}")))?;
        &map[..]
    };
    let crc = crc32fast::hash(bytes);
    if crc != meta.crc32 {
        return Err(FileProblem::Bad(format!(
            "crc32 {crc:08x}, the entries record {:08x}",
            meta.crc32
        )));
    }
    if deep {
        let id = ObjectId::of(bytes);
        if id != meta.id {
            return Err(FileProblem::Bad(format!(
                "its content hashes to {id}, not to its name"
            )));
        }
    }
    Ok(len)
}

/// The history rows whose seq has no commit of their unit in the log. Decodes one record per
/// row: only called when the counts of [`Store::check_history_against_log`] disagree.
fn history_rows_without_commit(
    history: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    log: &LogTable,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for row in history.iter().db("scan the history")? {
        let (k, _) = row.db("scan the history")?;
        let (unit, seq) = k.value();
        let rec = log.get_decodable(seq)?;
        let logged = rec.as_ref().is_some_and(|rec| match &rec.body {
            RecordBody::Commit { entries } => entries.iter().any(|e| e.unit == unit),
            _ => false,
        });
        if !logged {
            problems.push(format!(
                "history row ({unit:?}, {seq}) has no commit of that unit in the log"
            ));
        }
    }
    Ok(problems)
}

impl Store {
    /// Runs every whole-store invariant check and returns what does not hold (empty when all
    /// do): the checks of verify's invariant pass, then I7 (the log replayed against the
    /// manifest). Each of the two reads one consistent view, so commits running meanwhile cause
    /// no false violation. For tests and tools; [`Store::verify`] reports the same.
    pub fn check_invariants(&self) -> Result<Vec<crate::commit::invariants::Violation>> {
        use crate::commit::invariants::{check_replay, check_state};
        let snap = self.snapshot()?;
        let mut out = check_state(&self.core().begin_read()?)?;
        out.extend(check_replay(&crate::replay::replay(&snap)?.problems));
        Ok(out)
    }
}
