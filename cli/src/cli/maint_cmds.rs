//! Maintenance commands: gc and verify (SPEC R14, R15, R17).

use super::{exit, parse_duration, print_json, CliError, Heartbeat, Open, Output, Progress};
use oncelake::gc::{GcOptions, GcReport};
use oncelake::verify::{ObjectProblem, Reclaimable, VerifyReport};
use oncelake::UnitStore;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Debug)]
#[command(after_help = super::help::GC)]
pub(crate) struct GcArgs {
    /// The store.
    pub store: PathBuf,
    /// Report what would be removed without removing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Leave staging files whose writer cannot be told younger than this (e.g. 30m, 1h; 0 =
    /// none). Staging files of writers that are gone (a killed put) are removed whatever their age.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub grace: Duration,
    /// Keep history (and its objects) superseded less than this long ago (e.g. 7d; 0 = none).
    #[arg(long, default_value = "7d", value_parser = parse_duration)]
    pub retain: Duration,
    /// Print the report as one JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
#[command(after_help = super::help::VERIFY)]
pub(crate) struct VerifyArgs {
    /// The store.
    pub store: PathBuf,
    /// Also hash every object (BLAKE3) and compare it with its name.
    #[arg(long)]
    pub deep: bool,
    /// Print the report as one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Human-readable byte counts.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub(crate) fn gc<S: UnitStore>(a: &GcArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    let store = open(&a.store)?;
    // GC reports no progress of its own: a heartbeat says it is alive.
    let heartbeat = Heartbeat::start("gc");
    let report = store.gc(GcOptions {
        dry_run: a.dry_run,
        grace: a.grace,
        retain: a.retain,
    });
    drop(heartbeat);
    print_gc(&Output::new(a.json), &a.store, &report?);
    Ok(exit::OK)
}

/// Prints the report of `gc`.
pub(crate) fn print_gc(out: &Output, store: &Path, report: &GcReport) {
    if out.json {
        print_json(&gc_json(report));
        return;
    }
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    outln!(
        "{verb} {} ({}) and {} ({}); {} {}; history readable from seq {}",
        plural(
            report.objects,
            "unreferenced object",
            "unreferenced objects"
        ),
        bytes(report.object_bytes),
        plural(report.staging_files, "staging file", "staging files"),
        bytes(report.staging_bytes),
        if report.dry_run {
            "would prune"
        } else {
            "pruned"
        },
        plural(report.history_rows_pruned, "history row", "history rows"),
        report.history_from,
    );
    outln!(
        "kept {} referenced by entries{}",
        plural(report.objects_referenced, "object", "objects"),
        if report.objects_pinned > 0 {
            format!(
                ", and {} staged for commits in flight",
                plural(report.objects_pinned, "object", "objects")
            )
        } else {
            String::new()
        }
    );
    if report.staging_files_young > 0 {
        outln!(
            "left {} whose writer cannot be told, younger than --grace",
            plural(report.staging_files_young, "staging file", "staging files")
        );
    }
    if report.lake_objects > 0 {
        outln!(
            "{} {} from the lake",
            if report.dry_run {
                "would delete"
            } else {
                "deleted"
            },
            plural(
                report.lake_objects,
                "unreferenced object",
                "unreferenced objects"
            )
        );
    }
    if report.stray_files > 0 {
        errln!(
            "note: {} in objects/ not named like objects were left alone; `oncelake verify {}` lists them",
            plural(report.stray_files, "file", "files"),
            store.display()
        );
    }
}

fn gc_json(r: &GcReport) -> serde_json::Value {
    json!({
        "dry_run": r.dry_run,
        "staging_files": r.staging_files,
        "staging_bytes": r.staging_bytes,
        "staging_files_young": r.staging_files_young,
        "objects": r.objects,
        "object_bytes": r.object_bytes,
        "history_rows_pruned": r.history_rows_pruned,
        "history_from": r.history_from,
        "objects_referenced": r.objects_referenced,
        "objects_pinned": r.objects_pinned,
        "stray_files": r.stray_files,
        "lake_objects": r.lake_objects,
    })
}

pub(crate) fn verify<S: UnitStore>(a: &VerifyArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    let store = open(&a.store)?;
    // Objects checked, as the store (or its server) reports them.
    let progress = Progress::new("verify", "objects", None);
    let report = store.verify_with_progress(a.deep, &mut |done, total| {
        progress.set_total(total);
        progress.update(done);
    });
    progress.finish();
    let report = report?;
    print_verify(&Output::new(a.json), &report);
    Ok(if report.is_ok() {
        exit::OK
    } else {
        exit::VERIFY_PROBLEMS
    })
}

/// Prints the report of `verify`.
pub(crate) fn print_verify(out: &Output, report: &VerifyReport) {
    if out.json {
        print_json(&verify_json(report));
    } else {
        print_verify_text(report);
    }
}

fn problem_json(p: &ObjectProblem) -> serde_json::Value {
    json!({
        "object": p.object.to_hex(),
        "path": p.path.display().to_string(),
        "detail": p.detail,
        "entries": p.units.iter().map(|u| json!({
            "unit": u.unit, "seq": u.seq, "current": u.current,
        })).collect::<Vec<_>>(),
    })
}

fn verify_json(r: &VerifyReport) -> serde_json::Value {
    json!({
        "ok": r.is_ok(),
        "problems": r.problem_count(),
        "deep": r.deep,
        "seq": r.seq,
        "entries_checked": r.entries_checked,
        "objects_checked": r.objects_checked,
        "bytes_checked": r.bytes_checked,
        "log_records": r.replay.records,
        "missing_objects": r.missing.iter().map(problem_json).collect::<Vec<_>>(),
        "corrupt_objects": r.corrupt.iter().map(problem_json).collect::<Vec<_>>(),
        "strays": r.strays.iter().map(|o| json!({
            "path": o.path.display().to_string(), "bytes": o.bytes,
        })).collect::<Vec<_>>(),
        "reclaimable": reclaimable_json(&r.reclaimable),
        "log_problems": r.replay.problems,
        "history_problems": r.history_problems,
        "invariants": r.invariants.iter().map(|v| json!({
            "rule": v.invariant.label(), "name": format!("{:?}", v.invariant), "seen": v.seen,
        })).collect::<Vec<_>>(),
        "affected_units": r.affected_units(),
    })
}

/// Counts and bytes under the names `gc` reports them with, then the files.
fn reclaimable_json(r: &Reclaimable) -> serde_json::Value {
    json!({
        "objects": r.objects.len(),
        "object_bytes": r.object_bytes(),
        "staging_files": r.staging.len(),
        "staging_bytes": r.staging_bytes(),
        "files": r.objects.iter().map(|o| json!({
            "path": o.path.display().to_string(), "bytes": o.bytes, "kind": "object",
        })).chain(r.staging.iter().map(|f| json!({
            "path": f.path.display().to_string(), "bytes": f.bytes, "kind": "staging",
            "owner_gone": f.owner_gone,
        }))).collect::<Vec<_>>(),
    })
}

fn units_text(p: &ObjectProblem) -> String {
    p.units
        .iter()
        .map(|u| {
            if u.current {
                format!("{} (current, seq {})", u.unit, u.seq)
            } else {
                format!("{} (history, seq {})", u.unit, u.seq)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_verify_text(r: &VerifyReport) {
    outln!(
        "checked {} in {} ({}){}; replayed {} against the manifest as of seq {}",
        plural(r.entries_checked, "entry", "entries"),
        plural(r.objects_checked, "object", "objects"),
        bytes(r.bytes_checked),
        if r.deep { ", with BLAKE3" } else { "" },
        plural(r.replay.records, "log record", "log records"),
        r.seq,
    );
    for p in &r.missing {
        outln!(
            "MISSING  {}: {}; affects {}",
            p.object,
            p.detail,
            units_text(p)
        );
    }
    for p in &r.corrupt {
        outln!(
            "CORRUPT  {}: {}; affects {}",
            p.object,
            p.detail,
            units_text(p)
        );
    }
    for o in &r.strays {
        outln!(
            "STRAY    {} ({}) — not an object; remove it by hand if it is not yours",
            o.path.display(),
            bytes(o.bytes)
        );
    }
    for p in &r.replay.problems {
        outln!("LOG      {p}");
    }
    for p in &r.history_problems {
        outln!("HISTORY  {p}");
    }
    for v in &r.invariants {
        outln!("BROKEN   {v}");
    }
    print_reclaimable_text(&r.reclaimable);
    if r.is_ok() {
        outln!("ok: no problems found");
    } else {
        let affected = r.affected_units();
        errln!(
            "verify found {}{}",
            plural(r.problem_count() as u64, "problem", "problems"),
            if affected.is_empty() {
                String::new()
            } else {
                format!(
                    "; affected units: {}",
                    affected.into_iter().collect::<Vec<_>>().join(", ")
                )
            }
        );
        if !r.missing.is_empty() || !r.corrupt.is_empty() {
            errln!(
                "restore the affected objects from a backup, or re-run the work for the affected units and commit a correction"
            );
        }
    }
}

/// One summary line (not a problem), and which files wait for the grace period.
fn print_reclaimable_text(r: &Reclaimable) {
    if r.is_empty() {
        return;
    }
    outln!(
        "reclaimable: {} ({}) and {} ({}); `oncelake gc` removes them",
        plural(
            r.objects.len() as u64,
            "unreferenced object",
            "unreferenced objects"
        ),
        bytes(r.object_bytes()),
        plural(r.staging.len() as u64, "staging file", "staging files"),
        bytes(r.staging_bytes()),
    );
    let unknown = r.staging.iter().filter(|f| !f.owner_gone).count() as u64;
    if unknown > 0 {
        outln!(
            "  of the staging files, {} cannot be told from their names; gc removes those after --grace",
            plural(unknown, "has a writer that", "have writers that")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncelake::invariants::{Invariant, Violation};

    /// A broken invariant is a problem in both outputs: `ok` false, listed under `invariants`
    /// with its label.
    #[test]
    fn verify_reports_a_broken_invariant_in_json() {
        let mut report = VerifyReport::default();
        assert_eq!(verify_json(&report)["invariants"], json!([]));
        report.invariants.push(Violation {
            invariant: Invariant::NoStaleToken,
            seen: "seq 7 committed \"a\" with token 3; newest 4".into(),
        });
        let v = verify_json(&report);
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(v["invariants"][0]["rule"], "I6", "{v}");
        assert_eq!(v["invariants"][0]["name"], "NoStaleToken", "{v}");
        assert!(v["invariants"][0]["seen"]
            .as_str()
            .is_some_and(|s| s.contains("token 3")));
    }
}
