//! `oncelake.Run`: `Store.run_once` as a context manager, over the engine's handle form of
//! run-once (`Store::begin_run` → `Run::commit` / `Run::abandon`), so that Python and Rust share
//! one implementation of the rule.

use crate::backend::{on, Backend, Backing, Claimed, RunSpec};
use crate::convert::{self, poisoned};
use crate::data::Data;
use crate::wire::lost;
use oncelake::RenewOutcome;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// A unit run at most once: returned by ``Store.run_once``; use it in a ``with`` statement.
///
/// Entering claims the unit (raising ``AlreadyDone`` or ``Busy`` when there is nothing to do).
/// Set ``output`` in the body. Leaving commits it under the lease: ``outcome`` is then
/// ``Committed`` (this run produced the unit's entry) or ``Duplicate``; a rejection raises
/// (``Fenced`` when the lease was taken over meanwhile). An exception in the body, or leaving
/// without an output, gives the lease back and records nothing.
#[pyclass(module = "oncelake", name = "Run", frozen)]
pub struct PyRun {
    backend: Backend,
    /// The unit being computed.
    #[pyo3(get)]
    unit: String,
    /// The source version being computed.
    #[pyo3(get)]
    version: u64,
    /// The worker name the unit is claimed for.
    #[pyo3(get)]
    worker: String,
    ttl: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    run: Option<Box<dyn Claimed>>,
    entered: bool,
    output: Option<Py<PyAny>>,
    outcome: Option<Py<PyAny>>,
}

impl PyRun {
    pub(crate) fn new(
        backend: Backend,
        unit: String,
        version: u64,
        worker: String,
        ttl: Duration,
    ) -> Self {
        PyRun {
            backend,
            unit,
            version,
            worker,
            ttl,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> PyResult<MutexGuard<'_, State>> {
        self.state.lock().map_err(poisoned("run state"))
    }

    /// Commits `output` under the run's lease.
    fn finish<'py>(
        &self,
        py: Python<'py>,
        run: Box<dyn Claimed>,
        output: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Some(output) = output else {
            run.abandon(py)?;
            return Err(PyValueError::new_err(format!(
                "run_once({:?}, {}) ended without run.output; set it in the with-block (the lease was given back, nothing was recorded)",
                self.unit, self.version
            )));
        };
        let data = Data::extract(output.bind(py))?;
        run.commit(py, data)
    }

    /// Claims the unit: the engine's `begin_run` in-process, a claim through the server.
    fn begin(&self, py: Python<'_>) -> PyResult<Box<dyn Claimed>> {
        let spec = RunSpec {
            unit: &self.unit,
            version: self.version,
            worker: &self.worker,
            ttl: self.ttl,
        };
        on!(&self.backend, |s| s.begin_unit(py, &spec))
    }
}

#[pymethods]
impl PyRun {
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        let this = slf.get();
        if this.state()?.entered {
            return Err(PyValueError::new_err(
                "a Run is entered once; call store.run_once(...) again",
            ));
        }
        let run = this.begin(py)?;
        let mut st = this.state()?;
        st.entered = true;
        st.run = Some(run);
        drop(st);
        Ok(slf)
    }

    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let (run, output) = {
            let mut st = self.state()?;
            (st.run.take(), st.output.take())
        };
        let Some(run) = run else { return Ok(false) };
        if exc_type.is_some_and(|t| !t.is_none()) {
            // The body failed: give the lease back so another worker may retry at once. The body's
            // exception is what the caller must see; if the release fails, the lease just expires.
            let _ = run.abandon(py);
            return Ok(false);
        }
        let outcome = self.finish(py, run, output)?;
        self.state()?.outcome = Some(outcome.unbind());
        Ok(false)
    }

    /// The output to commit when the with-block ends: bytes, a path or a binary file object.
    #[getter]
    fn get_output(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.state()?.output.as_ref().map(|o| o.clone_ref(py)))
    }

    #[setter]
    fn set_output(&self, value: Option<Py<PyAny>>) -> PyResult<()> {
        self.state()?.output = value;
        Ok(())
    }

    /// After the with-block: ``Committed`` or ``Duplicate``; ``None`` before.
    #[getter]
    fn outcome(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.state()?.outcome.as_ref().map(|o| o.clone_ref(py)))
    }

    /// The lease while the with-block runs (``None`` before entering and after leaving).
    #[getter]
    fn lease<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match &self.state()?.run {
            Some(r) => convert::lease(py, r.lease(), false).map(Some),
            None => Ok(None),
        }
    }

    /// Extends the lease from inside long work (``ttl`` seconds; default: the run's ttl) and
    /// returns it; raises ``Fenced`` if the unit was taken over (stop: the commit would be fenced).
    #[pyo3(signature = (ttl = None))]
    fn renew<'py>(&self, py: Python<'py>, ttl: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let ttl = match ttl {
            Some(s) => crate::wire::seconds("ttl", s)?,
            None => self.ttl,
        };
        // The run is taken out while the engine renews without the GIL: holding the state lock
        // across that would deadlock against a thread that holds the GIL and waits for the lock.
        let Some(mut run) = self.state()?.run.take() else {
            return Err(PyValueError::new_err(
                "renew() works inside the with-block of run_once",
            ));
        };
        let renewed = run.renew(py, ttl);
        let lease = run.lease().clone();
        self.state()?.run = Some(run);
        match renewed? {
            RenewOutcome::Renewed(l) => convert::lease(py, &l, false),
            RenewOutcome::Lost { newest_token } => Err(lost(py, &lease, newest_token)),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "oncelake.Run(unit={:?}, version={}, worker={:?})",
            self.unit, self.version, self.worker
        )
    }
}
