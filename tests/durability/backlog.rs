//! The backlog of the durable commit path (src/wal/backlog.rs, docs/commit.md "The write-ahead
//! path"): a group is acknowledged once its write-ahead record is synced and reaches the B-trees
//! later. These tests hold the engine to what readers must see all the same: every commit
//! acknowledged before a read began is in it (with the seq it was answered), nothing whose record
//! did not sync ever is, views never go back, and every unit ends with exactly one entry.

use crate::common;

use common::{faulty_options, new_faulty_store, real_options, SplitMix64 as Rng};
use oncelake::{Batch, Error, ManualClock, Store};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const T0: u64 = 1_700_000_000_000;

/// What a new snapshot shows: unit → (version, seq).
fn manifest(store: &Store) -> BTreeMap<String, (u64, u64)> {
    let snap = store.snapshot().unwrap();
    snap.prefix("")
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.unit, (e.source_version, e.seq))
        })
        .collect()
}

/// Writers commit (in groups of several units, some of them new versions of earlier units), and
/// readers check every snapshot against the commits acknowledged before it began (a model: unit →
/// the newest acknowledged (version, seq)). After the run every acknowledged unit is there with
/// its newest version, and a reopen shows the same manifest. Every tenth snapshot's change feed
/// must also run from seq 1 to its seq without a gap (the log of its read transaction followed by
/// its tail's records).
#[test]
fn every_commit_acknowledged_before_a_read_is_in_it() {
    acknowledged_commits_are_visible(oncelake::Options::default());
}

/// The same with the applier thread taking batches of a few groups from a start of a few groups,
/// so that snapshots often begin while a batch is being applied (the batch is then in their tail,
/// until the applier is done with it).
#[test]
fn every_commit_acknowledged_before_a_read_is_in_it_while_small_batches_are_applied() {
    acknowledged_commits_are_visible(oncelake::Options {
        apply_min_bytes: 2 << 10,
        apply_batch_bytes: 4 << 10,
        ..oncelake::Options::default()
    });
}

fn acknowledged_commits_are_visible(options: oncelake::Options) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let store = Store::open_with(&path, options.clone()).unwrap();
    let acked: Arc<Acked> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    const WRITERS: u64 = 6;
    const COMMITS: u64 = 150;

    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, acked, stop) = (store.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || read_until_stopped(&store, &acked, &stop))
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, acked) = (store.clone(), acked.clone());
            std::thread::spawn(move || write_acknowledged(&store, &acked, w, COMMITS))
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads > 0, "the readers never read; the test proves nothing");

    let model = acked.lock().unwrap().clone();
    let check = |store: &Store| {
        assert_eq!(
            manifest(store),
            model,
            "the manifest is the model, one entry per unit"
        );
    };
    check(&store);
    store.flush().unwrap();
    assert_eq!(store.backlog().units, 0, "a flush applies what waits");
    check(&store);
    drop(store);
    check(&Store::open_with(&path, options).unwrap());
}

/// Unit → (version, seq) of its newest acknowledged commit.
type Acked = Mutex<BTreeMap<String, (u64, u64)>>;

/// Reads snapshots until `stop`: each must hold every commit acknowledged before it was taken, and
/// every tenth its whole change feed without a gap. The number of reads.
fn read_until_stopped(store: &Store, acked: &Acked, stop: &AtomicBool) -> u64 {
    let mut last_seq = 0;
    let mut reads = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let before = acked.lock().unwrap().clone();
        let snap = store.snapshot().unwrap();
        assert!(snap.seq() >= last_seq, "a later snapshot went back");
        last_seq = snap.seq();
        for (unit, (version, seq)) in &before {
            let e = snap.get(unit).unwrap().unwrap_or_else(|| {
                panic!("{unit}@{version} (seq {seq}) was acknowledged, not visible")
            });
            assert!(
                e.seq >= *seq && e.source_version >= *version,
                "{unit}: sees seq {} version {}, acknowledged {seq} / {version}",
                e.seq,
                e.source_version
            );
            assert!(e.seq <= snap.seq());
        }
        if reads.is_multiple_of(10) {
            let seqs: Vec<u64> = snap
                .changes_since(0)
                .unwrap()
                .map(|r| r.unwrap().seq)
                .collect();
            assert_eq!(
                seqs,
                (1..=snap.seq()).collect::<Vec<_>>(),
                "the change feed has a gap or goes past the view"
            );
        }
        reads += 1;
    }
    reads
}

/// Writer `w`'s `commits` commits of two units each (one new, one new version of an earlier unit
/// of this writer), each visible to the writer's next read at once with the seq it was answered,
/// recorded in `acked` once acknowledged.
fn write_acknowledged(store: &Store, acked: &Acked, w: u64, commits: u64) {
    let mut rng = Rng(0xBAC0 + w);
    for i in 0..commits {
        let new = format!("w{w}/u{i}");
        let old = format!("w{w}/u{}", rng.below(i + 1));
        let version = i + 2;
        let a = store.stage_bytes(format!("{new}@1").as_bytes()).unwrap();
        let b = store
            .stage_bytes(format!("{old}@{version}").as_bytes())
            .unwrap();
        let batch = if old == new {
            Batch::new().put(new.as_str(), 1, &a)
        } else {
            Batch::new()
                .put(new.as_str(), 1, &a)
                .put(old.as_str(), version, &b)
        };
        let r = store.commit(batch).unwrap();
        let seq = r.seq.expect("every commit of this test applies");
        let snap = store.snapshot().unwrap();
        for u in &r.units {
            let e = snap
                .get(&u.unit)
                .unwrap()
                .expect("acknowledged, so visible");
            assert_eq!((e.seq, e.source_version), (seq, u.source_version));
            let mut m = acked.lock().unwrap();
            let cur = m.entry(u.unit.clone()).or_insert((0, 0));
            if u.source_version > cur.0 {
                *cur = (u.source_version, seq);
            }
        }
    }
}

/// A group whose write-ahead record did not sync is never acknowledged and never visible: not to a
/// snapshot, not to the dedup index, not through the change feed. Earlier acknowledged groups stay
/// readable in the failed store, and are there after the reopen.
#[test]
fn a_group_whose_record_did_not_sync_is_never_visible() {
    let (_dir, path, clock, plan, store) = new_faulty_store(T0);
    let first = store.put("a", 1, b"a1").unwrap().outcome.seq().unwrap();
    let b = store.stage_bytes(b"b1").unwrap();
    plan.fail_syncs(true);
    let r = store.commit(Batch::new().put("b", 1, &b));
    assert!(matches!(r, Err(Error::Failed { .. })), "{r:?}");
    plan.fail_syncs(false);

    let snap = store.snapshot().unwrap();
    assert_eq!(snap.seq(), first, "the failed group has no seq in any view");
    assert!(snap.get("b").unwrap().is_none());
    assert!(snap.get("a").unwrap().is_some());
    assert!(store.lookup("b").unwrap().is_none());
    let feed: Vec<u64> = store
        .changes_since(0)
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(feed, [first]);
    drop((snap, b, store));

    let store = Store::open_with(&path, real_options(&clock)).unwrap();
    assert!(store.get("a").unwrap().is_some());
}

/// An apply that fails after the group was acknowledged (its record is synced, the B-trees are
/// not written): the store fails, and no read answers with the state from before the
/// acknowledged commit — a snapshot, a lookup and the change feed either show the commit or
/// refuse with `Failed`. The reopen replays the log and has it. Every operation of the commit's
/// call is failed in turn; the ones that fail after the acknowledgement are the cases.
#[test]
fn a_failed_apply_after_the_acknowledgement_never_answers_an_older_state() {
    let mut cases = 0;
    for k in 1..=60 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lake");
        let clock = ManualClock::new(T0);
        drop(Store::open_with(&path, real_options(&clock)).unwrap());
        let plan = oncelake::fault::FaultPlan::new();
        // Every writer applies after its commit, so the commit's call holds the apply.
        let store = Store::open_with(
            &path,
            oncelake::Options {
                apply_min_bytes: 0,
                background_apply: false,
                ..faulty_options(&plan, &clock)
            },
        )
        .unwrap();
        store.put("a", 1, b"a1").unwrap();
        // 64 groups and a second since the last checkpoint: the next group's apply is one,
        // a synced write of the database after the group was acknowledged. (An apply that is
        // not a checkpoint may touch no file at all: redb keeps the pages of an unsynced
        // commit in its cache.) The clock stands still, so the one checkpoint among these
        // groups comes at the 64th (the open's replay counts as one taken at time 0).
        for i in 0..140 {
            store.put(&format!("p{i}"), 1, b"p").unwrap();
        }
        clock.advance_ms(2_000);
        let b = store.stage_bytes(b"b1").unwrap();
        plan.fail_at(plan.ops() + k);
        let Ok(report) = store.commit(Batch::new().put("b", 1, &b)) else {
            continue; // failed before the acknowledgement: a_group_whose_record_did_not_sync…
        };
        if store.failure().is_none() {
            continue; // the failed operation was not the commit's, or it was retried
        }
        cases += 1;
        let seq = report.seq.expect("acknowledged as committed");
        match store.snapshot() {
            Ok(snap) => {
                let e = snap.get("b").unwrap();
                assert_eq!(
                    e.map(|e| e.seq),
                    Some(seq),
                    "k={k}: a snapshot of the failed store misses the acknowledged commit"
                );
            }
            Err(e) => assert!(matches!(e, Error::Failed { .. }), "k={k}: {e:?}"),
        }
        match store.lookup("b") {
            Ok(found) => assert_eq!(found.map(|c| c.seq), Some(seq), "k={k}: lookup"),
            Err(e) => assert!(matches!(e, Error::Failed { .. }), "k={k}: {e:?}"),
        }
        match store.changes_since(0) {
            Ok(feed) => {
                let seqs: Result<Vec<u64>, _> = feed.map(|r| r.map(|c| c.seq)).collect();
                match seqs {
                    Ok(seqs) => assert!(seqs.contains(&seq), "k={k}: the feed {seqs:?}"),
                    Err(e) => assert!(matches!(e, Error::Failed { .. }), "k={k}: {e:?}"),
                }
            }
            Err(e) => assert!(matches!(e, Error::Failed { .. }), "k={k}: {e:?}"),
        }
        drop((b, store));
        let store = Store::open_with(&path, real_options(&clock)).unwrap();
        let e = store
            .get("b")
            .unwrap()
            .expect("acknowledged, so there after the reopen");
        assert_eq!(e.seq, seq, "k={k}");
    }
    assert!(
        cases > 0,
        "no failed operation fell after the acknowledgement; the test proves nothing"
    );
}

/// `Options::apply_min_bytes` with `background_apply` off: below it a writer leaves its durable
/// groups for later, and a snapshot sees them all the same (it reads them from the backlog, and
/// leaves them there); at 0 every writer applies at once.
#[test]
fn writers_leave_a_small_backlog_for_later_and_readers_still_see_every_commit() {
    for (min, left_after_commits) in [(1 << 20, true), (0, false)] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with(
            dir.path().join("lake"),
            oncelake::Options {
                apply_min_bytes: min,
                background_apply: false,
                ..oncelake::Options::default()
            },
        )
        .unwrap();
        assert!(!store.has_applier_thread());
        let mut model = BTreeMap::new();
        for i in 0..40u64 {
            let unit = format!("u{}", i % 25);
            let r = store
                .put(&unit, i + 1, format!("{unit}@{}", i + 1).as_bytes())
                .unwrap();
            let oncelake::Outcome::Committed { seq, .. } = r.outcome else {
                panic!(
                    "{unit}@{}: a new version must commit, got {:?}",
                    i + 1,
                    r.outcome
                );
            };
            model.insert(unit, (i + 1, seq));
        }
        assert_eq!(
            store.backlog().units > 0,
            left_after_commits,
            "apply_min_bytes {min}: backlog {:?}",
            store.backlog()
        );
        let before = store.backlog();
        assert_eq!(manifest(&store), model, "apply_min_bytes {min}");
        assert_eq!(
            store.backlog(),
            before,
            "the snapshot read what waited without applying it"
        );
        store.flush().unwrap();
        assert_eq!(store.backlog().units, 0, "a flush applies what waited");
        assert_eq!(manifest(&store), model, "apply_min_bytes {min}, applied");
    }
}

/// A start above `apply_batch_bytes` counts as the batch: writers (`background_apply` off) still
/// apply once a whole batch waits (a batch never takes more), so the backlog stays below it with
/// no reader at all.
#[test]
fn a_start_above_the_batch_counts_as_the_batch() {
    const BATCH: usize = 8 << 10;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(
        dir.path().join("lake"),
        oncelake::Options {
            apply_min_bytes: usize::MAX,
            apply_batch_bytes: BATCH,
            background_apply: false,
            ..oncelake::Options::default()
        },
    )
    .unwrap();
    let mut most = 0;
    for i in 0..200u64 {
        store.put(&format!("u{i}"), 1, &i.to_le_bytes()).unwrap();
        most = most.max(store.backlog().bytes);
    }
    assert!(
        most < BATCH,
        "the backlog reached {most} bytes after a commit returned: writers never applied"
    );
    assert!(
        store.backlog().max_units > 1,
        "every commit was applied at once: the start was not used"
    );
    assert_eq!(manifest(&store).len(), 200);
}

/// `background_apply` (the default): the store's own thread applies the backlog once the start
/// waits, with no reader, no flush and no writer applying. Commits of 40 units wait below a
/// 1 MiB start (the thread leaves them); at a start of 0 the thread applies them with nobody
/// asking — the backlog empties while only `Store::backlog` (which applies nothing) looks. Then
/// a reader sees exactly the model, and a reopen does too (the close stopped the thread and
/// drained).
#[test]
fn the_applier_thread_applies_the_backlog_with_nobody_asking() {
    for (min, thread_applies) in [(1 << 20, false), (0, true)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lake");
        let options = oncelake::Options {
            apply_min_bytes: min,
            ..oncelake::Options::default()
        };
        assert!(options.background_apply, "the default");
        let store = Store::open_with(&path, options.clone()).unwrap();
        assert!(store.has_applier_thread());
        let mut model = BTreeMap::new();
        for i in 0..40u64 {
            let unit = format!("u{}", i % 25);
            let r = store.put(&unit, i + 1, &i.to_le_bytes()).unwrap();
            model.insert(unit, (i + 1, r.outcome.seq().unwrap()));
        }
        if thread_applies {
            // A liveness check, not a timing one: the deadline is far above any apply of 40 units.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while store.backlog().units > 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the applier thread left {:?} for a minute",
                    store.backlog()
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        } else {
            assert_eq!(
                store.backlog().units,
                40,
                "below the start nobody applies: not the thread, not the writers"
            );
        }
        assert_eq!(manifest(&store), model, "apply_min_bytes {min}");
        drop(store);
        let store = Store::open_with(&path, options).unwrap();
        assert_eq!(
            manifest(&store),
            model,
            "after the reopen, apply_min_bytes {min}"
        );
    }
}

/// Only a durable read-write open has something for the thread to apply: a relaxed store (its
/// groups applied in place) and a read-only one run none.
#[test]
fn only_a_durable_read_write_store_runs_the_applier_thread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let relaxed = oncelake::Options {
        durability: oncelake::Durability::Relaxed {
            max_delay: std::time::Duration::from_millis(50),
        },
        ..oncelake::Options::default()
    };
    let store = Store::open_with(&path, relaxed).unwrap();
    assert!(!store.has_applier_thread(), "relaxed");
    store.put("a", 1, b"a1").unwrap();
    drop(store);
    let store = Store::open_read_only(&path).unwrap();
    assert!(!store.has_applier_thread(), "read-only");
    drop(store);
    let store = Store::open(&path).unwrap();
    assert!(store.has_applier_thread(), "durable");
}
