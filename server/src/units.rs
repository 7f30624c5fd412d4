//! The unit handlers: health and metrics, put and stage, commit, claim/renew/release. Calls that
//! wait for a commit group run on the connection's own thread ([`crate::conns`]: one per
//! connection while there are free ones), so that commits from many connections are in flight at
//! once and share the engine's commit groups (the engine's queue does the grouping; the server
//! adds no lock of its own); the rest run on the main runtime's blocking pool, each call counted
//! against the bounds per client and in total of [`crate::bounds`] ([`App::spawn_blocking`]:
//! `503` beyond).

use crate::api_error::{joined, json, ApiError, ApiResult, Q};
use crate::app::App;
use crate::body::{read_json, upload};
use crate::wire::{ClaimReqW, CommitW, PutW, ReleaseReqW, RenewReqW, StagedW};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use oncelake::{Batch, Intent, Write, Written};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Commits through the committers ([`crate::committer`]): commits in flight from many
/// connections share groups, and the connection's thread serves its other connections meanwhile.
pub(crate) async fn commit_queued(app: &App, batch: Batch) -> ApiResult<oncelake::CommitReport> {
    match write_queued(app, Write::Commit(batch)).await? {
        Written::Commit(r) => Ok(r),
        other => Err(mismatched("a commit", &other)),
    }
}

/// A write (commit, claim, renewal, release) through the committers ([`crate::committer`]).
pub(crate) async fn write_queued(app: &App, write: Write) -> ApiResult<Written> {
    match app.committers.write(write).await {
        Ok(r) => r.map_err(ApiError::from),
        Err(crate::committer::Unanswered) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the write did not finish (its committer panicked); look the units up before retrying",
        )),
    }
}

/// The engine answered a write with another kind's answer (a bug): said as such, not unwrapped.
pub(crate) fn mismatched(what: &str, got: &Written) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("the engine answered {what} with {got:?}"),
    )
}

pub(crate) async fn healthz(State(app): State<Arc<App>>) -> Response {
    // Read from the store: the seq this server last noted misses the writes that do not go
    // through a handler that notes it (a renewal, a pipeline source version, a table publish).
    let app2 = app.clone();
    // Its own lane: no per-client or total bound, and the pool keeps threads beyond
    // `max_blocking` for it, so it answers while clients hold every call they may.
    let seq = match joined(crate::conns::spawn_blocking(move || app2.store.last_seq()).await)
        .and_then(|r| r.map_err(ApiError::from))
    {
        Ok(seq) => {
            app.note_seq(Some(seq));
            seq
        }
        Err(e) => return e.into_response(),
    };
    json(&serde_json::json!({
        "ok": true,
        "store": app.dir.display().to_string(),
        "pid": std::process::id(),
        "seq": seq,
    }))
}

pub(crate) async fn metrics(State(app): State<Arc<App>>) -> Response {
    let text = match app.with_store(crate::stats::prometheus).await {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let text = format!(
        "{text}{}{}",
        app.live.to_prometheus(),
        crate::live::Live::heap_prometheus()
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

pub(crate) async fn stats(State(app): State<Arc<App>>) -> ApiResult<Response> {
    let app2 = app.clone();
    let v = app
        .blocking(move || crate::stats::stats(&app2.store, &app2.live))
        .await?;
    Ok(json(&v))
}

#[derive(Deserialize)]
pub(crate) struct PutQ {
    unit: String,
    version: u64,
    token: Option<u64>,
    #[serde(default)]
    correct: bool,
}

pub(crate) async fn put_unit(
    State(app): State<Arc<App>>,
    Q(q): Q<PutQ>,
    body: Body,
) -> ApiResult<Response> {
    oncelake::validate_key(&q.unit).map_err(ApiError::from)?;
    let staged = upload(&app, body).await?;
    let intent = if q.correct {
        Intent::Correct
    } else {
        Intent::Put
    };
    let batch = Batch::new().item(q.unit.clone(), q.version, &staged, q.token, intent);
    let report = commit_queued(&app, batch).await?;
    app.note_seq(report.seq);
    let unit = report.units.first().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the engine answered a one-unit commit without an outcome",
        )
    })?;
    Ok(json(&PutW {
        unit: unit.clone(),
        staged: staged.meta(),
    }))
}

#[derive(Deserialize)]
pub(crate) struct StageQ {
    /// A shorter life than the server's staging timeout, asked for by the client.
    ttl_ms: Option<u64>,
}

pub(crate) async fn stage(
    State(app): State<Arc<App>>,
    Q(q): Q<StageQ>,
    body: Body,
) -> ApiResult<Response> {
    let ttl = q
        .ttl_ms
        .map_or(app.limits.staged_ttl, Duration::from_millis)
        .min(app.limits.staged_ttl);
    // Refused before the body is read when the client, or all clients, hold as many handles
    // as they may; checked again when the handle is kept.
    let client = crate::bounds::current_client();
    app.staged.room_for(&client)?;
    let staged = upload(&app, body).await?;
    let meta = staged.meta();
    let (id, n) = app.staged.insert(staged, ttl, client)?;
    app.live.set_staged_handles(n as u64);
    Ok(json(&StagedW { staged: id, meta }))
}

#[derive(Deserialize)]
pub(crate) struct IdQ {
    id: u64,
}

pub(crate) async fn unstage(State(app): State<Arc<App>>, Q(q): Q<IdQ>) -> ApiResult<Response> {
    let (found, n) = app.staged.remove([q.id]);
    app.live.set_staged_handles(n as u64);
    Ok(json(&serde_json::json!({ "dropped": found })))
}

pub(crate) async fn commit(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let req: CommitW = read_json(&app, body).await?;
    if req.items.is_empty() {
        return Err(ApiError::bad("a commit needs at least one item"));
    }
    let mut batch = Batch::new();
    for it in &req.items {
        let staged = app
            .staged
            .get(it.staged)
            .ok_or_else(|| ApiError::bad(crate::staging::unknown_handle(it.staged)))?;
        let intent = if it.correct {
            Intent::Correct
        } else {
            Intent::Put
        };
        batch = batch.item(
            it.unit.clone(),
            it.source_version,
            &staged,
            it.token,
            intent,
        );
    }
    if req.partial {
        batch = batch.partial();
    }
    let report = commit_queued(&app, batch).await?;
    app.note_seq(report.seq);
    if !req.keep_staged {
        // A committed or rejected handle has done its job; dropping it unpins the object.
        let (_, n) = app.staged.remove(req.items.iter().map(|it| it.staged));
        app.live.set_staged_handles(n as u64);
    }
    Ok(json(&report))
}

pub(crate) async fn claim(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: ClaimReqW = read_json(&app, body).await?;
    let write = Write::Claim {
        unit: r.unit,
        source_version: r.source_version,
        worker: r.worker,
        ttl: Duration::from_millis(r.ttl_ms),
    };
    lease_write(&app, write).await
}

pub(crate) async fn renew(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: RenewReqW = read_json(&app, body).await?;
    let ttl = Duration::from_millis(r.ttl_ms);
    lease_write(
        &app,
        Write::Renew {
            lease: r.lease,
            ttl,
        },
    )
    .await
}

pub(crate) async fn release(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: ReleaseReqW = read_json(&app, body).await?;
    lease_write(&app, Write::Release { lease: r.lease }).await
}

/// Queues a lease write (claim, renewal, release) and answers the engine's outcome. Every lease
/// write is a log record: long-polls waiting on the feed wake for it.
async fn lease_write(app: &App, write: Write) -> ApiResult<Response> {
    let answer = match write_queued(app, write).await? {
        Written::Claim(c) => json(&c),
        Written::Renew(r) => json(&r),
        Written::Release(r) => json(&r),
        other => return Err(mismatched("a lease write", &other)),
    };
    app.note_seq(app.store.last_seq().ok());
    Ok(answer)
}
