//! `POST /v1/reconcile`: the plan of a source listing streamed as the request body (SPEC R12,
//! R20). The listing goes through the same bounded channel as an upload into the engine's
//! listing reader, so it is never held whole; the plan is written to an unlinked spool file
//! while the body arrives and streamed back once it ended, because the blocking client sends the
//! whole body before it reads the answer (a plan streamed back at once could fill both socket
//! buffers and stall both sides). Memory stays bounded on both sides whatever the sizes.

use crate::api_error::{ApiError, ApiResult, Q};
use crate::app::App;
use crate::body::{feed, ChannelReader, Pace, Piece};
use crate::wire_reconcile::{ErrorLineW, PlanLineW, SortedW};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use oncelake::reconcile::{ListingFormat, PlanEnd, PlanEvent, ReconcileForm};
use oncelake::{Store, UnitStore};
use serde::Deserialize;
use std::io::{BufWriter, Seek, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The query of `/v1/reconcile`.
#[derive(Deserialize)]
pub(crate) struct ReconcileQ {
    /// `full` (a complete listing, merged with the manifest) or `changes` (only what changed).
    #[serde(default = "full")]
    form: String,
    /// `csv` or `jsonl`.
    format: String,
    /// Also list up-to-date units.
    #[serde(default)]
    list_up_to_date: bool,
    /// A full listing not sorted by unit: sort it first (external sort, runs spilled to `tmp`).
    #[serde(default)]
    sort: bool,
    /// Where the sort spills and the plan is spooled (default: the server's temporary directory).
    tmp: Option<PathBuf>,
}

fn full() -> String {
    "full".into()
}

/// The form of the plan, checked before the body is read; where the plan is spooled.
fn spec(q: ReconcileQ) -> ApiResult<(ReconcileForm, PathBuf)> {
    let changes = match q.form.as_str() {
        "full" => false,
        "changes" => true,
        other => {
            return Err(ApiError::bad(format!(
                "form {other:?}: use full or changes"
            )))
        }
    };
    let format = match q.format.as_str() {
        "csv" => ListingFormat::Csv,
        "jsonl" => ListingFormat::JsonLines,
        other => return Err(ApiError::bad(format!("format {other:?}: use csv or jsonl"))),
    };
    if changes && q.sort {
        return Err(ApiError::bad(
            "sort applies to a full listing only; drop sort=true for form=changes",
        ));
    }
    let tmp = q.tmp.unwrap_or_else(std::env::temp_dir);
    let form = ReconcileForm {
        changes_only: changes,
        format,
        list_up_to_date: q.list_up_to_date,
        sort_in: q.sort.then(|| tmp.clone()),
    };
    Ok((form, tmp))
}

/// The handler: feeds the body to the plan pass on the blocking pool, then streams the spooled
/// plan and its last line (the summary, or why the plan stopped).
pub(crate) async fn reconcile(
    State(app): State<Arc<App>>,
    Q(q): Q<ReconcileQ>,
    mut body: Body,
) -> ApiResult<Response> {
    let (form, tmp) = spec(q)?;
    let spool = spool_file(&tmp)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Piece>(4);
    let app2 = app.clone();
    let pass = app
        .spawn_blocking(move || plan_to_spool(&app2.store, ChannelReader::new(rx), &form, spool))?;
    feed(&app, &mut body, tx, Vec::new(), 0, Pace::new(&app.limits)).await?;
    // The pass may stop early (a bad line): read the rest of the body so that the client, which
    // sends it whole before reading, gets this answer instead of a broken connection.
    drain(&app, &mut body).await?;
    let (spool, last) = pass.await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the plan pass did not finish ({e}); the store is unchanged"),
        )
    })??;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    app.spawn_blocking(move || {
        crate::reads::pump_file(spool, tx.clone());
        let _ = tx.blocking_send(Ok(Bytes::from(last)));
    })?;
    let stream = crate::reads::receiver_stream(rx);
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Discards what is left of a body, within the upload limit and the idle timeout.
async fn drain(app: &App, body: &mut Body) -> ApiResult<()> {
    let mut total = 0u64;
    loop {
        match tokio::time::timeout(app.limits.body_idle, body.frame()).await {
            Ok(None) | Ok(Some(Err(_))) => return Ok(()),
            Ok(Some(Ok(frame))) => {
                total += frame.data_ref().map_or(0, |d| d.len() as u64);
                if total > app.limits.max_upload {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "too_large",
                        "the listing is larger than the upload limit",
                    ));
                }
            }
            Err(_) => return Ok(()),
        }
    }
}

static SPOOLS: AtomicU64 = AtomicU64::new(0);

/// A new temporary file, unlinked at once: it lives as long as its handle.
fn spool_file(dir: &std::path::Path) -> ApiResult<std::fs::File> {
    let name = format!(
        "oncelake-plan-{}-{}",
        std::process::id(),
        SPOOLS.fetch_add(1, Ordering::Relaxed)
    );
    let path = dir.join(name);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "io",
                format!(
                    "cannot create the plan's spool file in {}: {e}; pass a writable tmp directory",
                    dir.display()
                ),
            )
        })?;
    let _ = std::fs::remove_file(&path);
    Ok(f)
}

/// Runs the plan pass (the engine's `UnitStore::reconcile`), writing its lines to `spool`; the
/// spool rewound and the last line.
fn plan_to_spool(
    store: &Store,
    mut input: ChannelReader,
    form: &ReconcileForm,
    spool: std::fs::File,
) -> ApiResult<(std::fs::File, String)> {
    let io = |e: std::io::Error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "io",
            format!("writing the plan's spool file: {e}"),
        )
    };
    let mut out = BufWriter::with_capacity(1 << 16, spool);
    let mut failed = None;
    let result = store.reconcile(&mut input, form, &mut |event| {
        let l = match event {
            PlanEvent::Sorted {
                was_sorted,
                rows,
                spilled_runs,
            } => PlanLineW::Sorted(SortedW {
                was_sorted,
                rows,
                spilled_runs,
            }),
            PlanEvent::Item(item) => PlanLineW::Item(item.into()),
        };
        match out.write_all(line(&l).as_bytes()) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    });
    let last = match result {
        Ok(PlanEnd::Complete(summary)) => line(&PlanLineW::Summary(summary)),
        Ok(PlanEnd::BadListing { kind, message }) => {
            line(&PlanLineW::Error(ErrorLineW::listing(kind, message)))
        }
        Ok(PlanEnd::Stopped) => {
            return Err(io(
                failed.unwrap_or_else(|| std::io::ErrorKind::WriteZero.into())
            ))
        }
        Err(e) => {
            let e = ApiError::from(e);
            line(&PlanLineW::Error(ErrorLineW {
                kind: e.kind.to_string(),
                message: e.message,
                listing: None,
            }))
        }
    };
    let mut spool = out.into_inner().map_err(|e| io(e.into_error()))?;
    spool.rewind().map_err(io)?;
    Ok((spool, last))
}

fn line(l: &PlanLineW) -> String {
    // Serialising these plain structs cannot fail.
    serde_json::to_string(l).unwrap_or_default() + "\n"
}
