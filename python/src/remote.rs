//! The same `Store` calls through `oncelake serve` (SPEC R20): when a server holds the store, the
//! binding talks to it with the server crate's blocking `Client`, which answers with the engine's
//! own types, and converts them exactly as for an in-process store. No rule lives here: the
//! server's engine decides every outcome.

use crate::convert::{self, kw, o};
use crate::data::Data;
use oncelake::{ClaimOutcome, CommitReport, Lease, ObjectMeta, ReleaseOutcome, RenewOutcome};
use oncelake_server::wire::CommitItemW;
use oncelake_server::{Client, ClientError};
use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::path::Path;
use std::time::Duration;

/// A client error as an oncelake exception: the server's store errors keep their class
/// (`corrupt`, invalid input), the rest is a `StoreError` whose message says what to do.
pub(crate) fn client_err(py: Python<'_>, e: ClientError) -> PyErr {
    let message = e.to_string();
    let (kind, facts): (&str, Vec<(&str, Bound<'_, PyAny>)>) = match &e {
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

/// `Result<T, ClientError>` → `PyResult<T>`.
pub(crate) trait Remote<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> Remote<T> for Result<T, ClientError> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| client_err(py, e))
    }
}

/// The `Locked` exception for a call that does not go through a server yet.
pub(crate) fn not_served_yet(path: &Path, client: &Client) -> PyErr {
    Python::attach(|py| {
        let facts = kw(
            py,
            &[
                ("path", o(py, path.display().to_string())),
                ("server", o(py, client.address())),
            ],
        );
        match facts {
            Ok(f) => convert::error(
                py,
                "locked",
                format!(
                    "the store {} is held by `oncelake serve` ({}) and this call does not go through a server yet \
                     (put, correct, commit, claim, renew, release, run_once, lookup, is_done, entry, get, ls, \
                     changes_since, gc and close do); stop the server to make it in-process, or use one of those",
                    path.display(),
                    client.address()
                ),
                f,
            ),
            Err(e) => e,
        }
    })
}

/// Streams `data` to the server and commits it as `unit` at `version` (fenced by `token`).
pub(crate) fn put<'py>(
    py: Python<'py>,
    client: &Client,
    unit: &str,
    version: u64,
    data: Data,
    token: Option<u64>,
    correct: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (u, meta) = upload(py, data, |input| {
        client.put_reader(unit, version, token, correct, input)
    })?;
    convert::outcome(py, &u, meta)
}

/// `Store.commit` through the server: each item's data is streamed into the server's staging,
/// then the handles are committed in one batch (all-or-nothing unless `partial`). The report and
/// each item's staged metadata, in order.
pub(crate) fn commit(
    py: Python<'_>,
    client: &Client,
    items: Vec<crate::store::Item<'_>>,
    partial: bool,
) -> PyResult<(CommitReport, Vec<ObjectMeta>)> {
    let mut wire = Vec::with_capacity(items.len());
    let mut metas = Vec::with_capacity(items.len());
    for (unit, version, data, token) in items {
        let (staged, meta) = upload(py, Data::extract(&data)?, |input| {
            client.stage_reader(input)
        })?;
        metas.push(meta);
        wire.push(CommitItemW {
            unit,
            source_version: version,
            staged,
            token,
            correct: false,
        });
    }
    let report = py.detach(|| client.commit(wire, partial)).py(py)?;
    Ok((report, metas))
}

/// Runs `send` over a reader of `data`, without the GIL (a file object takes it per `read`).
fn upload<T: Send>(
    py: Python<'_>,
    data: Data,
    send: impl FnOnce(&mut dyn std::io::Read) -> Result<T, ClientError> + Send,
) -> PyResult<T> {
    match data {
        Data::Bytes(b) => py.detach(|| send(&mut &b[..])).py(py),
        Data::Path(p) => {
            let mut f = std::fs::File::open(&p).map_err(|e| {
                PyFileNotFoundError::new_err((
                    e.raw_os_error().unwrap_or(2),
                    format!("{} is not a readable file ({e}); pass a file path, bytes or a binary file object", p.display()),
                ))
            })?;
            py.detach(|| send(&mut f)).py(py)
        }
        Data::Reader(mut r) => {
            let sent = py.detach(|| send(&mut r));
            // A failed read() is the caller's exception, not the client's.
            if let Some(e) = r.take_error() {
                return Err(e);
            }
            sent.py(py)
        }
        Data::Staged(_) => Err(pyo3::exceptions::PyTypeError::new_err(
            "a Staged object belongs to an in-process store; through a server pass bytes, a path or a binary file object",
        )),
    }
}

/// `Store.claim` through the server.
pub(crate) fn claim<'py>(
    py: Python<'py>,
    client: &Client,
    unit: &str,
    version: u64,
    worker: &str,
    ttl: Duration,
) -> PyResult<Bound<'py, PyAny>> {
    match py
        .detach(|| client.claim(unit, version, worker, ttl))
        .py(py)?
    {
        ClaimOutcome::Granted { lease, took_over } => convert::lease(py, &lease, took_over),
        ClaimOutcome::Held {
            worker,
            expires_at_ms,
        } => Err(convert::busy(py, unit, &worker, expires_at_ms)),
        ClaimOutcome::AlreadyDone(e) => Err(convert::already_done(py, unit, &e)),
    }
}

/// `Store.renew` through the server.
pub(crate) fn renew<'py>(
    py: Python<'py>,
    client: &Client,
    l: &Lease,
    ttl: Duration,
) -> PyResult<Bound<'py, PyAny>> {
    match py.detach(|| client.renew(l, ttl)).py(py)? {
        RenewOutcome::Renewed(new) => convert::lease(py, &new, false),
        RenewOutcome::Lost { newest_token } => Err(crate::store::lost(py, l, newest_token)),
    }
}

/// `Store.release` through the server.
pub(crate) fn release(py: Python<'_>, client: &Client, l: &Lease) -> PyResult<bool> {
    let outcome = py.detach(|| client.release(l)).py(py)?;
    Ok(outcome == ReleaseOutcome::Released)
}

/// `Store.entry` through the server.
pub(crate) fn entry<'py>(
    py: Python<'py>,
    client: &Client,
    unit: &str,
    at: Option<u64>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match py.detach(|| client.get(unit, at)).py(py)? {
        Some(e) => convert::entry(py, &e).map(Some),
        None => Ok(None),
    }
}

/// `Store.get` through the server.
pub(crate) fn get<'py>(
    py: Python<'py>,
    client: &Client,
    unit: &str,
    at: Option<u64>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let mut bytes = Vec::new();
    let found = py
        .detach(|| client.read_object(unit, at, &mut bytes))
        .py(py)?;
    Ok(found.map(|_| PyBytes::new(py, &bytes).into_any()))
}

/// `Store.ls` through the server.
pub(crate) fn ls<'py>(
    py: Python<'py>,
    client: &Client,
    prefix: &str,
    at: Option<u64>,
) -> PyResult<Bound<'py, PyList>> {
    let mut entries = Vec::new();
    py.detach(|| {
        client.ls(prefix, at, |e| {
            entries.push(e);
            true
        })
    })
    .py(py)?;
    let list = PyList::empty(py);
    for e in &entries {
        list.append(convert::entry(py, e)?)?;
    }
    Ok(list)
}

/// `Store.changes_since` through the server: every record after `seq`, page by page.
pub(crate) fn changes_since<'py>(
    py: Python<'py>,
    client: &Client,
    seq: u64,
) -> PyResult<Bound<'py, PyList>> {
    const PAGE: usize = 10_000;
    let records = py
        .detach(|| -> Result<Vec<oncelake::log::Record>, ClientError> {
            let mut all = Vec::new();
            let mut since = seq;
            loop {
                let (page, _) = client.changes_since(since, Duration::ZERO, PAGE)?;
                let Some(last) = page.last() else { break };
                since = last.seq;
                let full = page.len() == PAGE;
                all.extend(page);
                if !full {
                    break;
                }
            }
            Ok(all)
        })
        .py(py)?;
    let list = PyList::empty(py);
    for r in &records {
        list.append(convert::record(py, r)?)?;
    }
    Ok(list)
}
