//! `oncelake.Pipeline`: a DAG of stages over a store (SPEC R13), as the engine's
//! `oncelake::pipeline::Pipeline` runs it.

use crate::backend::{with_store, Backend, Backing, Work};
use crate::convert::{self, kw, make, o, Py2};
use oncelake::pipeline::{
    Attempt, Claim, Explain, FailOutcome, Pipeline, PipelineDef, ReadyCell, Status, WorkOptions,
    WorkReport,
};
use oncelake::{Lease, UnitOutcome, UnitStore};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

/// A pipeline of stages over a store; ``Store.pipeline(definition)`` makes one.
#[pyclass(module = "oncelake", name = "Pipeline", frozen)]
pub struct PyPipeline {
    on: Backend,
    pipeline: Pipeline,
}

/// A ready pipeline cell: handed to the stage function of ``Pipeline.work``, listed by
/// ``Pipeline.ready`` and returned, with its lease, by ``Pipeline.claim``.
#[pyclass(module = "oncelake", name = "Cell", frozen)]
pub struct PyCell {
    on: Backend,
    cell: ReadyCell,
    /// The lease of a claimed cell (``Pipeline.claim``); its token fences the completion.
    lease: Option<Lease>,
}

#[pymethods]
impl PyCell {
    /// The unit.
    #[getter]
    fn unit(&self) -> &str {
        &self.cell.unit
    }
    /// The stage.
    #[getter]
    fn stage(&self) -> &str {
        &self.cell.stage
    }
    /// The unit's source version being computed.
    #[getter]
    fn source_version(&self) -> u64 {
        self.cell.source_version
    }
    /// Earlier failed runs of this cell at this source version.
    #[getter]
    fn attempts(&self) -> u32 {
        self.cell.attempts
    }
    /// The last of their errors.
    #[getter]
    fn last_error(&self) -> Option<&str> {
        self.cell.last_error.as_deref()
    }
    /// The cell's key: the unit under which its completion is committed in the manifest.
    #[getter]
    fn key(&self) -> &str {
        &self.cell.key
    }
    /// Why a completed cell runs again (newer source version, changed code), or ``None``.
    #[getter]
    fn stale(&self) -> Option<String> {
        self.cell.stale.as_ref().map(|s| s.to_string())
    }
    /// The ``Lease`` of a claimed cell (``Pipeline.claim``), else ``None``.
    #[getter]
    fn lease<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.lease
            .as_ref()
            .map(|l| convert::lease(py, l, false))
            .transpose()
    }
    /// The bytes of an input: ``stage=None`` for the unit's source input, else an upstream stage.
    #[pyo3(signature = (stage = None))]
    fn read_input<'py>(
        &self,
        py: Python<'py>,
        stage: Option<&str>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let b = with_store!(&self.on, py, |s| s.cell_input(&self.cell, stage))?;
        Ok(PyBytes::new(py, &b))
    }
    fn __repr__(&self) -> String {
        let token = match &self.lease {
            Some(l) => format!(", token={}", l.token),
            None => String::new(),
        };
        format!(
            "oncelake.Cell(unit={:?}, stage={:?}, source_version={}{token})",
            self.cell.unit, self.cell.stage, self.cell.source_version
        )
    }
}

impl PyCell {
    /// The run of this cell as the engine records it: under its lease's token when claimed,
    /// else by `worker` without a token (refused as busy while someone holds a live lease).
    fn attempt(&self, worker: Option<&str>) -> PyResult<Attempt> {
        let (worker, token) =
            match (&self.lease, worker) {
                (Some(l), _) => (l.worker.clone(), Some(l.token)),
                (None, Some(w)) => (w.to_owned(), None),
                (None, None) => return Err(PyValueError::new_err(
                    "this cell was not claimed: claim it with Pipeline.claim(cell, worker=..., \
                     ttl=...), or pass worker= to record the run without a lease",
                )),
            };
        Ok(Attempt {
            unit: self.cell.unit.clone(),
            stage: self.cell.stage.clone(),
            source_version: self.cell.source_version,
            worker,
            token,
        })
    }
}

impl PyPipeline {
    pub(crate) fn new(py: Python<'_>, backend: Backend, definition: &str) -> PyResult<Self> {
        let def = PipelineDef::parse(definition).map_err(|e| match kw(py, &[]) {
            Ok(f) => convert::error(py, "invalid_input", e.to_string(), f),
            Err(err) => err,
        })?;
        let pipeline = Pipeline::new(def);
        with_store!(&backend, py, |s| s.define(&pipeline))?;
        Ok(PyPipeline {
            on: backend,
            pipeline,
        })
    }

    fn cell(&self, cell: ReadyCell, lease: Option<Lease>) -> PyCell {
        PyCell {
            on: self.on.clone(),
            cell,
            lease,
        }
    }

    fn ready_cells(&self, py: Python<'_>, limit: usize) -> PyResult<Vec<ReadyCell>> {
        with_store!(&self.on, py, |s| s.ready_cells(&self.pipeline, limit))
    }

    fn claim_cell(
        &self,
        py: Python<'_>,
        cell: &ReadyCell,
        worker: &str,
        ttl: std::time::Duration,
    ) -> PyResult<Claim> {
        with_store!(&self.on, py, |s| s.claim_cell(
            &self.pipeline,
            cell,
            worker,
            ttl
        ))
    }

    fn complete_cell(
        &self,
        py: Python<'_>,
        attempt: &Attempt,
        output: &[u8],
    ) -> PyResult<UnitOutcome> {
        with_store!(&self.on, py, |s| s.complete_cell(
            &self.pipeline,
            attempt,
            output
        ))
    }

    fn fail_cell(&self, py: Python<'_>, attempt: &Attempt, error: &str) -> PyResult<FailOutcome> {
        with_store!(&self.on, py, |s| s.fail_cell(
            &self.pipeline,
            attempt,
            error
        ))
    }

    fn explained(&self, py: Python<'_>, unit: &str) -> PyResult<Explain> {
        with_store!(&self.on, py, |s| s.explain(&self.pipeline, unit))
    }

    fn counts(&self, py: Python<'_>) -> PyResult<Status> {
        with_store!(&self.on, py, |s| UnitStore::pipeline_status(
            s,
            &self.pipeline
        ))
    }
}

#[pymethods]
impl PyPipeline {
    /// Records that ``unit``'s source is now at ``version`` with ``input`` bytes (stages it and
    /// commits it). Returns ``Committed``/``Duplicate``; raises ``Stale`` for an older version.
    fn set_source_version<'py>(
        &self,
        py: Python<'py>,
        unit: &str,
        version: u64,
        input: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        // The engine's key check here, so a bad key raises with its facts also when served.
        oncelake::pipeline::cell::validate_pipeline_unit(unit).py(py)?;
        let out = with_store!(&self.on, py, |s| s.set_source_version(unit, version, input))?;
        let meta = oncelake::ObjectMeta {
            id: out.object,
            size: input.len() as u64,
            crc32: crc32fast::hash(input),
        };
        convert::outcome(py, &out, meta)
    }

    /// Runs ready cells until none is ready: ``fn(cell)`` returns the cell's output bytes; an
    /// exception it raises is recorded as the cell's failure (retried up to the stage's
    /// ``max_attempts``). Returns the counts (runs, completed, duplicates, failed, ...).
    #[pyo3(signature = (worker, stage_fn, *, ttl = 60.0))]
    fn work<'py>(
        &self,
        py: Python<'py>,
        worker: &str,
        stage_fn: Py<PyAny>,
        ttl: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let opts = WorkOptions {
            ttl: crate::wire::seconds("ttl", ttl)?,
            ..WorkOptions::default()
        };
        // The engine's one worker loop (`oncelake::api::work`) on either store.
        let mut run = |cell: &ReadyCell| {
            Python::attach(|py| {
                let c = self.cell(cell.clone(), None);
                stage_fn
                    .bind(py)
                    .call1((c,))
                    .and_then(|out| out.extract::<Vec<u8>>())
                    .map_err(|e| e.to_string())
            })
        };
        let report = with_store!(&self.on, py, |s| s.work_loop(Work {
            pipeline: &self.pipeline,
            worker,
            opts: &opts,
            stage_fn: &mut run,
        }))?;
        work_counts(py, &report)
    }

    /// Up to ``limit`` cells that may run now (in unit order, then stage order), for running
    /// cells by hand: ``claim`` one, run it, then ``complete`` or ``fail`` it.
    #[pyo3(signature = (limit = 100))]
    fn ready(&self, py: Python<'_>, limit: usize) -> PyResult<Vec<PyCell>> {
        let cells = self.ready_cells(py, limit)?;
        Ok(cells
            .into_iter()
            .map(|cell| self.cell(cell, None))
            .collect())
    }

    /// Claims ``cell`` for ``worker`` for ``ttl`` seconds: returns the claimed ``Cell`` (with its
    /// ``lease`` and its attempt count as of the grant). Raises ``Busy`` (another worker holds
    /// it), ``AlreadyDone`` (completed meanwhile) or ``GaveUp`` (its attempts are used up; the
    /// lease was given back).
    #[pyo3(signature = (cell, *, worker, ttl))]
    fn claim<'py>(
        &self,
        py: Python<'py>,
        cell: &Bound<'py, PyCell>,
        worker: &str,
        ttl: f64,
    ) -> PyResult<PyCell> {
        let ready = &cell.get().cell;
        let ttl = crate::wire::seconds("ttl", ttl)?;
        let claim = self.claim_cell(py, ready, worker, ttl)?;
        let facts = |extra: Vec<(&'static str, Bound<'py, PyAny>)>| {
            let mut f = cell_facts(py, ready);
            f.extend(extra);
            kw(py, &f)
        };
        match claim {
            Claim::Granted { lease, cell } => Ok(self.cell(cell, Some(lease))),
            Claim::Held {
                worker,
                expires_at_ms,
            } => Err(convert::error(
                py,
                "busy",
                format!(
                    "busy: {} {} is claimed by {worker} until {expires_at_ms} ms; another worker \
                     runs it",
                    ready.unit, ready.stage
                ),
                facts(vec![
                    ("outcome", o(py, "busy")),
                    ("worker", o(py, worker.as_str())),
                    ("expires_at_ms", o(py, expires_at_ms)),
                ])?,
            )),
            Claim::AlreadyDone => Err(convert::error(
                py,
                "already_done",
                format!(
                    "already done: {} {} was completed at source version {} meanwhile; nothing \
                     to do",
                    ready.unit, ready.stage, ready.source_version
                ),
                facts(vec![
                    ("outcome", o(py, "already_done")),
                    ("entry", py.None().into_bound(py)),
                ])?,
            )),
            Claim::GaveUp { attempts } => Err(convert::error(
                py,
                "gave_up",
                format!(
                    "gave up: {} {} failed {attempts} time(s), its stage's max_attempts; it is \
                     retried once its source or code version changes",
                    ready.unit, ready.stage
                ),
                facts(vec![
                    ("outcome", o(py, "gave_up")),
                    ("attempts", o(py, attempts)),
                ])?,
            )),
        }
    }

    /// Completes ``cell`` with ``output`` (bytes): commits it under the cell's key at its source
    /// version, under its lease's token when it was claimed (``Fenced`` if the lease was taken
    /// over or ended), else without one (``Busy`` while another worker holds a live lease).
    /// Returns ``Committed`` or ``Duplicate`` (the same output again); raises ``Conflict`` for
    /// other bytes at the same version and ``Stale`` when the cell was completed for a newer one.
    /// The outcome's ``unit`` is the cell's ``key``.
    fn complete<'py>(
        &self,
        py: Python<'py>,
        cell: &Bound<'py, PyCell>,
        output: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        let attempt = cell.get().attempt(Some("python"))?;
        let out = self.complete_cell(py, &attempt, output)?;
        let meta = oncelake::ObjectMeta {
            id: out.object,
            size: output.len() as u64,
            crc32: crc32fast::hash(output),
        };
        convert::outcome(py, &out, meta)
    }

    /// Records a failed run of ``cell`` with ``error`` (its message); the cell is retried until
    /// its stage's ``max_attempts``. A claimed cell's failure is recorded under its lease (which
    /// it ends, so the cell can be retried at once); an unclaimed one needs ``worker=`` and is
    /// refused as ``Busy`` while another worker holds a live lease. Returns ``FailRecorded``;
    /// raises ``Fenced`` when the lease was taken over or ended.
    #[pyo3(signature = (cell, error, *, worker = None))]
    fn fail<'py>(
        &self,
        py: Python<'py>,
        cell: &Bound<'py, PyCell>,
        error: &str,
        worker: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = cell.get();
        let attempt = c.attempt(worker)?;
        let out = self.fail_cell(py, &attempt, error)?;
        let mut f = cell_facts(py, &c.cell);
        match out {
            FailOutcome::Recorded {
                seq,
                attempts,
                gave_up,
            } => {
                f.extend([
                    ("seq", o(py, seq)),
                    ("attempts", o(py, attempts)),
                    ("gave_up", o(py, gave_up)),
                ]);
                make(py, "FailRecorded", kw(py, &f)?)
            }
            FailOutcome::Fenced {
                token,
                newest_token,
            } => {
                f.extend([
                    ("outcome", o(py, "fenced")),
                    ("token", o(py, token)),
                    ("newest_token", o(py, newest_token)),
                ]);
                Err(convert::error(
                    py,
                    "fenced",
                    format!(
                        "fenced: token {token} of {} {} is not the cell's live lease (newest \
                         token {newest_token}); another worker took over — nothing was recorded",
                        c.cell.unit, c.cell.stage
                    ),
                    kw(py, &f)?,
                ))
            }
            FailOutcome::Busy {
                worker,
                expires_at_ms,
            } => {
                f.extend([
                    ("outcome", o(py, "busy")),
                    ("worker", o(py, worker.as_str())),
                    ("expires_at_ms", o(py, expires_at_ms)),
                ]);
                Err(convert::error(
                    py,
                    "busy",
                    format!(
                        "busy: {} {} is claimed by {worker} until {expires_at_ms} ms; record the \
                         failure under that lease, or after it ends. Nothing was recorded",
                        c.cell.unit, c.cell.stage
                    ),
                    kw(py, &f)?,
                ))
            }
        }
    }

    /// Why each cell of ``unit`` is in its state: ``{"unit", "source_version", "cells": [...]}``,
    /// each cell with ``stage``, ``state`` (done, running, ready, blocked, failed), ``stale``,
    /// ``wave`` (whether a done cell re-ran or was cut off, and why; SPEC R24), ``cut_off`` and
    /// the state's facts.
    fn explain<'py>(&self, py: Python<'py>, unit: &str) -> PyResult<Bound<'py, PyDict>> {
        let e = self.explained(py, unit)?;
        let cells = PyList::empty(py);
        for c in &e.cells {
            let d = kw(
                py,
                &[
                    ("stage", o(py, c.stage.as_str())),
                    ("key", o(py, c.key.as_str())),
                    ("state", o(py, c.state.name())),
                    ("stale", o(py, c.stale.as_ref().map(|s| s.to_string()))),
                    ("wave", o(py, c.wave.as_ref().map(|w| w.to_string()))),
                    (
                        "cut_off",
                        o(py, c.wave.as_ref().is_some_and(|w| w.is_cut_off())),
                    ),
                ],
            )?;
            // The state's facts under their wire names (as `oncelake pipeline explain --json`
            // prints them): a blocked cell's upstream stage as `blocked_on`.
            let facts = convert::from_wire(py, serde_json::to_string(&c.state))?;
            for (k, v) in facts.cast::<PyDict>()?.iter() {
                match k.extract::<String>()?.as_str() {
                    "state" | "upstream_state" => {}
                    "upstream" => d.set_item("blocked_on", v)?,
                    _ => d.set_item(k, v)?,
                }
            }
            cells.append(d)?;
        }
        kw(
            py,
            &[
                ("unit", o(py, e.unit.as_str())),
                ("source_version", o(py, e.source_version)),
                ("cells", cells.into_any()),
            ],
        )
    }

    /// Counts per stage: ``{"units", "stages": [{"stage", "code_version", "done", "ready",
    /// "running", "blocked", "failed", "stale", "cut_off"}]}``.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::from_wire(py, serde_json::to_string(&self.counts(py)?))
    }
}

/// The facts every answer about a cell carries: the CLI's `unit`, `stage`, `source_version` and
/// `cell` (its key).
fn cell_facts<'py>(py: Python<'py>, c: &ReadyCell) -> Vec<(&'static str, Bound<'py, PyAny>)> {
    vec![
        ("unit", o(py, c.unit.as_str())),
        ("stage", o(py, c.stage.as_str())),
        ("source_version", o(py, c.source_version)),
        ("cell", o(py, c.key.as_str())),
    ]
}

/// The counts of `Pipeline.work`.
fn work_counts<'py>(py: Python<'py>, report: &WorkReport) -> PyResult<Bound<'py, PyDict>> {
    kw(
        py,
        &[
            ("runs", o(py, report.runs)),
            ("completed", o(py, report.completed)),
            ("duplicates", o(py, report.duplicates)),
            ("failed", o(py, report.failed)),
            ("rejected", o(py, report.rejected)),
            ("retried", o(py, report.retried)),
            ("invalidated", o(py, report.invalidated)),
        ],
    )
}
