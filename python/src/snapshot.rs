//! `oncelake.Snapshot`: a consistent read-only view as of one seq (SPEC R7), and the reads the
//! store's own `get`/`entry`/`ls`/`changes_since` make through a one-off view.

use crate::convert::{self, Py2};
use oncelake::Snapshot;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use std::sync::{Arc, Mutex};

/// A consistent read-only view of the store as of one seq: it sees every commit up to ``seq``
/// and nothing of any later one. Use it as a context manager or call ``close()``; while it is
/// open, garbage collection keeps every object it can read.
#[pyclass(module = "oncelake", name = "Snapshot", frozen)]
pub struct PySnapshot {
    // Shared, not borrowed under the lock: a read releases the GIL, and a lock held across that
    // would deadlock against another thread that holds the GIL and waits for the lock.
    snap: Mutex<Option<Arc<Snapshot>>>,
    store: oncelake::Store,
}

impl PySnapshot {
    /// A view as of the newest commit or as of `at`, with the GIL released.
    pub(crate) fn take(
        py: Python<'_>,
        store: &oncelake::Store,
        at: Option<u64>,
    ) -> PyResult<Snapshot> {
        py.detach(|| match at {
            Some(seq) => store.snapshot_at(seq),
            None => store.snapshot(),
        })
        .py(py)
    }

    pub(crate) fn open(py: Python<'_>, store: &oncelake::Store, at: Option<u64>) -> PyResult<Self> {
        Ok(PySnapshot {
            snap: Mutex::new(Some(Arc::new(Self::take(py, store, at)?))),
            store: store.clone(),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&Snapshot) -> PyResult<T>) -> PyResult<T> {
        let snap = self
            .snap
            .lock()
            .map_err(|_| PyValueError::new_err("snapshot lock poisoned"))?
            .clone();
        match snap {
            Some(s) => f(&s),
            None => Err(PyValueError::new_err(
                "the snapshot is closed; take a new one with store.snapshot()",
            )),
        }
    }
}

#[pymethods]
impl PySnapshot {
    /// The newest seq this view contains.
    #[getter]
    fn seq(&self) -> PyResult<u64> {
        self.with(|s| Ok(s.seq()))
    }

    /// The oldest seq a view can still be taken as of.
    #[getter]
    fn history_from(&self) -> PyResult<u64> {
        self.with(|s| Ok(s.history_from()))
    }

    /// The unit's ``Entry`` in this view, or ``None``.
    fn entry<'py>(&self, py: Python<'py>, unit: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.with(|s| entry_of(py, s, unit))
    }

    /// The unit's object bytes in this view (size and CRC32 checked), or ``None``.
    fn get<'py>(&self, py: Python<'py>, unit: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.with(|s| read_of(py, s, unit))
    }

    /// The entries whose unit starts with ``prefix``, in key order.
    #[pyo3(signature = (prefix = ""))]
    fn ls<'py>(&self, py: Python<'py>, prefix: &str) -> PyResult<Bound<'py, PyList>> {
        self.with(|s| ls_of(py, s, prefix))
    }

    /// The path of an entry's object: an immutable, read-only file (stream it yourself).
    fn object_path(&self, entry: &Bound<'_, PyAny>) -> PyResult<String> {
        let hex: String = entry.getattr("object")?.extract()?;
        let id: oncelake::ObjectId = hex.parse().map_err(|_| {
            PyValueError::new_err(format!("{hex:?} is not an object hash (64 hex digits)"))
        })?;
        self.with(|_| Ok(self.store.object_path(&id).display().to_string()))
    }

    /// The commit-log ``Record``s after ``seq`` up to this view's seq, oldest first.
    fn changes_since<'py>(&self, py: Python<'py>, seq: u64) -> PyResult<Bound<'py, PyList>> {
        self.with(|s| changes_of(py, s, seq))
    }

    /// Ends the view.
    fn close(&self) -> PyResult<()> {
        self.snap
            .lock()
            .map_err(|_| PyValueError::new_err("snapshot lock poisoned"))?
            .take();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }
}

pub(crate) fn entry_of<'py>(
    py: Python<'py>,
    s: &Snapshot,
    unit: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match py.detach(|| s.get(unit)).py(py)? {
        Some(e) => convert::entry(py, &e).map(Some),
        None => Ok(None),
    }
}

pub(crate) fn read_of<'py>(
    py: Python<'py>,
    s: &Snapshot,
    unit: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let bytes = py
        .detach(|| -> oncelake::Result<Option<Vec<u8>>> {
            match s.get(unit)? {
                Some(e) => s.read_object(&e).map(Some),
                None => Ok(None),
            }
        })
        .py(py)?;
    Ok(bytes.map(|b| PyBytes::new(py, &b).into_any()))
}

pub(crate) fn ls_of<'py>(
    py: Python<'py>,
    s: &Snapshot,
    prefix: &str,
) -> PyResult<Bound<'py, PyList>> {
    let entries = py
        .detach(|| s.prefix(prefix)?.collect::<oncelake::Result<Vec<_>>>())
        .py(py)?;
    let list = PyList::empty(py);
    for e in &entries {
        list.append(convert::entry(py, e)?)?;
    }
    Ok(list)
}

pub(crate) fn changes_of<'py>(
    py: Python<'py>,
    s: &Snapshot,
    seq: u64,
) -> PyResult<Bound<'py, PyList>> {
    let records = py
        .detach(|| s.changes_since(seq)?.collect::<oncelake::Result<Vec<_>>>())
        .py(py)?;
    let list = PyList::empty(py);
    for r in &records {
        list.append(convert::record(py, r)?)?;
    }
    Ok(list)
}
