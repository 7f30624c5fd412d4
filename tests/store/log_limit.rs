//! Every accepted commit can be read back: a batch whose commit-log record would exceed the
//! record limit is refused up front (nothing written), and a batch exactly at the limit commits
//! and reads back through `changes_since`, replay and verify.

use oncelake::log::{RecordBody, MAX_RECORD_PAYLOAD};
use oncelake::{replay, Batch, Error, Store, VerifyOptions, MAX_KEY_LEN};

/// Payload bytes of one commit-record entry without a token, apart from its key.
const ENTRY_FIXED: usize = 4 + 8 + 4 + 32 + 8 + 4 + 1;
/// seq, time and the entry count in front of the entries.
const PREFIX: usize = 8 + 8 + 4;

fn key(i: usize) -> String {
    let head = format!("u/{i:08}/");
    format!("{head}{}", "k".repeat(MAX_KEY_LEN - head.len()))
}

#[test]
fn a_batch_at_the_record_limit_commits_and_reads_back_and_one_more_unit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lake")).unwrap();
    let staged = store
        .stage_bytes(b"one object shared by every unit")
        .unwrap();
    let fits = (MAX_RECORD_PAYLOAD - PREFIX) / (ENTRY_FIXED + MAX_KEY_LEN);

    let over = (0..=fits).fold(Batch::new(), |b, i| b.put(key(i), 1, &staged));
    let seq_before = store.last_seq().unwrap();
    match store.commit(over) {
        Err(Error::InvalidRequest(msg)) => {
            assert!(msg.contains("split it"), "the error says what to do: {msg}")
        }
        other => panic!("a batch over the record limit must be refused, got {other:?}"),
    }
    assert_eq!(store.last_seq().unwrap(), seq_before, "nothing was written");
    assert!(store.snapshot().unwrap().get(&key(0)).unwrap().is_none());

    let at_limit = (0..fits).fold(Batch::new(), |b, i| b.put(key(i), 1, &staged));
    let report = store.commit(at_limit).unwrap();
    assert!(report.applied());
    let seq = store.last_seq().unwrap();

    let snap = store.snapshot().unwrap();
    let records: Vec<_> = snap.changes_since(seq - 1).unwrap().collect();
    assert_eq!(records.len(), 1);
    let rec = records
        .into_iter()
        .next()
        .unwrap()
        .expect("the record decodes");
    match rec.body {
        RecordBody::Commit { entries } => {
            assert_eq!(entries.len(), fits);
            assert_eq!(entries[fits - 1].unit, key(fits - 1));
        }
        other => panic!("expected a commit record, got {other:?}"),
    }
    let replayed = replay(&snap).unwrap();
    assert!(replayed.problems.is_empty(), "{:?}", replayed.problems);
    assert_eq!(replayed.units, fits as u64);
    drop(snap);
    let verified = store.verify(VerifyOptions { deep: true }).unwrap();
    assert!(verified.is_clean(), "{verified:?}");

    // And after a reopen, from the log on disk.
    drop(store);
    let store = Store::open(dir.path().join("lake")).unwrap();
    let snap = store.snapshot().unwrap();
    assert_eq!(
        snap.changes_since(0).unwrap().filter(|r| r.is_ok()).count(),
        1
    );
}
