//! `Store.submit`: a commit in flight, answered through a `CommitHandle` (`wait`, `done`), so
//! that one Python thread keeps many commits in one durable group where `Store.commit` needs a
//! thread per commit in flight. The engine's submission threads do the waiting
//! (`oncelake::Store::submit`); the GIL is released while a handle waits.

use crate::convert::{self, Py2};
use crate::data::{Data, Item};
use oncelake::{Batch, CommitReport, ObjectMeta};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::sync::Mutex;
use std::time::Duration;

/// The batch of `Store.commit`'s or `Store.submit`'s items on an in-process store (each item's
/// data staged first), with each item's object metadata, in order.
pub(crate) fn local_batch<'py>(
    py: Python<'py>,
    store: &oncelake::Store,
    items: Vec<Item<'py>>,
    partial: bool,
) -> PyResult<(Batch, Vec<ObjectMeta>)> {
    let mut batch = Batch::new();
    let mut metas = Vec::new();
    for (unit, version, data, token) in items {
        let staged = Data::extract(&data)?.stage(py, store)?;
        metas.push(staged.meta());
        batch = batch.item(unit, version, &staged, token, oncelake::Intent::Put);
    }
    if partial {
        batch = batch.partial();
    }
    Ok((batch, metas))
}

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
    Waiting(Pending, Vec<ObjectMeta>),
    /// Answered: what `wait` returns or raises, kept for a second `wait`.
    Answered(Result<Py<PyList>, PyErr>),
    /// Taken by a `wait` of another thread that has not finished yet.
    Taken,
}

/// The engine's handle, or the report a server answered with before `submit` returned.
enum Pending {
    Local(oncelake::CommitHandle),
    Served(CommitReport),
}

impl PyCommitHandle {
    /// A handle to the engine's `handle`.
    pub(crate) fn local(
        handle: oncelake::CommitHandle,
        metas: Vec<ObjectMeta>,
        partial: bool,
    ) -> Self {
        Self::of(Pending::Local(handle), metas, partial)
    }

    /// A handle answered already (a store served by a server commits at the call).
    pub(crate) fn served(report: CommitReport, metas: Vec<ObjectMeta>, partial: bool) -> Self {
        Self::of(Pending::Served(report), metas, partial)
    }

    fn of(pending: Pending, metas: Vec<ObjectMeta>, partial: bool) -> Self {
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
        let report = match pending {
            Pending::Served(r) => Ok(r),
            Pending::Local(h) => match wait_local(py, h, timeout) {
                Ok(r) => r,
                Err(h) => {
                    *self.lock()? = State::Waiting(Pending::Local(h), metas);
                    return Err(pyo3::exceptions::PyTimeoutError::new_err(
                        "the commit is still in flight; wait for its handle again",
                    ));
                }
            },
        };
        let answer = report
            .py(py)
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
            State::Waiting(Pending::Local(h), _) => h.is_done(),
            State::Waiting(Pending::Served(_), _) | State::Answered(_) => true,
            State::Taken => false,
        })
    }

    fn __repr__(&self) -> PyResult<String> {
        Ok(format!("<oncelake.CommitHandle done={}>", self.done()?))
    }
}

/// Waits for `h` with the GIL released: its answer, or the handle back after `timeout`.
fn wait_local(
    py: Python<'_>,
    h: oncelake::CommitHandle,
    timeout: Option<Duration>,
) -> Result<oncelake::Result<CommitReport>, oncelake::CommitHandle> {
    py.detach(move || match timeout {
        None => Ok(h.wait()),
        Some(t) => h.wait_timeout(t),
    })
}
