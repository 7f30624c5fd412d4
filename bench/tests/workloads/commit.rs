//! `oncelake-bench commit` (SPEC P1) run tiny: no timing is asserted (speed is measured, not
//! tested), only that every system commits the units the plan asks, as many per commit as
//! `--units-per-commit` says, and that a bad count is refused with what to do; `--apply-on-writers`
//! runs the same plan; `--read-probe` reports its reads.

use crate::support;

use serde_json::Value;

fn bench_commit(extra: &[&str]) -> std::process::Output {
    bench_commit_for(60, "60s", extra)
}

/// A run of `commits` units or `seconds`, whichever ends first.
fn bench_commit_for(commits: usize, seconds: &str, extra: &[&str]) -> std::process::Output {
    let scratch = tempfile::tempdir().unwrap();
    support::oncelake_bench()
        .args(["commit", "--preload", "2000", "--threads", "1,3"])
        .args(["--commits", &commits.to_string(), "--seconds", seconds])
        .args(["--json", "-q", "--dir"])
        .arg(scratch.path())
        .args(extra)
        .output()
        .unwrap()
}

/// The per-system JSON lines of a run that must have succeeded.
fn system_lines(out: std::process::Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l.get("system").is_some())
        .collect()
}

#[test]
fn every_system_commits_the_planned_units_several_to_a_commit() {
    let out = bench_commit(&["--units-per-commit", "4"]);
    let lines = system_lines(out);
    assert_eq!(lines.len(), 4 * 2, "four systems at two thread counts");
    for l in &lines {
        assert_eq!(l["units_per_commit"], 4, "{l}");
        // 60 units in commits of 4: exactly 15 commits' worth, whatever the threads.
        assert_eq!(l["units"], 60, "{l}");
    }
    // oncelake's groups carry whole commits: at least 4 units each; its own thread applied them.
    for l in &lines {
        if l["system"] == "oncelake" {
            assert!(l["mean_group"].as_f64().unwrap() >= 4.0, "{l}");
            assert_eq!(l["applier_thread"], true, "{l}");
        } else {
            assert!(l["applier_thread"].is_null(), "{l}");
        }
    }
}

#[test]
fn zero_units_per_commit_is_refused_with_what_to_do() {
    let out = bench_commit(&["--units-per-commit", "0", "--systems", "oncelake"]);
    support::usage_error(&out, &["--units-per-commit must be at least 1"]);
}

/// `--apply-on-writers` (the writers apply the backlog, `Options::background_apply` off) opens the
/// store without its applier thread and runs the same plan to the end: every unit committed and,
/// since the sustained rate counts until the backlog is applied, applied.
#[test]
fn the_writers_can_apply_the_backlog_instead_of_the_applier_thread() {
    let out = bench_commit(&["--apply-on-writers", "--systems", "oncelake"]);
    let lines = system_lines(out);
    assert_eq!(lines.len(), 2, "oncelake at two thread counts");
    for l in &lines {
        assert_eq!(l["applier_thread"], false, "the writers applied: {l}");
        assert_eq!(l["units"], 60, "{l}");
        assert!(l["sustained_units_per_s"].as_f64().unwrap() > 0.0, "{l}");
    }
}

/// `--read-probe` times reads during oncelake's run (one every 20 ms, so a run of a second has
/// several) and reports them; without it, and for the baselines, the fields are null.
#[test]
fn the_read_probe_reports_reads_made_during_the_run() {
    let lines = system_lines(bench_commit_for(
        1_000_000,
        "1s",
        &["--read-probe", "--systems", "oncelake,redb_txn_per_commit"],
    ));
    assert_eq!(lines.len(), 2 * 2, "two systems at two thread counts");
    for l in &lines {
        if l["system"] != "oncelake" {
            assert!(l["reads"].is_null() && l["read_p50_us"].is_null(), "{l}");
            continue;
        }
        let reads = l["reads"].as_u64().unwrap();
        assert!(reads >= 5, "a read every 20 ms for a second: {l}");
        let q = |k: &str| l[k].as_u64().unwrap();
        assert!(q("read_p50_us") <= q("read_p99_us"), "{l}");
        assert!(q("read_p99_us") <= q("read_max_us"), "{l}");
    }
    for l in &system_lines(bench_commit(&["--systems", "oncelake"])) {
        assert!(l["reads"].is_null() && l["read_max_us"].is_null(), "{l}");
    }
}
