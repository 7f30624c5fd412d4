//! The commit rules (SPEC R3), corrections, atomic multi-unit commits (R4), durability failure
//! (R5), reads and time travel (R7) and the commit log (R8), through the public API.

use crate::common;
use oncelake::fault::FaultPlan;
use oncelake::log::RecordBody;
use oncelake::{Batch, Error, ObjectId, Options, Outcome, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path().join("lake")).unwrap();
    (dir, s)
}

/// A store holding `puts` (unit, version, bytes), put in order; and its last seq.
fn store_with(puts: &[(&str, u64, &[u8])]) -> (tempfile::TempDir, Store, u64) {
    let (dir, s) = store();
    for (unit, version, bytes) in puts {
        s.put(unit, *version, bytes).unwrap();
    }
    let seq = s.last_seq().unwrap();
    (dir, s, seq)
}

/// A store where unit `u` was put at `first` (version, bytes), and the outcome of putting it at
/// `then` next.
fn put_twice(first: (u64, &[u8]), then: (u64, &[u8])) -> (tempfile::TempDir, Store, Outcome) {
    let (dir, s) = store();
    s.put("u", first.0, first.1).unwrap();
    let o = s.put("u", then.0, then.1).unwrap().outcome;
    (dir, s, o)
}

/// The outcome of a commit at `seq` that wrote `revision` over the version it `superseded`.
fn committed(seq: u64, revision: u32, superseded: Option<u64>) -> Outcome {
    Outcome::Committed {
        seq,
        revision,
        superseded,
    }
}

#[test]
fn r3_first_writer_commits() {
    let (_d, s) = store();
    let o = s.put("u", 5, b"a").unwrap().outcome;
    assert_eq!(o, committed(1, 0, None));
    let e = s.get("u").unwrap().unwrap();
    assert_eq!(
        (e.source_version, e.seq, e.object.id),
        (5, 1, ObjectId::of(b"a"))
    );
}

#[test]
fn r3_newer_version_supersedes_and_keeps_history() {
    let (_d, s, o) = put_twice((5, b"a"), (6, b"b"));
    assert_eq!(o, committed(2, 0, Some(5)));
    assert_eq!(s.get("u").unwrap().unwrap().source_version, 6);
    let old = s.snapshot_at(1).unwrap().get("u").unwrap().unwrap();
    assert_eq!((old.source_version, old.object.id), (5, ObjectId::of(b"a")));
}

#[test]
fn r3_identical_retry_is_a_duplicate_with_the_original_seq() {
    let (_d, s, before) = store_with(&[("other", 1, b"x"), ("u", 5, b"a")]);
    let o = s.put("u", 5, b"a").unwrap().outcome;
    assert_eq!(o, Outcome::Duplicate { seq: 2 });
    assert_eq!(s.last_seq().unwrap(), before, "a duplicate writes nothing");
    assert_eq!(s.metrics().duplicates_collapsed, 1);
}

#[test]
fn r3_same_version_different_bytes_is_a_conflict_naming_the_winner() {
    let (_d, s, o) = put_twice((5, b"a"), (5, b"b"));
    assert_eq!(
        o,
        Outcome::Conflict {
            winner_seq: 1,
            winner: ObjectId::of(b"a")
        }
    );
    assert_eq!(s.get("u").unwrap().unwrap().object.id, ObjectId::of(b"a"));
    assert_eq!(s.metrics().conflicts, 1);
}

#[test]
fn r3_older_version_is_stale() {
    let (_d, s, o) = put_twice((5, b"a"), (4, b"old"));
    assert_eq!(o, Outcome::Stale { current_version: 5 });
    assert_eq!(s.get("u").unwrap().unwrap().source_version, 5);
}

#[test]
fn r3_older_fencing_token_is_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let clock = oncelake::ManualClock::new(1_000_000);
    let s = common::open_with_clock(dir.path(), &clock);
    let ttl = Duration::from_secs(10);
    let old = common::granted(s.claim("u", 1, "w1", ttl).unwrap());
    clock.advance_ms(11_000);
    let (new, took_over) = common::granted_taking_over(s.claim("u", 1, "w2", ttl).unwrap());
    assert!(
        took_over && new.token > old.token,
        "an expired lease is taken over"
    );
    common::late_commit_is_fenced(&s, &old, &new);
    assert!(s.get("u").unwrap().is_none(), "nothing committed yet");
    let r = common::commit_fenced(&s, &new, b"fresh");
    assert!(matches!(r, Outcome::Committed { .. }));
}

#[test]
fn corrections_add_a_revision_and_keep_the_old_entry() {
    let (_d, s) = store();
    s.put("u", 5, b"wrong").unwrap();
    let o = s.correct("u", 5, b"right").unwrap().outcome;
    assert_eq!(o, committed(2, 1, Some(5)));
    let e = s.get("u").unwrap().unwrap();
    assert_eq!((e.revision, e.object.id), (1, ObjectId::of(b"right")));
    // The original is still readable as of its seq, and a late retry of it is a duplicate of it,
    // not a conflict with the correction.
    let old = s.snapshot_at(1).unwrap().get("u").unwrap().unwrap();
    assert_eq!(old.object.id, ObjectId::of(b"wrong"));
    assert_eq!(
        s.put("u", 5, b"wrong").unwrap().outcome,
        Outcome::Duplicate { seq: 1 }
    );
    // Correcting with identical bytes changes nothing; correcting an older version is stale.
    assert_eq!(
        s.correct("u", 5, b"right").unwrap().outcome,
        Outcome::Duplicate { seq: 2 }
    );
    assert_eq!(
        s.correct("u", 4, b"x").unwrap().outcome,
        Outcome::Stale { current_version: 5 }
    );
    assert!(oncelake::replay(&s.snapshot().unwrap()).unwrap().is_clean());
}

#[test]
fn all_or_nothing_aborts_and_reports_every_reason() {
    let (_d, s, seq) = store_with(&[("b", 5, b"b5"), ("c", 5, b"c5")]);
    let a = s.stage_bytes(b"a1").unwrap();
    let b_old = s.stage_bytes(b"b4").unwrap();
    let c_other = s.stage_bytes(b"c5-other").unwrap();
    let r = s
        .commit(
            Batch::new()
                .put("a", 1, &a)
                .put("b", 4, &b_old)
                .put("c", 5, &c_other),
        )
        .unwrap();
    assert_eq!(r.seq, None);
    assert!(!r.applied());
    assert_eq!(r.units[0].outcome, Outcome::Aborted);
    assert_eq!(r.units[1].outcome, Outcome::Stale { current_version: 5 });
    assert!(matches!(
        r.units[2].outcome,
        Outcome::Conflict { winner_seq: 2, .. }
    ));
    assert_eq!(r.rejected().count(), 2);
    assert!(
        s.get("a").unwrap().is_none(),
        "nothing of an aborted commit is visible"
    );
    assert_eq!(s.last_seq().unwrap(), seq);
}

#[test]
fn partial_mode_applies_what_is_acceptable() {
    let (_d, s) = store();
    s.put("b", 5, b"b5").unwrap();
    let a = s.stage_bytes(b"a1").unwrap();
    let b_old = s.stage_bytes(b"b4").unwrap();
    let b_dup = s.stage_bytes(b"b5").unwrap();
    let r = s
        .commit(Batch::new().put("a", 1, &a).put("b", 4, &b_old).partial())
        .unwrap();
    assert_eq!(r.seq, Some(2));
    assert!(matches!(
        r.units[0].outcome,
        Outcome::Committed { seq: 2, .. }
    ));
    assert_eq!(r.units[1].outcome, Outcome::Stale { current_version: 5 });
    // Duplicates inside an all-or-nothing commit are no-ops that do not abort it.
    let c = s.stage_bytes(b"c").unwrap();
    let r = s
        .commit(Batch::new().put("b", 5, &b_dup).put("c", 1, &c))
        .unwrap();
    assert!(r.applied());
    assert_eq!(r.units[0].outcome, Outcome::Duplicate { seq: 1 });
    let entries: Vec<_> = s
        .snapshot()
        .unwrap()
        .iter()
        .unwrap()
        .map(|e| e.unwrap().unit)
        .collect();
    assert_eq!(entries, ["a", "b", "c"]);
}

#[test]
fn bad_batches_are_refused_before_anything_happens() {
    let (_d, s) = store();
    let x = s.stage_bytes(b"x").unwrap();
    assert!(matches!(
        s.commit(Batch::new()),
        Err(Error::InvalidRequest(_))
    ));
    assert!(matches!(
        s.commit(Batch::new().put("u", 1, &x).put("u", 2, &x)),
        Err(Error::InvalidRequest(_))
    ));
    assert!(matches!(
        s.commit(Batch::new().put("bad\u{1}key", 1, &x)),
        Err(Error::InvalidKey { .. })
    ));
    assert_eq!(s.last_seq().unwrap(), 0);
}

#[test]
fn a_concurrent_reader_never_sees_part_of_a_commit() {
    let (_d, s) = store();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let snap = s.snapshot().unwrap();
                let versions: Vec<u64> = snap
                    .prefix("batch/")
                    .unwrap()
                    .map(|e| e.unwrap().source_version)
                    .collect();
                // Every commit writes all ten units at one version: a mix or a partial set would
                // be a torn read.
                if !versions.is_empty() {
                    assert_eq!(versions.len(), 10, "partial commit visible: {versions:?}");
                    assert!(
                        versions.iter().all(|&v| v == versions[0]),
                        "mixed commit visible: {versions:?}"
                    );
                }
                checks += 1;
            }
            checks
        })
    };
    for v in 1..=60u64 {
        let staged = s.stage_bytes(&v.to_le_bytes()).unwrap();
        let mut b = Batch::new();
        for i in 0..10 {
            b = b.put(format!("batch/{i:02}"), v, &staged);
        }
        assert!(s.commit(b).unwrap().applied());
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
}

#[test]
fn a_failed_sync_fails_the_commit_and_the_store_until_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let opts = Options {
        faults: Some(plan.clone()),
        ..Options::default()
    };
    let s = Store::open_with(dir.path(), opts).unwrap();
    s.put("kept", 1, b"k").unwrap();
    plan.fail_syncs(true);
    let err = s.put("lost", 1, b"l").unwrap_err();
    assert!(matches!(err, Error::Failed { .. }), "{err}");
    plan.fail_syncs(false);
    // The store stays failed even though the disk works again: no write lands on unknown state.
    assert!(matches!(s.put("later", 1, b"x"), Err(Error::Failed { .. })));
    assert!(s.failure().is_some());
    drop(s);
    let s = Store::open(dir.path()).unwrap();
    assert!(s.get("kept").unwrap().is_some());
    assert!(s.get("later").unwrap().is_none());
    // The unacknowledged commit is wholly there or wholly absent, and the log agrees.
    let report = oncelake::replay(&s.snapshot().unwrap()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    s.put("after", 1, b"a").unwrap();
}

#[test]
fn snapshots_iterate_prefixes_ranges_and_older_seqs() {
    let (_d, s) = store();
    for (i, u) in ["a/1", "a/2", "b/1", "b/2", "c"].iter().enumerate() {
        s.put(u, 1, u.as_bytes()).unwrap();
        assert_eq!(s.last_seq().unwrap(), i as u64 + 1);
    }
    s.put("a/1", 2, b"a/1 v2").unwrap(); // seq 6
    let snap = s.snapshot().unwrap();
    let units = |it: oncelake::Entries| it.map(|e| e.unwrap().unit).collect::<Vec<_>>();
    assert_eq!(units(snap.prefix("a/").unwrap()), ["a/1", "a/2"]);
    assert_eq!(
        units(snap.range("a/2", Some("c")).unwrap()),
        ["a/2", "b/1", "b/2"]
    );
    assert_eq!(units(snap.iter().unwrap()).len(), 5);
    let old = s.snapshot_at(3).unwrap();
    assert_eq!(old.seq(), 3);
    assert_eq!(units(old.iter().unwrap()), ["a/1", "a/2", "b/1"]);
    assert_eq!(old.get("a/1").unwrap().unwrap().source_version, 1);
    assert!(old.get("b/2").unwrap().is_none());
    let at5: Vec<_> = s
        .snapshot_at(5)
        .unwrap()
        .prefix("a/")
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(
        at5.iter().map(|e| e.source_version).collect::<Vec<_>>(),
        [1, 1]
    );
    assert!(matches!(s.snapshot_at(7), Err(Error::SeqOutOfRange { .. })));
    // Object reads: bytes, file, memory map.
    let e = snap.get("a/1").unwrap().unwrap();
    assert_eq!(snap.read_object(&e).unwrap(), b"a/1 v2");
    assert_eq!(&snap.map_object(&e).unwrap()[..], b"a/1 v2");
    let meta = std::fs::metadata(snap.object_path(&e)).unwrap();
    assert!(
        meta.permissions().readonly(),
        "published objects are read-only"
    );
}

#[test]
fn the_change_feed_streams_every_change_in_order() {
    let (_d, s) = store();
    s.put("a", 1, b"a").unwrap();
    s.put("b", 1, b"b").unwrap();
    s.put("a", 2, b"a2").unwrap();
    let recs: Vec<_> = s
        .snapshot()
        .unwrap()
        .changes_since(1)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(recs.iter().map(|r| r.seq).collect::<Vec<_>>(), [2, 3]);
    match &recs[1].body {
        RecordBody::Commit { entries } => {
            assert_eq!(
                (entries[0].unit.as_str(), entries[0].source_version),
                ("a", 2)
            )
        }
        other => panic!("expected a commit record, got {other:?}"),
    }
}

#[test]
fn staging_streams_from_a_reader_and_a_file_and_dedups_content() {
    let (d, s) = store();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let a = s.stage_reader(std::io::Cursor::new(&big)).unwrap();
    let path = d.path().join("input.bin");
    std::fs::write(&path, &big).unwrap();
    let b = s.stage_file(&path).unwrap();
    assert_eq!(a.meta(), b.meta(), "identical content is one object");
    assert_eq!(a.meta().size, big.len() as u64);
    assert_eq!(a.meta().crc32, crc32fast::hash(&big));
    assert_eq!(a.id(), ObjectId::of(&big));
    let staging = std::fs::read_dir(s.path().join("staging")).unwrap().count();
    assert_eq!(staging, 0, "staging files are removed once published");
    assert!(s.stage_file(d.path().join("missing")).is_err());
}
