//! Garbage collection (SPEC R14): removes staging files left behind by crashes, prunes history
//! rows older than the retention window, and removes objects that nothing kept references —
//! without ever removing an object that a kept entry references or that an in-flight commit is
//! about to reference (I8), also while writers run.
//!
//! The race with writers is closed by three facts (the full argument is in DESIGN.md):
//!
//! 1. Staging *pins* an object before it publishes it, and a [`crate::Staged`] handle (and every
//!    clone a [`crate::Batch`] holds) keeps the pin until it is dropped — after the commit that
//!    used it has returned, and therefore after that commit is visible to new snapshots.
//! 2. Publishing takes the pin lock, and GC holds it from just before its second snapshot until
//!    its last deletion: no pin can appear or disappear while GC decides and deletes.
//! 3. GC deletes only objects that are referenced neither by the kept history as of its first
//!    snapshot, nor by any commit logged between its first and its second snapshot, nor pinned.
//!
//! A commit that is not in the second snapshot had not become visible when GC took the pin
//! lock, so its writer had not returned, so its objects were pinned: GC skips them.

use crate::commit::apply::{Done, Op};
use crate::error::{DbContext, Error, IoContext, Result};
use crate::log::{Record, RecordBody, LOG};
use crate::manifest::{EntryValue, HISTORY, MANIFEST};
use crate::metrics::add;
use crate::object::ObjectId;
use crate::store::{seq_and_horizon, Store};
use redb::{ReadTransaction, ReadableDatabase, ReadableTable};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, SystemTime};

/// What a garbage collection may remove.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcOptions {
    /// Report what would be removed, and remove nothing.
    pub dry_run: bool,
    /// Staging files younger than this are left alone (a writer of another process generation
    /// may still be using them; files of this process that are being written are never removed).
    pub grace: Duration,
    /// History rows superseded less than this long ago are kept, and with them their objects and
    /// reads as of their seqs ([`Store::snapshot_at`]).
    pub retain: Duration,
}

impl Default for GcOptions {
    /// Not a dry run; one hour of grace; seven days of history.
    fn default() -> Self {
        GcOptions {
            dry_run: false,
            grace: Duration::from_secs(3600),
            retain: Duration::from_secs(7 * 86400),
        }
    }
}

/// What a garbage collection removed (or, in a dry run, would remove).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Whether this was a dry run (nothing was removed).
    pub dry_run: bool,
    /// Staging files removed.
    pub staging_files: u64,
    /// Their bytes.
    pub staging_bytes: u64,
    /// Unreferenced objects removed.
    pub objects: u64,
    /// Their bytes.
    pub object_bytes: u64,
    /// History rows pruned (superseded before the retention window).
    pub history_rows_pruned: u64,
    /// The oldest seq still readable with [`Store::snapshot_at`] after this run.
    pub history_from: u64,
    /// Distinct objects that kept entries reference.
    pub objects_referenced: u64,
    /// Unreferenced objects left alone because a writer holds them staged for a commit.
    pub objects_pinned: u64,
    /// Files in `objects/` that are not named like objects; left alone (`verify` lists them).
    pub stray_files: u64,
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

/// Plans a prune: every row of a unit, other than its newest (current) one, whose successor was
/// committed before `cutoff_ms`. One ordered pass over the history.
pub(crate) fn plan_prune<T>(history: &T, cutoff_ms: u64) -> Result<PrunePlan>
where
    T: ReadableTable<(&'static str, u64), &'static [u8]>,
{
    let mut plan = PrunePlan::default();
    let mut prev: Option<(String, u64)> = None;
    for row in history.iter().db("scan the history")? {
        let (k, v) = row.db("scan the history")?;
        let (unit, seq) = k.value();
        if let Some((prev_unit, prev_seq)) = prev.take() {
            if prev_unit == unit {
                let successor = EntryValue::decode(v.value())?;
                if successor.committed_at_ms < cutoff_ms {
                    plan.rows.push((prev_unit, prev_seq));
                    plan.horizon = plan.horizon.max(seq);
                }
            }
        }
        prev = Some((unit.to_string(), seq));
    }
    Ok(plan)
}

/// A file in `objects/` named like an object.
struct ObjectFile {
    id: ObjectId,
    path: PathBuf,
    bytes: u64,
}

/// What `objects/` holds: object files, and anything else (strays), with sizes.
pub(crate) struct ObjectListing {
    objects: Vec<ObjectFile>,
    /// Paths (and sizes) of files that are not named like objects or sit in the wrong fan-out
    /// directory.
    pub(crate) strays: Vec<(PathBuf, u64)>,
}

impl ObjectListing {
    /// The object files as (id, path, bytes).
    pub(crate) fn objects(&self) -> impl Iterator<Item = (ObjectId, &Path, u64)> {
        self.objects
            .iter()
            .map(|o| (o.id, o.path.as_path(), o.bytes))
    }
}

/// Lists `objects/`: two-hex-digit fan-out directories holding files named by their full hash.
/// Only the objects for which `wanted` says yes are listed (and stat'ed for their size): the
/// callers want the unreferenced ones, and a stat per referenced object was most of the listing's
/// cost. The file type comes from the directory entry (no stat on file systems that record it).
pub(crate) fn list_objects(
    objects: &Path,
    wanted: impl Fn(&ObjectId) -> bool,
) -> Result<ObjectListing> {
    let mut out = ObjectListing {
        objects: Vec::new(),
        strays: Vec::new(),
    };
    let dirs = std::fs::read_dir(objects).ctx(|| format!("list {}", objects.display()))?;
    for d in dirs {
        let d = d.ctx(|| format!("list {}", objects.display()))?;
        let dpath = d.path();
        let ftype = d.file_type().ctx(|| format!("stat {}", dpath.display()))?;
        if !ftype.is_dir() {
            let len = d.metadata().map(|m| m.len()).unwrap_or(0);
            out.strays.push((dpath, len));
            continue;
        }
        let fanout = d.file_name().to_string_lossy().into_owned();
        for f in std::fs::read_dir(&dpath).ctx(|| format!("list {}", dpath.display()))? {
            let f = f.ctx(|| format!("list {}", dpath.display()))?;
            let path = f.path();
            let is_file = match f.file_type() {
                Ok(t) => t.is_file(),
                // Removed since the listing (by a concurrent GC): nothing to report.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(format!("stat {}", path.display()), e)),
            };
            let name = f.file_name().to_string_lossy().into_owned();
            let id = ObjectId::from_str(&name).ok().filter(|_| {
                is_file && name.len() == 64 && name.starts_with(&fanout) && fanout.len() == 2
            });
            // Only the canonical (lower-case) spelling is an object the engine wrote.
            let id = id.filter(|id| id.to_hex() == name);
            if id.is_some_and(|id| !wanted(&id)) {
                continue;
            }
            let len = match f.metadata() {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(format!("stat {}", path.display()), e)),
            };
            match id {
                Some(id) => out.objects.push(ObjectFile {
                    id,
                    path,
                    bytes: len,
                }),
                None => out.strays.push((path, len)),
            }
        }
    }
    Ok(out)
}

/// Adds every object a kept entry references, as of `txn`: the manifest and the history.
fn referenced_objects(
    txn: &ReadTransaction,
    skip_rows: &HashSet<(String, u64)>,
) -> Result<HashSet<ObjectId>> {
    let mut set = HashSet::new();
    let manifest = txn.open_table(MANIFEST).db("open the manifest")?;
    for row in manifest.iter().db("scan the manifest")? {
        let (_, v) = row.db("scan the manifest")?;
        set.insert(EntryValue::decode(v.value())?.object.id);
    }
    let history = txn.open_table(HISTORY).db("open the history")?;
    for row in history.iter().db("scan the history")? {
        let (k, v) = row.db("scan the history")?;
        if !skip_rows.is_empty() {
            let (unit, seq) = k.value();
            if skip_rows.contains(&(unit.to_string(), seq)) {
                continue;
            }
        }
        set.insert(EntryValue::decode(v.value())?.object.id);
    }
    Ok(set)
}

impl Store {
    /// Collects garbage (SPEC R14): staging files older than `grace`, history rows superseded
    /// more than `retain` ago, and objects no kept entry references. Safe while other threads
    /// stage and commit: it never removes an object a kept entry references or an in-flight
    /// commit is about to reference (I8).
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// use oncelake::gc::GcOptions;
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = oncelake::Store::open(dir.path().join("lake"))?;
    /// store.put("u", 1, b"first")?;
    /// drop(store.stage_bytes(b"staged, never committed")?);
    /// let report = store.gc(GcOptions { grace: Duration::ZERO, ..GcOptions::default() })?;
    /// assert_eq!(report.objects, 1);
    /// assert!(store.snapshot()?.read_object(&store.get("u")?.unwrap()).is_ok());
    /// # Ok(()) }
    /// ```
    pub fn gc(&self, options: GcOptions) -> Result<GcReport> {
        if !options.dry_run {
            // A failed store no longer knows its durable state: deleting on its view is unsafe.
            self.check_writable()?;
        }
        let mut report = GcReport {
            dry_run: options.dry_run,
            ..GcReport::default()
        };
        self.gc_staging(&options, &mut report)?;

        // History: prune through the commit leader, so the prune serialises with commits.
        let cutoff_ms = self
            .inner
            .options
            .clock
            .now_ms()
            .saturating_sub(options.retain.as_millis() as u64);
        let mut skip_rows = HashSet::new();
        if options.dry_run {
            let txn = self.inner.db.begin_read().db("begin a read transaction")?;
            let history = txn.open_table(HISTORY).db("open the history")?;
            let plan = plan_prune(&history, cutoff_ms)?;
            report.history_rows_pruned = plan.rows.len() as u64;
            report.history_from = plan.horizon.max(seq_and_horizon(&txn)?.1);
            skip_rows = plan.rows.into_iter().collect();
        } else {
            match self.submit(Op::Prune { cutoff_ms })? {
                Done::Pruned { rows, .. } => report.history_rows_pruned = rows,
                other => {
                    unreachable!(
                        "invariant: a prune op is answered by a prune report, got {other:?}"
                    )
                }
            }
        }

        // (1) S1: everything the kept history references.
        let s1 = self.inner.db.begin_read().db("begin a read transaction")?;
        let (s1_seq, horizon) = seq_and_horizon(&s1)?;
        if !options.dry_run {
            report.history_from = horizon;
        }
        let mut referenced = referenced_objects(&s1, &skip_rows)?;
        drop(s1);
        // What a lake table has yet to publish stays, whatever the retention (SPEC R21).
        referenced.extend(crate::table::check::unpublished_objects(self)?);
        report.objects_referenced = referenced.len() as u64;

        // (2) Candidates: object files that S1 does not reference.
        let listing = list_objects(&self.inner.stager.objects, |id| !referenced.contains(id))?;
        report.stray_files = listing.strays.len() as u64;
        let candidates: Vec<&ObjectFile> = listing.objects.iter().collect();
        if candidates.is_empty() {
            return Ok(report);
        }

        // (3) Under the pin lock: S2, the commits between S1 and S2, then the deletions.
        let pins = self.inner.stager.pins.lock();
        // A commit whose write failed drops its pins only after the failed state is set, and a
        // failed write may still surface after a reopen: decide nothing on this store's view then.
        if !options.dry_run {
            self.check_writable()?;
        }
        let s2 = self.inner.db.begin_read().db("begin a read transaction")?;
        let (s2_seq, _) = seq_and_horizon(&s2)?;
        if s2_seq > s1_seq {
            let log = s2.open_table(LOG).db("open the log")?;
            for row in log.range(s1_seq + 1..=s2_seq).db("scan the commit log")? {
                let (_, v) = row.db("scan the commit log")?;
                if let RecordBody::Commit { entries } = Record::decode(v.value())?.body {
                    referenced.extend(entries.iter().map(|e| e.object.id));
                }
            }
        }
        drop(s2);
        let vfs = &self.inner.stager.vfs;
        for o in candidates {
            if referenced.contains(&o.id) {
                continue;
            }
            if pins.contains_key(&o.id) {
                report.objects_pinned += 1;
                continue;
            }
            if !options.dry_run {
                match vfs.remove(&o.path) {
                    Ok(()) => {}
                    // Another GC got there first.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        return Err(Error::io(format!("remove {}", o.path.display()), e));
                    }
                }
                add(&self.inner.metrics.c.orphans_collected, 1);
                add(&self.inner.metrics.c.bytes_collected, o.bytes);
            }
            report.objects += 1;
            report.object_bytes += o.bytes;
        }
        drop(pins);
        // Removals are not synced: an orphan that a crash brings back is removed by the next run.
        Ok(report)
    }

    /// Removes staging files at least `grace` old that no writer of this process is writing.
    fn gc_staging(&self, options: &GcOptions, report: &mut GcReport) -> Result<()> {
        let stager = &self.inner.stager;
        let dir = &stager.staging;
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("list {}", dir.display()), e)),
        };
        let now = SystemTime::now();
        for entry in entries {
            let entry = entry.ctx(|| format!("list {}", dir.display()))?;
            let path = entry.path();
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(format!("stat {}", path.display()), e)),
            };
            if !meta.is_file() {
                continue;
            }
            // A clock set back makes a file look young: it is then kept, never removed early.
            let age = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or(Duration::ZERO);
            if age < options.grace {
                continue;
            }
            // Holding the in-flight lock while removing: a writer cannot start on this very name
            // between the check and the removal.
            let in_flight = stager.in_flight.lock();
            if in_flight.contains(&path) {
                continue;
            }
            if !options.dry_run {
                match stager.vfs.remove(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(Error::io(format!("remove {}", path.display()), e)),
                }
                add(&self.inner.metrics.c.orphans_collected, 1);
                add(&self.inner.metrics.c.bytes_collected, meta.len());
            }
            drop(in_flight);
            report.staging_files += 1;
            report.staging_bytes += meta.len();
        }
        Ok(())
    }
}
