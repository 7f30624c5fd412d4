//! `oncelake-bench stage` (SPEC P4) run tiny: no timing is asserted (speed is measured, not
//! tested), only that both systems wrote what the plan says, alternating round by round, that
//! the summary is the ratio of the medians it printed, and that nothing is left behind.

use crate::support;

use serde_json::Value;
use std::collections::BTreeMap;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `oncelake-bench stage` tiny (sizes 4 KiB and 10,000 bytes, 3 rounds of 64 KiB, 3
/// threads): its JSON rows. Every run's files, the stores and the probe file are gone after it.
fn run_stage() -> Vec<Value> {
    let (out, scratch) = support::bench_in_scratch(&[
        "stage",
        "--threads",
        "3",
        "--sizes",
        "4KiB,10000",
        "--rounds",
        "3",
        "--bytes",
        "64KiB",
        "--seconds",
        "1h",
        "--json",
    ]);
    let rows = support::json_lines(&out);
    support::nothing_left_in(scratch.path());
    rows
}

/// The model: per size, 3 rounds of raw then oncelake, each run the objects the byte limit
/// allows (rounded up to whole objects), every byte counted.
fn runs_are_the_models(runs: &[&Value]) {
    let mut expected = Vec::new();
    for (size, objects) in [(4096u64, 16u64), (10000, 7)] {
        for round in 1..=3u64 {
            for system in ["raw", "oncelake"] {
                expected.push((size, round, system.to_string(), objects, objects * size));
            }
        }
    }
    let seen: Vec<(u64, u64, String, u64, u64)> = runs
        .iter()
        .map(|r| {
            (
                r["object_size"].as_u64().unwrap(),
                r["round"].as_u64().unwrap(),
                r["system"].as_str().unwrap().to_string(),
                r["objects_written"].as_u64().unwrap(),
                r["bytes_written"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, expected);
}

/// A run's rate by (object size, round, system).
type ByRound = BTreeMap<(u64, u64, String), f64>;

/// Every run's threads, commit groups (oncelake: 1..=objects, raw: none) and rate (its bytes
/// over its seconds); the rates by run.
fn every_run_reports_its_rate(runs: &[&Value]) -> ByRound {
    let mut by_round = ByRound::new();
    for r in runs {
        assert_eq!(r["threads"], 3);
        let objects = r["objects_written"].as_u64().unwrap();
        match r["system"].as_str().unwrap() {
            "raw" => assert!(r["commit_groups"].is_null()),
            _ => {
                let groups = r["commit_groups"].as_u64().unwrap();
                assert!((1..=objects).contains(&groups), "{groups} groups");
            }
        }
        let secs = r["seconds"].as_f64().unwrap();
        let rate = r["mib_per_s"].as_f64().unwrap();
        let bytes = r["bytes_written"].as_f64().unwrap();
        assert!((rate - bytes / 1048576.0 / secs).abs() <= rate * 1e-9);
        by_round.insert(
            (
                r["object_size"].as_u64().unwrap(),
                r["round"].as_u64().unwrap(),
                r["system"].as_str().unwrap().into(),
            ),
            rate,
        );
    }
    by_round
}

/// Each size's summary: the median rates of both systems, their ratio, and the median of the
/// rounds' ratios, recomputed from the runs.
fn summaries_recompute_from_the_runs(summaries: &[&Value], by_round: &ByRound) {
    assert_eq!(summaries.len(), 2);
    for s in summaries {
        let size = s["object_size"].as_u64().unwrap();
        let rates = |system: &str| -> Vec<f64> {
            (1..=3u64)
                .map(|k| by_round[&(size, k, system.to_string())])
                .collect()
        };
        let raw = median(rates("raw"));
        let ours = median(rates("oncelake"));
        assert_eq!(s["raw_mib_per_s"].as_f64().unwrap(), raw);
        assert_eq!(s["oncelake_mib_per_s"].as_f64().unwrap(), ours);
        let ratio = s["ratio_vs_raw"].as_f64().unwrap();
        assert!((ratio - ours / raw).abs() <= ratio * 1e-9);
        let per_round = median(
            (1..=3u64)
                .map(|k| {
                    by_round[&(size, k, "oncelake".to_string())]
                        / by_round[&(size, k, "raw".to_string())]
                })
                .collect(),
        );
        let by_rounds = s["round_ratio_median"].as_f64().unwrap();
        assert!((by_rounds - per_round).abs() <= per_round * 1e-9);
    }
}

#[test]
fn bench_stage_writes_the_planned_objects_for_both_systems_and_reports_their_ratio() {
    let rows = run_stage();
    let probes = rows.iter().filter(|r| r["probe"].is_string()).count();
    assert_eq!(probes, 2, "a disk probe before and after");
    let runs: Vec<&Value> = rows.iter().filter(|r| r["system"].is_string()).collect();
    let summaries: Vec<&Value> = rows
        .iter()
        .filter(|r| r["ratio_vs_raw"].is_number())
        .collect();
    runs_are_the_models(&runs);
    let by_round = every_run_reports_its_rate(&runs);
    summaries_recompute_from_the_runs(&summaries, &by_round);
}

#[test]
fn a_missing_bench_dir_is_created_and_a_file_in_its_place_is_refused_with_what_to_do() {
    let base = tempfile::tempdir().unwrap();
    let missing = base.path().join("not/yet/there");
    let run = |dir: &std::path::Path| {
        support::oncelake_bench()
            .args([
                "stage",
                "--threads",
                "1",
                "--sizes",
                "4KiB",
                "--rounds",
                "1",
                "--bytes",
                "8KiB",
                "--json",
                "--dir",
            ])
            .arg(dir)
            .output()
            .unwrap()
    };
    let out = run(&missing);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(missing.is_dir(), "--dir was not created");
    assert_eq!(
        std::fs::read_dir(&missing).unwrap().count(),
        0,
        "the bench left scratch files behind"
    );

    let file = base.path().join("a-file");
    std::fs::write(&file, b"keep me").unwrap();
    let out = run(&file);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"], "usage", "{err}");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("is not a directory"), "{msg}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"keep me",
        "the file was touched"
    );
}
