//! Whole pipelines worked to the end: diamond invalidation is transitive and nothing else reruns;
//! concurrent workers run every cell exactly once.

use super::{assert_replays, completions_in_log, diamond, open, output_of, OkRuns, Runs};
use oncelake::log::RecordBody;
use oncelake::pipeline::{self, cell, CellState, Pipeline, StaleReason, WorkOptions};
use oncelake::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Runs the pipeline to the end with one worker, counting runs per (unit, stage).
fn drain(p: &Pipeline, store: &Store) -> Runs {
    let mut runs = Runs::new();
    p.work(store, "w", |c| {
        *runs.entry((c.unit.clone(), c.stage.clone())).or_insert(0) += 1;
        Ok(output_of(store, c))
    })
    .unwrap();
    runs
}

#[test]
fn diamond_invalidation_is_transitive_and_nothing_else_reruns() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let p1 = Pipeline::new(diamond(1));
    for u in ["u1", "u2", "u3"] {
        p1.set_source_version(&store, u, 1, u.as_bytes()).unwrap();
    }
    assert_eq!(drain(&p1, &store).len(), 12);

    // A new source version of u2 re-runs all four stages of u2, nothing of u1 or u3.
    p1.set_source_version(&store, "u2", 2, b"u2 v2").unwrap();
    let e = p1.explain(&store, "u2").unwrap();
    for c in &e.cells {
        assert_eq!(
            c.stale,
            Some(StaleReason::NewerSource {
                completed: 1,
                current: 2
            }),
            "{c}"
        );
    }
    assert!(p1
        .explain(&store, "u1")
        .unwrap()
        .cells
        .iter()
        .all(|c| c.stale.is_none() && c.state.name() == "done"));
    let runs = drain(&p1, &store);
    let expect: Runs = ["a", "b", "c", "d"]
        .iter()
        .map(|s| (("u2".to_string(), s.to_string()), 1))
        .collect();
    assert_eq!(runs, expect);
    assert_eq!(store.metrics().pipeline_cells_invalidated, 4);

    // b's code version changes: b and d re-run for every unit; a and c do not.
    let p2 = Pipeline::new(diamond(2));
    let e = p2.explain(&store, "u1").unwrap();
    let by: HashMap<_, _> = e.cells.iter().map(|c| (c.stage.as_str(), c)).collect();
    assert_eq!(by["a"].state.name(), "done");
    assert_eq!(by["c"].state.name(), "done");
    assert_eq!(
        by["b"].stale,
        Some(StaleReason::CodeChanged { from: 1, to: 2 })
    );
    assert_eq!(by["b"].state.name(), "ready");
    assert_eq!(by["d"].stale, Some(StaleReason::UpstreamRerun));
    assert!(matches!(&by["d"].state, CellState::Blocked { upstream, .. } if upstream == "b"));
    let runs = drain(&p2, &store);
    let mut expect = Runs::new();
    for u in ["u1", "u2", "u3"] {
        expect.insert((u.into(), "b".into()), 1);
        expect.insert((u.into(), "d".into()), 1);
    }
    assert_eq!(runs, expect);
    // d re-ran from b's new output: its object differs from the one under the old lineage.
    // The definition change is in the log with its reason.
    let st = pipeline::recorded_state(&store).unwrap();
    assert_eq!(st.definition.as_ref().unwrap().1, p2.def().to_text());
    let mut reasons = Vec::new();
    for rec in store.snapshot().unwrap().changes_since(0).unwrap() {
        if let RecordBody::Extension { tag, data } = rec.unwrap().body {
            if tag == cell::TAG_DEFINITION {
                reasons.push(cell::DefinitionRecord::decode(&data).unwrap().reason);
            }
        }
    }
    assert_eq!(
        reasons,
        [
            "first definition",
            "code version of b 1 -> 2; invalidates b, d"
        ]
    );

    // Going back to b's old code version finds its old cells complete: nothing runs.
    let runs = drain(&p1, &store);
    assert!(runs.is_empty(), "{runs:?}");
    assert_replays(&store);
}

#[test]
fn workers_drain_a_large_pipeline_exactly_once() {
    // 10,000 in the issue; the default keeps this test under ~20 s in debug on a loaded
    // 2-core machine (~10 ms per cell there). ONCELAKE_PIPELINE_UNITS=10000 runs it in full.
    let units: usize = crate::common::env_or("ONCELAKE_PIPELINE_UNITS", 300);
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let p = Pipeline::new(diamond(1));
    let names: Vec<String> = (0..units).map(|i| format!("unit/{i:05}")).collect();
    let listing: Vec<(&str, u64, &[u8])> =
        names.iter().map(|u| (u.as_str(), 1, &b""[..])).collect();
    assert!(pipeline::set_source_versions(&store, &listing)
        .unwrap()
        .applied());
    // (unit, stage, version) → stage runs that returned an output.
    let ok_runs: Arc<Mutex<OkRuns>> = Arc::default();
    let started = std::time::Instant::now();
    let reports: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|w| {
                let (store, p, ok_runs) = (store.clone(), p.clone(), ok_runs.clone());
                s.spawn(move || {
                    let opts = WorkOptions {
                        wait_for_running: true,
                        ..WorkOptions::default()
                    };
                    p.work_with(&store, &format!("w{w}"), &opts, |c| {
                        // Injected failure: about 1 in 7 cells fails its first attempt.
                        let h = blake3::hash(c.key.as_bytes()).as_bytes()[0];
                        if c.attempts == 0 && h.is_multiple_of(7) {
                            return Err("injected".into());
                        }
                        *ok_runs
                            .lock()
                            .unwrap()
                            .entry((c.unit.clone(), c.stage.clone(), c.source_version))
                            .or_insert(0) += 1;
                        Ok(format!("{}:{}", c.key, c.source_version).into_bytes())
                    })
                    .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let latency = store.metrics().commit_latency_us;
    eprintln!(
        "{units} units x 4 stages drained by 4 workers in {:?}: {}, commit latency p50 {} us p99 {} us",
        started.elapsed(),
        crate::common::groups_line(&store),
        latency.quantile(0.5),
        latency.quantile(0.99),
    );
    let ok_runs = ok_runs.lock().unwrap();
    assert_eq!(ok_runs.len(), units * 4, "every cell ran to an output");
    assert!(
        ok_runs.values().all(|&n| n == 1),
        "a cell produced an output more than once"
    );
    let completed: u64 = reports.iter().map(|r| r.completed).sum();
    let failed: u64 = reports.iter().map(|r| r.failed).sum();
    assert_eq!(completed, (units * 4) as u64);
    assert!(failed > 0, "failures were injected");
    assert_eq!(reports.iter().map(|r| r.retried).sum::<u64>(), failed);
    assert_eq!(reports.iter().map(|r| r.rejected).sum::<u64>(), 0);
    let done = completions_in_log(&store);
    assert_eq!(done.len(), units * 4);
    assert!(done.values().all(|&n| n == 1), "one completion per cell");
    let st = p.status(&store).unwrap();
    assert!(st.stages.iter().all(|s| s.done == units as u64));
    assert_replays(&store);
}
