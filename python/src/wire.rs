//! What the Python classes need below them whichever store their calls go to (SPEC R20): a
//! served store's errors as the exceptions an in-process call raises, its handles released on
//! drop, its paged reads; durations from Python; the exception of a lost lease.

use crate::convert::{self, kw, o};
use oncelake_client::{Client, ClientError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::Path;
use std::time::Duration;

/// A duration in seconds from Python, checked.
pub(crate) fn seconds(name: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        PyValueError::new_err(format!(
            "{name} must be a non-negative number of seconds, got {s}"
        ))
    })
}

/// The `Fenced` exception for a lease that was lost before a renewal.
pub(crate) fn lost(py: Python<'_>, l: &oncelake::Lease, newest_token: u64) -> PyErr {
    match kw(py, &[("unit", o(py, l.unit.as_str())), ("outcome", o(py, "fenced")), ("token", o(py, l.token)), ("newest_token", o(py, newest_token))]) {
        Ok(f) => convert::error(
            py,
            "fenced",
            format!("fenced: the lease on {} (token {}) was taken over or released (newest token {newest_token}); stop working on the unit", l.unit, l.token),
            f,
        ),
        Err(e) => e,
    }
}

/// The longest a dropped `Staged` or `Snapshot` waits for the server to release it.
const DROP_TIMEOUT: Duration = Duration::from_secs(5);

/// The client a dropped handle releases what it held on the server with: best effort, and
/// bounded — a server that is gone released it already, and a hung one must not hang the Python
/// object's release (the server's own deadline releases it then).
pub(crate) fn releasing(client: &Client) -> Client {
    client.clone().with_timeout(DROP_TIMEOUT)
}

/// A client error as an oncelake exception: the server's store errors keep their class
/// (`corrupt`, invalid input), the rest is a `StoreError` whose message says what to do.
pub(crate) fn client_err(py: Python<'_>, e: ClientError) -> PyErr {
    // The client's own size and CRC32 check: raised exactly as an in-process read raises it.
    let e = match e {
        ClientError::Damaged(err) => return convert::engine_err(py, err),
        other => other,
    };
    let message = e.to_string();
    let (kind, facts): (&str, Vec<(&str, Bound<'_, PyAny>)>) = match &e {
        ClientError::BadRequest { kind, message } if kind == "seq_out_of_range" => {
            match seq_range(message) {
                // The facts the in-process error carries, read back from the engine's message.
                Some((asked, oldest, newest)) => (
                    "invalid_input",
                    vec![
                        ("asked", o(py, asked)),
                        ("oldest", o(py, oldest)),
                        ("newest", o(py, newest)),
                    ],
                ),
                None => ("invalid_input", vec![("error", o(py, kind.as_str()))]),
            }
        }
        ClientError::BadRequest { kind, .. } => {
            ("invalid_input", vec![("error", o(py, kind.as_str()))])
        }
        ClientError::Store { kind, status, .. } => (
            if kind == "corrupt" {
                "corrupt"
            } else {
                "store_error"
            },
            vec![("error", o(py, kind.as_str())), ("status", o(py, *status))],
        ),
        _ => ("store_error", vec![]),
    };
    match kw(py, &facts) {
        Ok(f) => convert::error(py, kind, message, f),
        Err(err) => err,
    }
}

/// The numbers of the engine's `SeqOutOfRange` message: "seq {asked} is not readable: history is
/// kept from seq {oldest} to {newest}".
fn seq_range(message: &str) -> Option<(u64, u64, u64)> {
    let rest = message.strip_prefix("seq ")?;
    let (asked, rest) = rest.split_once(" is not readable: history is kept from seq ")?;
    let (oldest, newest) = rest.split_once(" to ")?;
    Some((
        asked.parse().ok()?,
        oldest.parse().ok()?,
        newest.trim().parse().ok()?,
    ))
}

/// `Result<T, ClientError>` → `PyResult<T>`.
pub(crate) trait Remote<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> Remote<T> for Result<T, ClientError> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| client_err(py, e))
    }
}

/// The `InvalidInput` error of a handle staged through another store (or in-process while this
/// store goes through a server, or the other way round): the engine's rule that a staged handle
/// belongs to the store that staged it, across the wire.
pub(crate) fn foreign_staged(py: Python<'_>, staged_in: &Path, here: &str) -> PyErr {
    let message = format!(
        "this Staged object was staged through the server of the store {}, not the store {here}; \
         stage it with this store before committing it here. Nothing was committed",
        staged_in.display()
    );
    match kw(py, &[]) {
        Ok(f) => convert::error(py, "invalid_input", message, f),
        Err(e) => e,
    }
}

/// The bytes of a `get` through the server, checked against the entry's size and CRC32 as the
/// engine's `Snapshot::read_object` checks them in-process (a damaged object raises `Corrupt`).
pub(crate) fn checked(
    py: Python<'_>,
    found: Option<oncelake::Entry>,
    bytes: Vec<u8>,
) -> PyResult<Option<Vec<u8>>> {
    match found {
        Some(e) => {
            oncelake::check_object(&e, &bytes).map_err(|err| convert::engine_err(py, err))?;
            Ok(Some(bytes))
        }
        None => Ok(None),
    }
}

/// Every record after `seq`, asked for a page at a time by `page(since, limit)`.
pub(crate) fn every_page<E>(
    seq: u64,
    page: impl Fn(u64, usize) -> Result<Vec<oncelake::log::Record>, E>,
) -> Result<Vec<oncelake::log::Record>, E> {
    const PAGE: usize = 10_000;
    let mut all = Vec::new();
    let mut since = seq;
    loop {
        let page = page(since, PAGE)?;
        let Some(last) = page.last() else { break };
        since = last.seq;
        let full = page.len() == PAGE;
        all.extend(page);
        if !full {
            break;
        }
    }
    Ok(all)
}
