//! How outcomes reach the log: a crash mid failure record never tears it, and the bulk completion
//! follows the commit rules.

use super::{diamond, open, seed_def};
use oncelake::pipeline::{self, Attempt, CellState, Claim, FailOutcome, Pipeline};
use oncelake::{Options, Store};
use std::collections::BTreeMap;
use std::time::Duration;

/// A crash at any file operation of a failure record leaves it wholly recorded (log and table)
/// or wholly absent, and an acknowledged one always survives (I3 for extension records).
#[test]
fn a_crash_while_recording_a_failure_never_tears_it() {
    let p = Pipeline::new(seed_def());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let db = path.join(oncelake::DB_FILE);
    let template = dir.path().join("template.redb");
    {
        let store = Store::open(&path).unwrap();
        p.set_source_version(&store, "u", 1, b"in").unwrap();
        p.record_definition(&store).unwrap();
    }
    // A failure record touches only the database file: each crash point starts from a copy of it.
    std::fs::copy(&db, &template).unwrap();
    let att = Attempt {
        unit: "u".into(),
        stage: "ingest".into(),
        source_version: 1,
        worker: "w".into(),
        token: None,
    };
    let mut n = 1;
    loop {
        std::fs::copy(&template, &db).unwrap();
        let plan = oncelake::fault::FaultPlan::new();
        let acked = {
            let store = Store::open_with(
                &path,
                Options {
                    faults: Some(plan.clone()),
                    ..Options::default()
                },
            )
            .unwrap();
            plan.crash_at(plan.ops() + n);
            matches!(
                p.fail(&store, &att, "crash test"),
                Ok(FailOutcome::Recorded { .. })
            )
        };
        let crashed = plan.crashed();
        let store = Store::open(&path).unwrap();
        let stored = pipeline::recorded_state(&store).unwrap();
        assert_eq!(
            stored,
            pipeline::replay_state(&store.snapshot().unwrap()).unwrap(),
            "crash at op {n}"
        );
        assert!(
            oncelake::replay(&store.snapshot().unwrap())
                .unwrap()
                .is_clean(),
            "crash at op {n}"
        );
        if acked {
            assert_eq!(
                stored.failures.len(),
                1,
                "acknowledged failure lost (op {n})"
            );
        }
        assert!(stored.failures.len() <= 1);
        if !crashed {
            assert!(acked);
            assert!(n > 1, "the sweep must have crashed at least once");
            break;
        }
        n += 1;
        assert!(n < 200, "the failure record never completed");
    }
}

/// The bulk completion: each listed cell is done with its output (against a model of what each
/// cell holds), the cells downstream become ready, a cell another worker holds a live lease on is
/// busy and stays running, and the completed count is what committed.
#[test]
fn complete_cells_completes_in_bulk_under_the_commit_rules() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let p = Pipeline::new(diamond(1));
    let units = ["u1", "u2", "u3"];
    let listing: Vec<(&str, u64, &[u8])> = units.iter().map(|u| (*u, 1, u.as_bytes())).collect();
    assert!(pipeline::set_source_versions(&store, &listing)
        .unwrap()
        .applied());
    // u3's cell of stage a is claimed by a worker whose lease is live.
    let ready = p.ready(&store, usize::MAX).unwrap();
    let u3a = ready
        .iter()
        .find(|c| c.unit == "u3" && c.stage == "a")
        .unwrap();
    assert!(matches!(
        p.claim(&store, u3a, "w", Duration::from_secs(600)).unwrap(),
        Claim::Granted { .. }
    ));
    let before = store.metrics().pipeline_cells_completed;
    let outputs: Vec<Vec<u8>> = units
        .iter()
        .map(|u| format!("a of {u}").into_bytes())
        .collect();
    let cells: Vec<(&str, u64, &[u8])> = units
        .iter()
        .zip(&outputs)
        .map(|(u, o)| (*u, 1, o.as_slice()))
        .collect();
    let report = p.complete_cells(&store, "a", &cells).unwrap();
    let outcome: BTreeMap<&str, &str> = report
        .units
        .iter()
        .map(|u| (u.unit.as_str(), u.outcome.name()))
        .collect();
    let model_outcome = BTreeMap::from([
        (p.cell_key("u1", "a").unwrap(), "committed"),
        (p.cell_key("u2", "a").unwrap(), "committed"),
        (p.cell_key("u3", "a").unwrap(), "busy"),
    ]);
    let model_outcome: BTreeMap<&str, &str> = model_outcome
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(outcome, model_outcome);
    assert_eq!(store.metrics().pipeline_cells_completed - before, 2);
    // What each unit's cells are now: a done with its output (or still running), b and c ready
    // where a is done.
    for (u, o) in units.iter().zip(&outputs) {
        let e = p.explain(&store, u).unwrap();
        let state = |stage: &str| &e.cells.iter().find(|c| c.stage == stage).unwrap().state;
        match state("a") {
            CellState::Done { object, .. } => {
                assert_ne!(*u, "u3");
                assert_eq!(*object, oncelake::ObjectId::of(o));
            }
            CellState::Running { worker, .. } => assert_eq!((*u, worker.as_str()), ("u3", "w")),
            other => panic!("{u}: cell a is {other:?}"),
        }
        let downstream_ready = matches!(state("b"), CellState::Ready { .. });
        assert_eq!(downstream_ready, *u != "u3", "{u}: {:?}", state("b"));
    }
}
