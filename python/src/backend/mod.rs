//! Where a `Store`'s calls go — the engine in this process, or the server that holds the store
//! (SPEC R20) — picked once, when the store is opened. The Python classes hold the [`Backend`]
//! and write each operation once: over the engine's `UnitStore` trait ([`with_store!`]), or over
//! [`Backing`] for the few things the two stores do their own way (staging Python data and checking
//! a `Staged`, snapshots, run and commit handles, stats). This folder is the only place
//! that tells the two apart: `local.rs` is the engine in this process, `served.rs` the server's
//! client.

mod local;
mod served;

use crate::data::{Data, Item, PyStaged};
use crate::snapshot::PySnapshot;
use crate::submit::PyCommitHandle;
use oncelake::pipeline::{Pipeline, ReadyCell, WorkOptions, WorkReport};
use oncelake::{
    CommitReport, Lease, MetricsSnapshot, ObjectMeta, Options, RenewOutcome, UnitStore,
};
use oncelake_client::{Client, ClientError};
use pyo3::prelude::*;
use std::path::Path;
use std::time::Duration;

/// Where the calls go: the engine in this process, or the server that holds the store (R20).
/// Only [`on!`] looks inside.
#[derive(Clone)]
pub(crate) enum Backend {
    /// The store opened in this process.
    Local(oncelake::Store),
    /// The client of the server that holds the store.
    Served(Client),
}

/// Runs `$body` with `$s` bound to the backend's store (`oncelake::Store` or `Client`, both
/// [`Backing`]): the one place the two are told apart. (A macro, not a generic function: a
/// closure cannot be generic over the store it is given.)
macro_rules! on {
    ($backend:expr, |$s:ident| $body:expr) => {
        match $backend {
            $crate::backend::Backend::Local($s) => $body,
            $crate::backend::Backend::Served($s) => $body,
        }
    };
}
pub(crate) use on;

/// Runs `$body`, a call of the engine's `UnitStore` on `$s`, with the GIL released, and raises
/// its error as the matching Python exception: an operation is written once over the trait.
macro_rules! with_store {
    ($backend:expr, $py:expr, |$s:ident| $body:expr) => {
        $crate::backend::on!($backend, |$s| $py
            .detach(|| $body)
            .map_err(|e| $crate::backend::raise($s, $py, e)))
    };
}
pub(crate) use with_store;

/// `e`, an error of the store `_s`, as the exception an in-process call raises.
pub(crate) fn raise<S: Backing>(_s: &S, py: Python<'_>, e: S::Error) -> PyErr {
    S::raise(py, e)
}

/// Why opening failed: the engine's error, or the server's.
pub(crate) enum Opened {
    Engine(oncelake::Error),
    Client(ClientError),
}

impl Backend {
    /// The server's client when a live server holds the store (R20), else the store opened
    /// here. A store no server answers for (no `serve.json`, or one left by a killed server)
    /// opens in-process as before.
    pub(crate) fn open(path: &Path, options: Options) -> Result<Backend, Opened> {
        match Client::for_store(path) {
            Ok(c) => Ok(Backend::Served(c)),
            Err(ClientError::NotServed { .. }) => oncelake::Store::open_with(path, options)
                .map(Backend::Local)
                .map_err(Opened::Engine),
            Err(e) => Err(Opened::Client(e)),
        }
    }
}

/// What `Store.stats()` reports, whichever store answers.
pub(crate) struct Stats {
    /// Units with a current entry.
    pub units: u64,
    /// The newest seq.
    pub last_seq: u64,
    /// The engine's counters and histograms.
    pub metrics: MetricsSnapshot,
    /// Through a server: its own counters, as JSON.
    pub server: Option<String>,
}

/// Where `Store.stage` stages.
pub(crate) struct Staging<'a> {
    /// The store's directory, named by the error of a served handle used with another store.
    pub path: &'a Path,
    /// Through a server: how long the handle lives unless committed or dropped.
    pub ttl: Option<Duration>,
}

/// One unit of `Store.put` or `Store.correct`.
pub(crate) struct PutData<'a> {
    /// The unit (its key checked already).
    pub unit: &'a str,
    /// The source version the output is derived from.
    pub version: u64,
    /// The output's bytes, as handed over.
    pub data: Data,
    /// The fencing token of the caller's lease.
    pub token: Option<u64>,
    /// A deliberate correction (revision + 1) rather than a put.
    pub correct: bool,
}

/// The items of `Store.commit` or `Store.submit`.
pub(crate) struct Items<'py> {
    /// Each unit, version, data and token, the keys checked already.
    pub items: Vec<Item<'py>>,
    /// Apply what is acceptable rather than all or nothing.
    pub partial: bool,
}

/// A commit's report with each item's object metadata, in order.
pub(crate) type Committed = (CommitReport, Vec<ObjectMeta>);

/// The unit a `Run` computes, and for whom.
pub(crate) struct RunSpec<'a> {
    /// The unit.
    pub unit: &'a str,
    /// The source version to produce.
    pub version: u64,
    /// The worker the unit is claimed for.
    pub worker: &'a str,
    /// The lease's time to live.
    pub ttl: Duration,
}

/// One `Pipeline.work` call: the engine's worker loop over `pipeline` as `worker`.
pub(crate) struct Work<'a> {
    /// The pipeline.
    pub pipeline: &'a Pipeline,
    /// The worker each cell is claimed for.
    pub worker: &'a str,
    /// The lease length per cell and how to wait.
    pub opts: &'a WorkOptions,
    /// The Python stage function: a cell's output, or the error to record.
    pub stage_fn: &'a mut (dyn FnMut(&ReadyCell) -> Result<Vec<u8>, String> + Send),
}

/// A store the Python classes run on, beyond the engine's `UnitStore`: what the engine in this
/// process and the server's client do their own way. Every method returns what the Python call
/// returns or raises.
pub(crate) trait Backing: UnitStore + Sync + Sized {
    /// The store's error as the exception an in-process call raises.
    fn raise(py: Python<'_>, e: Self::Error) -> PyErr;

    /// The server's address, or `None` in-process.
    fn server_address(&self) -> Option<String>;

    /// The shared lake this node is bound to (`None` for a local store, and through a server).
    fn bound_lake(&self) -> Option<String>;

    /// `Store.stage`: `data` staged.
    fn stage_data(&self, py: Python<'_>, data: Data, to: &Staging<'_>) -> PyResult<PyStaged>;

    /// `Store.put` and `Store.correct`: the data staged and committed as one unit.
    fn put_data<'py>(&self, py: Python<'py>, put: PutData<'_>) -> PyResult<Bound<'py, PyAny>>;

    /// `Store.commit`: each item's data staged, then committed in one batch.
    fn commit_items(&self, py: Python<'_>, items: Items<'_>) -> PyResult<Committed>;

    /// `Store.submit`: the commit of `commit_items`, answered through a handle.
    fn submit_items(&self, py: Python<'_>, items: Items<'_>) -> PyResult<PyCommitHandle>;

    /// `Store.snapshot`: a view as of the newest commit or as of `at`.
    fn open_snapshot(&self, py: Python<'_>, at: Option<u64>) -> PyResult<PySnapshot>;

    /// `Store.prometheus`: the counters in the Prometheus text format.
    fn prometheus_text(&self, py: Python<'_>) -> PyResult<String>;

    /// `Store.stats`: the counts and the engine's metrics.
    fn stats_now(&self, py: Python<'_>) -> PyResult<Stats>;

    /// `Run.__enter__`: claims the unit; raises `AlreadyDone` or `Busy` when there is nothing to
    /// do.
    fn begin_unit(&self, py: Python<'_>, run: &RunSpec<'_>) -> PyResult<Box<dyn Claimed>>;

    /// `Pipeline.work`: the engine's one worker loop (`oncelake::api::work`) on this store.
    fn work_loop(&self, w: Work<'_>) -> Result<WorkReport, Self::Error> {
        oncelake::api::work(self, w.pipeline, w.worker, w.opts, w.stage_fn)
    }
}

/// A unit claimed by `Run.__enter__`: the engine's run handle in-process, the lease through a
/// server.
pub(crate) trait Claimed: Send {
    /// The lease held.
    fn lease(&self) -> &Lease;

    /// Extends the lease by `ttl`.
    fn renew(&mut self, py: Python<'_>, ttl: Duration) -> PyResult<RenewOutcome>;

    /// Gives the lease back; the release's answer does not matter to the caller (a lease no
    /// longer ours changes nothing).
    fn abandon(self: Box<Self>, py: Python<'_>) -> PyResult<()>;

    /// Commits `data` as the unit's output under the lease; on an error the lease is given back,
    /// so that another worker may retry.
    fn commit<'py>(self: Box<Self>, py: Python<'py>, data: Data) -> PyResult<Bound<'py, PyAny>>;
}
