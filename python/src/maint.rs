//! Garbage collection and verification reports (SPEC R14, R15) as the dataclasses of
//! `oncelake._types`, with the field names of `oncelake gc --json` and `oncelake verify --json`.

use crate::convert::{kw, make, o};
use oncelake::verify::{ObjectProblem, Reclaimable};
use oncelake::{GcReport, VerifyReport};
use pyo3::prelude::*;
use pyo3::types::PyList;

/// A `GcReport` as `oncelake.GcReport`.
pub(crate) fn gc_report<'py>(py: Python<'py>, r: &GcReport) -> PyResult<Bound<'py, PyAny>> {
    let args = kw(
        py,
        &[
            ("dry_run", o(py, r.dry_run)),
            ("staging_files", o(py, r.staging_files)),
            ("staging_bytes", o(py, r.staging_bytes)),
            ("staging_files_young", o(py, r.staging_files_young)),
            ("objects", o(py, r.objects)),
            ("object_bytes", o(py, r.object_bytes)),
            ("history_rows_pruned", o(py, r.history_rows_pruned)),
            ("history_from", o(py, r.history_from)),
            ("objects_referenced", o(py, r.objects_referenced)),
            ("objects_pinned", o(py, r.objects_pinned)),
            ("stray_files", o(py, r.stray_files)),
        ],
    )?;
    make(py, "GcReport", args)
}

/// A `VerifyReport` as `oncelake.VerifyReport`.
pub(crate) fn verify_report<'py>(py: Python<'py>, r: &VerifyReport) -> PyResult<Bound<'py, PyAny>> {
    let problems = |ps: &[ObjectProblem]| -> PyResult<Bound<'py, PyAny>> {
        let list = PyList::empty(py);
        for p in ps {
            list.append(object_problem(py, p)?)?;
        }
        Ok(list.into_any())
    };
    let strays = PyList::empty(py);
    for s in &r.strays {
        let args = kw(
            py,
            &[
                ("path", o(py, s.path.display().to_string())),
                ("bytes", o(py, s.bytes)),
            ],
        )?;
        strays.append(make(py, "StrayFile", args)?)?;
    }
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
            ("strays", strays.into_any()),
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

fn object_problem<'py>(py: Python<'py>, p: &ObjectProblem) -> PyResult<Bound<'py, PyAny>> {
    let units = PyList::empty(py);
    for u in &p.units {
        let args = kw(
            py,
            &[
                ("unit", o(py, u.unit.as_str())),
                ("seq", o(py, u.seq)),
                ("current", o(py, u.current)),
            ],
        )?;
        units.append(make(py, "UnitRef", args)?)?;
    }
    let args = kw(
        py,
        &[
            ("object", o(py, p.object.to_hex())),
            ("path", o(py, p.path.display().to_string())),
            ("detail", o(py, p.detail.as_str())),
            ("units", units.into_any()),
        ],
    )?;
    make(py, "ObjectProblem", args)
}

/// Counts and bytes under the names `gc` reports them with, then the files.
fn reclaimable<'py>(py: Python<'py>, r: &Reclaimable) -> PyResult<Bound<'py, PyAny>> {
    let files = PyList::empty(py);
    for f in &r.objects {
        let args = kw(
            py,
            &[
                ("path", o(py, f.path.display().to_string())),
                ("bytes", o(py, f.bytes)),
                ("kind", o(py, "object")),
            ],
        )?;
        files.append(make(py, "ReclaimableFile", args)?)?;
    }
    for f in &r.staging {
        let args = kw(
            py,
            &[
                ("path", o(py, f.path.display().to_string())),
                ("bytes", o(py, f.bytes)),
                ("kind", o(py, "staging")),
                ("owner_gone", o(py, f.owner_gone)),
            ],
        )?;
        files.append(make(py, "ReclaimableFile", args)?)?;
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
