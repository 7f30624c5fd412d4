//! The engine in this process as the Python classes' store: staging Python data straight into
//! it, its snapshots and run handles, its own answers to stats and reconcile.

use super::{Backing, Claimed, Stats};
use crate::convert::{self, engine_err, kw, Py2};
use crate::data::{Data, Item, PyStaged, StagedIn};
use crate::snapshot::{PySnapshot, View};
use crate::submit::{local_batch, PyCommitHandle};
use oncelake::log::Record;
use oncelake::pipeline::{Pipeline, ReadyCell, WorkOptions, WorkReport};
use oncelake::reconcile::{Pairs, Plan, ReconcileError, ReconcileOptions, SortConfig};
use oncelake::{
    Batch, Begin, CommitReport, Entry, Lease, ObjectId, ObjectMeta, RenewOutcome, Snapshot, Store,
};
use pyo3::prelude::*;
use std::path::{Path, PathBuf};
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

    fn stage_data(
        &self,
        py: Python<'_>,
        _path: &Path,
        data: Data,
        _ttl: Option<Duration>,
    ) -> PyResult<PyStaged> {
        Ok(PyStaged {
            staged: StagedIn::Local(data.stage(py, self)?),
        })
    }

    fn put_data<'py>(
        &self,
        py: Python<'py>,
        unit: &str,
        version: u64,
        data: Data,
        token: Option<u64>,
        correct: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let intent = if correct {
            oncelake::Intent::Correct
        } else {
            oncelake::Intent::Put
        };
        let staged = data.stage(py, self)?;
        let batch = Batch::new().item(unit.to_string(), version, &staged, token, intent);
        let report = py.detach(|| Store::commit(self, batch)).py(py)?;
        convert::outcome(py, &report.units[0], staged.meta())
    }

    fn commit_items(
        &self,
        py: Python<'_>,
        items: Vec<Item<'_>>,
        partial: bool,
    ) -> PyResult<(CommitReport, Vec<ObjectMeta>)> {
        let (batch, metas) = local_batch(py, self, items, partial)?;
        Ok((py.detach(|| Store::commit(self, batch)).py(py)?, metas))
    }

    fn submit_items(
        &self,
        py: Python<'_>,
        items: Vec<Item<'_>>,
        partial: bool,
    ) -> PyResult<PyCommitHandle> {
        let (batch, metas) = local_batch(py, self, items, partial)?;
        Ok(PyCommitHandle::local(
            self.submit(batch).py(py)?,
            metas,
            partial,
        ))
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
        let (units, last_seq) = py
            .detach(|| -> oncelake::Result<(u64, u64)> {
                let snap = self.snapshot()?;
                let mut n = 0;
                for e in snap.iter()? {
                    e?;
                    n += 1;
                }
                Ok((n, snap.seq()))
            })
            .py(py)?;
        Ok(Stats {
            units,
            last_seq,
            metrics: self.metrics(),
            server: None,
        })
    }

    fn plan(
        &self,
        py: Python<'_>,
        pairs: &[(String, u64)],
        full: bool,
        list_up_to_date: bool,
    ) -> PyResult<Plan> {
        let opts = ReconcileOptions { list_up_to_date };
        let listing = Pairs::new(pairs.iter().map(|(u, v)| (u.as_str(), *v)));
        let plan = py.detach(|| -> Result<Plan, ReconcileError> {
            if full {
                let snap = self.snapshot()?;
                let mut units = Vec::new();
                let summary = oncelake::reconcile::reconcile_full_unsorted(
                    &snap,
                    listing,
                    opts,
                    &SortConfig::new(std::env::temp_dir()),
                    |i| {
                        units.push(i.into());
                        Ok(())
                    },
                )?;
                Ok(Plan { units, summary })
            } else {
                Plan::changes(self, listing, opts)
            }
        });
        plan.map_err(|e| match e {
            ReconcileError::Store(e) => engine_err(py, e),
            other => match kw(py, &[]) {
                Ok(f) => convert::error(py, "invalid_input", other.to_string(), f),
                Err(err) => err,
            },
        })
    }

    fn begin_unit(
        &self,
        py: Python<'_>,
        unit: &str,
        version: u64,
        worker: &str,
        ttl: Duration,
    ) -> PyResult<Box<dyn Claimed>> {
        let begin = py
            .detach(|| self.begin_run(unit, version, worker, ttl))
            .py(py)?;
        match begin {
            Begin::Claimed(run) => Ok(Box::new(LocalRun {
                run,
                store: self.clone(),
            })),
            Begin::AlreadyDone(e) => Err(convert::already_done(py, unit, &e)),
            Begin::Busy { worker, until_ms } => Err(convert::busy(py, unit, &worker, until_ms)),
        }
    }

    /// The engine's loop through `Pipeline::work_with`, which checks the worker name first, as
    /// a server does on each claim.
    fn work_loop<F>(
        &self,
        pipeline: &Pipeline,
        worker: &str,
        opts: &WorkOptions,
        stage_fn: F,
    ) -> oncelake::Result<WorkReport>
    where
        F: FnMut(&ReadyCell) -> Result<Vec<u8>, String>,
    {
        pipeline.work_with(self, worker, opts, stage_fn)
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

    fn commit<'py>(
        self: Box<Self>,
        py: Python<'py>,
        _unit: &str,
        _version: u64,
        data: Data,
    ) -> PyResult<Bound<'py, PyAny>> {
        // Dropping the run on an error path gives the lease back.
        let staged = data.stage(py, &self.store)?;
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
