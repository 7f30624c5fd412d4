//! The read handlers: lookup, entry and object, ls and the change feed.

use crate::api_error::{json, ApiError, ApiResult, Q};
use crate::app::App;
use crate::wire::{ChangesW, RecordW};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use oncelake::Store;
use serde::Deserialize;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

#[derive(Deserialize)]
pub(crate) struct UnitQ {
    unit: String,
    at: Option<u64>,
}

pub(crate) async fn lookup(State(app): State<Arc<App>>, Q(q): Q<UnitQ>) -> ApiResult<Response> {
    // A key no unit can have is a mistake to report, not a unit without an entry (in-process,
    // every command checks the key before it asks the store).
    oncelake::validate_key(&q.unit).map_err(ApiError::from)?;
    // The dedup decision is an in-memory lookup (SPEC P2: millions per second): answered on the
    // connection's thread, not handed to the blocking pool.
    let c = if crate::conns::on_connection_thread() {
        app.store.lookup(&q.unit).map_err(ApiError::from)?
    } else {
        app.with_store(move |s| s.lookup(&q.unit)).await?
    };
    Ok(json(&serde_json::json!({ "committed": c })))
}

/// The unit's entry in `snap` and its object, opened and checked against the entry's length.
pub(crate) fn open_unit(
    snap: &oncelake::Snapshot,
    unit: &str,
) -> oncelake::Result<Option<(std::fs::File, oncelake::Entry)>> {
    match snap.get(unit)? {
        Some(e) => {
            let file = snap.open_object(&e)?;
            crate::object_check::check_length(&file, &e)?;
            Ok(Some((file, e)))
        }
        None => Ok(None),
    }
}

pub(crate) fn snapshot(store: &Store, at: Option<u64>) -> oncelake::Result<oncelake::Snapshot> {
    match at {
        Some(seq) => store.snapshot_at(seq),
        None => store.snapshot(),
    }
}

pub(crate) async fn entry(State(app): State<Arc<App>>, Q(q): Q<UnitQ>) -> ApiResult<Response> {
    oncelake::validate_key(&q.unit).map_err(ApiError::from)?;
    let e = app
        .with_store(move |s| snapshot(s, q.at)?.get(&q.unit))
        .await?;
    Ok(json(&serde_json::json!({ "entry": e })))
}

/// Streams a unit's object: its entry in the `x-oncelake-entry` header (JSON), its bytes as the
/// body, read in chunks on the blocking pool (never the whole object in memory).
pub(crate) async fn object(State(app): State<Arc<App>>, Q(q): Q<UnitQ>) -> ApiResult<Response> {
    oncelake::validate_key(&q.unit).map_err(ApiError::from)?;
    let unit = q.unit.clone();
    let found = app
        .with_store(move |s| open_unit(&snapshot(s, q.at)?, &q.unit))
        .await?;
    found_object(&app, found, &unit, "")
}

/// [`object_response`] of what [`open_unit`] found; a unit without an entry is 404, `scope`
/// says where it was looked for.
pub(crate) fn found_object(
    app: &App,
    found: Option<(std::fs::File, oncelake::Entry)>,
    unit: &str,
    scope: &str,
) -> ApiResult<Response> {
    let Some((file, entry)) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("unit {unit:?} has no entry{scope}"),
        ));
    };
    object_response(app, file, &entry)
}

/// An object's answer: its entry in the `x-oncelake-entry` header (JSON), its bytes as the body,
/// read from `file` in chunks on the blocking pool (never the whole object in memory).
pub(crate) fn object_response(
    app: &App,
    file: std::fs::File,
    entry: &oncelake::Entry,
) -> ApiResult<Response> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    app.spawn_blocking(move || pump_file(file, tx))?;
    let header_json = serde_json::to_string(entry).unwrap_or_default();
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, entry.object.size.to_string()),
            (
                header::HeaderName::from_static("x-oncelake-entry"),
                header_json,
            ),
        ],
        Body::from_stream(receiver_stream(rx)),
    )
        .into_response())
}

/// The chunks a blocking producer sends, as a body stream.
pub(crate) fn receiver_stream(
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

pub(crate) fn pump_file(
    mut file: std::fs::File,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tx
                    .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct LsQ {
    #[serde(default)]
    prefix: String,
    at: Option<u64>,
}

/// Streams the entries under a prefix as JSON lines, one entry each, produced on the blocking
/// pool as the client reads them.
pub(crate) async fn ls(State(app): State<Arc<App>>, Q(q): Q<LsQ>) -> ApiResult<Response> {
    let at = q.at;
    let snap = app.with_store(move |s| snapshot(s, at)).await?;
    entries_stream(&app, Arc::new(snap), q.prefix)
}

/// The entries of `snap` under `prefix` as JSON lines, one entry each, produced on the blocking
/// pool as the client reads them (`ls`, of the store or of a snapshot lease).
pub(crate) fn entries_stream<S>(app: &App, snap: S, prefix: String) -> ApiResult<Response>
where
    S: std::ops::Deref<Target = oncelake::Snapshot> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    app.spawn_blocking(move || {
        let entries = match snap.prefix(&prefix) {
            Ok(it) => it,
            Err(e) => {
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                return;
            }
        };
        for e in entries {
            let line = match e {
                Ok(e) => serde_json::to_string(&e).unwrap_or_default() + "\n",
                Err(e) => {
                    let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                    return;
                }
            };
            if tx.blocking_send(Ok(Bytes::from(line))).is_err() {
                return;
            }
        }
    })?;
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(receiver_stream(rx)),
    )
        .into_response())
}

#[derive(Deserialize)]
pub(crate) struct ChangesQ {
    #[serde(default)]
    since: u64,
    #[serde(default)]
    wait_ms: u64,
    limit: Option<usize>,
}

/// The change feed after `since`; with `wait_ms`, waits (long-polls) for the next commit when
/// nothing is there yet.
pub(crate) async fn changes(State(app): State<Arc<App>>, Q(q): Q<ChangesQ>) -> ApiResult<Response> {
    let limit = q.limit.unwrap_or(10_000).clamp(1, 100_000);
    let wait = Duration::from_millis(q.wait_ms).min(app.limits.max_poll);
    let deadline = tokio::time::Instant::now() + wait;
    let mut rx = app.seq.subscribe();
    loop {
        rx.borrow_and_update();
        let since = q.since;
        let page = app
            .with_store(move |s| read_changes(s, since, limit))
            .await?;
        if !page.records.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(json(&page));
        }
        // Woken by the next commit through this server (or at the deadline).
        if tokio::time::timeout_at(deadline, rx.changed())
            .await
            .is_err()
        {
            continue;
        }
    }
}

pub(crate) fn read_changes(store: &Store, since: u64, limit: usize) -> oncelake::Result<ChangesW> {
    changes_page(&store.snapshot()?, since, limit)
}

/// At most `limit` of `snap`'s log records after `since`, and the seq it is as of (a served
/// snapshot's pages and the store's change feed).
pub(crate) fn changes_page(
    snap: &oncelake::Snapshot,
    since: u64,
    limit: usize,
) -> oncelake::Result<ChangesW> {
    let mut records = Vec::new();
    for r in snap.changes_since(since)?.take(limit) {
        let r = r?;
        records.push(RecordW {
            seq: r.seq,
            record: crate::wire::to_hex(&r.encode()),
        });
    }
    Ok(ChangesW {
        records,
        seq: snap.seq(),
    })
}
