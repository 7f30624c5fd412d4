//! A snapshot's tail (src/wal/tail.rs, docs/commit.md "Readers"): a snapshot reads the B-trees as of
//! its read transaction plus the redo of the acknowledged groups the backlog has not applied
//! yet, and neither waits for nor applies them. These tests keep part of every store's commits
//! unapplied (`background_apply` off, a start and a batch of a few groups, so the B-trees hold
//! a prefix and the tail the rest) and hold every read of a snapshot — `get`, `iter`, `prefix`,
//! `range`, `seq`, `history_from`, `changes_since`, and all of them as of older seqs — to a
//! model of what was acknowledged, while checking that the read left the backlog as it was.

use oncelake::log::RecordBody;
use oncelake::{Batch, Error, GcOptions, Options, Outcome, Store};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const UNITS: [&str; 7] = ["a", "a/x", "b", "b/1", "b/2", "c", "d"];

/// A store that leaves its durable groups to whoever needs them: with `background_apply` off a
/// writer applies a batch of at most `batch` redo bytes once `min` wait; nobody else does.
fn open(path: &Path, min: usize, batch: usize) -> Store {
    Store::open_with(
        path,
        Options {
            background_apply: false,
            apply_min_bytes: min,
            apply_batch_bytes: batch,
            ..Options::default()
        },
    )
    .unwrap()
}

/// [`open`] in a fresh directory: the directory (removed on drop), the store's path and the store.
fn open_fresh(min: usize, batch: usize) -> (tempfile::TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let store = open(&path, min, batch);
    (dir, path, store)
}

/// [`open`]'s `min` below `min_below` and `batch` from 1 to below `batch_below`.
fn apply_sizes(min_below: usize, batch_below: usize) -> impl Strategy<Value = (usize, usize)> {
    (0..min_below, 1..batch_below)
}

/// What the model knows of one committed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    version: u64,
    seq: u64,
    object: String,
}

/// Every entry ever committed per unit (oldest first), and the log: (seq, what it holds).
#[derive(Default)]
struct Model {
    entries: BTreeMap<String, Vec<Seen>>,
    log: Vec<(u64, Vec<String>)>,
}

impl Model {
    fn newest_seq(&self) -> u64 {
        self.log.last().map_or(0, |(s, _)| *s)
    }

    /// Each unit's entry as of `at`.
    fn as_of(&self, at: u64) -> BTreeMap<String, Seen> {
        self.entries
            .iter()
            .filter_map(|(u, es)| {
                es.iter()
                    .rev()
                    .find(|e| e.seq <= at)
                    .map(|e| (u.clone(), e.clone()))
            })
            .collect()
    }

    fn current_version(&self, unit: &str) -> u64 {
        self.entries
            .get(unit)
            .and_then(|es| es.last())
            .map_or(0, |e| e.version)
    }
}

fn seen(e: &oncelake::Entry) -> (String, Seen) {
    (
        e.unit.clone(),
        Seen {
            version: e.source_version,
            seq: e.seq,
            object: e.object.id.to_hex(),
        },
    )
}

fn listed(it: oncelake::Entries) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    let mut last: Option<String> = None;
    for e in it {
        let (u, s) = seen(&e.unwrap());
        assert!(
            last.as_deref().is_none_or(|l| l < u.as_str()),
            "not in key order, or a unit twice: {last:?} then {u}"
        );
        last = Some(u.clone());
        out.insert(u, s);
    }
    out
}

fn within(m: &BTreeMap<String, Seen>, lo: &str, hi: Option<&str>) -> BTreeMap<String, Seen> {
    m.iter()
        .filter(|(u, _)| u.as_str() >= lo && hi.is_none_or(|h| u.as_str() < h))
        .map(|(u, s)| (u.clone(), s.clone()))
        .collect()
}

/// Checks one view (the newest, or as of `at`) against the model.
fn check_view(snap: &oncelake::Snapshot, model: &Model, at: u64, since: u64) {
    let want = model.as_of(at);
    assert_eq!(snap.seq(), at, "the view's seq");
    for u in UNITS {
        let got = snap.get(u).unwrap().map(|e| seen(&e).1);
        assert_eq!(got.as_ref(), want.get(u), "get({u}) as of {at}");
    }
    assert_eq!(listed(snap.iter().unwrap()), want, "iter as of {at}");
    let prefixed: BTreeMap<_, _> = want
        .iter()
        .filter(|(u, _)| u.starts_with("b/"))
        .map(|(u, s)| (u.clone(), s.clone()))
        .collect();
    assert_eq!(
        listed(snap.prefix("b/").unwrap()),
        prefixed,
        "prefix as of {at}"
    );
    for (lo, hi) in [("a/", Some("b/2")), ("b", None), ("", Some("a"))] {
        assert_eq!(
            listed(snap.range(lo, hi).unwrap()),
            within(&want, lo, hi),
            "range({lo}, {hi:?}) as of {at}"
        );
    }
    let changes: Vec<(u64, Vec<String>)> = snap
        .changes_since(since)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let units = match r.body {
                RecordBody::Commit { entries } => entries.into_iter().map(|e| e.unit).collect(),
                other => panic!("this test writes only commits, found {other:?}"),
            };
            (r.seq, units)
        })
        .collect();
    let expected: Vec<_> = model
        .log
        .iter()
        .filter(|(s, _)| *s > since && *s <= at)
        .cloned()
        .collect();
    assert_eq!(changes, expected, "changes_since({since}) as of {at}");
}

#[derive(Clone, Debug)]
enum Op {
    /// Commit these units (indexes into UNITS), each at its next version or, when `again`, at
    /// its current one (a duplicate when it exists).
    Commit { units: Vec<usize>, again: bool },
    /// Read: the newest view, and views as of older seqs (fractions of the newest).
    Read { at: Vec<u8>, since: u8 },
    /// Apply everything (a flush).
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (proptest::collection::vec(0..UNITS.len(), 1..4), any::<bool>())
            .prop_map(|(units, again)| Op::Commit { units, again }),
        3 => (proptest::collection::vec(any::<u8>(), 0..3), any::<u8>())
            .prop_map(|(at, since)| Op::Read { at, since }),
        1 => Just(Op::Flush),
    ]
}

fn commit(store: &Store, model: &mut Model, units: &[usize], again: bool) {
    let mut batch = Batch::new();
    let mut planned: BTreeMap<&str, (u64, bool)> = BTreeMap::new();
    for &i in units {
        let unit = UNITS[i];
        if planned.contains_key(unit) {
            continue;
        }
        let current = model.current_version(unit);
        let (version, new) = if again && current > 0 {
            (current, false)
        } else {
            (current + 1, true)
        };
        let bytes = format!("{unit}@{version}");
        let staged = store.stage_bytes(bytes.as_bytes()).unwrap();
        batch = batch.put(unit, version, &staged);
        planned.insert(unit, (version, new));
    }
    let report = store.commit(batch).unwrap();
    let any_new = planned.values().any(|&(_, new)| new);
    assert_eq!(
        report.seq.is_some(),
        any_new,
        "a commit gets a seq exactly when it holds a new version: {report:?}"
    );
    let Some(seq) = report.seq else { return };
    assert!(seq > model.newest_seq(), "seqs rise");
    let mut in_record = Vec::new();
    for u in &report.units {
        let (version, new) = planned[u.unit.as_str()];
        match &u.outcome {
            Outcome::Committed { .. } => {
                assert!(new, "{}@{version} was a duplicate yet committed", u.unit);
                model.entries.entry(u.unit.clone()).or_default().push(Seen {
                    version,
                    seq,
                    object: u.object.to_hex(),
                });
                in_record.push(u.unit.clone());
            }
            other => assert!(!new, "{}@{version} is new, got {other:?}", u.unit),
        }
    }
    // The record lists the committed entries in the batch's order.
    let order: Vec<&str> = units.iter().map(|&i| UNITS[i]).collect();
    in_record.sort_by_key(|u| order.iter().position(|o| o == u));
    model.log.push((seq, in_record));
}

fn read(store: &Store, model: &Model, at: &[u8], since: u8) {
    let before = store.backlog();
    let newest = model.newest_seq();
    let snap = store.snapshot().unwrap();
    check_view(&snap, model, newest, u64::from(since) % (newest + 1));
    for &a in at {
        let a = u64::from(a) * newest / 255;
        let snap = store.snapshot_at(a).unwrap();
        check_view(&snap, model, a, u64::from(since) % (a + 1));
    }
    assert_eq!(
        store.backlog(),
        before,
        "a read neither waits for nor applies the backlog"
    );
}

/// With nothing applied, every acknowledged commit is in the tail: a snapshot sees all of them,
/// the backlog still holds all of them after the reads, and a flush then applies them to the
/// same view.
#[test]
fn a_snapshot_sees_every_acknowledged_commit_while_none_is_applied() {
    let (_dir, _, store) = open_fresh(16 << 20, 16 << 20);
    let mut model = Model::default();
    for i in 0..120usize {
        commit(
            &store,
            &mut model,
            &[i % UNITS.len(), (i * 3) % UNITS.len()],
            false,
        );
    }
    let waiting = store.backlog();
    assert_eq!(
        waiting.units,
        2 * 120 - dup_count(),
        "every committed unit waits: {waiting:?}"
    );
    read(&store, &model, &[0, 1, 128, 254], 17);
    store.flush().unwrap();
    assert_eq!(store.backlog().units, 0);
    read(&store, &model, &[0, 1, 128, 254], 17);
}

/// Units the commits of the test above list twice (`i % 7 == (i * 3) % 7`): committed once.
fn dup_count() -> usize {
    (0..120usize)
        .filter(|i| i % UNITS.len() == (i * 3) % UNITS.len())
        .count()
}

/// A garbage collection's prune is applied in place (it plans from the applied history), and the
/// groups after it wait in the tail carrying the raised horizon: a new snapshot reads the
/// horizon from them, and a view as of a seq below it is refused, before and after they are
/// applied.
#[test]
fn groups_in_the_tail_after_a_prune_carry_its_horizon() {
    let (_dir, _, store) = open_fresh(16 << 20, 16 << 20);
    let mut model = Model::default();
    for i in 0..30usize {
        commit(&store, &mut model, &[i % 3], false);
    }
    let old = store.snapshot().unwrap().history_from();
    let report = store
        .gc(GcOptions {
            retain: Duration::ZERO,
            grace: Duration::ZERO,
            ..GcOptions::default()
        })
        .unwrap();
    assert!(report.history_rows_pruned > 0, "{report:?}");
    assert!(report.history_from > old, "{report:?}");
    for i in 0..5usize {
        commit(&store, &mut model, &[3 + i % 3], false);
    }
    assert_eq!(store.backlog().units, 5, "the later commits wait");
    let check = || {
        let snap = store.snapshot().unwrap();
        assert_eq!(snap.history_from(), report.history_from);
        assert_eq!(snap.seq(), model.newest_seq());
        match store.snapshot_at(report.history_from - 1) {
            Err(Error::SeqOutOfRange { oldest, newest, .. }) => {
                assert_eq!((oldest, newest), (report.history_from, model.newest_seq()))
            }
            other => panic!("a view below the horizon: {:?}", other.map(|s| s.seq())),
        }
        let at = store.snapshot_at(report.history_from).unwrap();
        assert_eq!(listed(at.iter().unwrap()), model.as_of(report.history_from));
    };
    check();
    store.flush().unwrap();
    assert_eq!(store.backlog().units, 0);
    check();
}

/// One step of a small pipeline driven over a store with a tail.
#[derive(Clone, Debug)]
enum PipeOp {
    /// A source's new version (or the same one again).
    Source {
        unit: usize,
        bump: bool,
    },
    /// A ready cell claimed by a worker.
    Claim {
        pick: u8,
        worker: u8,
    },
    /// A claimed cell completed (its output depends on the pick: a repeat may conflict).
    Complete {
        pick: u8,
        output: u8,
    },
    /// A claimed cell failed.
    Fail {
        pick: u8,
    },
    /// The definition recorded (an extension row).
    Define,
    Read,
    Flush,
}

fn pipe_op() -> impl Strategy<Value = PipeOp> {
    prop_oneof![
        3 => (0usize..3, any::<bool>()).prop_map(|(unit, bump)| PipeOp::Source { unit, bump }),
        4 => (any::<u8>(), 0u8..3).prop_map(|(pick, worker)| PipeOp::Claim { pick, worker }),
        3 => (any::<u8>(), 0u8..2).prop_map(|(pick, output)| PipeOp::Complete { pick, output }),
        2 => any::<u8>().prop_map(|pick| PipeOp::Fail { pick }),
        1 => Just(PipeOp::Define),
        3 => Just(PipeOp::Read),
        1 => Just(PipeOp::Flush),
    ]
}

/// The pipelines' reads of the store's tables (sources, completions, failures, leases, the
/// definition) with part of the backlog unapplied: what `recorded_state` reads must be what the
/// log replays to, and the read must leave the backlog as it was.
fn read_pipeline_state(store: &Store) -> oncelake::pipeline::RecordedState {
    let before = store.backlog();
    let stored = oncelake::pipeline::recorded_state(store).unwrap();
    assert_eq!(
        store.backlog(),
        before,
        "reading the pipeline state neither waits for nor applies the backlog"
    );
    let replayed = oncelake::pipeline::replay_state(&store.snapshot().unwrap()).unwrap();
    assert_eq!(
        stored, replayed,
        "the tables and their tail hold what the log replays to"
    );
    stored
}

// One block for the tail's two properties; the pipeline one runs 48 cases too (it ran 32 alone).
proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random commits (new versions, duplicates, several units at once) and reads, on a store
    /// whose B-trees hold a prefix of the acknowledged groups and whose snapshots read the rest
    /// from the tail: every view is the model's, as of its seq; after a flush and after a reopen
    /// (nothing left in any tail) too.
    #[test]
    fn every_view_over_a_tail_is_the_model(
        ops in proptest::collection::vec(op(), 1..60),
        (min, batch) in apply_sizes(2_000, 1_500),
    ) {
        let (_dir, path, store) = open_fresh(min, batch);
        let mut model = Model::default();
        for op in &ops {
            match op {
                Op::Commit { units, again } => commit(&store, &mut model, units, *again),
                Op::Read { at, since } => read(&store, &model, at, *since),
                Op::Flush => {
                    store.flush().unwrap();
                    prop_assert_eq!(store.backlog().units, 0);
                }
            }
        }
        read(&store, &model, &[0, 100, 255], 3);
        store.flush().unwrap();
        read(&store, &model, &[0, 100, 255], 3);
        drop(store);
        let store = open(&path, min, batch);
        read(&store, &model, &[0, 100, 255], 0);
    }

    /// Claims and extension rows are read through the tail as manifest rows are: a pipeline
    /// run on a store whose B-trees hold only a prefix of the acknowledged groups reads its
    /// state (and decides its next steps) from the tables plus the tail, and that state is the
    /// log's, before a flush, after it and after a reopen.
    #[test]
    fn pipeline_state_over_a_tail_is_the_logs(
        ops in proptest::collection::vec(pipe_op(), 1..40),
        (min, batch) in apply_sizes(4_000, 3_000),
    ) {
        use oncelake::pipeline::{Attempt, Claim, Pipeline, PipelineDef};
        let (_dir, path, store) = open_fresh(min, batch);
        let p = Pipeline::new(
            PipelineDef::builder()
                .stage("a", 1, &[])
                .stage("b", 1, &["a"])
                .build()
                .unwrap(),
        );
        let mut versions = [0u64; 3];
        let mut attempts: Vec<Attempt> = Vec::new();
        let ttl = Duration::from_secs(600);
        for op in &ops {
            match op {
                PipeOp::Source { unit, bump } => {
                    if *bump || versions[*unit] == 0 {
                        versions[*unit] += 1;
                    }
                    let body = format!("src {unit} v{}", versions[*unit]);
                    let unit_key = format!("u{unit}");
                    p.set_source_version(&store, &unit_key, versions[*unit], body.as_bytes())
                        .unwrap();
                }
                PipeOp::Claim { pick, worker } => {
                    let ready = p.ready(&store, 16).unwrap();
                    if ready.is_empty() {
                        continue;
                    }
                    let cell = &ready[usize::from(*pick) % ready.len()];
                    let worker = format!("w{worker}");
                    let granted = p.claim(&store, cell, &worker, ttl).unwrap();
                    if let Claim::Granted { lease, cell } = granted {
                        attempts.push(Attempt {
                            unit: cell.unit.clone(),
                            stage: cell.stage.clone(),
                            source_version: cell.source_version,
                            worker,
                            token: Some(lease.token),
                        });
                    }
                }
                PipeOp::Complete { pick, output } => {
                    if attempts.is_empty() {
                        continue;
                    }
                    let a = attempts.remove(usize::from(*pick) % attempts.len());
                    let out = format!("{}|{}|{}|{output}", a.unit, a.stage, a.source_version);
                    p.complete(&store, &a, out.as_bytes()).unwrap();
                }
                PipeOp::Fail { pick } => {
                    if attempts.is_empty() {
                        continue;
                    }
                    let a = attempts.remove(usize::from(*pick) % attempts.len());
                    p.fail(&store, &a, "stage failed").unwrap();
                }
                PipeOp::Define => {
                    p.record_definition(&store).unwrap();
                }
                PipeOp::Read => {
                    read_pipeline_state(&store);
                }
                PipeOp::Flush => {
                    store.flush().unwrap();
                    prop_assert_eq!(store.backlog().units, 0);
                }
            }
        }
        let over_tail = read_pipeline_state(&store);
        store.flush().unwrap();
        prop_assert_eq!(store.backlog().units, 0);
        let applied = read_pipeline_state(&store);
        prop_assert_eq!(&applied, &over_tail, "applying the tail changes nothing");
        drop(store);
        let store = open(&path, min, batch);
        prop_assert_eq!(&read_pipeline_state(&store), &over_tail, "nor does a reopen");
    }
}
