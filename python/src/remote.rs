//! The same `Store` calls through `oncelake serve` (SPEC R20): when a server holds the store, the
//! binding talks to it with the server crate's blocking `Client`, which answers with the engine's
//! own types, and converts them exactly as for an in-process store. No rule lives here: the
//! server's engine decides every outcome.

use crate::convert::{self, kw, o};
use crate::data::{Data, ServedStaged};
use oncelake::{CommitReport, ObjectMeta};
use oncelake_client::wire::CommitItemW;
use oncelake_client::{Client, ClientError};
use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The longest a dropped `Staged` or `Snapshot` waits for the server to release it.
pub(crate) const DROP_TIMEOUT: Duration = Duration::from_secs(5);

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

/// `Store.stage` through the server: the data streamed into the server's staging; the handle.
pub(crate) fn stage(
    py: Python<'_>,
    client: &Client,
    store: &Path,
    data: Data,
    ttl: Option<Duration>,
) -> PyResult<crate::data::PyStaged> {
    if let Data::ServedStaged(s) = data {
        // Staging a staged object again is the same handle, as in-process.
        check_same(py, client, &s)?;
        return Ok(crate::data::PyStaged {
            staged: crate::data::StagedIn::Served(s),
        });
    }
    let (id, meta) = upload(py, data, |input| client.stage_reader_for(input, ttl))?;
    Ok(crate::data::PyStaged {
        staged: crate::data::StagedIn::Served(Arc::new(ServedStaged {
            client: client.clone(),
            id,
            meta,
            store: store.to_path_buf(),
        })),
    })
}

/// Refuses a handle that another server issued.
fn check_same(py: Python<'_>, client: &Client, s: &ServedStaged) -> PyResult<()> {
    if s.client.address() == client.address() {
        Ok(())
    } else {
        let here = format!("served at {}", client.address());
        Err(foreign_staged(py, &s.store, &here))
    }
}

/// Streams `data` to the server and commits it as `unit` at `version` (fenced by `token`); a
/// `Staged` of this store is committed by its handle.
pub(crate) fn put<'py>(
    py: Python<'py>,
    client: &Client,
    unit: &str,
    version: u64,
    data: Data,
    token: Option<u64>,
    correct: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if let Data::ServedStaged(s) = &data {
        check_same(py, client, s)?;
        let item = CommitItemW {
            unit: unit.to_string(),
            source_version: version,
            staged: s.id,
            token,
            correct,
        };
        // The handle stays: the Python object owns it, as an engine `Staged` is reusable.
        let report = py
            .detach(|| client.commit_with(vec![item], false, true))
            .py(py)?;
        let u = report.units.first().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err(
                "the server answered a commit without its unit",
            )
        })?;
        return convert::outcome(py, u, s.meta);
    }
    let (u, meta) = upload(py, data, |input| {
        client.put_reader(unit, version, token, correct, input)
    })?;
    convert::outcome(py, &u, meta)
}

/// `Store.commit` through the server: each item's data is streamed into the server's staging
/// (a `Staged` of this store is named by its handle), then the handles are committed in one
/// batch (all-or-nothing unless `partial`). The handles uploaded for this commit are dropped
/// afterwards, whatever happened; a `Staged`'s stays with its Python object. The report and
/// each item's staged metadata, in order.
pub(crate) fn commit(
    py: Python<'_>,
    client: &Client,
    items: Vec<crate::store::Item<'_>>,
    partial: bool,
) -> PyResult<(CommitReport, Vec<ObjectMeta>)> {
    let mut wire = Vec::with_capacity(items.len());
    let mut metas = Vec::with_capacity(items.len());
    let mut uploaded = Vec::new();
    let mut kept = false;
    let result = (|| {
        for (unit, version, data, token) in items {
            let (staged, meta) = match Data::extract(&data)? {
                Data::ServedStaged(s) => {
                    check_same(py, client, &s)?;
                    kept = true;
                    (s.id, s.meta)
                }
                other => {
                    let (id, meta) =
                        upload(py, other, |input| client.stage_reader_for(input, None))?;
                    uploaded.push(id);
                    (id, meta)
                }
            };
            metas.push(meta);
            wire.push(CommitItemW {
                unit,
                source_version: version,
                staged,
                token,
                correct: false,
            });
        }
        py.detach(|| client.commit_with(wire, partial, kept)).py(py)
    })();
    if kept || result.is_err() {
        // Without kept handles the server dropped them with the commit.
        py.detach(|| {
            for id in &uploaded {
                let _ = client.unstage(*id);
            }
        });
    }
    Ok((result?, metas))
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
        Data::Staged(_) | Data::ServedStaged(_) => {
            let message = "this Staged object was staged in-process by another opening of the store, \
                 not through its server; stage it with this store (store.stage) before committing it \
                 here. Nothing was committed";
            Err(match kw(py, &[]) {
                Ok(f) => convert::error(py, "invalid_input", message.to_string(), f),
                Err(e) => e,
            })
        }
    }
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
    checked(py, found, &bytes)
}

/// The bytes of a `get` through the server, checked against the entry's size and CRC32 as the
/// engine's `Snapshot::read_object` checks them in-process (a damaged object raises `Corrupt`).
pub(crate) fn checked<'py>(
    py: Python<'py>,
    found: Option<oncelake::Entry>,
    bytes: &[u8],
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match found {
        Some(e) => {
            oncelake::check_object(&e, bytes).map_err(|err| convert::engine_err(py, err))?;
            Ok(Some(PyBytes::new(py, bytes).into_any()))
        }
        None => Ok(None),
    }
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
    convert::entries(py, &entries)
}

/// `Store.changes_since` through the server: every record after `seq`, page by page.
pub(crate) fn changes_since<'py>(
    py: Python<'py>,
    client: &Client,
    seq: u64,
) -> PyResult<Bound<'py, PyList>> {
    every_record(py, seq, |since, limit| {
        Ok(client.changes_since(since, Duration::ZERO, limit)?.0)
    })
}

/// Every record after `seq`, read through the server a page at a time by `page(since, limit)`
/// (of the store or of a snapshot lease), as a list of `oncelake.Record`.
pub(crate) fn every_record<'py>(
    py: Python<'py>,
    seq: u64,
    page: impl Fn(u64, usize) -> Result<Vec<oncelake::log::Record>, ClientError> + Sync,
) -> PyResult<Bound<'py, PyList>> {
    const PAGE: usize = 10_000;
    let records = py
        .detach(|| -> Result<Vec<oncelake::log::Record>, ClientError> {
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
        })
        .py(py)?;
    convert::records(py, &records)
}

/// `Store.reconcile` through the server: the (unit, version) pairs streamed as a JSON-lines
/// listing, planned by the server's engine (a full listing in any order is sorted there first,
/// as in-process), the plan rebuilt from its answer.
pub(crate) fn reconcile(
    py: Python<'_>,
    client: &Client,
    pairs: &[(String, u64)],
    full: bool,
    list_up_to_date: bool,
) -> PyResult<oncelake::reconcile::Plan> {
    use oncelake::reconcile::{ListingFormat, Plan};
    use oncelake_client::{PlanEnd, PlanEvent, ReconcileForm};
    let mut listing = Vec::new();
    for (unit, version) in pairs {
        let line = serde_json::json!({ "unit": unit, "version": version });
        listing.extend_from_slice(line.to_string().as_bytes());
        listing.push(b'\n');
    }
    let tmp = std::env::temp_dir();
    let form = ReconcileForm {
        changes_only: !full,
        format: ListingFormat::JsonLines,
        list_up_to_date,
        sort_in: full.then(|| std::path::absolute(&tmp).unwrap_or(tmp)),
    };
    let mut units = Vec::new();
    let end = py
        .detach(|| {
            client.reconcile(&mut &listing[..], &form, |event| {
                if let PlanEvent::Item(item) = event {
                    units.push(item.into());
                }
                true
            })
        })
        .py(py)?;
    match end {
        PlanEnd::Complete(summary) => Ok(Plan { units, summary }),
        PlanEnd::BadListing { message, .. } => Err(match kw(py, &[]) {
            Ok(f) => convert::error(py, "invalid_input", message, f),
            Err(e) => e,
        }),
        PlanEnd::Stopped => Err(pyo3::exceptions::PyRuntimeError::new_err(
            "internal error: the reconcile answer stopped early; please report it",
        )),
    }
}
