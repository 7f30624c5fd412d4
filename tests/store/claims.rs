//! Coordinator mode (SPEC R9) and run_once (R11): takeover and fencing, renew, release, durability
//! of claims, clocks that jump, and run_once under many threads.

use crate::common;

use common::{
    commit_fenced, granted_taking_over as granted, late_commit_is_fenced,
    open_relaxed_with_clock as open_relaxed, open_with_clock as open, SplitMix64 as Rng,
};
use oncelake::{
    ClaimOutcome, Lease, ManualClock, Outcome, RenewOutcome, RunError, RunOutcome, Store,
};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const T0: u64 = 1_800_000_000_000;
const TTL: Duration = Duration::from_secs(30);

/// Commits `bytes` under `lease`, and fails unless it committed.
#[track_caller]
fn commits(store: &Store, lease: &Lease, bytes: &[u8]) {
    let outcome = commit_fenced(store, lease, bytes);
    assert!(matches!(outcome, Outcome::Committed { .. }), "{outcome:?}");
}

/// Commits `bytes` under `lease`, and fails unless its token was fenced.
#[track_caller]
fn is_fenced(store: &Store, lease: &Lease, bytes: &[u8]) {
    let outcome = commit_fenced(store, lease, bytes);
    assert!(matches!(outcome, Outcome::Fenced { .. }), "{outcome:?}");
}

#[test]
fn an_expired_lease_is_taken_over_and_the_old_holders_late_commit_is_fenced() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    let (old, took_over) = granted(store.claim("u", 1, "w1", TTL).unwrap());
    assert!(!took_over);
    assert_eq!(old.expires_at_ms, T0 + 30_000);

    // Still live: w2 is refused and told who holds it until when.
    clock.advance_ms(29_999);
    assert_eq!(
        store.claim("u", 1, "w2", TTL).unwrap(),
        ClaimOutcome::Held {
            worker: "w1".into(),
            expires_at_ms: T0 + 30_000
        }
    );
    // Expired: w2 takes it over with a higher token.
    clock.advance_ms(1);
    let (new, took_over) = granted(store.claim("u", 1, "w2", TTL).unwrap());
    assert!(took_over);
    assert!(new.token > old.token);

    // w1 wakes up and commits late: fenced, whatever the clock says now.
    clock.set_ms(T0);
    late_commit_is_fenced(&store, &old, &new);
    commits(&store, &new, b"fresh");
    // w1's renew is refused too.
    assert_eq!(
        store.renew(&old, TTL).unwrap(),
        RenewOutcome::Lost {
            newest_token: new.token
        }
    );
    let m = store.metrics();
    assert_eq!(
        (m.claims_taken_over, m.fenced_rejections, m.claims_held),
        (1, 1, 1)
    );
}

#[test]
fn renew_keeps_the_lease() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    let (lease, _) = granted(store.claim("u", 1, "w1", TTL).unwrap());
    for _ in 0..5 {
        clock.advance_ms(20_000);
        match store.renew(&lease, TTL).unwrap() {
            RenewOutcome::Renewed(l) => {
                assert_eq!(l.token, lease.token, "renewing keeps the token");
                assert_eq!(l.expires_at_ms, clock_now(&clock) + 30_000);
            }
            other => panic!("renew refused: {other:?}"),
        }
        // Long past the first expiry, the lease still holds off everyone else.
        assert!(matches!(
            store.claim("u", 1, "w2", TTL).unwrap(),
            ClaimOutcome::Held { ref worker, .. } if worker == "w1"
        ));
    }
    commits(&store, &lease, b"x");
}

fn clock_now(c: &ManualClock) -> u64 {
    use oncelake::Clock;
    c.now_ms()
}

#[test]
fn release_lets_another_worker_in_and_fences_the_releaser() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let (first, _) = granted(store.claim("u", 1, "w1", TTL).unwrap());
    assert!(store.release(&first).unwrap().is_released());
    assert!(
        !store.release(&first).unwrap().is_released(),
        "a lease is released once"
    );
    let (second, took_over) = granted(store.claim("u", 1, "w2", TTL).unwrap());
    assert!(!took_over, "a released lease is not a takeover");
    assert!(second.token > first.token);
    is_fenced(&store, &first, b"a");
    commits(&store, &second, b"b");
    // Done: any later claim says so.
    assert!(matches!(
        store.claim("u", 1, "w3", TTL).unwrap(),
        ClaimOutcome::AlreadyDone(e) if e.source_version == 1
    ));
}

#[test]
fn claims_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let clock = ManualClock::new(T0);
    let (lease, stale) = {
        let store = open(&path, &clock);
        let (stale, _) = granted(store.claim("v", 1, "w0", TTL).unwrap());
        clock.advance_ms(31_000);
        let (lease, _) = granted(store.claim("u", 1, "w1", TTL).unwrap());
        let (newer, took_over) = granted(store.claim("v", 1, "w9", TTL).unwrap());
        assert!(took_over && newer.token > stale.token);
        (lease, stale)
    };
    let store = open(&path, &clock);
    assert_eq!(
        store.claim("u", 1, "w2", TTL).unwrap(),
        ClaimOutcome::Held {
            worker: "w1".into(),
            expires_at_ms: lease.expires_at_ms
        }
    );
    // The holder asking again keeps its token.
    let (again, _) = granted(store.claim("u", 1, "w1", TTL).unwrap());
    assert_eq!(again.token, lease.token);
    // Tokens keep rising across the reopen, and the old token still fences.
    is_fenced(&store, &stale, b"late");
    commits(&store, &lease, b"ok");
    clock.advance_ms(31_000);
    let (later, _) = granted(store.claim("w", 1, "w1", TTL).unwrap());
    assert!(later.token > lease.token);
}

/// Clocks jumping back and forth only move *when* a lease may be taken over; they never let a
/// holder with an older token commit, and never let two holders both commit the same version.
#[test]
fn clock_jumps_never_let_two_holders_commit() {
    for seed in 0..12u64 {
        let (_dir, clock, store) = common::on_clock(T0, open_relaxed);
        let mut rng = Rng(seed);
        let units = ["a", "b", "c"];
        let workers = ["w0", "w1", "w2", "w3"];
        // Model: newest token granted per unit; leases each worker believes it holds;
        // (unit, version) pairs committed under a token.
        let mut newest: BTreeMap<&str, u64> = BTreeMap::new();
        let mut held: Vec<Lease> = Vec::new();
        let mut committed: HashSet<(String, u64)> = HashSet::new();
        let mut version: BTreeMap<&str, u64> = BTreeMap::new();
        let mut commits_ok = 0;
        for step in 0..250 {
            match rng.below(6) {
                0 => {
                    // Jump anywhere within ±2 minutes, also backwards.
                    let t = T0 + rng.below(240_000);
                    clock.set_ms(t);
                }
                1 | 2 => {
                    let unit = units[rng.below(3) as usize];
                    let w = workers[rng.below(4) as usize];
                    let v = version.get(unit).copied().unwrap_or(0) + 1 + rng.below(2);
                    let ttl = Duration::from_millis(1 + rng.below(60_000));
                    if let ClaimOutcome::Granted { lease, .. } =
                        store.claim(unit, v, w, ttl).unwrap()
                    {
                        let prev = newest.get(unit).copied().unwrap_or(0);
                        assert!(
                            lease.token >= prev,
                            "seed {seed} step {step}: token went down"
                        );
                        newest.insert(unit, lease.token);
                        held.push(lease);
                    }
                }
                3 | 4 if !held.is_empty() => {
                    let lease = held.swap_remove(rng.below(held.len() as u64) as usize);
                    let body = format!("{}-{}-{}", lease.unit, lease.worker, lease.token);
                    let outcome = commit_fenced(&store, &lease, body.as_bytes());
                    let unit = units.iter().find(|u| **u == lease.unit).unwrap();
                    let newest_token = newest[unit];
                    if lease.token < newest_token {
                        assert_eq!(
                            outcome,
                            Outcome::Fenced {
                                token: lease.token,
                                newest_token
                            },
                            "seed {seed} step {step}: an older token must be fenced"
                        );
                    } else if let Outcome::Committed { .. } = outcome {
                        assert!(
                            committed.insert((lease.unit.clone(), lease.source_version)),
                            "seed {seed} step {step}: two commits of {}@{}",
                            lease.unit,
                            lease.source_version
                        );
                        version.insert(unit, lease.source_version);
                        commits_ok += 1;
                    } else {
                        assert!(
                            !outcome.is_success() || matches!(outcome, Outcome::Duplicate { .. }),
                            "seed {seed} step {step}: {outcome:?}"
                        );
                    }
                }
                _ if !held.is_empty() => {
                    let lease = &held[rng.below(held.len() as u64) as usize];
                    let _ = store.release(lease).unwrap();
                }
                _ => {}
            }
        }
        assert!(commits_ok > 0, "seed {seed}: the run must commit something");
        // The manifest agrees with what the model saw committed, and the log replays to it.
        let snap = store.snapshot().unwrap();
        for e in snap.iter().unwrap() {
            let e = e.unwrap();
            assert_eq!(Some(&e.source_version), version.get(e.unit.as_str()));
        }
        assert!(oncelake::replay(&snap).unwrap().is_clean());
    }
}

#[test]
fn run_once_runs_each_units_work_exactly_once_under_16_threads() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    const UNITS: usize = 40;
    let runs: Arc<Vec<AtomicU64>> = Arc::new((0..UNITS).map(|_| AtomicU64::new(0)).collect());
    let start = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|t| {
            let (store, runs, start) = (store.clone(), runs.clone(), start.clone());
            std::thread::spawn(move || {
                // Half the threads share one worker name: the claim alone cannot keep them apart.
                let worker = if t % 2 == 0 {
                    "shared".to_string()
                } else {
                    format!("w{t}")
                };
                start.wait();
                let mut processed = 0;
                for i in 0..UNITS {
                    let u = (i + t * 7) % UNITS; // different orders, same units
                    let unit = format!("u{u:03}");
                    let r = store
                        .run_once(&unit, 1, &worker, TTL, || {
                            runs[u].fetch_add(1, Ordering::SeqCst);
                            std::thread::yield_now();
                            Ok::<_, std::io::Error>(format!("output of {unit}").into_bytes())
                        })
                        .unwrap();
                    if r.committed_here() {
                        processed += 1;
                    }
                }
                processed
            })
        })
        .collect();
    let processed: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(processed, UNITS);
    for (u, n) in runs.iter().enumerate() {
        assert_eq!(
            n.load(Ordering::SeqCst),
            1,
            "unit {u} ran its work {n:?} times"
        );
    }
    let m = store.metrics();
    assert_eq!(
        (m.computations, m.redundant_computations),
        (UNITS as u64, 0)
    );
    assert_eq!(store.snapshot().unwrap().iter().unwrap().count(), UNITS);
}

#[test]
fn failed_work_releases_the_claim_so_another_worker_can_retry_at_once() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let r = store.run_once("u", 1, "w1", TTL, || {
        Err::<Vec<u8>, _>(std::io::Error::other("disk full"))
    });
    assert!(matches!(r, Err(RunError::Work(_))));
    let r = store
        .run_once("u", 1, "w2", TTL, || {
            Ok::<_, std::io::Error>(b"ok".to_vec())
        })
        .unwrap();
    assert!(r.committed_here(), "{r:?}");
    assert_eq!(store.metrics().computations, 2);
}

#[test]
fn run_once_whose_lease_is_taken_over_mid_work_is_fenced_and_counted_redundant() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    let mut taker = None;
    let r = store
        .run_once("u", 1, "slow", TTL, || {
            // The work outlives its lease; another worker takes the unit over meanwhile.
            clock.advance_ms(31_000);
            taker = Some(granted(store.claim("u", 1, "fast", TTL).unwrap()).0);
            Ok::<_, std::io::Error>(b"slow output".to_vec())
        })
        .unwrap();
    let taker = taker.unwrap();
    match r {
        RunOutcome::Processed(u) => assert!(
            matches!(u.outcome, Outcome::Fenced { newest_token, .. } if newest_token == taker.token)
        ),
        other => panic!("{other:?}"),
    }
    // The taker is still the holder: busy for everyone else, and its commit goes through.
    assert!(matches!(
        store.run_once("u", 1, "third", TTL, || -> Result<Vec<u8>, std::io::Error> {
            unreachable!("busy elsewhere")
        })
        .unwrap(),
        RunOutcome::BusyElsewhere { ref worker, .. } if worker == "fast"
    ));
    commits(&store, &taker, b"fast output");
    let m = store.metrics();
    assert_eq!((m.computations, m.redundant_computations), (1, 1));
}

/// `claim_many` against its model: the same script of claims, commits and clock moves, run once
/// with batched claims and once with single claims, gives equal outcomes (leases, tokens and
/// expiries included), one `ClaimGranted` log record per grant, and tokens that rise.
#[test]
fn claim_many_answers_exactly_as_that_many_single_claims() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let batched = open_relaxed(&dir.path().join("batched"), &clock);
    let single = open_relaxed(&dir.path().join("single"), &clock);
    let mut rng = Rng(7);
    let workers = ["w0", "w1", "w2"];
    let mut grants = 0u64;
    let mut highest_token = 0u64;
    for step in 0..200 {
        let n = 1 + rng.below(12) as usize;
        // Few units, so batches repeat units, hit held, extended and done ones.
        let units: Vec<(String, u64)> = (0..n)
            .map(|_| (format!("u{}", rng.below(16)), 1 + rng.below(2)))
            .collect();
        let refs: Vec<(&str, u64)> = units.iter().map(|(u, v)| (u.as_str(), *v)).collect();
        let worker = workers[rng.below(3) as usize];
        let seq_before = batched.last_seq().unwrap();
        let got = batched.claim_many(&refs, worker, TTL).unwrap();
        let want: Vec<ClaimOutcome> = refs
            .iter()
            .map(|(u, v)| single.claim(u, *v, worker, TTL).unwrap())
            .collect();
        assert_eq!(got, want, "step {step}: {refs:?} by {worker}");
        // One log record per grant (held and already-done answers write nothing).
        let step_grants = got
            .iter()
            .filter(|c| matches!(c, ClaimOutcome::Granted { .. }))
            .count() as u64;
        let snap = batched.snapshot().unwrap();
        let logged = snap
            .changes_since(seq_before)
            .unwrap()
            .map(|r| r.unwrap())
            .filter(|r| matches!(r.body, oncelake::log::RecordBody::ClaimGranted(_)))
            .count() as u64;
        assert_eq!(logged, step_grants, "step {step}");
        grants += step_grants;
        // Tokens rise: a new grant gets a token above every earlier one; an extension keeps its own.
        for c in &got {
            if let ClaimOutcome::Granted { lease, .. } = c {
                assert!(lease.token >= 1);
                highest_token = highest_token.max(lease.token);
            }
        }
        // Some granted units get committed (ending their lease); time sometimes passes.
        for c in &got {
            if let ClaimOutcome::Granted { lease, .. } = c {
                if rng.below(3) == 0 {
                    let body = format!("{}@{}", lease.unit, lease.source_version);
                    let a = commit_fenced(&batched, lease, body.as_bytes());
                    let b = commit_fenced(&single, lease, body.as_bytes());
                    assert_eq!(a, b);
                }
            }
        }
        if rng.below(4) == 0 {
            clock.advance_ms(rng.below(40_000));
        }
    }
    let m = batched.metrics();
    assert_eq!(m.claims_granted, grants);
    assert_eq!(m, {
        let mut s = single.metrics();
        // Only the grouping and latency differ: one group per batch instead of one per claim.
        s.groups = m.groups;
        s.group_units = m.group_units.clone();
        s.commit_latency_us = m.commit_latency_us.clone();
        s
    });
    assert!(highest_token >= 2, "the script granted fresh tokens");
}

#[test]
fn claim_many_checks_every_key_before_writing() {
    let (_dir, _, store) = common::on_clock(T0, open_relaxed);
    let before = store.last_seq().unwrap();
    assert!(store.claim_many(&[("ok", 1), ("", 1)], "w", TTL).is_err());
    assert!(store.claim_many(&[("ok", 1)], "", TTL).is_err());
    assert_eq!(store.last_seq().unwrap(), before, "nothing was written");
    assert_eq!(store.claim_many(&[], "w", TTL).unwrap(), vec![]);
    // A fresh token per distinct unit, rising in the batch's order.
    let got = store
        .claim_many(&[("a", 1), ("b", 1), ("a", 1)], "w", TTL)
        .unwrap();
    let tokens: Vec<u64> = got.into_iter().map(|c| granted(c).0.token).collect();
    assert!(tokens[0] < tokens[1], "{tokens:?}");
    assert_eq!(
        tokens[2], tokens[0],
        "asking again for its own unit extends its lease"
    );
}

#[test]
fn expiry_is_counted_whoever_reclaims_and_takeover_only_for_another_worker() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let store = open(dir.path(), &clock);
    let ttl = Duration::from_secs(10);
    granted(store.claim("a", 1, "w1", ttl).unwrap());
    granted(store.claim("b", 1, "w1", ttl).unwrap());
    let released = granted(store.claim("c", 1, "w1", ttl).unwrap()).0;
    assert!(store.release(&released).unwrap().is_released());
    clock.advance_ms(11_000);
    // Same worker back on its own expired lease: expired, not a takeover.
    assert!(!granted(store.claim("a", 1, "w1", ttl).unwrap()).1);
    // Another worker: expired and taken over.
    assert!(granted(store.claim("b", 1, "w2", ttl).unwrap()).1);
    // A released lease never expires.
    assert!(!granted(store.claim("c", 1, "w2", ttl).unwrap()).1);
    let m = store.metrics();
    assert_eq!((m.claims_expired, m.claims_taken_over), (2, 1));
    assert_eq!(m.claims_granted, 6);
}
