//! Readers never wait for GC or the backlog, and the commit path carries only what it must:
//! a group that changes no row writes no record, the write-ahead trim is the applier's, GC's
//! prune holds no reader while it drains and syncs, GC's second look holds no stager while it
//! waits, and a snapshot's cost does not grow with the backlog.

use oncelake::gc::GcOptions;
use oncelake::{Clock, ManualClock, Options, Outcome, Store};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Applied by nobody unless asked: every group stays in the backlog until a reader of the tables,
/// a flush or a close needs it.
fn held_backlog(clock: Arc<dyn Clock>) -> Options {
    Options {
        background_apply: false,
        apply_min_bytes: 64 << 20,
        clock,
        ..Options::default()
    }
}

fn counter(store: &Store, name: &str) -> u64 {
    store
        .metrics()
        .counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| v)
}

/// A group of duplicates and refusals only changes no row: it appends no record and queues
/// nothing, and its counts are not lost — they are written with the next group that changes a
/// row, or by the close.
#[test]
fn a_group_that_changes_nothing_appends_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let clock = ManualClock::new(1_000_000);
    let store = Store::open_with(&path, held_backlog(Arc::new(clock.clone()))).unwrap();
    assert!(matches!(
        store.put("u", 2, b"v2").unwrap().outcome,
        Outcome::Committed { .. }
    ));
    let records = store.wal_records().unwrap();
    let waiting = store.backlog();
    assert!(records > 0 && waiting.bytes > 0, "the commit is in the log");
    // A duplicate, and a stale version: neither changes a row.
    assert!(matches!(
        store.put("u", 2, b"v2").unwrap().outcome,
        Outcome::Duplicate { .. }
    ));
    assert!(matches!(
        store.put("u", 1, b"v1").unwrap().outcome,
        Outcome::Stale { .. }
    ));
    assert_eq!(store.wal_records().unwrap(), records, "no record appended");
    assert_eq!(store.backlog(), waiting, "nothing queued");
    let dups = counter(&store, "duplicates_collapsed");
    let stale = counter(&store, "stale_rejections");
    assert_eq!((dups, stale), (1, 1));
    // A claim is a change: it writes a lease row.
    store
        .claim("w", 1, "worker", Duration::from_secs(60))
        .unwrap();
    assert_eq!(store.wal_records().unwrap(), records + 1);
    assert!(matches!(
        store.put("u", 2, b"v2").unwrap().outcome,
        Outcome::Duplicate { .. }
    ));
    let groups = counter(&store, "groups");
    drop(store);
    // The counts survive a clean close, the last duplicate's included.
    let store = Store::open_with(&path, held_backlog(Arc::new(clock))).unwrap();
    assert_eq!(counter(&store, "duplicates_collapsed"), 2);
    assert_eq!(counter(&store, "stale_rejections"), 1);
    assert_eq!(counter(&store, "groups"), groups);
}

/// The records a checkpoint covers are trimmed by the checkpoint's applier, not by the next
/// commit's synced append: right after a checkpoint, with no commit since, the log is empty. (An
/// append that trims leaves at least its own record.)
#[test]
fn the_checkpoint_trims_the_log_without_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(
        dir.path().join("lake"),
        Options {
            background_apply: false,
            // Every writer applies its own group after its answer; some of those applies are
            // checkpoints (every 64 groups at most).
            apply_min_bytes: 0,
            ..Options::default()
        },
    )
    .unwrap();
    let mut emptied = false;
    for i in 0..200 {
        store.put(&format!("u{i}"), 1, b"x").unwrap();
        assert_eq!(store.backlog().units, 0, "applied after its answer");
        if store.wal_records().unwrap() == 0 {
            emptied = true;
            break;
        }
    }
    assert!(emptied, "a checkpoint trimmed what it covers");
}
