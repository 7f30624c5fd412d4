//! The HTTP API's handlers: each turns a request into one call on the store. Calls that wait for
//! a commit group run on the connection's own thread ([`crate::conns`]: one per connection while
//! there are free ones), so that commits from many connections are in flight at once and share
//! the engine's commit groups (the engine's queue does the grouping; the server adds no lock of
//! its own); the rest run on the main runtime's blocking pool, each call counted against the
//! bounds per client and in total of [`crate::bounds`] ([`App::spawn_blocking`]: `503` beyond).

use crate::live::Live;
use crate::wire::{
    ChangesW, ClaimReqW, ClaimW, CommitReportW, CommitW, CommittedW, EntryW, ErrorBody, ObjectW,
    PutW, RecordW, ReleaseReqW, ReleaseW, RenewReqW, RenewW, StagedW, UnitOutcomeW,
};
use axum::body::HttpBody as _;
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use http_body_util::BodyExt;
use oncelake::{Batch, Intent, Staged, Store, Write, Written};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Limits that protect the server from a buggy or hostile client (SPEC R20). The `*_per_client`
/// bounds count what one client holds ([`crate::bounds`]: a process on the Unix socket, a host on
/// TCP); the others what all clients hold together.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest JSON request body (413 beyond).
    pub max_json: usize,
    /// Largest upload (413 beyond; the staging is discarded).
    pub max_upload: u64,
    /// Longest wait for the next piece of a request body before it is abandoned (408); also the
    /// window over which an upload's rate is checked against `min_body_rate`.
    pub body_idle: Duration,
    /// Slowest upload accepted, in bytes per second, averaged over each `body_idle` window (408
    /// below it, the staging discarded): a client trickling bytes must not hold its upload,
    /// its file and its thread forever. 0 checks no rate.
    pub min_body_rate: u64,
    /// Longest long-poll wait a client may ask for.
    pub max_poll: Duration,
    /// How long an uncommitted staging handle is kept after its upload.
    pub staged_ttl: Duration,
    /// Open connections, all clients together. When full, the connection idle longest is
    /// closed to make room; when none is idle, a new one gets `503`.
    pub max_connections: usize,
    /// Open connections of one client (`503` beyond).
    pub max_connections_per_client: usize,
    /// Store calls running on the blocking pool at once (streamed uploads and answers, reads,
    /// listings, verify, gc, pipeline and table calls), all clients together (`503` beyond).
    /// The pool has this many threads plus a few kept for `/healthz`.
    pub max_blocking: usize,
    /// Store calls of one client on the blocking pool at once (`503` beyond).
    pub max_blocking_per_client: usize,
    /// Uncommitted staging handles, all clients together (`503` beyond).
    pub max_staged: usize,
    /// Uncommitted staging handles of one client (`429 too_many_staged` beyond).
    pub max_staged_per_client: usize,
    /// Largest pipeline definition, in bytes of its text (`413` beyond).
    pub max_definition: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_json: 16 << 20,
            max_upload: 64 << 30,
            body_idle: Duration::from_secs(30),
            min_body_rate: 64,
            max_poll: Duration::from_secs(60),
            staged_ttl: Duration::from_secs(600),
            max_connections: 1024,
            max_connections_per_client: 256,
            max_blocking: 128,
            max_blocking_per_client: 32,
            max_staged: 65_536,
            max_staged_per_client: 4096,
            max_definition: 1 << 20,
        }
    }
}

/// What every handler shares.
pub(crate) struct App {
    pub store: Store,
    pub dir: PathBuf,
    pub limits: Limits,
    pub live: Live,
    pub staged: crate::staging::Registry,
    pub snapshots: crate::snapshot::Leases,
    /// The newest seq this server has seen committed; long-polls wait on it.
    pub seq: tokio::sync::watch::Sender<u64>,
    /// Where commits go ([`commit_queued`]).
    pub committers: crate::committer::Committers,
    /// Where small uploads are staged ([`upload`]).
    pub store_threads: crate::pool::StoreThreads,
    /// The calls on the blocking pool, per client and in total ([`App::spawn_blocking`]).
    pub pool_calls: Arc<crate::bounds::Quota>,
    /// The latest GC and verify, for the status page.
    pub recent: crate::status_page::Recent,
}

impl App {
    pub(crate) fn new(
        store: Store,
        dir: PathBuf,
        limits: Limits,
        committers: crate::committer::Committers,
        store_threads: crate::pool::StoreThreads,
    ) -> oncelake::Result<App> {
        let seq = store.last_seq()?;
        Ok(App {
            pool_calls: crate::bounds::Quota::new(
                "calls on the server's blocking pool",
                limits.max_blocking_per_client,
                limits.max_blocking,
            ),
            staged: crate::staging::Registry::new(limits.max_staged_per_client, limits.max_staged),
            committers,
            store_threads,
            store,
            dir,
            limits,
            live: Live::default(),
            snapshots: Default::default(),
            recent: Default::default(),
            seq: tokio::sync::watch::channel(seq).0,
        })
    }

    pub(crate) fn note_seq(&self, seq: Option<u64>) {
        if let Some(s) = seq {
            self.seq.send_if_modified(|cur| {
                let newer = s > *cur;
                if newer {
                    *cur = s;
                }
                newer
            });
        }
    }

    /// Runs `f` on the blocking pool as the current request's client's call: refused at once
    /// ([`crate::bounds::Overloaded`], a `503`) when that client, or all clients together, run
    /// as many as they may. The call's place is given back when `f` returns, so a producer
    /// that waits for a slow client holds it for as long as it waits.
    pub(crate) fn spawn_blocking<F, R>(
        &self,
        f: F,
    ) -> Result<tokio::task::JoinHandle<R>, crate::bounds::Overloaded>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let permit = self.pool_calls.take(crate::bounds::current_client())?;
        Ok(crate::conns::spawn_blocking(move || {
            let _permit = permit;
            f()
        }))
    }

    /// Runs a store call on the blocking pool ([`App::spawn_blocking`]) and waits for it.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> oncelake::Result<T> + Send + 'static,
    ) -> ApiResult<T> {
        joined(self.spawn_blocking(f)?.await)?.map_err(ApiError::from)
    }

    /// Drops staging handles no commit named within the TTL (their objects become orphans
    /// that GC collects).
    pub(crate) fn expire_staged(&self) {
        self.live.set_staged_handles(self.staged.expire() as u64);
        self.snapshots.expire();
    }
}

/// The router of the whole API.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .merge(crate::status_page::routes())
        .route("/metrics", get(metrics))
        .route("/v1/stats", get(stats))
        .route("/v1/put", put(put_unit))
        .route("/v1/stage", post(stage).delete(unstage))
        .route("/v1/commit", post(commit))
        .route("/v1/claim", post(claim))
        .route("/v1/renew", post(renew))
        .route("/v1/release", post(release))
        .route("/v1/lookup", get(lookup))
        .route("/v1/entry", get(entry))
        .route("/v1/object", get(object))
        .route("/v1/ls", get(ls))
        .route("/v1/changes", get(changes))
        .route("/v1/gc", post(gc))
        .route("/v1/verify", post(verify))
        .route("/v1/reconcile", post(crate::reconcile::reconcile))
        .route("/v1/table/create", post(crate::table::create))
        .route("/v1/table/ls", get(crate::table::ls))
        .route("/v1/table/publish", post(crate::table::publish))
        .route("/v1/pipeline/source", put(crate::pipeline::set_source))
        .route("/v1/pipeline/status", post(crate::pipeline::status))
        .route("/v1/pipeline/explain", post(crate::pipeline::explain))
        .route("/v1/pipeline/define", post(crate::pipeline_cells::define))
        .route("/v1/pipeline/ready", post(crate::pipeline_cells::ready))
        .route("/v1/pipeline/claim", post(crate::pipeline_cells::claim))
        .route(
            "/v1/pipeline/complete",
            post(crate::pipeline_cells::complete),
        )
        .route("/v1/pipeline/fail", post(crate::pipeline_cells::fail))
        .route("/v1/pipeline/input", post(crate::pipeline_cells::input))
        .route(
            "/v1/snapshot",
            post(crate::snapshot::open).delete(crate::snapshot::close),
        )
        .route("/v1/snapshot/entry", get(crate::snapshot::entry))
        .route("/v1/snapshot/object", get(crate::snapshot::object))
        .route("/v1/snapshot/ls", get(crate::snapshot::ls))
        .route("/v1/snapshot/changes", get(crate::snapshot::changes))
        .route(
            "/v1/snapshot/object_path",
            get(crate::snapshot::object_path),
        )
        .route("/v1/seq", get(crate::snapshot::last_seq))
        .route("/v1/flush", post(crate::snapshot::flush))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

/// An error answer.
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    /// Seconds to send in `Retry-After` (a shed request).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error, telling the client to retry after `secs` seconds.
    pub(crate) fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub(crate) fn bad(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.kind.to_string(),
            message: self.message,
        };
        let mut resp = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        resp
    }
}

impl From<oncelake::Error> for ApiError {
    fn from(e: oncelake::Error) -> Self {
        use oncelake::Error as E;
        let (status, kind) = match &e {
            E::InvalidKey { .. } => (StatusCode::BAD_REQUEST, "invalid_key"),
            E::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            E::SeqOutOfRange { .. } => (StatusCode::BAD_REQUEST, "seq_out_of_range"),
            E::ReadOnly { .. } => (StatusCode::CONFLICT, "read_only"),
            E::Failed { .. } => (StatusCode::SERVICE_UNAVAILABLE, "failed"),
            E::MissingObject { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "missing_object"),
            E::Corrupt { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "corrupt"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "io"),
        };
        ApiError::new(status, kind, e.to_string())
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

pub(crate) fn json<T: Serialize>(v: &T) -> Response {
    axum::Json(v).into_response()
}

/// Commits through the committers ([`crate::committer`]): commits in flight from many
/// connections share groups, and the connection's thread serves its other connections meanwhile.
async fn commit_queued(app: &App, batch: Batch) -> ApiResult<oncelake::CommitReport> {
    match write_queued(app, Write::Commit(batch)).await? {
        Written::Commit(r) => Ok(r),
        other => Err(mismatched("a commit", &other)),
    }
}

/// A write (commit, claim, renewal, release) through the committers ([`crate::committer`]).
async fn write_queued(app: &App, write: Write) -> ApiResult<Written> {
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
fn mismatched(what: &str, got: &Written) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("the engine answered {what} with {got:?}"),
    )
}

/// A blocking call's result, or why it did not finish (it panicked).
pub(crate) fn joined<T>(r: Result<T, tokio::task::JoinError>) -> ApiResult<T> {
    r.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the store call did not finish ({e}); nothing is known to have changed"),
        )
    })
}

pub(crate) fn query<T>(q: Result<Query<T>, QueryRejection>) -> ApiResult<T> {
    q.map(|Query(v)| v)
        .map_err(|e| ApiError::bad(format!("bad query string: {}", e.body_text())))
}

/// Reads a whole body of at most `max_json` bytes within the idle timeout; `too_large` says what
/// to do instead (it gets the limit).
pub(crate) async fn read_body(
    app: &App,
    body: Body,
    too_large: impl FnOnce(usize) -> String,
) -> ApiResult<axum::body::Bytes> {
    read_body_max(app, body, app.limits.max_json, too_large).await
}

/// [`read_body`] with a limit of `max` bytes.
pub(crate) async fn read_body_max(
    app: &App,
    body: Body,
    max: usize,
    too_large: impl FnOnce(usize) -> String,
) -> ApiResult<axum::body::Bytes> {
    // A declared length over the limit is refused before any of it is read: waiting for bytes
    // that will be refused anyway would hold the connection until the idle timeout.
    if body.size_hint().lower() > max as u64 {
        app.live.too_large();
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            too_large(max),
        ));
    }
    let limited = http_body_util::Limited::new(body, max);
    let collected = tokio::time::timeout(app.limits.body_idle, limited.collect())
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "the request body did not arrive in time; send it at once",
            )
        })?;
    let collected = collected.map_err(|e| {
        if e.is::<http_body_util::LengthLimitError>() {
            app.live.too_large();
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", too_large(max))
        } else {
            ApiError::bad(format!("could not read the request body: {e}"))
        }
    })?;
    Ok(collected.to_bytes())
}

/// Reads a whole JSON body within the size limit and the idle timeout.
pub(crate) async fn read_json<T: for<'de> Deserialize<'de>>(app: &App, body: Body) -> ApiResult<T> {
    let bytes = read_body(app, body, |max| {
        format!("the JSON request body is larger than {max} bytes; split the batch")
    })
    .await?;
    // Not counted here: every 400 answer is counted once, where it leaves (`auth::service`).
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad(format!("the request body is not the expected JSON: {e}")))
}

async fn healthz(State(app): State<Arc<App>>) -> Response {
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

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let app2 = app.clone();
    let text = match app
        .blocking(move || crate::stats::prometheus(&app2.store))
        .await
    {
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

async fn stats(State(app): State<Arc<App>>) -> ApiResult<Response> {
    let app2 = app.clone();
    let v = app
        .blocking(move || crate::stats::stats(&app2.store, &app2.live))
        .await?;
    Ok(json(&v))
}

#[derive(Deserialize)]
struct PutQ {
    unit: String,
    version: u64,
    token: Option<u64>,
    #[serde(default)]
    correct: bool,
}

async fn put_unit(
    State(app): State<Arc<App>>,
    q: Result<Query<PutQ>, QueryRejection>,
    body: Body,
) -> ApiResult<Response> {
    let q = query(q)?;
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
        unit: UnitOutcomeW::from(unit),
        staged: staged.meta().into(),
    }))
}

#[derive(Deserialize)]
struct StageQ {
    /// A shorter life than the server's staging timeout, asked for by the client.
    ttl_ms: Option<u64>,
}

async fn stage(
    State(app): State<Arc<App>>,
    q: Result<Query<StageQ>, QueryRejection>,
    body: Body,
) -> ApiResult<Response> {
    let q = query(q)?;
    let ttl = q
        .ttl_ms
        .map_or(app.limits.staged_ttl, Duration::from_millis)
        .min(app.limits.staged_ttl);
    // Refused before the body is read when the client, or all clients, hold as many handles
    // as they may; checked again when the handle is kept.
    let client = crate::bounds::current_client();
    app.staged.room_for(&client)?;
    let staged = upload(&app, body).await?;
    let meta: ObjectW = staged.meta().into();
    let (id, n) = app.staged.insert(staged, ttl, client)?;
    app.live.set_staged_handles(n as u64);
    Ok(json(&StagedW { staged: id, meta }))
}

#[derive(Deserialize)]
struct IdQ {
    id: u64,
}

async fn unstage(
    State(app): State<Arc<App>>,
    q: Result<Query<IdQ>, QueryRejection>,
) -> ApiResult<Response> {
    let q = query(q)?;
    let (found, n) = app.staged.remove([q.id]);
    app.live.set_staged_handles(n as u64);
    Ok(json(&serde_json::json!({ "dropped": found })))
}

async fn commit(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
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
    Ok(json(&CommitReportW::from(&report)))
}

async fn claim(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: ClaimReqW = read_json(&app, body).await?;
    let c = match write_queued(
        &app,
        Write::Claim {
            unit: r.unit,
            source_version: r.source_version,
            worker: r.worker,
            ttl: Duration::from_millis(r.ttl_ms),
        },
    )
    .await?
    {
        Written::Claim(c) => c,
        other => return Err(mismatched("a claim", &other)),
    };
    app.note_seq(app.store.last_seq().ok());
    Ok(json(&ClaimW::from(&c)))
}

async fn renew(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: RenewReqW = read_json(&app, body).await?;
    let write = Write::Renew {
        lease: (&r.lease).into(),
        ttl: Duration::from_millis(r.ttl_ms),
    };
    let out = match write_queued(&app, write).await? {
        Written::Renew(out) => out,
        other => return Err(mismatched("a renewal", &other)),
    };
    // A renewal is a log record: long-polls waiting on the feed wake for it.
    app.note_seq(app.store.last_seq().ok());
    Ok(json(&RenewW::from(&out)))
}

async fn release(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: ReleaseReqW = read_json(&app, body).await?;
    let write = Write::Release {
        lease: (&r.lease).into(),
    };
    let out = match write_queued(&app, write).await? {
        Written::Release(out) => out,
        other => return Err(mismatched("a release", &other)),
    };
    app.note_seq(app.store.last_seq().ok());
    Ok(json(&ReleaseW::from(&out)))
}

#[derive(Deserialize)]
struct UnitQ {
    unit: String,
    at: Option<u64>,
}

async fn lookup(
    State(app): State<Arc<App>>,
    q: Result<Query<UnitQ>, QueryRejection>,
) -> ApiResult<Response> {
    let q = query(q)?;
    // A key no unit can have is a mistake to report, not a unit without an entry (in-process,
    // every command checks the key before it asks the store).
    oncelake::validate_key(&q.unit).map_err(ApiError::from)?;
    // The dedup decision is an in-memory lookup (SPEC P2: millions per second): answered on the
    // connection's thread, not handed to the blocking pool.
    let c = if crate::conns::on_connection_thread() {
        app.store.lookup(&q.unit).map_err(ApiError::from)?
    } else {
        let app2 = app.clone();
        app.blocking(move || app2.store.lookup(&q.unit)).await?
    };
    Ok(json(
        &serde_json::json!({ "committed": c.as_ref().map(CommittedW::from) }),
    ))
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

fn snapshot(store: &Store, at: Option<u64>) -> oncelake::Result<oncelake::Snapshot> {
    match at {
        Some(seq) => store.snapshot_at(seq),
        None => store.snapshot(),
    }
}

async fn entry(
    State(app): State<Arc<App>>,
    q: Result<Query<UnitQ>, QueryRejection>,
) -> ApiResult<Response> {
    let q = query(q)?;
    oncelake::validate_key(&q.unit).map_err(ApiError::from)?;
    let app2 = app.clone();
    let e = app
        .blocking(move || snapshot(&app2.store, q.at)?.get(&q.unit))
        .await?;
    Ok(json(
        &serde_json::json!({ "entry": e.as_ref().map(EntryW::from) }),
    ))
}

/// Streams a unit's object: its entry in the `x-oncelake-entry` header (JSON), its bytes as the
/// body, read in chunks on the blocking pool (never the whole object in memory).
async fn object(
    State(app): State<Arc<App>>,
    q: Result<Query<UnitQ>, QueryRejection>,
) -> ApiResult<Response> {
    let q = query(q)?;
    oncelake::validate_key(&q.unit).map_err(ApiError::from)?;
    let app2 = app.clone();
    let unit = q.unit.clone();
    let found = app
        .blocking(move || open_unit(&snapshot(&app2.store, q.at)?, &q.unit))
        .await?;
    let Some((file, entry)) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("unit {unit:?} has no entry"),
        ));
    };
    object_response(&app, file, &entry)
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
    let header_json = serde_json::to_string(&EntryW::from(entry)).unwrap_or_default();
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
struct LsQ {
    #[serde(default)]
    prefix: String,
    at: Option<u64>,
}

/// Streams the entries under a prefix as JSON lines, one entry each, produced on the blocking
/// pool as the client reads them.
async fn ls(
    State(app): State<Arc<App>>,
    q: Result<Query<LsQ>, QueryRejection>,
) -> ApiResult<Response> {
    let q = query(q)?;
    let app2 = app.clone();
    let at = q.at;
    let snap = app.blocking(move || snapshot(&app2.store, at)).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    app.spawn_blocking(move || {
        let entries = match snap.prefix(&q.prefix) {
            Ok(it) => it,
            Err(e) => {
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                return;
            }
        };
        for e in entries {
            let line = match e {
                Ok(e) => serde_json::to_string(&EntryW::from(&e)).map(|s| s + "\n"),
                Err(e) => {
                    let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                    return;
                }
            };
            let line = line.unwrap_or_default();
            if tx.blocking_send(Ok(Bytes::from(line))).is_err() {
                return;
            }
        }
    })?;
    let stream = receiver_stream(rx);
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

#[derive(Deserialize)]
struct ChangesQ {
    #[serde(default)]
    since: u64,
    #[serde(default)]
    wait_ms: u64,
    limit: Option<usize>,
}

/// The change feed after `since`; with `wait_ms`, waits (long-polls) for the next commit when
/// nothing is there yet.
async fn changes(
    State(app): State<Arc<App>>,
    q: Result<Query<ChangesQ>, QueryRejection>,
) -> ApiResult<Response> {
    let q = query(q)?;
    let limit = q.limit.unwrap_or(10_000).clamp(1, 100_000);
    let wait = Duration::from_millis(q.wait_ms).min(app.limits.max_poll);
    let deadline = tokio::time::Instant::now() + wait;
    let mut rx = app.seq.subscribe();
    loop {
        rx.borrow_and_update();
        let app2 = app.clone();
        let since = q.since;
        let page = app
            .blocking(move || read_changes(&app2.store, since, limit))
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

fn read_changes(store: &Store, since: u64, limit: usize) -> oncelake::Result<ChangesW> {
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

#[derive(Deserialize)]
struct GcReq {
    #[serde(default)]
    dry_run: bool,
    grace_ms: Option<u64>,
    retain_ms: Option<u64>,
}

async fn gc(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
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
    let app2 = app.clone();
    let rep = app.blocking(move || app2.store.gc(o)).await?;
    app.recent.note_gc(&rep);
    Ok(json(&crate::wire::GcReportW::from(&rep)))
}

#[derive(Deserialize)]
struct VerifyReq {
    #[serde(default)]
    deep: bool,
    /// Answer JSON lines: `{"progress":{"done":D,"total":T}}` while it runs, then the report
    /// (`{"ok":..., "report":...}`) or `{"error":KIND,"message":...}`.
    #[serde(default)]
    progress: bool,
}

/// A verify that reports its progress as it goes (a deep verify of a large store takes minutes,
/// and the CLI prints progress lines as it does in-process).
fn verify_streamed(app: Arc<App>, deep: bool) -> ApiResult<Response> {
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
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

async fn verify(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: VerifyReq = read_json(&app, body).await?;
    if r.progress {
        return verify_streamed(app, r.deep);
    }
    let app2 = app.clone();
    let rep = app
        .blocking(move || app2.store.verify(oncelake::VerifyOptions { deep: r.deep }))
        .await?;
    app.recent.note_verify(&rep);
    Ok(json(&crate::stats::verify_json(&rep)))
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no endpoint {} {}; see docs/server.md for the API",
            req.method(),
            req.uri().path()
        ),
    )
}

/// A known path asked with a method it does not take. axum's own answer is an empty body; every
/// error of this API is a JSON object, so a client can always read what went wrong.
async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} does not take {}; see docs/server.md for the method of each endpoint",
            req.uri().path(),
            req.method()
        ),
    )
}

/// Uploads of at most this many bytes are read whole by the connection's thread and staged on a
/// store thread ([`upload`]); larger ones stream to the blocking pool.
pub(crate) const SMALL_UPLOAD: u64 = 64 << 10;

/// Stages a request body. A body that ends within [`SMALL_UPLOAD`] bytes (the usual put of one
/// small object) is read whole into memory by the connection's thread and staged on one of the
/// store threads ([`crate::pool`]): one hand-off, no channel, and no thread made per upload (so
/// a load of small puts runs on the server's fixed threads alone).
/// A larger body streams into the engine's staging writer on the blocking pool: pieces go
/// through a small bounded channel (so memory stays constant whatever the size), the size limit
/// and the idle timeout are enforced as they arrive, and a body that ends in an error (the
/// client went away) makes the staging fail, so its unnamed file is discarded and nothing is
/// committed.
async fn upload(app: &Arc<App>, mut body: Body) -> ApiResult<Staged> {
    let _in_flight = app.live.upload_started();
    // A declared length over the limit: refused at once, nothing staged (as `read_body`).
    if body.size_hint().lower() > app.limits.max_upload {
        app.live.too_large();
        app.live.upload_aborted();
        return Err(upload_too_large(app));
    }
    let mut head: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    let mut pace = Pace::new(&app.limits);
    if crate::conns::on_connection_thread() {
        while total <= SMALL_UPLOAD {
            match next_data(app, &mut body, &mut total, &mut pace).await {
                Err(e) => {
                    app.live.upload_aborted();
                    return Err(e);
                }
                Ok(Some(data)) => head.push(data),
                Ok(None) => {
                    let store = app.store.clone();
                    let staged = app
                        .store_threads
                        .run(move || {
                            store.stage_reader(PiecesReader {
                                pieces: head.into(),
                            })
                        })
                        .await;
                    return match staged {
                        Ok(r) => r.map_err(ApiError::from),
                        Err(crate::pool::Panicked) => Err(ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "internal",
                            "staging did not finish (it panicked); nothing was committed",
                        )),
                    };
                }
            }
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Piece>(4);
    let app2 = app.clone();
    // The writer holds a thread of the pool for as long as the client takes to send the body:
    // bounded per client and in total like every call there, so slow uploads cannot take the
    // threads that reads and other clients need.
    let writer = match app.spawn_blocking(move || app2.store.stage_reader(ChannelReader::new(rx))) {
        Ok(w) => w,
        Err(over) => {
            app.live.upload_aborted();
            return Err(over.into());
        }
    };
    let fed = feed(app, &mut body, tx, head, total, pace).await;
    let staged = writer.await;
    if let Err(e) = fed {
        app.live.upload_aborted();
        return Err(e);
    }
    match staged {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("staging did not finish ({e}); nothing was committed"),
        )),
    }
}

/// A `Read` over a small upload's pieces, read whole before staging.
struct PiecesReader {
    pieces: std::collections::VecDeque<Bytes>,
}

impl Read for PiecesReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(front) = self.pieces.front_mut() {
            if front.is_empty() {
                self.pieces.pop_front();
                continue;
            }
            let n = buf.len().min(front.len());
            buf[..n].copy_from_slice(&front[..n]);
            *front = front.slice(n..);
            return Ok(n);
        }
        Ok(0)
    }
}

/// The pace of an upload: the bytes that arrived in the current window of `body_idle`, which
/// must reach `min_body_rate` per second over the window (a slow-loris trickling a byte now and
/// then is cut off, not kept with its file and thread forever).
pub(crate) struct Pace {
    window: Duration,
    /// Bytes each window must bring (0: no rate is checked).
    need: u64,
    ends: tokio::time::Instant,
    got: u64,
}

impl Pace {
    pub(crate) fn new(limits: &Limits) -> Pace {
        let window = limits.body_idle;
        Pace {
            window,
            need: (limits.min_body_rate as u128 * window.as_millis() / 1000) as u64,
            ends: tokio::time::Instant::now() + window,
            got: 0,
        }
    }

    /// When the wait for the next piece ends: the idle timeout, or sooner the window's end while
    /// the window has not brought its bytes.
    fn deadline(&self) -> tokio::time::Instant {
        let idle = tokio::time::Instant::now() + self.window;
        if self.got < self.need {
            idle.min(self.ends)
        } else {
            idle
        }
    }

    /// Counts `n` bytes arrived; starts the next window once this one has ended.
    fn arrived(&mut self, n: usize) -> Result<(), ()> {
        self.got += n as u64;
        self.check()
    }

    /// At or after the window's end: whether it brought enough, and a new window if so.
    fn check(&mut self) -> Result<(), ()> {
        let now = tokio::time::Instant::now();
        if now < self.ends {
            return Ok(());
        }
        if self.got < self.need {
            return Err(());
        }
        self.ends = now + self.window;
        self.got = 0;
        Ok(())
    }

    fn too_slow(&self) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!(
                "the upload arrived slower than {} bytes in {:?}; the staging was discarded and \
                 nothing committed. Send the body at once",
                self.need, self.window
            ),
        )
    }
}

/// The next piece of an upload's data (`None` at its end), within the idle timeout and the
/// slowest pace accepted, counted into `total` against the upload limit.
async fn next_data(
    app: &App,
    body: &mut Body,
    total: &mut u64,
    pace: &mut Pace,
) -> ApiResult<Option<Bytes>> {
    loop {
        let frame = match tokio::time::timeout_at(pace.deadline(), body.frame()).await {
            Err(_) => {
                if pace.check().is_err() {
                    return Err(pace.too_slow());
                }
                return Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    format!(
                        "no upload data for {:?}; the staging was discarded and nothing committed",
                        app.limits.body_idle
                    ),
                ));
            }
            Ok(None) => return Ok(None),
            Ok(Some(Err(e))) => {
                return Err(ApiError::bad(format!(
                    "the upload broke off ({e}); the staging was discarded and nothing committed"
                )))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        *total += data.len() as u64;
        if *total > app.limits.max_upload {
            app.live.too_large();
            return Err(upload_too_large(app));
        }
        if pace.arrived(data.len()).is_err() {
            return Err(pace.too_slow());
        }
        return Ok(Some(data));
    }
}

fn upload_too_large(app: &App) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!(
            "the upload is larger than {} bytes; nothing was committed",
            app.limits.max_upload
        ),
    )
}

/// Feeds an upload into the staging writer's channel: first `head` (the pieces already read,
/// `total` bytes), then the rest of the body. Any error is also sent, so the staging fails. A
/// full channel (the disk is slower than the network) is waited for here, on the connection's
/// runtime, holding no thread.
pub(crate) async fn feed(
    app: &App,
    body: &mut Body,
    tx: tokio::sync::mpsc::Sender<Piece>,
    head: Vec<Bytes>,
    mut total: u64,
    mut pace: Pace,
) -> ApiResult<()> {
    for data in head {
        if tx.send(Piece::Data(data)).await.is_err() {
            // The staging writer stopped (its error is reported by `upload`).
            return Ok(());
        }
    }
    loop {
        match next_data(app, body, &mut total, &mut pace).await {
            Err(e) => {
                let _ = tx.send(Piece::Failed(e.message.clone())).await;
                return Err(e);
            }
            Ok(None) => {
                let _ = tx.send(Piece::End).await;
                return Ok(());
            }
            Ok(Some(data)) => {
                if tx.send(Piece::Data(data)).await.is_err() {
                    // The staging writer stopped (its error is reported by `upload`).
                    return Ok(());
                }
            }
        }
    }
}

/// One piece of an upload on its way to the staging writer.
pub(crate) enum Piece {
    Data(Bytes),
    /// The body ended normally.
    End,
    /// The upload failed; staging must fail.
    Failed(String),
}

/// A `Read` over the pieces of an upload. Only an explicit end is the end: a sender that
/// vanished (the handler was dropped because the client went away) is an error, so a cut-off
/// upload never becomes a (truncated) object.
pub(crate) struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Piece>,
    cur: Bytes,
    ended: bool,
}

impl ChannelReader {
    /// Reads `rx` from a thread of the blocking pool (it blocks for each piece).
    pub(crate) fn new(rx: tokio::sync::mpsc::Receiver<Piece>) -> Self {
        ChannelReader {
            rx,
            cur: Bytes::new(),
            ended: false,
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            if self.ended {
                return Ok(0);
            }
            match self.rx.blocking_recv() {
                Some(Piece::Data(b)) => self.cur = b,
                Some(Piece::End) => self.ended = true,
                Some(Piece::Failed(why)) => return Err(std::io::Error::other(why)),
                None => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the upload was cut off",
                    ))
                }
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        Ok(n)
    }
}
