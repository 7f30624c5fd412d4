//! Maintenance over the API: gc, verify, reconcile.

use crate::client::{Client, Payload};
use crate::error::{lost, ClientError, Result};
use crate::http1::{encode, to_json};
use crate::wire_reconcile;
use oncelake::reconcile::{PlanEnd, PlanEvent, ReconcileForm};
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

impl Client {
    /// Runs GC on the server (the server's defaults for `grace` and `retain` when `None`).
    pub fn gc(
        &self,
        dry_run: bool,
        grace: Option<Duration>,
        retain: Option<Duration>,
    ) -> Result<oncelake::GcReport> {
        let body = to_json(&serde_json::json!({
            "dry_run": dry_run,
            "grace_ms": grace.map(|d| d.as_millis() as u64),
            "retain_ms": retain.map(|d| d.as_millis() as u64),
        }))?;
        self.json("POST", "/v1/gc", Payload::Json(body))
    }

    /// Runs verify on the server: the engine's whole report, as `Store::verify` returns it.
    pub fn verify(&self, deep: bool) -> Result<oncelake::VerifyReport> {
        #[derive(serde::Deserialize)]
        struct Answer {
            report: oncelake::VerifyReport,
        }
        let body = to_json(&serde_json::json!({ "deep": deep }))?;
        let a: Answer = self.json("POST", "/v1/verify", Payload::Json(body))?;
        Ok(a.report)
    }

    /// [`Client::verify`], calling `progress(done, total)` (objects) as the server reports it.
    pub fn verify_with_progress(
        &self,
        deep: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<oncelake::VerifyReport> {
        #[derive(serde::Deserialize)]
        struct Line {
            progress: Option<Progress>,
            report: Option<oncelake::VerifyReport>,
            error: Option<String>,
            #[serde(default)]
            message: String,
        }
        #[derive(serde::Deserialize)]
        struct Progress {
            done: u64,
            total: u64,
        }
        let body = to_json(&serde_json::json!({ "deep": deep, "progress": true }))?;
        let resp = self.request("POST", "/v1/verify", Payload::Json(body))?;
        for line in BufReader::new(resp.body).lines() {
            let line = line.map_err(|e| lost("POST /v1/verify", e))?;
            let l: Line = serde_json::from_str(&line)
                .map_err(|e| ClientError::Protocol(format!("a verify line: {e}")))?;
            if let Some(p) = l.progress {
                progress(p.done, p.total);
            } else if let Some(r) = l.report {
                return Ok(r);
            } else if let Some(kind) = l.error {
                return Err(ClientError::Store {
                    kind,
                    status: 500,
                    message: l.message,
                });
            }
        }
        Err(lost(
            "POST /v1/verify",
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the answer ended without the report",
            ),
        ))
    }

    /// Plans a reconcile on the server: `listing` (in `form.format`) is streamed as the request
    /// body, never held whole; each answer line goes to `each` (the sort note, then the planned
    /// units) until it returns `false`. The end: the summary of a complete plan, or the refused
    /// listing (the units passed before it are then an incomplete plan).
    /// `form.sort_in` is sent absolute: the server would resolve a relative path against its own
    /// directory. This is the client's `UnitStore::reconcile`.
    pub fn reconcile(
        &self,
        listing: &mut dyn Read,
        form: &ReconcileForm,
        mut each: impl FnMut(PlanEvent<'_>) -> bool,
    ) -> Result<PlanEnd> {
        let mut path = format!(
            "/v1/reconcile?form={}&format={}&list_up_to_date={}&sort={}",
            if form.changes_only { "changes" } else { "full" },
            form.format.name(),
            form.list_up_to_date,
            form.sort_in.is_some()
        );
        if let Some(dir) = &form.sort_in {
            // The server resolves a relative path against its own directory.
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            path.push_str(&format!("&tmp={}", encode(&dir.to_string_lossy())));
        }
        let resp = self.request("POST", &path, Payload::Stream(listing))?;
        for line in BufReader::new(resp.body).lines() {
            let line = line.map_err(|e| lost("POST /v1/reconcile", e))?;
            let l: wire_reconcile::PlanLineW = serde_json::from_str(&line)
                .map_err(|e| ClientError::Protocol(format!("a reconcile line: {e}")))?;
            let go_on = match &l {
                wire_reconcile::PlanLineW::Sorted(s) => each(PlanEvent::Sorted {
                    was_sorted: s.was_sorted,
                    rows: s.rows,
                    spilled_runs: s.spilled_runs,
                }),
                wire_reconcile::PlanLineW::Item(i) => each(PlanEvent::Item(i.item())),
                wire_reconcile::PlanLineW::Summary(s) => return Ok(PlanEnd::Complete(*s)),
                wire_reconcile::PlanLineW::Error(e) => return plan_error(e),
            };
            if !go_on {
                return Ok(PlanEnd::Stopped);
            }
        }
        Err(lost(
            "POST /v1/reconcile",
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the plan ended without its summary",
            ),
        ))
    }
}

pub(crate) fn plan_error(e: &wire_reconcile::ErrorLineW) -> Result<PlanEnd> {
    match &e.listing {
        Some(kind) => Ok(PlanEnd::BadListing {
            kind: kind.clone(),
            message: e.message.clone(),
        }),
        None => Err(ClientError::Store {
            kind: e.kind.clone(),
            status: 500,
            message: e.message.clone(),
        }),
    }
}
