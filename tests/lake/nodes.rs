//! A shared lake (SPEC R23, I11): several nodes in this process on one `memory://` lake commit
//! overlapping units; every answer is checked against a model of what must be there, and the
//! lake against the invariants. Lost responses and 409s come from the lake's fault plan
//! (`LakeFaults`). Needs the `lake` feature: `cargo test --features lake --test lake`.

use crate::common;

use common::SplitMix64 as Rng;
use oncelake::{
    Batch, ClaimOutcome, Entry, LakeFault, LakeFaults, ManualClock, ObjectId, Options, Outcome,
    Store, VerifyOptions,
};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const T0: u64 = 1_800_000_000_000;

/// A lake of its own for each test (memory lakes are shared by name within the process).
fn lake_url(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("memory://{test}-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn node(dir: &Path, url: &str, clock: &ManualClock) -> Store {
    Store::open_with(
        dir,
        Options {
            lake: Some(url.to_string()),
            clock: Arc::new(clock.clone()),
            ..Options::default()
        },
    )
    .unwrap()
}

fn put(store: &Store, unit: &str, version: u64, bytes: &[u8]) -> Outcome {
    store.put(unit, version, bytes).unwrap().outcome
}

/// Every entry of a node's snapshot, after a sync: unit -> (version, object, seq).
fn entries(store: &Store) -> BTreeMap<String, (u64, ObjectId, u64)> {
    store.sync().unwrap();
    let snap = store.snapshot().unwrap();
    snap.iter()
        .unwrap()
        .map(|e| {
            let e: Entry = e.unwrap();
            (e.unit, (e.source_version, e.object.id, e.seq))
        })
        .collect()
}

/// The invariants a node's replica must hold: I1/I2 (verify: every entry's object is there,
/// with its size and CRC), I7 (replaying the log reproduces the manifest).
fn check_node(store: &Store) {
    store.sync().unwrap();
    let report = store.verify(VerifyOptions::default()).unwrap();
    assert!(report.is_ok(), "verify: {report:?}");
    let replay = oncelake::replay(&store.snapshot().unwrap()).unwrap();
    assert!(replay.problems.is_empty(), "replay: {replay:?}");
}

#[test]
fn a_commit_on_one_node_is_seen_by_another_after_sync_and_its_object_is_fetched() {
    let url = lake_url("seen");
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock);
    let b = node(&d.path().join("b"), &url, &clock);
    let out = put(&a, "orders/day=1", 7, b"parquet of day 1");
    let Outcome::Committed { seq, .. } = out else {
        panic!("expected a commit, got {out:?}");
    };
    // b has not synced: its replica is behind. After sync it reads a's commit and its bytes.
    b.sync().unwrap();
    let snap = b.snapshot().unwrap();
    let e = snap
        .get("orders/day=1")
        .unwrap()
        .expect("b sees a's commit");
    assert_eq!((e.source_version, e.seq), (7, seq));
    assert_eq!(snap.read_object(&e).unwrap(), b"parquet of day 1");
    assert_eq!(b.lake_url().as_deref(), Some(url.as_str()));
    check_node(&a);
    check_node(&b);
}

#[test]
fn a_conflict_is_decided_by_the_same_rules_on_either_node() {
    let url = lake_url("conflict");
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock);
    let b = node(&d.path().join("b"), &url, &clock);
    let won = put(&a, "u", 1, b"first");
    assert!(matches!(won, Outcome::Committed { .. }), "{won:?}");
    let first = ObjectId::of(b"first");
    // Every commit syncs before it decides: b's replica was behind, its answer is not.
    for (store, bytes) in [(&b, &b"other"[..]), (&a, &b"other"[..])] {
        match put(store, "u", 1, bytes) {
            Outcome::Conflict { winner, .. } => assert_eq!(winner, first),
            o => panic!("expected a conflict, got {o:?}"),
        }
    }
    assert!(matches!(
        put(&b, "u", 1, b"first"),
        Outcome::Duplicate { .. }
    ));
    assert!(matches!(
        put(&b, "u", 0, b"older"),
        Outcome::Stale { current_version: 1 }
    ));
    assert_eq!(entries(&a), entries(&b));
}

/// What one writer was answered.
#[derive(Debug, Clone)]
struct Answer {
    unit: String,
    version: u64,
    object: ObjectId,
    outcome: Outcome,
}

/// Checks the answers of a run against the lake's final state, as the model says it must be:
/// at most one commit per unit version (I11), versions rising with seq (I5), every acknowledged
/// commit readable at its seq on every node (nothing acknowledged is missing), the current entry
/// the acknowledged commit of highest seq, and duplicates and conflicts naming that commit.
fn check_answers(answers: &[Answer], nodes: &[&Store]) {
    let mut committed: BTreeMap<(String, u64), (ObjectId, u64)> = BTreeMap::new();
    let mut model: BTreeMap<String, (u64, ObjectId, u64)> = BTreeMap::new();
    let mut seqs: HashMap<u64, String> = HashMap::new();
    for a in answers {
        if let Outcome::Committed { seq, .. } = a.outcome {
            let again = committed.insert((a.unit.clone(), a.version), (a.object, seq));
            assert!(again.is_none(), "two commits of {}@{}", a.unit, a.version);
            if let Some(other) = seqs.insert(seq, a.unit.clone()) {
                assert_eq!(
                    other, a.unit,
                    "seq {seq} answered for two units in two commits"
                );
            }
            let cur = model
                .entry(a.unit.clone())
                .or_insert((a.version, a.object, seq));
            if seq >= cur.2 {
                *cur = (a.version, a.object, seq);
            }
        }
    }
    // I5: per unit, committed versions rise with seq.
    let mut by_unit: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for ((unit, version), (_, seq)) in &committed {
        by_unit.entry(unit).or_default().push((*seq, *version));
    }
    for (unit, mut v) in by_unit {
        v.sort();
        assert!(v.windows(2).all(|w| w[0].1 < w[1].1), "{unit}: {v:?}");
    }
    for a in answers {
        match a.outcome {
            Outcome::Duplicate { seq } => {
                let (obj, s) = committed[&(a.unit.clone(), a.version)];
                assert_eq!((obj, s), (a.object, seq), "duplicate of {a:?}");
            }
            Outcome::Conflict { winner, winner_seq } => {
                let (obj, s) = committed[&(a.unit.clone(), a.version)];
                assert_eq!((obj, s), (winner, winner_seq), "conflict of {a:?}");
                assert_ne!(obj, a.object);
            }
            Outcome::Stale { current_version } => assert!(current_version > a.version),
            Outcome::Committed { .. } => {}
            o => panic!("unexpected answer {o:?} to {a:?}"),
        }
    }
    for n in nodes {
        let got = entries(n);
        assert_eq!(got, model, "a node's manifest differs from the model");
        let newest = n.last_seq().unwrap();
        for ((unit, _), (obj, seq)) in &committed {
            let snap = n.snapshot_at(*seq).unwrap();
            let e = snap
                .get(unit)
                .unwrap()
                .expect("an acknowledged commit is missing");
            assert_eq!((e.object.id, e.seq), (*obj, *seq));
            assert!(*seq <= newest);
        }
        check_node(n);
    }
}

/// Threads on several nodes commit overlapping unit versions, some with differing bytes.
fn race(url: &str, dir: &Path, nodes: usize, threads: usize, writes: usize, seed: u64) {
    let clock = ManualClock::new(T0);
    let stores: Vec<Store> = (0..nodes)
        .map(|i| node(&dir.join(format!("n{i}")), url, &clock))
        .collect();
    let answers = std::thread::scope(|s| {
        let hs: Vec<_> = (0..nodes * threads)
            .map(|t| {
                let store = stores[t % nodes].clone();
                s.spawn(move || {
                    let mut rng = Rng(seed ^ ((t as u64 + 1) * 0x1234_5678));
                    let mut out = Vec::new();
                    for _ in 0..writes {
                        let unit = format!("u{}", rng.below(6));
                        let version = 1 + rng.below(4);
                        let bytes = format!("{unit}@{version}#{}", rng.below(2));
                        let outcome = put(&store, &unit, version, bytes.as_bytes());
                        out.push(Answer {
                            unit,
                            version,
                            object: ObjectId::of(bytes.as_bytes()),
                            outcome,
                        });
                    }
                    out
                })
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(answers.len(), nodes * threads * writes);
    let refs: Vec<&Store> = stores.iter().collect();
    check_answers(&answers, &refs);
}

#[test]
fn nodes_racing_on_overlapping_units_agree_with_the_model() {
    let d = tempfile::tempdir().unwrap();
    race(&lake_url("race"), d.path(), 3, 3, 40, 0xA11CE);
}

#[test]
fn lost_responses_and_409s_never_commit_twice_nor_fail_a_winner() {
    let url = lake_url("lost");
    let plan = LakeFaults::install(url.trim_start_matches("memory://"), 7);
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock);
    let b = node(&d.path().join("b"), &url, &clock);
    let mut answers = Vec::new();
    for (i, fault) in [
        LakeFault::After,
        LakeFault::AfterAlreadyExists,
        LakeFault::Conflict,
        LakeFault::Before,
    ]
    .into_iter()
    .enumerate()
    {
        plan.script("log/", fault);
        let unit = format!("u{i}");
        let outcome = put(&a, &unit, 1, b"x");
        assert!(
            matches!(outcome, Outcome::Committed { .. }),
            "{fault:?}: {outcome:?}"
        );
        answers.push(Answer {
            unit: unit.clone(),
            version: 1,
            object: ObjectId::of(b"x"),
            outcome,
        });
        // The retry of the writer that won is a duplicate, on either node.
        for n in [&a, &b] {
            let again = put(n, &unit, 1, b"x");
            assert!(matches!(again, Outcome::Duplicate { .. }), "{again:?}");
            answers.push(Answer {
                outcome: again,
                ..answers.last().unwrap().clone()
            });
        }
    }
    let c = plan.counts();
    assert_eq!(
        (c.lost_responses, c.conflicts, c.before),
        (2, 1, 1),
        "{c:?}"
    );
    // Four groups, four segments: a lost response never wrote a second one.
    assert_eq!(a.last_seq().unwrap(), 4);
    check_answers(&answers, &[&a, &b]);
}

#[test]
fn random_faults_under_a_race_keep_every_answer_definitive_and_right() {
    // Which requests draw a fault depends on how the threads interleave, so one race may miss a
    // kind: race again, on a fresh lake, until every kind was injected (each race checks all of
    // its answers), and fail if eight races never injected one.
    let (mut lost, mut conflicts, mut before) = (0, 0, 0);
    for round in 0..8u64 {
        let url = lake_url("faulty-race");
        let plan = LakeFaults::install(url.trim_start_matches("memory://"), 11 + round);
        plan.set_rates(oncelake::FaultRates {
            before: 40,
            after: 40,
            conflict: 40,
            after_already_exists: 40,
            max_latency_ms: 2,
        });
        let d = tempfile::tempdir().unwrap();
        race(&url, d.path(), 3, 2, 30, 0xFA17 + round);
        let c = plan.counts();
        (lost, conflicts, before) = (
            lost + c.lost_responses,
            conflicts + c.conflicts,
            before + c.before,
        );
        if lost > 0 && conflicts > 0 && before > 0 {
            return;
        }
    }
    panic!("eight races injected {lost} lost responses, {conflicts} conflicts, {before} failures before the write: every kind must occur");
}

#[test]
fn a_takeover_on_one_node_fences_the_old_holder_on_another_whatever_its_clock_says() {
    let url = lake_url("fence");
    let d = tempfile::tempdir().unwrap();
    // Each node has its own clock: a's stands still (it was paused past its lease), b's moved.
    let clock_a = ManualClock::new(T0);
    let clock_b = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock_a);
    let b = node(&d.path().join("b"), &url, &clock_b);
    let ttl = Duration::from_secs(30);
    let ClaimOutcome::Granted { lease: old, .. } = a.claim("u", 1, "wa", ttl).unwrap() else {
        panic!("a's claim is granted");
    };
    // While the lease is live by b's clock, b is told it is held.
    assert!(matches!(
        b.claim("u", 1, "wb", ttl).unwrap(),
        ClaimOutcome::Held { .. }
    ));
    clock_b.advance_ms(31_000);
    let ClaimOutcome::Granted {
        lease: new,
        took_over,
    } = b.claim("u", 1, "wb", ttl).unwrap()
    else {
        panic!("b takes the expired lease over");
    };
    assert!(took_over && new.token > old.token);
    // a's clock says its lease is live; the log says it was taken over: fenced.
    let staged = a.stage_bytes(b"late").unwrap();
    let late = a
        .commit(Batch::new().put_fenced("u", 1, &staged, old.token))
        .unwrap();
    match late.units[0].outcome {
        Outcome::Fenced {
            token,
            newest_token,
        } => assert_eq!((token, newest_token), (old.token, new.token)),
        o => panic!("expected fenced, got {o:?}"),
    }
    let staged = b.stage_bytes(b"new holder").unwrap();
    let ok = b
        .commit(Batch::new().put_fenced("u", 1, &staged, new.token))
        .unwrap();
    assert!(matches!(ok.units[0].outcome, Outcome::Committed { .. }));
    let e = a.snapshot().map(|_| ()).and_then(|_| {
        a.sync()?;
        a.get("u")
    });
    assert_eq!(e.unwrap().unwrap().object.id, ObjectId::of(b"new holder"));
}

#[test]
fn a_node_reopened_or_joining_late_catches_up_from_the_lake() {
    let url = lake_url("join");
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock);
    let b = node(&d.path().join("b"), &url, &clock);
    for i in 0..20u64 {
        let n = if i % 2 == 0 { &a } else { &b };
        assert!(matches!(
            put(n, &format!("u{}", i % 7), i + 1, format!("v{i}").as_bytes()),
            Outcome::Committed { .. }
        ));
    }
    drop(a);
    put(&b, "after-a-closed", 1, b"x");
    // Reopened without naming the lake: the directory's binding names it.
    let a = Store::open(d.path().join("a")).unwrap();
    assert_eq!(entries(&a), entries(&b));
    let c = node(&d.path().join("c"), &url, &clock);
    assert_eq!(entries(&c), entries(&b));
    let snap = c.snapshot().unwrap();
    let e = snap.get("after-a-closed").unwrap().unwrap();
    assert_eq!(snap.read_object(&e).unwrap(), b"x");
    check_node(&c);
}

#[test]
fn a_binding_is_kept_and_a_local_store_with_commits_is_not_bound() {
    let url = lake_url("bind");
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    drop(node(&d.path().join("a"), &url, &clock));
    let other = Store::open_with(
        d.path().join("a"),
        Options {
            lake: Some(lake_url("bind-other")),
            ..Options::default()
        },
    );
    assert!(other
        .unwrap_err()
        .to_string()
        .contains("is a node of the lake"));
    let local = Store::open(d.path().join("local")).unwrap();
    local.put("u", 1, b"x").unwrap();
    drop(local);
    let bound = Store::open_with(
        d.path().join("local"),
        Options {
            lake: Some(url.clone()),
            ..Options::default()
        },
    );
    assert!(bound
        .unwrap_err()
        .to_string()
        .contains("local store with commits"));
    let bad = Store::open_with(
        d.path().join("bad"),
        Options {
            lake: Some("http://nope".into()),
            ..Options::default()
        },
    );
    assert!(bad.unwrap_err().to_string().contains("s3://BUCKET/PREFIX"));
}

#[test]
fn gc_of_a_lake_node_is_refused_until_the_gc_fence_and_deletes_nothing() {
    let url = lake_url("gc");
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock);
    put(&a, "u", 1, b"old");
    put(&a, "u", 2, b"new");
    clock.advance_ms(10 * 24 * 3600 * 1000);
    let e = a
        .gc(oncelake::GcOptions {
            retain: Duration::ZERO,
            ..oncelake::GcOptions::default()
        })
        .unwrap_err();
    assert!(e.to_string().contains("GC fence"), "{e}");
    // The superseded version is still readable as of its seq, object and all.
    let snap = a.snapshot_at(1).unwrap();
    let old = snap.get("u").unwrap().unwrap();
    assert_eq!(snap.read_object(&old).unwrap(), b"old");
    check_node(&a);
}
