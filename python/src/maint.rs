//! Garbage collection and verification reports (SPEC R14, R15) as the dataclasses of
//! `oncelake._types`, with the field names of `oncelake gc --json` and `oncelake verify --json`.

use crate::convert::{dataclass, dataclasses, fields, kw, make, o};
use oncelake::verify::{ObjectProblem, Reclaimable};
use oncelake::{GcReport, VerifyReport};
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde_json::to_value;

/// A `GcReport` as `oncelake.GcReport`: its wire fields (those of `oncelake gc --json`) but for
/// the lake's object count, which the dataclass has never carried.
pub(crate) fn gc_report<'py>(py: Python<'py>, r: &GcReport) -> PyResult<Bound<'py, PyAny>> {
    let args = fields(py, serde_json::to_value(r))?;
    args.del_item("lake_objects")?;
    make(py, "GcReport", args)
}

/// A `VerifyReport` as `oncelake.VerifyReport`.
pub(crate) fn verify_report<'py>(py: Python<'py>, r: &VerifyReport) -> PyResult<Bound<'py, PyAny>> {
    let problems = |ps: &[ObjectProblem]| -> PyResult<Bound<'py, PyAny>> {
        let list = PyList::empty(py);
        for p in ps {
            // The units as `UnitRef`s rather than the plain dicts of the wire form.
            let units = dataclasses(py, "UnitRef", p.units.iter().map(to_value), &[])?.into_any();
            list.append(dataclass(
                py,
                "ObjectProblem",
                to_value(p),
                &[("units", units)],
            )?)?;
        }
        Ok(list.into_any())
    };
    let strays = dataclasses(py, "StrayFile", r.strays.iter().map(to_value), &[])?.into_any();
    let invariants = PyList::empty(py);
    for v in &r.invariants {
        let args = kw(
            py,
            &[
                ("rule", o(py, v.invariant.label())),
                ("name", o(py, format!("{:?}", v.invariant))),
                ("seen", o(py, v.seen.as_str())),
            ],
        )?;
        invariants.append(make(py, "InvariantViolation", args)?)?;
    }
    let args = kw(
        py,
        &[
            ("ok", o(py, r.is_ok())),
            ("problems", o(py, r.problem_count())),
            ("deep", o(py, r.deep)),
            ("seq", o(py, r.seq)),
            ("entries_checked", o(py, r.entries_checked)),
            ("objects_checked", o(py, r.objects_checked)),
            ("bytes_checked", o(py, r.bytes_checked)),
            ("log_records", o(py, r.replay.records)),
            ("missing", problems(&r.missing)?),
            ("corrupt", problems(&r.corrupt)?),
            ("strays", strays),
            ("reclaimable", reclaimable(py, &r.reclaimable)?),
            ("log_problems", o(py, r.replay.problems.clone())),
            ("history_problems", o(py, r.history_problems.clone())),
            ("invariants", invariants.into_any()),
            (
                "affected_units",
                o(py, r.affected_units().into_iter().collect::<Vec<_>>()),
            ),
        ],
    )?;
    make(py, "VerifyReport", args)
}

/// Counts and bytes under the names `gc` reports them with, then the files (objects first).
fn reclaimable<'py>(py: Python<'py>, r: &Reclaimable) -> PyResult<Bound<'py, PyAny>> {
    let objects = r.objects.iter().map(|f| (to_value(f), "object"));
    let staging = r.staging.iter().map(|f| (to_value(f), "staging"));
    let files = PyList::empty(py);
    for (wire, kind) in objects.chain(staging) {
        files.append(dataclass(
            py,
            "ReclaimableFile",
            wire,
            &[("kind", o(py, kind))],
        )?)?;
    }
    let args = kw(
        py,
        &[
            ("objects", o(py, r.objects.len())),
            ("object_bytes", o(py, r.object_bytes())),
            ("staging_files", o(py, r.staging.len())),
            ("staging_bytes", o(py, r.staging_bytes())),
            ("files", files.into_any()),
        ],
    )?;
    make(py, "Reclaimable", args)
}
