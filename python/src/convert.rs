//! Engine values → Python values (the dataclasses of `oncelake._types`) and engine errors and
//! rejections → the exception classes of `oncelake.errors`, with the CLI's JSON field names.

use oncelake::log::{Record, RecordBody};
use oncelake::{Entry, Lease, ObjectMeta, Outcome, UnitOutcome};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::BoundObject;

/// Keyword arguments, built in order.
pub(crate) fn kw<'py>(
    py: Python<'py>,
    items: &[(&str, Bound<'py, PyAny>)],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in items {
        d.set_item(*k, v)?;
    }
    Ok(d)
}

/// Converts anything convertible into a Python object (shorthand for the tables below).
pub(crate) fn o<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> Bound<'py, PyAny> {
    match v.into_pyobject(py) {
        Ok(b) => b.into_any().into_bound(),
        // Invariant: the values converted here (ints, strings, options, lists) always convert.
        Err(_) => py.None().into_bound(py),
    }
}

/// Calls the dataclass `name` of `oncelake._types` with keyword arguments.
pub(crate) fn make<'py>(
    py: Python<'py>,
    name: &str,
    args: Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    py.import("oncelake._types")?
        .getattr(name)?
        .call((), Some(&args))
}

/// Builds the exception of `kind` (see `oncelake.errors._make`).
pub(crate) fn error(
    py: Python<'_>,
    kind: &str,
    message: String,
    facts: Bound<'_, PyDict>,
) -> PyErr {
    let built = py
        .import("oncelake.errors")
        .and_then(|m| m.getattr("_make"))
        .and_then(|f| f.call1((kind, message, facts)));
    match built {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// Maps an engine error onto its exception class; the engine's message says what to do.
pub(crate) fn engine_err(py: Python<'_>, e: oncelake::Error) -> PyErr {
    use oncelake::Error as E;
    let message = e.to_string();
    let (kind, facts): (&str, Vec<(&str, Bound<'_, PyAny>)>) = match &e {
        E::Locked { path } => ("locked", vec![("path", o(py, path.display().to_string()))]),
        E::Corrupt { path, detail } => (
            "corrupt",
            vec![
                ("path", o(py, path.display().to_string())),
                ("detail", o(py, detail.as_str())),
            ],
        ),
        E::InvalidKey { key, reason } => (
            "invalid_input",
            vec![("key", o(py, key.as_str())), ("reason", o(py, *reason))],
        ),
        E::SeqOutOfRange {
            asked,
            oldest,
            newest,
        } => (
            "invalid_input",
            vec![
                ("asked", o(py, *asked)),
                ("oldest", o(py, *oldest)),
                ("newest", o(py, *newest)),
            ],
        ),
        E::NotAStore { path, .. } | E::NewerFormat { path, .. } | E::OlderFormat { path, .. } => (
            "invalid_input",
            vec![("path", o(py, path.display().to_string()))],
        ),
        E::InvalidRequest(_) => ("invalid_input", vec![]),
        E::MissingObject { object, unit } => (
            "store_error",
            vec![
                ("object", o(py, object.as_str())),
                ("unit", o(py, unit.as_str())),
            ],
        ),
        E::Forked {
            path,
            opened_by,
            this,
        } => (
            "store_error",
            vec![
                ("path", o(py, path.display().to_string())),
                ("opened_by", o(py, *opened_by)),
                ("this", o(py, *this)),
            ],
        ),
        _ => ("store_error", vec![]),
    };
    match kw(py, &facts) {
        Ok(f) => error(py, kind, message, f),
        Err(err) => err,
    }
}

/// `Result<T, oncelake::Error>` → `PyResult<T>`.
pub(crate) trait Py2<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> Py2<T> for oncelake::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| engine_err(py, e))
    }
}

fn crc(c: u32) -> String {
    format!("{c:08x}")
}

/// Entries as a list of `oncelake.Entry`.
pub(crate) fn entries<'py>(py: Python<'py>, es: &[Entry]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for e in es {
        list.append(entry(py, e)?)?;
    }
    Ok(list)
}

/// Log records as a list of `oncelake.Record`.
pub(crate) fn records<'py>(py: Python<'py>, rs: &[Record]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for r in rs {
        list.append(record(py, r)?)?;
    }
    Ok(list)
}

/// An entry as `oncelake.Entry`.
pub(crate) fn entry<'py>(py: Python<'py>, e: &Entry) -> PyResult<Bound<'py, PyAny>> {
    let args = kw(
        py,
        &[
            ("unit", o(py, e.unit.as_str())),
            ("source_version", o(py, e.source_version)),
            ("revision", o(py, e.revision)),
            ("object", o(py, e.object.id.to_hex())),
            ("size", o(py, e.object.size)),
            ("crc32", o(py, crc(e.object.crc32))),
            ("seq", o(py, e.seq)),
            ("committed_at_ms", o(py, e.committed_at_ms)),
        ],
    )?;
    make(py, "Entry", args)
}

/// A lease as `oncelake.Lease`.
pub(crate) fn lease<'py>(
    py: Python<'py>,
    l: &Lease,
    took_over: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let args = kw(
        py,
        &[
            ("unit", o(py, l.unit.as_str())),
            ("worker", o(py, l.worker.as_str())),
            ("token", o(py, l.token)),
            ("source_version", o(py, l.source_version)),
            ("expires_at_ms", o(py, l.expires_at_ms)),
            ("took_over", o(py, took_over)),
        ],
    )?;
    make(py, "Lease", args)
}

/// A Python `Lease` (or anything with its attributes) as the engine's lease.
pub(crate) fn lease_from(l: &Bound<'_, PyAny>) -> PyResult<Lease> {
    Ok(Lease {
        unit: l.getattr("unit")?.extract()?,
        worker: l.getattr("worker")?.extract()?,
        token: l.getattr("token")?.extract()?,
        source_version: l.getattr("source_version")?.extract()?,
        expires_at_ms: l.getattr("expires_at_ms")?.extract()?,
    })
}

/// The exception for "nothing to do: already done".
pub(crate) fn already_done(py: Python<'_>, unit: &str, e: &Entry) -> PyErr {
    let facts = entry(py, e).and_then(|ent| {
        kw(
            py,
            &[
                ("unit", o(py, unit)),
                ("outcome", o(py, "already_done")),
                ("source_version", o(py, e.source_version)),
                ("seq", o(py, e.seq)),
                ("entry", ent),
            ],
        )
    });
    match facts {
        Ok(f) => error(
            py,
            "already_done",
            format!(
                "already done: {unit} is committed at version {} (seq {}); nothing to do",
                e.source_version, e.seq
            ),
            f,
        ),
        Err(err) => err,
    }
}

/// The exception for "nothing to do: another worker holds the unit".
pub(crate) fn busy(py: Python<'_>, unit: &str, worker: &str, expires_at_ms: u64) -> PyErr {
    match kw(
        py,
        &[
            ("unit", o(py, unit)),
            ("outcome", o(py, "busy")),
            ("worker", o(py, worker)),
            ("expires_at_ms", o(py, expires_at_ms)),
        ],
    ) {
        Ok(f) => error(
            py,
            "busy",
            format!(
                "busy: {unit} is held by {worker} until {expires_at_ms} ms; try again after that"
            ),
            f,
        ),
        Err(err) => err,
    }
}

/// A unit's outcome: `Ok(Committed | Duplicate)`, or `Err(the rejection)`. `meta` is the staged
/// object's (the outcome names only its hash).
pub(crate) fn outcome<'py>(
    py: Python<'py>,
    u: &UnitOutcome,
    meta: ObjectMeta,
) -> PyResult<Bound<'py, PyAny>> {
    let mut f = vec![
        ("unit", o(py, u.unit.as_str())),
        ("source_version", o(py, u.source_version)),
        ("object", o(py, u.object.to_hex())),
        ("size", o(py, meta.size)),
        ("crc32", o(py, crc(meta.crc32))),
    ];
    let (kind, message) = match u.outcome {
        Outcome::Committed { seq, revision, superseded } => {
            f.extend([
                ("seq", o(py, seq)),
                ("revision", o(py, revision)),
                ("superseded_version", o(py, superseded)),
            ]);
            return make(py, "Committed", kw(py, &f)?);
        }
        Outcome::Duplicate { seq } => {
            f.push(("seq", o(py, seq)));
            return make(py, "Duplicate", kw(py, &f)?);
        }
        Outcome::Conflict { winner_seq, winner } => {
            f.extend([("winner_seq", o(py, winner_seq)), ("winner_object", o(py, winner.to_hex()))]);
            ("conflict", format!(
                "conflict: {} @ {} was already committed with different content (object {winner}, seq {winner_seq}); the first commit wins — use correct() to replace it deliberately",
                u.unit, u.source_version
            ))
        }
        Outcome::Stale { current_version } => {
            f.push(("current_version", o(py, current_version)));
            ("stale", format!(
                "stale: {} is already at version {current_version}, newer than {}; nothing changed",
                u.unit, u.source_version
            ))
        }
        Outcome::Fenced { token, newest_token } => {
            f.extend([("token", o(py, token)), ("newest_token", o(py, newest_token))]);
            ("fenced", format!(
                "fenced: token {token} of {} is not the unit's live lease (newest token {newest_token}); another worker took over — drop this output",
                u.unit
            ))
        }
        Outcome::Busy { expires_at_ms } => {
            let worker = u.holder.clone().unwrap_or_default();
            f.extend([("worker", o(py, worker.as_str())), ("expires_at_ms", o(py, expires_at_ms))]);
            ("busy", format!(
                "busy: {} is held by {worker} until {expires_at_ms} ms; commit under its lease's token, or after the lease ends",
                u.unit
            ))
        }
        Outcome::Aborted => ("aborted", format!(
            "aborted: {} was acceptable but another unit of the all-or-nothing batch was rejected; nothing changed",
            u.unit
        )),
    };
    f.extend([("outcome", o(py, kind)), ("seq", py.None().into_bound(py))]);
    Err(error(py, kind, message, kw(py, &f)?))
}

/// A log record as `oncelake.Record`.
pub(crate) fn record<'py>(py: Python<'py>, r: &Record) -> PyResult<Bound<'py, PyAny>> {
    let mut f = vec![("seq", o(py, r.seq)), ("time_ms", o(py, r.time_ms))];
    match &r.body {
        RecordBody::Commit { entries } => {
            let list = PyList::empty(py);
            for e in entries {
                let args = kw(
                    py,
                    &[
                        ("unit", o(py, e.unit.as_str())),
                        ("source_version", o(py, e.source_version)),
                        ("revision", o(py, e.revision)),
                        ("object", o(py, e.object.id.to_hex())),
                        ("size", o(py, e.object.size)),
                        ("crc32", o(py, crc(e.object.crc32))),
                        ("token", o(py, e.token)),
                    ],
                )?;
                list.append(make(py, "LogEntry", args)?)?;
            }
            f.extend([("kind", o(py, "commit")), ("entries", list.into_any())]);
        }
        RecordBody::ClaimGranted(c) | RecordBody::ClaimReleased(c) => {
            let kind = if matches!(r.body, RecordBody::ClaimGranted(_)) {
                "claim_granted"
            } else {
                "claim_released"
            };
            f.extend([
                ("kind", o(py, kind)),
                ("unit", o(py, c.unit.as_str())),
                ("worker", o(py, c.worker.as_str())),
                ("token", o(py, c.token)),
                ("source_version", o(py, c.source_version)),
                ("expires_at_ms", o(py, c.expires_at_ms)),
            ]);
        }
        RecordBody::Extension { tag, .. } => {
            f.extend([("kind", o(py, "extension")), ("tag", o(py, *tag))]);
        }
    }
    make(py, "Record", kw(py, &f)?)
}
