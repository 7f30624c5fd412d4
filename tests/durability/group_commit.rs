//! Group commit under stress (SPEC R3, R4, R6; invariants I1, I4, I5, I7).
//!
//! 64 threads commit, durably, over 200 overlapping units with mixed versions and contents, some
//! in multi-unit all-or-nothing batches, through a store whose groups are bounded at 8 units (so
//! hand-off under the bound happens all the time). A reader checks snapshots while they run.
//! Afterwards the commit log is replayed sequentially through the R3 rules into a BTreeMap model,
//! and every request's observed outcome is checked against that model:
//!
//! * a committed unit at seq `s` must be what the rules decide against the model state just
//!   before `s`, and `s` must lie between the last seq seen before the request was submitted and
//!   the last seq seen after it returned (it was decided in between);
//! * any other outcome must be exactly what the rules decide against the model state at *some*
//!   seq in that same window — for a batch, one seq for all of its units;
//! * every log entry belongs to exactly one committed outcome (nothing unacknowledged, nothing
//!   twice), the final manifest equals the model (one entry per unit), and `replay` is clean.

use crate::common;

use common::XorShift64Star as Rng;
use oncelake::commit::rules::{decide, Current, Decision, Incoming, Intent};
use oncelake::log::RecordBody;
use oncelake::{replay, Batch, CommitReport, ObjectId, Options, Outcome, Staged, Store};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const THREADS: usize = 64;
const REQUESTS_PER_THREAD: usize = 24;
const UNITS: u64 = 200;
const VERSIONS: u64 = 3;
const GROUP_BOUND: usize = 8;
const BATCH_UNITS: usize = 3;

fn unit(i: u64) -> String {
    format!("stress/u{i:03}")
}

/// One submitted commit and what came back.
struct Request {
    /// (unit, version, object) per item, in batch order.
    items: Vec<(String, u64, ObjectId)>,
    /// The newest seq visible before the request was submitted.
    lo: u64,
    /// The newest seq visible after it returned.
    hi: u64,
    report: CommitReport,
}

/// The commit log replayed through the R3 rules: per unit, its entries in seq order.
struct Model {
    by_unit: HashMap<String, Vec<Current>>,
    /// seq -> the units of that commit record.
    records: BTreeMap<u64, Vec<String>>,
}

impl Model {
    /// Builds the model from the log, checking that the rules accept every logged entry when
    /// the log is replayed one record after the other (I5, and R3 as a sequential spec).
    fn replay_log(store: &Store) -> Model {
        let snap = store.snapshot().unwrap();
        let mut current: BTreeMap<String, Current> = BTreeMap::new();
        let mut by_unit: HashMap<String, Vec<Current>> = HashMap::new();
        let mut records = BTreeMap::new();
        for rec in snap.changes_since(0).unwrap() {
            let rec = rec.unwrap();
            let RecordBody::Commit { entries } = rec.body else {
                panic!("only commits were made, found {:?}", rec.body);
            };
            let mut units = Vec::new();
            for e in entries {
                let inc = Incoming {
                    source_version: e.source_version,
                    object: e.object.id,
                    token: e.token,
                    intent: Intent::Put,
                };
                let d = decide(current.get(&e.unit), None, 0, &inc, || None);
                assert_eq!(
                    d,
                    Decision::Accept {
                        revision: e.revision
                    },
                    "seq {}: the log holds {}@{} which the rules reject against {:?}",
                    rec.seq,
                    e.unit,
                    e.source_version,
                    current.get(&e.unit)
                );
                let c = Current {
                    source_version: e.source_version,
                    revision: e.revision,
                    object: e.object.id,
                    seq: rec.seq,
                };
                current.insert(e.unit.clone(), c);
                by_unit.entry(e.unit.clone()).or_default().push(c);
                units.push(e.unit);
            }
            records.insert(rec.seq, units);
        }
        // The manifest equals the model: one entry per unit (I1), the newest logged one.
        let manifest: Vec<_> = snap.iter().unwrap().map(|e| e.unwrap()).collect();
        let keys: Vec<&str> = manifest.iter().map(|e| e.unit.as_str()).collect();
        let mut sorted = keys.clone();
        sorted.dedup();
        assert_eq!(keys, sorted, "the manifest lists a unit twice (I1)");
        let from_manifest: BTreeMap<String, (u64, ObjectId, u64)> = manifest
            .into_iter()
            .map(|e| (e.unit, (e.source_version, e.object.id, e.seq)))
            .collect();
        let from_model: BTreeMap<String, (u64, ObjectId, u64)> = current
            .into_iter()
            .map(|(u, c)| (u, (c.source_version, c.object, c.seq)))
            .collect();
        assert_eq!(
            from_manifest, from_model,
            "manifest differs from the log replay"
        );
        let report = replay(&snap).unwrap();
        assert!(report.is_clean(), "replay found problems (I7): {report:?}");
        Model { by_unit, records }
    }

    /// The unit's entry in effect once every record up to and including `p` is applied.
    fn state_at(&self, unit: &str, p: u64) -> Option<Current> {
        let entries = self.by_unit.get(unit)?;
        let i = entries.partition_point(|c| c.seq <= p);
        i.checked_sub(1).map(|i| entries[i])
    }

    /// What the rules say for `req` if it is decided against the state after record `p`, as the
    /// outcomes a writer would see (with `seq` for an accepted batch, `None` if it aborts).
    fn expected(&self, req: &Request, p: u64, seq: Option<u64>) -> Vec<Outcome> {
        let decisions: Vec<(Decision, Option<Current>)> = req
            .items
            .iter()
            .map(|(u, v, o)| {
                let cur = self.state_at(u, p);
                let inc = Incoming {
                    source_version: *v,
                    object: *o,
                    token: None,
                    intent: Intent::Put,
                };
                (decide(cur.as_ref(), None, 0, &inc, || None), cur)
            })
            .collect();
        let rejected = decisions.iter().any(|(d, _)| !d.is_acceptable());
        decisions
            .into_iter()
            .map(|(d, cur)| {
                let applied = if rejected { None } else { seq };
                d.outcome(applied, cur.map(|c| c.source_version))
            })
            .collect()
    }
}

/// A reader's check of one snapshot (I4): every commit record it contains is wholly visible —
/// each of its units has an entry at that record's seq or a later one — and nothing newer.
fn check_snapshot_is_whole(store: &Store) {
    let snap = store.snapshot().unwrap();
    let manifest: HashMap<String, u64> = snap
        .iter()
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.unit, e.seq))
        .collect();
    for rec in snap.changes_since(0).unwrap() {
        let rec = rec.unwrap();
        let RecordBody::Commit { entries } = rec.body else {
            continue;
        };
        for e in entries {
            let seen = manifest.get(&e.unit).copied();
            assert!(
                seen.is_some_and(|s| s >= rec.seq),
                "snapshot at seq {} shows part of commit {}: {} is at {seen:?} (I4)",
                snap.seq(),
                rec.seq,
                e.unit
            );
        }
    }
    let newest = manifest.values().copied().max().unwrap_or(0);
    assert!(
        newest <= snap.seq(),
        "snapshot at {} shows seq {newest}",
        snap.seq()
    );
}

/// Objects that depend only on (version, variant), staged once: two writers with the same
/// version and variant produce identical bytes (a duplicate), different variants differ (a
/// conflict).
type Objects = HashMap<(u64, u64), Staged>;

fn stage_every_variant(store: &Store) -> Objects {
    (1..=VERSIONS)
        .flat_map(|v| (0..2).map(move |x| (v, x)))
        .map(|(v, x)| {
            let bytes = format!("output version {v} variant {x}");
            ((v, x), store.stage_bytes(bytes.as_bytes()).unwrap())
        })
        .collect()
}

/// Writer `t`'s requests: single units, or (every eighth writer) batches of `BATCH_UNITS`, each
/// with the seqs seen just before it was submitted and just after it returned.
fn write_requests(store: &Store, objects: &Objects, t: usize) -> Vec<Request> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
    let n = if t.is_multiple_of(8) { BATCH_UNITS } else { 1 };
    (0..REQUESTS_PER_THREAD)
        .map(|_| {
            let mut units = HashSet::new();
            let mut items = Vec::new();
            let mut batch = Batch::new();
            while items.len() < n {
                let u = rng.below(UNITS);
                if !units.insert(u) {
                    continue;
                }
                let v = 1 + rng.below(VERSIONS);
                // Mostly variant 0, so that duplicates outnumber conflicts.
                let x = u64::from(rng.below(5) == 0);
                let staged = &objects[&(v, x)];
                batch = batch.put(unit(u), v, staged);
                items.push((unit(u), v, staged.id()));
            }
            let lo = store.last_seq().unwrap();
            let report = store.commit(batch).unwrap();
            let hi = store.last_seq().unwrap();
            Request {
                items,
                lo,
                hi,
                report,
            }
        })
        .collect()
}

/// Every log entry belongs to exactly one committed outcome, and vice versa; a commit's record
/// holds exactly its committed units. Returns how many outcomes of each name there were.
fn every_entry_is_one_acknowledged_commit(
    requests: &[Request],
    model: &Model,
) -> HashMap<&'static str, usize> {
    let mut claimed: HashSet<(String, u64)> = HashSet::new();
    let mut by_name: HashMap<&'static str, usize> = HashMap::new();
    for req in requests {
        assert_eq!(req.report.units.len(), req.items.len());
        for (u, (unit, v, o)) in req.report.units.iter().zip(&req.items) {
            assert_eq!((&u.unit, u.source_version, u.object), (unit, *v, *o));
            *by_name.entry(u.outcome.name()).or_default() += 1;
            if let Outcome::Committed { seq, .. } = u.outcome {
                assert_eq!(
                    req.report.seq,
                    Some(seq),
                    "a unit committed outside its record"
                );
                assert!(
                    claimed.insert((unit.clone(), seq)),
                    "two requests were acknowledged for {unit} at seq {seq}"
                );
            }
        }
        let mut committed: Vec<String> = req
            .report
            .units
            .iter()
            .filter(|u| matches!(u.outcome, Outcome::Committed { .. }))
            .map(|u| u.unit.clone())
            .collect();
        match req.report.seq {
            Some(seq) => {
                let mut logged = model.records[&seq].clone();
                logged.sort();
                committed.sort();
                assert_eq!(logged, committed, "record {seq} does not match its commit");
            }
            None => assert!(
                committed.is_empty(),
                "{committed:?} committed without a seq"
            ),
        }
    }
    let logged: usize = model.records.values().map(Vec::len).sum();
    assert_eq!(
        logged,
        claimed.len(),
        "the log holds entries nobody was told were committed"
    );
    by_name
}

/// Every outcome is what the sequential rules say at a point where the request could have been
/// decided.
fn every_outcome_is_the_rules_at_some_seq(requests: &[Request], model: &Model) {
    for req in requests {
        let observed: Vec<Outcome> = req.report.units.iter().map(|u| u.outcome).collect();
        match req.report.seq {
            Some(seq) => {
                assert!(
                    req.lo < seq && seq <= req.hi,
                    "committed at {seq} outside the window ({}, {}]",
                    req.lo,
                    req.hi
                );
                assert_eq!(
                    observed,
                    model.expected(req, seq - 1, Some(seq)),
                    "{:?}: outcome differs from the rules just before seq {seq}",
                    req.items
                );
            }
            None => {
                let fits = (req.lo..=req.hi).any(|p| model.expected(req, p, None) == observed);
                assert!(
                    fits,
                    "{:?} got {observed:?}, which the rules give at no seq in [{}, {}]",
                    req.items, req.lo, req.hi
                );
            }
        }
    }
}

/// Every request was in exactly one group, and groups kept their bound.
fn groups_kept_their_bound(store: &Store, requests: &[Request]) {
    let m = store.metrics();
    let submitted: u64 = requests.iter().map(|r| r.items.len() as u64).sum();
    assert_eq!(
        m.group_units.sum, submitted,
        "units per group do not add up"
    );
    assert!(
        m.group_units
            .buckets
            .iter()
            .all(|&(le, n)| n == 0 || le < 2 * GROUP_BOUND as u64),
        "a group went over the bound of {GROUP_BOUND}: {:?}",
        m.group_units.buckets
    );
}

#[test]
fn sixty_four_writers_agree_with_a_sequential_replay() {
    let (_dir, store) = common::open_new(
        "lake",
        Options {
            max_group_units: GROUP_BOUND,
            ..Options::default()
        },
    );
    let objects = Arc::new(stage_every_variant(&store));
    let running = Arc::new(AtomicBool::new(true));
    let snapshots_checked = Arc::new(AtomicU64::new(0));
    let reader = {
        let (store, running, checked) = (store.clone(), running.clone(), snapshots_checked.clone());
        std::thread::spawn(move || {
            while running.load(Ordering::Relaxed) {
                check_snapshot_is_whole(&store);
                checked.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, objects) = (store.clone(), objects.clone());
            std::thread::spawn(move || write_requests(&store, &objects, t))
        })
        .collect();
    let requests: Vec<Request> = writers
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    running.store(false, Ordering::Relaxed);
    reader.join().unwrap();
    check_snapshot_is_whole(&store);

    let model = Model::replay_log(&store);
    let by_name = every_entry_is_one_acknowledged_commit(&requests, &model);
    every_outcome_is_the_rules_at_some_seq(&requests, &model);
    groups_kept_their_bound(&store, &requests);
    // The mix must have exercised every rule, or the test proves less than it claims.
    for name in ["committed", "duplicate", "conflict", "stale", "aborted"] {
        assert!(
            by_name.get(name).copied().unwrap_or(0) > 0,
            "no {name} outcome in {by_name:?}"
        );
    }
    let checked = snapshots_checked.load(Ordering::Relaxed);
    assert!(checked > 0);
    eprintln!(
        "{} requests, outcomes {by_name:?}, {}, {checked} snapshots checked",
        requests.len(),
        crate::common::groups_line(&store),
    );
}
