//! Every check can fail: each test builds a state (or a step) that breaks one rule and sees that
//! rule named, next to one that keeps it and sees nothing.

use super::*;
use crate::object::ObjectId;
use crate::schema::claim::ClaimRecord;
use crate::schema::log::{ClaimChange, LogEntry};
use crate::schema::meta::{
    put as meta_put, HISTORY_FROM as META_HISTORY_FROM, NEXT_SEQ as META_NEXT_SEQ,
    NEXT_TOKEN as META_NEXT_TOKEN,
};
use crate::schema::{CLAIMS, LOG, META};
use crate::Store;
use std::time::Duration;

fn rule(c: Check) -> Option<Invariant> {
    c.err().map(|v| v.invariant)
}

fn rules(v: &[Violation]) -> Vec<Invariant> {
    v.iter().map(|v| v.invariant).collect()
}

/// The clock the I6 checks in these tests run at: [`lease`] builds each status relative to it.
const NOW: u64 = 500;

/// The stored record of a lease with `token` that has `status` at [`NOW`].
fn lease(token: u64, status: LeaseStatus) -> ClaimRecord {
    ClaimRecord::with_status(token, status, NOW, 1_000)
}

fn meta(size: u64) -> ObjectMeta {
    ObjectMeta {
        id: ObjectId([7; 32]),
        size,
        crc32: 0,
    }
}

fn entry(seq: u64, version: u64, revision: u32) -> EntryValue {
    EntryValue {
        source_version: version,
        revision,
        object: meta(3),
        seq,
        committed_at_ms: 0,
    }
}

#[test]
fn i5_a_version_going_back_or_a_replacement_without_a_revision_is_named() {
    assert_eq!(rule(check_version_advance("u", None, (1, 0))), None);
    assert_eq!(rule(check_version_advance("u", Some((1, 0)), (2, 0))), None);
    assert_eq!(rule(check_version_advance("u", Some((1, 0)), (1, 1))), None);
    let back = Some(Invariant::VersionNeverBack);
    assert_eq!(rule(check_version_advance("u", Some((2, 0)), (1, 5))), back);
    assert_eq!(rule(check_version_advance("u", Some((2, 1)), (2, 1))), back);
    assert_eq!(rule(check_version_advance("u", Some((2, 3)), (2, 0))), back);
}

#[test]
fn i6_a_stale_foreign_ended_or_missing_token_is_named() {
    use LeaseStatus::*;
    let ok = |t, l: Option<ClaimRecord>| rule(check_token_admitted("u", t, l.as_ref(), NOW));
    assert_eq!(ok(None, None), None);
    assert_eq!(ok(Some(3), Some(lease(3, Live))), None);
    assert_eq!(
        ok(Some(3), Some(lease(3, Expired))),
        None,
        "no takeover yet"
    );
    assert_eq!(ok(None, Some(lease(3, Expired))), None);
    assert_eq!(ok(None, Some(lease(3, Ended))), None);
    let fenced = Some(Invariant::NoStaleToken);
    assert_eq!(ok(Some(2), Some(lease(3, Live))), fenced, "not the newest");
    assert_eq!(
        ok(Some(3), Some(lease(3, Ended))),
        fenced,
        "ended by a commit"
    );
    assert_eq!(ok(Some(3), Some(lease(3, Released))), fenced, "released");
    assert_eq!(ok(Some(3), None), fenced, "never issued");
    assert_eq!(ok(None, Some(lease(3, Live))), fenced, "busy");
}

#[test]
fn l5_a_group_over_its_bound_is_named_but_a_lone_heavy_request_is_not() {
    assert_eq!(rule(check_group_bound(&[1, 2, 1], 4)), None);
    assert_eq!(rule(check_group_bound(&[9], 4)), None);
    assert_eq!(
        rule(check_group_bound(&[2, 3], 4)),
        Some(Invariant::GroupWithinBound)
    );
}

#[test]
fn l6_an_unpublished_or_short_object_is_named() {
    assert_eq!(rule(check_object_published("u", &meta(3), Some(3))), None);
    let l6 = Some(Invariant::ObjectBeforeRow);
    assert_eq!(rule(check_object_published("u", &meta(3), None)), l6);
    assert_eq!(rule(check_object_published("u", &meta(3), Some(2))), l6);
}

#[test]
fn log_and_counter_rules_name_what_breaks_them() {
    assert_eq!(rule(check_token_below_next("u", 4, 5)), None);
    assert_eq!(
        rule(check_token_below_next("u", 5, 5)),
        Some(Invariant::TokenBelowNext)
    );
    assert_eq!(rule(check_next_seq(1, None)), None);
    assert_eq!(rule(check_next_seq(8, Some(7))), None);
    let l2 = Some(Invariant::NextSeqFollowsLog);
    assert_eq!(rule(check_next_seq(7, Some(7))), l2, "would overwrite");
    assert_eq!(rule(check_next_seq(9, Some(7))), l2, "would leave a gap");
    assert_eq!(rule(check_next_seq(2, None)), l2);
    assert_eq!(rule(check_log_seq(None, 1, 1)), None);
    assert_eq!(rule(check_log_seq(Some(1), 2, 2)), None);
    let l1 = Some(Invariant::LogSeqIncreasing);
    assert_eq!(rule(check_log_seq(Some(1), 3, 3)), l1, "gap");
    assert_eq!(rule(check_log_seq(Some(3), 3, 3)), l1, "repeat");
    assert_eq!(rule(check_log_seq(Some(1), 2, 5)), l1, "wrong seq inside");
    assert_eq!(rule(check_log_seq(None, 0, 0)), l1);
    assert_eq!(rule(check_horizon_rises(3, 3)), None);
    assert_eq!(
        rule(check_horizon_rises(3, 2)),
        Some(Invariant::HorizonOnlyRises)
    );
    assert_eq!(rule(check_horizon_within_log(4, 4)), None);
    assert_eq!(
        rule(check_horizon_within_log(5, 4)),
        Some(Invariant::HorizonWithinLog)
    );
}

#[test]
fn i7_every_replay_problem_is_a_violation() {
    let mut problems: Vec<String> = Vec::new();
    assert!(check_replay(&problems).is_empty());
    problems.push("unit \"a\" is in the log but not in the manifest".into());
    assert_eq!(
        rules(&check_replay(&problems)),
        vec![Invariant::ReplayReproduces]
    );
}

fn record(seq: u64, time_ms: u64, body: RecordBody) -> Record {
    Record { seq, time_ms, body }
}

fn change(token: u64, expires_at_ms: u64) -> ClaimChange {
    ClaimChange {
        unit: "u".into(),
        worker: "w".into(),
        token,
        source_version: 1,
        expires_at_ms,
    }
}

fn commit(token: Option<u64>) -> RecordBody {
    RecordBody::Commit {
        entries: vec![LogEntry {
            unit: "u".into(),
            source_version: 1,
            revision: 0,
            object: meta(3),
            token,
        }],
    }
}

#[test]
fn i6_from_the_log_names_a_commit_under_an_old_ended_or_live_lease() {
    let run = |recs: Vec<Record>| {
        let mut f = FencingLog::new();
        recs.iter().flat_map(|r| f.record(r)).collect::<Vec<_>>()
    };
    let granted = |seq, token| record(seq, 0, RecordBody::ClaimGranted(change(token, 100)));
    // Allowed: the newest token; no token once the lease expired.
    assert!(run(vec![granted(1, 1), record(2, 5, commit(Some(1)))]).is_empty());
    assert!(run(vec![granted(1, 1), record(2, 100, commit(None))]).is_empty());
    let i6 = vec![Invariant::NoStaleToken];
    // An older token after a newer grant.
    let old = vec![granted(1, 1), granted(2, 2), record(3, 5, commit(Some(1)))];
    assert_eq!(rules(&run(old)), i6);
    // The same token twice: the first commit ended the lease.
    let twice = vec![
        granted(1, 1),
        record(2, 5, commit(Some(1))),
        record(3, 5, commit(Some(1))),
    ];
    assert_eq!(rules(&run(twice)), i6);
    // No token while the lease is live.
    assert_eq!(
        rules(&run(vec![granted(1, 1), record(2, 99, commit(None))])),
        i6
    );
    // A token never issued, and a release of a lease never granted.
    assert_eq!(rules(&run(vec![record(1, 0, commit(Some(4)))])), i6);
    let release = record(1, 0, RecordBody::ClaimReleased(change(1, 0)));
    assert_eq!(rules(&run(vec![release])), i6);
    // A fenced extension may have ended the lease: no token is then allowed, an old one is not.
    let ext = || {
        record(
            2,
            0,
            RecordBody::Extension {
                tag: 1,
                data: vec![],
            },
        )
    };
    assert!(run(vec![granted(1, 1), ext(), record(3, 5, commit(None))]).is_empty());
    let old = vec![
        granted(1, 2),
        granted(2, 3),
        ext(),
        record(4, 5, commit(Some(2))),
    ];
    assert_eq!(rules(&run(old)), i6);
}

#[test]
fn i1_and_i5_name_a_current_entry_that_is_not_the_newest_entry() {
    // Format 4: the history holds the replaced entries; format 3 also the current one.
    let replaced = [(1, entry(1, 1, 0))];
    let with_copy = [(1, entry(1, 1, 0)), (4, entry(4, 2, 0))];
    assert!(check_unit_rows("u", Some(&entry(4, 2, 0)), &replaced).is_empty());
    assert!(check_unit_rows("u", Some(&entry(4, 2, 0)), &with_copy).is_empty());
    assert!(check_unit_rows("u", Some(&entry(4, 2, 0)), &[]).is_empty());
    let i1 = vec![Invariant::OneCurrentEntry];
    assert_eq!(
        rules(&check_unit_rows("u", Some(&entry(1, 1, 0)), &with_copy)),
        i1,
        "a newer row than the current entry"
    );
    assert_eq!(
        rules(&check_unit_rows("u", Some(&entry(4, 3, 0)), &with_copy)),
        i1,
        "the copy of the current entry says otherwise"
    );
    assert_eq!(rules(&check_unit_rows("u", None, &replaced)), i1);
    let back = [(1, entry(1, 2, 0))];
    assert_eq!(
        rules(&check_unit_rows("u", Some(&entry(4, 1, 0)), &back)),
        vec![Invariant::VersionNeverBack],
        "the current entry goes back from the row it replaced"
    );
    let back_in_history = [(1, entry(1, 2, 0)), (2, entry(2, 1, 0))];
    assert_eq!(
        rules(&check_unit_rows(
            "u",
            Some(&entry(4, 3, 0)),
            &back_in_history
        )),
        vec![Invariant::VersionNeverBack],
        "the history goes back"
    );
}

/// A store with a claimed-and-committed unit and a plain one.
fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lake")).unwrap();
    let a = store.stage_bytes(b"a").unwrap();
    let b = store.stage_bytes(b"b").unwrap();
    let token = match store.claim("a", 1, "w", Duration::from_secs(60)).unwrap() {
        crate::ClaimOutcome::Granted { lease, .. } => lease.token,
        other => panic!("{other:?}"),
    };
    let r = store
        .commit(
            crate::Batch::new()
                .put_fenced("a", 1, &a, token)
                .put("b", 1, &b),
        )
        .unwrap();
    assert!(r.applied());
    // The checks below read and damage the B-trees directly: nothing may wait in the backlog.
    store.wait_applied().unwrap();
    (dir, store)
}

/// Runs `damage` in a write transaction of the store, then the whole-store checks.
fn after(store: &Store, damage: impl FnOnce(&redb::WriteTransaction)) -> Vec<Invariant> {
    let txn = store.core().db.begin_write().unwrap();
    damage(&txn);
    txn.commit().unwrap();
    rules(&store.check_invariants().unwrap())
}

#[test]
fn a_healthy_store_keeps_every_rule() {
    let (_d, store) = store();
    assert_eq!(store.check_invariants().unwrap(), vec![]);
}

#[test]
fn whole_store_checks_name_damaged_counters() {
    let (_d, store) = store();
    let set = |key: &'static str, v: u64| {
        move |txn: &redb::WriteTransaction| {
            meta_put(&mut txn.open_table(META).unwrap(), key, v).unwrap()
        }
    };
    // The log holds seq 1 (the grant) and 2 (the commit): next_seq is 3.
    let got = after(&store, set(META_NEXT_SEQ, 9));
    assert!(got.contains(&Invariant::NextSeqFollowsLog), "gap: {got:?}");
    let got = after(&store, set(META_NEXT_SEQ, 2));
    assert!(
        got.contains(&Invariant::NextSeqFollowsLog),
        "overwrite: {got:?}"
    );
    let got = after(&store, |t| {
        set(META_NEXT_SEQ, 3)(t);
        set(META_HISTORY_FROM, 9)(t);
    });
    assert_eq!(got, vec![Invariant::HorizonWithinLog]);
    let got = after(&store, |t| {
        set(META_HISTORY_FROM, 0)(t);
        set(META_NEXT_TOKEN, 1)(t);
    });
    assert!(got.contains(&Invariant::TokenBelowNext), "{got:?}");
}

#[test]
fn whole_store_checks_name_damaged_rows() {
    let (_d, store) = store();
    // A history row newer than the manifest's entry: two current entries for "b".
    let got = after(&store, |t| {
        let mut h = t.open_table(crate::schema::HISTORY).unwrap();
        let v = entry(50, 1, 0);
        h.insert(("b", 50), v.encode_history("b").as_slice())
            .unwrap();
    });
    assert!(got.contains(&Invariant::OneCurrentEntry), "{got:?}");
    // A damaged log record and a claim with a token the counter would issue again.
    let got = after(&store, |t| {
        let mut log = t.open_table(LOG).unwrap();
        log.insert(1, b"garbage".as_slice()).unwrap();
        let rec = ClaimRecord {
            worker: "w".into(),
            token: 99,
            source_version: 1,
            expires_at_ms: 0,
            released: false,
            by_commit: false,
        };
        let mut claims = t.open_table(CLAIMS).unwrap();
        claims.insert("z", rec.encode("z").as_slice()).unwrap();
    });
    assert!(got.contains(&Invariant::Checksummed), "{got:?}");
    assert!(got.contains(&Invariant::TokenBelowNext), "{got:?}");
}

#[test]
fn group_checks_name_a_mislogged_group() {
    let (_d, store) = store();
    let txn = store.core().db.begin_write().unwrap();
    let before = Counters::read(&txn.open_table(META).unwrap()).unwrap();
    let exists = |_: &ObjectMeta| Some(3);
    {
        let log = txn.open_table(LOG).unwrap();
        let none = check_group(&log, before, before).unwrap();
        assert_eq!(none, vec![]);
    }
    let s = before.next_seq;
    let mut log = txn.open_table(LOG).unwrap();
    // A group that logs at s + 1 (a gap) a commit of an unpublished object with a token the
    // counter has not passed, while it lowers the horizon.
    let rec = record(s + 1, 0, commit(Some(before.next_token)));
    log.insert(s + 1, rec.encode().as_slice()).unwrap();
    let after = Counters {
        next_seq: s + 2,
        next_token: before.next_token,
        history_from: 0,
    };
    let raised = Counters {
        history_from: 2,
        ..before
    };
    let mut got = rules(&check_group(&log, raised, after).unwrap());
    assert_eq!(check_objects_published(&rec, &exists), vec![]);
    got.extend(rules(&check_objects_published(&rec, &|_| None)));
    for want in [
        Invariant::LogSeqIncreasing,
        Invariant::TokenBelowNext,
        Invariant::ObjectBeforeRow,
        Invariant::HorizonOnlyRises,
    ] {
        assert!(got.contains(&want), "{want:?} not in {got:?}");
    }
}

#[test]
fn check_accept_names_both_rules() {
    let live = lease(3, LeaseStatus::Live);
    assert!(check_accept("u", Some(3), Some(&live), NOW, Some((1, 0)), (2, 0)).is_empty());
    assert_eq!(
        rules(&check_accept(
            "u",
            Some(2),
            Some(&live),
            NOW,
            Some((2, 0)),
            (1, 0)
        )),
        vec![Invariant::NoStaleToken, Invariant::VersionNeverBack]
    );
}

#[test]
#[should_panic(expected = "I6 (NoStaleToken)")]
fn assert_holds_panics_naming_the_rule() {
    assert_holds(&[Violation {
        invariant: Invariant::NoStaleToken,
        seen: "x".into(),
    }]);
}

#[test]
fn verify_reports_the_violations_as_problems() {
    let (_d, store) = store();
    let clean = store.verify(crate::VerifyOptions::default()).unwrap();
    assert!(
        clean.invariants.is_empty() && clean.is_intact(),
        "{clean:?}"
    );
    // A claim whose token the counter would issue again.
    after(&store, |t| {
        meta_put(&mut t.open_table(META).unwrap(), META_NEXT_TOKEN, 1).unwrap()
    });
    let r = store.verify(crate::VerifyOptions::default()).unwrap();
    // Token 1 is in the grant record, the commit entry and the claim row.
    assert_eq!(rules(&r.invariants), vec![Invariant::TokenBelowNext; 3]);
    assert!(!r.is_intact());
    assert_eq!(r.problem_count(), clean.problem_count() + 3);
}
