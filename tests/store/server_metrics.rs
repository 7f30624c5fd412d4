//! SPEC R16: what the store itself knows is persisted with the commits, so a fresh process never
//! reports zero for it; the process-only counters are labelled and start at zero.

use oncelake::metrics::{scope_of, Scope};
use oncelake::{Batch, Store};
use std::collections::BTreeMap;
use std::time::Duration;

/// The store-scope counters of a snapshot, by name.
fn store_counters(s: &Store) -> BTreeMap<&'static str, u64> {
    s.metrics()
        .counters()
        .into_iter()
        .filter(|(n, _)| scope_of(n) == Scope::Store)
        .collect()
}

#[test]
fn a_reopened_store_reports_the_counters_of_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let mut want: BTreeMap<&'static str, u64> = BTreeMap::new();
    {
        let s = Store::open(&path).unwrap();
        assert_eq!(
            s.metrics().counted_since_seq,
            0,
            "a new store counts from its start"
        );
        s.put("a", 1, b"one").unwrap();
        s.put("a", 1, b"one").unwrap(); // duplicate
        s.put("a", 1, b"other").unwrap(); // conflict
        s.put("a", 0, b"old").unwrap(); // stale
        s.put("b", 1, b"two").unwrap();
        let lease = match s.claim("c", 1, "w1", Duration::from_secs(60)).unwrap() {
            oncelake::ClaimOutcome::Granted { lease, .. } => lease,
            other => panic!("{other:?}"),
        };
        let staged = s.stage_bytes(b"c").unwrap();
        // A token that is not the unit's lease: fenced.
        let r = s
            .commit(Batch::new().put_fenced("c", 1, &staged, lease.token + 1))
            .unwrap();
        assert!(!r.applied());
        want.extend([
            ("commits", 2),
            ("units_committed", 2),
            ("duplicates_collapsed", 1),
            ("conflicts", 1),
            ("stale_rejections", 1),
            ("fenced_rejections", 1),
            ("claims_granted", 1),
        ]);
        let live = store_counters(&s);
        for (k, v) in &want {
            assert_eq!(live[k], *v, "{k} in the writing process");
        }
        assert!(s.metrics().bytes_staged > 0);
    }
    let s = Store::open(&path).unwrap();
    let fresh = store_counters(&s);
    for (k, v) in &want {
        assert_eq!(fresh[k], *v, "{k} in a fresh process");
    }
    assert!(fresh["groups"] >= 6);
    // Process-only counters start at zero in the new process.
    assert_eq!(s.metrics().bytes_staged, 0);
    assert_eq!(scope_of("bytes_staged"), Scope::Process);
    // And counting goes on from there.
    s.put("d", 1, b"d").unwrap();
    assert_eq!(store_counters(&s)["commits"], 3);
    drop(s);
    assert_eq!(store_counters(&Store::open(&path).unwrap())["commits"], 3);
    // The Prometheus text says which is which.
    let text = Store::open(&path).unwrap().metrics().to_prometheus();
    assert!(text.contains("oncelake_commits_total 3"));
    assert!(text.contains("(persisted in the store"));
    assert!(text.contains("(this process only"));
}
