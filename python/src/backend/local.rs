//! The engine in this process as the Python classes' store: staging Python data straight into
//! it, its snapshots, run and commit handles, its own answers to stats.

use super::{Backing, Claimed, Committed, Items, PutData, RunSpec, Staging, Stats, Work};
use crate::convert::{self, engine_err, o, Py2};
use crate::data::{Data, Item, PyStaged, StagedIn};
use crate::snapshot::{PySnapshot, View};
use crate::submit::{InFlight, PyCommitHandle};
use crate::wire;
use oncelake::log::Record;
use oncelake::pipeline::WorkReport;
use oncelake::{
    Batch, Begin, CommitHandle, CommitReport, Entry, Lease, ObjectId, ObjectMeta, RenewOutcome,
    Snapshot, Staged, Store,
};
use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::time::Duration;

impl Backing for Store {
    fn raise(py: Python<'_>, e: oncelake::Error) -> PyErr {
        engine_err(py, e)
    }

    fn server_address(&self) -> Option<String> {
        None
    }

    fn bound_lake(&self) -> Option<String> {
        self.lake_url()
    }

    fn stage_data(&self, py: Python<'_>, data: Data, _to: &Staging<'_>) -> PyResult<PyStaged> {
        let staged = stage(py, self, data)?;
        let meta = staged.meta();
        Ok(PyStaged::new(StagedIn::Local(staged), meta))
    }

    fn put_data<'py>(&self, py: Python<'py>, put: PutData<'_>) -> PyResult<Bound<'py, PyAny>> {
        let intent = if put.correct {
            oncelake::Intent::Correct
        } else {
            oncelake::Intent::Put
        };
        let staged = stage(py, self, put.data)?;
        let unit = put.unit.to_string();
        let batch = Batch::new().item(unit, put.version, &staged, put.token, intent);
        let report = py.detach(|| Store::commit(self, batch)).py(py)?;
        convert::outcome(py, &report.units[0], staged.meta())
    }

    fn commit_items(&self, py: Python<'_>, items: Items<'_>) -> PyResult<Committed> {
        let (batch, metas) = local_batch(py, self, items.items, items.partial)?;
        Ok((py.detach(|| Store::commit(self, batch)).py(py)?, metas))
    }

    fn submit_items(&self, py: Python<'_>, items: Items<'_>) -> PyResult<PyCommitHandle> {
        let (batch, metas) = local_batch(py, self, items.items, items.partial)?;
        let handle = Box::new(self.submit(batch).py(py)?);
        Ok(PyCommitHandle::new(handle, metas, items.partial))
    }

    fn open_snapshot(&self, py: Python<'_>, at: Option<u64>) -> PyResult<PySnapshot> {
        let snap = py
            .detach(|| match at {
                Some(seq) => self.snapshot_at(seq),
                None => self.snapshot(),
            })
            .py(py)?;
        Ok(PySnapshot::new(LocalView {
            snap,
            store: self.clone(),
        }))
    }

    fn prometheus_text(&self, _py: Python<'_>) -> PyResult<String> {
        Ok(self.metrics().to_prometheus())
    }

    fn stats_now(&self, py: Python<'_>) -> PyResult<Stats> {
        let s = py.detach(|| oncelake::UnitStore::stats(self)).py(py)?;
        Ok(Stats {
            units: s.units,
            last_seq: s.last_seq,
            metrics: s.metrics,
            server: None,
        })
    }

    fn begin_unit(&self, py: Python<'_>, r: &RunSpec<'_>) -> PyResult<Box<dyn Claimed>> {
        let begin = py
            .detach(|| self.begin_run(r.unit, r.version, r.worker, r.ttl))
            .py(py)?;
        match begin {
            Begin::Claimed(run) => Ok(Box::new(LocalRun {
                run,
                store: self.clone(),
            })),
            Begin::AlreadyDone(e) => Err(convert::already_done(py, r.unit, &e)),
            Begin::Busy { worker, until_ms } => Err(convert::busy(py, r.unit, &worker, until_ms)),
        }
    }

    /// The engine's loop through `Pipeline::work_with`, which checks the worker name first, as
    /// a server does on each claim.
    fn work_loop(&self, w: Work<'_>) -> oncelake::Result<WorkReport> {
        w.pipeline.work_with(self, w.worker, w.opts, w.stage_fn)
    }
}

/// The engine's run handle, with the store its output is staged in.
struct LocalRun {
    run: oncelake::Run,
    store: Store,
}

impl Claimed for LocalRun {
    fn lease(&self) -> &Lease {
        self.run.lease()
    }

    fn renew(&mut self, py: Python<'_>, ttl: Duration) -> PyResult<RenewOutcome> {
        py.detach(|| self.run.renew(ttl)).py(py)
    }

    fn abandon(self: Box<Self>, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.run.abandon()).py(py).map(drop)
    }

    fn commit<'py>(self: Box<Self>, py: Python<'py>, data: Data) -> PyResult<Bound<'py, PyAny>> {
        // Dropping the run on an error path gives the lease back.
        let staged = stage(py, &self.store, data)?;
        let meta = staged.meta();
        let run = self.run;
        let outcome = py.detach(|| run.commit(staged)).py(py)?;
        convert::outcome(py, &outcome, meta)
    }
}

/// The engine's snapshot, with the store whose objects it reads.
struct LocalView {
    snap: Snapshot,
    store: Store,
}

impl View for LocalView {
    fn seqs(&self) -> (u64, u64) {
        (self.snap.seq(), self.snap.history_from())
    }

    fn entry(&self, py: Python<'_>, unit: &str) -> PyResult<Option<Entry>> {
        py.detach(|| self.snap.get(unit)).py(py)
    }

    fn read(&self, py: Python<'_>, unit: &str) -> PyResult<Option<Vec<u8>>> {
        py.detach(|| match self.snap.get(unit)? {
            Some(e) => self.snap.read_object(&e).map(Some),
            None => Ok(None),
        })
        .py(py)
    }

    fn ls(&self, py: Python<'_>, prefix: &str) -> PyResult<Vec<Entry>> {
        py.detach(|| self.snap.prefix(prefix)?.collect::<oncelake::Result<_>>())
            .py(py)
    }

    fn object_path(&self, _py: Python<'_>, id: &ObjectId) -> PyResult<PathBuf> {
        Ok(self.store.object_path(id))
    }

    fn changes_since(&self, py: Python<'_>, seq: u64) -> PyResult<Vec<Record>> {
        py.detach(|| {
            self.snap
                .changes_since(seq)?
                .collect::<oncelake::Result<_>>()
        })
        .py(py)
    }
}

impl InFlight for CommitHandle {
    fn is_done(&self) -> bool {
        CommitHandle::is_done(self)
    }

    fn answer(
        self: Box<Self>,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> Result<PyResult<CommitReport>, Box<dyn InFlight>> {
        let answer = py.detach(move || match timeout {
            None => Ok(self.wait()),
            Some(t) => self.wait_timeout(t),
        });
        match answer {
            Ok(report) => Ok(report.py(py)),
            Err(handle) => Err(Box::new(handle)),
        }
    }
}

/// The batch of `Store.commit`'s or `Store.submit`'s items on an in-process store (each item's
/// data staged first), with each item's object metadata, in order.
fn local_batch<'py>(
    py: Python<'py>,
    store: &Store,
    items: Vec<Item<'py>>,
    partial: bool,
) -> PyResult<(Batch, Vec<ObjectMeta>)> {
    let mut batch = Batch::new();
    let mut metas = Vec::new();
    for (unit, version, data, token) in items {
        let staged = stage(py, store, Data::extract(&data)?)?;
        metas.push(staged.meta());
        batch = batch.item(unit, version, &staged, token, oncelake::Intent::Put);
    }
    if partial {
        batch = batch.partial();
    }
    Ok((batch, metas))
}

/// Stages `data` in `store`, with the GIL released: a `Staged` of this store as it is, one
/// staged through a server refused.
fn stage(py: Python<'_>, store: &Store, data: Data) -> PyResult<Staged> {
    match data {
        Data::Staged(StagedIn::Local(s)) => Ok(s),
        Data::Staged(StagedIn::Served(s)) => Err(wire::foreign_staged(
            py,
            &s.store,
            &store.path().display().to_string(),
        )),
        Data::Bytes(b) => py.detach(|| store.stage_bytes(&b)).py(py),
        Data::Path(p) => {
            if !p.is_file() {
                return Err(PyFileNotFoundError::new_err((
                    2,
                    format!("{} is not a readable file; pass a file path, bytes or a binary file object", p.display()),
                    o(py, p.display().to_string()).unbind(),
                )));
            }
            py.detach(|| store.stage_file(&p)).py(py)
        }
        Data::Reader(mut r) => {
            let staged = py.detach(|| store.stage_reader(&mut r));
            // A failed read() is the caller's exception, not an engine error.
            if let Some(e) = r.take_error() {
                return Err(e);
            }
            staged.py(py)
        }
    }
}
