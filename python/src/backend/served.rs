//! The same `Store` calls through `oncelake serve` (SPEC R20): when a server holds the store, the
//! binding talks to it with the server crate's blocking `Client`, which answers with the engine's
//! own types, and converts them exactly as for an in-process store. No rule lives here: the
//! server's engine decides every outcome.

use super::{Backing, Claimed, Committed, Items, PutData, RunSpec, Staging, Stats};
use crate::convert::{self, kw};
use crate::data::{Data, Item, PyStaged, ServedStaged, StagedIn};
use crate::snapshot::{PySnapshot, View};
use crate::submit::{InFlight, PyCommitHandle};
use crate::wire::{self, foreign_staged, Remote};
use oncelake::log::Record;
use oncelake::{
    ClaimOutcome, CommitReport, Entry, Lease, ObjectId, ObjectMeta, RenewOutcome, UnitStore,
};
use oncelake_client::wire::CommitItemW;
use oncelake_client::{Client, ClientError, SnapshotLease};
use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

impl Backing for Client {
    fn raise(py: Python<'_>, e: ClientError) -> PyErr {
        wire::client_err(py, e)
    }

    fn server_address(&self) -> Option<String> {
        Some(self.address())
    }

    fn bound_lake(&self) -> Option<String> {
        None
    }

    fn stage_data(&self, py: Python<'_>, data: Data, to: &Staging<'_>) -> PyResult<PyStaged> {
        stage(py, self, to.path, data, to.ttl)
    }

    fn put_data<'py>(&self, py: Python<'py>, put: PutData<'_>) -> PyResult<Bound<'py, PyAny>> {
        put_unit(py, self, put)
    }

    fn commit_items(&self, py: Python<'_>, items: Items<'_>) -> PyResult<Committed> {
        commit(py, self, items.items, items.partial)
    }

    /// The commit is made at the call: the handle is answered already.
    fn submit_items(&self, py: Python<'_>, items: Items<'_>) -> PyResult<PyCommitHandle> {
        let (report, metas) = commit(py, self, items.items, items.partial)?;
        Ok(PyCommitHandle::new(
            Box::new(Answered(report)),
            metas,
            items.partial,
        ))
    }

    /// A view held by the server as a lease.
    fn open_snapshot(&self, py: Python<'_>, at: Option<u64>) -> PyResult<PySnapshot> {
        let lease = py.detach(|| self.snapshot_open(at, None)).py(py)?;
        Ok(PySnapshot::new(ServedView {
            client: self.clone(),
            lease,
        }))
    }

    fn prometheus_text(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| self.metrics_text()).py(py)
    }

    fn stats_now(&self, py: Python<'_>) -> PyResult<Stats> {
        let s = py.detach(|| self.stats()).py(py)?;
        Ok(Stats {
            units: s.units,
            last_seq: s.seq,
            metrics: s.metrics(),
            server: Some(s.server.to_string()),
        })
    }

    /// A claim through the server; the output is then a fenced write under its token.
    fn begin_unit(&self, py: Python<'_>, r: &RunSpec<'_>) -> PyResult<Box<dyn Claimed>> {
        let claimed = py
            .detach(|| self.claim(r.unit, r.version, r.worker, r.ttl))
            .py(py)?;
        let (worker, until_ms) = match claimed {
            ClaimOutcome::Granted { lease, .. } => {
                let (client, unit, version) = (self.clone(), r.unit.to_string(), r.version);
                return Ok(Box::new(ServedRun {
                    client,
                    lease,
                    unit,
                    version,
                }));
            }
            ClaimOutcome::AlreadyDone(e) => return Err(convert::already_done(py, r.unit, &e)),
            ClaimOutcome::Held {
                worker,
                expires_at_ms,
            } => (worker, expires_at_ms),
        };
        Err(convert::busy(py, r.unit, &worker, until_ms))
    }
}

/// A commit through a server: answered before `submit` returned.
struct Answered(CommitReport);

impl InFlight for Answered {
    fn is_done(&self) -> bool {
        true
    }

    fn answer(
        self: Box<Self>,
        _py: Python<'_>,
        _timeout: Option<Duration>,
    ) -> Result<PyResult<CommitReport>, Box<dyn InFlight>> {
        Ok(Ok(self.0))
    }
}

/// A unit claimed through the server: its lease, and what its output is committed as.
struct ServedRun {
    client: Client,
    lease: Lease,
    unit: String,
    version: u64,
}

impl Claimed for ServedRun {
    fn lease(&self) -> &Lease {
        &self.lease
    }

    fn renew(&mut self, py: Python<'_>, ttl: Duration) -> PyResult<RenewOutcome> {
        let r = py.detach(|| self.client.renew(&self.lease, ttl)).py(py);
        if let Ok(RenewOutcome::Renewed(new)) = &r {
            self.lease = new.clone();
        }
        r
    }

    fn abandon(self: Box<Self>, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.client.release(&self.lease))
            .py(py)
            .map(drop)
    }

    fn commit<'py>(self: Box<Self>, py: Python<'py>, data: Data) -> PyResult<Bound<'py, PyAny>> {
        // The fenced write of coordinator mode: the server's engine checks the token.
        let put = PutData {
            unit: &self.unit,
            version: self.version,
            data,
            token: Some(self.lease.token),
            correct: false,
        };
        let out = put_unit(py, &self.client, put);
        if out.is_err() {
            // As a dropped engine run does: give the lease back so another worker may retry.
            let _ = py.detach(|| self.client.release(&self.lease));
        }
        out
    }
}

/// A snapshot lease on the server; dropping the last reference closes it there.
struct ServedView {
    client: Client,
    lease: SnapshotLease,
}

impl Drop for ServedView {
    fn drop(&mut self) {
        let _ = wire::releasing(&self.client).snapshot_close(self.lease.id);
    }
}

impl View for ServedView {
    /// Both as the server told them when the lease was opened.
    fn seqs(&self) -> (u64, u64) {
        (self.lease.seq, self.lease.history_from)
    }

    fn entry(&self, py: Python<'_>, unit: &str) -> PyResult<Option<Entry>> {
        py.detach(|| self.client.snapshot_get(self.lease.id, unit))
            .py(py)
    }

    fn read(&self, py: Python<'_>, unit: &str) -> PyResult<Option<Vec<u8>>> {
        let mut bytes = Vec::new();
        let found = py
            .detach(|| {
                self.client
                    .snapshot_read_object(self.lease.id, unit, &mut bytes)
            })
            .py(py)?;
        wire::checked(py, found, bytes)
    }

    fn ls(&self, py: Python<'_>, prefix: &str) -> PyResult<Vec<Entry>> {
        let mut entries = Vec::new();
        py.detach(|| {
            self.client.snapshot_ls(self.lease.id, prefix, |e| {
                entries.push(e);
                true
            })
        })
        .py(py)?;
        Ok(entries)
    }

    fn object_path(&self, py: Python<'_>, id: &ObjectId) -> PyResult<PathBuf> {
        py.detach(|| self.client.snapshot_object_path(self.lease.id, id))
            .py(py)
    }

    fn changes_since(&self, py: Python<'_>, seq: u64) -> PyResult<Vec<Record>> {
        py.detach(|| {
            wire::every_page(seq, |since, limit| {
                self.client.snapshot_changes(self.lease.id, since, limit)
            })
        })
        .py(py)
    }
}

/// `Store.stage` through the server: the data streamed into the server's staging; the handle.
fn stage(
    py: Python<'_>,
    client: &Client,
    store: &Path,
    data: Data,
    ttl: Option<Duration>,
) -> PyResult<PyStaged> {
    if let Data::Staged(StagedIn::Served(s)) = data {
        // Staging a staged object again is the same handle, as in-process.
        check_same(py, client, &s)?;
        let meta = s.meta;
        return Ok(PyStaged::new(StagedIn::Served(s), meta));
    }
    let (id, meta) = upload(py, data, |input| client.stage_reader_for(input, ttl))?;
    let handle = ServedStaged {
        client: client.clone(),
        id,
        meta,
        store: store.to_path_buf(),
    };
    Ok(PyStaged::new(StagedIn::Served(Arc::new(handle)), meta))
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
fn put_unit<'py>(
    py: Python<'py>,
    client: &Client,
    put: PutData<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    let PutData {
        unit,
        version,
        data,
        token,
        correct,
    } = put;
    if let Data::Staged(StagedIn::Served(s)) = &data {
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
fn commit(
    py: Python<'_>,
    client: &Client,
    items: Vec<Item<'_>>,
    partial: bool,
) -> PyResult<(CommitReport, Vec<ObjectMeta>)> {
    let mut wire = Vec::with_capacity(items.len());
    let mut metas = Vec::with_capacity(items.len());
    let mut uploaded = Vec::new();
    let mut kept = false;
    let result = (|| {
        for (unit, version, data, token) in items {
            let (staged, meta) = match Data::extract(&data)? {
                Data::Staged(StagedIn::Served(s)) => {
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
        Data::Staged(_) => {
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
