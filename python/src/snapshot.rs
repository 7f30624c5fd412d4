//! `oncelake.Snapshot`: a consistent read-only view as of one seq (SPEC R7), and the reads the
//! store's own `get`/`entry`/`ls`/`changes_since` make through a one-off view.

use crate::backend::Remote;
use crate::convert::{self, drop_detached, poisoned, Py2};
use oncelake::Snapshot;
use oncelake_client::{Client, SnapshotLease};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
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
    view: Mutex<Option<View>>,
}

/// Where the view is held.
#[derive(Clone)]
enum View {
    Local(Arc<Snapshot>, oncelake::Store),
    Served(Arc<ServedView>),
}

impl View {
    /// The view's seq and the oldest seq a view can still be taken as of (the engine's snapshot
    /// knows both; a served lease was told them when it was opened).
    fn seqs(&self) -> (u64, u64) {
        match self {
            View::Local(s, _) => (s.seq(), s.history_from()),
            View::Served(s) => (s.lease.seq, s.lease.history_from),
        }
    }
}

/// A snapshot lease on the server; dropping the last reference closes it there.
struct ServedView {
    client: Client,
    lease: SnapshotLease,
}

impl Drop for ServedView {
    fn drop(&mut self) {
        let _ = crate::backend::releasing(&self.client).snapshot_close(self.lease.id);
    }
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
            view: Mutex::new(Some(View::Local(
                Arc::new(Self::take(py, store, at)?),
                store.clone(),
            ))),
        })
    }

    /// A view held by the server as a lease.
    pub(crate) fn open_served(py: Python<'_>, client: &Client, at: Option<u64>) -> PyResult<Self> {
        let lease = py.detach(|| client.snapshot_open(at, None)).py(py)?;
        Ok(PySnapshot {
            view: Mutex::new(Some(View::Served(Arc::new(ServedView {
                client: client.clone(),
                lease,
            })))),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&View) -> PyResult<T>) -> PyResult<T> {
        let view = self.view.lock().map_err(poisoned("snapshot"))?.clone();
        match view {
            Some(v) => f(&v),
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
        self.with(|v| match v {
            View::Local(s, _) => entry_of(py, s, unit),
            View::Served(s) => match py
                .detach(|| s.client.snapshot_get(s.lease.id, unit))
                .py(py)?
            {
                Some(e) => convert::entry(py, &e).map(Some),
                None => Ok(None),
            },
        })
    }

    /// The unit's object bytes in this view (size and CRC32 checked), or ``None``.
    fn get<'py>(&self, py: Python<'py>, unit: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.with(|v| match v {
            View::Local(s, _) => read_of(py, s, unit),
            View::Served(s) => {
                let mut bytes = Vec::new();
                let found = py
                    .detach(|| s.client.snapshot_read_object(s.lease.id, unit, &mut bytes))
                    .py(py)?;
                crate::backend::checked(py, found, &bytes)
            }
        })
    }

    /// The entries whose unit starts with ``prefix``, in key order.
    #[pyo3(signature = (prefix = ""))]
    fn ls<'py>(&self, py: Python<'py>, prefix: &str) -> PyResult<Bound<'py, PyList>> {
        self.with(|v| match v {
            View::Local(s, _) => ls_of(py, s, prefix),
            View::Served(s) => {
                let mut entries = Vec::new();
                py.detach(|| {
                    s.client.snapshot_ls(s.lease.id, prefix, |e| {
                        entries.push(e);
                        true
                    })
                })
                .py(py)?;
                convert::entries(py, &entries)
            }
        })
    }

    /// The path of an entry's object: an immutable, read-only file (stream it yourself).
    fn object_path(&self, py: Python<'_>, entry: &Bound<'_, PyAny>) -> PyResult<String> {
        let hex: String = entry.getattr("object")?.extract()?;
        let id: oncelake::ObjectId = hex.parse().map_err(|_| {
            PyValueError::new_err(format!("{hex:?} is not an object hash (64 hex digits)"))
        })?;
        self.with(|v| match v {
            View::Local(_, store) => Ok(store.object_path(&id).display().to_string()),
            View::Served(s) => py
                .detach(|| s.client.snapshot_object_path(s.lease.id, &id))
                .py(py)
                .map(|p| p.display().to_string()),
        })
    }

    /// The commit-log ``Record``s after ``seq`` up to this view's seq, oldest first.
    fn changes_since<'py>(&self, py: Python<'py>, seq: u64) -> PyResult<Bound<'py, PyList>> {
        self.with(|v| match v {
            View::Local(s, _) => changes_of(py, s, seq),
            View::Served(s) => crate::backend::every_record(py, seq, |since, limit| {
                s.client.snapshot_changes(s.lease.id, since, limit)
            }),
        })
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
    convert::entries(py, &entries)
}

pub(crate) fn changes_of<'py>(
    py: Python<'py>,
    s: &Snapshot,
    seq: u64,
) -> PyResult<Bound<'py, PyList>> {
    let records = py
        .detach(|| s.changes_since(seq)?.collect::<oncelake::Result<Vec<_>>>())
        .py(py)?;
    convert::records(py, &records)
}
