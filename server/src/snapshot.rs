//! Snapshots through the server (SPEC R7, R20): a read view as of one seq that a client opens,
//! reads through, and closes. The server holds the engine's `Snapshot` while the lease lives, so
//! GC keeps every object the view can read (the engine's rule for an open snapshot) — for a client
//! in another process too. A lease ends when the client closes it (`DELETE /v1/snapshot?id=`) or
//! when it was not used for its TTL (a killed client's view is reclaimed that way); each read
//! through it starts the TTL again. Ids are random like staging handles: a view is read only by
//! whoever opened it.
//!
//! Also the log's position (`GET /v1/seq`), `POST /v1/flush`, and on a lake node `POST /v1/sync`
//! and `POST /v1/checkpoint` (the server holds the node, so `oncelake sync`/`checkpoint` go here).

use crate::api_error::{json, ApiError, ApiResult, Q};
use crate::app::App;
use crate::reads::found_object;
use crate::snapshot_leases::{DEFAULT_TTL, MAX_OPEN, MAX_TTL};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

#[derive(Deserialize)]
pub(crate) struct OpenQ {
    at: Option<u64>,
    ttl_ms: Option<u64>,
}

/// `POST /v1/snapshot?at=SEQ&ttl_ms=MS`: opens a view (newest, or as of `at`).
pub(crate) async fn open(State(app): State<Arc<App>>, Q(q): Q<OpenQ>) -> ApiResult<Response> {
    let ttl = q
        .ttl_ms
        .map_or(DEFAULT_TTL, Duration::from_millis)
        .min(MAX_TTL);
    let snap = app
        .with_store(move |s| match q.at {
            Some(seq) => s.snapshot_at(seq),
            None => s.snapshot(),
        })
        .await?;
    let (seq, history_from) = (snap.seq(), snap.history_from());
    app.snapshots.expire();
    let id = app
        .snapshots
        .insert(snap, ttl)
        .map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "io",
                format!("the system gave no randomness for a snapshot id ({e}); retry"),
            )
        })?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_snapshots",
                format!(
                    "{MAX_OPEN} snapshots are open on this server; close the ones you no longer \
                     read (DELETE /v1/snapshot?id=) and take this one again"
                ),
            )
        })?;
    Ok(json(&serde_json::json!({
        "snapshot": id,
        "seq": seq,
        "history_from": history_from,
        "ttl_ms": ttl.as_millis() as u64,
    })))
}

#[derive(Deserialize)]
pub(crate) struct IdQ {
    id: u64,
}

/// `DELETE /v1/snapshot?id=`: ends the lease.
pub(crate) async fn close(State(app): State<Arc<App>>, Q(q): Q<IdQ>) -> ApiResult<Response> {
    Ok(json(
        &serde_json::json!({ "closed": app.snapshots.close(q.id) }),
    ))
}

#[derive(Deserialize)]
pub(crate) struct UnitQ {
    id: u64,
    unit: String,
}

/// `GET /v1/snapshot/entry?id=&unit=`.
pub(crate) async fn entry(State(app): State<Arc<App>>, Q(q): Q<UnitQ>) -> ApiResult<Response> {
    oncelake::validate_key(&q.unit).map_err(ApiError::from)?;
    let snap = app.snapshots.touch(q.id)?;
    let e = app.blocking(move || snap.get(&q.unit)).await?;
    Ok(json(&serde_json::json!({ "entry": e })))
}

/// `GET /v1/snapshot/object?id=&unit=`: the unit's object in the view, streamed, with its entry
/// in the `x-oncelake-entry` header (as `GET /v1/object`).
pub(crate) async fn object(State(app): State<Arc<App>>, Q(q): Q<UnitQ>) -> ApiResult<Response> {
    oncelake::validate_key(&q.unit).map_err(ApiError::from)?;
    let snap = app.snapshots.touch(q.id)?;
    let unit = q.unit.clone();
    let found = app
        .blocking(move || crate::reads::open_unit(&snap, &q.unit))
        .await?;
    found_object(&app, found, &unit, " in this snapshot")
}

#[derive(Deserialize)]
pub(crate) struct LsQ {
    id: u64,
    #[serde(default)]
    prefix: String,
}

/// `GET /v1/snapshot/ls?id=&prefix=`: the view's entries under a prefix as JSON lines.
pub(crate) async fn ls(State(app): State<Arc<App>>, Q(q): Q<LsQ>) -> ApiResult<Response> {
    let snap = app.snapshots.touch(q.id)?;
    crate::reads::entries_stream(&app, snap, q.prefix)
}

#[derive(Deserialize)]
pub(crate) struct ChangesQ {
    id: u64,
    #[serde(default)]
    since: u64,
    limit: Option<usize>,
}

/// `GET /v1/snapshot/changes?id=&since=&limit=`: the log records after `since` up to the view's
/// seq (at most `limit`); `seq` is the view's.
pub(crate) async fn changes(State(app): State<Arc<App>>, Q(q): Q<ChangesQ>) -> ApiResult<Response> {
    let snap = app.snapshots.touch(q.id)?;
    let limit = q.limit.unwrap_or(10_000).clamp(1, 100_000);
    let page = app
        .blocking(move || crate::reads::changes_page(&snap, q.since, limit))
        .await?;
    Ok(json(&page))
}

#[derive(Deserialize)]
pub(crate) struct PathQ {
    id: u64,
    object: String,
}

/// `GET /v1/snapshot/object_path?id=&object=HEX`: where an object of the view lies (an
/// immutable file a client on this node may stream itself while the view is open).
pub(crate) async fn object_path(
    State(app): State<Arc<App>>,
    Q(q): Q<PathQ>,
) -> ApiResult<Response> {
    app.snapshots.touch(q.id)?;
    let id = crate::wire::parse_id(&q.object).map_err(ApiError::bad)?;
    Ok(json(
        &serde_json::json!({ "path": app.store.object_path(&id).display().to_string() }),
    ))
}

/// `GET /v1/seq`: the newest seq, read from the store.
pub(crate) async fn last_seq(State(app): State<Arc<App>>) -> ApiResult<Response> {
    let seq = app.with_store(move |s| s.last_seq()).await?;
    Ok(json(&serde_json::json!({ "seq": seq })))
}

/// `POST /v1/flush`: makes everything acknowledged so far durable.
pub(crate) async fn flush(State(app): State<Arc<App>>) -> ApiResult<Response> {
    app.with_store(move |s| s.flush()).await?;
    Ok(json(&serde_json::json!({ "flushed": true })))
}

/// `POST /v1/sync`: applies what other nodes of the lake committed (nothing on a local store),
/// then the newest seq and the lake's URL (`null` on a local store).
pub(crate) async fn sync(State(app): State<Arc<App>>) -> ApiResult<Response> {
    let seq = app
        .with_store(move |s| s.sync().and_then(|()| s.last_seq()))
        .await?;
    Ok(json(
        &serde_json::json!({ "seq": seq, "lake": app.store.lake_url() }),
    ))
}

/// `POST /v1/checkpoint`: writes the lake node's checkpoint into its lake (refused on a local
/// store, as in-process).
pub(crate) async fn checkpoint(State(app): State<Arc<App>>) -> ApiResult<Response> {
    let r = app.with_store(move |s| s.checkpoint()).await?;
    Ok(json(&serde_json::json!({
        "segment": r.segment, "bytes": r.bytes, "written": r.written
    })))
}
