//! Garbage collection (SPEC R14): what it removes, what it keeps, dry runs, retention.

use oncelake::gc::GcOptions;
use oncelake::verify::VerifyOptions;
use oncelake::{Batch, Error, ManualClock, Options, Store};
use std::sync::Arc;
use std::time::Duration;

fn now_gc() -> GcOptions {
    GcOptions {
        dry_run: false,
        grace: Duration::ZERO,
        retain: Duration::ZERO,
    }
}

fn manual_store() -> (tempfile::TempDir, Store, ManualClock) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let store = Store::open_with(
        dir.path().join("lake"),
        Options {
            clock: Arc::new(clock.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    (dir, store, clock)
}

#[test]
fn removes_orphans_keeps_referenced_and_dry_run_removes_nothing() {
    let (_d, store, _c) = manual_store();
    store.put("a", 1, b"kept").unwrap();
    let lost = store.stage_bytes(b"orphan").unwrap();
    let lost_path = store.object_path(&lost.id());
    drop(lost);
    // A commit rejected by the rules leaves its object orphaned too.
    let conflict = store.put("a", 1, b"different bytes").unwrap();
    assert_eq!(conflict.outcome.name(), "conflict");

    let dry = store
        .gc(GcOptions {
            dry_run: true,
            ..now_gc()
        })
        .unwrap();
    assert!(dry.dry_run);
    assert_eq!((dry.objects, dry.object_bytes), (2, 6 + 15));
    assert!(lost_path.exists(), "a dry run removes nothing");

    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.objects, r.object_bytes), (2, 6 + 15));
    assert_eq!(r.objects_referenced, 1);
    assert!(!lost_path.exists());
    let e = store.get("a").unwrap().unwrap();
    assert_eq!(store.snapshot().unwrap().read_object(&e).unwrap(), b"kept");
    let m = store.metrics();
    assert_eq!((m.orphans_collected, m.bytes_collected), (2, 21));
    assert!(store
        .verify(VerifyOptions { deep: true })
        .unwrap()
        .is_clean());
    // Nothing left to do.
    assert_eq!(store.gc(now_gc()).unwrap().objects, 0);
}

#[test]
fn a_pinned_object_survives_and_its_commit_is_readable() {
    let (_d, store, _c) = manual_store();
    let held = store.stage_bytes(b"in flight").unwrap();
    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.objects, r.objects_pinned), (0, 1));
    store.commit(Batch::new().put("u", 1, &held)).unwrap();
    drop(held);
    assert_eq!(store.gc(now_gc()).unwrap().objects, 0);
    let e = store.get("u").unwrap().unwrap();
    assert_eq!(
        store.snapshot().unwrap().read_object(&e).unwrap(),
        b"in flight"
    );
}

#[test]
fn retention_prunes_history_and_moves_the_horizon() {
    let (_d, store, clock) = manual_store();
    let s1 = store.put("u", 1, b"v1").unwrap().outcome.seq().unwrap();
    clock.advance_ms(1_000);
    let s2 = store.put("u", 2, b"v2").unwrap().outcome.seq().unwrap();
    store.put("other", 1, b"o1").unwrap();
    let v1_path = store.object_path(&oncelake::ObjectId::of(b"v1"));
    clock.advance_ms(5_000);

    // Superseded 5 s ago; kept for 10 s.
    let keep = GcOptions {
        retain: Duration::from_secs(10),
        ..now_gc()
    };
    let r = store.gc(keep).unwrap();
    assert_eq!(
        (r.history_rows_pruned, r.objects, r.history_from),
        (0, 0, 0)
    );
    assert_eq!(
        store
            .snapshot_at(s1)
            .unwrap()
            .get("u")
            .unwrap()
            .unwrap()
            .source_version,
        1
    );

    clock.advance_ms(10_000);
    let dry = store
        .gc(GcOptions {
            dry_run: true,
            ..keep
        })
        .unwrap();
    assert_eq!(
        (dry.history_rows_pruned, dry.objects, dry.history_from),
        (1, 1, s2)
    );
    assert!(v1_path.exists());
    let r = store.gc(keep).unwrap();
    assert_eq!(
        (r.history_rows_pruned, r.objects, r.history_from),
        (1, 1, s2)
    );
    assert!(!v1_path.exists());
    assert!(matches!(
        store.snapshot_at(s1),
        Err(Error::SeqOutOfRange { asked, oldest, .. }) if asked == s1 && oldest == s2
    ));
    let at = store.snapshot_at(s2).unwrap();
    assert_eq!(at.get("u").unwrap().unwrap().source_version, 2);
    assert_eq!(
        at.get("other").unwrap(),
        None,
        "other was committed after s2"
    );
    assert!(store
        .verify(VerifyOptions { deep: true })
        .unwrap()
        .is_clean());

    // The horizon survives a reopen and never moves back.
    let path = store.path().to_path_buf();
    drop(at);
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.snapshot().unwrap().history_from(), s2);
    assert_eq!(store.gc(now_gc()).unwrap().history_from, s2);
}

#[test]
fn restaging_content_gc_removed_publishes_it_again() {
    let (_d, store, clock) = manual_store();
    store.put("u", 1, b"old bytes").unwrap();
    clock.advance_ms(1);
    store.put("u", 2, b"new bytes").unwrap();
    clock.advance_ms(1);
    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.history_rows_pruned, r.objects), (1, 1));
    // The unit goes back to the old content at a newer version.
    let out = store.put("u", 3, b"old bytes").unwrap();
    assert_eq!(out.outcome.name(), "committed");
    let e = store.get("u").unwrap().unwrap();
    assert_eq!(
        store.snapshot().unwrap().read_object(&e).unwrap(),
        b"old bytes"
    );
    assert!(store
        .verify(VerifyOptions { deep: true })
        .unwrap()
        .is_clean());
}

#[test]
fn staging_leftovers_older_than_the_grace_period_are_removed() {
    let (_d, store, _c) = manual_store();
    let staging = store.path().join("staging");
    std::fs::write(staging.join("12345-0.part"), b"half an object").unwrap();
    let r = store
        .gc(GcOptions {
            grace: Duration::from_secs(3600),
            ..now_gc()
        })
        .unwrap();
    assert_eq!(r.staging_files, 0, "too young");
    let dry = store
        .gc(GcOptions {
            dry_run: true,
            ..now_gc()
        })
        .unwrap();
    assert_eq!((dry.staging_files, dry.staging_bytes), (1, 14));
    assert!(staging.join("12345-0.part").exists());
    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.staging_files, r.staging_bytes), (1, 14));
    assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);
}

#[test]
fn stray_files_are_left_alone() {
    let (_d, store, _c) = manual_store();
    let stray = store.path().join("objects").join("notes.txt");
    std::fs::write(&stray, b"mine").unwrap();
    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.objects, r.stray_files), (0, 1));
    assert!(stray.exists());
}
