//! `Store::write_each`: many independent writes from one thread as one request of the commit
//! queue. The rule: each write is answered exactly as the same write made alone, in the same
//! place of the order, would be — its checks, the R3 rules, the lease rules, its seq — and the
//! store ends the same. Checked against the one-write calls on a second store fed the same
//! writes one by one (a model that is the engine's own sequential behaviour), over random mixes
//! of commits (good, duplicate, stale, conflicting, corrected, fenced, partial, with a bad key or
//! another store's handle), claims, renewals and releases, cut into random runs.

use crate::common;

use common::SplitMix64 as Rng;
use oncelake::{
    Batch, ClaimOutcome, Intent, Lease, ManualClock, Options, Result, Staged, Store, Write, Written,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// One write, independent of the store it goes to (handles are staged per store).
#[derive(Clone, Debug)]
enum Plan {
    /// Items: (unit, version, object index, token, intent); partial or all-or-nothing.
    Commit {
        items: Vec<(String, u64, usize, Option<u64>, Intent)>,
        partial: bool,
        foreign: bool,
    },
    Claim {
        unit: String,
        version: u64,
        worker: String,
    },
    Renew(Lease),
    Release(Lease),
}

const OBJECTS: usize = 4;

fn unit(rng: &mut Rng) -> String {
    // Now and then a key the rules refuse (empty, or internal for a user call).
    match rng.below(40) {
        0 => String::new(),
        1 => ".pipeline/x".into(),
        n => format!("orders/u{:02}", n % 12),
    }
}

fn plans(seed: u64, n: usize) -> Vec<Plan> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| match rng.below(10) {
            0..=5 => {
                let items = (0..1 + rng.below(3))
                    .map(|_| {
                        let token = rng.chance(15).then(|| 1 + rng.below(6));
                        let intent = if rng.chance(10) {
                            Intent::Correct
                        } else {
                            Intent::Put
                        };
                        (
                            unit(&mut rng),
                            1 + rng.below(3),
                            rng.below(OBJECTS as u64) as usize,
                            token,
                            intent,
                        )
                    })
                    .collect();
                Plan::Commit {
                    items,
                    partial: rng.chance(30),
                    foreign: rng.chance(5),
                }
            }
            6 | 7 => Plan::Claim {
                unit: unit(&mut rng),
                version: 1 + rng.below(4),
                worker: format!("w{}", rng.below(3)),
            },
            // Leases guessed, not taken from answers: tokens are numbered from 1 in both stores,
            // so the same guess is right (or wrong) in both.
            k => {
                let lease = Lease {
                    unit: unit(&mut rng),
                    worker: format!("w{}", rng.below(3)),
                    token: 1 + rng.below(6),
                    source_version: 1 + rng.below(4),
                    expires_at_ms: 0,
                };
                if k == 8 {
                    Plan::Renew(lease)
                } else {
                    Plan::Release(lease)
                }
            }
        })
        .collect()
}

struct Side {
    store: Store,
    objects: Vec<Staged>,
    /// A handle of another store (refused by this one).
    foreign: Staged,
    _other: Store,
}

fn side(dir: &std::path::Path, clock: &ManualClock) -> Side {
    let store = Store::open_with(
        dir.join("lake"),
        Options {
            clock: Arc::new(clock.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    let other = Store::open(dir.join("other")).unwrap();
    let objects = (0..OBJECTS)
        .map(|i| store.stage_bytes(format!("object {i}").as_bytes()).unwrap())
        .collect();
    let foreign = other.stage_bytes(b"not ours").unwrap();
    Side {
        store,
        objects,
        foreign,
        _other: other,
    }
}

fn write_of(side: &Side, plan: &Plan) -> Write {
    match plan.clone() {
        Plan::Commit {
            items,
            partial,
            foreign,
        } => {
            let mut b = Batch::new();
            for (k, (unit, v, o, token, intent)) in items.into_iter().enumerate() {
                let staged = if foreign && k == 0 {
                    &side.foreign
                } else {
                    &side.objects[o]
                };
                b = b.item(unit, v, staged, token, intent);
            }
            Write::Commit(if partial { b.partial() } else { b })
        }
        Plan::Claim {
            unit,
            version,
            worker,
        } => Write::Claim {
            unit,
            source_version: version,
            worker,
            ttl: Duration::from_secs(60),
        },
        Plan::Renew(lease) => Write::Renew {
            lease,
            ttl: Duration::from_secs(60),
        },
        Plan::Release(lease) => Write::Release { lease },
    }
}

/// The one-write call a write stands for.
fn alone(store: &Store, write: Write) -> Result<Written> {
    match write {
        Write::Commit(b) => store.commit(b).map(Written::Commit),
        Write::Claim {
            unit,
            source_version,
            worker,
            ttl,
        } => store
            .claim(&unit, source_version, &worker, ttl)
            .map(Written::Claim),
        Write::Renew { lease, ttl } => store.renew(&lease, ttl).map(Written::Renew),
        Write::Release { lease } => store.release(&lease).map(Written::Release),
    }
}

/// An answer as compared: its whole value, or the error's kind and message.
fn shown(r: &Result<Written>) -> String {
    match r {
        Ok(w) => format!("{w:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// What a store holds: every unit's current entry and the whole log.
fn contents(store: &Store) -> (BTreeMap<String, String>, Vec<String>) {
    let snap = store.snapshot().unwrap();
    let entries = snap
        .iter()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.unit.clone(), format!("{e:?}"))
        })
        .collect();
    let log = snap
        .changes_since(0)
        .unwrap()
        .map(|r| format!("{:?}", r.unwrap()))
        .collect();
    (entries, log)
}

#[test]
fn each_write_is_answered_as_the_same_write_made_alone() {
    for seed in 1..=6u64 {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_800_000_000_000);
        let each = side(&dir.path().join("each"), &clock);
        let one = side(&dir.path().join("one"), &clock);
        let plans = plans(seed, 240);
        let mut rng = Rng(seed ^ 0x5eed);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < plans.len() {
            let run = (1 + rng.below(40) as usize).min(plans.len() - i);
            let writes = plans[i..i + run]
                .iter()
                .map(|p| write_of(&each, p))
                .collect();
            let answers = each.store.write_each(writes);
            assert_eq!(answers.len(), run, "one answer per write");
            got.extend(answers.iter().map(shown));
            for p in &plans[i..i + run] {
                want.push(shown(&alone(&one.store, write_of(&one, p))));
            }
            i += run;
            // Leases expire between runs now and then, so takeovers and lost renewals happen.
            if rng.chance(20) {
                clock.advance_ms(61_000);
            }
        }
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "seed {seed}, write {k}: {:?}", plans[k]);
        }
        // The mix exercised what it is meant to.
        let count = |s: &str| want.iter().filter(|w| w.contains(s)).count();
        for kind in ["Committed", "Duplicate", "error", "Granted", "Held"] {
            assert!(
                count(kind) > 0,
                "seed {seed}: no {kind} answer in {want:#?}"
            );
        }
        assert_eq!(contents(&each.store), contents(&one.store), "seed {seed}");
    }
}

#[test]
fn writes_of_one_call_share_a_group_and_runs_keep_to_the_bound() {
    let (_dir, store) = common::open_new(
        "lake",
        Options {
            max_group_units: 8,
            ..Options::default()
        },
    );
    let staged = store.stage_bytes(b"rows").unwrap();
    let groups = |s: &Store| s.metrics().groups;
    // 6 one-unit commits: one group.
    let before = groups(&store);
    let writes = (0..6)
        .map(|i| Write::Commit(Batch::new().put(format!("a/{i}"), 1, &staged)))
        .collect();
    assert!(store.write_each(writes).iter().all(|r| r.is_ok()));
    assert_eq!(groups(&store) - before, 1);
    // 30 units in batches of 3 under a bound of 8: runs of two batches (6 units), so 15 groups,
    // every batch committed whole.
    let before = groups(&store);
    let writes = (0..10)
        .map(|i| {
            let mut b = Batch::new();
            for k in 0..3 {
                b = b.put(format!("b/{i}/{k}"), 1, &staged);
            }
            Write::Commit(b)
        })
        .collect();
    let answers = store.write_each(writes);
    assert_eq!(groups(&store) - before, 5);
    for a in &answers {
        match a {
            Ok(Written::Commit(r)) => {
                assert!(r.units.iter().all(|u| u.outcome.name() == "committed"))
            }
            other => panic!("{other:?}"),
        }
    }
    // An empty call answers nothing and writes nothing.
    let before = groups(&store);
    assert!(store.write_each(Vec::new()).is_empty());
    assert_eq!(groups(&store), before);
}

#[test]
fn a_write_refused_by_its_checks_is_refused_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lake")).unwrap();
    let other = Store::open(dir.path().join("other")).unwrap();
    let ours = store.stage_bytes(b"ours").unwrap();
    let theirs = other.stage_bytes(b"theirs").unwrap();
    let answers = store.write_each(vec![
        Write::Commit(Batch::new().put("ok/a", 1, &ours)),
        Write::Commit(Batch::new().put("ok/b", 1, &theirs)),
        Write::Commit(Batch::new().put("", 1, &ours)),
        Write::Claim {
            unit: "ok/c".into(),
            source_version: 1,
            worker: String::new(),
            ttl: Duration::from_secs(5),
        },
        Write::Commit(Batch::new().put("ok/d", 1, &ours)),
    ]);
    let ok: Vec<bool> = answers.iter().map(|a| a.is_ok()).collect();
    assert_eq!(ok, [true, false, false, false, true], "{answers:?}");
    assert!(store.lookup("ok/a").unwrap().is_some());
    assert!(store.lookup("ok/b").unwrap().is_none());
    assert!(store.lookup("ok/d").unwrap().is_some());
    // Nothing was claimed for the refused claim.
    match store.claim("ok/c", 1, "w", Duration::from_secs(5)).unwrap() {
        ClaimOutcome::Granted { lease, .. } => assert_eq!(lease.token, 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_read_only_store_refuses_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    drop(Store::open(&path).unwrap());
    let ro = Store::open_read_only(&path).unwrap();
    let answers = ro.write_each(vec![
        Write::Claim {
            unit: "a".into(),
            source_version: 1,
            worker: "w".into(),
            ttl: Duration::from_secs(5),
        },
        Write::Claim {
            unit: "b".into(),
            source_version: 1,
            worker: "w".into(),
            ttl: Duration::from_secs(5),
        },
    ]);
    assert_eq!(answers.len(), 2);
    for a in answers {
        match a {
            Err(oncelake::Error::ReadOnly { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}

/// A sync that fails while a call's writes are in one group fails every one of them (none is
/// answered as done), the store refuses writes until it is reopened, and after the reopen each
/// batch is there whole or not at all, beside everything acknowledged before.
#[test]
fn a_failed_sync_fails_every_write_of_the_call_and_loses_nothing_acknowledged() {
    let (_dir, path, clock, plan, store) = common::new_faulty_store(1_800_000_000_000);
    let staged = store.stage_bytes(b"rows").unwrap();
    let before: Vec<Write> = (0..4)
        .map(|i| Write::Commit(Batch::new().put(format!("done/{i}"), 1, &staged)))
        .collect();
    assert!(store.write_each(before).iter().all(|a| a.is_ok()));

    plan.fail_syncs(true);
    let writes: Vec<Write> = (0..6)
        .map(|i| {
            Write::Commit(Batch::new().put(format!("lost/{i}/a"), 1, &staged).put(
                format!("lost/{i}/b"),
                1,
                &staged,
            ))
        })
        .chain([Write::Claim {
            unit: "lost/claim".into(),
            source_version: 1,
            worker: "w".into(),
            ttl: Duration::from_secs(30),
        }])
        .collect();
    let mut answered = None;
    store.write_each_then(writes, |a| answered = Some(a));
    let answers = answered.expect("write_each_then always answers");
    assert_eq!(answers.len(), 7);
    for a in &answers {
        assert!(
            matches!(a, Err(oncelake::Error::Failed { .. })),
            "a write of a group whose sync failed was answered {a:?}"
        );
    }
    plan.fail_syncs(false);
    let again = store.write_each(vec![Write::Commit(Batch::new().put("after/a", 1, &staged))]);
    assert!(
        matches!(again[0], Err(oncelake::Error::Failed { .. })),
        "a failed store took a write: {again:?}"
    );
    drop((staged, store));

    let store = Store::open_with(&path, common::real_options(&clock)).unwrap();
    for i in 0..4 {
        assert!(
            store.lookup(&format!("done/{i}")).unwrap().is_some(),
            "done/{i} was acknowledged"
        );
    }
    for i in 0..6 {
        let a = store.lookup(&format!("lost/{i}/a")).unwrap().is_some();
        let b = store.lookup(&format!("lost/{i}/b")).unwrap().is_some();
        assert_eq!(a, b, "batch lost/{i} is there in part");
    }
    assert!(store.lookup("after/a").unwrap().is_none());
}

// `Store::submit`: commits in flight from one thread, answered through handles.

/// What the R3 rules answer for `unit` at `version` with object `o`, given the model of what is
/// committed (unit → (version, object)); the model takes the commit.
fn model_decides(
    model: &mut BTreeMap<String, (u64, usize)>,
    unit: &str,
    version: u64,
    o: usize,
) -> &'static str {
    match model.get(unit) {
        Some(&(v, _)) if v > version => "stale",
        Some(&(v, oo)) if v == version => {
            if oo == o {
                "duplicate"
            } else {
                "conflict"
            }
        }
        _ => {
            model.insert(unit.to_string(), (version, o));
            "committed"
        }
    }
}

/// Many commits in flight from one thread, each of distinct units within its window (so their
/// order does not matter), some of several units: every handle's report is what the R3 rules
/// say against a model of what is committed, and the store ends holding exactly the model.
#[test]
fn submitted_commits_are_answered_by_the_rules_and_the_store_ends_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lake")).unwrap();
    let objects = two_objects(&store);
    let mut model: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    let mut rng = Rng(7);
    let mut seen = BTreeMap::<&str, usize>::new();
    for _window in 0..12 {
        // Up to 40 units, cut into batches of 1-3; each unit once per window.
        let mut units: Vec<String> = (0..60).map(|i| format!("orders/u{i:02}")).collect();
        let take = 1 + rng.below(40) as usize;
        let mut in_flight = Vec::new();
        while in_flight.len() < take && !units.is_empty() {
            let size = (1 + rng.below(3) as usize).min(units.len());
            let items: Vec<(String, u64, usize)> = (0..size)
                .map(|_| {
                    let u = units.swap_remove(rng.below(units.len() as u64) as usize);
                    (u, 1 + rng.below(4), rng.below(2) as usize)
                })
                .collect();
            let batch = items.iter().fold(Batch::new().partial(), |b, (u, v, o)| {
                b.put(u.as_str(), *v, &objects[*o])
            });
            in_flight.push((items, store.submit(batch).unwrap()));
        }
        for (items, handle) in in_flight {
            let report = handle.wait().unwrap();
            assert_eq!(report.units.len(), items.len());
            for ((u, v, o), got) in items.iter().zip(&report.units) {
                let want = model_decides(&mut model, u, *v, *o);
                assert_eq!(got.outcome.name(), want, "{u}@{v} object {o}: {got:?}");
                *seen.entry(want).or_default() += 1;
            }
        }
    }
    for kind in ["committed", "duplicate", "stale", "conflict"] {
        assert!(seen.contains_key(kind), "no {kind} outcome in {seen:?}");
    }
    assert_eq!(stored_versions(&store), model_versions(&model, &objects));
}

/// Two distinct objects staged in `store` (a model's object indexes 0 and 1).
fn two_objects(store: &Store) -> Vec<Staged> {
    (0..2)
        .map(|i| store.stage_bytes(format!("object {i}").as_bytes()).unwrap())
        .collect()
}

/// Every unit's current version and object in `store`.
fn stored_versions(store: &Store) -> BTreeMap<String, (u64, oncelake::ObjectId)> {
    let snap = store.snapshot().unwrap();
    snap.iter()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.unit.clone(), (e.source_version, e.object.id))
        })
        .collect()
}

/// What [`stored_versions`] must find for `model` (unit → version, object index).
fn model_versions(
    model: &BTreeMap<String, (u64, usize)>,
    objects: &[Staged],
) -> BTreeMap<String, (u64, oncelake::ObjectId)> {
    model
        .iter()
        .map(|(u, &(v, o))| (u.clone(), (v, objects[o].id())))
        .collect()
}

/// Dropping every handle, and then the store, loses no commit and cuts none: the store stays
/// open until every queued batch is answered, and a reopen finds each batch whole.
#[test]
fn dropped_handles_and_store_neither_lose_nor_cut_a_submitted_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let store = Store::open(&path).unwrap();
    let staged = store.stage_bytes(b"rows").unwrap();
    for i in 0..200 {
        let batch = (0..3).fold(Batch::new(), |b, k| b.put(format!("d/{i}/{k}"), 1, &staged));
        drop(store.submit(batch).unwrap());
    }
    drop((staged, store));
    // The last queued commit closes the store on a submission thread: wait for its lock.
    let store = Store::open_with(
        &path,
        Options {
            lock_wait: Duration::from_secs(60),
            ..Options::default()
        },
    )
    .unwrap();
    for i in 0..200 {
        for k in 0..3 {
            assert!(
                store.lookup(&format!("d/{i}/{k}")).unwrap().is_some(),
                "d/{i}/{k} was submitted and is missing"
            );
        }
    }
}

/// A new store at `path` whose clock can be made to panic, the clock, and the time it reads.
fn panicky_store(path: &std::path::Path) -> (Store, Arc<common::PanickyClock>, ManualClock) {
    let manual = ManualClock::new(1_800_000_000_000);
    let clock = common::PanickyClock::new(&manual);
    let options = Options {
        clock: clock.clone(),
        ..Options::default()
    };
    (Store::open_with(path, options).unwrap(), clock, manual)
}

/// Whether an answer tells of a leader's panic (the round's, or the failed store's after it).
fn learned_of_a_panic<T>(a: &Result<T>) -> bool {
    matches!(
        a,
        Err(oncelake::Error::LeaderPanicked | oncelake::Error::Failed { .. })
    )
}

/// A leader that panics (the caller's clock) answers every handle in flight — none waits
/// forever (I10) — and after a reopen every batch answered as committed is there, and every
/// batch is whole or absent.
#[test]
fn a_leader_panic_answers_every_submitted_handle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let (store, clock, manual) = panicky_store(&path);
    let staged = store.stage_bytes(b"rows").unwrap();
    let batch =
        |i: usize| (0..2).fold(Batch::new(), |b, k| b.put(format!("p/{i}/{k}"), 1, &staged));
    let mut handles: Vec<_> = (0..20).map(|i| store.submit(batch(i)).unwrap()).collect();
    clock.panic_in(1);
    handles.extend(
        (20..60)
            .map(|i| store.submit(batch(i)))
            .filter_map(|h| h.ok()),
    );
    let mut answered = Vec::new();
    for h in handles {
        match h.wait_timeout(Duration::from_secs(60)) {
            Ok(r) => answered.push(r.map(|r| r.applied())),
            Err(_) => panic!("a submitted commit was not answered within a minute"),
        }
    }
    assert!(clock.disarm(), "the armed clock reading never came");
    assert!(
        answered.iter().any(learned_of_a_panic),
        "no handle learned of the panic: {answered:?}"
    );
    drop((staged, store));
    let store = Store::open_with(
        &path,
        Options {
            lock_wait: Duration::from_secs(60),
            clock: Arc::new(manual.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    for (i, a) in answered.iter().enumerate() {
        let there: Vec<bool> = (0..2)
            .map(|k| store.lookup(&format!("p/{i}/{k}")).unwrap().is_some())
            .collect();
        assert_eq!(there[0], there[1], "batch p/{i} is there in part");
        if matches!(a, Ok(true)) {
            assert!(there[0], "batch p/{i} was acknowledged and is missing");
        }
    }
}

// `Store::submit_then`: any write in flight, its answer handed to a function.

/// Collects what `submit_then`'s functions are called with, by write number.
fn answers_of(
    rx: &std::sync::mpsc::Receiver<(usize, Result<Written>)>,
    n: usize,
) -> BTreeMap<usize, Result<Written>> {
    let mut got = BTreeMap::new();
    while got.len() < n {
        let (i, r) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a submitted write was not answered within a minute");
        assert!(got.insert(i, r).is_none(), "write {i} was answered twice");
    }
    got
}

/// Commits and claims in flight together, each on a unit of its own within its window: each
/// function is called exactly once, with what the R3 and lease rules say against a model of the
/// store (committed versions; claimed units), and the store ends holding exactly the model.
#[test]
fn writes_submitted_with_a_function_are_each_answered_once_by_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lake")).unwrap();
    let objects = two_objects(&store);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut model: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    // Claimed units and the version claimed (a unit is claimed again at that version only).
    let mut claimed = BTreeMap::new();
    let mut rng = Rng(11);
    let mut seen = BTreeMap::<&str, usize>::new();
    for window in 0..10 {
        let mut units: Vec<String> = (0..50).map(|i| format!("w/u{i:02}")).collect();
        let mut writes = Vec::new();
        for _ in 0..1 + rng.below(30) {
            let u = units.swap_remove(rng.below(units.len() as u64) as usize);
            let o = rng.below(2) as usize;
            let v = claimed.get(&u).copied().unwrap_or(1 + rng.below(3));
            // A claimed unit is claimed again (held); an unclaimed one sometimes claimed.
            let claim = claimed.contains_key(&u) || rng.below(5) == 0;
            writes.push((u, v, o, claim));
        }
        for (i, (u, v, o, claim)) in writes.iter().enumerate() {
            let write = if *claim {
                Write::Claim {
                    unit: u.clone(),
                    source_version: *v,
                    // A worker of its own: a claim by the lease's holder would be granted.
                    worker: format!("worker {window}/{i}"),
                    ttl: Duration::from_secs(600),
                }
            } else {
                Write::Commit(Batch::new().put(u.as_str(), *v, &objects[*o]))
            };
            let tx = tx.clone();
            store
                .submit_then(write, move |r| tx.send((i, r)).unwrap())
                .unwrap();
        }
        for (i, got) in answers_of(&rx, writes.len()) {
            let (u, v, o, claim) = &writes[i];
            let (got, want) = match got.unwrap() {
                Written::Commit(r) => {
                    assert!(!claim, "a claim answered by {r:?}");
                    (
                        r.units[0].outcome.name(),
                        model_decides(&mut model, u, *v, *o),
                    )
                }
                Written::Claim(c) => {
                    assert!(claim, "a commit answered by {c:?}");
                    let want = match model.get(u) {
                        Some(&(cv, _)) if cv >= *v => "already_done",
                        _ if claimed.insert(u.clone(), *v).is_some() => "held",
                        _ => "granted",
                    };
                    let got = match c {
                        ClaimOutcome::Granted { .. } => "granted",
                        ClaimOutcome::Held { .. } => "held",
                        ClaimOutcome::AlreadyDone(_) => "already_done",
                    };
                    (got, want)
                }
                other => panic!("write {i} answered {other:?}"),
            };
            assert_eq!(got, want, "write {i}: {u}@{v} object {o} claim {claim}");
            *seen.entry(want).or_default() += 1;
        }
    }
    for kind in [
        "committed",
        "duplicate",
        "stale",
        "conflict",
        "granted",
        "held",
    ] {
        assert!(seen.contains_key(kind), "no {kind} outcome in {seen:?}");
    }
    assert_eq!(stored_versions(&store), model_versions(&model, &objects));
    drop((objects, store));
    assert!(rx.try_recv().is_err(), "a function was called again");
}

/// A leader that panics (the caller's clock) and a function that panics on its answer: every
/// other function is still called exactly once, those after the leader's panic with its error.
#[test]
fn a_panicking_leader_or_function_leaves_no_submitted_write_unanswered() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock, _) = panicky_store(&dir.path().join("lake"));
    let staged = store.stage_bytes(b"rows").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let submit = |i: usize| {
        let tx = tx.clone();
        let write = Write::Commit(Batch::new().put(format!("p/{i}"), 1, &staged));
        store.submit_then(write, move |r| {
            let failed = r.is_err();
            tx.send((i, r)).unwrap();
            // Write 3's function panics on a good answer, after handing it over.
            assert!(i != 3 || failed, "a caller's function panics");
        })
    };
    let mut queued = 0;
    for i in 0..20 {
        submit(i).unwrap();
        queued += 1;
    }
    clock.panic_in(1);
    queued += (20..60).filter(|&i| submit(i).is_ok()).count();
    let got = answers_of(&rx, queued);
    assert!(clock.disarm(), "the armed clock reading never came");
    assert!(
        got.values().any(learned_of_a_panic),
        "no write learned of the panic: {got:?}"
    );
    drop((staged, store));
    assert!(rx.try_recv().is_err(), "a function was called again");
}
