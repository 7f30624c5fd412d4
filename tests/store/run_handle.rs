//! The handle form of run_once (`Store::begin_run` → `Run::commit` / `Run::abandon` / drop), which
//! the Python binding's `run_once` context manager is built on: the same answers as run_once, the
//! lease given back on every path that records nothing, and exactly one computation per unit under
//! many threads.

use crate::common;

use common::{granted, open_with_clock as open};
use oncelake::{Begin, Outcome, Run};
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

const T0: u64 = 1_800_000_000_000;
const TTL: Duration = Duration::from_secs(30);

fn claimed(b: Begin) -> Run {
    match b {
        Begin::Claimed(run) => run,
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[test]
fn a_claimed_run_is_busy_for_others_commits_once_and_is_then_already_done() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let run = claimed(store.begin_run("u", 3, "w1", TTL).unwrap());
    assert_eq!((run.unit(), run.source_version()), ("u", 3));
    assert_eq!(run.lease().expires_at_ms, T0 + 30_000);
    // Another worker, and the same worker name from another handle of this process, are busy.
    for w in ["w2", "w1"] {
        match store.begin_run("u", 3, w, TTL).unwrap() {
            Begin::Busy { worker, until_ms } => {
                assert_eq!((worker.as_str(), until_ms), ("w1", T0 + 30_000))
            }
            other => panic!("{w}: expected busy, got {other:?}"),
        }
    }
    let out = run.commit(b"rows".to_vec()).unwrap();
    assert!(
        matches!(out.outcome, Outcome::Committed { revision: 0, .. }),
        "{out:?}"
    );
    match store.begin_run("u", 3, "w2", TTL).unwrap() {
        Begin::AlreadyDone(e) => assert_eq!((e.source_version, e.object.size), (3, 4)),
        other => panic!("expected already done, got {other:?}"),
    }
    // A newer source version is work again.
    let run = claimed(store.begin_run("u", 4, "w2", TTL).unwrap());
    run.commit(b"rows v4".to_vec()).unwrap();
    let m = store.metrics();
    assert_eq!((m.computations, m.redundant_computations), (2, 0));
    assert_eq!(store.get("u").unwrap().unwrap().source_version, 4);
}

#[test]
fn abandon_and_drop_give_the_lease_back_and_record_nothing() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let run = claimed(store.begin_run("u", 1, "w1", TTL).unwrap());
    assert!(run.abandon().unwrap(), "the lease was still the run's");
    assert_eq!(store.get("u").unwrap(), None);
    // No clock moved: the unit is free at once only because the lease was released.
    let run = claimed(store.begin_run("u", 1, "w2", TTL).unwrap());
    drop(run);
    assert_eq!(store.get("u").unwrap(), None);
    let run = claimed(store.begin_run("u", 1, "w3", TTL).unwrap());
    run.commit(b"x".to_vec()).unwrap();
    let m = store.metrics();
    assert_eq!((m.computations, m.redundant_computations), (3, 0));
}

#[test]
fn a_run_whose_lease_is_taken_over_is_fenced_counted_redundant_and_renew_reports_the_loss() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    let mut run = claimed(store.begin_run("u", 1, "slow", TTL).unwrap());
    clock.advance_ms(10_000);
    match run.renew(TTL).unwrap() {
        oncelake::RenewOutcome::Renewed(l) => assert_eq!(l.expires_at_ms, T0 + 40_000),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        run.lease().expires_at_ms,
        T0 + 40_000,
        "the handle keeps the renewed lease"
    );
    clock.advance_ms(31_000);
    let taker = granted(store.claim("u", 1, "fast", TTL).unwrap());
    assert!(matches!(
        run.renew(TTL).unwrap(),
        oncelake::RenewOutcome::Lost { newest_token } if newest_token == taker.token
    ));
    let out = run.commit(b"slow output".to_vec()).unwrap();
    assert!(
        matches!(out.outcome, Outcome::Fenced { newest_token, .. } if newest_token == taker.token),
        "{out:?}"
    );
    // The taker still holds the unit: the fenced run gave back nothing of the taker's.
    assert!(
        matches!(store.begin_run("u", 1, "third", TTL).unwrap(), Begin::Busy { ref worker, .. } if worker == "fast")
    );
    let m = store.metrics();
    assert_eq!((m.computations, m.redundant_computations), (1, 1));
    assert_eq!(store.get("u").unwrap(), None);
}

#[test]
fn a_panic_while_running_leaves_the_lease_to_expire_like_a_crash() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    let s2 = store.clone();
    let r = std::thread::spawn(move || {
        let _run = claimed(s2.begin_run("u", 1, "w1", TTL).unwrap());
        panic!("work crashed");
    })
    .join();
    assert!(r.is_err());
    // The in-process slot is free again, but the lease is live: another worker is busy until it
    // expires, and then takes over.
    assert!(
        matches!(store.begin_run("u", 1, "w2", TTL).unwrap(), Begin::Busy { ref worker, .. } if worker == "w1")
    );
    clock.advance_ms(30_000);
    claimed(store.begin_run("u", 1, "w2", TTL).unwrap())
        .commit(b"x".to_vec())
        .unwrap();
}

#[test]
fn sixteen_threads_compute_each_unit_once_and_the_manifest_matches_the_model() {
    let (_dir, _, store) = common::on_clock(T0, open);
    const UNITS: u64 = 40;
    let barrier = Arc::new(Barrier::new(16));
    let computed: Arc<Mutex<BTreeMap<String, Vec<usize>>>> = Arc::default();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let (store, barrier, computed) = (store.clone(), barrier.clone(), computed.clone());
            std::thread::spawn(move || {
                barrier.wait();
                // Half the threads share a worker name, so in-process exclusion is exercised too.
                let worker = format!("w{}", t % 8);
                for i in 0..UNITS {
                    let unit = format!("u{:03}", (i + t as u64 * 7) % UNITS);
                    if let Begin::Claimed(run) = store.begin_run(&unit, 1, &worker, TTL).unwrap() {
                        computed
                            .lock()
                            .unwrap()
                            .entry(unit.clone())
                            .or_default()
                            .push(t);
                        let out = run.commit(format!("{unit} by {t}").into_bytes()).unwrap();
                        assert!(matches!(out.outcome, Outcome::Committed { .. }), "{out:?}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let computed = computed.lock().unwrap();
    assert_eq!(computed.len() as u64, UNITS, "every unit computed");
    let snap = store.snapshot().unwrap();
    for (unit, by) in computed.iter() {
        assert_eq!(by.len(), 1, "{unit} computed by {by:?}");
        let e = snap.get(unit).unwrap().unwrap();
        assert_eq!(
            snap.read_object(&e).unwrap(),
            format!("{unit} by {}", by[0]).into_bytes()
        );
    }
    assert_eq!(snap.iter().unwrap().count() as u64, UNITS);
    let m = store.metrics();
    assert_eq!((m.computations, m.redundant_computations), (UNITS, 0));
}
