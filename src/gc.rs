//! Garbage collection (SPEC R14): removes staging files left behind by writers that are gone,
//! prunes history rows older than the retention window, and removes objects that nothing kept
//! references — without ever removing an object that a kept entry references, that an in-flight
//! commit is about to reference, or that an open snapshot can read (I8), also while writers run,
//! and without making commits wait for its unlinks.
//!
//! The race with writers is closed by four facts (the full argument is in docs/gc-verify-faults.md):
//!
//! 1. Staging *pins* an object before it publishes it, and a [`crate::Staged`] handle (and every
//!    clone a [`crate::Batch`] holds) keeps the pin until it is dropped — after the commit that
//!    used it has returned, and therefore after that commit is visible to new snapshots.
//! 2. GC decides under the pin lock: from just before its second snapshot until it has marked
//!    the objects it will delete as *doomed*, no pin can appear or disappear. It unlinks them
//!    after releasing the lock, so the commit leader (which drops pins) never waits for an unlink.
//! 3. GC dooms only objects that are referenced neither by the kept history as of its first
//!    snapshot, nor by any commit logged between its first and its second snapshot, nor pinned.
//! 4. Pinning a doomed object waits until GC has unlinked it; the stager then links a new copy.
//!
//! Open snapshots pin their seqs (`crate::snapshot`): the prune keeps every row a pinned view
//! reads, so the kept history references every object such a view can read.

use crate::commit::apply::{Done, Op};
use crate::error::{Error, IoContext, Result};
use crate::metrics::add;
use crate::object::ObjectId;
use crate::schema::manifest::{plan_prune_as_of, referenced_objects};
use crate::schema::meta::seq_and_horizon;
use crate::stage::{PinSet, StagingOwner};
use crate::store::Store;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What a garbage collection may remove.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcOptions {
    /// Report what would be removed, and remove nothing.
    pub dry_run: bool,
    /// Staging files whose writer cannot be told (not named by this engine's stager) are left
    /// alone until they are this old. Files of writers that are gone (any other opening of the
    /// store: only one holds its lock) are removed whatever their age, and files this opening is
    /// writing never.
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
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GcReport {
    /// Whether this was a dry run (nothing was removed).
    pub dry_run: bool,
    /// Staging files removed.
    pub staging_files: u64,
    /// Their bytes.
    pub staging_bytes: u64,
    /// Staging files whose writer cannot be told, left because they are younger than the grace
    /// period.
    pub staging_files_young: u64,
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
    /// On a lake node: objects deleted from the lake (a dry run: that would be), decided at the
    /// node's applied segment after the prune (docs/lake.md, "GC of the lake").
    #[cfg_attr(feature = "serde", serde(default))]
    pub lake_objects: u64,
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
            let is_file = match f.file_type() {
                Ok(t) => t.is_file(),
                // Removed since the listing (by a concurrent GC): nothing to report.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(format!("stat {}", f.path().display()), e)),
            };
            let name = f.file_name();
            let id = parse_object_name(name.as_encoded_bytes())
                .filter(|_| is_file && name.as_encoded_bytes().starts_with(fanout.as_bytes()))
                .filter(|_| fanout.len() == 2);
            if id.is_some_and(|id| !wanted(&id)) {
                continue;
            }
            let path = f.path();
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

/// The object named `name`: exactly 64 lower-case hex digits, the only spelling the engine
/// writes. Parsed in place: a listing of every object must not allocate per name.
fn parse_object_name(name: &[u8]) -> Option<ObjectId> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if name.len() != 64 {
        return None;
    }
    let mut id = [0u8; 32];
    for (byte, pair) in id.iter_mut().zip(name.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(ObjectId(id))
}

/// A staging file and what GC may do with it.
pub(crate) struct StagingFile {
    pub(crate) path: PathBuf,
    pub(crate) bytes: u64,
    /// Its writer is gone: removable now. Otherwise its writer cannot be told (see
    /// [`StagingOwner::Unknown`]) and only the grace period makes it removable.
    pub(crate) owner_gone: bool,
    /// How long ago it was last written (zero when the clock went back).
    pub(crate) age: Duration,
}

/// Objects a GC marked doomed and has not unlinked yet: dropping it (also on an error or a panic
/// between two unlinks) lets waiting publishers go on.
struct Doomed<'a> {
    pins: &'a PinSet,
    ids: Vec<ObjectId>,
    /// `ids[done..]` are still doomed.
    done: usize,
}

impl Drop for Doomed<'_> {
    fn drop(&mut self) {
        for id in &self.ids[self.done..] {
            self.pins.undoom(id);
        }
    }
}

impl Store {
    /// Collects garbage (SPEC R14): staging files of writers that are gone (and files whose
    /// writer cannot be told, once older than `grace`), history rows superseded more than
    /// `retain` ago, and objects no kept entry references. Safe while other threads stage, commit
    /// and read: it never removes an object a kept entry references, an in-flight commit is about
    /// to reference or an open [`crate::Snapshot`] can read (I8), and commits never wait for its
    /// unlinks.
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
        // A redb panic on a damaged page is reported as `Corrupt` (SPEC I9); GC stops before
        // deleting anything it decided from a damaged read. Any other panic fails the store
        // before it unwinds (SPEC I10).
        let _fence = self.core().fail_on_unwind("garbage collection panicked");
        crate::error::contain(|| self.gc_uncontained(options))
    }

    fn gc_uncontained(&self, options: GcOptions) -> Result<GcReport> {
        if !options.dry_run {
            // A failed store no longer knows its durable state: deleting on its view is unsafe.
            self.check_writable()?;
        }
        let mut report = GcReport {
            dry_run: options.dry_run,
            ..GcReport::default()
        };
        self.gc_staging(&options, &mut report)?;
        let skip_rows = self.prune_history(&options, &mut report)?;
        // On a lake node the prune was a segment; the lake's objects go after it.
        if self.lake_url().is_some() {
            let doomed = self.lake_sweep_plan()?;
            report.lake_objects = doomed.len() as u64;
            if !options.dry_run {
                self.lake_sweep_delete(&doomed)?;
            }
        }

        // (1) S1: everything the kept history references.
        let s1 = self.core().begin_read()?;
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
        let listing = list_objects(&self.core().stager.objects, |id| !referenced.contains(id))?;
        report.stray_files = listing.strays.len() as u64;
        if listing.objects.is_empty() {
            return Ok(report);
        }

        // (3) Decide under the pin lock; (4) unlink outside it.
        let doomed =
            self.decide_deletions(&options, &listing, s1_seq, &mut referenced, &mut report)?;
        if !options.dry_run {
            self.unlink_doomed(doomed, &mut report)?;
        }
        // Removals are not synced: an orphan that a crash brings back is removed by the next run.
        Ok(report)
    }

    /// A lake node's GC round, first half: syncs, and decides at the applied segment (the
    /// fence) which lake objects go (docs/lake.md). Split from [`Store::lake_sweep_delete`] so
    /// that tests can pause a round between the two. Empty on a local store.
    #[doc(hidden)]
    pub fn lake_sweep_plan(&self) -> Result<Vec<String>> {
        #[cfg(feature = "lake")]
        if let Some(lake) = &self.core().lake {
            self.sync()?;
            let txn = {
                let _head = lake.head();
                self.core().begin_read()?
            };
            let sweep = lake.plan_sweep(&txn)?;
            return Ok(sweep.doomed.iter().map(|p| p.to_string()).collect());
        }
        Ok(Vec::new())
    }

    /// A lake node's GC round, second half: deletes what [`Store::lake_sweep_plan`] decided,
    /// however long ago.
    #[doc(hidden)]
    pub fn lake_sweep_delete(&self, names: &[String]) -> Result<()> {
        #[cfg(feature = "lake")]
        if let Some(lake) = &self.core().lake {
            for name in names {
                lake.delete_object(&object_store::path::Path::from(name.as_str()))?;
            }
        }
        let _ = names;
        Ok(())
    }

    /// How many stagers wait for a GC to unlink a doomed copy of the object they publish (tests
    /// use it to see a publisher parked behind an unlink).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn publishers_waiting_for_gc(&self) -> usize {
        self.core().stager.pins.waiting()
    }

    /// Prunes the history (through the commit leader, so the prune serialises with commits),
    /// keeping every row an open snapshot reads. A dry run only plans, and returns the rows the
    /// prune would remove (their objects count as unreferenced).
    fn prune_history(
        &self,
        options: &GcOptions,
        report: &mut GcReport,
    ) -> Result<HashSet<(String, u64)>> {
        let cutoff_ms = self
            .core()
            .now_ms()
            .saturating_sub(u64::try_from(options.retain.as_millis()).unwrap_or(u64::MAX));
        let readers = &self.core().readers;
        if options.dry_run {
            let txn = self.core().begin_read()?;
            let plan = plan_prune_as_of(&txn, cutoff_ms, readers.min_pinned())?;
            report.history_rows_pruned = plan.rows.len() as u64;
            report.history_from = plan.horizon.max(seq_and_horizon(&txn)?.1);
            return Ok(plan.rows.into_iter().collect());
        }
        // The leader reads the pins when it decides the prune, on the drained backlog, and holds
        // that decision until the prune is durable (`ReaderPins::begin_prune`): no reader waits
        // for the drain, and a view of the newest seq never waits.
        match self.submit_op(Op::Prune { cutoff_ms })? {
            Done::Pruned { rows, .. } => report.history_rows_pruned = rows,
            other => {
                unreachable!("invariant: a prune op is answered by a prune report, got {other:?}")
            }
        }
        Ok(HashSet::new())
    }

    /// Under the pin lock: S2, the commits between S1 and S2, and the pins decide which
    /// candidates go; those are marked doomed (a dry run only counts them).
    fn decide_deletions<'l>(
        &self,
        options: &GcOptions,
        listing: &'l ObjectListing,
        s1_seq: u64,
        referenced: &mut HashSet<ObjectId>,
        report: &mut GcReport,
    ) -> Result<Vec<&'l ObjectFile>> {
        let mut pins = self.core().stager.pins.lock();
        // A commit whose write failed drops its pins only after the failed state is set, and a
        // failed write may still surface after a reopen: decide nothing on this store's view then.
        if !options.dry_run {
            self.check_writable()?;
        }
        // S2 reads the groups the B-trees lack from the backlog: applying them here would hold
        // every stager for as long.
        referenced.extend(self.core().objects_committed_after(s1_seq)?);
        let mut doomed = Vec::new();
        for o in &listing.objects {
            if referenced.contains(&o.id) {
                continue;
            }
            if pins.is_pinned(&o.id) {
                report.objects_pinned += 1;
                continue;
            }
            if options.dry_run {
                report.objects += 1;
                report.object_bytes += o.bytes;
            } else if pins.doom(o.id) {
                doomed.push(o);
            }
            // Otherwise a concurrent GC doomed it and will unlink it.
        }
        Ok(doomed)
    }

    /// Unlinks the doomed objects, without the pin lock: each is undoomed right after its unlink,
    /// so a publisher of the same content waits for that one unlink only.
    fn unlink_doomed(&self, doomed: Vec<&ObjectFile>, report: &mut GcReport) -> Result<()> {
        let pins = &self.core().stager.pins;
        let mut guard = Doomed {
            pins,
            ids: doomed.iter().map(|o| o.id).collect(),
            done: 0,
        };
        let vfs = &self.core().stager.vfs;
        for o in doomed {
            let removed = vfs.remove(&o.path);
            guard.done += 1;
            pins.undoom(&o.id);
            // Not found: removed by someone else meanwhile (not by another GC: that one skips it).
            if !self.collected(removed, &o.path, o.bytes)? {
                continue;
            }
            report.objects += 1;
            report.object_bytes += o.bytes;
        }
        Ok(())
    }

    /// The staging files no writer of this opening is writing, with what GC may do with each.
    /// Listing reads only: it goes straight to the file system, not through the `Vfs` seam (which
    /// is there for the operations that change what is on disk or make it durable).
    pub(crate) fn staging_files(&self) -> Result<Vec<StagingFile>> {
        let stager = &self.core().stager;
        let dir = &stager.staging;
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(format!("list {}", dir.display()), e)),
        };
        let now = SystemTime::now();
        let mut out = Vec::new();
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
            let owner_gone = match stager.staging_owner(&entry.file_name().to_string_lossy()) {
                // Written by this opening: in use exactly while it is in flight. A writer puts
                // its name there before creating the file and takes it out after removing it,
                // and never reuses a name, so one listed but not in flight is a leftover.
                StagingOwner::This if stager.in_flight.lock().contains(&path) => continue,
                StagingOwner::This | StagingOwner::Gone => true,
                StagingOwner::Unknown => false,
            };
            // A clock set back makes a file look young: it is then kept, never removed early.
            let age = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or(Duration::ZERO);
            out.push(StagingFile {
                path,
                bytes: meta.len(),
                owner_gone,
                age,
            });
        }
        Ok(out)
    }

    /// Counts a file of `bytes` GC removed at `path` (`removed`, the removal's result) as
    /// collected: true if it was removed, false if it was already gone.
    fn collected(&self, removed: std::io::Result<()>, path: &Path, bytes: u64) -> Result<bool> {
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io(format!("remove {}", path.display()), e)),
        }
        add(&self.core().metrics.c.orphans_collected, 1);
        add(&self.core().metrics.c.bytes_collected, bytes);
        Ok(true)
    }

    /// Removes the staging files of writers that are gone, and those whose writer cannot be told
    /// once they are at least `grace` old.
    fn gc_staging(&self, options: &GcOptions, report: &mut GcReport) -> Result<()> {
        for f in self.staging_files()? {
            if !f.owner_gone && f.age < options.grace {
                report.staging_files_young += 1;
                continue;
            }
            if !options.dry_run {
                let removed = self.core().stager.vfs.remove(&f.path);
                if !self.collected(removed, &f.path, f.bytes)? {
                    continue;
                }
            }
            report.staging_files += 1;
            report.staging_bytes += f.bytes;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the canonical spelling of a hash names an object: what `to_hex` writes.
    #[test]
    fn object_names_are_64_lower_case_hex_digits() {
        for bytes in [&b""[..], b"a", b"object bytes"] {
            let id = ObjectId::of(bytes);
            let hex = id.to_hex();
            assert_eq!(parse_object_name(hex.as_bytes()), Some(id));
            assert_eq!(parse_object_name(hex.to_uppercase().as_bytes()), None);
            assert_eq!(parse_object_name(&hex.as_bytes()[..63]), None);
            assert_eq!(parse_object_name(format!("{hex}0").as_bytes()), None);
            let mut bad = hex.into_bytes();
            bad[17] = b'g';
            assert_eq!(parse_object_name(&bad), None);
        }
    }
}
