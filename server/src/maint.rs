//! The maintenance handlers: gc and verify.

use crate::api_error::{json, ApiError, ApiResult};
use crate::app::App;
use crate::body::read_json;
use crate::reads::receiver_stream;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Deserialize)]
pub(crate) struct GcReq {
    #[serde(default)]
    dry_run: bool,
    grace_ms: Option<u64>,
    retain_ms: Option<u64>,
}

pub(crate) async fn gc(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: GcReq = read_json(&app, body).await?;
    let mut o = oncelake::GcOptions {
        dry_run: r.dry_run,
        ..Default::default()
    };
    if let Some(g) = r.grace_ms {
        o.grace = Duration::from_millis(g);
    }
    if let Some(t) = r.retain_ms {
        o.retain = Duration::from_millis(t);
    }
    // Handles and snapshot leases past their deadline pin nothing this GC should keep.
    app.expire_staged();
    let rep = app.with_store(move |s| s.gc(o)).await?;
    app.recent.note_gc(&rep);
    Ok(json(&rep))
}

#[derive(Deserialize)]
pub(crate) struct VerifyReq {
    #[serde(default)]
    deep: bool,
    /// Answer JSON lines: `{"progress":{"done":D,"total":T}}` while it runs, then the report
    /// (`{"ok":..., "report":...}`) or `{"error":KIND,"message":...}`.
    #[serde(default)]
    progress: bool,
}

/// A verify that reports its progress as it goes (a deep verify of a large store takes minutes,
/// and the CLI prints progress lines as it does in-process).
pub(crate) fn verify_streamed(app: Arc<App>, deep: bool) -> ApiResult<Response> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let app2 = app.clone();
    app.spawn_blocking(move || {
        let app = app2;
        let mut last: Option<Instant> = None;
        let report =
            app.store
                .verify_with_progress(oncelake::VerifyOptions { deep }, &mut |done, total| {
                    if last.is_some_and(|t| t.elapsed() < PROGRESS_EVERY) {
                        return;
                    }
                    last = Some(Instant::now());
                    let line = serde_json::json!({"progress": {"done": done, "total": total}});
                    // A full channel (a slow reader) skips a progress line, never the work.
                    let _ = tx.try_send(Ok(Bytes::from(line.to_string() + "\n")));
                });
        let end = match report {
            Ok(rep) => {
                app.recent.note_verify(&rep);
                crate::stats::verify_json(&rep)
            }
            Err(e) => {
                let e = ApiError::from(e);
                serde_json::json!({"error": e.kind, "message": e.message})
            }
        };
        let _ = tx.blocking_send(Ok(Bytes::from(end.to_string() + "\n")));
    })?;
    let stream = receiver_stream(rx);
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// How often a verify with `progress` sends a progress line.
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_millis(200);

pub(crate) async fn verify(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: VerifyReq = read_json(&app, body).await?;
    if r.progress {
        return verify_streamed(app, r.deep);
    }
    let rep = app
        .with_store(move |s| s.verify(oncelake::VerifyOptions { deep: r.deep }))
        .await?;
    app.recent.note_verify(&rep);
    Ok(json(&crate::stats::verify_json(&rep)))
}
