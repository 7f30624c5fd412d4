//! `Store.submit`: a commit in flight, answered through a `CommitHandle` (`wait`, `done`), so
//! that one Python thread keeps many commits in one durable group where `Store.commit` needs a
//! thread per commit in flight. The engine's submission threads do the waiting
//! (`oncelake::Store::submit`); the GIL is released while a handle waits.

use crate::convert;
use oncelake::{CommitReport, ObjectMeta};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::sync::Mutex;
use std::time::Duration;

/// What `Store.commit` returns for `report`: per unit in order `Committed`, `Duplicate` or the
/// rejection's exception instance; unless `partial`, the first rejection is raised instead, with
/// `outcomes` listing every unit.
pub(crate) fn outcomes<'py>(
    py: Python<'py>,
    report: &CommitReport,
    metas: Vec<ObjectMeta>,
    partial: bool,
) -> PyResult<Bound<'py, PyList>> {
    let values = PyList::empty(py);
    let mut first_rejection = None;
    for (u, meta) in report.units.iter().zip(metas) {
        match convert::outcome(py, u, meta) {
            Ok(v) => values.append(v)?,
            Err(e) => {
                let exc = e.value(py).clone().into_any();
                if first_rejection.is_none() && u.outcome != oncelake::Outcome::Aborted {
                    first_rejection = Some(e);
                }
                values.append(exc)?;
            }
        }
    }
    match first_rejection {
        Some(e) if !partial => {
            e.value(py).setattr("outcomes", &values)?;
            e.value(py)
                .getattr("facts")?
                .set_item("outcomes", &values)?;
            Err(e)
        }
        _ => Ok(values),
    }
}

/// A commit submitted with ``Store.submit``: ``wait()`` returns (or raises) what ``Store.commit``
/// would have for the batch, ``done()`` tells whether the answer is there. The commit is made
/// whatever happens to the handle: dropping it neither cancels nor cuts it.
#[pyclass(module = "oncelake", name = "CommitHandle", frozen)]
pub struct PyCommitHandle {
    state: Mutex<State>,
    partial: bool,
}

/// A handle before and after its answer.
enum State {
    /// In flight (through a server: answered already), with each item's object metadata.
    Waiting(Box<dyn InFlight>, Vec<ObjectMeta>),
    /// Answered: what `wait` returns or raises, kept for a second `wait`.
    Answered(Result<Py<PyList>, PyErr>),
    /// Taken by a `wait` of another thread that has not finished yet.
    Taken,
}

/// A commit in flight: the engine's handle, or the report a server answered with before
/// `submit` returned.
pub(crate) trait InFlight: Send {
    /// Whether the answer is there.
    fn is_done(&self) -> bool;

    /// The answer, waited for with the GIL released (at most `timeout`); the commit back if it is
    /// still in flight then.
    fn answer(
        self: Box<Self>,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> Result<PyResult<CommitReport>, Box<dyn InFlight>>;
}

impl PyCommitHandle {
    /// A handle to the commit `pending`, with each item's object metadata.
    pub(crate) fn new(pending: Box<dyn InFlight>, metas: Vec<ObjectMeta>, partial: bool) -> Self {
        PyCommitHandle {
            state: Mutex::new(State::Waiting(pending, metas)),
            partial,
        }
    }

    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| PyValueError::new_err("commit handle lock poisoned"))
    }
}

#[pymethods]
impl PyCommitHandle {
    /// Waits (the GIL released) until the commit is decided and durable, then returns what
    /// ``Store.commit`` returns for the batch, or raises what it raises. With ``timeout`` (seconds)
    /// raises ``TimeoutError`` if the answer is not there by then; the handle can be waited for
    /// again.
    #[pyo3(signature = (timeout = None))]
    fn wait<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        let timeout = timeout
            .map(|t| crate::wire::seconds("timeout", t))
            .transpose()?;
        let taken = std::mem::replace(&mut *self.lock()?, State::Taken);
        let (pending, metas) = match taken {
            State::Waiting(p, m) => (p, m),
            State::Answered(a) => {
                let out = a
                    .as_ref()
                    .map(|l| l.clone_ref(py))
                    .map_err(|e| e.clone_ref(py));
                *self.lock()? = State::Answered(a);
                return out.map(|l| l.into_bound(py));
            }
            State::Taken => {
                return Err(PyValueError::new_err(
                    "another thread is waiting for this commit handle; wait for it there",
                ))
            }
        };
        let report = match pending.answer(py, timeout) {
            Ok(r) => r,
            Err(pending) => {
                *self.lock()? = State::Waiting(pending, metas);
                return Err(pyo3::exceptions::PyTimeoutError::new_err(
                    "the commit is still in flight; wait for its handle again",
                ));
            }
        };
        let answer = report
            .and_then(|r| outcomes(py, &r, metas, self.partial))
            .map(Bound::unbind);
        let out = answer
            .as_ref()
            .map(|l| l.clone_ref(py).into_bound(py))
            .map_err(|e| e.clone_ref(py));
        *self.lock()? = State::Answered(answer);
        out
    }

    /// Whether the answer is there (``wait`` then returns without waiting).
    fn done(&self) -> PyResult<bool> {
        Ok(match &*self.lock()? {
            State::Waiting(p, _) => p.is_done(),
            State::Answered(_) => true,
            State::Taken => false,
        })
    }

    fn __repr__(&self) -> PyResult<String> {
        Ok(format!("<oncelake.CommitHandle done={}>", self.done()?))
    }
}
