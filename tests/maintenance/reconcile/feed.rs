//! Reading what changed and what is there in bulk: the change feed after a seq, `lookup_many`.

use super::{fill, open};

#[test]
fn the_change_feed_streams_what_changed_after_a_seq() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"));
    let mut seqs = Vec::new();
    for (i, u) in ["a", "b", "c", "a"].iter().enumerate() {
        seqs.push(
            store
                .put(u, i as u64 + 1, u.as_bytes())
                .unwrap()
                .outcome
                .seq()
                .unwrap(),
        );
    }
    let all: Vec<u64> = store
        .changes_since(0)
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(all, seqs);
    let feed = store.changes_since(seqs[1]).unwrap();
    // Commits after the feed was opened are not in it (it reads one consistent view).
    store.put("d", 1, b"d").unwrap();
    let later: Vec<(u64, Vec<String>)> = feed
        .map(|r| {
            let r = r.unwrap();
            match r.body {
                oncelake::log::RecordBody::Commit { entries } => {
                    (r.seq, entries.into_iter().map(|e| e.unit).collect())
                }
                other => panic!("unexpected record {other:?}"),
            }
        })
        .collect();
    assert_eq!(
        later,
        [
            (seqs[2], vec!["c".to_string()]),
            (seqs[3], vec!["a".to_string()])
        ]
    );
    assert_eq!(store.changes_since(u64::MAX).unwrap().count(), 0);
}

#[test]
fn lookup_many_answers_like_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"));
    fill(
        &store,
        &(0..600).map(|i| (format!("u{i:04}"), i % 7)).collect(),
    );
    store.put("u0003", 9, b"newer").unwrap();
    // Present and absent units, repeats, more than one chunk of 256.
    let units: Vec<String> = (0..1500)
        .map(|i| format!("u{:04}", (i * 7) % 900))
        .collect();
    let mut out = Vec::new();
    store.lookup_many(&units, &mut out).unwrap();
    assert_eq!(out.len(), units.len());
    for (u, got) in units.iter().zip(&out) {
        assert_eq!(*got, store.lookup(u).unwrap(), "{u}");
    }
    assert!(out.iter().any(Option::is_some) && out.iter().any(Option::is_none));
    store.lookup_many(&Vec::<String>::new(), &mut out).unwrap();
    assert!(out.is_empty());
}
