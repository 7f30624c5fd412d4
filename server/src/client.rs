//! The blocking client of `oncelake serve`: the store's operations over the HTTP API, answering
//! with the engine's own types. Calls answered with one JSON value reuse kept-alive connections
//! from a small pool shared by the clones of a `Client` (a connection per call costs the server
//! an accept, a task and a connection state each time, which dominated small commits); streamed
//! answers (ls, objects, reconcile plans) use a connection of their own. Uploads are streamed with
//! chunked transfer encoding, never held in memory.

use crate::discovery::{self, Address};
use crate::wire::{
    self, ChangesW, ClaimReqW, ClaimW, CommitItemW, CommitReportW, CommitW, CommittedW, EntryW,
    ErrorBody, LeaseW, PutW, ReleaseReqW, ReleaseW, RenewReqW, RenewW, StagedW, UnitOutcomeW,
};
use crate::wire_reconcile;
use oncelake::log::Record;
use oncelake::{
    ClaimOutcome, CommitReport, Committed, Entry, Lease, ObjectMeta, ReleaseOutcome, RenewOutcome,
    UnitOutcome,
};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What can go wrong talking to a server; each variant says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No server answers for the store.
    #[error("no server answers for store {store}; start one with `oncelake serve {store}` or open the store in-process")]
    NotServed {
        /// The store directory.
        store: PathBuf,
    },
    /// The server could not be reached.
    #[error("cannot reach the oncelake server at {address}: {source}; is `oncelake serve` still running? (if it was killed, start it again: it takes over cleanly)")]
    Connect {
        /// Where.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The connection broke after the request was sent: its outcome is unknown.
    #[error("the connection to the oncelake server broke during {during}: {source}; the outcome is unknown — look the unit up before retrying (a retried put of the same bytes is answered as a duplicate if it was committed)")]
    ConnectionLost {
        /// The request.
        during: String,
        /// Why.
        source: std::io::Error,
    },
    /// The server refused the bearer token.
    #[error("the server refused the request (401): {message}")]
    Unauthorized {
        /// The server's message.
        message: String,
    },
    /// The request was too large.
    #[error("the request is too large (413): {message}")]
    TooLarge {
        /// The server's message.
        message: String,
    },
    /// The server found the request malformed, or the store refused it as invalid.
    #[error("{message}")]
    BadRequest {
        /// Stable kind (`bad_request`, `invalid_key`, `invalid_request`, `seq_out_of_range`, ...).
        kind: String,
        /// The message.
        message: String,
    },
    /// An object the server sent does not match its entry's size and CRC32: the engine's own
    /// `Error::Corrupt`, exactly what an in-process read of it returns (SPEC I2, I9).
    #[error("{0}")]
    Damaged(oncelake::Error),
    /// The store failed the operation on the server side (I/O, read-only, failed state, ...).
    #[error("{message}")]
    Store {
        /// Stable kind (`io`, `read_only`, `failed`, `missing_object`, `corrupt`, ...).
        kind: String,
        /// HTTP status.
        status: u16,
        /// The message.
        message: String,
    },
    /// Reading the local input of an upload failed; nothing was committed.
    #[error("reading the upload's input failed: {0}; nothing was committed")]
    Input(std::io::Error),
    /// The server answered something this client does not understand.
    #[error("unexpected answer from the oncelake server: {0}; are the client and server the same version?")]
    Protocol(String),
    /// What answers at the address in the store's `serve.json` is not the server of this store
    /// (SPEC R20): it could not prove that it holds it. Neither the token nor any data was sent.
    #[error(
        "{address}, named by {store}/serve.json, is not the server of {store}: {found}. Nothing \
         was sent to it (neither the token nor any data). The server that wrote serve.json (pid \
         {pid}) may have been killed and its address taken over by another process: start \
         `oncelake serve {store}` again (it replaces serve.json), or remove {store}/serve.json \
         to use the store in-process",
        store = .store.display()
    )]
    NotItsServer {
        /// The store directory.
        store: PathBuf,
        /// The address in `serve.json`.
        address: String,
        /// The pid in `serve.json`.
        pid: u32,
        /// What was found there instead.
        found: String,
    },
    /// The server of the store accepted the connection but did not answer in time: it holds the
    /// store (or something holds its address) and is hung or overloaded.
    #[error(
        "the oncelake server of {store} at {address} (pid {pid}{running}) accepted the \
         connection but did not answer within {waited:?}; it is hung or overloaded and the store \
         is busy: wait longer (--wait), or stop it (`kill {pid}`) and run again",
        store = .store.display(),
        running = if *.running { "" } else { ", no longer running" }
    )]
    NoAnswer {
        /// The store directory.
        store: PathBuf,
        /// The address in `serve.json`.
        address: String,
        /// The pid in `serve.json`.
        pid: u32,
        /// Whether that pid is a live process.
        running: bool,
        /// How long the client waited.
        waited: Duration,
    },
}

/// How long [`Client::for_store`] waits for the server's answer to its identity question.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// Result of client calls.
pub type Result<T> = std::result::Result<T, ClientError>;

/// A connection target and credentials. Clones share one pool of kept-alive connections, so a
/// `Client` shared by many threads holds at most [`POOL_MAX`] idle connections.
#[derive(Clone, Debug)]
pub struct Client {
    address: Address,
    token: Option<String>,
    timeout: Option<Duration>,
    pool: Arc<Pool>,
    /// The server this client must reach, when it was found through a store's `serve.json`:
    /// each new TCP connection asks the identity question before anything else is sent on it.
    verified: Option<Arc<Verified>>,
}

/// What the server of a store found through its `serve.json` must prove.
#[derive(Debug)]
struct Verified {
    store: PathBuf,
    pid: u32,
    expect: crate::identity::Expected,
}

/// Most idle connections a client keeps.
pub const POOL_MAX: usize = 64;

/// An idle connection older than this is closed rather than reused: the server closes idle
/// connections after its header timeout (30 s by default, as low as a second when configured),
/// and a connection it is closing must not carry a request.
const POOL_IDLE: Duration = Duration::from_secs(2);

/// An upload reuses only a connection idle for less than this (see [`Client::exchange`]).
const UPLOAD_REUSE: Duration = Duration::from_millis(250);

/// A connection with what the server sent on it and was not read yet (nothing, when idle).
type Pooled = BufReader<Box<dyn Conn>>;

/// The idle kept-alive connections of a client and its clones: each with when it was last used
/// and the read/write timeout it has (clones may differ in timeout, and setting it costs two
/// system calls per request, so it is set only when it changes).
///
/// The connections belong to the process that made them. A child `fork()`ed from it (a
/// `multiprocessing` worker with the parent's served `Store`) inherits copies of the same
/// sockets: were both to send on one, each could read the other's answer — the outcome of
/// another unit's commit. So the first use in another process drops the inherited ones
/// (closing the child's descriptors only; the parent's connections stay open) and the pool is
/// the child's from then on.
#[derive(Default)]
struct Pool {
    idle: Mutex<Idle>,
}

/// The idle connections and the process they belong to (0 before the first is kept).
#[derive(Default)]
struct Idle {
    conns: Vec<(Pooled, Instant, Option<Duration>)>,
    owner: u32,
}

impl Idle {
    /// The connections of this process, dropping those inherited across a `fork()`.
    fn of_this_process(&mut self) -> &mut Vec<(Pooled, Instant, Option<Duration>)> {
        let me = std::process::id();
        if self.owner != me {
            self.conns.clear();
            self.owner = me;
        }
        &mut self.conns
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.idle.lock().map(|v| v.conns.len()).unwrap_or(0);
        write!(f, "Pool({n} idle)")
    }
}

impl Pool {
    /// An idle connection the server has not closed, if any.
    /// The most recently used idle connection, if it was used less than `max_age` ago and
    /// the server has not closed it. Older ones are closed.
    fn take(&self, max_age: Duration) -> Option<(Pooled, Option<Duration>)> {
        loop {
            let (conn, at, timeout) = {
                let mut guard = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                let idle = guard.of_this_process();
                match idle.last() {
                    Some((_, at, _)) if at.elapsed() >= POOL_IDLE => {
                        // All are older (the newest is last): close them.
                        idle.clear();
                        return None;
                    }
                    Some((_, at, _)) if at.elapsed() >= max_age => return None,
                    Some(_) => idle.pop()?,
                    None => return None,
                }
            };
            // Anything readable on an idle connection (end of stream, or bytes nobody asked
            // for) means it cannot carry another request.
            if at.elapsed() < max_age && conn.buffer().is_empty() && conn.get_ref().idle_open() {
                return Some((conn, timeout));
            }
        }
    }

    fn put(&self, conn: Pooled, timeout: Option<Duration>) {
        let mut guard = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let idle = guard.of_this_process();
        if idle.len() < POOL_MAX {
            idle.push((conn, Instant::now(), timeout));
        }
    }

    /// Idle connections kept (for tests).
    fn len(&self) -> usize {
        self.idle.lock().map(|v| v.conns.len()).unwrap_or(0)
    }
}

/// A request body.
enum Payload<'a> {
    Empty,
    Json(Vec<u8>),
    Stream(&'a mut dyn Read),
}

impl Client {
    /// A client of the server listening on a Unix socket.
    pub fn unix(path: impl Into<PathBuf>) -> Client {
        Client {
            address: Address::Unix(path.into()),
            token: None,
            timeout: None,
            pool: Arc::default(),
            verified: None,
        }
    }

    /// A client of a server on TCP with its bearer token.
    pub fn tcp(address: impl Into<String>, token: impl Into<String>) -> Client {
        Client {
            address: Address::Tcp(address.into()),
            token: Some(token.into()),
            timeout: None,
            pool: Arc::default(),
            verified: None,
        }
    }

    /// The client of the server that holds `store`, found through its `serve.json`, if one
    /// answers and proves that it is the server of this store directory (SPEC R20,
    /// [`crate::identity`]) within [`HEALTH_TIMEOUT`]; see [`Client::for_store_within`].
    pub fn for_store(store: &Path) -> Result<Client> {
        Client::for_store_within(store, HEALTH_TIMEOUT)
    }

    /// The client of the server that holds `store`, if the server named by its `serve.json`
    /// proves within `probe` that it holds this store directory. Nothing else is sent before it
    /// has (no token, no data), and every new TCP connection of the client asks again.
    ///
    /// [`ClientError::NotServed`]: no `serve.json`, nothing listening at its address (a killed
    /// server's), or the genuine server of another directory (a copy of a served store carries
    /// the original's `serve.json`): the store is used in-process. [`ClientError::NotItsServer`]:
    /// something else answers there. [`ClientError::NoAnswer`]: a connection is accepted but
    /// nothing answers (or no connection is accepted) within `probe`.
    pub fn for_store_within(store: &Path, probe: Duration) -> Result<Client> {
        let not_served = || ClientError::NotServed {
            store: store.to_path_buf(),
        };
        let info = discovery::read_info(store).ok_or_else(not_served)?;
        let address = match info.parsed().ok_or_else(not_served)? {
            // A relative path (written by a server before it made its path absolute) is
            // relative to that server's working directory, not ours; the socket is in the
            // store directory either way.
            Address::Unix(p) if p.is_relative() => {
                Address::Unix(store.join(discovery::SOCKET_FILE))
            }
            a => a,
        };
        let dir = crate::identity::DirId::of(store).map_err(|_| not_served())?;
        let mut client = Client {
            address,
            token: info.token.clone(),
            timeout: Some(probe),
            pool: Arc::default(),
            verified: None,
        };
        // A hung server must not hang every command: the probe has a timeout, the client none.
        let mut conn = match client.connect_only() {
            // Something listens there but takes no connection in time: a hung server's full
            // queue (or a stranger's).
            Err(ClientError::Connect { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ) =>
            {
                return Err(ClientError::NoAnswer {
                    store: store.to_path_buf(),
                    address: client.address(),
                    pid: info.pid,
                    running: process_running(info.pid),
                    waited: probe,
                })
            }
            Ok(c) => c,
            Err(ClientError::Connect { .. }) => return Err(not_served()),
            Err(e) => return Err(e),
        };
        // Something listens there: it must prove what serve.json lets it prove.
        let expect = match crate::identity::Expected::new(&info, dir) {
            Ok(e) => e,
            Err(found) => return Err(client.not_its_server(store, info.pid, found)),
        };
        client.verified = Some(Arc::new(Verified {
            store: store.to_path_buf(),
            pid: info.pid,
            expect,
        }));
        match client.ask_identity(&mut conn) {
            Ok(()) => {}
            // The genuine server of the original of this copy: nobody serves this directory.
            Err(Asked::OtherDirectory(_)) => return Err(not_served()),
            // Closed before answering (a server shutting down): not served, as a refused
            // connection is. Nothing but the question was sent.
            Err(Asked::Closed) => return Err(not_served()),
            Err(e) => return Err(client.asked_error(e)),
        }
        client.timeout = None;
        // The proved connection carries the first call (with this client's timeout then).
        client.pool.put(BufReader::new(conn), Some(probe));
        Ok(client)
    }

    /// Sets a read/write timeout on every call (none by default: a commit waits for its group).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = Some(timeout);
        self
    }

    /// Idle kept-alive connections this client (and its clones) hold.
    pub fn idle_connections(&self) -> usize {
        self.pool.len()
    }

    /// The address, as `unix:PATH` or `tcp:HOST:PORT`.
    pub fn address(&self) -> String {
        match &self.address {
            Address::Unix(p) => format!("unix:{}", p.display()),
            Address::Tcp(a) => format!("tcp:{a}"),
        }
    }

    /// `GET /healthz`.
    pub fn health(&self) -> Result<serde_json::Value> {
        self.json("GET", "/healthz", Payload::Empty)
    }

    /// `GET /metrics`: the Prometheus text.
    pub fn metrics_text(&self) -> Result<String> {
        let mut resp = self.request("GET", "/metrics", Payload::Empty)?;
        let mut s = String::new();
        resp.body
            .read_to_string(&mut s)
            .map_err(|e| lost("GET /metrics", e))?;
        Ok(s)
    }

    /// `GET /v1/stats`: the engine's metrics (each counter with its scope), the unit count and
    /// seq read from the store, and the server's own counters.
    pub fn stats(&self) -> Result<crate::stats::StatsW> {
        self.json("GET", "/v1/stats", Payload::Empty)
    }

    /// Streams `input` as the output of `unit` at `source_version` and commits it (one unit):
    /// the unit's outcome and what staging computed.
    pub fn put_reader(
        &self,
        unit: &str,
        source_version: u64,
        token: Option<u64>,
        correct: bool,
        mut input: impl Read,
    ) -> Result<(UnitOutcome, ObjectMeta)> {
        let mut q = format!("/v1/put?unit={}&version={source_version}", encode(unit));
        if let Some(t) = token {
            q.push_str(&format!("&token={t}"));
        }
        if correct {
            q.push_str("&correct=true");
        }
        let r: PutW = self.json("PUT", &q, Payload::Stream(&mut input))?;
        Ok((
            r.unit.to_unit_outcome().map_err(ClientError::Protocol)?,
            r.staged.to_meta().map_err(ClientError::Protocol)?,
        ))
    }

    /// Streams `input` into the server's staging: a handle for [`Client::commit`].
    pub fn stage_reader(&self, mut input: impl Read) -> Result<(u64, ObjectMeta)> {
        let r: StagedW = self.json("POST", "/v1/stage", Payload::Stream(&mut input))?;
        Ok((r.staged, r.meta.to_meta().map_err(ClientError::Protocol)?))
    }

    /// Commits a batch of staged handles (all-or-nothing unless `partial`); the handles are
    /// dropped afterwards.
    pub fn commit(&self, items: Vec<CommitItemW>, partial: bool) -> Result<CommitReport> {
        self.commit_with(items, partial, false)
    }

    /// [`Client::commit`], keeping the handles when `keep_staged` (to commit the same bytes
    /// again as other units).
    pub fn commit_with(
        &self,
        items: Vec<CommitItemW>,
        partial: bool,
        keep_staged: bool,
    ) -> Result<CommitReport> {
        let body = to_json(&CommitW {
            items,
            partial,
            keep_staged,
        })?;
        let r: CommitReportW = self.json("POST", "/v1/commit", Payload::Json(body))?;
        r.to_report().map_err(ClientError::Protocol)
    }

    /// Claims `unit` for `worker` (coordinator mode).
    pub fn claim(
        &self,
        unit: &str,
        source_version: u64,
        worker: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome> {
        let body = to_json(&ClaimReqW {
            unit: unit.into(),
            source_version,
            worker: worker.into(),
            ttl_ms: ttl.as_millis() as u64,
        })?;
        let r: ClaimW = self.json("POST", "/v1/claim", Payload::Json(body))?;
        r.to_outcome().map_err(ClientError::Protocol)
    }

    /// Renews a lease.
    pub fn renew(&self, lease: &Lease, ttl: Duration) -> Result<RenewOutcome> {
        let body = to_json(&RenewReqW {
            lease: LeaseW::from(lease),
            ttl_ms: ttl.as_millis() as u64,
        })?;
        let r: RenewW = self.json("POST", "/v1/renew", Payload::Json(body))?;
        Ok((&r).into())
    }

    /// Releases a lease.
    pub fn release(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        let body = to_json(&ReleaseReqW {
            lease: LeaseW::from(lease),
        })?;
        let r: ReleaseW = self.json("POST", "/v1/release", Payload::Json(body))?;
        Ok((&r).into())
    }

    /// The dedup fast path: the unit's committed version, if any.
    pub fn lookup(&self, unit: &str) -> Result<Option<Committed>> {
        #[derive(serde::Deserialize)]
        struct R {
            committed: Option<CommittedW>,
        }
        let r: R = self.json(
            "GET",
            &format!("/v1/lookup?unit={}", encode(unit)),
            Payload::Empty,
        )?;
        r.committed
            .map(|c| c.to_committed().map_err(ClientError::Protocol))
            .transpose()
    }

    /// The unit's entry, newest or as of `at`.
    pub fn get(&self, unit: &str, at: Option<u64>) -> Result<Option<Entry>> {
        #[derive(serde::Deserialize)]
        struct R {
            entry: Option<EntryW>,
        }
        let r: R = self.json("GET", &unit_query("/v1/entry", unit, at), Payload::Empty)?;
        r.entry
            .map(|e| e.to_entry().map_err(ClientError::Protocol))
            .transpose()
    }

    /// Copies the unit's object (newest or as of `at`) into `out`, streamed; its entry, or
    /// `None` when the unit has none. The object is checked against its entry's size and CRC32
    /// as in-process: a damaged one fails with [`ClientError::Damaged`] holding the engine's own
    /// error — after its bytes were written to `out`, so write somewhere you can discard on error.
    pub fn read_object(
        &self,
        unit: &str,
        at: Option<u64>,
        out: &mut dyn Write,
    ) -> Result<Option<Entry>> {
        self.object_to(&unit_query("/v1/object", unit, at), "GET /v1/object", out)
    }

    /// `GET path` of an object endpoint: the object streamed into `out`, its entry from the
    /// `x-oncelake-entry` header; `None` on 404 (the unit has no entry there).
    fn object_to(&self, path: &str, what: &str, out: &mut dyn Write) -> Result<Option<Entry>> {
        let mut resp = match self.request("GET", path, Payload::Empty) {
            Err(ClientError::Store { status: 404, .. }) => return Ok(None),
            other => other?,
        };
        let entry: EntryW = resp
            .header("x-oncelake-entry")
            .and_then(|h| serde_json::from_str(h).ok())
            .ok_or_else(|| ClientError::Protocol("an object without its entry header".into()))?;
        let entry = entry.to_entry().map_err(ClientError::Protocol)?;
        let mut checked = crate::object_check::Checking::new(out);
        std::io::copy(&mut resp.body, &mut checked).map_err(|e| lost(what, e))?;
        // The in-process read's size and CRC32 check (SPEC I2), made as the bytes arrived.
        match checked.damaged(&entry) {
            None => Ok(Some(entry)),
            Some(e) => Err(ClientError::Damaged(e)),
        }
    }

    /// The entries under `prefix` (newest or as of `at`), streamed to `each` in key order until
    /// it returns `false`.
    pub fn ls(
        &self,
        prefix: &str,
        at: Option<u64>,
        mut each: impl FnMut(Entry) -> bool,
    ) -> Result<()> {
        let mut path = format!("/v1/ls?prefix={}", encode(prefix));
        if let Some(at) = at {
            path.push_str(&format!("&at={at}"));
        }
        let resp = self.request("GET", &path, Payload::Empty)?;
        for line in BufReader::new(resp.body).lines() {
            let line = line.map_err(|e| lost("GET /v1/ls", e))?;
            let e: EntryW = serde_json::from_str(&line)
                .map_err(|e| ClientError::Protocol(format!("an ls line: {e}")))?;
            if !each(e.to_entry().map_err(ClientError::Protocol)?) {
                break;
            }
        }
        Ok(())
    }

    /// The log records after `since` (at most `limit`); with `wait`, waits up to that long for
    /// the next commit when there is none yet (long-polling). Also the store's seq when read.
    pub fn changes_since(
        &self,
        since: u64,
        wait: Duration,
        limit: usize,
    ) -> Result<(Vec<Record>, u64)> {
        let path = format!(
            "/v1/changes?since={since}&wait_ms={}&limit={limit}",
            wait.as_millis()
        );
        let r: ChangesW = self.json("GET", &path, Payload::Empty)?;
        let records = r
            .records
            .iter()
            .map(|rec| {
                let bytes = wire::from_hex(&rec.record).map_err(ClientError::Protocol)?;
                Record::decode(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((records, r.seq))
    }

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
        let r: wire::GcReportW = self.json("POST", "/v1/gc", Payload::Json(body))?;
        Ok((&r).into())
    }

    /// Runs verify on the server: the engine's whole report, as `Store::verify` returns it.
    pub fn verify(&self, deep: bool) -> Result<oncelake::VerifyReport> {
        #[derive(serde::Deserialize)]
        struct Answer {
            report: crate::wire_verify::VerifyReportW,
        }
        let body = to_json(&serde_json::json!({ "deep": deep }))?;
        let a: Answer = self.json("POST", "/v1/verify", Payload::Json(body))?;
        a.report.to_engine().map_err(ClientError::Protocol)
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
            report: Option<crate::wire_verify::VerifyReportW>,
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
                return r.to_engine().map_err(ClientError::Protocol);
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
                wire_reconcile::PlanLineW::Item(i) => {
                    each(PlanEvent::Item(i.to_item().map_err(ClientError::Protocol)?))
                }
                wire_reconcile::PlanLineW::Summary(s) => return Ok(PlanEnd::Complete(s.into())),
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

    /// Records `unit`'s source version with `input` as its input (pipelines): the outcome of the
    /// internal commit, as `oncelake::pipeline::set_source_version` returns it.
    pub fn pipeline_set_version(
        &self,
        unit: &str,
        source_version: u64,
        mut input: &[u8],
    ) -> Result<UnitOutcome> {
        let q = format!(
            "/v1/pipeline/source?unit={}&version={source_version}",
            encode(unit)
        );
        let r: UnitOutcomeW = self.json("PUT", &q, Payload::Stream(&mut input))?;
        r.to_unit_outcome().map_err(ClientError::Protocol)
    }

    /// The cell counts of the pipeline defined by `definition` (its TOML text).
    pub fn pipeline_status(&self, definition: &str) -> Result<oncelake::pipeline::Status> {
        let body = to_json(&serde_json::json!({ "pipeline": definition }))?;
        let r: crate::wire_pipeline::StatusW =
            self.json("POST", "/v1/pipeline/status", Payload::Json(body))?;
        Ok((&r).into())
    }

    /// Why each cell of `unit` is in its state, in the pipeline defined by `definition`.
    pub fn pipeline_explain(
        &self,
        definition: &str,
        unit: &str,
    ) -> Result<oncelake::pipeline::Explain> {
        let body = to_json(&serde_json::json!({ "pipeline": definition, "unit": unit }))?;
        let r: crate::wire_pipeline::ExplainW =
            self.json("POST", "/v1/pipeline/explain", Payload::Json(body))?;
        r.to_engine().map_err(ClientError::Protocol)
    }

    /// Defines a lake table (`oncelake table create`): the table and how far it is published.
    pub fn table_create(
        &self,
        name: &str,
        prefix: &str,
        format: &str,
    ) -> Result<crate::wire_table::TableW> {
        let body = to_json(&crate::wire_table::CreateReqW {
            name: name.into(),
            prefix: prefix.into(),
            format: format.into(),
        })?;
        self.json("POST", "/v1/table/create", Payload::Json(body))
    }

    /// The store's lake tables and how far each is published (`oncelake table ls`).
    pub fn table_ls(&self) -> Result<Vec<crate::wire_table::TableW>> {
        self.json("GET", "/v1/table/ls", Payload::Empty)
    }

    /// Publishes table `name`, or every table (`oncelake table publish`).
    pub fn table_publish(&self, name: Option<&str>) -> Result<Vec<crate::wire_table::PublishW>> {
        let body = to_json(&crate::wire_table::PublishReqW {
            name: name.map(Into::into),
        })?;
        self.json("POST", "/v1/table/publish", Payload::Json(body))
    }

    fn json<T: for<'de> serde::Deserialize<'de>>(
        &self,
        method: &str,
        path: &str,
        payload: Payload<'_>,
    ) -> Result<T> {
        let during = format!("{method} {}", path.split('?').next().unwrap_or(path));
        let body = self.exchange(method, path, payload, &during)?;
        serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(format!("{during}: {e}")))
    }

    /// One request on a kept-alive connection whose whole answer is read: its body when the
    /// status is a success. A reused connection that the server closed before answering (it
    /// timed out idle just as the request went out) did not process the request: it is sent
    /// once more on a new connection.
    fn exchange(
        &self,
        method: &str,
        path: &str,
        mut payload: Payload<'_>,
        during: &str,
    ) -> Result<Vec<u8>> {
        // An upload cannot be sent twice (its input is read as it goes), so it rides only on a
        // connection used a moment ago, which the server's idle timeout cannot be closing.
        let reused = match payload {
            Payload::Stream(_) => self.pool.take(UPLOAD_REUSE),
            _ => self.pool.take(POOL_IDLE),
        };
        if let Some((conn, has)) = reused {
            match self.exchange_on(conn, has, method, path, &mut payload, during) {
                Err(Exchange::Unanswered(e)) => {
                    // A fresh connection that cannot even connect means the server went away:
                    // the first attempt's outcome is what is unknown.
                    let conn = self.connect().map_err(|c| match c {
                        // Whoever answers now is not our server: say so, not "lost".
                        c @ (ClientError::NotItsServer { .. } | ClientError::NoAnswer { .. }) => c,
                        _ => ClientError::from(e),
                    })?;
                    return self.finish(self.exchange_on(
                        BufReader::new(conn),
                        self.timeout,
                        method,
                        path,
                        &mut payload,
                        during,
                    ));
                }
                other => return self.finish(other),
            }
        }
        let conn = BufReader::new(self.connect()?);
        self.finish(self.exchange_on(conn, self.timeout, method, path, &mut payload, during))
    }

    /// The client error of an exchange that was not (or could not be) sent again.
    fn finish(&self, r: std::result::Result<Vec<u8>, Exchange>) -> Result<Vec<u8>> {
        r.map_err(|e| match e {
            Exchange::Unanswered(e) | Exchange::Broken(e) | Exchange::Failed(e) => e.into(),
        })
    }

    /// One exchange on `conn`, whose read/write timeout is `has` (set to this client's first
    /// when it differs).
    fn exchange_on(
        &self,
        mut conn: Pooled,
        has: Option<Duration>,
        method: &str,
        path: &str,
        payload: &mut Payload<'_>,
        during: &str,
    ) -> std::result::Result<Vec<u8>, Exchange> {
        let io = |e: std::io::Error| ExchangeError::Io(during.to_string(), e);
        if has != self.timeout {
            conn.get_ref()
                .set_timeouts(self.timeout)
                .map_err(|e| Exchange::Broken(io(e)))?;
        }
        let streamed = matches!(payload, Payload::Stream(_));
        let sent = self.send(conn.get_mut(), method, path, payload, false);
        let sent = match sent {
            Err(Sent::Input(e)) => {
                return Err(Exchange::Failed(ExchangeError::Client(ClientError::Input(
                    e,
                ))))
            }
            Err(Sent::Conn(e)) => Err(e),
            Ok(()) => Ok(()),
        };
        // A server may answer before reading the whole body (401, 413): read its answer even if
        // sending failed, and report the send failure only when there is none.
        let head = match read_head_from(&mut conn) {
            Ok(h) => h,
            Err(e) => {
                let e = sent.err().unwrap_or(e);
                let unanswered = matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                );
                return Err(if unanswered && conn.buffer().is_empty() {
                    Exchange::Unanswered(io(e))
                } else {
                    Exchange::Broken(io(e))
                });
            }
        };
        let mut body = Vec::new();
        let read = match head.length {
            Length::Exact(n) => (&mut conn).take(n).read_to_end(&mut body).and_then(|got| {
                if (got as u64) < n {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("the answer ended after {got} of {n} bytes"),
                    ))
                } else {
                    Ok(())
                }
            }),
            Length::Chunked => Chunked {
                inner: &mut conn,
                left: 0,
                done: false,
            }
            .read_to_end(&mut body)
            .map(|_| ()),
            Length::UntilClose => conn.read_to_end(&mut body).map(|_| ()),
        };
        read.map_err(|e| Exchange::Broken(io(e)))?;
        // Kept only when the server will take another request on it and this one is fully
        // done: an upload the server refused may not have been read to its end.
        let reusable = sent.is_ok()
            && head.keep_alive
            && !matches!(head.length, Length::UntilClose)
            && (head.status < 400 || !streamed);
        let resp = Response {
            status: head.status,
            headers: head.headers,
            body: Box::new(std::io::Cursor::new(body)),
        };
        let mut resp =
            check(resp, during).map_err(|e| Exchange::Failed(ExchangeError::Client(e)))?;
        if reusable {
            self.pool.put(conn, self.timeout);
        }
        let mut out = Vec::new();
        let _ = resp.body.read_to_end(&mut out);
        Ok(out)
    }

    /// Writes the request: head and body. With `close`, the server closes the connection after
    /// its answer (the answer is then read to its end by the caller's reader).
    fn send(
        &self,
        conn: &mut Box<dyn Conn>,
        method: &str,
        path: &str,
        payload: &mut Payload<'_>,
        close: bool,
    ) -> std::result::Result<(), Sent> {
        let mut head = String::with_capacity(160);
        head.push_str(method);
        head.push(' ');
        head.push_str(path);
        head.push_str(" HTTP/1.1\r\nHost: localhost\r\n");
        if close {
            head.push_str("Connection: close\r\n");
        }
        if let Some(t) = &self.token {
            head.push_str("Authorization: Bearer ");
            head.push_str(t);
            head.push_str("\r\n");
        }
        match payload {
            Payload::Empty => {
                head.push_str("Content-Length: 0\r\n\r\n");
                conn.write_all(head.as_bytes())?;
            }
            Payload::Json(body) => {
                use std::fmt::Write as _;
                let _ = write!(
                    head,
                    "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                // One write for a small request: one segment, one wake-up of the server.
                if body.len() <= 8 << 10 {
                    let mut all = head.into_bytes();
                    all.extend_from_slice(body);
                    conn.write_all(&all)?;
                } else {
                    conn.write_all(head.as_bytes())?;
                    conn.write_all(body)?;
                }
            }
            Payload::Stream(input) => {
                head.push_str("Transfer-Encoding: chunked\r\n\r\n");
                conn.write_all(head.as_bytes())?;
                send_chunked(conn, &mut **input)?;
            }
        }
        conn.flush()?;
        Ok(())
    }

    /// A new connection, proved to reach the server of this client's store first when it is
    /// TCP ([`Client::for_store`]): a port is anyone's to take once its server is gone, while the
    /// Unix socket lives in the owner-only store directory (and was proved when found).
    fn connect(&self) -> Result<Box<dyn Conn>> {
        let mut conn = self.connect_only()?;
        if matches!(self.address, Address::Tcp(_)) && self.verified.is_some() {
            // The question is answered without waiting for the store: bounded even for a
            // client without a timeout, so that a stranger that never answers cannot hang it.
            let bound = self.timeout.unwrap_or(HEALTH_TIMEOUT);
            if self.timeout.is_none() {
                conn.set_timeouts(Some(bound))
                    .map_err(|e| self.connect_failed(e))?;
            }
            self.ask_identity(&mut conn)
                .map_err(|e| self.asked_error(e))?;
            if self.timeout.is_none() {
                conn.set_timeouts(None)
                    .map_err(|e| self.connect_failed(e))?;
            }
        }
        Ok(conn)
    }

    fn connect_failed(&self, source: std::io::Error) -> ClientError {
        ClientError::Connect {
            address: self.address(),
            source,
        }
    }

    /// A new connection, not proved.
    fn connect_only(&self) -> Result<Box<dyn Conn>> {
        let conn: Box<dyn Conn> = match &self.address {
            Address::Unix(p) => Box::new(PollFirst::new(
                unix_connect(p, self.timeout).map_err(|e| self.connect_failed(e))?,
            )),
            Address::Tcp(a) => {
                let s = tcp_connect(a, self.timeout).map_err(|e| self.connect_failed(e))?;
                let _ = s.set_nodelay(true);
                Box::new(s)
            }
        };
        conn.set_timeouts(self.timeout)
            .map_err(|e| self.connect_failed(e))?;
        Ok(conn)
    }

    /// Asks the identity question on a fresh connection and checks the answer (a client
    /// without a store to prove asks nothing). Only the question is sent: no token, no data.
    fn ask_identity(&self, conn: &mut Box<dyn Conn>) -> std::result::Result<(), Asked> {
        let Some(v) = &self.verified else {
            return Ok(());
        };
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Asked::Silent,
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe => Asked::Closed,
            _ => Asked::Io(e),
        };
        let nonce = crate::identity::random().map_err(Asked::Io)?;
        let question = format!(
            "GET {}?nonce={} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
            crate::identity::PATH,
            wire::to_hex(&nonce)
        );
        conn.write_all(question.as_bytes()).map_err(io)?;
        conn.flush().map_err(io)?;
        // Bounded: a stranger sending an endless line must not fill this process' memory.
        let mut r = BufReader::with_capacity(4096, (&mut **conn).take(IDENTITY_MAX));
        let head = read_head_from(&mut r).map_err(|e| match e.kind() {
            std::io::ErrorKind::Other | std::io::ErrorKind::InvalidData => {
                Asked::NotProved(format!("it does not speak HTTP ({e})"))
            }
            _ => io(e),
        })?;
        let Length::Exact(n) = head.length else {
            return Err(Asked::NotProved("its answer has no length".into()));
        };
        if n > IDENTITY_MAX {
            return Err(Asked::NotProved(format!("its answer is {n} bytes long")));
        }
        let mut body = Vec::new();
        (&mut r).take(n).read_to_end(&mut body).map_err(io)?;
        if (body.len() as u64) < n {
            return Err(Asked::Closed);
        }
        if !r.buffer().is_empty() || !head.keep_alive {
            return Err(Asked::NotProved(
                "it sent more than an answer, or closed the connection after it".into(),
            ));
        }
        if head.status == 503 {
            // A server shedding load answers every request so: its error, as any call would get.
            let resp = Response {
                status: head.status,
                headers: head.headers,
                body: Box::new(std::io::Cursor::new(body)),
            };
            return Err(match check(resp, crate::identity::PATH) {
                Err(e) => Asked::Refused(e),
                Ok(_) => Asked::NotProved("it answered HTTP 503".into()),
            });
        }
        if head.status != 200 {
            let text = String::from_utf8_lossy(&body);
            let text: String = text.chars().take(200).collect();
            return Err(Asked::NotProved(format!(
                "it answered the identity question with HTTP {} ({text}); an `oncelake serve` \
                 older than this client answers so too",
                head.status
            )));
        }
        let answer: crate::identity::IdentityW = serde_json::from_slice(&body).map_err(|e| {
            Asked::NotProved(format!(
                "its answer to the identity question is no identity ({e})"
            ))
        })?;
        match v.expect.check(&nonce, &answer) {
            crate::identity::Verdict::Ours => Ok(()),
            crate::identity::Verdict::OtherDirectory { path } => Err(Asked::OtherDirectory(path)),
            crate::identity::Verdict::NotProved(found) => Err(Asked::NotProved(found)),
        }
    }

    /// The error of a failed identity question.
    fn asked_error(&self, e: Asked) -> ClientError {
        let Some(v) = &self.verified else {
            return ClientError::Protocol("an identity question without a store".into());
        };
        match e {
            Asked::Io(source) => self.connect_failed(source),
            Asked::Closed => self.connect_failed(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the connection was closed before the server proved its identity",
            )),
            Asked::Silent => ClientError::NoAnswer {
                store: v.store.clone(),
                address: self.address(),
                pid: v.pid,
                running: process_running(v.pid),
                waited: self.timeout.unwrap_or(HEALTH_TIMEOUT),
            },
            Asked::OtherDirectory(path) => self.not_its_server(
                &v.store,
                v.pid,
                format!(
                    "it is the server of {path}, another directory of the same store (this one \
                     is a copy of it, or that one of this)"
                ),
            ),
            Asked::NotProved(found) => self.not_its_server(&v.store, v.pid, found),
            Asked::Refused(e) => e,
        }
    }

    fn not_its_server(&self, store: &Path, pid: u32, found: String) -> ClientError {
        ClientError::NotItsServer {
            store: store.to_path_buf(),
            address: self.address(),
            pid,
            found,
        }
    }

    /// Sends one request on a connection of its own and reads the answer's head (its body is
    /// then read as it streams); an error status becomes its error.
    fn request(&self, method: &str, path: &str, mut payload: Payload<'_>) -> Result<Response> {
        let during = format!("{method} {}", path.split('?').next().unwrap_or(path));
        let mut conn = self.connect()?;
        let sent = match self.send(&mut conn, method, path, &mut payload, true) {
            Err(Sent::Input(e)) => return Err(ClientError::Input(e)),
            Err(Sent::Conn(e)) => Err(e),
            Ok(()) => Ok(()),
        };
        // A server may answer before reading the whole body (401, 413): read its answer even if
        // sending failed, and report the send failure only when there is none.
        match read_head(conn) {
            Ok(resp) => check(resp, &during),
            Err(e) => Err(lost(&during, sent.err().unwrap_or(e))),
        }
    }
}

/// Why the identity question failed.
enum Asked {
    /// No answer within the timeout.
    Silent,
    /// The connection ended before a whole answer.
    Closed,
    /// The genuine server of another directory (the original of a copy), named.
    OtherDirectory(String),
    /// An answer that proves nothing: what it was.
    NotProved(String),
    /// Another I/O failure.
    Io(std::io::Error),
    /// An error answer the server gives every request now (503: overloaded).
    Refused(ClientError),
}

/// The longest identity answer read, head and body (a real one is about 400 bytes).
const IDENTITY_MAX: u64 = 16 << 10;

/// Whether `pid` is a live process (signal 0: delivered nowhere, only checked).
fn process_running(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only reports whether the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A Unix socket connection, within `timeout` when there is one: `connect` waits while the
/// server's queue of connections not yet accepted is full (a hung server's fills), for ever
/// unless the socket has a send timeout, which std's `UnixStream::connect` cannot set first.
fn unix_connect(
    path: &Path,
    timeout: Option<Duration>,
) -> std::io::Result<std::os::unix::net::UnixStream> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let Some(t) = timeout else {
        return std::os::unix::net::UnixStream::connect(path);
    };
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        // What std says of such a path; its own connect reports it the same way.
        return std::os::unix::net::UnixStream::connect(path);
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket(2) with constant arguments; the descriptor is owned right below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // A zero send timeout means none at all: at least a millisecond.
    let t = t.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(t.subsec_micros() as i32),
    };
    // SAFETY: a timeval of the size given, read during the call only.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a sockaddr_un whose path is NUL-terminated within `len` bytes.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        // A full queue past the send timeout is EAGAIN: say what it is.
        return Err(if e.kind() == std::io::ErrorKind::WouldBlock {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the server accepted no connection within {t:?}"),
            )
        } else {
            e
        });
    }
    Ok(std::os::unix::net::UnixStream::from(fd))
}

/// A TCP connection, within `timeout` when there is one (a listener whose queue is full
/// otherwise keeps `connect` waiting for minutes).
fn tcp_connect(address: &str, timeout: Option<Duration>) -> std::io::Result<std::net::TcpStream> {
    use std::net::ToSocketAddrs;
    let Some(t) = timeout else {
        return std::net::TcpStream::connect(address);
    };
    let mut last = None;
    for a in address.to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&a, t) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{address} names no address"),
        )
    }))
}

/// How a kept-alive exchange failed.
enum Exchange {
    /// The connection ended (or was reset) before any byte of an answer: the server did not
    /// take the request.
    Unanswered(ExchangeError),
    /// The connection broke later: the outcome is unknown.
    Broken(ExchangeError),
    /// An answer or a local failure, final.
    Failed(ExchangeError),
}

enum ExchangeError {
    /// The connection failed during the named request: its outcome is unknown.
    Io(String, std::io::Error),
    Client(ClientError),
}

impl From<ExchangeError> for ClientError {
    fn from(e: ExchangeError) -> Self {
        match e {
            ExchangeError::Io(during, e) => lost(&during, e),
            ExchangeError::Client(c) => c,
        }
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

fn plan_error(e: &wire_reconcile::ErrorLineW) -> Result<PlanEnd> {
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

/// Why a streamed upload stopped.
enum Sent {
    Input(std::io::Error),
    Conn(std::io::Error),
}

impl From<std::io::Error> for Sent {
    fn from(e: std::io::Error) -> Self {
        Sent::Conn(e)
    }
}

fn send_chunked(conn: &mut Box<dyn Conn>, input: &mut dyn Read) -> std::result::Result<(), Sent> {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Sent::Input(e)),
        };
        conn.write_all(format!("{n:x}\r\n").as_bytes())?;
        conn.write_all(&buf[..n])?;
        conn.write_all(b"\r\n")?;
    }
    conn.write_all(b"0\r\n\r\n")?;
    Ok(())
}

fn lost(during: &str, source: std::io::Error) -> ClientError {
    ClientError::ConnectionLost {
        during: during.to_string(),
        source,
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| ClientError::Protocol(e.to_string()))
}

fn unit_query(base: &str, unit: &str, at: Option<u64>) -> String {
    let mut q = format!("{base}?unit={}", encode(unit));
    if let Some(at) = at {
        q.push_str(&format!("&at={at}"));
    }
    q
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A connection of either kind.
trait Conn: Read + Write + Send {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()>;
    /// The connection is open and nothing is waiting to be read on it (what an idle
    /// connection the server still keeps looks like).
    fn idle_open(&self) -> bool;
}

/// Peeks without blocking (one `recv(MSG_PEEK | MSG_DONTWAIT)`, where switching the socket to
/// non-blocking and back took two more system calls per request): `EAGAIN` is the only answer
/// of a healthy idle connection; end of stream is a connection the server closed, and a byte
/// is one nobody asked for (the connection is dropped either way).
fn idle_open_fd(fd: std::os::fd::RawFd) -> bool {
    let mut b = 0u8;
    // SAFETY: `fd` is the open socket of a stream we borrow for the call; one byte into `b`.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n < 0 && {
        let e = std::io::Error::last_os_error().kind();
        e == std::io::ErrorKind::WouldBlock
    }
}

impl Conn for std::os::unix::net::UnixStream {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
    fn idle_open(&self) -> bool {
        idle_open_fd(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}

/// A Unix stream whose reads wait in `poll(POLLIN)` rather than in a blocking `recv`.
///
/// Why: when the server reads our request, the kernel frees its buffer and signals "writable"
/// on our socket (`unix_write_space`), which wakes a thread blocked in `recv` on it whatever it
/// waits for — a wake-up and a context switch for nothing on every request, while the answer is
/// still being made. A `poll` for readability is woken only by data (BENCHMARKS.md, "Server").
struct PollFirst {
    stream: std::os::unix::net::UnixStream,
    /// The read timeout, kept here for `poll` (the socket's own bounds the `recv` after it).
    timeout: std::cell::Cell<Option<Duration>>,
}

impl PollFirst {
    fn new(stream: std::os::unix::net::UnixStream) -> PollFirst {
        PollFirst {
            stream,
            timeout: std::cell::Cell::new(None),
        }
    }

    /// Waits until the socket is readable (data, end of stream or an error), or the timeout.
    fn wait_readable(&self) -> std::io::Result<()> {
        let ms = match self.timeout.get() {
            None => -1,
            Some(t) => libc::c_int::try_from(t.as_millis().max(1)).unwrap_or(libc::c_int::MAX),
        };
        let mut fd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&self.stream),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one pollfd, ours, for the duration of the call.
            let n = unsafe { libc::poll(&mut fd, 1, ms) };
            if n > 0 {
                return Ok(());
            }
            if n == 0 {
                // What the socket's own timeout gives a blocking `recv`.
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    "timed out waiting for the server's answer",
                ));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Read for PollFirst {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.wait_readable()?;
        self.stream.read(buf)
    }
}

impl Write for PollFirst {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write(buf)
    }
    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.stream.write_vectored(bufs)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

impl Conn for PollFirst {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.stream.set_timeouts(t)?;
        self.timeout.set(t);
        Ok(())
    }
    fn idle_open(&self) -> bool {
        self.stream.idle_open()
    }
}

impl Conn for std::net::TcpStream {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
    fn idle_open(&self) -> bool {
        idle_open_fd(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}

impl Conn for Box<dyn Conn> {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        (**self).set_timeouts(t)
    }
    fn idle_open(&self) -> bool {
        (**self).idle_open()
    }
}

/// An answer: status, headers, and its body as a reader.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Box<dyn Read + Send>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How an answer's body is delimited.
#[derive(Clone, Copy)]
enum Length {
    Exact(u64),
    Chunked,
    UntilClose,
}

/// An answer's status line and headers.
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
    length: Length,
    /// The server keeps the connection open after this answer.
    keep_alive: bool,
}

fn read_head_from(r: &mut impl BufRead) -> std::io::Result<Head> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if line.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the server closed the connection without an answer",
        ));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP status line: {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the answer's headers broke off",
            ));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let length = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        Length::Chunked
    } else if let Some(n) = find("content-length").and_then(|v| v.parse().ok()) {
        Length::Exact(n)
    } else {
        Length::UntilClose
    };
    let keep_alive = !find("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    Ok(Head {
        status,
        headers,
        length,
        keep_alive,
    })
}

fn read_head(conn: Box<dyn Conn>) -> std::io::Result<Response> {
    let mut r = BufReader::new(conn);
    let head = read_head_from(&mut r)?;
    let body: Box<dyn Read + Send> = match head.length {
        Length::Chunked => Box::new(Chunked {
            inner: r,
            left: 0,
            done: false,
        }),
        Length::Exact(n) => Box::new(Exact {
            inner: r.take(n),
            want: n,
        }),
        Length::UntilClose => Box::new(r),
    };
    Ok(Response {
        status: head.status,
        headers: head.headers,
        body,
    })
}

/// Turns an error status into its [`ClientError`].
fn check(mut resp: Response, during: &str) -> Result<Response> {
    if resp.status < 400 {
        return Ok(resp);
    }
    let mut text = String::new();
    let _ = resp.body.read_to_string(&mut text);
    let (kind, message) = match serde_json::from_str::<ErrorBody>(&text) {
        Ok(b) => (b.error, b.message),
        Err(_) => (
            "http".to_string(),
            format!("{during}: HTTP {}: {text}", resp.status),
        ),
    };
    Err(match resp.status {
        401 => ClientError::Unauthorized { message },
        413 => ClientError::TooLarge { message },
        400 => ClientError::BadRequest { kind, message },
        status => ClientError::Store {
            kind,
            status,
            message,
        },
    })
}

/// A body of known length: ending early is an error, not a short body.
struct Exact<R> {
    inner: std::io::Take<R>,
    want: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.inner.limit() > 0 && !buf.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the answer ended after {} of {} bytes",
                    self.want - self.inner.limit(),
                    self.want
                ),
            ));
        }
        Ok(n)
    }
}

/// A chunked body; ending before the last chunk is an error.
struct Chunked<R> {
    inner: R,
    left: u64,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            self.inner.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or("");
            self.left = u64::from_str_radix(size, 16).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the answer broke off (chunk header {line:?})"),
                )
            })?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left as usize);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the answer broke off mid-chunk",
            ));
        }
        self.left -= n as u64;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_first_reads_data_end_of_stream_and_times_out_like_a_socket_timeout() {
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut c = PollFirst::new(ours);
        c.set_timeouts(Some(Duration::from_millis(50))).unwrap();
        let mut buf = [0u8; 8];
        let t0 = std::time::Instant::now();
        let e = c.read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        assert!(
            t0.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t0.elapsed()
        );
        theirs.write_all(b"answer").unwrap();
        assert_eq!(c.read(&mut buf).unwrap(), 6);
        assert_eq!(&buf[..6], b"answer");
        c.write_all(b"req").unwrap();
        let mut got = [0u8; 3];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"req");
        drop(theirs);
        assert_eq!(c.read(&mut buf).unwrap(), 0, "end of stream");
    }

    /// A pool whose connections were kept by another process (a fork's parent, as a child sees
    /// its inherited pool) hands none of them out, and keeps this process' own from then on.
    #[test]
    fn a_pool_inherited_across_a_fork_hands_out_none_of_the_parents_connections() {
        let pool = Pool::default();
        let conn = || -> Pooled {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
            std::mem::forget(theirs); // keep the peer open: the connection looks idle and healthy
            BufReader::new(Box::new(ours))
        };
        pool.put(conn(), None);
        assert!(
            pool.take(POOL_IDLE).is_some(),
            "this process' own connection"
        );
        pool.put(conn(), None);
        pool.put(conn(), None);
        assert_eq!(pool.len(), 2);
        // As in a child: the pool's connections belong to another process.
        pool.idle.lock().unwrap().owner = std::process::id().wrapping_add(1);
        assert!(pool.take(POOL_IDLE).is_none(), "a connection of the parent");
        assert_eq!(pool.len(), 0, "the inherited connections are dropped");
        pool.put(conn(), None);
        assert!(pool.take(POOL_IDLE).is_some(), "the child's own connection");
    }

    #[test]
    fn chunked_bodies_decode_and_a_cut_is_an_error() {
        let whole = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let mut out = String::new();
        Chunked {
            inner: &whole[..],
            left: 0,
            done: false,
        }
        .read_to_string(&mut out)
        .unwrap();
        assert_eq!(out, "abcde");
        let cut = b"3\r\nabc\r\n2\r\nd";
        let mut out = String::new();
        let r = Chunked {
            inner: &cut[..],
            left: 0,
            done: false,
        }
        .read_to_string(&mut out);
        assert!(r.is_err(), "a cut body must not look complete: {out:?}");
    }

    /// What a stranger may answer the identity question with — an endless line, bytes that are
    /// not text, a plausible answer without the right MAC — proves nothing and is read no
    /// further than an answer's length.
    #[test]
    fn a_strangers_answers_to_the_identity_question_prove_nothing() {
        let info = discovery::ServeInfo {
            address: "unix:/nowhere".into(),
            pid: 1,
            token: None,
            key: Some("ab".repeat(32)),
            store_id: Some(7),
        };
        let dir = crate::identity::DirId { dev: 1, ino: 2 };
        let client = Client {
            address: Address::Unix("/nowhere".into()),
            token: None,
            timeout: Some(Duration::from_secs(2)),
            pool: Arc::default(),
            verified: Some(Arc::new(Verified {
                store: "/s".into(),
                pid: 1,
                expect: crate::identity::Expected::new(&info, dir).unwrap(),
            })),
        };
        let forged = serde_json::json!({
            "store_id": 7, "pid": 1, "path": "/s", "dir": {"dev": 1, "ino": 2},
            "mac": "00".repeat(32),
        })
        .to_string();
        let answers: [Vec<u8>; 3] = [
            vec![b'A'; 1 << 20],
            b"\xff\xfe\r\n\r\n".to_vec(),
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{forged}",
                forged.len()
            )
            .into_bytes(),
        ];
        for answer in answers {
            let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
            let peer = std::thread::spawn(move || {
                let mut q = Vec::new();
                let mut b = [0u8; 512];
                while !q.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = theirs.read(&mut b).unwrap();
                    q.extend_from_slice(&b[..n]);
                }
                let _ = theirs.write_all(&answer);
                // Kept open until the client is done: an end of stream would answer for it.
                let _ = theirs.read(&mut b);
                q
            });
            let mut conn: Box<dyn Conn> = Box::new(PollFirst::new(ours));
            conn.set_timeouts(client.timeout).unwrap();
            let r = client.ask_identity(&mut conn);
            assert!(
                matches!(r, Err(Asked::NotProved(_))),
                "{:?}",
                r.err().map(|e| client.asked_error(e))
            );
            drop(conn);
            let question = String::from_utf8(peer.join().unwrap()).unwrap();
            assert!(
                question.starts_with("GET /v1/identity?nonce="),
                "{question}"
            );
            assert!(!question.contains("Authorization"), "{question}");
        }
    }

    /// The refusals name what was found and say what to do, in one clean sentence each.
    #[test]
    fn refusals_name_the_address_and_pid_and_read_cleanly() {
        let not_its = ClientError::NotItsServer {
            store: "/s".into(),
            address: "tcp:127.0.0.1:9".into(),
            pid: 41,
            found: "it answered HTTP 404".into(),
        }
        .to_string();
        let silent = ClientError::NoAnswer {
            store: "/s".into(),
            address: "unix:/s/serve.sock".into(),
            pid: 42,
            running: false,
            waited: Duration::from_secs(1),
        }
        .to_string();
        for (m, what) in [
            (
                &not_its,
                ["tcp:127.0.0.1:9", "pid 41", "HTTP 404", "oncelake serve /s"],
            ),
            (
                &silent,
                [
                    "unix:/s/serve.sock",
                    "pid 42, no longer running",
                    "1s",
                    "kill 42",
                ],
            ),
        ] {
            for w in what {
                assert!(m.contains(w), "{w:?} missing: {m}");
            }
            assert!(!m.contains("  "), "{m}");
        }
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("a/b=c d&e"), "a%2Fb%3Dc%20d%26e");
        assert_eq!(encode("é"), "%C3%A9");
    }
}

/// A snapshot lease opened on the server ([`Client::snapshot_open`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotLease {
    /// The lease's id: name it in the snapshot calls, close it when done.
    pub id: u64,
    /// The newest seq the view contains.
    pub seq: u64,
    /// The oldest seq a view can be taken as of.
    pub history_from: u64,
}

/// Staging handles, snapshot leases, the log's position and the pipeline's cell calls.
impl Client {
    /// [`Client::stage_reader`], asking the server to drop the handle after `ttl` if it is
    /// neither committed nor dropped by then (the server's staging timeout is the most).
    pub fn stage_reader_for(
        &self,
        mut input: impl Read,
        ttl: Option<Duration>,
    ) -> Result<(u64, ObjectMeta)> {
        let path = match ttl {
            Some(t) => format!("/v1/stage?ttl_ms={}", t.as_millis()),
            None => "/v1/stage".to_string(),
        };
        let r: StagedW = self.json("POST", &path, Payload::Stream(&mut input))?;
        Ok((r.staged, r.meta.to_meta().map_err(ClientError::Protocol)?))
    }

    /// Drops a staging handle (its object is unpinned); whether the server still had it.
    pub fn unstage(&self, id: u64) -> Result<bool> {
        #[derive(serde::Deserialize)]
        struct R {
            dropped: bool,
        }
        let r: R = self.json("DELETE", &format!("/v1/stage?id={id}"), Payload::Empty)?;
        Ok(r.dropped)
    }

    /// Opens a read view on the server, newest or as of `at`; GC keeps its objects until it is
    /// closed or unused for `ttl` (the server's default when `None`; each read renews it).
    pub fn snapshot_open(&self, at: Option<u64>, ttl: Option<Duration>) -> Result<SnapshotLease> {
        #[derive(serde::Deserialize)]
        struct R {
            snapshot: u64,
            seq: u64,
            history_from: u64,
        }
        let mut q = vec![];
        if let Some(at) = at {
            q.push(format!("at={at}"));
        }
        if let Some(t) = ttl {
            q.push(format!("ttl_ms={}", t.as_millis()));
        }
        let path = format!("/v1/snapshot?{}", q.join("&"));
        let r: R = self.json("POST", &path, Payload::Empty)?;
        Ok(SnapshotLease {
            id: r.snapshot,
            seq: r.seq,
            history_from: r.history_from,
        })
    }

    /// Closes a snapshot lease; whether it was open.
    pub fn snapshot_close(&self, id: u64) -> Result<bool> {
        #[derive(serde::Deserialize)]
        struct R {
            closed: bool,
        }
        let r: R = self.json("DELETE", &format!("/v1/snapshot?id={id}"), Payload::Empty)?;
        Ok(r.closed)
    }

    /// The unit's entry in the view `id`.
    pub fn snapshot_get(&self, id: u64, unit: &str) -> Result<Option<Entry>> {
        #[derive(serde::Deserialize)]
        struct R {
            entry: Option<EntryW>,
        }
        let path = format!("/v1/snapshot/entry?id={id}&unit={}", encode(unit));
        let r: R = self.json("GET", &path, Payload::Empty)?;
        r.entry
            .map(|e| e.to_entry().map_err(ClientError::Protocol))
            .transpose()
    }

    /// Copies the unit's object in the view `id` into `out`, streamed; its entry, or `None`.
    /// Checked as [`Client::read_object`] checks it.
    pub fn snapshot_read_object(
        &self,
        id: u64,
        unit: &str,
        out: &mut dyn Write,
    ) -> Result<Option<Entry>> {
        let path = format!("/v1/snapshot/object?id={id}&unit={}", encode(unit));
        self.object_to(&path, "GET /v1/snapshot/object", out)
    }

    /// The entries under `prefix` in the view `id`, to `each` in key order until it says stop.
    pub fn snapshot_ls(
        &self,
        id: u64,
        prefix: &str,
        mut each: impl FnMut(Entry) -> bool,
    ) -> Result<()> {
        let path = format!("/v1/snapshot/ls?id={id}&prefix={}", encode(prefix));
        let resp = self.request("GET", &path, Payload::Empty)?;
        for line in BufReader::new(resp.body).lines() {
            let line = line.map_err(|e| lost("GET /v1/snapshot/ls", e))?;
            let e: EntryW = serde_json::from_str(&line)
                .map_err(|e| ClientError::Protocol(format!("an ls line: {e}")))?;
            if !each(e.to_entry().map_err(ClientError::Protocol)?) {
                break;
            }
        }
        Ok(())
    }

    /// The log records after `since` up to the view's seq (at most `limit`).
    pub fn snapshot_changes(&self, id: u64, since: u64, limit: usize) -> Result<Vec<Record>> {
        let path = format!("/v1/snapshot/changes?id={id}&since={since}&limit={limit}");
        let r: ChangesW = self.json("GET", &path, Payload::Empty)?;
        r.records
            .iter()
            .map(|rec| {
                let bytes = wire::from_hex(&rec.record).map_err(ClientError::Protocol)?;
                Record::decode(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
            })
            .collect()
    }

    /// Where the object `object` of the view `id` lies on the server's node.
    pub fn snapshot_object_path(&self, id: u64, object: &oncelake::ObjectId) -> Result<PathBuf> {
        #[derive(serde::Deserialize)]
        struct R {
            path: PathBuf,
        }
        let path = format!(
            "/v1/snapshot/object_path?id={id}&object={}",
            object.to_hex()
        );
        let r: R = self.json("GET", &path, Payload::Empty)?;
        Ok(r.path)
    }

    /// The newest seq of the store.
    pub fn last_seq(&self) -> Result<u64> {
        #[derive(serde::Deserialize)]
        struct R {
            seq: u64,
        }
        let r: R = self.json("GET", "/v1/seq", Payload::Empty)?;
        Ok(r.seq)
    }

    /// Makes everything acknowledged so far durable on the server.
    pub fn flush(&self) -> Result<()> {
        let _: serde_json::Value = self.json("POST", "/v1/flush", Payload::Empty)?;
        Ok(())
    }

    /// Records the pipeline definition in the log if it changed; the record's seq if written.
    pub fn pipeline_define(&self, definition: &str) -> Result<Option<u64>> {
        #[derive(serde::Deserialize)]
        struct R {
            recorded_seq: Option<u64>,
        }
        let body = to_json(&serde_json::json!({ "pipeline": definition }))?;
        let r: R = self.json("POST", "/v1/pipeline/define", Payload::Json(body))?;
        Ok(r.recorded_seq)
    }

    /// Up to `limit` ready cells of the pipeline defined by `definition`.
    pub fn pipeline_ready(
        &self,
        definition: &str,
        limit: usize,
    ) -> Result<Vec<oncelake::pipeline::ReadyCell>> {
        #[derive(serde::Deserialize)]
        struct R {
            cells: Vec<crate::wire_cells::ReadyCellW>,
        }
        let body = to_json(&serde_json::json!({ "pipeline": definition, "limit": limit }))?;
        let r: R = self.json("POST", "/v1/pipeline/ready", Payload::Json(body))?;
        r.cells
            .iter()
            .map(|c| c.to_engine().map_err(ClientError::Protocol))
            .collect()
    }

    /// Claims a ready cell for `worker`.
    pub fn pipeline_claim(
        &self,
        definition: &str,
        cell: &oncelake::pipeline::ReadyCell,
        worker: &str,
        ttl: Duration,
    ) -> Result<oncelake::pipeline::Claim> {
        let body = to_json(&serde_json::json!({
            "pipeline": definition,
            "cell": crate::wire_cells::ReadyCellW::from(cell),
            "worker": worker,
            "ttl_ms": ttl.as_millis() as u64,
        }))?;
        let r: crate::wire_cells::ClaimCellW =
            self.json("POST", "/v1/pipeline/claim", Payload::Json(body))?;
        r.to_engine().map_err(ClientError::Protocol)
    }

    /// Completes a cell with `output`.
    pub fn pipeline_complete(
        &self,
        definition: &str,
        attempt: &oncelake::pipeline::Attempt,
        output: &[u8],
    ) -> Result<UnitOutcome> {
        let mut body = to_json(&serde_json::json!({
            "pipeline": definition,
            "attempt": crate::wire_cells::AttemptW::from(attempt),
        }))?;
        body.push(b'\n');
        body.extend_from_slice(output);
        let r: UnitOutcomeW = self.json("POST", "/v1/pipeline/complete", Payload::Json(body))?;
        r.to_unit_outcome().map_err(ClientError::Protocol)
    }

    /// Records a failed run of a cell.
    pub fn pipeline_fail(
        &self,
        definition: &str,
        attempt: &oncelake::pipeline::Attempt,
        error: &str,
    ) -> Result<oncelake::pipeline::FailOutcome> {
        let body = to_json(&serde_json::json!({
            "pipeline": definition,
            "attempt": crate::wire_cells::AttemptW::from(attempt),
            "error": error,
        }))?;
        let r: crate::wire_cells::FailOutcomeW =
            self.json("POST", "/v1/pipeline/fail", Payload::Json(body))?;
        Ok((&r).into())
    }

    /// The bytes of a ready cell's input: `stage` `None` for the unit's source, else an upstream
    /// stage (as `ReadyCell::read_input`).
    pub fn pipeline_input(
        &self,
        cell: &oncelake::pipeline::ReadyCell,
        stage: Option<&str>,
    ) -> Result<Vec<u8>> {
        let body = to_json(&serde_json::json!({
            "cell": crate::wire_cells::ReadyCellW::from(cell),
            "stage": stage,
        }))?;
        let mut resp = self.request("POST", "/v1/pipeline/input", Payload::Json(body))?;
        let mut out = Vec::new();
        resp.body
            .read_to_end(&mut out)
            .map_err(|e| lost("POST /v1/pipeline/input", e))?;
        Ok(out)
    }
}
