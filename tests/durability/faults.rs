//! The store under injected faults (SPEC R5, invariants I1–I8).
//!
//! * A failed sync fails the commit, the store refuses writes until reopened, and the commit is
//!   then wholly present or wholly absent.
//! * The sweep: a scripted workload touching every kind of operation (staging, single and
//!   multi-unit commits, duplicates, a conflict, a correction, a claim with a fenced commit, GC
//!   with history pruning, re-staging content GC removed) is run once for every crash point
//!   N = 1, 2, 3, … (`crash_at(N)`: operation N and all later ones fail, as at a power cut) until
//!   the workload finishes without reaching N; and again for every transient failure point
//!   (`fail_at(N)`: only operation N fails). After each run the store is dropped, reopened with
//!   the real file system, and checked against a model of what was acknowledged.

use crate::common;

use common::{faulty_options, new_faulty_store, real_options, scratch, PanickyClock};
use oncelake::fault::FaultPlan;
use oncelake::gc::GcOptions;
use oncelake::verify::VerifyOptions;
use oncelake::{
    Batch, ClaimOutcome, Durability, Error, Intent, ManualClock, Outcome, Snapshot, Staged, Store,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const T0: u64 = 1_700_000_000_000;

// ---------------------------------------------------------------------------------------------
// (a) R5: a failed sync is never acknowledged and fails the store until it is reopened.

#[test]
fn a_failed_sync_fails_the_commit_and_the_store_until_reopened() {
    let (_dir, path, clock, plan, store) = new_faulty_store(T0);
    assert_eq!(
        store.put("a", 1, b"a1").unwrap().outcome.name(),
        "committed"
    );
    let b = store.stage_bytes(b"b1").unwrap();
    let c = store.stage_bytes(b"c1").unwrap();
    let spare = store.stage_bytes(b"d1").unwrap();

    plan.fail_syncs(true);
    let r = store.commit(Batch::new().put("b", 1, &b).put("c", 1, &c));
    assert!(matches!(r, Err(Error::Failed { .. })), "{r:?}");
    assert!(store.failure().is_some());
    // Writes are refused even once the disk works again, until the store is reopened.
    plan.fail_syncs(false);
    assert!(matches!(
        store.commit(Batch::new().put("d", 1, &spare)),
        Err(Error::Failed { .. })
    ));
    assert!(matches!(
        store.put("d", 1, b"d1"),
        Err(Error::Failed { .. })
    ));
    assert!(matches!(
        store.claim("d", 1, "w", Duration::from_secs(5)),
        Err(Error::Failed { .. })
    ));
    assert!(matches!(
        store.gc(GcOptions::default()),
        Err(Error::Failed { .. })
    ));
    drop((b, c, spare));
    drop(store);

    let store = Store::open_with(&path, real_options(&clock)).unwrap();
    let a = store
        .get("a")
        .unwrap()
        .expect("the acknowledged commit survives");
    assert_eq!(store.snapshot().unwrap().read_object(&a).unwrap(), b"a1");
    let (gb, gc) = (store.get("b").unwrap(), store.get("c").unwrap());
    assert_eq!(
        gb.is_some(),
        gc.is_some(),
        "the unacknowledged commit is wholly present or wholly absent"
    );
    assert_eq!(store.get("d").unwrap(), None);
    let v = store.verify(VerifyOptions { deep: true }).unwrap();
    assert!(v.is_intact(), "{v:?}");
    assert_eq!(
        store.put("d", 1, b"d1").unwrap().outcome.name(),
        "committed"
    );
}

// ---------------------------------------------------------------------------------------------
// (b) The sweep.

/// What a unit must look like: version, revision, bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Want {
    version: u64,
    revision: u32,
    content: Vec<u8>,
}

#[derive(Default, Debug)]
struct Model {
    /// Every unit's state as of the last acknowledged commit.
    acked: BTreeMap<String, Want>,
    /// The one commit that failed without an answer: (unit, version, content) of each item.
    pending: Vec<(String, u64, Vec<u8>)>,
    /// An acknowledged lease not yet ended by an acknowledged commit: (unit, worker).
    lease: Option<(String, String)>,
    /// The acknowledged seqs, in order: they must rise.
    seqs: Vec<u64>,
    /// Whether every step so far succeeded (only then are the scripted outcomes asserted).
    clean: bool,
    /// Relaxed durability: the acknowledged state after every commit that wrote something
    /// (index 0: empty), and the index of the newest one known durable (a GC's prune syncs).
    states: Vec<BTreeMap<String, Want>>,
    floor: usize,
}

struct Item {
    unit: &'static str,
    version: u64,
    content: &'static [u8],
    intent: Intent,
    fenced: bool,
    /// The outcome expected when no fault happened before.
    expect: &'static str,
}

fn put(unit: &'static str, version: u64, content: &'static [u8], expect: &'static str) -> Item {
    Item {
        unit,
        version,
        content,
        intent: Intent::Put,
        fenced: false,
        expect,
    }
}

enum Step {
    Commit(Vec<Item>),
    Claim(&'static str, u64, &'static str),
    Gc,
}

fn script() -> Vec<Step> {
    use Step::*;
    vec![
        Commit(vec![put("a", 1, b"a1", "committed")]),
        Commit(vec![
            put("b", 1, b"b1", "committed"),
            put("c", 1, b"c1", "committed"),
            put("d", 1, b"d1", "committed"),
        ]),
        // A retry: the same bytes staged again collapse into a duplicate.
        Commit(vec![put("a", 1, b"a1", "duplicate")]),
        Commit(vec![put("a", 2, b"a2", "committed")]),
        Commit(vec![Item {
            intent: Intent::Correct,
            ..put("b", 1, b"b1-fixed", "committed")
        }]),
        Claim("e", 1, "w1"),
        Commit(vec![
            Item {
                fenced: true,
                ..put("e", 1, b"e1", "committed")
            },
            put("a", 3, b"a3", "committed"),
            put("c", 1, b"c1", "duplicate"),
        ]),
        // Same version, different bytes: rejected, and the whole batch with it.
        Commit(vec![
            put("c", 1, b"c-other", "conflict"),
            put("f", 1, b"f1", "aborted"),
        ]),
        Gc,
        // Content GC just removed (a1 of the pruned history) is staged and published again.
        Commit(vec![put("f", 1, b"a1", "committed")]),
        Commit(vec![
            put("a", 4, b"a2", "committed"),
            put("d", 2, b"d2", "committed"),
        ]),
        Gc,
    ]
}

/// Runs the script; returns when it is done or the store has failed.
fn run_workload(store: &Store, clock: &ManualClock, model: &mut Model) {
    let mut lease_token = None;
    for step in script() {
        clock.advance_ms(1_000);
        match step {
            Step::Commit(items) => {
                let mut staged: Vec<Staged> = Vec::new();
                let mut stage_failed = false;
                for it in &items {
                    match store.stage_bytes(it.content) {
                        Ok(s) => staged.push(s),
                        Err(_) => {
                            stage_failed = true;
                            break;
                        }
                    }
                }
                if stage_failed {
                    model.clean = false;
                } else {
                    let mut batch = Batch::new();
                    for (it, s) in items.iter().zip(&staged) {
                        let token = if it.fenced { lease_token } else { None };
                        batch = batch.item(it.unit.into(), it.version, s, token, it.intent);
                    }
                    match store.commit(batch) {
                        Ok(report) => {
                            if let Some(seq) = report.seq {
                                model.seqs.push(seq);
                            }
                            for (it, u) in items.iter().zip(&report.units) {
                                if model.clean {
                                    assert_eq!(u.outcome.name(), it.expect, "{}", it.unit);
                                }
                                if let Outcome::Committed { revision, .. } = u.outcome {
                                    model.acked.insert(
                                        it.unit.to_string(),
                                        Want {
                                            version: it.version,
                                            revision,
                                            content: it.content.to_vec(),
                                        },
                                    );
                                    if it.fenced {
                                        model.lease = None;
                                    }
                                }
                            }
                            if report.seq.is_some() {
                                model.states.push(model.acked.clone());
                            }
                        }
                        Err(_) => {
                            model.clean = false;
                            model.pending = items
                                .iter()
                                .map(|it| (it.unit.to_string(), it.version, it.content.to_vec()))
                                .collect();
                        }
                    }
                }
            }
            Step::Claim(unit, version, worker) => {
                match store.claim(unit, version, worker, Duration::from_secs(3600)) {
                    Ok(ClaimOutcome::Granted { lease, .. }) => {
                        lease_token = Some(lease.token);
                        model.lease = Some((unit.to_string(), worker.to_string()));
                    }
                    Ok(other) => panic!("unexpected claim outcome {other:?}"),
                    Err(_) => model.clean = false,
                }
            }
            Step::Gc => {
                let r = store.gc(GcOptions {
                    dry_run: false,
                    grace: Duration::ZERO,
                    retain: Duration::ZERO,
                });
                match r {
                    Ok(r) => {
                        if model.clean {
                            assert!(r.objects > 0 && r.history_rows_pruned > 0, "{r:?}");
                        }
                        // The prune is always synced, so everything acknowledged is durable now.
                        model.floor = model.states.len() - 1;
                    }
                    Err(_) => model.clean = false,
                }
            }
        }
        if store.failure().is_some() {
            return;
        }
    }
}

/// Reopens with the real file system and checks I1–I8 against the model. Returns whether the
/// database needed crash recovery.
fn check_after_reopen(path: &Path, clock: &ManualClock, model: &Model, label: &str) -> bool {
    let needed_repair = matches!(
        redb::Builder::new().open_read_only(path.join(oncelake::DB_FILE)),
        Err(redb::DatabaseError::RepairAborted)
    );
    let store = Store::open_with(path, real_options(clock))
        .unwrap_or_else(|e| panic!("{label}: reopen failed: {e}"));
    let snap = store.snapshot().unwrap();
    let (changes, pending_applied) = pending_commit(&snap, model, label);
    check_units(&snap, model, &changes, pending_applied, label);

    // I2 for every kept entry (history included), I7 replay, I5 along the log; I8: GC never
    // removed a referenced object. Orphans are allowed: a crash may leave some behind.
    let v = store.verify(VerifyOptions { deep: true }).unwrap();
    assert!(v.is_intact(), "{label}: {v:?}");
    drop(snap);
    check_still_usable(&store, model, label);
    needed_repair
}

/// The units the unacknowledged commit would change.
type Pending<'m> = Vec<&'m (String, u64, Vec<u8>)>;

/// What the unacknowledged commit would change, and whether it is visible (I3: wholly or not at
/// all; a unit it left alone shows its acknowledged state).
fn pending_commit<'m>(snap: &Snapshot, model: &'m Model, label: &str) -> (Pending<'m>, bool) {
    // Which units the unacknowledged commit would change, and whether it is visible.
    let changes: Vec<&(String, u64, Vec<u8>)> = model
        .pending
        .iter()
        .filter(|(u, v, c)| {
            model
                .acked
                .get(u)
                .is_none_or(|w| w.version != *v || w.content != *c)
        })
        .collect();
    let mut visible = Vec::new();
    for (unit, version, content) in &changes {
        let e = snap.get(unit).unwrap();
        let applied = e.as_ref().is_some_and(|e| {
            e.source_version == *version && snap.read_object(e).unwrap() == *content
        });
        if !applied {
            let want = model.acked.get(unit);
            match (&e, want) {
                (None, None) => {}
                (Some(e), Some(w)) => assert_eq!(
                    (e.source_version, snap.read_object(e).unwrap()),
                    (w.version, w.content.clone()),
                    "{label}: unit {unit} is neither its acknowledged nor its pending state"
                ),
                _ => panic!("{label}: unit {unit} is {e:?}, acknowledged {want:?}"),
            }
        }
        visible.push(applied);
    }
    // I3: an unacknowledged commit is wholly present or wholly absent.
    assert!(
        visible.iter().all(|&v| v) || visible.iter().all(|&v| !v),
        "{label}: the unacknowledged commit is partly visible: {changes:?} -> {visible:?}"
    );

    (changes, visible.first().copied().unwrap_or(false))
}

/// I1, I3, I5: every unit shows its acknowledged entry, or the pending commit's when that is
/// visible, and nothing else is there; acknowledged seqs rose and are within the log.
fn check_units(
    snap: &Snapshot,
    model: &Model,
    changes: &[&(String, u64, Vec<u8>)],
    pending_applied: bool,
    label: &str,
) {
    let mut expected_units = 0;
    let mut units: Vec<&String> = model.acked.keys().collect();
    for (u, _, _) in changes {
        if !model.acked.contains_key(u) {
            units.push(u);
        }
    }
    for unit in units {
        let e = snap.get(unit).unwrap();
        let pending = changes.iter().find(|(u, _, _)| u == unit);
        match (pending, pending_applied) {
            (Some((_, version, content)), true) => {
                let e = e.unwrap_or_else(|| panic!("{label}: {unit} lost"));
                assert_eq!(e.source_version, *version, "{label}: {unit}");
                assert_eq!(snap.read_object(&e).unwrap(), *content, "{label}: {unit}");
                expected_units += 1;
            }
            _ => {
                let Some(w) = model.acked.get(unit) else {
                    assert_eq!(e, None, "{label}: {unit}");
                    continue;
                };
                let e = e.unwrap_or_else(|| panic!("{label}: acknowledged {unit} lost"));
                assert_eq!(
                    (e.source_version, e.revision),
                    (w.version, w.revision),
                    "{label}: {unit}"
                );
                // I2: the object exists with the recorded size and CRC32 (read_object checks).
                assert_eq!(snap.read_object(&e).unwrap(), w.content, "{label}: {unit}");
                expected_units += 1;
            }
        }
    }
    // Nothing else is visible.
    let all: Vec<_> = snap.iter().unwrap().map(|e| e.unwrap().unit).collect();
    assert_eq!(
        all.len(),
        expected_units,
        "{label}: unexpected units {all:?}"
    );
    // Acknowledged seqs rose and are all within the log.
    assert!(model.seqs.windows(2).all(|w| w[0] < w[1]), "{label}");
    if let Some(&last) = model.seqs.last() {
        assert!(
            snap.seq() >= last,
            "{label}: seq {} < acked {last}",
            snap.seq()
        );
    }
}

/// After the checks: an acknowledged live lease still holds its unit, the store takes writes, and
/// a GC leaves no orphans behind.
fn check_still_usable(store: &Store, model: &Model, label: &str) {
    // Claims are durable: an acknowledged live lease still holds the unit.
    if let Some((unit, worker)) = &model.lease {
        let e_visible = store.get(unit).unwrap().is_some();
        match store.claim(unit, 1, "w2", Duration::from_secs(60)).unwrap() {
            ClaimOutcome::Held { worker: w, .. } => assert_eq!(&w, worker, "{label}"),
            ClaimOutcome::AlreadyDone(_) => assert!(e_visible, "{label}"),
            other => panic!("{label}: an acknowledged lease was lost: {other:?}"),
        }
    }
    // The reopened store takes writes, and a GC leaves no orphans behind.
    assert!(store
        .put("after/reopen", 1, label.as_bytes())
        .unwrap()
        .outcome
        .is_success());
    store
        .gc(GcOptions {
            dry_run: false,
            grace: Duration::ZERO,
            retain: Duration::from_secs(365 * 86400),
        })
        .unwrap();
    let v = store.verify(VerifyOptions { deep: false }).unwrap();
    assert!(v.is_clean(), "{label}: {v:?}");
}

/// Relaxed mode: the reopened store must show exactly the acknowledged state after some commit
/// no older than the last sync (or that state plus the whole unacknowledged commit): commits are
/// lost only newest first and never torn. And nothing it references may be missing (I2, I8).
fn check_relaxed_after_reopen(path: &Path, clock: &ManualClock, model: &Model, label: &str) {
    type State = BTreeMap<String, (u64, Vec<u8>)>;
    let plain = |m: &BTreeMap<String, Want>| -> State {
        m.iter()
            .map(|(u, w)| (u.clone(), (w.version, w.content.clone())))
            .collect()
    };
    let mut candidates: Vec<State> = model.states[model.floor..].iter().map(plain).collect();
    if !model.pending.is_empty() {
        let mut with = plain(
            model
                .states
                .last()
                .expect("states start with the empty one"),
        );
        for (u, v, c) in &model.pending {
            if with.get(u).is_none_or(|(cv, _)| cv <= v) {
                with.insert(u.clone(), (*v, c.clone()));
            }
        }
        candidates.push(with);
    }
    let store = Store::open_with(path, real_options(clock))
        .unwrap_or_else(|e| panic!("{label}: reopen failed: {e}"));
    let snap = store.snapshot().unwrap();
    let actual: State = snap
        .iter()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = snap
                .read_object(&e)
                .unwrap_or_else(|err| panic!("{label}: {}: {err}", e.unit));
            (e.unit, (e.source_version, bytes))
        })
        .collect();
    assert!(
        candidates.contains(&actual),
        "{label}: the store shows {actual:?}, not an acknowledged state since the last sync (floor {})",
        model.floor
    );
    drop(snap);
    let v = store.verify(VerifyOptions { deep: true }).unwrap();
    assert!(v.is_intact(), "{label}: {v:?}");
    assert!(store
        .put("after/reopen", 1, label.as_bytes())
        .unwrap()
        .outcome
        .is_success());
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Crash,
    Fail,
    /// A crash that also loses every write not yet synced.
    PowerCut,
    /// A power cut with relaxed durability: acknowledged commits since the last sync may be lost,
    /// but only as a whole and only newest first.
    RelaxedPowerCut,
}

/// One run with the fault at operation `n`; returns whether the fault point was reached.
fn run_once(n: u64, fault: Fault, repairs: &AtomicU64) -> bool {
    let dir = scratch("oncelake-faults");
    let path = dir.path().join("lake");
    let clock = ManualClock::new(T0);
    drop(Store::open_with(&path, real_options(&clock)).unwrap());

    let plan = FaultPlan::new();
    match fault {
        Fault::Crash => plan.crash_at(n),
        Fault::Fail => plan.fail_at(n),
        Fault::PowerCut | Fault::RelaxedPowerCut => {
            plan.crash_at(n);
            plan.lose_unsynced_writes(true);
        }
    }
    let mut model = Model {
        clean: true,
        states: vec![BTreeMap::new()],
        ..Model::default()
    };
    let mut options = faulty_options(&plan, &clock);
    if let Fault::RelaxedPowerCut = fault {
        // Never synced by time (the manual clock moves 1 s a step): only GC and close sync.
        options.durability = Durability::Relaxed {
            max_delay: Duration::from_secs(3600),
        };
    }
    if let Ok(store) = Store::open_with(&path, options) {
        run_workload(&store, &clock, &mut model);
    }
    let reached = plan.ops() >= n;
    let label = format!("{fault:?} at op {n}");
    if let Fault::PowerCut | Fault::RelaxedPowerCut = fault {
        plan.apply_power_loss(&path.join(oncelake::DB_FILE))
            .unwrap_or_else(|e| panic!("{label}: applying the power loss: {e}"));
    }
    if let Fault::RelaxedPowerCut = fault {
        check_relaxed_after_reopen(&path, &clock, &model, &label);
    } else if check_after_reopen(&path, &clock, &model, &label) {
        repairs.fetch_add(1, Ordering::Relaxed);
    }
    if !reached {
        assert!(
            model.clean,
            "{label}: the fault-free run must follow the script"
        );
    }
    reached
}

/// Sweeps every fault point; two threads take alternate points (the runs are independent).
fn sweep(fault: Fault) -> (u64, u64) {
    let repairs = AtomicU64::new(0);
    let done_at = AtomicU64::new(u64::MAX);
    const THREADS: u64 = 2;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (repairs, done_at) = (&repairs, &done_at);
            s.spawn(move || {
                let mut n = 1 + t;
                while n < done_at.load(Ordering::SeqCst) {
                    if !run_once(n, fault, repairs) {
                        done_at.fetch_min(n, Ordering::SeqCst);
                    }
                    n += THREADS;
                }
            });
        }
    });
    let points = done_at.load(Ordering::SeqCst) - 1;
    (points, repairs.load(Ordering::Relaxed))
}

/// Runs the sweep of `fault` at every operation of the workload, says what it found, and checks
/// that it covered the workload; returns how many reopens needed redb's repair.
fn sweep_every_operation(fault: Fault, what: &str) -> u64 {
    let (points, repairs) = sweep(fault);
    eprintln!("{what} sweep: {points} points, all passed; {repairs} reopens needed redb repair");
    assert!(points > 50, "{what}: the workload has {points} operations");
    repairs
}

#[test]
fn crash_at_every_operation() {
    let repairs = sweep_every_operation(Fault::Crash, "crash");
    assert!(repairs > 0, "no crash left the database needing repair");
}

#[test]
fn fail_at_every_operation() {
    sweep_every_operation(Fault::Fail, "failure");
}

#[test]
fn power_cut_at_every_operation() {
    sweep_every_operation(Fault::PowerCut, "power-cut (unsynced writes lost)");
}

/// A failed directory sync after publishing leaves a link that may not survive a power cut; the
/// next publisher of the same content must make it durable before committing on it (I2).
#[test]
fn restaging_after_a_failed_directory_sync_makes_the_entry_durable() {
    let dir = scratch("oncelake-faults");
    let path = dir.path().join("lake");
    let clock = ManualClock::new(T0);
    let (plan, store) = common::created_then_losing_unsynced(&path, &clock);

    // Staging a small object: create, write, fsync, chmod, link, directory sync, remove.
    plan.fail_at(plan.ops() + 6);
    let err = store.stage_bytes(b"payload").unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert!(
        store.failure().is_none(),
        "a staging error does not fail the store"
    );

    let again = store.stage_bytes(b"payload").unwrap();
    assert_eq!(
        store
            .commit(Batch::new().put("u", 1, &again))
            .unwrap()
            .units[0]
            .outcome
            .name(),
        "committed"
    );
    drop(again);
    drop(store);
    plan.apply_power_loss(&path.join(oncelake::DB_FILE))
        .unwrap();

    let store = Store::open_with(&path, real_options(&clock)).unwrap();
    let e = store
        .get("u")
        .unwrap()
        .expect("the acknowledged commit survives");
    assert_eq!(
        store.snapshot().unwrap().read_object(&e).unwrap(),
        b"payload"
    );
}

#[test]
fn relaxed_power_cut_at_every_operation() {
    let (points, _) = sweep(Fault::RelaxedPowerCut);
    eprintln!(
        "relaxed power-cut sweep: {points} crash points, all passed (lost commits only newest first, none torn, I2/I7 intact)"
    );
    assert!(points > 50, "the workload has {points} operations");
}

// ---------------------------------------------------------------------------------------------
// (c) I10: a panic anywhere in a group's decision or write fails the store before any other
// group is decided; nothing answered afterwards comes from what the panicked leader left.

/// Where the round's panic comes from.
#[derive(Clone, Copy, Debug)]
enum PanicFrom {
    /// A file operation of the durable path (staging, the write-ahead append, the apply).
    FileOp,
    /// The caller's clock, in a relaxed store (every group applied in place).
    RelaxedClock,
}

/// One acknowledged answer: unit, version, content, and the seq it named.
type Acked = (String, u64, Vec<u8>, u64);

/// Eight threads put overlapping units (each put retried once, so duplicates are answered too)
/// until their first error, while a panic is armed at `at`; returns every acknowledged answer.
fn panic_round(path: &Path, from: PanicFrom, at: u64) -> Vec<Acked> {
    let clock = ManualClock::new(T0);
    drop(Store::open_with(path, real_options(&clock)).unwrap());
    let plan = FaultPlan::new();
    let panicky = PanickyClock::new(&clock);
    let mut options = faulty_options(&plan, &clock);
    options.clock = panicky.clone();
    if let PanicFrom::RelaxedClock = from {
        options.durability = common::relaxed();
    }
    let store = Store::open_with(path, options).unwrap();
    match from {
        PanicFrom::FileOp => plan.panic_at(plan.ops() + at),
        PanicFrom::RelaxedClock => panicky.panic_in(at),
    }
    let acked = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (store, acked) = (&store, &acked);
            s.spawn(move || {
                for i in 0..40u64 {
                    let unit = format!("u{}", (t * 7 + i) % 12);
                    let version = 1 + (t + i) / 3;
                    let content = format!("{unit}@{version}").into_bytes();
                    for _retry in 0..2 {
                        // A panic in the caller's own thread (staging) reaches the caller; the
                        // store must be failed all the same.
                        let put = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            store.put(&unit, version, &content)
                        }));
                        match put.unwrap_or_else(|_| Err(Error::LeaderPanicked)) {
                            Ok(u) => {
                                let seq = match u.outcome {
                                    Outcome::Committed { seq, .. } => seq,
                                    Outcome::Duplicate { seq } => seq,
                                    _ => continue,
                                };
                                let a = (unit.clone(), version, content.clone(), seq);
                                acked.lock().unwrap().push(a);
                            }
                            Err(_) => return,
                        }
                    }
                }
            });
        }
    });
    assert!(
        store.failure().is_some(),
        "{from:?} at {at}: the armed panic must have failed the store"
    );
    assert!(
        matches!(store.put("after", 1, b"x"), Err(Error::Failed { .. })),
        "a failed store refuses writes"
    );
    drop(store);
    acked.into_inner().unwrap()
}

/// After the round the store reopens, is intact, and holds every acknowledged answer as of the
/// seq it named (a relaxed store may have lost its unsynced tail: only answers it still covers).
fn check_panic_round(path: &Path, from: PanicFrom, at: u64, acked: &[Acked]) {
    let clock = ManualClock::new(T0);
    let store = Store::open_with(path, real_options(&clock))
        .unwrap_or_else(|e| panic!("{from:?} at {at}: the store no longer opens: {e}"));
    let v = store.verify(VerifyOptions { deep: true }).unwrap();
    assert!(v.is_intact(), "{from:?} at {at}: {v:?}");
    let last = store.last_seq().unwrap();
    for (unit, version, content, seq) in acked {
        if matches!(from, PanicFrom::RelaxedClock) && *seq > last {
            continue;
        }
        let snap = store.snapshot_at(*seq).unwrap();
        let e = snap.get(unit).unwrap().unwrap_or_else(|| {
            panic!("{from:?} at {at}: {unit}@{version} was answered at seq {seq}, the store has no entry then (last seq {last})")
        });
        assert_eq!(
            (e.source_version, snap.read_object(&e).unwrap()),
            (*version, content.clone()),
            "{from:?} at {at}: {unit} as of seq {seq}"
        );
    }
}

#[test]
fn a_panic_fails_the_store_before_another_group_is_decided() {
    for (from, points) in [
        (PanicFrom::FileOp, [5u64, 9, 14, 20, 27, 35, 44, 60]),
        (PanicFrom::RelaxedClock, [2u64, 3, 5, 8, 12, 17, 23, 30]),
    ] {
        for at in points {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("lake");
            let acked = panic_round(&path, from, at);
            check_panic_round(&path, from, at, &acked);
        }
    }
}

/// A panic of the caller's clock inside the backlog's apply (a reader that waits for the backlog
/// applies it) fails the store and leaves nobody waiting: the reader gets an error, and every
/// later flush, verify, GC and the close return instead of hanging on a batch marked as being
/// applied forever.
#[test]
fn a_panic_while_applying_the_backlog_fails_the_store_and_hangs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let clock = ManualClock::new(T0);
    let panicky = PanickyClock::new(&clock);
    let options = oncelake::Options {
        clock: panicky.clone(),
        // The groups wait in the backlog until a reader needs them.
        background_apply: false,
        apply_min_bytes: usize::MAX,
        ..oncelake::Options::default()
    };
    let store = Store::open_with(&path, options).unwrap();
    for i in 0..5u64 {
        store.put(&format!("u{i}"), 1, b"x").unwrap();
    }
    panicky.panic_in(1);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Verify reads the B-trees, so it applies the backlog first: the clock panics there.
        let verify = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.verify(VerifyOptions::default())
        }));
        assert!(panicky.disarm(), "the armed reading came while applying");
        let failed = store.failure();
        let flush = store.flush();
        let gc = store.gc(oncelake::gc::GcOptions::default());
        let again = store.verify(VerifyOptions::default());
        drop(store);
        tx.send((
            verify.map(|v| v.is_ok()),
            failed,
            flush.is_err(),
            gc.is_err(),
            again.is_err(),
        ))
        .unwrap();
    });
    let (verify, failed, flush_err, gc_err, again_err) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a flush, GC, verify or close hung after a panic while applying the backlog");
    assert_eq!(
        verify.ok(),
        Some(false),
        "verify answers an error, it does not unwind"
    );
    assert!(
        failed.as_deref().is_some_and(|c| c.contains("panicked")),
        "{failed:?}"
    );
    assert!(flush_err && gc_err && again_err);
    // Every acknowledged commit is durable in the write-ahead log: the reopen has them all.
    let store = Store::open_with(&path, real_options(&clock)).unwrap();
    for i in 0..5u64 {
        assert!(store.get(&format!("u{i}")).unwrap().is_some(), "u{i}");
    }
}
