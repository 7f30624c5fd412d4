//! GC racing writers (SPEC R14, I8): writers keep committing re-staged identical content — the
//! same few byte strings staged again and again, units at rising versions pointing back to
//! objects that GC just found unreferenced — while GC runs in a loop with no grace period and no
//! history retention. No committed entry may ever lose its object.

use crate::common;

use common::scratch;
use oncelake::verify::VerifyOptions;
use oncelake::{Batch, Options, Outcome, Store};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const WRITERS: usize = 4;
const UNITS_PER_WRITER: usize = 3;
const ROUNDS: u64 = 100;

/// Five distinct objects per writer, used again and again by its three units: at any time two
/// or more are unreferenced (GC removes them) and soon staged again.
fn payload(writer: usize, i: u64) -> Vec<u8> {
    format!("writer {writer} payload #{}\n", i % 5)
        .repeat(100)
        .into_bytes()
}

/// unit -> (version, content) of its last acknowledged commit.
type Model = Mutex<BTreeMap<String, (u64, Vec<u8>)>>;

/// GC with no grace and no retention, run until the writers are done; returns (runs, objects
/// removed, history rows pruned).
fn gc_until(store: &Store, done: &AtomicBool) -> (u64, u64, u64) {
    let mut totals = (0u64, 0u64, 0u64);
    while !done.load(Ordering::SeqCst) {
        let r = store.gc(common::gc_everything()).unwrap();
        totals.0 += 1;
        totals.1 += r.objects;
        totals.2 += r.history_rows_pruned;
    }
    totals
}

/// Verify, run alongside (at least once): it must never report data lost while GC and writers
/// work.
fn verify_until(store: &Store, done: &AtomicBool) {
    let mut runs = 0u64;
    while !done.load(Ordering::SeqCst) || runs == 0 {
        let v = store.verify(VerifyOptions { deep: false }).unwrap();
        assert!(v.is_intact(), "verify during the run: {v:?}");
        runs += 1;
    }
}

/// A reader holding snapshots (current and as of older seqs) while writers commit and GC runs
/// with no retention: everything a view can read must stay readable.
fn read_views_until(store: &Store, done: &AtomicBool) {
    let mut views = 0u64;
    while !done.load(Ordering::SeqCst) || views == 0 {
        let snap = store.snapshot().unwrap();
        let older = snap
            .seq()
            .checked_sub(3)
            .filter(|&s| s >= snap.history_from())
            .and_then(|s| store.snapshot_at(s).ok());
        for _ in 0..3 {
            std::thread::yield_now();
        }
        for view in std::iter::once(&snap).chain(older.as_ref()) {
            for e in view.iter().unwrap() {
                let e = e.unwrap();
                view.read_object(&e).unwrap_or_else(|err| {
                    panic!(
                        "I8: a view as of seq {} lost {}@{}: {err}",
                        view.seq(),
                        e.unit,
                        e.seq
                    )
                });
            }
        }
        views += 1;
    }
    eprintln!("{views} views read while GC ran");
}

/// Writer `w`: `ROUNDS` commits of its own units at rising versions. Each writer owns its units,
/// so right after its commit the entry is current and its object must be readable, whatever GC
/// is doing.
fn write_rounds(store: &Store, model: &Model, w: usize) {
    for round in 1..=ROUNDS {
        let units: Vec<String> = if round % 5 == 0 {
            (0..UNITS_PER_WRITER)
                .map(|u| format!("w{w}/u{u}"))
                .collect()
        } else {
            vec![format!("w{w}/u{}", round as usize % UNITS_PER_WRITER)]
        };
        let mut batch = Batch::new();
        let mut contents = Vec::new();
        for (i, unit) in units.iter().enumerate() {
            let content = payload(w, round * 2 + i as u64);
            // The writer lets go of its handle at once: only the batch pins the object on its
            // way through the commit (the hardest case for GC).
            let st = store.stage_bytes(&content).unwrap();
            batch = batch.put(unit.clone(), round, &st);
            drop(st);
            contents.push((unit.clone(), content));
        }
        let report = store.commit(batch).unwrap();
        assert!(report.applied(), "{report:?}");
        let snap = store.snapshot().unwrap();
        for ((unit, content), u) in contents.into_iter().zip(&report.units) {
            assert!(matches!(u.outcome, Outcome::Committed { .. }));
            let e = snap.get(&unit).unwrap().unwrap();
            assert_eq!(e.source_version, round);
            let bytes = snap
                .read_object(&e)
                .unwrap_or_else(|err| panic!("I8: {unit}@{round} lost its object: {err}"));
            assert_eq!(bytes, content);
            model.lock().unwrap().insert(unit, (round, content));
        }
    }
}

/// Afterwards: a final GC leaves exactly what the entries reference, intact.
fn after_a_final_gc_every_commit_is_there(store: &Store, model: Model) {
    store.gc(common::gc_everything()).unwrap();
    let v = store.verify(VerifyOptions { deep: true }).unwrap();
    assert!(v.is_clean(), "{v:?}");
    let snap = store.snapshot().unwrap();
    let model = model.into_inner().unwrap();
    assert_eq!(model.len(), WRITERS * UNITS_PER_WRITER);
    for (unit, (version, content)) in model {
        let e = snap.get(&unit).unwrap().unwrap();
        assert_eq!(e.source_version, version, "{unit}");
        assert_eq!(snap.read_object(&e).unwrap(), content, "{unit}");
    }
}

#[test]
fn gc_in_a_loop_never_removes_what_writers_commit() {
    let dir = scratch("oncelake-gc");
    let store = Store::open_with(dir.path().join("lake"), Options::default()).unwrap();
    let done = AtomicBool::new(false);
    let model: Model = Mutex::new(BTreeMap::new());
    let (runs, removed, pruned) = std::thread::scope(|s| {
        let gc = s.spawn(|| gc_until(&store, &done));
        s.spawn(|| verify_until(&store, &done));
        s.spawn(|| read_views_until(&store, &done));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (store, model) = (&store, &model);
                s.spawn(move || write_rounds(store, model, w))
            })
            .collect();
        // Stop GC before reporting a writer's panic, or the scope would wait for it forever.
        let results: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::SeqCst);
        for r in results {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
        gc.join().unwrap()
    });
    eprintln!("gc ran {runs} times during the writes: {removed} objects removed, {pruned} history rows pruned");
    assert!(runs > 1, "GC must have run alongside the writers");
    assert!(pruned > 0, "retention 0 must prune history");
    assert!(
        removed > 0,
        "GC must have removed objects that writers then staged again"
    );
    after_a_final_gc_every_commit_is_there(&store, model);
}

fn percentiles(mut us: Vec<u64>) -> String {
    if us.is_empty() {
        return "none ran".into();
    }
    us.sort_unstable();
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    format!(
        "n={} p50={}us p99={}us max={}us",
        us.len(),
        at(0.5),
        at(0.99),
        us[us.len() - 1]
    )
}

/// Commit and claim latency while GC removes 5,000 orphans (SPEC R14: GC never stalls commits).
/// The figures are printed for the record (`--nocapture`), never asserted: timings on a shared
/// machine are not a test. What is asserted is that everything committed meanwhile is there.
#[test]
fn commit_and_claim_latency_during_a_5000_orphan_gc() {
    const ORPHANS: usize = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lake")).unwrap();
    store.put("seed", 1, b"referenced").unwrap();
    // Orphans written straight into objects/ under their content hash (as rejected puts leave
    // them), so that preparing them costs no fsyncs.
    for i in 0..ORPHANS {
        let bytes = format!("orphan #{i}");
        let path = store.object_path(&oncelake::ObjectId::of(bytes.as_bytes()));
        std::fs::write(path, bytes).unwrap();
    }
    // The same operations without a GC running, for comparison.
    let (mut base_commits, mut base_claims) = (Vec::new(), Vec::new());
    for i in 0..30 {
        let unit = format!("before/{i}");
        let t = Instant::now();
        store.put(&unit, 1, unit.as_bytes()).unwrap();
        base_commits.push(t.elapsed().as_micros() as u64);
        let t = Instant::now();
        store
            .claim(
                &format!("claim-before/{i}"),
                1,
                "w",
                Duration::from_secs(60),
            )
            .unwrap();
        base_claims.push(t.elapsed().as_micros() as u64);
    }
    let gc_done = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    let (mut commits, mut claims) = (Vec::new(), Vec::new());
    let mut gc_took = Duration::ZERO;
    let mut committed = Vec::new();
    std::thread::scope(|s| {
        let gc = s.spawn(|| {
            while !started.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            let t = Instant::now();
            let r = store.gc(common::gc_everything());
            let took = t.elapsed();
            gc_done.store(true, Ordering::SeqCst);
            (r, took)
        });
        let mut i = 0u64;
        while !gc_done.load(Ordering::SeqCst) {
            let unit = format!("during/{i}");
            let t = Instant::now();
            let out = store.put(&unit, 1, unit.as_bytes()).unwrap();
            commits.push(t.elapsed().as_micros() as u64);
            assert!(out.outcome.is_success());
            committed.push(unit);
            let t = Instant::now();
            store
                .claim(&format!("claim/{i}"), 1, "w", Duration::from_secs(60))
                .unwrap();
            claims.push(t.elapsed().as_micros() as u64);
            started.store(true, Ordering::SeqCst);
            i += 1;
        }
        let (r, took) = gc.join().unwrap();
        let r = r.unwrap();
        assert_eq!(r.objects, ORPHANS as u64, "{r:?}");
        gc_took = took;
    });
    eprintln!(
        "without GC: puts (stage + commit) {}; claims {}",
        percentiles(base_commits),
        percentiles(base_claims)
    );
    eprintln!(
        "GC of {ORPHANS} orphans took {:?}; during it: puts (stage + commit) {}; claims {}",
        gc_took,
        percentiles(commits),
        percentiles(claims)
    );
    let snap = store.snapshot().unwrap();
    for unit in committed {
        let e = snap.get(&unit).unwrap().unwrap();
        assert_eq!(snap.read_object(&e).unwrap(), unit.as_bytes());
    }
    assert!(store
        .verify(VerifyOptions { deep: false })
        .unwrap()
        .is_clean());
}
