//! The batched forms of run_once and run_optimistic (`Store::run_once_many`,
//! `Store::run_optimistic_many`): every unit of a batch gets the answer, and the metrics, the
//! single-unit form would give it — already done, busy, taken over, fenced mid-work, duplicate,
//! conflict, failed work — checked against a model; whole-batch refusals change nothing; a panic
//! crashes the whole batch; and threads racing over overlapping batches compute every unit at most
//! once under a live lease (coordinated) and leave one entry per unit.

use crate::common;

use common::{granted, open_with_clock as open, SplitMix64};
use oncelake::{ClaimOutcome, Outcome, RunError, RunOutcome};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

const T0: u64 = 1_800_000_000_000;
const TTL: Duration = Duration::from_secs(30);

/// What the model expects of one unit's answer.
#[derive(Debug, PartialEq, Eq)]
enum Want {
    Committed,
    AlreadyDone,
    Busy(&'static str),
    Fenced,
    Duplicate,
    Conflict,
    WorkFailed,
}

fn classify(a: &Result<RunOutcome, RunError<std::io::Error>>) -> Want {
    match a {
        Ok(RunOutcome::AlreadyDone(_)) => Want::AlreadyDone,
        Ok(RunOutcome::BusyElsewhere { worker, .. }) => match worker.as_str() {
            "other" => Want::Busy("other"),
            w => panic!("busy by unexpected worker {w}"),
        },
        Ok(RunOutcome::Processed(u)) => match u.outcome {
            Outcome::Committed { .. } => Want::Committed,
            Outcome::Fenced { .. } => Want::Fenced,
            Outcome::Duplicate { .. } => Want::Duplicate,
            Outcome::Conflict { .. } => Want::Conflict,
            ref o => panic!("unexpected outcome {o:?}"),
        },
        Err(RunError::Work(_)) => Want::WorkFailed,
        Err(RunError::Engine(e)) => panic!("engine error {e}"),
    }
}

fn output(unit: &str, by: &str) -> Vec<u8> {
    format!("{unit} by {by}").into_bytes()
}

#[test]
fn run_once_many_answers_every_unit_as_run_once_would() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    store.put("done", 1, b"before").unwrap();
    // "held": another worker's live lease. "expired": another worker's lease that expires before
    // the batch claims, so the batch takes it over.
    granted(
        store
            .claim("expired", 1, "gone", Duration::from_secs(1))
            .unwrap(),
    );
    clock.advance_ms(2_000);
    granted(store.claim("held", 1, "other", TTL).unwrap());

    let units = [
        ("fresh", 1),
        ("done", 1),
        ("held", 1),
        ("expired", 1),
        ("taken", 1),
        ("fails", 1),
        ("last", 1),
    ];
    let mut ran = Vec::new();
    let mut taker = None;
    let answers = store
        .run_once_many(&units, "me", TTL, |i| {
            let unit = units[i].0;
            ran.push(unit);
            match unit {
                "fails" => Err(std::io::Error::other("bad input")),
                "taken" => {
                    // This unit's work outlives the lease: another worker takes it over meanwhile
                    // (every lease of the batch expires with it, but only this one is taken).
                    clock.advance_ms(31_000);
                    taker = Some(granted(store.claim("taken", 1, "other", TTL).unwrap()));
                    Ok(output(unit, "me"))
                }
                _ => Ok(output(unit, "me")),
            }
        })
        .unwrap();
    // The works ran in the order of the units, once each, for the granted units only.
    assert_eq!(ran, ["fresh", "expired", "taken", "fails", "last"]);
    let model: BTreeMap<&str, Want> = [
        ("fresh", Want::Committed),
        ("done", Want::AlreadyDone),
        ("held", Want::Busy("other")),
        ("expired", Want::Committed),
        ("taken", Want::Fenced),
        ("fails", Want::WorkFailed),
        ("last", Want::Committed),
    ]
    .into_iter()
    .collect();
    assert_eq!(answers.len(), units.len());
    for ((unit, _), a) in units.iter().zip(&answers) {
        assert_eq!(classify(a), model[unit], "{unit}: {a:?}");
    }
    // The store against the model: the committed units have this batch's output, the others none
    // (or what they had).
    let snap = store.snapshot().unwrap();
    for (unit, want) in &model {
        let e = snap.get(unit).unwrap();
        match want {
            Want::Committed => {
                assert_eq!(snap.read_object(&e.unwrap()).unwrap(), output(unit, "me"))
            }
            Want::AlreadyDone => assert_eq!(snap.read_object(&e.unwrap()).unwrap(), b"before"),
            _ => assert!(e.is_none(), "{unit} must have no entry"),
        }
    }
    assert_eq!(run_counts(&store), (5, 1, 1, 1));
    let m = store.metrics();
    // Grants: the setup's three ("gone", "other" on "held", the taker) and the batch's five.
    assert_eq!((m.claims_granted, m.claims_held), (3 + 5, 1));
    // The failed unit's lease was given back: another worker's claim is a plain grant, not a
    // takeover of an expired lease (the clock did move past it).
    match store.claim("fails", 1, "next", TTL).unwrap() {
        ClaimOutcome::Granted { took_over, .. } => assert!(!took_over, "the lease was released"),
        other => panic!("{other:?}"),
    }
    // The fenced unit's lease stays the taker's, and the taker's commit goes through.
    let taker = taker.unwrap();
    let staged = store.stage_bytes(b"taker").unwrap();
    let r = store
        .commit(oncelake::Batch::new().put_fenced("taken", 1, &staged, taker.token))
        .unwrap();
    assert!(r.applied());
}

#[test]
fn run_optimistic_many_collapses_duplicates_and_reports_each_unit() {
    let (_dir, _, store) = common::on_clock(T0, open);
    store.put("done", 1, b"before").unwrap();
    let units = [
        ("fresh", 1),
        ("done", 1),
        ("dup", 1),
        ("conflict", 1),
        ("fails", 1),
    ];
    let mut ran = Vec::new();
    let answers = store
        .run_optimistic_many(&units, |i| {
            let unit = units[i].0;
            ran.push(unit);
            match unit {
                // Another worker commits first: the same bytes, or other bytes.
                "dup" => store.put("dup", 1, &output("dup", "me")).map(|_| ()),
                "conflict" => store.put("conflict", 1, b"theirs").map(|_| ()),
                _ => Ok(()),
            }
            .unwrap();
            match unit {
                "fails" => Err(std::io::Error::other("bad input")),
                _ => Ok(output(unit, "me")),
            }
        })
        .unwrap();
    assert_eq!(ran, ["fresh", "dup", "conflict", "fails"]);
    let want = [
        Want::Committed,
        Want::AlreadyDone,
        Want::Duplicate,
        Want::Conflict,
        Want::WorkFailed,
    ];
    for ((unit, _), (a, w)) in units.iter().zip(answers.iter().zip(want)) {
        assert_eq!(classify(a), w, "{unit}: {a:?}");
    }
    let snap = store.snapshot().unwrap();
    let read = |u: &str| snap.read_object(&snap.get(u).unwrap().unwrap()).unwrap();
    assert_eq!(read("fresh"), output("fresh", "me"));
    assert_eq!(read("conflict"), b"theirs");
    assert!(snap.get("fails").unwrap().is_none());
    assert_eq!(run_counts(&store), (4, 2, 1, 0));
    let m = store.metrics();
    assert_eq!(m.claims_granted, 0, "optimistic mode claims nothing");
}

#[test]
fn a_batch_with_a_unit_twice_or_a_bad_key_is_refused_before_anything_runs() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let never = |_: usize| -> Result<Vec<u8>, std::io::Error> { panic!("no work may run") };
    for units in [vec![("a", 1), ("b", 1), ("a", 2)], vec![("a", 1), ("", 1)]] {
        let e = store.run_once_many(&units, "w", TTL, never).unwrap_err();
        assert!(!e.to_string().is_empty());
        let e = store.run_optimistic_many(&units, never).unwrap_err();
        assert!(!e.to_string().is_empty());
    }
    let e = store
        .run_once_many(&[("a", 1), ("a", 1)], "w", TTL, never)
        .unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    // Nothing was claimed or written.
    let m = store.metrics();
    assert_eq!((m.claims_granted, m.computations), (0, 0));
    assert!(matches!(
        store.claim("a", 1, "other", TTL).unwrap(),
        ClaimOutcome::Granted { .. }
    ));
    // An empty batch answers nothing.
    assert!(store
        .run_once_many(&[], "w", TTL, never)
        .unwrap()
        .is_empty());
    assert!(store.run_optimistic_many(&[], never).unwrap().is_empty());
}

/// A panic in one work is a crash of the whole batch: nothing of it is committed, every lease it
/// was granted is left to expire (a dead process cannot release), and the in-process guards are
/// freed, so the units are taken over after the TTL.
#[test]
fn a_panicking_work_crashes_the_whole_batch() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    let units = [("a", 1), ("b", 1), ("c", 1)];
    let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.run_once_many(&units, "dies", TTL, |i| {
            if i == 1 {
                panic!("simulated crash");
            }
            Ok::<_, std::io::Error>(output(units[i].0, "dies"))
        })
    }));
    assert!(crashed.is_err());
    assert_eq!(store.snapshot().unwrap().iter().unwrap().count(), 0);
    // All three leases are still held by the dead worker, also "c" whose work never ran.
    let answers = store
        .run_once_many(
            &units,
            "next",
            TTL,
            |_| -> Result<Vec<u8>, std::io::Error> { panic!("busy: must not run") },
        )
        .unwrap();
    assert!(answers
        .iter()
        .all(|a| matches!(a, Ok(RunOutcome::BusyElsewhere { worker, .. }) if worker == "dies")));
    clock.advance_ms(31_000);
    let answers = store
        .run_once_many(&units, "next", TTL, |i| {
            Ok::<_, std::io::Error>(output(units[i].0, "next"))
        })
        .unwrap();
    assert!(answers.iter().all(|a| a.as_ref().unwrap().committed_here()));
    let m = store.metrics();
    assert_eq!((m.computations, m.redundant_computations), (2 + 3, 0));
    assert_eq!(m.claims_taken_over, 3);
}

/// Racing threads over overlapping batches (and single calls) of the same units, coordinated:
/// every unit's work runs exactly once, under a lease that is live (the clock never moves), and
/// the entry is that work's output; every call is accounted for.
/// (computations, redundant computations, runs found done, runs found busy) so far.
fn run_counts(store: &oncelake::Store) -> (u64, u64, u64, u64) {
    let m = store.metrics();
    (
        m.computations,
        m.redundant_computations,
        m.runs_already_done,
        m.runs_busy,
    )
}

/// Runs `threads` threads that start together over the keys of `UNITS` units, each with its index
/// and its own generator (seeded `seed + index`); `rounds` returns how many units the thread asked
/// for. Returns how many they asked for in all.
fn race(
    threads: usize,
    seed: u64,
    rounds: impl Fn(usize, &mut SplitMix64, &[String]) -> u64 + Sync,
) -> u64 {
    const UNITS: usize = 60;
    let keys: Vec<String> = (0..UNITS).map(|i| format!("part={i:03}")).collect();
    let barrier = Barrier::new(threads);
    let asked = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (keys, barrier, asked, rounds) = (&keys, &barrier, &asked, &rounds);
            s.spawn(move || {
                let mut rng = SplitMix64(seed + t as u64);
                barrier.wait();
                let n = rounds(t, &mut rng, keys);
                asked.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            });
        }
    });
    asked.into_inner()
}

/// Racing threads over overlapping batches (and single calls) of the same units, coordinated:
/// every unit's work runs exactly once, under a lease that is live (the clock never moves), and
/// the entry is that work's output; every call is accounted for.
#[test]
fn racing_batches_compute_every_unit_once_under_a_live_lease() {
    let (_dir, _clock, store) = common::on_clock(T0, open);
    // unit → the workers whose work ran for it.
    let ran: Mutex<BTreeMap<String, Vec<String>>> = Mutex::new(BTreeMap::new());
    let asked = race(8, 1, |t, rng, keys| {
        // Threads 0 and 1 share a worker name: only the in-process guard keeps them apart.
        let worker = format!("w{}", t.max(1));
        let mut asked = 0;
        for round in 0..6 {
            // A random overlapping batch in a random order.
            let mut picked: Vec<&str> = keys
                .iter()
                .filter(|_| rng.next().is_multiple_of(3))
                .map(String::as_str)
                .collect();
            for i in (1..picked.len()).rev() {
                picked.swap(i, (rng.next() % (i as u64 + 1)) as usize);
            }
            let units: Vec<(&str, u64)> = picked.iter().map(|u| (*u, 1)).collect();
            asked += units.len() as u64;
            let work = |i: usize| {
                let unit = units[i].0;
                ran.lock()
                    .unwrap()
                    .entry(unit.to_string())
                    .or_default()
                    .push(worker.clone());
                // A yield widens the window in which another thread tries the unit.
                std::thread::yield_now();
                Ok::<_, std::io::Error>(output(unit, &worker))
            };
            let answers = if (t + round) % 4 == 0 {
                // The single form on the same units: one coordination path.
                units
                    .iter()
                    .enumerate()
                    .map(|(i, &(u, v))| store.run_once(u, v, &worker, TTL, || work(i)))
                    .collect()
            } else {
                store.run_once_many(&units, &worker, TTL, work).unwrap()
            };
            for a in answers {
                match a.unwrap() {
                    RunOutcome::Processed(u) => assert!(
                        matches!(u.outcome, Outcome::Committed { .. }),
                        "a live lease's commit is never rejected: {u:?}"
                    ),
                    RunOutcome::AlreadyDone(_) | RunOutcome::BusyElsewhere { .. } => {}
                }
            }
        }
        asked
    });
    let ran = ran.into_inner().unwrap();
    let snap = store.snapshot().unwrap();
    let entries: BTreeSet<String> = snap.iter().unwrap().map(|e| e.unwrap().unit).collect();
    assert_eq!(
        entries,
        ran.keys().cloned().collect(),
        "one entry per unit that ran"
    );
    for (unit, by) in &ran {
        assert_eq!(by.len(), 1, "{unit} computed by {by:?}");
        let e = snap.get(unit).unwrap().unwrap();
        assert_eq!(snap.read_object(&e).unwrap(), output(unit, &by[0]));
    }
    let m = store.metrics();
    assert_eq!(
        (m.computations, m.redundant_computations),
        (ran.len() as u64, 0)
    );
    assert_eq!(
        m.computations + m.runs_already_done + m.runs_busy,
        asked,
        "every unit asked for is computed, found done or found busy"
    );
    assert_eq!(m.fenced_rejections, 0);
}

/// Racing threads over overlapping optimistic batches: one entry per unit, and every computation
/// either made the entry or collapsed as a duplicate.
#[test]
fn racing_optimistic_batches_leave_one_entry_per_unit() {
    let (_dir, _clock, store) = common::on_clock(T0, open);
    let asked = race(6, 100, |_, rng, keys| {
        let mut asked = 0;
        for _ in 0..4 {
            let units: Vec<(&str, u64)> = keys
                .iter()
                .filter(|_| rng.next().is_multiple_of(2))
                .map(|k| (k.as_str(), 1))
                .collect();
            asked += units.len() as u64;
            // Deterministic work: every worker's output of a unit is the same bytes.
            let answers = store
                .run_optimistic_many(&units, |i| {
                    Ok::<_, std::io::Error>(output(units[i].0, "anyone"))
                })
                .unwrap();
            for a in answers {
                match a.unwrap() {
                    RunOutcome::Processed(u) => assert!(
                        matches!(
                            u.outcome,
                            Outcome::Committed { .. } | Outcome::Duplicate { .. }
                        ),
                        "{u:?}"
                    ),
                    RunOutcome::AlreadyDone(_) => {}
                    other => panic!("optimistic mode is never busy: {other:?}"),
                }
            }
        }
        asked
    });
    let snap = store.snapshot().unwrap();
    let mut entries = 0;
    for e in snap.iter().unwrap() {
        let e = e.unwrap();
        assert_eq!(snap.read_object(&e).unwrap(), output(&e.unit, "anyone"));
        entries += 1;
    }
    let m = store.metrics();
    assert_eq!(m.computations, entries + m.redundant_computations);
    assert_eq!(m.redundant_computations, m.duplicates_collapsed);
    assert_eq!(m.computations + m.runs_already_done, asked);
}
