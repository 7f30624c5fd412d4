//! What a caller may hand over as an object's bytes — `bytes`/`bytearray`/`memoryview`, a path
//! (`str` or `os.PathLike`), a binary file object, or an already staged object — for the store to
//! stage with the GIL released. A file object is streamed: the store asks for one buffer at a time
//! and takes the GIL only for each `read()` call, so memory does not grow with the object.

use oncelake::ObjectMeta;
use oncelake::Staged;
use oncelake_client::Client;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyString};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

/// An object staged in a store (durable, published under its content hash) and not yet
/// committed. Pass it to `Store.commit` or as `run.output` of the same store; it is protected
/// from garbage collection while this handle lives. Through a server the handle lives on the
/// server until this object is dropped or the server's staging timeout passes.
#[pyclass(module = "oncelake", name = "Staged", frozen)]
pub struct PyStaged {
    pub(crate) staged: StagedIn,
    meta: ObjectMeta,
}

/// Where a staged object waits for its commit.
#[derive(Clone)]
pub(crate) enum StagedIn {
    /// In this process's engine.
    Local(Staged),
    /// In the server that holds the store.
    Served(Arc<ServedStaged>),
}

/// A staging handle on a server: dropping the last reference drops it there, unpinning its
/// object (a killed process never does; the server's deadline reclaims it then).
pub(crate) struct ServedStaged {
    pub client: Client,
    pub id: u64,
    pub meta: ObjectMeta,
    /// The store it was staged through, for the error of a handle used with another store.
    pub store: PathBuf,
}

impl Drop for ServedStaged {
    fn drop(&mut self) {
        let _ = crate::wire::releasing(&self.client).unstage(self.id);
    }
}

impl PyStaged {
    /// The Python object of `staged`, whose object is `meta`.
    pub(crate) fn new(staged: StagedIn, meta: ObjectMeta) -> Self {
        PyStaged { staged, meta }
    }
}

#[pymethods]
impl PyStaged {
    /// The BLAKE3 content hash, hex.
    #[getter]
    fn object(&self) -> String {
        self.meta.id.to_hex()
    }

    /// The size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.meta.size
    }

    /// The CRC32 of the bytes, 8 hex digits.
    #[getter]
    fn crc32(&self) -> String {
        format!("{:08x}", self.meta.crc32)
    }

    fn __repr__(&self) -> String {
        format!("Staged(object={:?}, size={})", self.object(), self.size())
    }
}

/// An object's bytes, as handed over.
pub(crate) enum Data {
    Bytes(PyBackedBytes),
    Path(PathBuf),
    Reader(PyReader),
    /// A `Staged`: the store that staged it takes it as it is, any other refuses it.
    Staged(StagedIn),
}

impl Data {
    /// Classifies `obj`; anything else is a `TypeError` that says what is accepted.
    pub(crate) fn extract(obj: &Bound<'_, PyAny>) -> PyResult<Data> {
        if let Ok(s) = obj.cast::<PyStaged>() {
            return Ok(Data::Staged(s.get().staged.clone()));
        }
        if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyByteArray>() {
            return Ok(Data::Bytes(obj.extract()?));
        }
        if obj.is_instance_of::<PyMemoryView>() {
            let copy = obj
                .py()
                .import("builtins")?
                .getattr("bytes")?
                .call1((obj,))?;
            return Ok(Data::Bytes(copy.extract()?));
        }
        if obj.is_instance_of::<PyString>() || obj.hasattr("__fspath__")? {
            return Ok(Data::Path(obj.extract()?));
        }
        if obj.hasattr("read")? {
            return Ok(Data::Reader(PyReader {
                file: obj.clone().unbind(),
                error: None,
            }));
        }
        Err(PyTypeError::new_err(format!(
            "an object's data must be bytes, a path (str or os.PathLike), a binary file object or a Staged, not {}",
            obj.get_type().name()?
        )))
    }
}

/// A Python binary file object as a `std::io::Read`: each `read` takes the GIL for one
/// `file.read(n)` call. An exception raised by it is kept and re-raised after staging.
pub(crate) struct PyReader {
    file: Py<PyAny>,
    error: Option<PyErr>,
}

impl PyReader {
    /// The exception a `read()` call raised, if any (taken once).
    pub(crate) fn take_error(&mut self) -> Option<PyErr> {
        self.error.take()
    }
}

impl Read for PyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Python::attach(|py| {
            let result = self
                .file
                .bind(py)
                .call_method1("read", (buf.len(),))
                .and_then(|chunk| copy_chunk(&chunk, buf));
            result.map_err(|e| {
                self.error = Some(e);
                std::io::Error::other("the file object's read() failed")
            })
        })
    }
}

/// Copies one `read()` result into `buf`.
fn copy_chunk(chunk: &Bound<'_, PyAny>, buf: &mut [u8]) -> PyResult<usize> {
    let bytes: &[u8] = if let Ok(b) = chunk.cast::<PyBytes>() {
        b.as_bytes()
    } else if chunk.is_none() {
        // A non-blocking stream with nothing available now: not the end, and waiting is not ours.
        return Err(PyTypeError::new_err(
            "the file object's read() returned None (a non-blocking stream with no data yet); pass a blocking binary file object",
        ));
    } else {
        return Err(PyTypeError::new_err(format!(
            "the file object's read() returned {}, not bytes; open the file in binary mode ('rb')",
            chunk.get_type().name()?
        )));
    };
    if bytes.len() > buf.len() {
        return Err(PyTypeError::new_err(format!(
            "the file object's read({}) returned {} bytes, more than asked",
            buf.len(),
            bytes.len()
        )));
    }
    buf[..bytes.len()].copy_from_slice(bytes);
    Ok(bytes.len())
}

/// A commit item from Python: unit, version, data, fencing token.
pub(crate) type Item<'py> = (String, u64, Bound<'py, PyAny>, Option<u64>);
