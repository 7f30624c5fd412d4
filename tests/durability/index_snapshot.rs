//! The persisted dedup index (`index.snap`): a clean close writes it, opening loads it and
//! replays the log after it, and anything that does not match falls back to the full manifest
//! scan. After every open the index must answer exactly as the manifest: `lookup` equals
//! `snapshot().get` for every unit, whichever path built it.

use crate::common;

use common::{open_relaxed as open, XorShift64Star as Rng};
use oncelake::{Batch, Committed, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SNAP: &str = "index.snap";
const CHILD_ENV: &str = "ONCELAKE_SNAP_CHILD";

/// The units the model knows, and the newest version of each it committed.
type Model = BTreeMap<String, u64>;

/// Commits one batch of `k` random units: new ones, updates (higher versions), corrections and
/// stale writes (lower versions, rejected), recording accepted ones in the model.
fn commit_random(store: &Store, model: &mut Model, rng: &mut Rng, k: usize, universe: u64) {
    let staged = store
        .stage_bytes(format!("obj {}", rng.next()).as_bytes())
        .unwrap();
    let mut batch = Batch::new().partial();
    let mut units = Vec::new();
    for _ in 0..k {
        let unit = format!("u/{}", rng.below(universe));
        if units.contains(&unit) {
            continue;
        }
        let current = model.get(&unit).copied();
        let (version, correct) = match (current, rng.below(4)) {
            (Some(v), 0) => (v, true),
            (Some(v), 1) if v > 1 => (v - 1, false),
            (Some(v), _) => (v + 1 + rng.below(3), false),
            (None, _) => (1 + rng.below(5), false),
        };
        batch = if correct {
            batch.correct(unit.clone(), version, &staged)
        } else {
            batch.put(unit.clone(), version, &staged)
        };
        units.push(unit);
    }
    let report = store.commit(batch).unwrap();
    for u in &report.units {
        if u.outcome.name() == "committed" {
            model.insert(u.unit.clone(), u.source_version);
        }
    }
}

/// The index answers exactly as the manifest for every unit of the model and for absent ones.
fn assert_exact(store: &Store, model: &Model, universe: u64) {
    // No two test keys share a 64-bit hash: an ambiguous slot means the open mistook an update
    // for a new unit (still exact through redb, but not what the replay must do).
    assert_eq!(
        store.open_report().ambiguous,
        0,
        "{:?}",
        store.open_report()
    );
    let snap = store.snapshot().unwrap();
    for i in 0..universe + 20 {
        let unit = format!("u/{i}");
        let from_index = store.lookup(&unit).unwrap();
        let from_db = snap.get(&unit).unwrap().map(|e| Committed {
            source_version: e.source_version,
            object: e.object.id,
            seq: e.seq,
        });
        assert_eq!(from_index, from_db, "{unit}: index vs manifest");
        assert_eq!(
            from_index.map(|c| c.source_version),
            model.get(&unit).copied(),
            "{unit}: index vs model"
        );
    }
}

/// A store at `dir` after `commits` random commits of 8 units drawn from `seed`, closed cleanly
/// (so it has a snapshot); its model and the generator to go on with.
fn fill(dir: &Path, seed: u64, commits: usize, universe: u64) -> (Model, Rng) {
    let (mut model, mut rng) = (Model::new(), Rng(seed));
    let store = open(dir);
    for _ in 0..commits {
        commit_random(&store, &mut model, &mut rng, 8, universe);
    }
    assert_exact(&store, &model, universe);
    (model, rng)
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
}

#[test]
fn a_clean_close_persists_the_index_and_the_reopen_uses_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lake");
    {
        let store = open(&dir);
        let r = store.open_report();
        assert!(!r.index_from_snapshot);
        assert_eq!(r.fallback.as_deref(), Some("no snapshot"));
        drop(store);
    }
    let (mut model, mut rng) = fill(&dir, 7, 40, 200);
    assert!(dir.join(SNAP).exists(), "a clean close writes the snapshot");
    let store = open(&dir);
    let r = store.open_report();
    assert!(r.index_from_snapshot, "{r:?}");
    assert_eq!(r.replayed_records, 0);
    assert_eq!(r.snapshot_seq, Some(store.last_seq().unwrap()));
    assert_exact(&store, &model, 200);
    // Commits after a snapshot-based open keep the index exact, and the next close rewrites it.
    for _ in 0..10 {
        commit_random(&store, &mut model, &mut rng, 8, 220);
    }
    assert_exact(&store, &model, 220);
    let seq = store.last_seq().unwrap();
    drop(store);
    let store = open(&dir);
    assert_eq!(store.open_report().snapshot_seq, Some(seq));
    assert_exact(&store, &model, 220);
}

#[test]
fn an_older_snapshot_is_caught_up_by_replaying_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lake");
    let (mut model, mut rng) = fill(&dir, 11, 30, 150);
    let old = tmp.path().join("old.snap");
    copy(&dir.join(SNAP), &old);
    let old_seq = open(&dir).last_seq().unwrap();
    // More commits, including claims (records that are not commits), then a clean close.
    {
        let store = open(&dir);
        let lease = store
            .claim("u/claimed", 1, "w", Duration::from_secs(60))
            .unwrap();
        for _ in 0..30 {
            commit_random(&store, &mut model, &mut rng, 8, 180);
        }
        if let oncelake::ClaimOutcome::Granted { lease, .. } = lease {
            store.release(&lease).unwrap();
        }
    }
    // As if the last close had crashed: the snapshot on disk is the older one.
    copy(&old, &dir.join(SNAP));
    let store = open(&dir);
    let r = store.open_report();
    assert!(r.index_from_snapshot, "{r:?}");
    assert_eq!(r.snapshot_seq, Some(old_seq));
    assert!(r.replayed_records > 0);
    assert_exact(&store, &model, 180);
}

/// The child of [`a_crash_without_a_clean_close_is_caught_up`]: commits and exits without
/// running destructors, so no snapshot is written (like a crash after the acknowledgements).
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Store::open(&dir).unwrap();
    if std::env::var_os(LONG_TAIL_ENV).is_some() {
        // One record listing more entries than a catch-up replays for a store this size.
        let staged = store.stage_bytes(b"child").unwrap();
        let mut batch = Batch::new();
        for i in 0..LONG_TAIL {
            batch = batch.put(format!("n/{i}"), 1, &staged);
        }
        assert!(store.commit(batch).unwrap().applied());
        std::process::exit(0);
    }
    for i in 0..50u64 {
        store
            .put(&format!("u/{}", i % 70), 1000 + i, b"child")
            .unwrap();
    }
    std::process::exit(0);
}

/// Runs [`crash_child`] on the store at `dir` (with a long tail when `long_tail`), which must
/// exit 0 after its commits.
fn crash_in_a_child(dir: &Path, long_tail: bool) {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--exact",
            &common::test_path(module_path!(), "crash_child"),
            "--nocapture",
        ])
        .env(CHILD_ENV, dir);
    if long_tail {
        child.env(LONG_TAIL_ENV, "1");
    }
    let status = child.status().unwrap();
    assert!(status.success(), "the crash child: {status}");
}

const LONG_TAIL_ENV: &str = "ONCELAKE_SNAP_CHILD_LONG";
/// More than a catch-up replays on top of a snapshot of ~100 units (an eighth of them + 4,096).
const LONG_TAIL: u64 = 5000;

/// A crash long after the last clean close leaves a log tail longer than a catch-up is worth:
/// the open scans the manifest instead (and says why), and the index is exact either way.
#[test]
fn a_crash_after_a_long_tail_scans_instead_of_catching_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lake");
    let (model, _) = fill(&dir, 19, 20, 100);
    crash_in_a_child(&dir, true);
    let store = open(&dir);
    let r = store.open_report();
    assert!(!r.index_from_snapshot, "{r:?}");
    let why = r.fallback.clone().unwrap_or_default();
    assert!(why.contains("scan is cheaper"), "{why}");
    assert_exact(&store, &model, 100);
    for i in (0..LONG_TAIL).step_by(7) {
        let c = store.lookup(&format!("n/{i}")).unwrap();
        assert_eq!(c.map(|c| c.source_version), Some(1), "n/{i}");
    }
}

#[test]
fn a_crash_without_a_clean_close_is_caught_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lake");
    let (mut model, _) = fill(&dir, 13, 20, 100);
    let snap_seq = open(&dir).last_seq().unwrap();
    crash_in_a_child(&dir, false);
    for i in 0..50u64 {
        model.insert(format!("u/{}", i % 70), 1000 + i);
    }
    let store = open(&dir);
    let r = store.open_report();
    assert!(r.index_from_snapshot, "{r:?}");
    assert_eq!(r.snapshot_seq, Some(snap_seq));
    assert_eq!(r.replayed_records, 50);
    assert_exact(&store, &model, 100);
}

/// Builds a store with a snapshot, lets `spoil` damage it, and checks the reopen falls back to
/// the scan (with a reason containing `why`) and is exact.
fn falls_back(spoil: impl FnOnce(&Path, &Path), why: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lake");
    let (model, _) = fill(&dir, 17, 25, 120);
    spoil(&dir, tmp.path());
    let store = open(&dir);
    let r = store.open_report();
    assert!(!r.index_from_snapshot, "{r:?}");
    let reason = r.fallback.clone().unwrap_or_default();
    assert!(
        reason.contains(why),
        "fallback {reason:?}, expected {why:?}"
    );
    let snap = store.snapshot().unwrap();
    for i in 0..140 {
        let unit = format!("u/{i}");
        let from_db = snap.get(&unit).unwrap().map(|e| Committed {
            source_version: e.source_version,
            object: e.object.id,
            seq: e.seq,
        });
        assert_eq!(store.lookup(&unit).unwrap(), from_db, "{unit}");
    }
    if why != "ends at" && why != "differs" {
        // Nothing about the history changed: the model still holds.
        assert_exact(&store, &model, 120);
    }
}

#[test]
fn a_corrupted_snapshot_falls_back_to_the_scan() {
    falls_back(
        |dir, _| {
            let p = dir.join(SNAP);
            let mut b = std::fs::read(&p).unwrap();
            let i = b.len() / 2;
            b[i] ^= 0x10;
            std::fs::write(&p, b).unwrap();
        },
        "checksum",
    );
}

#[test]
fn a_truncated_snapshot_falls_back_to_the_scan() {
    falls_back(
        |dir, _| {
            let p = dir.join(SNAP);
            let b = std::fs::read(&p).unwrap();
            std::fs::write(&p, &b[..b.len() - 9]).unwrap();
        },
        "truncated",
    );
}

#[test]
fn a_snapshot_of_another_store_falls_back_to_the_scan() {
    falls_back(
        |dir, tmp| {
            // Another store with the same units and commits: only its identity differs.
            let other = tmp.join("other");
            fill(&other, 17, 25, 120);
            copy(&other.join(SNAP), &dir.join(SNAP));
        },
        "another store",
    );
}

/// Why `a_snapshot_ahead_of_a_restored_database_falls_back_to_the_scan` once failed with `Locked`:
/// `a_crash_without_a_clean_close_is_caught_up` spawns a child process while other tests of this
/// binary close and reopen their stores. Between fork and exec the child holds a copy of every
/// descriptor of this process, the store's `LOCK` file included, and a `flock` belongs to the open
/// file description, not to the descriptor: closing ours left the lock held by the child's copy
/// until its exec, and a reopen without a lock wait failed. Closing a store must release its lock
/// whoever else holds a copy of the descriptor. Here the child is held between fork and exec
/// until the store was closed and reopened (no timing involved).
#[cfg(unix)]
#[test]
fn closing_a_store_releases_its_lock_while_a_forked_child_holds_its_descriptors() {
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lake");
    let store = open(&dir);
    store.put("u/1", 1, b"one").unwrap();
    let (mut forked_r, mut forked_w) = std::io::pipe().unwrap();
    let (mut go_r, mut go_w) = std::io::pipe().unwrap();
    let mut cmd = Command::new("true");
    // SAFETY: the closure runs in the forked child before exec and only writes to and reads from
    // two pipes it owns (plain system calls: no allocation, no lock shared with other threads).
    unsafe {
        cmd.pre_exec(move || {
            forked_w.write_all(b"f")?;
            let mut b = [0u8; 1];
            go_r.read_exact(&mut b)?;
            Ok(())
        });
    }
    let child = std::thread::spawn(move || cmd.status());
    let mut b = [0u8; 1];
    // From here until `go`, the child holds copies of this process's descriptors.
    forked_r.read_exact(&mut b).unwrap();
    drop(store);
    let reopened = Store::open(&dir);
    go_w.write_all(b"g").unwrap();
    assert!(child.join().unwrap().unwrap().success());
    let reopened = reopened.expect("a closed store is not locked by a forked child");
    assert!(reopened.get("u/1").unwrap().is_some());
}

/// Saves the store's database, commits through `commits` on the opened store, closes it and puts
/// the saved database back: the snapshot the close wrote is ahead of the database.
fn commit_then_restore_the_database(dir: &Path, tmp: &Path, commits: impl FnOnce(&Store)) {
    let db = dir.join(oncelake::DB_FILE);
    let saved = tmp.join("saved.redb");
    copy(&db, &saved);
    commits(&open(dir));
    copy(&saved, &db);
}

#[test]
fn a_snapshot_ahead_of_a_restored_database_falls_back_to_the_scan() {
    falls_back(
        |dir, tmp| {
            commit_then_restore_the_database(dir, tmp, |store| {
                for i in 0..5 {
                    store.put(&format!("x/{i}"), 1, b"later").unwrap();
                }
            })
        },
        "ends at",
    );
}

#[test]
fn a_snapshot_of_a_replaced_history_falls_back_to_the_scan() {
    falls_back(
        |dir, tmp| {
            // Commit one batch (snapshot at seq s) and restore the database, commit a different
            // batch to reach the same seq s, then put the first snapshot back.
            commit_then_restore_the_database(dir, tmp, |store| {
                store.put("x/first", 1, b"first history").unwrap();
            });
            let first = tmp.join("first.snap");
            copy(&dir.join(SNAP), &first);
            open(dir).put("u/replaced", 1, b"other history").unwrap();
            copy(&first, &dir.join(SNAP));
        },
        "differs",
    );
}

#[test]
fn random_commits_and_reopens_keep_the_index_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lake");
    let (mut model, mut rng) = (Model::new(), Rng(0x9e37_79b9_7f4a_7c15));
    let universe = 300;
    let mut saved: Vec<PathBuf> = Vec::new();
    for round in 0..12 {
        {
            let store = open(&dir);
            assert_exact(&store, &model, universe);
            for _ in 0..rng.below(15) {
                let k = 1 + rng.below(12) as usize;
                commit_random(&store, &mut model, &mut rng, k, universe);
            }
            assert_exact(&store, &model, universe);
        }
        let snap = dir.join(SNAP);
        let keep = tmp.path().join(format!("snap.{round}"));
        copy(&snap, &keep);
        saved.push(keep);
        // Sometimes reopen on an older snapshot, as after a crash at a later close.
        if rng.below(3) == 0 {
            let pick = &saved[rng.below(saved.len() as u64) as usize];
            copy(pick, &snap);
        }
    }
    let store = open(&dir);
    assert!(store.open_report().index_from_snapshot);
    assert_exact(&store, &model, universe);
}

/// A store large enough for the two-thread manifest scan (over 65,536 units), opened without its
/// snapshot: the scanned index answers as the manifest for every unit, and so does the snapshot
/// the close then writes (loaded straight into memory by the next open).
#[test]
fn a_large_store_scanned_on_two_threads_is_exact_and_so_is_its_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lake");
    let n = 70_000u64;
    let mut model = Model::new();
    {
        let store = open(&dir);
        let staged = store.stage_bytes(b"large").unwrap();
        let mut i = 0;
        while i < n {
            let mut batch = Batch::new();
            for u in i..(i + 10_000).min(n) {
                batch = batch.put(format!("u/{u}"), 1 + u % 3, &staged);
                model.insert(format!("u/{u}"), 1 + u % 3);
            }
            assert!(store.commit(batch).unwrap().applied());
            i += 10_000;
        }
    }
    std::fs::remove_file(dir.join(SNAP)).unwrap();
    for from_snapshot in [false, true] {
        let store = open(&dir);
        let r = store.open_report();
        assert_eq!(r.index_from_snapshot, from_snapshot, "{r:?}");
        assert_exact(&store, &model, n);
    }
}
