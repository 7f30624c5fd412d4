//! Engine values → Python values (the dataclasses of `oncelake._types`) and engine errors and
//! rejections → the exception classes of `oncelake.errors`, with the CLI's JSON field names. The
//! engine's types give their fields through their wire form (its `serde` feature, the shapes of
//! the HTTP API and of the CLI's `--json`), so one converter ([`fields`]) serves them all; only
//! what Python spells otherwise (a CRC32 as hex text) is set here.

use oncelake::log::{Record, RecordBody};
use oncelake::{Entry, Lease, ObjectMeta, Outcome, UnitOutcome};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::BoundObject;
use serde_json::Value;

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

/// The error of a lock a panicking thread left poisoned (`what` names the lock), for `map_err`.
pub(crate) fn poisoned<G>(what: &'static str) -> impl FnOnce(G) -> PyErr {
    move |_| pyo3::exceptions::PyValueError::new_err(format!("{what} lock poisoned"))
}

/// Drops what a `close()` took out of its handle without holding the GIL: the drop may be a
/// request (a served lease) or a sync (the last handle of a relaxed store).
pub(crate) fn drop_detached<T: Send>(py: Python<'_>, taken: T) -> PyResult<()> {
    py.detach(move || drop(taken));
    Ok(())
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
    raise(py, kind, message, &facts)
}

/// [`error`] with its facts given as keyword pairs.
fn raise(py: Python<'_>, kind: &str, message: String, facts: &[(&str, Bound<'_, PyAny>)]) -> PyErr {
    match kw(py, facts) {
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

/// A JSON value as the Python value `json.loads` would give.
fn py_value<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => o(py, *b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => o(py, u),
            (None, Some(i)) => o(py, i),
            _ => o(py, n.as_f64()),
        },
        Value::String(t) => o(py, t.as_str()),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(py_value(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => fields_of(py, map)?.into_any(),
    })
}

fn fields_of<'py>(
    py: Python<'py>,
    map: &serde_json::Map<String, Value>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in map {
        d.set_item(k, py_value(py, v)?)?;
    }
    Ok(d)
}

/// An engine value as the Python value `json.loads` makes of its wire form,
/// `serde_json::to_string(&value)`: a struct becomes a dict with the keys in its field order.
pub(crate) fn from_wire(
    py: Python<'_>,
    wire: serde_json::Result<String>,
) -> PyResult<Bound<'_, PyAny>> {
    let text = wire.map_err(|e| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "internal: an engine value without its wire form: {e}"
        ))
    })?;
    py.import("json")?.call_method1("loads", (text,))
}

/// The fields of an engine value by its wire form, `serde_json::to_value(&value)` (keyword
/// arguments for [`make`]); an object's CRC32, where it has one, as Python spells it (hex text).
pub(crate) fn fields(
    py: Python<'_>,
    wire: serde_json::Result<Value>,
) -> PyResult<Bound<'_, PyDict>> {
    let d = match wire {
        Ok(Value::Object(map)) => fields_of(py, &map)?,
        other => {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "internal: an engine value without its fields on the wire: {other:?}"
            )))
        }
    };
    if let Some(c) = d.get_item("crc32")? {
        d.set_item("crc32", crc(c.extract()?))?;
    }
    Ok(d)
}

/// The dataclass `name` of an engine value's wire form (see [`fields`]), with `extra` fields
/// set over it: what Python adds to the wire form, or holds as dataclasses where it has dicts.
pub(crate) fn dataclass<'py>(
    py: Python<'py>,
    name: &str,
    wire: serde_json::Result<Value>,
    extra: &[(&str, Bound<'py, PyAny>)],
) -> PyResult<Bound<'py, PyAny>> {
    let args = fields(py, wire)?;
    for (k, v) in extra {
        args.set_item(*k, v)?;
    }
    make(py, name, args)
}

/// [`dataclass`] of each wire form, in a list.
pub(crate) fn dataclasses<'py>(
    py: Python<'py>,
    name: &str,
    wires: impl IntoIterator<Item = serde_json::Result<Value>>,
    extra: &[(&str, Bound<'py, PyAny>)],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for wire in wires {
        list.append(dataclass(py, name, wire, extra)?)?;
    }
    Ok(list)
}

/// Entries as a list of `oncelake.Entry`.
pub(crate) fn entries<'py>(py: Python<'py>, es: &[Entry]) -> PyResult<Bound<'py, PyList>> {
    dataclasses(py, "Entry", es.iter().map(serde_json::to_value), &[])
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
    dataclass(py, "Entry", serde_json::to_value(e), &[])
}

/// A lease as `oncelake.Lease`.
pub(crate) fn lease<'py>(
    py: Python<'py>,
    l: &Lease,
    took_over: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let took_over = ("took_over", o(py, took_over));
    dataclass(py, "Lease", serde_json::to_value(l), &[took_over])
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
    let ent = match entry(py, e) {
        Ok(ent) => ent,
        Err(err) => return err,
    };
    let (version, seq) = (e.source_version, e.seq);
    let message = format!(
        "already done: {unit} is committed at version {version} (seq {seq}); nothing to do"
    );
    let facts = [
        ("unit", o(py, unit)),
        ("outcome", o(py, "already_done")),
        ("source_version", o(py, version)),
        ("seq", o(py, seq)),
        ("entry", ent),
    ];
    raise(py, "already_done", message, &facts)
}

/// The exception for "nothing to do: another worker holds the unit".
pub(crate) fn busy(py: Python<'_>, unit: &str, worker: &str, expires_at_ms: u64) -> PyErr {
    let message =
        format!("busy: {unit} is held by {worker} until {expires_at_ms} ms; try again after that");
    let facts = [
        ("unit", o(py, unit)),
        ("outcome", o(py, "busy")),
        ("worker", o(py, worker)),
        ("expires_at_ms", o(py, expires_at_ms)),
    ];
    raise(py, "busy", message, &facts)
}

/// A unit's outcome: `Ok(Committed | Duplicate)`, or `Err(the rejection)`. `meta` is the staged
/// object's (the outcome names only its hash).
pub(crate) fn outcome<'py>(
    py: Python<'py>,
    u: &UnitOutcome,
    meta: ObjectMeta,
) -> PyResult<Bound<'py, PyAny>> {
    // The wire form has the unit, its version and object, the holder and the outcome with its
    // own fields; Python adds the staged object's size and CRC32 and names two fields its way.
    let f = fields(py, serde_json::to_value(u))?;
    f.set_item("size", meta.size)?;
    f.set_item("crc32", crc(meta.crc32))?;
    f.del_item("holder")?;
    for (wire, name) in [
        ("superseded", "superseded_version"),
        ("winner", "winner_object"),
    ] {
        if let Some(v) = f.get_item(wire)? {
            f.del_item(wire)?;
            f.set_item(name, v)?;
        }
    }
    let (unit, version) = (&u.unit, u.source_version);
    let message = match u.outcome {
        Outcome::Committed { .. } => return make(py, "Committed", f),
        Outcome::Duplicate { .. } => return make(py, "Duplicate", f),
        Outcome::Conflict { winner_seq, winner } => format!(
            "conflict: {unit} @ {version} was already committed with different content (object {winner}, seq {winner_seq}); the first commit wins — use correct() to replace it deliberately"
        ),
        Outcome::Stale { current_version } => format!(
            "stale: {unit} is already at version {current_version}, newer than {version}; nothing changed"
        ),
        Outcome::Fenced { token, newest_token } => format!(
            "fenced: token {token} of {unit} is not the unit's live lease (newest token {newest_token}); another worker took over — drop this output"
        ),
        Outcome::Busy { expires_at_ms } => {
            let worker = u.holder.clone().unwrap_or_default();
            f.set_item("worker", worker.as_str())?;
            format!(
                "busy: {unit} is held by {worker} until {expires_at_ms} ms; commit under its lease's token, or after the lease ends"
            )
        }
        Outcome::Aborted => format!(
            "aborted: {unit} was acceptable but another unit of the all-or-nothing batch was rejected; nothing changed"
        ),
    };
    f.set_item("seq", py.None())?;
    let kind = u.outcome.name();
    Err(error(py, kind, message, f))
}

/// A log record as `oncelake.Record`.
pub(crate) fn record<'py>(py: Python<'py>, r: &Record) -> PyResult<Bound<'py, PyAny>> {
    let (kind, args) = match &r.body {
        RecordBody::Commit { entries } => {
            let list = PyList::empty(py);
            for e in entries {
                list.append(make(py, "LogEntry", fields(py, serde_json::to_value(e))?)?)?;
            }
            ("commit", kw(py, &[("entries", list.into_any())])?)
        }
        RecordBody::ClaimGranted(c) => ("claim_granted", fields(py, serde_json::to_value(c))?),
        RecordBody::ClaimReleased(c) => ("claim_released", fields(py, serde_json::to_value(c))?),
        RecordBody::Extension { tag, .. } => ("extension", kw(py, &[("tag", o(py, *tag))])?),
    };
    args.set_item("seq", r.seq)?;
    args.set_item("time_ms", r.time_ms)?;
    args.set_item("kind", kind)?;
    make(py, "Record", args)
}
