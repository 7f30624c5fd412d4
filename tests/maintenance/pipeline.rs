//! Pipelines (SPEC R13): exactly-once cells, retries of only what failed, transitive
//! invalidation, explanations, concurrency, log replay, definition errors and the dot output.

use crate::bin;

use crate::hooked_vfs::{Hook, Hooked};
use oncelake::log::RecordBody;
use oncelake::pipeline::{
    self, cell, Attempt, CellState, Claim, FailOutcome, Pipeline, PipelineDef, PipelineError,
    StaleReason, WorkOptions,
};
use oncelake::vfs::VfsFile;
use oncelake::{Durability, ManualClock, Options, Outcome, Store};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The real file system without fsyncs: these tests are about cell logic, not durability, and
/// the disk here is shared with other builds.
#[derive(Debug)]
struct NoSyncVfs;

struct NoSyncFile(Box<dyn VfsFile>);

impl std::io::Write for NoSyncFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl VfsFile for NoSyncFile {
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Hook for NoSyncVfs {
    fn sync_dir(&self, _: &Path) -> Option<std::io::Result<()>> {
        Some(Ok(()))
    }
    fn creates_read_only(&self) -> Option<bool> {
        Some(false) // objects made read-only by a call of their own, as before
    }
    fn file(&self, file: Box<dyn VfsFile>) -> Box<dyn VfsFile> {
        Box::new(NoSyncFile(file))
    }
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open_with(
        dir.path().join("lake"),
        Options {
            durability: Durability::Relaxed {
                max_delay: Duration::from_secs(3600),
            },
            vfs: Arc::new(Hooked::real(NoSyncVfs)),
            ..Options::default()
        },
    )
    .unwrap()
}

/// The seed 002 pipeline: ingest -> transform -> {store_b, store_c}.
fn seed_def() -> PipelineDef {
    PipelineDef::builder()
        .stage("ingest", 1, &[])
        .stage("transform", 1, &["ingest"])
        .stage("store_b", 1, &["transform"])
        .stage("store_c", 1, &["transform"])
        .build()
        .unwrap()
}

fn diamond(b_code: u64) -> PipelineDef {
    PipelineDef::builder()
        .stage("a", 1, &[])
        .stage("b", b_code, &["a"])
        .stage("c", 1, &["a"])
        .stage("d", 1, &["b", "c"])
        .build()
        .unwrap()
}

/// Stage runs that returned an output, per (unit, stage, source version).
type OkRuns = HashMap<(String, String, u64), u32>;

/// Runs counted per (unit, stage).
type Runs = BTreeMap<(String, String), u32>;

/// A stage function that records its runs; output depends on unit, stage and source version
/// (deterministic), and on the inputs, so a wrong input shows as a different object.
fn output_of(store: &Store, c: &pipeline::ReadyCell) -> Vec<u8> {
    let mut out = format!("{}|{}|{}|", c.unit, c.stage, c.source_version).into_bytes();
    for i in &c.inputs {
        out.extend_from_slice(&c.read_input(store, i.stage.as_deref()).unwrap());
    }
    out.truncate(4096);
    out
}

/// The first ready cell, claimed for ten seconds by `worker` (the claim must be granted): the
/// cell and the lease.
fn first_ready_claimed(
    p: &Pipeline,
    store: &Store,
    worker: &str,
) -> (pipeline::ReadyCell, oncelake::Lease) {
    let cell = p.ready(store, 1).unwrap().remove(0);
    match p
        .claim(store, &cell, worker, Duration::from_secs(10))
        .unwrap()
    {
        Claim::Granted { lease, .. } => (cell, lease),
        other => panic!("{worker}'s claim of {cell:?}: {other:?}"),
    }
}

/// The number of completion commits per cell key, from the log.
fn completions_in_log(store: &Store) -> BTreeMap<(String, u64), u32> {
    let mut n = BTreeMap::new();
    for rec in store.snapshot().unwrap().changes_since(0).unwrap() {
        if let RecordBody::Commit { entries } = rec.unwrap().body {
            for e in entries {
                if e.unit.starts_with(cell::CELL_PREFIX) {
                    *n.entry((e.unit, e.source_version)).or_insert(0) += 1;
                }
            }
        }
    }
    n
}

fn failure_cells_in_log(store: &Store) -> Vec<String> {
    let mut v = Vec::new();
    for rec in store.snapshot().unwrap().changes_since(0).unwrap() {
        if let RecordBody::Extension { tag, data } = rec.unwrap().body {
            if tag == cell::TAG_CELL_FAILED {
                v.push(pipeline::Failure::decode(&data).unwrap().cell);
            }
        }
    }
    v
}

fn assert_replays(store: &Store) {
    // The engine's own replay (I7) still reproduces the manifest, cells included.
    let report = oncelake::replay(&store.snapshot().unwrap()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    let stored = pipeline::recorded_state(store).unwrap();
    let replayed = pipeline::replay_state(&store.snapshot().unwrap()).unwrap();
    assert_eq!(
        stored, replayed,
        "the log must replay to the stored cell states"
    );
}

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
    let m = store.metrics();
    eprintln!(
        "{units} units x 4 stages drained by 4 workers in {:?}: {} commit groups, {:.2} ops/group, commit latency p50 {} us p99 {} us",
        started.elapsed(),
        m.groups,
        m.group_units.mean(),
        m.commit_latency_us.quantile(0.5),
        m.commit_latency_us.quantile(0.99),
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

#[test]
fn definition_errors_name_the_culprit() {
    let cases: &[(&str, &str)] = &[
        (
            "[stage.a]\ncode_version = 1\nupstream = [\"c\"]\n[stage.b]\ncode_version = 1\nupstream = [\"a\"]\n[stage.c]\ncode_version = 1\nupstream = [\"b\"]\n",
            "the stages form a cycle: a -> b -> c -> a",
        ),
        (
            "[stage.a]\ncode_version = 1\nupstream = [\"ghost\"]\n",
            "stage \"a\" lists unknown upstream stage \"ghost\"",
        ),
        (
            "[stage.a]\ncode_version = 1\n[stage.a]\ncode_version = 1\n",
            "stage \"a\" is defined twice",
        ),
        ("[stage.]\ncode_version = 1\n", "stage name \"\" is invalid: it is empty"),
        ("[stage.a]\nupstream = []\n", "stage \"a\" has no code_version"),
        ("", "defines no stages"),
    ];
    for (text, want) in cases {
        let msg = PipelineDef::parse(text).unwrap_err().to_string();
        assert!(msg.contains(want), "{text:?}: {msg}");
    }
    assert!(matches!(
        PipelineDef::builder()
            .stage("x", 1, &[])
            .stage("x", 2, &[])
            .build(),
        Err(PipelineError::DuplicateStage(n)) if n == "x"
    ));
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let p = Pipeline::new(seed_def());
    let too_long = "u".repeat(cell::MAX_PIPELINE_UNIT_LEN + 1);
    assert!(p.set_source_version(&store, &too_long, 1, b"").is_err());
    assert!(p.explain(&store, "bad\nunit").is_err());
    assert!(p
        .complete(
            &store,
            &Attempt {
                unit: "u".into(),
                stage: "nope".into(),
                source_version: 1,
                worker: "w".into(),
                token: None
            },
            b""
        )
        .unwrap_err()
        .to_string()
        .contains("no stage \"nope\""));
}

/// A small checker for the dot subset `to_dot` writes: `digraph ID { stmt* }` with attribute
/// statements, node statements and edge statements, each with optional `[k=v, ...]` and `;`.
fn check_dot(text: &str) -> Result<(usize, usize), String> {
    #[derive(Debug, PartialEq)]
    enum T {
        Id(String),
        Sym(&'static str),
    }
    let mut toks = Vec::new();
    let mut it = text.chars().peekable();
    while let Some(&c) = it.peek() {
        if c.is_whitespace() {
            it.next();
        } else if c == '"' {
            it.next();
            let mut s = String::new();
            loop {
                match it.next() {
                    None => return Err("unterminated string".into()),
                    Some('\\') => {
                        s.push('\\');
                        s.push(it.next().ok_or("dangling escape")?);
                    }
                    Some('"') => break,
                    Some(ch) => s.push(ch),
                }
            }
            toks.push(T::Id(s));
        } else if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            let mut s = String::new();
            while let Some(&ch) = it.peek() {
                if ch.is_ascii_alphanumeric() || ch == '_' || ch == '.' {
                    s.push(ch);
                    it.next();
                } else {
                    break;
                }
            }
            toks.push(T::Id(s));
        } else {
            it.next();
            let sym = match c {
                '{' => "{",
                '}' => "}",
                '[' => "[",
                ']' => "]",
                ';' => ";",
                ',' => ",",
                '=' => "=",
                '-' if it.next_if_eq(&'>').is_some() => "->",
                _ => return Err(format!("unexpected character {c:?}")),
            };
            toks.push(T::Sym(sym));
        }
    }
    let mut i = 0;
    let id = |i: &mut usize| match toks.get(*i) {
        Some(T::Id(s)) => {
            *i += 1;
            Ok(s.clone())
        }
        t => Err(format!("expected an id at token {}, found {t:?}", *i)),
    };
    let sym = |i: &mut usize, s: &str| match toks.get(*i) {
        Some(T::Sym(x)) if *x == s => {
            *i += 1;
            true
        }
        _ => false,
    };
    if id(&mut i)? != "digraph" {
        return Err("must start with digraph".into());
    }
    if matches!(toks.get(i), Some(T::Id(_))) {
        i += 1;
    }
    if !sym(&mut i, "{") {
        return Err("expected {".into());
    }
    let (mut nodes, mut edges) = (0, 0);
    let mut declared = std::collections::HashSet::new();
    loop {
        if sym(&mut i, "}") {
            break;
        }
        let first = id(&mut i)?;
        if sym(&mut i, "=") {
            id(&mut i)?;
        } else {
            if sym(&mut i, "->") {
                let to = id(&mut i)?;
                for n in [&first, &to] {
                    if !declared.contains(n) {
                        return Err(format!("edge to undeclared node {n}"));
                    }
                }
                edges += 1;
            } else if !["node", "edge", "graph"].contains(&first.as_str()) {
                declared.insert(first.clone());
                nodes += 1;
            }
            if sym(&mut i, "[") {
                loop {
                    id(&mut i)?;
                    if !sym(&mut i, "=") {
                        return Err("expected = in attribute list".into());
                    }
                    id(&mut i)?;
                    if sym(&mut i, "]") {
                        break;
                    }
                    if !sym(&mut i, ",") && !matches!(toks.get(i), Some(T::Id(_))) {
                        return Err("expected , or ] in attribute list".into());
                    }
                }
            }
        }
        if !sym(&mut i, ";") {
            return Err(format!("expected ; at token {i}"));
        }
    }
    if i != toks.len() {
        return Err("trailing tokens after }".into());
    }
    Ok((nodes, edges))
}

#[test]
fn dot_checker_rejects_broken_graphs() {
    assert!(check_dot("digraph g { \"a\"; \"b\"; \"a\" -> \"b\"; }").is_ok());
    for bad in [
        "graph g { }",
        "digraph g { \"a\" -> \"b\"; }",
        "digraph g { \"a\" [label=\"x\" ; }",
        "digraph g { \"a\"; ",
        "digraph g { \"a\" }",
        "digraph g { \"a\"; } }",
    ] {
        assert!(check_dot(bad).is_err(), "{bad}");
    }
}

/// The `oncelake pipeline` commands on one store, run as the built binary.
struct PipelineCli {
    dir: tempfile::TempDir,
    lake: String,
    def: String,
}

impl PipelineCli {
    /// Runs `oncelake ARGS`: its exit code, standard output and standard error.
    fn run(&self, args: &[&str]) -> (Option<i32>, String, String) {
        bin::run_text(args)
    }

    /// Runs `oncelake pipeline COMMAND LAKE --pipeline DEF ARGS`.
    fn pipeline(&self, command: &str, args: &[&str]) -> (Option<i32>, String, String) {
        let head = ["pipeline", command, &self.lake, "--pipeline", &self.def];
        self.run(&[&head[..], args].concat())
    }
}

/// The JSON lines of a command's output, each parsed.
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The seed pipeline over u1..u3 worked once through the library: store_c of u2 and transform
/// of u3 failed, everything else done.
fn seed_worked_with_failures() -> PipelineCli {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let def_path = dir.path().join("etl.toml");
    std::fs::write(&def_path, seed_def().to_text()).unwrap();
    let store = Store::open(&lake).unwrap();
    let p = Pipeline::new(seed_def());
    for u in ["u1", "u2", "u3"] {
        p.set_source_version(&store, u, 1, b"x").unwrap();
    }
    let mut n = 0;
    p.work(&store, "w", |c| {
        n += 1;
        if c.stage == "store_c" && c.unit == "u2" {
            Err("boom".into())
        } else if c.stage == "transform" && c.unit == "u3" {
            Err("nope".into())
        } else {
            Ok(vec![n])
        }
    })
    .unwrap();
    let (lake, def) = (
        lake.to_str().unwrap().to_string(),
        def_path.to_str().unwrap().to_string(),
    );
    PipelineCli { dir, lake, def }
}

/// `status --dot` is a graph with the stages' counts that graphviz (where installed) draws.
fn status_dot_is_valid_graphviz(cli: &PipelineCli) {
    let (code, dot, err) = cli.pipeline("status", &["--dot"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(check_dot(&dot), Ok((4, 3)), "{dot}");
    assert!(dot.contains("\"store_c\" [label=\"store_c (code v1)\\ndone 1 (cut off 0) | ready 0 | running 0\\nblocked 1 | failed 1 | stale 0\", fillcolor=\"salmon\"]"), "{dot}");
    assert!(dot.contains("\"transform\" -> \"store_b\";"));
    let png = cli.dir.path().join("g.png");
    if let Ok(out) = std::process::Command::new("dot")
        .args(["-Tpng", "-o"])
        .arg(&png)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(dot.as_bytes())?;
            child.wait_with_output()
        })
    {
        assert!(out.status.success(), "dot refused the graph");
        assert!(std::fs::metadata(&png).unwrap().len() > 0);
    }
}

/// `explain`, a blocked `complete` and a source version going back, by exit code and JSON.
fn explain_and_refusals_follow_the_contract(cli: &PipelineCli) {
    let (code, text, _) = cli.pipeline("explain", &["u2", "--json"]);
    assert_eq!(code, Some(0));
    let lines = json_lines(&text);
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[3]["stage"], "store_c");
    assert_eq!(lines[3]["state"], "failed");
    assert_eq!(lines[3]["last_error"], "boom");
    let (code, _, err) = cli.pipeline("complete", &["u3", "store_b", "-"]);
    assert_eq!(code, Some(2), "blocked cells cannot be completed: {err}");
    assert!(err.contains("blocked on transform"));
    let (code, _, _) = cli.run(&["pipeline", "set-version", &cli.lake, "u1", "0"]);
    assert_eq!(code, Some(4), "a source version never goes back");
}

/// By hand: a new unit, claimed, completed under its token, the retry a duplicate, the next
/// cell failed.
fn a_unit_worked_by_hand(cli: &PipelineCli) {
    let (code, _, err) = cli.run(&["pipeline", "set-version", &cli.lake, "u4", "1"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, text, _) = cli.pipeline("ready", &["--claim", "--worker", "cli-w", "--json"]);
    assert_eq!(code, Some(0));
    let claimed = json_lines(&text);
    let mine = claimed
        .iter()
        .find(|v| v["unit"] == "u4" && v["stage"] == "ingest")
        .expect("u4 ingest is ready and claimed");
    let token = mine["token"].as_u64().unwrap().to_string();
    let out_file = cli.dir.path().join("out.bin");
    std::fs::write(&out_file, b"u4 ingested").unwrap();
    let out_s = out_file.to_str().unwrap();
    let complete = || {
        cli.pipeline(
            "complete",
            &["u4", "ingest", out_s, "--token", &token, "--json"],
        )
    };
    let (code, text, err) = complete();
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["outcome"], "committed");
    let (code, text, _) = complete();
    assert_eq!(code, Some(0));
    assert!(text.contains("\"outcome\":\"duplicate\""), "{text}");
    let (code, text, _) = cli.pipeline("explain", &["u4"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("ingest: done at source version 1"), "{text}");
    assert!(text.contains("transform: ready"), "{text}");
    let (code, text, _) = cli.pipeline("fail", &["u4", "transform", "--error", "oops", "--json"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("\"attempts\":1"), "{text}");
}

/// A definition with a cycle is bad input that names the cycle.
fn a_cyclic_definition_is_refused(cli: &PipelineCli) {
    let bad_def = cli.dir.path().join("bad.toml");
    std::fs::write(
        &bad_def,
        "[stage.a]\ncode_version = 1\nupstream = [\"a\"]\n",
    )
    .unwrap();
    let bad = bad_def.to_str().unwrap();
    let (code, _, err) = cli.run(&["pipeline", "status", &cli.lake, "--pipeline", bad]);
    assert_eq!(code, Some(2));
    assert!(err.contains("cycle: a -> a"), "{err}");
}

#[test]
fn cli_status_dot_is_valid_graphviz() {
    let cli = seed_worked_with_failures();
    status_dot_is_valid_graphviz(&cli);
    explain_and_refusals_follow_the_contract(&cli);
    a_unit_worked_by_hand(&cli);
    a_cyclic_definition_is_refused(&cli);
}

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
