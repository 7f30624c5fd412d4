//! The engine's [`UnitStore`] over the API: each operation one call (or, for a batch commit,
//! one upload per unit and one commit), answering the engine's own types, so a program written
//! over the trait runs the same on a served store as on one open in its process. Leases
//! (claim, renew, release) are the trait's methods only: bring `oncelake::UnitStore` into scope.

use crate::client::{Client, Payload};
use crate::error::{ClientError, Result};
use crate::http1::to_json;
use crate::wire::{ClaimReqW, CommitItemW, ReleaseReqW, RenewReqW};
use oncelake::log::Record;
use oncelake::pipeline::{Attempt, Claim, Explain, FailOutcome, Pipeline, ReadyCell, Status};
use oncelake::reconcile::{PlanEnd, PlanEvent, ReconcileForm};
use oncelake::{
    CheckpointReport, ClaimOutcome, CommitReport, Committed, Entry, GcOptions, GcReport, Lease,
    Put, PutAnswer, PutTo, ReleaseOutcome, RenewOutcome, StoreStats, UnitOutcome, UnitStore,
    VerifyReport,
};
use std::io::{Read, Write};
use std::time::Duration;

impl UnitStore for Client {
    type Error = ClientError;

    fn put(&self, unit: &str, source_version: u64, bytes: &[u8]) -> Result<UnitOutcome> {
        Ok(self.put_reader(unit, source_version, None, false, bytes)?.0)
    }

    fn commit(&self, puts: &[Put<'_>], partial: bool) -> Result<CommitReport> {
        let mut items = Vec::with_capacity(puts.len());
        for p in puts {
            let (staged, _) = self.stage_reader(p.bytes)?;
            items.push(CommitItemW {
                unit: p.unit.to_string(),
                source_version: p.source_version,
                staged,
                token: p.token,
                correct: p.correct,
            });
        }
        Client::commit(self, items, partial)
    }

    fn put_stream(&self, to: PutTo<'_>, input: &mut dyn Read) -> PutAnswer<ClientError> {
        self.put_reader(to.unit, to.source_version, to.token, to.correct, input)
    }

    fn get_at(&self, unit: &str, at: Option<u64>) -> Result<Option<Entry>> {
        Client::get(self, unit, at)
    }

    /// Streamed: `out` gets the bytes as they arrive, and the size and CRC32 are checked at the
    /// end (a damaged object is [`ClientError::Damaged`] after `out` got it).
    fn read_into(&self, unit: &str, at: Option<u64>, out: &mut dyn Write) -> Result<Option<Entry>> {
        self.read_object(unit, at, out)
    }

    fn ls_at(
        &self,
        prefix: &str,
        at: Option<u64>,
        each: &mut dyn FnMut(Entry) -> bool,
    ) -> Result<()> {
        Client::ls(self, prefix, at, each)
    }

    fn lookup(&self, unit: &str) -> Result<Option<Committed>> {
        Client::lookup(self, unit)
    }

    fn last_seq(&self) -> Result<u64> {
        Client::last_seq(self)
    }

    fn flush(&self) -> Result<()> {
        Client::flush(self)
    }

    fn changes(&self, since: u64, limit: usize) -> Result<Vec<Record>> {
        Ok(self.changes_since(since, Duration::ZERO, limit)?.0)
    }

    fn claim(
        &self,
        unit: &str,
        source_version: u64,
        worker: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome> {
        let body = to_json(&ClaimReqW {
            unit: unit.into(),
            source_version,
            worker: worker.into(),
            ttl_ms: ttl.as_millis() as u64,
        })?;
        self.json("POST", "/v1/claim", Payload::Json(body))
    }

    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<RenewOutcome> {
        let body = to_json(&RenewReqW {
            lease: lease.clone(),
            ttl_ms: ttl.as_millis() as u64,
        })?;
        self.json("POST", "/v1/renew", Payload::Json(body))
    }

    fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        let body = to_json(&ReleaseReqW {
            lease: lease.clone(),
        })?;
        self.json("POST", "/v1/release", Payload::Json(body))
    }

    fn gc(&self, options: GcOptions) -> Result<GcReport> {
        Client::gc(
            self,
            options.dry_run,
            Some(options.grace),
            Some(options.retain),
        )
    }

    fn verify_with_progress(
        &self,
        deep: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<VerifyReport> {
        Client::verify_with_progress(self, deep, progress)
    }

    /// Without progress: one answer, not a stream of progress lines.
    fn verify(&self, deep: bool) -> Result<VerifyReport> {
        Client::verify(self, deep)
    }

    fn reconcile(
        &self,
        listing: &mut dyn Read,
        form: &ReconcileForm,
        sink: &mut dyn FnMut(PlanEvent<'_>) -> bool,
    ) -> Result<PlanEnd> {
        Client::reconcile(self, listing, form, sink)
    }

    fn sync(&self) -> Result<(u64, Option<String>)> {
        Client::sync(self)
    }

    fn checkpoint(&self) -> Result<CheckpointReport> {
        let (segment, bytes, written) = Client::checkpoint(self)?;
        Ok(CheckpointReport {
            segment,
            bytes,
            written,
        })
    }

    /// The engine's part of `/v1/stats` (`Client::stats` has the server's own counters too).
    fn stats(&self) -> Result<StoreStats> {
        Ok(Client::stats(self)?.store_stats())
    }

    fn define(&self, pipeline: &Pipeline) -> Result<Option<u64>> {
        self.pipeline_define(&pipeline.def().to_text())
    }

    fn set_source_version(&self, unit: &str, version: u64, input: &[u8]) -> Result<UnitOutcome> {
        self.pipeline_set_version(unit, version, input)
    }

    fn ready_cells(&self, pipeline: &Pipeline, limit: usize) -> Result<Vec<ReadyCell>> {
        self.pipeline_ready(&pipeline.def().to_text(), limit)
    }

    fn claim_cell(
        &self,
        pipeline: &Pipeline,
        cell: &ReadyCell,
        worker: &str,
        ttl: Duration,
    ) -> Result<Claim> {
        self.pipeline_claim(&pipeline.def().to_text(), cell, worker, ttl)
    }

    fn complete_cell(
        &self,
        pipeline: &Pipeline,
        attempt: &Attempt,
        output: &[u8],
    ) -> Result<UnitOutcome> {
        self.pipeline_complete(&pipeline.def().to_text(), attempt, output)
    }

    fn fail_cell(
        &self,
        pipeline: &Pipeline,
        attempt: &Attempt,
        error: &str,
    ) -> Result<FailOutcome> {
        self.pipeline_fail(&pipeline.def().to_text(), attempt, error)
    }

    fn cell_input(&self, cell: &ReadyCell, stage: Option<&str>) -> Result<Vec<u8>> {
        self.pipeline_input(cell, stage)
    }

    fn pipeline_status(&self, pipeline: &Pipeline) -> Result<Status> {
        Client::pipeline_status(self, &pipeline.def().to_text())
    }

    fn explain(&self, pipeline: &Pipeline, unit: &str) -> Result<Explain> {
        self.pipeline_explain(&pipeline.def().to_text(), unit)
    }
}
