//! The store's operations as one trait, [`UnitStore`], so that a program is written once for a
//! store open in its process ([`Store`]) and for one behind `oncelake serve` (the
//! `oncelake-client` member's `Client`, which implements it over HTTP), and the shared lake's
//! node is one more implementation rather than one more copy. The pipeline's worker loop
//! ([`work`]) is written over the trait, so a served worker runs the engine's own loop.
//!
//! # One error type per implementation
//!
//! The trait has an associated [`UnitStore::Error`] rather than one shared error: a served store
//! fails in ways the engine cannot — the connection broke after the request was sent (the outcome
//! is unknown: look the unit up before retrying), the server refused the token, what answers is
//! not the store's server — and each of those carries its own advice. Folding them into
//! [`crate::Error`] would put transport variants into the engine's error or lose that advice;
//! a caller that needs one error type (the CLI, the Python binding) already converts both.

use crate::claim::validate_worker;
use crate::log::Record;
use crate::pipeline::{
    Attempt, Claim, Explain, FailOutcome, Pipeline, ReadyCell, Status, WorkOptions, WorkReport,
};
use crate::reconcile::{PlanEnd, PlanEvent, ReconcileForm};
use crate::{
    Batch, CheckpointReport, ClaimOutcome, CommitReport, Committed, Entry, GcOptions, GcReport,
    Intent, Lease, MetricsSnapshot, ObjectMeta, Outcome, ReleaseOutcome, RenewOutcome, Snapshot,
    Store, UnitOutcome, VerifyOptions, VerifyReport,
};
use std::io::{Read, Write};
use std::time::Duration;

/// One unit of a [`UnitStore::commit`]: its output bytes at a source version, with the fencing
/// token of a claim and whether it deliberately corrects the same version.
#[derive(Clone, Copy, Debug)]
pub struct Put<'a> {
    /// Unit key.
    pub unit: &'a str,
    /// The source version the output was derived from.
    pub source_version: u64,
    /// The output.
    pub bytes: &'a [u8],
    /// The fencing token of the worker's lease, if it claimed the unit.
    pub token: Option<u64>,
    /// A deliberate correction of the same source version (a new revision).
    pub correct: bool,
}

/// Where a [`UnitStore::put_stream`] goes: the unit at a source version, with the fencing token
/// of a claim and whether it deliberately corrects the same version.
#[derive(Clone, Copy, Debug)]
pub struct PutTo<'a> {
    /// Unit key.
    pub unit: &'a str,
    /// The source version the output was derived from.
    pub source_version: u64,
    /// The fencing token of the worker's lease, if it claimed the unit.
    pub token: Option<u64>,
    /// A deliberate correction of the same source version (a new revision).
    pub correct: bool,
}

/// The answer of a [`UnitStore::put_stream`]: the unit's outcome and what staging computed.
pub type PutAnswer<E> = Result<(UnitOutcome, ObjectMeta), E>;

/// The answer of [`UnitStore::stats`]: what the store holds, read from the store itself (so a
/// fresh process never reports zero for it), and what its process counted.
#[derive(Clone, Debug, Default)]
pub struct StoreStats {
    /// Units with a current entry.
    pub units: u64,
    /// The sum of the current entries' object sizes.
    pub bytes_stored: u64,
    /// The newest seq.
    pub last_seq: u64,
    /// The engine's counters and histograms (of a served store: the serving process's).
    pub metrics: MetricsSnapshot,
}

impl StoreStats {
    /// The Prometheus text exposition format: the metrics (their HELP lines carry the scope),
    /// then what was read from the store, as gauges.
    pub fn to_prometheus(&self) -> String {
        let mut text = self.metrics.to_prometheus();
        for (name, help, v) in [
            ("units", "units with a current entry", self.units),
            (
                "bytes_stored",
                "bytes of the current entries' objects",
                self.bytes_stored,
            ),
            (
                "last_seq",
                "newest commit log sequence number",
                self.last_seq,
            ),
        ] {
            text.push_str(&format!(
                "# HELP oncelake_{name} {help} (read from the store)\n\
                 # TYPE oncelake_{name} gauge\noncelake_{name} {v}\n"
            ));
        }
        text
    }
}

/// A store of units, open in this process or behind a server: every operation the CLI, the
/// Python binding and a pipeline worker need, with the engine's own answers either way.
pub trait UnitStore {
    /// What can go wrong (see the module documentation for why it is per implementation).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Commits `bytes` as the output of `unit` at `source_version` (one unit).
    fn put(
        &self,
        unit: &str,
        source_version: u64,
        bytes: &[u8],
    ) -> Result<UnitOutcome, Self::Error>;
    /// Commits several units in one commit: all-or-nothing unless `partial`.
    fn commit(&self, puts: &[Put<'_>], partial: bool) -> Result<CommitReport, Self::Error>;
    /// Streams `input` as the output of one unit and commits it: the outcome and what staging
    /// computed.
    fn put_stream(&self, to: PutTo<'_>, input: &mut dyn Read) -> PutAnswer<Self::Error>;
    /// The unit's entry now, or as of seq `at` (within the kept history).
    fn get_at(&self, unit: &str, at: Option<u64>) -> Result<Option<Entry>, Self::Error>;
    /// Writes the object of the unit's entry (now, or as of seq `at`) to `out` and returns the
    /// entry; `None` (nothing written) when it has none. Size and CRC32 are checked: a damaged
    /// object is an error, and what `out` got of it must be thrown away.
    fn read_into(
        &self,
        unit: &str,
        at: Option<u64>,
        out: &mut dyn Write,
    ) -> Result<Option<Entry>, Self::Error>;
    /// The entries under `prefix` (now, or as of seq `at`), to `each` in key order until it
    /// returns `false`.
    fn ls_at(
        &self,
        prefix: &str,
        at: Option<u64>,
        each: &mut dyn FnMut(Entry) -> bool,
    ) -> Result<(), Self::Error>;
    /// The unit's current entry.
    fn get(&self, unit: &str) -> Result<Option<Entry>, Self::Error> {
        self.get_at(unit, None)
    }
    /// The unit's current entry and its object's bytes (size and CRC32 checked).
    fn read(&self, unit: &str) -> Result<Option<(Entry, Vec<u8>)>, Self::Error> {
        let mut bytes = Vec::new();
        Ok(self.read_into(unit, None, &mut bytes)?.map(|e| (e, bytes)))
    }
    /// The current entries under `prefix`, to `each` in key order until it returns `false`.
    fn ls(&self, prefix: &str, each: &mut dyn FnMut(Entry) -> bool) -> Result<(), Self::Error> {
        self.ls_at(prefix, None, each)
    }
    /// The dedup fast path: the unit's committed version and object, from memory.
    fn lookup(&self, unit: &str) -> Result<Option<Committed>, Self::Error>;
    /// Whether `unit` is committed at `source_version` or newer.
    fn is_done(&self, unit: &str, source_version: u64) -> Result<bool, Self::Error> {
        Ok(self
            .lookup(unit)?
            .is_some_and(|c| c.source_version >= source_version))
    }
    /// The newest seq (0 for an empty log).
    fn last_seq(&self) -> Result<u64, Self::Error>;
    /// Makes everything acknowledged so far durable.
    fn flush(&self) -> Result<(), Self::Error>;
    /// Up to `limit` log records after `since`, in seq order.
    fn changes(&self, since: u64, limit: usize) -> Result<Vec<Record>, Self::Error>;
    /// Claims `unit` at `source_version` for `worker` for `ttl` (coordinator mode, SPEC R9).
    fn claim(
        &self,
        unit: &str,
        source_version: u64,
        worker: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome, Self::Error>;
    /// Extends a lease to `ttl` from now.
    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<RenewOutcome, Self::Error>;
    /// Ends a lease before it expires.
    fn release(&self, lease: &Lease) -> Result<ReleaseOutcome, Self::Error>;
    /// Garbage collection.
    fn gc(&self, options: GcOptions) -> Result<GcReport, Self::Error>;
    /// Checks the store (`deep`: also every object's hash), telling `progress` the objects
    /// checked and their total as it goes.
    fn verify_with_progress(
        &self,
        deep: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<VerifyReport, Self::Error>;
    /// Checks the store (`deep`: also every object's hash).
    fn verify(&self, deep: bool) -> Result<VerifyReport, Self::Error> {
        self.verify_with_progress(deep, &mut |_, _| {})
    }
    /// Plans a reconcile (SPEC R12) of `listing`, read in `form.format`, in the form asked; each
    /// event (the sort note, then the planned units) goes to `sink` until it returns `false`.
    /// The end: the summary of a complete plan, the refused listing, or the stop. The store is
    /// never modified.
    fn reconcile(
        &self,
        listing: &mut dyn Read,
        form: &ReconcileForm,
        sink: &mut dyn FnMut(PlanEvent<'_>) -> bool,
    ) -> Result<PlanEnd, Self::Error>;
    /// A lake node: applies what other nodes committed to the lake (nothing on a local store).
    /// The newest seq after it, and the lake's URL (`None`: a local store).
    fn sync(&self) -> Result<(u64, Option<String>), Self::Error>;
    /// A lake node: writes a checkpoint of its replica into the lake (see [`Store::checkpoint`]).
    fn checkpoint(&self) -> Result<CheckpointReport, Self::Error>;
    /// What the store holds (a scan of its current entries, the cost of a listing) and its
    /// metrics.
    fn stats(&self) -> Result<StoreStats, Self::Error>;

    /// Records the pipeline's definition in the store (its seq, `None` when already recorded).
    fn define(&self, pipeline: &Pipeline) -> Result<Option<u64>, Self::Error>;
    /// Records that `unit`'s source is at `version` with `input` as its bytes.
    fn set_source_version(
        &self,
        unit: &str,
        version: u64,
        input: &[u8],
    ) -> Result<UnitOutcome, Self::Error>;
    /// Up to `limit` cells of `pipeline` that may run now.
    fn ready_cells(&self, pipeline: &Pipeline, limit: usize)
        -> Result<Vec<ReadyCell>, Self::Error>;
    /// Claims a ready cell for `worker`.
    fn claim_cell(
        &self,
        pipeline: &Pipeline,
        cell: &ReadyCell,
        worker: &str,
        ttl: Duration,
    ) -> Result<Claim, Self::Error>;
    /// Completes a cell with its output.
    fn complete_cell(
        &self,
        pipeline: &Pipeline,
        attempt: &Attempt,
        output: &[u8],
    ) -> Result<UnitOutcome, Self::Error>;
    /// Records a failed run of a cell.
    fn fail_cell(
        &self,
        pipeline: &Pipeline,
        attempt: &Attempt,
        error: &str,
    ) -> Result<FailOutcome, Self::Error>;
    /// The bytes of a ready cell's input (`stage` `None`: the unit's source).
    fn cell_input(&self, cell: &ReadyCell, stage: Option<&str>) -> Result<Vec<u8>, Self::Error>;
    /// The pipeline's cell counts.
    fn pipeline_status(&self, pipeline: &Pipeline) -> Result<Status, Self::Error>;
    /// Why each cell of `unit` is in its state.
    fn explain(&self, pipeline: &Pipeline, unit: &str) -> Result<Explain, Self::Error>;

    /// The ready cells and how many are running, for [`WorkOptions::wait_for_running`]. A store
    /// that cannot count running cells in the same call answers 0: its worker stops when none is
    /// ready.
    fn ready_and_running(
        &self,
        pipeline: &Pipeline,
        limit: usize,
    ) -> Result<(Vec<ReadyCell>, u64), Self::Error> {
        Ok((self.ready_cells(pipeline, limit)?, 0))
    }

    /// Whether a listed cell was completed or claimed by another worker since the listing: a
    /// cheap check before a claim. The default asks nothing (the claim answers it).
    fn cell_taken(
        &self,
        _pipeline: &Pipeline,
        _cell: &ReadyCell,
        _worker: &str,
    ) -> Result<bool, Self::Error> {
        Ok(false)
    }
}

/// Runs ready cells of `pipeline` on `store` until none is ready: claims each, runs `stage_fn`
/// on it, completes it with the output or records the error as a failure (retried until the
/// stage's `max_attempts`). Every rule is the store's engine's, in this process or a server's.
pub fn work<S, F>(
    store: &S,
    pipeline: &Pipeline,
    worker: &str,
    opts: &WorkOptions,
    mut stage_fn: F,
) -> Result<WorkReport, S::Error>
where
    S: UnitStore + ?Sized,
    F: FnMut(&ReadyCell) -> Result<Vec<u8>, String>,
{
    store.define(pipeline)?;
    let mut report = WorkReport::default();
    // Workers start at different places in the ready list so they rarely race for a cell.
    let spread = blake3::hash(worker.as_bytes()).as_bytes()[0] as usize;
    let mut idle = 0u32;
    loop {
        let (ready, running) = store.ready_and_running(pipeline, usize::MAX)?;
        if ready.is_empty() {
            if opts.wait_for_running && running > 0 {
                // Back off while waiting: every poll is a full scan.
                idle = (idle + 1).min(10);
                std::thread::sleep(opts.poll * idle);
                continue;
            }
            return Ok(report);
        }
        idle = 0;
        let start = spread % ready.len();
        for cell in ready[start..].iter().chain(&ready[..start]) {
            if store.cell_taken(pipeline, cell, worker)? {
                continue;
            }
            let (lease, cell) = match store.claim_cell(pipeline, cell, worker, opts.ttl)? {
                Claim::Granted { lease, cell } => (lease, cell),
                _ => continue,
            };
            report.runs += 1;
            report.retried += (cell.attempts > 0) as u64;
            report.invalidated += cell.stale.is_some() as u64;
            let attempt = Attempt {
                unit: cell.unit.clone(),
                stage: cell.stage.clone(),
                source_version: cell.source_version,
                worker: worker.to_string(),
                token: Some(lease.token),
            };
            match stage_fn(&cell) {
                Ok(output) => match store.complete_cell(pipeline, &attempt, &output)?.outcome {
                    Outcome::Committed { .. } => report.completed += 1,
                    Outcome::Duplicate { .. } => report.duplicates += 1,
                    _ => report.rejected += 1,
                },
                Err(e) => match store.fail_cell(pipeline, &attempt, &e)? {
                    FailOutcome::Recorded { .. } => report.failed += 1,
                    FailOutcome::Fenced { .. } | FailOutcome::Busy { .. } => report.rejected += 1,
                },
            }
        }
    }
}

impl Pipeline {
    /// Runs ready cells until none is ready: claims each, runs `stage_fn` on it, completes it with
    /// the output or records the error as a failure. Failed cells are retried (by this or a later
    /// call) until their stage's `max_attempts`.
    pub fn work<F>(&self, store: &Store, worker: &str, stage_fn: F) -> crate::Result<WorkReport>
    where
        F: FnMut(&ReadyCell) -> Result<Vec<u8>, String>,
    {
        self.work_with(store, worker, &WorkOptions::default(), stage_fn)
    }

    /// [`Pipeline::work`] with options: [`work`] on the store in this process.
    pub fn work_with<F>(
        &self,
        store: &Store,
        worker: &str,
        opts: &WorkOptions,
        stage_fn: F,
    ) -> crate::Result<WorkReport>
    where
        F: FnMut(&ReadyCell) -> Result<Vec<u8>, String>,
    {
        validate_worker(worker)?;
        work(store, self, worker, opts, stage_fn)
    }
}

impl UnitStore for Store {
    type Error = crate::Error;

    fn put(&self, unit: &str, source_version: u64, bytes: &[u8]) -> crate::Result<UnitOutcome> {
        Store::put(self, unit, source_version, bytes)
    }

    fn commit(&self, puts: &[Put<'_>], partial: bool) -> crate::Result<CommitReport> {
        let mut batch = Batch::new();
        for p in puts {
            let staged = self.stage_bytes(p.bytes)?;
            let intent = if p.correct {
                Intent::Correct
            } else {
                Intent::Put
            };
            batch = batch.item(p.unit.into(), p.source_version, &staged, p.token, intent);
        }
        if partial {
            batch = batch.partial();
        }
        Store::commit(self, batch)
    }

    fn put_stream(&self, to: PutTo<'_>, input: &mut dyn Read) -> PutAnswer<crate::Error> {
        let staged = self.stage_reader(input)?;
        let intent = if to.correct {
            Intent::Correct
        } else {
            Intent::Put
        };
        let batch = Batch::new().item(to.unit.into(), to.source_version, &staged, to.token, intent);
        let mut report = Store::commit(self, batch)?;
        Ok((report.units.remove(0), staged.meta()))
    }

    fn get_at(&self, unit: &str, at: Option<u64>) -> crate::Result<Option<Entry>> {
        match at {
            None => Store::get(self, unit),
            Some(_) => snapshot_at(self, at)?.get(unit),
        }
    }

    /// The object is read whole and checked before anything is written, so `out` never gets a
    /// damaged object's bytes.
    fn read_into(
        &self,
        unit: &str,
        at: Option<u64>,
        out: &mut dyn Write,
    ) -> crate::Result<Option<Entry>> {
        let snap = snapshot_at(self, at)?;
        let Some(entry) = snap.get(unit)? else {
            return Ok(None);
        };
        let bytes = snap.read_object(&entry)?;
        out.write_all(&bytes)
            .map_err(|e| crate::Error::io(format!("write the object of {unit:?}"), e))?;
        Ok(Some(entry))
    }

    fn ls_at(
        &self,
        prefix: &str,
        at: Option<u64>,
        each: &mut dyn FnMut(Entry) -> bool,
    ) -> crate::Result<()> {
        for entry in snapshot_at(self, at)?.prefix(prefix)? {
            if !each(entry?) {
                break;
            }
        }
        Ok(())
    }

    fn lookup(&self, unit: &str) -> crate::Result<Option<Committed>> {
        Store::lookup(self, unit)
    }

    fn is_done(&self, unit: &str, source_version: u64) -> crate::Result<bool> {
        Store::is_done(self, unit, source_version)
    }

    fn last_seq(&self) -> crate::Result<u64> {
        Store::last_seq(self)
    }

    fn flush(&self) -> crate::Result<()> {
        Store::flush(self)
    }

    fn changes(&self, since: u64, limit: usize) -> crate::Result<Vec<Record>> {
        self.changes_since(since)?.take(limit).collect()
    }

    fn claim(
        &self,
        unit: &str,
        source_version: u64,
        worker: &str,
        ttl: Duration,
    ) -> crate::Result<ClaimOutcome> {
        Store::claim(self, unit, source_version, worker, ttl)
    }

    fn renew(&self, lease: &Lease, ttl: Duration) -> crate::Result<RenewOutcome> {
        Store::renew(self, lease, ttl)
    }

    fn release(&self, lease: &Lease) -> crate::Result<ReleaseOutcome> {
        Store::release(self, lease)
    }

    fn gc(&self, options: GcOptions) -> crate::Result<GcReport> {
        Store::gc(self, options)
    }

    fn verify_with_progress(
        &self,
        deep: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> crate::Result<VerifyReport> {
        Store::verify_with_progress(self, VerifyOptions { deep }, progress)
    }

    fn reconcile(
        &self,
        listing: &mut dyn Read,
        form: &ReconcileForm,
        sink: &mut dyn FnMut(PlanEvent<'_>) -> bool,
    ) -> crate::Result<PlanEnd> {
        crate::reconcile::reconcile_listing(self, listing, form, sink)
    }

    fn sync(&self) -> crate::Result<(u64, Option<String>)> {
        Store::sync(self)?;
        Ok((Store::last_seq(self)?, self.lake_url()))
    }

    fn checkpoint(&self) -> crate::Result<CheckpointReport> {
        Store::checkpoint(self)
    }

    /// One snapshot: the units, their bytes and the seq agree.
    fn stats(&self) -> crate::Result<StoreStats> {
        let snap = self.snapshot()?;
        let (mut units, mut bytes_stored) = (0, 0);
        for e in snap.iter()? {
            units += 1;
            bytes_stored += e?.object.size;
        }
        Ok(StoreStats {
            units,
            bytes_stored,
            last_seq: snap.seq(),
            metrics: self.metrics(),
        })
    }

    fn define(&self, pipeline: &Pipeline) -> crate::Result<Option<u64>> {
        pipeline.record_definition(self)
    }

    fn set_source_version(
        &self,
        unit: &str,
        version: u64,
        input: &[u8],
    ) -> crate::Result<UnitOutcome> {
        crate::pipeline::set_source_version(self, unit, version, input)
    }

    fn ready_cells(&self, pipeline: &Pipeline, limit: usize) -> crate::Result<Vec<ReadyCell>> {
        pipeline.ready(self, limit)
    }

    fn claim_cell(
        &self,
        pipeline: &Pipeline,
        cell: &ReadyCell,
        worker: &str,
        ttl: Duration,
    ) -> crate::Result<Claim> {
        pipeline.claim(self, cell, worker, ttl)
    }

    fn complete_cell(
        &self,
        pipeline: &Pipeline,
        attempt: &Attempt,
        output: &[u8],
    ) -> crate::Result<UnitOutcome> {
        pipeline.complete(self, attempt, output)
    }

    fn fail_cell(
        &self,
        pipeline: &Pipeline,
        attempt: &Attempt,
        error: &str,
    ) -> crate::Result<FailOutcome> {
        pipeline.fail(self, attempt, error)
    }

    fn cell_input(&self, cell: &ReadyCell, stage: Option<&str>) -> crate::Result<Vec<u8>> {
        cell.read_input(self, stage)
    }

    fn pipeline_status(&self, pipeline: &Pipeline) -> crate::Result<Status> {
        pipeline.status(self)
    }

    fn explain(&self, pipeline: &Pipeline, unit: &str) -> crate::Result<Explain> {
        pipeline.explain(self, unit)
    }

    fn ready_and_running(
        &self,
        pipeline: &Pipeline,
        limit: usize,
    ) -> crate::Result<(Vec<ReadyCell>, u64)> {
        pipeline.ready_and_running(self, limit)
    }

    /// Memory and one read: skips cells another worker completed or holds since the listing,
    /// without a round trip through the commit leader.
    fn cell_taken(
        &self,
        pipeline: &Pipeline,
        cell: &ReadyCell,
        worker: &str,
    ) -> crate::Result<bool> {
        Ok(self.is_done(&cell.key, cell.source_version)?
            || pipeline.held_by_other(self, &cell.key, worker)?)
    }
}

/// The store's snapshot now, or as of seq `at`.
fn snapshot_at(store: &Store, at: Option<u64>) -> crate::Result<Snapshot> {
    match at {
        Some(seq) => store.snapshot_at(seq),
        None => store.snapshot(),
    }
}
