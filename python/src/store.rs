//! `oncelake.Store`: an open store, as a context manager.

use crate::backend::{on, with_store, Backend, Backing, Items, Opened, PutData, Staging};
use crate::convert::{self, drop_detached, kw, make, o, poisoned, Py2};
use crate::data::{Data, Item, PyStaged};
use crate::pipeline::PyPipeline;
use crate::reconcile::Listing;
use crate::run::PyRun;
use crate::snapshot::PySnapshot;
use crate::wire::{self, seconds};
use oncelake::reconcile::Plan;
use oncelake::{ClaimOutcome, Durability, Options, RenewOutcome, UnitStore};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::RwLock;

/// An oncelake store: exactly-once results per unit of work.
///
/// ``Store(path)`` opens the store in ``path``, creating it if the directory is missing or empty.
/// Use it as a context manager (``with oncelake.Store(path) as store:``) or call ``close()``.
/// One process opens a store at a time: another process gets ``Locked`` (``lock_wait`` seconds
/// waits for it) — unless ``oncelake serve`` holds the store: then every process's ``Store(path)``
/// goes through the server with the same calls and answers (``served_by`` is its address). Threads share one ``Store``: the GIL is released while the engine stages,
/// commits and reads, so concurrent commits from many threads share commit groups. A child
/// ``fork()``ed from the process (``multiprocessing``'s fork start method) cannot use an
/// in-process ``Store`` its parent opened (``StoreError``; closing it there leaves the parent's
/// store as it is); a served ``Store`` works there, on connections of the child's own.
///
/// Data arguments (``put``, ``commit``, ``run.output``) take ``bytes``, a path (``str`` or
/// ``os.PathLike``) or a binary file object (streamed, never read whole into memory).
#[pyclass(module = "oncelake", name = "Store", frozen)]
pub struct PyStore {
    inner: RwLock<Option<Backend>>,
    path: PathBuf,
}

impl PyStore {
    /// The open backend, or an error once closed.
    pub(crate) fn backend(&self) -> PyResult<Backend> {
        match &*self.inner.read().map_err(poisoned("store"))? {
            Some(b) => Ok(b.clone()),
            None => Err(PyValueError::new_err(format!(
                "the store {} is closed; open it again with oncelake.Store(path)",
                self.path.display()
            ))),
        }
    }
}

#[pymethods]
impl PyStore {
    /// Opens (or creates) the store in ``path``.
    ///
    /// ``lock_wait``: seconds to wait while another process has the store open (default: fail at
    /// once with ``Locked``). ``relaxed``: ``None`` for durable commits (acknowledged after fsync,
    /// the default), or the longest delay in seconds between synced groups (a crash may lose that
    /// much acknowledged work, never part of a commit). ``lake``: bind a new node directory to a
    /// shared lake (``s3://BUCKET/PREFIX``, ``file:///PATH``, ``memory://NAME``); a bound node
    /// reopens without it.
    #[new]
    #[pyo3(signature = (path, *, lock_wait = 0.0, relaxed = None, lake = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        lock_wait: f64,
        relaxed: Option<f64>,
        lake: Option<String>,
    ) -> PyResult<Self> {
        let options = Options {
            lake,
            lock_wait: seconds("lock_wait", lock_wait)?,
            durability: match relaxed {
                None => Durability::Durable,
                Some(s) => Durability::Relaxed {
                    max_delay: seconds("relaxed", s)?,
                },
            },
            ..Options::default()
        };
        let backend = py
            .detach(|| Backend::open(&path, options))
            .map_err(|e| match e {
                Opened::Engine(e) => convert::engine_err(py, e),
                Opened::Client(e) => wire::client_err(py, e),
            })?;
        Ok(PyStore {
            inner: RwLock::new(Some(backend)),
            path,
        })
    }

    /// Whether the calls go through ``oncelake serve`` (a server held the store when it was
    /// opened) rather than the engine in this process.
    #[getter]
    fn served_by(&self) -> PyResult<Option<String>> {
        Ok(on!(&self.backend()?, |s| s.server_address()))
    }

    /// The store's directory.
    #[getter]
    fn path(&self) -> String {
        self.path.display().to_string()
    }

    /// Closes the store: the process lock is let go once runs and snapshots still open are gone.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.write().map_err(poisoned("store"))?.take();
        drop_detached(py, taken)
    }

    /// Whether ``close()`` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().map(|s| s.is_none()).unwrap_or(true)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "oncelake.Store({:?}{})",
            self.path.display().to_string(),
            if self.closed() { ", closed" } else { "" }
        )
    }

    /// Stages ``data`` (durable, published under its content hash) without committing it.
    ///
    /// Through a server the handle lives on the server until the ``Staged`` is dropped or
    /// committed, or until ``ttl`` seconds pass (default and longest: the server's staging timeout,
    /// 10 minutes) — so a process killed before its commit leaves nothing pinned for long.
    /// In-process the handle lives as long as the ``Staged`` and ``ttl`` is not used.
    #[pyo3(signature = (data, *, ttl = None))]
    fn stage(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        ttl: Option<f64>,
    ) -> PyResult<PyStaged> {
        let ttl = ttl.map(|t| seconds("ttl", t)).transpose()?;
        let to = Staging {
            path: &self.path,
            ttl,
        };
        on!(&self.backend()?, |s| s.stage_data(
            py,
            Data::extract(data)?,
            &to
        ))
    }

    /// Stages ``data`` and commits it as the output of ``unit`` at ``version``.
    ///
    /// Returns ``Committed`` or ``Duplicate`` (an identical retry); raises ``Conflict``, ``Stale``
    /// or ``Fenced``. ``token``: the fencing token of your lease (``claim``), if you hold one.
    #[pyo3(signature = (unit, version, data, *, token = None))]
    fn put<'py>(
        &self,
        py: Python<'py>,
        unit: &str,
        version: u64,
        data: &Bound<'py, PyAny>,
        token: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.commit_one(py, (unit, version, data, token), false)
    }

    /// Commits ``data`` as a deliberate correction of ``unit`` at ``version`` (revision + 1; the
    /// old entry stays in the history). Returns ``Committed``.
    fn correct<'py>(
        &self,
        py: Python<'py>,
        unit: &str,
        version: u64,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.commit_one(py, (unit, version, data, None), true)
    }

    /// Commits many units in one atomic commit.
    ///
    /// ``items``: an iterable of ``(unit, version, data)`` or ``(unit, version, data, token)``;
    /// ``data`` as for ``put``, or a ``Staged``. All or nothing by default: any rejected unit
    /// raises its exception (``Conflict``, ``Stale``, ``Fenced``) with ``outcomes`` listing every
    /// unit, and nothing is applied. ``partial=True`` applies what is acceptable and returns, per
    /// unit in order, ``Committed``, ``Duplicate`` or the rejection's exception instance.
    #[pyo3(signature = (items, *, partial = false))]
    fn commit<'py>(
        &self,
        py: Python<'py>,
        items: &Bound<'py, PyAny>,
        partial: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let items = commit_items(py, items)?;
        let items = Items { items, partial };
        let (report, metas) = on!(&self.backend()?, |s| s.commit_items(py, items))?;
        crate::submit::outcomes(py, &report, metas, partial)
    }

    /// Submits ``items`` as ``commit`` would commit them and returns at once with a
    /// ``CommitHandle``: ``wait()`` returns or raises what ``commit`` would have, ``done()``
    /// tells whether the answer is there. One thread can so keep many commits in flight, and
    /// those in flight together share a durable group. Commits in flight together are decided in
    /// no promised order: wait for the first before submitting a second version of a unit.
    /// Through a server the commit is made before ``submit`` returns.
    #[pyo3(signature = (items, *, partial = false))]
    fn submit(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyAny>,
        partial: bool,
    ) -> PyResult<crate::submit::PyCommitHandle> {
        let items = commit_items(py, items)?;
        let items = Items { items, partial };
        on!(&self.backend()?, |s| s.submit_items(py, items))
    }

    /// Claims ``unit`` to produce ``version`` for ``worker`` for ``ttl`` seconds (coordinator
    /// mode). Returns the ``Lease`` (commit with ``put(..., token=lease.token)``); raises
    /// ``Busy`` (another worker holds a live lease) or ``AlreadyDone``.
    #[pyo3(signature = (unit, version, *, worker, ttl))]
    fn claim<'py>(
        &self,
        py: Python<'py>,
        unit: &str,
        version: u64,
        worker: &str,
        ttl: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ttl = seconds("ttl", ttl)?;
        match with_store!(&self.backend()?, py, |s| UnitStore::claim(
            s, unit, version, worker, ttl
        ))? {
            ClaimOutcome::Granted { lease, took_over } => convert::lease(py, &lease, took_over),
            ClaimOutcome::Held {
                worker,
                expires_at_ms,
            } => Err(convert::busy(py, unit, &worker, expires_at_ms)),
            ClaimOutcome::AlreadyDone(e) => Err(convert::already_done(py, unit, &e)),
        }
    }

    /// Extends a lease that is still yours by ``ttl`` seconds and returns the new ``Lease``;
    /// raises ``Fenced`` when it was taken over or released (stop working on the unit).
    fn renew<'py>(
        &self,
        py: Python<'py>,
        lease: &Bound<'py, PyAny>,
        ttl: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let l = convert::lease_from(lease)?;
        let ttl = seconds("ttl", ttl)?;
        match with_store!(&self.backend()?, py, |s| UnitStore::renew(s, &l, ttl))? {
            RenewOutcome::Renewed(new) => convert::lease(py, &new, false),
            RenewOutcome::Lost { newest_token } => Err(wire::lost(py, &l, newest_token)),
        }
    }

    /// Gives a lease back; ``False`` if it was no longer yours (another worker holds it, or it
    /// was taken over, released or ended by a commit): nothing changed then.
    fn release(&self, py: Python<'_>, lease: &Bound<'_, PyAny>) -> PyResult<bool> {
        let l = convert::lease_from(lease)?;
        let outcome = with_store!(&self.backend()?, py, |s| UnitStore::release(s, &l))?;
        Ok(outcome == oncelake::ReleaseOutcome::Released)
    }

    /// Runs ``unit`` at ``version`` at most once, as a context manager::
    ///
    ///     with store.run_once("orders/day=1", 7, worker="w1", ttl=30) as run:
    ///         run.output = compute()          # bytes, a path or a binary file object
    ///
    /// Entering claims the unit and raises ``AlreadyDone`` or ``Busy`` when there is nothing to
    /// do; leaving commits ``run.output`` under the lease (``run.outcome`` is then ``Committed``
    /// or ``Duplicate``; ``Fenced`` is raised if the lease was taken over); an exception in the
    /// body gives the lease back and records nothing.
    #[pyo3(signature = (unit, version, *, worker, ttl))]
    fn run_once(&self, unit: String, version: u64, worker: String, ttl: f64) -> PyResult<PyRun> {
        Ok(PyRun::new(
            self.backend()?,
            unit,
            version,
            worker,
            seconds("ttl", ttl)?,
        ))
    }

    /// The dedup fast path: the unit's current ``Lookup`` (version, object, seq) from memory, or
    /// ``None``.
    fn lookup<'py>(&self, py: Python<'py>, unit: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(c) = self.lookup_committed(py, unit)? else {
            return Ok(None);
        };
        let args = kw(
            py,
            &[
                ("source_version", o(py, c.source_version)),
                ("object", o(py, c.object.to_hex())),
                ("seq", o(py, c.seq)),
            ],
        )?;
        make(py, "Lookup", args).map(Some)
    }

    /// Whether ``unit`` is committed at ``version`` or newer.
    fn is_done(&self, py: Python<'_>, unit: &str, version: u64) -> PyResult<bool> {
        with_store!(&self.backend()?, py, |s| UnitStore::is_done(
            s, unit, version
        ))
    }

    /// A consistent read-only view as of the newest commit, or as of ``at`` (a seq within the kept
    /// history). Use it as a context manager or call ``close()``. Through a server it is a lease
    /// that the server closes when it was not read for 10 minutes.
    #[pyo3(signature = (at = None))]
    fn snapshot(&self, py: Python<'_>, at: Option<u64>) -> PyResult<PySnapshot> {
        on!(&self.backend()?, |s| s.open_snapshot(py, at))
    }

    /// The unit's ``Entry`` (now, or as of seq ``at``), or ``None``.
    #[pyo3(signature = (unit, *, at = None))]
    fn entry<'py>(
        &self,
        py: Python<'py>,
        unit: &str,
        at: Option<u64>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match with_store!(&self.backend()?, py, |s| s.get_at(unit, at))? {
            Some(e) => convert::entry(py, &e).map(Some),
            None => Ok(None),
        }
    }

    /// The unit's object bytes (now, or as of seq ``at``), or ``None``. For large objects read
    /// the file at ``snapshot().object_path(entry)`` instead.
    #[pyo3(signature = (unit, *, at = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        unit: &str,
        at: Option<u64>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut bytes = Vec::new();
        let found = with_store!(&self.backend()?, py, |s| s.read_into(unit, at, &mut bytes))?;
        Ok(wire::checked(py, found, bytes)?.map(|b| PyBytes::new(py, &b)))
    }

    /// The entries whose unit starts with ``prefix``, in key order (now, or as of seq ``at``).
    #[pyo3(signature = (prefix = "", *, at = None))]
    fn ls<'py>(
        &self,
        py: Python<'py>,
        prefix: &str,
        at: Option<u64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut entries = Vec::new();
        with_store!(&self.backend()?, py, |s| s.ls_at(prefix, at, &mut |e| {
            entries.push(e);
            true
        }))?;
        convert::entries(py, &entries)
    }

    /// The commit-log ``Record``s after ``seq``, oldest first (the change feed).
    fn changes_since<'py>(&self, py: Python<'py>, seq: u64) -> PyResult<Bound<'py, PyList>> {
        let records = with_store!(&self.backend()?, py, |s| wire::every_page(
            seq,
            |since, limit| s.changes(since, limit)
        ))?;
        convert::records(py, &records)
    }

    /// The newest seq (0 for an empty log).
    #[getter]
    fn last_seq(&self, py: Python<'_>) -> PyResult<u64> {
        with_store!(&self.backend()?, py, |s| UnitStore::last_seq(s))
    }

    /// The shared lake this node is bound to, or ``None`` for a local store.
    #[getter]
    fn lake(&self) -> PyResult<Option<String>> {
        Ok(on!(&self.backend()?, |s| s.bound_lake()))
    }

    /// A lake node: applies what other nodes committed to the lake since, so that what is read
    /// next sees it (read-after-write across nodes). A local store: nothing to do.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        with_store!(&self.backend()?, py, |s| UnitStore::sync(s)).map(drop)
    }

    /// Makes everything acknowledged so far durable (useful with ``relaxed=``).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        with_store!(&self.backend()?, py, |s| UnitStore::flush(s))
    }

    /// Plans what must be (re)processed, given the source's versions.
    ///
    /// ``source``: an iterable of ``(unit, version)``. Incremental by default: only the listed
    /// units are planned (missing, behind, up_to_date). ``full=True``: the listing is the whole
    /// source (any order), and manifest units it does not list are planned as ``unknown``.
    /// ``list_up_to_date``: also list units with nothing to do (they are always counted).
    #[pyo3(signature = (source, *, full = false, list_up_to_date = false))]
    fn reconcile<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, PyAny>,
        full: bool,
        list_up_to_date: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut pairs: Vec<(String, u64)> = Vec::new();
        for item in source.try_iter()? {
            pairs.push(item?.extract().map_err(|_| {
                PyValueError::new_err(
                    "each source row is a (unit, version) pair with an int version >= 0",
                )
            })?);
        }
        let listing = Listing {
            pairs,
            full,
            list_up_to_date,
        };
        let plan = crate::reconcile::plan(py, &self.backend()?, &listing)?;
        plan_value(py, &plan)
    }

    /// The engine's counters and histograms, with ``units`` and ``last_seq`` (as ``oncelake stats
    /// --json`` prints them), and ``scopes``: each counter's scope, ``store`` (persisted with the
    /// commits: the store's whole history) or ``process`` (since this process opened the store).
    /// Through a server the process is the server's, and ``server`` holds its own counters.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = on!(&self.backend()?, |s| s.stats_now(py))?;
        let d = stats_dict(py, &self.path(), s.units, s.last_seq, &s.metrics)?;
        if let Some(server) = s.server {
            d.set_item("server", convert::from_wire(py, Ok(server))?)?;
        }
        Ok(d)
    }

    /// The counters in the Prometheus text format (through a server: its `/metrics`, with the
    /// server's own process-only counters).
    fn prometheus(&self, py: Python<'_>) -> PyResult<String> {
        on!(&self.backend()?, |s| s.prometheus_text(py))
    }
    /// Garbage collection (``oncelake gc``): removes staging files of writers that are gone (and
    /// unrecognised ones older than ``grace`` seconds), prunes history superseded more than
    /// ``retain`` seconds ago, and removes objects that no kept entry, in-flight commit or open
    /// snapshot references. ``dry_run=True`` reports what it would remove and removes nothing.
    /// Returns a ``GcReport``.
    #[pyo3(signature = (*, dry_run = false, grace = 3600.0, retain = 7.0 * 86400.0))]
    fn gc<'py>(
        &self,
        py: Python<'py>,
        dry_run: bool,
        grace: f64,
        retain: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = oncelake::GcOptions {
            dry_run,
            grace: seconds("grace", grace)?,
            retain: seconds("retain", retain)?,
        };
        let report = with_store!(&self.backend()?, py, |s| UnitStore::gc(s, options))?;
        crate::maint::gc_report(py, &report)
    }

    /// Integrity check (``oncelake verify``): re-reads every referenced object (size and CRC32,
    /// and the BLAKE3 hash with ``deep=True``) and replays the log against the manifest. Returns
    /// a ``VerifyReport`` whose ``ok`` is false when something is missing, damaged or stray (the
    /// CLI's exit 7); space left for GC is listed under ``reclaimable`` and is not a problem.
    #[pyo3(signature = (*, deep = false))]
    fn verify<'py>(&self, py: Python<'py>, deep: bool) -> PyResult<Bound<'py, PyAny>> {
        let report = with_store!(&self.backend()?, py, |s| UnitStore::verify(s, deep))?;
        crate::maint::verify_report(py, &report)
    }

    /// A pipeline over this store, from its TOML definition (``[stage.NAME]`` tables with
    /// ``code_version``, ``upstream``, ``max_attempts``), as ``oncelake pipeline`` reads it.
    fn pipeline(&self, py: Python<'_>, definition: &str) -> PyResult<PyPipeline> {
        PyPipeline::new(py, self.backend()?, definition)
    }
}

/// The items of `Store.commit`, with their keys checked.
fn commit_items<'py>(py: Python<'py>, items: &Bound<'py, PyAny>) -> PyResult<Vec<Item<'py>>> {
    let mut out = Vec::new();
    for item in items.try_iter()? {
        let item = item?;
        let t = item.cast::<PyTuple>().map_err(|_| {
            PyValueError::new_err(
                "each commit item is a tuple (unit, version, data) or (unit, version, data, token)",
            )
        })?;
        let parsed: Item<'py> = match t.len() {
            3 => {
                let (u, v, d) = t.extract()?;
                (u, v, d, None)
            }
            4 => t.extract()?,
            n => {
                return Err(PyValueError::new_err(format!(
                    "a commit item has 3 or 4 fields, not {n}"
                )))
            }
        };
        oncelake::validate_key(&parsed.0).py(py)?;
        out.push(parsed);
    }
    Ok(out)
}

impl PyStore {
    /// The unit's committed version, in-process or through the server.
    fn lookup_committed(
        &self,
        py: Python<'_>,
        unit: &str,
    ) -> PyResult<Option<oncelake::Committed>> {
        with_store!(&self.backend()?, py, |s| UnitStore::lookup(s, unit))
    }

    /// `put` and `correct`: stages `data` and commits it as one unit, in-process or through the
    /// server (a `Staged` of the store is committed by its handle).
    fn commit_one<'py>(
        &self,
        py: Python<'py>,
        (unit, version, data, token): (&str, u64, &Bound<'py, PyAny>, Option<u64>),
        correct: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        oncelake::validate_key(unit).py(py)?;
        let data = Data::extract(data)?;
        let put = PutData {
            unit,
            version,
            data,
            token,
            correct,
        };
        on!(&self.backend()?, |s| s.put_data(py, put))
    }
}

fn plan_value<'py>(py: Python<'py>, plan: &Plan) -> PyResult<Bound<'py, PyAny>> {
    let units = PyList::empty(py);
    for u in &plan.units {
        let args = kw(
            py,
            &[
                ("unit", o(py, u.unit.as_str())),
                ("action", o(py, u.action.name())),
                ("source_version", o(py, u.source_version)),
                ("manifest_version", o(py, u.manifest_version)),
            ],
        )?;
        units.append(make(py, "PlannedUnit", args)?)?;
    }
    // The engine's counts under their wire names, and what they add up to.
    let summary = convert::from_wire(py, serde_json::to_string(&plan.summary))?;
    summary.set_item("to_process", plan.summary.to_process())?;
    make(
        py,
        "Plan",
        kw(
            py,
            &[("units", units.into_any()), ("summary", summary.into_any())],
        )?,
    )
}

/// The dict of `Store.stats()`: the store, its unit count and newest seq, every engine counter by
/// name, the two histograms, and under `scopes` each counter's scope (`store`: persisted with the
/// commits, so a fresh process reports it too; `process`: since this process — or, through a
/// server, the server process — opened the store).
fn stats_dict<'py>(
    py: Python<'py>,
    store: &str,
    units: u64,
    last_seq: u64,
    m: &oncelake::MetricsSnapshot,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("store", store)?;
    d.set_item("units", units)?;
    d.set_item("last_seq", last_seq)?;
    let scopes = PyDict::new(py);
    for (name, n) in m.counters() {
        d.set_item(name, n)?;
        scopes.set_item(name, oncelake::metrics::scope_of(name).name())?;
    }
    for (name, h) in [
        ("group_units", &m.group_units),
        ("commit_latency_us", &m.commit_latency_us),
    ] {
        let hd = kw(
            py,
            &[
                ("count", o(py, h.count)),
                ("sum", o(py, h.sum)),
                ("mean", o(py, h.mean())),
                ("p50", o(py, h.quantile(0.5))),
                ("p99", o(py, h.quantile(0.99))),
            ],
        )?;
        d.set_item(name, hd)?;
    }
    d.set_item("scopes", scopes)?;
    Ok(d)
}
