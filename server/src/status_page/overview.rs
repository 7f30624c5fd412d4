//! `GET /v1/overview`: what the status page draws that `/v1/stats` does not carry — the latest
//! log records, this server's latest GC and verify, and the recorded pipeline's stages with their
//! cell counts. Everything is read from the store (a read transaction on the blocking pool, which
//! commits do not wait for) or from what the server already keeps; nothing is counted on the
//! commit path for it.

use crate::api_error::{json, ApiResult, Q};
use crate::app::App;
use crate::recent::{now_ms, GcSeen, VerifySeen};
use axum::extract::State;
use axum::response::Response;
use oncelake::log::{Record, RecordBody};
use oncelake::pipeline::cell::{TAG_CELL_FAILED, TAG_DEFINITION};
use oncelake::pipeline::StageStatus;
use oncelake::pipeline::{Pipeline, PipelineDef};
use oncelake::Store;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Most records one overview lists.
const MAX_RECORDS: u64 = 200;
/// Units listed per commit record (the rest are counted).
const UNITS_PER_RECORD: usize = 4;

#[derive(Deserialize)]
pub(crate) struct OverviewQ {
    /// How many of the latest log records to list (default 20, at most 200).
    records: Option<u64>,
}

/// The answer.
#[derive(Serialize)]
struct OverviewW {
    store: String,
    pid: u32,
    now_ms: u64,
    seq: u64,
    /// The latest log records, newest first.
    records: Vec<RecordW>,
    gc: Option<GcSeen>,
    verify: Option<VerifySeen>,
    /// The pipeline whose definition is recorded in the store, if any.
    pipeline: Option<PipelineW>,
    /// Why the pipeline could not be drawn (its recorded definition no longer parses).
    pipeline_error: Option<String>,
}

/// One log record, shortened.
#[derive(Serialize)]
struct RecordW {
    seq: u64,
    time_ms: u64,
    /// `commit`, `claim`, `release`, `cell_failed` (a pipeline cell's failure), `definition` (a
    /// pipeline definition recorded) or `extension` (another higher layer's record).
    kind: &'static str,
    /// The first units of a commit, or the unit of a claim or release.
    units: Vec<UnitW>,
    /// Units of a commit not listed.
    more: usize,
    /// The worker of a claim or release.
    worker: Option<String>,
}

#[derive(Serialize)]
struct UnitW {
    unit: String,
    version: u64,
    size: Option<u64>,
}

/// The recorded pipeline: each stage, its upstream stages and its cells by state.
#[derive(Serialize)]
struct PipelineW {
    /// The seq that recorded this definition.
    recorded_seq: u64,
    /// Units with a source version.
    units: u64,
    /// Upstream stages first.
    stages: Vec<StageW>,
}

#[derive(Serialize)]
struct StageW {
    upstream: Vec<String>,
    #[serde(flatten)]
    cells: StageStatus,
}

pub(crate) async fn overview(
    State(app): State<Arc<App>>,
    Q(q): Q<OverviewQ>,
) -> ApiResult<Response> {
    let n = q.records.unwrap_or(20).min(MAX_RECORDS);
    let app2 = app.clone();
    let (gc, verify) = app.recent.seen();
    let v = app
        .blocking(move || -> oncelake::Result<OverviewW> {
            let store = &app2.store;
            let seq = store.last_seq()?;
            let (pipeline, pipeline_error) = match pipeline(store)? {
                Ok(p) => (p, None),
                Err(e) => (None, Some(e)),
            };
            Ok(OverviewW {
                store: app2.dir.display().to_string(),
                pid: std::process::id(),
                now_ms: now_ms(),
                seq,
                records: latest(store, seq, n)?,
                gc,
                verify,
                pipeline,
                pipeline_error,
            })
        })
        .await?;
    Ok(json(&v))
}

/// The `n` records up to `seq`, newest first. Records GC has pruned from the history are not
/// there to list: the page then shows fewer.
fn latest(store: &Store, seq: u64, n: u64) -> oncelake::Result<Vec<RecordW>> {
    let mut out = Vec::new();
    let snap = store.snapshot()?;
    let from = seq.saturating_sub(n);
    let records = match snap.changes_since(from) {
        Ok(r) => r,
        Err(oncelake::Error::SeqOutOfRange { .. }) => return Ok(out),
        Err(e) => return Err(e),
    };
    for r in records {
        out.push(shorten(&r?));
    }
    out.reverse();
    Ok(out)
}

fn shorten(r: &Record) -> RecordW {
    let (kind, units, more, worker) = match &r.body {
        RecordBody::Commit { entries } => (
            "commit",
            entries
                .iter()
                .take(UNITS_PER_RECORD)
                .map(|e| UnitW {
                    unit: e.unit.clone(),
                    version: e.source_version,
                    size: Some(e.object.size),
                })
                .collect(),
            entries.len().saturating_sub(UNITS_PER_RECORD),
            None,
        ),
        RecordBody::ClaimGranted(c) | RecordBody::ClaimReleased(c) => (
            if matches!(r.body, RecordBody::ClaimGranted(_)) {
                "claim"
            } else {
                "release"
            },
            vec![UnitW {
                unit: c.unit.clone(),
                version: c.source_version,
                size: None,
            }],
            0,
            Some(c.worker.clone()),
        ),
        RecordBody::Extension { tag, .. } => (
            match *tag {
                TAG_CELL_FAILED => "cell_failed",
                TAG_DEFINITION => "definition",
                _ => "extension",
            },
            Vec::new(),
            0,
            None,
        ),
    };
    RecordW {
        seq: r.seq,
        time_ms: r.time_ms,
        kind,
        units,
        more,
        worker,
    }
}

/// The recorded pipeline with its cell counts (a scan of the pipeline's cells, as `pipeline
/// status` does), `Ok(None)` when none is recorded, `Err` when its text no longer parses.
fn pipeline(store: &Store) -> oncelake::Result<Result<Option<PipelineW>, String>> {
    let Some((recorded_seq, text)) = oncelake::pipeline::recorded_state(store)?.definition else {
        return Ok(Ok(None));
    };
    let def = match PipelineDef::parse(&text) {
        Ok(d) => d,
        Err(e) => return Ok(Err(format!("the recorded definition does not parse: {e}"))),
    };
    let upstream: std::collections::HashMap<String, Vec<String>> = def
        .stages()
        .iter()
        .map(|s| (s.name.clone(), s.upstream.clone()))
        .collect();
    let status = Pipeline::new(def).status(store)?;
    let stages = status
        .stages
        .into_iter()
        .map(|cells| StageW {
            upstream: upstream.get(&cells.stage).cloned().unwrap_or_default(),
            cells,
        })
        .collect();
    Ok(Ok(Some(PipelineW {
        recorded_seq,
        units: status.units,
        stages,
    })))
}
