//! Maintenance over the API: gc, verify, reconcile.

use crate::client::{Client, Payload};
use crate::error::{lost, ClientError, Result};
use crate::http1::{encode, to_json};
use crate::wire_reconcile;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
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

/// How a reconcile is planned on the server.
#[derive(Clone, Debug)]
pub struct ReconcileForm {
    /// The listing holds only the changed units (incremental form); else it is a full listing.
    pub changes_only: bool,
    /// The listing's syntax.
    pub format: oncelake::reconcile::ListingFormat,
    /// Also pass up-to-date units.
    pub list_up_to_date: bool,
    /// A full listing not sorted by unit: the server sorts it first, spilling runs to this
    /// directory (a path the server can write; make it absolute).
    pub sort_in: Option<PathBuf>,
}

/// A line of a reconcile answer before its end.
#[derive(Debug)]
pub enum PlanEvent<'a> {
    /// The server sorted the listing before the merge.
    Sorted {
        /// It was in order already.
        was_sorted: bool,
        /// Rows sorted.
        rows: u64,
        /// Runs spilled to temporary files.
        spilled_runs: u64,
    },
    /// A planned unit.
    Item(oncelake::reconcile::PlanItem<'a>),
}

/// How a reconcile answer ended.
#[derive(Debug)]
pub enum PlanEnd {
    /// The plan is complete.
    Complete(oncelake::reconcile::Summary),
    /// The listing was refused: `kind` names the listing error (`malformed`, `bad_version`,
    /// `invalid_key`, `duplicate`, `unsorted`, `io`), `message` says which line and why.
    BadListing {
        /// The listing error's kind.
        kind: String,
        /// The engine's message.
        message: String,
    },
    /// The caller stopped reading.
    Stopped,
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
