//! `oncelake.Snapshot`: a consistent read-only view as of one seq (SPEC R7), over the [`View`]
//! of whichever store took it.

use crate::convert::{self, drop_detached, poisoned};
use oncelake::log::Record;
use oncelake::{Entry, ObjectId};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A consistent read-only view of the store as of one seq: it sees every commit up to ``seq``
/// and nothing of any later one. Use it as a context manager or call ``close()``; while it is
/// open, garbage collection keeps every object it can read. Through a server the view is a lease
/// on the server, ended by ``close()`` (or when this object is dropped), or when it was not read
/// for the server's snapshot TTL (10 minutes; each read renews it).
#[pyclass(module = "oncelake", name = "Snapshot", frozen)]
pub struct PySnapshot {
    // Shared, not borrowed under the lock: a read releases the GIL, and a lock held across that
    // would deadlock against another thread that holds the GIL and waits for the lock.
    view: Mutex<Option<Arc<dyn View>>>,
}

/// A view as of one seq, wherever it is held: the engine's snapshot in-process, a lease on the
/// server. Each read answers with the engine's types; `PySnapshot` converts them once.
pub(crate) trait View: Send + Sync {
    /// The view's seq and the oldest seq a view can still be taken as of.
    fn seqs(&self) -> (u64, u64);

    /// The unit's entry in this view.
    fn entry(&self, py: Python<'_>, unit: &str) -> PyResult<Option<Entry>>;

    /// The unit's object bytes in this view, size and CRC32 checked.
    fn read(&self, py: Python<'_>, unit: &str) -> PyResult<Option<Vec<u8>>>;

    /// The entries whose unit starts with `prefix`, in key order.
    fn ls(&self, py: Python<'_>, prefix: &str) -> PyResult<Vec<Entry>>;

    /// The path of the object `id`.
    fn object_path(&self, py: Python<'_>, id: &ObjectId) -> PyResult<PathBuf>;

    /// The commit-log records after `seq` up to this view's seq.
    fn changes_since(&self, py: Python<'_>, seq: u64) -> PyResult<Vec<Record>>;
}

impl PySnapshot {
    /// The Python object of `view`.
    pub(crate) fn new(view: impl View + 'static) -> Self {
        PySnapshot {
            view: Mutex::new(Some(Arc::new(view))),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&dyn View) -> PyResult<T>) -> PyResult<T> {
        let view = self.view.lock().map_err(poisoned("snapshot"))?.clone();
        match view {
            Some(v) => f(&*v),
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
        self.with(|v| Ok(v.seqs().0))
    }

    /// The oldest seq a view can still be taken as of.
    #[getter]
    fn history_from(&self) -> PyResult<u64> {
        self.with(|v| Ok(v.seqs().1))
    }

    /// The unit's ``Entry`` in this view, or ``None``.
    fn entry<'py>(&self, py: Python<'py>, unit: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.with(|v| v.entry(py, unit))? {
            Some(e) => convert::entry(py, &e).map(Some),
            None => Ok(None),
        }
    }

    /// The unit's object bytes in this view (size and CRC32 checked), or ``None``.
    fn get<'py>(&self, py: Python<'py>, unit: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let bytes = self.with(|v| v.read(py, unit))?;
        Ok(bytes.map(|b| PyBytes::new(py, &b)))
    }

    /// The entries whose unit starts with ``prefix``, in key order.
    #[pyo3(signature = (prefix = ""))]
    fn ls<'py>(&self, py: Python<'py>, prefix: &str) -> PyResult<Bound<'py, PyList>> {
        convert::entries(py, &self.with(|v| v.ls(py, prefix))?)
    }

    /// The path of an entry's object: an immutable, read-only file (stream it yourself).
    fn object_path(&self, py: Python<'_>, entry: &Bound<'_, PyAny>) -> PyResult<String> {
        let hex: String = entry.getattr("object")?.extract()?;
        let id: ObjectId = hex.parse().map_err(|_| {
            PyValueError::new_err(format!("{hex:?} is not an object hash (64 hex digits)"))
        })?;
        let path = self.with(|v| v.object_path(py, &id))?;
        Ok(path.display().to_string())
    }

    /// The commit-log ``Record``s after ``seq`` up to this view's seq, oldest first.
    fn changes_since<'py>(&self, py: Python<'py>, seq: u64) -> PyResult<Bound<'py, PyList>> {
        convert::records(py, &self.with(|v| v.changes_since(py, seq))?)
    }

    /// Ends the view (through a server: closes its lease there).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.view.lock().map_err(poisoned("snapshot"))?.take();
        drop_detached(py, taken)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}
