//! `oncelake.Pipeline`: a DAG of stages over a store (SPEC R13), as the engine's
//! `oncelake::pipeline::Pipeline` runs it.

use crate::convert::{self, kw, o, Py2};
use oncelake::pipeline::{
    set_source_version, CellState, Pipeline, PipelineDef, ReadyCell, WorkOptions,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

/// A pipeline of stages over a store; ``Store.pipeline(definition)`` makes one.
#[pyclass(module = "oncelake", name = "Pipeline", frozen)]
pub struct PyPipeline {
    store: oncelake::Store,
    pipeline: Pipeline,
}

/// A ready cell handed to the stage function of ``Pipeline.work``.
#[pyclass(module = "oncelake", name = "Cell", frozen)]
pub struct PyCell {
    store: oncelake::Store,
    cell: ReadyCell,
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
    /// The bytes of an input: ``stage=None`` for the unit's source input, else an upstream stage.
    #[pyo3(signature = (stage = None))]
    fn read_input<'py>(
        &self,
        py: Python<'py>,
        stage: Option<&str>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let b = py
            .detach(|| self.cell.read_input(&self.store, stage))
            .py(py)?;
        Ok(PyBytes::new(py, &b))
    }
    fn __repr__(&self) -> String {
        format!(
            "oncelake.Cell(unit={:?}, stage={:?}, source_version={})",
            self.cell.unit, self.cell.stage, self.cell.source_version
        )
    }
}

impl PyPipeline {
    pub(crate) fn new(py: Python<'_>, store: oncelake::Store, definition: &str) -> PyResult<Self> {
        let def = PipelineDef::parse(definition).map_err(|e| match kw(py, &[]) {
            Ok(f) => convert::error(py, "invalid_input", e.to_string(), f),
            Err(err) => err,
        })?;
        let pipeline = Pipeline::new(def);
        py.detach(|| pipeline.record_definition(&store)).py(py)?;
        Ok(PyPipeline { store, pipeline })
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
        let out = py
            .detach(|| set_source_version(&self.store, unit, version, input))
            .py(py)?;
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
            ttl: crate::store::seconds("ttl", ttl)?,
            ..WorkOptions::default()
        };
        let report = py
            .detach(|| {
                self.pipeline.work_with(&self.store, worker, &opts, |cell| {
                    Python::attach(|py| {
                        let c = PyCell {
                            store: self.store.clone(),
                            cell: cell.clone(),
                        };
                        stage_fn
                            .bind(py)
                            .call1((c,))
                            .and_then(|out| out.extract::<Vec<u8>>())
                            .map_err(|e| e.to_string())
                    })
                })
            })
            .py(py)?;
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

    /// Why each cell of ``unit`` is in its state: ``{"unit", "source_version", "cells": [...]}``,
    /// each cell with ``stage``, ``state`` (done, running, ready, blocked, failed), ``stale`` and
    /// the state's facts.
    fn explain<'py>(&self, py: Python<'py>, unit: &str) -> PyResult<Bound<'py, PyDict>> {
        let e = py
            .detach(|| self.pipeline.explain(&self.store, unit))
            .py(py)?;
        let cells = PyList::empty(py);
        for c in &e.cells {
            let d = kw(
                py,
                &[
                    ("stage", o(py, c.stage.as_str())),
                    ("key", o(py, c.key.as_str())),
                    ("state", o(py, c.state.name())),
                    ("stale", o(py, c.stale.as_ref().map(|s| s.to_string()))),
                ],
            )?;
            match &c.state {
                CellState::Done {
                    source_version,
                    code_version,
                    seq,
                    object,
                } => {
                    d.set_item("source_version", source_version)?;
                    d.set_item("code_version", code_version)?;
                    d.set_item("seq", seq)?;
                    d.set_item("object", object.to_hex())?;
                }
                CellState::Running {
                    worker,
                    token,
                    source_version,
                    expires_at_ms,
                } => {
                    d.set_item("worker", worker)?;
                    d.set_item("token", token)?;
                    d.set_item("source_version", source_version)?;
                    d.set_item("expires_at_ms", expires_at_ms)?;
                }
                CellState::Ready {
                    attempts,
                    last_error,
                } => {
                    d.set_item("attempts", attempts)?;
                    d.set_item("last_error", last_error)?;
                }
                CellState::Blocked { upstream, .. } => d.set_item("blocked_on", upstream)?,
                CellState::Failed {
                    attempts,
                    last_error,
                } => {
                    d.set_item("attempts", attempts)?;
                    d.set_item("last_error", last_error)?;
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
    /// "running", "blocked", "failed", "stale"}]}``.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = py.detach(|| self.pipeline.status(&self.store)).py(py)?;
        let stages = PyList::empty(py);
        for st in &s.stages {
            stages.append(kw(
                py,
                &[
                    ("stage", o(py, st.stage.as_str())),
                    ("code_version", o(py, st.code_version)),
                    ("done", o(py, st.done)),
                    ("ready", o(py, st.ready)),
                    ("running", o(py, st.running)),
                    ("blocked", o(py, st.blocked)),
                    ("failed", o(py, st.failed)),
                    ("stale", o(py, st.stale)),
                ],
            )?)?;
        }
        kw(
            py,
            &[("units", o(py, s.units)), ("stages", stages.into_any())],
        )
    }
}
