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
use oncelake::reconcile::{
    reconcile_changes, reconcile_full, ListingFormat, ListingReader, PlanItem, ReconcileError,
    ReconcileOptions, SortConfig, SortedListing,
};
use oncelake::Store;
use serde::Deserialize;
use std::io::{BufReader, BufWriter, Seek, Write};
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

/// What the plan pass needs, checked before the body is read.
struct PlanSpec {
    changes: bool,
    format: ListingFormat,
    opts: ReconcileOptions,
    sort: bool,
    tmp: PathBuf,
}

fn spec(q: ReconcileQ) -> ApiResult<PlanSpec> {
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
    Ok(PlanSpec {
        changes,
        format,
        opts: ReconcileOptions {
            list_up_to_date: q.list_up_to_date,
        },
        sort: q.sort,
        tmp: q.tmp.unwrap_or_else(std::env::temp_dir),
    })
}

/// The handler: feeds the body to the plan pass on the blocking pool, then streams the spooled
/// plan and its last line (the summary, or why the plan stopped).
pub(crate) async fn reconcile(
    State(app): State<Arc<App>>,
    Q(q): Q<ReconcileQ>,
    mut body: Body,
) -> ApiResult<Response> {
    let spec = spec(q)?;
    let spool = spool_file(&spec.tmp)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Piece>(4);
    let app2 = app.clone();
    let pass = app
        .spawn_blocking(move || plan_to_spool(&app2.store, ChannelReader::new(rx), &spec, spool))?;
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

/// Runs the plan pass, writing its lines to `spool`; the spool rewound and the last line.
fn plan_to_spool(
    store: &Store,
    input: ChannelReader,
    spec: &PlanSpec,
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
    let listing = ListingReader::new(BufReader::with_capacity(1 << 16, input), spec.format);
    let result = run_pass(store, listing, spec, &mut out);
    let last = match result {
        Ok(summary) => line(&PlanLineW::Summary(summary)),
        Err(ReconcileError::Listing(e)) => line(&PlanLineW::Error(ErrorLineW::listing(&e))),
        Err(ReconcileError::Output(e)) => return Err(io(e)),
        Err(ReconcileError::Store(e)) => {
            let e = ApiError::from(e);
            line(&PlanLineW::Error(ErrorLineW {
                kind: e.kind.to_string(),
                message: e.message,
                listing: None,
            }))
        }
        Err(e) => line(&PlanLineW::Error(ErrorLineW {
            kind: "internal".into(),
            message: e.to_string(),
            listing: None,
        })),
    };
    let mut spool = out.into_inner().map_err(|e| io(e.into_error()))?;
    spool.rewind().map_err(io)?;
    Ok((spool, last))
}

fn line(l: &PlanLineW) -> String {
    // Serialising these plain structs cannot fail.
    serde_json::to_string(l).unwrap_or_default() + "\n"
}

fn run_pass(
    store: &Store,
    listing: ListingReader<BufReader<ChannelReader>>,
    spec: &PlanSpec,
    out: &mut impl Write,
) -> Result<oncelake::reconcile::Summary, ReconcileError> {
    if spec.changes {
        return reconcile_changes(store, listing, spec.opts, |item| {
            writeln!(out, "{}", item_line(&item))
        });
    }
    if !spec.sort {
        let snap = store.snapshot()?;
        return reconcile_full(&snap, listing, spec.opts, |item| {
            writeln!(out, "{}", item_line(&item))
        });
    }
    let sorted = SortedListing::sort(listing, &SortConfig::new(&spec.tmp))?;
    let note = line(&PlanLineW::Sorted(SortedW {
        was_sorted: sorted.was_sorted(),
        rows: sorted.rows(),
        spilled_runs: sorted.spilled_runs() as u64,
    }));
    out.write_all(note.as_bytes())
        .map_err(ReconcileError::Output)?;
    let snap = store.snapshot()?;
    reconcile_full(&snap, sorted, spec.opts, |item| {
        writeln!(out, "{}", item_line(&item))
    })
}

fn item_line(item: &PlanItem<'_>) -> String {
    serde_json::to_string(&PlanLineW::Item((*item).into())).unwrap_or_default()
}
