//! A cell's life: the seed scenario (only the failed stage retried), explanations through every
//! state, and a lost lease fencing completion and failure.

use super::{
    assert_replays, completions_in_log, failure_cells_in_log, first_ready_claimed, open, output_of,
    seed_def, Runs,
};
use oncelake::pipeline::{
    self, Attempt, CellState, Claim, FailOutcome, Pipeline, PipelineDef, StaleReason,
};
use oncelake::{ManualClock, Options, Outcome, Store};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn seed_scenario_retries_only_the_failed_stage() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let p = Pipeline::new(seed_def());
    let units: Vec<String> = (0..5).map(|i| format!("orders/day={i}")).collect();
    for u in &units {
        p.set_source_version(&store, u, 1, u.as_bytes()).unwrap();
    }
    let mut runs = Runs::new();
    let report = p
        .work(&store, "w1", |c| {
            let n = runs.entry((c.unit.clone(), c.stage.clone())).or_insert(0);
            *n += 1;
            if c.stage == "store_c" && *n <= 2 {
                return Err(format!("store C unavailable (try {n})"));
            }
            Ok(output_of(&store, c))
        })
        .unwrap();

    for u in &units {
        assert_eq!(runs[&(u.clone(), "ingest".into())], 1);
        assert_eq!(runs[&(u.clone(), "transform".into())], 1);
        assert_eq!(runs[&(u.clone(), "store_b".into())], 1, "store_b ran once");
        assert_eq!(
            runs[&(u.clone(), "store_c".into())],
            3,
            "store_c: 2 failures + 1"
        );
        let e = p.explain(&store, u).unwrap();
        assert!(
            e.cells
                .iter()
                .all(|c| matches!(c.state, CellState::Done { .. })),
            "{e:?}"
        );
    }
    assert_eq!(report.runs, 5 * 6);
    assert_eq!(report.completed, 5 * 4);
    assert_eq!(report.failed, 5 * 2);
    assert_eq!(report.retried, 5 * 2);
    // The log agrees: one completion per cell, failures only for store_c.
    let done = completions_in_log(&store);
    assert_eq!(done.len(), 5 * 4);
    assert!(done.values().all(|&n| n == 1));
    let failures = failure_cells_in_log(&store);
    assert_eq!(failures.len(), 10);
    assert!(failures
        .iter()
        .all(|k| k.starts_with(".pipeline/cell/store_c/")));
    let m = store.metrics();
    assert_eq!(m.pipeline_cells_ready, 30);
    assert_eq!(m.pipeline_cells_completed, 20);
    assert_eq!(m.pipeline_cells_failed, 10);
    assert_eq!(m.pipeline_cells_retried, 10);
    assert_eq!(m.pipeline_cells_invalidated, 0);
    assert!(m
        .to_prometheus()
        .contains("oncelake_pipeline_cells_retried_total 10"));
    // Nothing left: a second worker finds nothing to do.
    let again = p.work(&store, "w2", |_| panic!("nothing may run")).unwrap();
    assert_eq!(again.runs, 0);
    assert_replays(&store);
    // Cell states are store state: they survive a reopen unchanged.
    let before = pipeline::recorded_state(&store).unwrap();
    let explained = p.cells(&store).unwrap();
    drop(store);
    let store = open(&dir);
    assert_eq!(pipeline::recorded_state(&store).unwrap(), before);
    assert_eq!(p.cells(&store).unwrap(), explained);
}

/// An attempt of the explained unit `u` at source version 4 by `w1`.
fn attempt_on_u(stage: &str, token: Option<u64>) -> Attempt {
    Attempt {
        unit: "u".into(),
        stage: stage.into(),
        source_version: 4,
        worker: "w1".into(),
        token,
    }
}

/// `u` at source version 4: ingest ready, load blocked on it; ingest claimed is running, not
/// ready. Returns the lease.
fn ingest_ready_then_running(p: &Pipeline, store: &Store) -> oncelake::Lease {
    assert_eq!(p.explain(store, "u").unwrap().source_version, None);
    p.set_source_version(store, "u", 4, b"in").unwrap();
    let e = p.explain(store, "u").unwrap();
    assert_eq!(e.source_version, Some(4));
    assert!(matches!(
        e.cells[0].state,
        CellState::Ready { attempts: 0, .. }
    ));
    assert!(matches!(
        &e.cells[1].state,
        CellState::Blocked { upstream, upstream_state: "ready" } if upstream == "ingest"
    ));
    let ready = p.ready(store, 10).unwrap();
    assert_eq!(ready.len(), 1);
    let Claim::Granted { lease, .. } = p
        .claim(store, &ready[0], "w1", Duration::from_secs(60))
        .unwrap()
    else {
        panic!("claim")
    };
    let e = p.explain(store, "u").unwrap();
    assert!(matches!(
        &e.cells[0].state,
        CellState::Running { worker, token, source_version: 4, .. } if worker == "w1" && *token == lease.token
    ));
    assert!(
        p.ready(store, 10).unwrap().is_empty(),
        "running is not ready"
    );
    lease
}

/// ingest completed under its lease; a retry of the same completion collapses; other bytes
/// conflict (first wins).
fn ingest_completed_once(p: &Pipeline, store: &Store, lease: &oncelake::Lease) {
    let out = p
        .complete(store, &attempt_on_u("ingest", Some(lease.token)), b"x")
        .unwrap();
    let seq = out.outcome.seq().unwrap();
    assert!(matches!(out.outcome, Outcome::Committed { .. }));
    let dup = p
        .complete(store, &attempt_on_u("ingest", None), b"x")
        .unwrap();
    assert_eq!(dup.outcome, Outcome::Duplicate { seq });
    let conflict = p
        .complete(store, &attempt_on_u("ingest", None), b"y")
        .unwrap();
    assert!(matches!(conflict.outcome, Outcome::Conflict { winner_seq, .. } if winner_seq == seq));
}

/// load fails twice (max_attempts = 2): ready to retry after the first, failed after the second.
fn load_fails_until_it_gives_up(p: &Pipeline, store: &Store) {
    for (error, attempts, gave_up) in [("disk full", 1, false), ("disk still full", 2, true)] {
        let f = p.fail(store, &attempt_on_u("load", None), error).unwrap();
        assert!(
            matches!(f, FailOutcome::Recorded { attempts: a, gave_up: g, .. } if a == attempts && g == gave_up),
            "{error}: {f:?}"
        );
        let load = &p.explain(store, "u").unwrap().cells[1];
        if gave_up {
            assert!(
                matches!(&load.state, CellState::Failed { attempts: 2, last_error } if last_error == error)
            );
        } else {
            assert!(
                matches!(&load.state, CellState::Ready { attempts: 1, last_error: Some(m) } if m == error)
            );
            assert!(load.to_string().contains("retry after 1"));
        }
    }
    assert!(
        p.ready(store, 10).unwrap().is_empty(),
        "failed is not retried"
    );
    let st = p.status(store).unwrap();
    assert_eq!((st.stages[0].done, st.stages[1].failed), (1, 1));
}

/// A newer source version gives the cells a fresh start and says why; a late completion for the
/// old version is stale once the new one is in; the source itself never goes back.
fn a_newer_source_starts_over(p: &Pipeline, store: &Store) {
    p.set_source_version(store, "u", 5, b"in2").unwrap();
    let e = p.explain(store, "u").unwrap();
    assert_eq!(
        e.cells[0].stale,
        Some(StaleReason::NewerSource {
            completed: 4,
            current: 5
        })
    );
    assert!(matches!(
        e.cells[0].state,
        CellState::Ready { attempts: 0, .. }
    ));
    assert!(matches!(e.cells[1].state, CellState::Blocked { .. }));
    p.complete(
        store,
        &Attempt {
            source_version: 5,
            ..attempt_on_u("ingest", None)
        },
        b"x5",
    )
    .unwrap();
    let late = p
        .complete(store, &attempt_on_u("ingest", None), b"x")
        .unwrap();
    assert!(matches!(
        late.outcome,
        Outcome::Stale { current_version: 5 }
    ));
    let back = p.set_source_version(store, "u", 3, b"old").unwrap();
    assert!(matches!(back.outcome, Outcome::Stale { .. }));
}

#[test]
fn explain_walks_a_cell_through_its_states() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let def = PipelineDef::parse(
        "[stage.ingest]\ncode_version = 1\n[stage.load]\ncode_version = 1\nupstream = [\"ingest\"]\nmax_attempts = 2\n",
    )
    .unwrap();
    let p = Pipeline::new(def);
    let lease = ingest_ready_then_running(&p, &store);
    ingest_completed_once(&p, &store, &lease);
    load_fails_until_it_gives_up(&p, &store);
    a_newer_source_starts_over(&p, &store);
    assert_replays(&store);
}

#[test]
fn a_lost_lease_fences_completion_and_failure() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let store = Store::open_with(
        dir.path().join("lake"),
        Options {
            clock: clock.clone(),
            ..Options::default()
        },
    )
    .unwrap();
    let p = Pipeline::new(seed_def());
    p.set_source_version(&store, "u", 1, b"in").unwrap();
    let (cell, slow) = first_ready_claimed(&p, &store, "slow");
    assert!(matches!(
        p.claim(&store, &cell, "fast", Duration::from_secs(10))
            .unwrap(),
        Claim::Held { .. }
    ));
    clock.advance_ms(11_000);
    let (_, fast) = first_ready_claimed(&p, &store, "fast");
    assert!(fast.token > slow.token);
    assert_eq!(store.metrics().claims_taken_over, 1);
    let att = |w: &str, t| Attempt {
        unit: "u".into(),
        stage: "ingest".into(),
        source_version: 1,
        worker: w.into(),
        token: Some(t),
    };
    assert!(matches!(
        p.fail(&store, &att("slow", slow.token), "late").unwrap(),
        FailOutcome::Fenced { .. }
    ));
    assert!(matches!(
        p.complete(&store, &att("slow", slow.token), b"slow")
            .unwrap()
            .outcome,
        Outcome::Fenced { .. }
    ));
    assert!(matches!(
        p.complete(&store, &att("fast", fast.token), b"fast")
            .unwrap()
            .outcome,
        Outcome::Committed { .. }
    ));
    assert_eq!(completions_in_log(&store).len(), 1);
    assert_replays(&store);
}
