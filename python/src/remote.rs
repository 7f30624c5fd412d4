//! The same `Store` calls through `oncelake serve` (SPEC R20): when a server holds the store, the
//! binding talks to it with the server crate's blocking `Client`, which answers with the engine's
//! own types, and converts them exactly as for an in-process store. No rule lives here: the
//! server's engine decides every outcome.

use crate::backend::{foreign_staged, Remote};
use crate::convert::{self, kw};
use crate::data::{Data, ServedStaged};
use oncelake::{CommitReport, ObjectMeta};
use oncelake_client::wire::CommitItemW;
use oncelake_client::{Client, ClientError};
use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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
    items: Vec<crate::data::Item<'_>>,
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
