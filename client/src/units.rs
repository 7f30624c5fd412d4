//! The unit operations of the API: health, stats, put and stage, commit, leases, reads,
//! listings and the change feed.

use crate::client::{Client, Payload};
use crate::error::{lost, ClientError, Result};
use crate::http1::{encode, to_json, unit_query};
use crate::wire;
use crate::wire::{ChangesW, CommitItemW, CommitW, PutW, StagedW};
use oncelake::log::Record;
use oncelake::CommitReport;
use oncelake::Committed;
use oncelake::Entry;
use oncelake::ObjectMeta;
use oncelake::UnitOutcome;
use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

impl Client {
    /// `GET /healthz`.
    pub fn health(&self) -> Result<serde_json::Value> {
        self.json("GET", "/healthz", Payload::Empty)
    }

    /// `GET /metrics`: the Prometheus text.
    pub fn metrics_text(&self) -> Result<String> {
        let mut resp = self.request("GET", "/metrics", Payload::Empty)?;
        let mut s = String::new();
        resp.body
            .read_to_string(&mut s)
            .map_err(|e| lost("GET /metrics", e))?;
        Ok(s)
    }

    /// `GET /v1/stats`: the engine's metrics (each counter with its scope), the unit count and
    /// seq read from the store, and the server's own counters.
    pub fn stats(&self) -> Result<crate::wire_stats::StatsW> {
        self.json("GET", "/v1/stats", Payload::Empty)
    }

    /// Streams `input` as the output of `unit` at `source_version` and commits it (one unit):
    /// the unit's outcome and what staging computed.
    pub fn put_reader(
        &self,
        unit: &str,
        source_version: u64,
        token: Option<u64>,
        correct: bool,
        mut input: impl Read,
    ) -> Result<(UnitOutcome, ObjectMeta)> {
        let mut q = format!("/v1/put?unit={}&version={source_version}", encode(unit));
        if let Some(t) = token {
            q.push_str(&format!("&token={t}"));
        }
        if correct {
            q.push_str("&correct=true");
        }
        let r: PutW = self.json("PUT", &q, Payload::Stream(&mut input))?;
        Ok((r.unit, r.staged))
    }

    /// Streams `input` into the server's staging: a handle for [`Client::commit`].
    pub fn stage_reader(&self, mut input: impl Read) -> Result<(u64, ObjectMeta)> {
        let r: StagedW = self.json("POST", "/v1/stage", Payload::Stream(&mut input))?;
        Ok((r.staged, r.meta))
    }

    /// Commits a batch of staged handles (all-or-nothing unless `partial`); the handles are
    /// dropped afterwards.
    pub fn commit(&self, items: Vec<CommitItemW>, partial: bool) -> Result<CommitReport> {
        self.commit_with(items, partial, false)
    }

    /// [`Client::commit`], keeping the handles when `keep_staged` (to commit the same bytes
    /// again as other units).
    pub fn commit_with(
        &self,
        items: Vec<CommitItemW>,
        partial: bool,
        keep_staged: bool,
    ) -> Result<CommitReport> {
        let body = to_json(&CommitW {
            items,
            partial,
            keep_staged,
        })?;
        self.json("POST", "/v1/commit", Payload::Json(body))
    }

    /// The dedup fast path: the unit's committed version, if any.
    pub fn lookup(&self, unit: &str) -> Result<Option<Committed>> {
        #[derive(serde::Deserialize)]
        struct R {
            committed: Option<Committed>,
        }
        let r: R = self.json(
            "GET",
            &format!("/v1/lookup?unit={}", encode(unit)),
            Payload::Empty,
        )?;
        Ok(r.committed)
    }

    /// The unit's entry, newest or as of `at`.
    pub fn get(&self, unit: &str, at: Option<u64>) -> Result<Option<Entry>> {
        #[derive(serde::Deserialize)]
        struct R {
            entry: Option<Entry>,
        }
        let r: R = self.json("GET", &unit_query("/v1/entry", unit, at), Payload::Empty)?;
        Ok(r.entry)
    }

    /// Copies the unit's object (newest or as of `at`) into `out`, streamed; its entry, or
    /// `None` when the unit has none. The object is checked against its entry's size and CRC32
    /// as in-process: a damaged one fails with [`ClientError::Damaged`] holding the engine's own
    /// error — after its bytes were written to `out`, so write somewhere you can discard on error.
    pub fn read_object(
        &self,
        unit: &str,
        at: Option<u64>,
        out: &mut dyn Write,
    ) -> Result<Option<Entry>> {
        self.object_to(&unit_query("/v1/object", unit, at), "GET /v1/object", out)
    }

    /// `GET path` of an object endpoint: the object streamed into `out`, its entry from the
    /// `x-oncelake-entry` header; `None` on 404 (the unit has no entry there).
    pub(crate) fn object_to(
        &self,
        path: &str,
        what: &str,
        out: &mut dyn Write,
    ) -> Result<Option<Entry>> {
        let mut resp = match self.request("GET", path, Payload::Empty) {
            Err(ClientError::Store { status: 404, .. }) => return Ok(None),
            other => other?,
        };
        let entry: Entry = resp
            .header("x-oncelake-entry")
            .and_then(|h| serde_json::from_str(h).ok())
            .ok_or_else(|| ClientError::Protocol("an object without its entry header".into()))?;
        let mut checked = crate::object_check::Checking::new(out);
        std::io::copy(&mut resp.body, &mut checked).map_err(|e| lost(what, e))?;
        // The in-process read's size and CRC32 check (SPEC I2), made as the bytes arrived.
        match checked.damaged(&entry) {
            None => Ok(Some(entry)),
            Some(e) => Err(ClientError::Damaged(e)),
        }
    }

    /// The entries under `prefix` (newest or as of `at`), streamed to `each` in key order until
    /// it returns `false`.
    pub fn ls(&self, prefix: &str, at: Option<u64>, each: impl FnMut(Entry) -> bool) -> Result<()> {
        let mut path = format!("/v1/ls?prefix={}", encode(prefix));
        if let Some(at) = at {
            path.push_str(&format!("&at={at}"));
        }
        self.entries(&path, "GET /v1/ls", each)
    }

    /// The entries streamed as JSON lines by `GET path` (an ls, of the store or of a view), to
    /// `each` in key order until it returns `false`.
    pub(crate) fn entries(
        &self,
        path: &str,
        during: &str,
        mut each: impl FnMut(Entry) -> bool,
    ) -> Result<()> {
        let resp = self.request("GET", path, Payload::Empty)?;
        for line in BufReader::new(resp.body).lines() {
            let line = line.map_err(|e| lost(during, e))?;
            let e: Entry = serde_json::from_str(&line)
                .map_err(|e| ClientError::Protocol(format!("an ls line: {e}")))?;
            if !each(e) {
                break;
            }
        }
        Ok(())
    }

    /// The log records after `since` (at most `limit`); with `wait`, waits up to that long for
    /// the next commit when there is none yet (long-polling). Also the store's seq when read.
    pub fn changes_since(
        &self,
        since: u64,
        wait: Duration,
        limit: usize,
    ) -> Result<(Vec<Record>, u64)> {
        let path = format!(
            "/v1/changes?since={since}&wait_ms={}&limit={limit}",
            wait.as_millis()
        );
        let r: ChangesW = self.json("GET", &path, Payload::Empty)?;
        let records = r
            .records
            .iter()
            .map(|rec| {
                let bytes = wire::from_hex(&rec.record).map_err(ClientError::Protocol)?;
                Record::decode(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((records, r.seq))
    }
}
