//! Garbage collection (SPEC R14): what it removes, what it keeps, dry runs, retention.

use crate::hooked_vfs::{Hook, Hooked};
use oncelake::gc::GcOptions;
use oncelake::verify::VerifyOptions;
use oncelake::{Batch, Error, ManualClock, Options, Store};
use std::sync::Arc;
use std::time::Duration;

fn now_gc() -> GcOptions {
    crate::common::gc_everything()
}

fn manual_store() -> (tempfile::TempDir, Store, ManualClock) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let store = Store::open_with(
        dir.path().join("lake"),
        Options {
            clock: Arc::new(clock.clone()),
            ..Options::default()
        },
    )
    .unwrap();
    (dir, store, clock)
}

/// Verifies `store` deeply (every object's bytes read) and fails unless it is clean.
#[track_caller]
fn verified_clean(store: &Store) {
    let v = store.verify(VerifyOptions { deep: true }).unwrap();
    assert!(v.is_clean(), "{v:?}");
}

#[test]
fn removes_orphans_keeps_referenced_and_dry_run_removes_nothing() {
    let (_d, store, _c) = manual_store();
    store.put("a", 1, b"kept").unwrap();
    let lost = store.stage_bytes(b"orphan").unwrap();
    let lost_path = store.object_path(&lost.id());
    drop(lost);
    // A commit rejected by the rules leaves its object orphaned too.
    let conflict = store.put("a", 1, b"different bytes").unwrap();
    assert_eq!(conflict.outcome.name(), "conflict");

    let dry = store
        .gc(GcOptions {
            dry_run: true,
            ..now_gc()
        })
        .unwrap();
    assert!(dry.dry_run);
    assert_eq!((dry.objects, dry.object_bytes), (2, 6 + 15));
    assert!(lost_path.exists(), "a dry run removes nothing");

    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.objects, r.object_bytes), (2, 6 + 15));
    assert_eq!(r.objects_referenced, 1);
    assert!(!lost_path.exists());
    assert_eq!(crate::common::current_bytes(&store, "a"), b"kept");
    let m = store.metrics();
    assert_eq!((m.orphans_collected, m.bytes_collected), (2, 21));
    verified_clean(&store);
    // Nothing left to do.
    assert_eq!(store.gc(now_gc()).unwrap().objects, 0);
}

#[test]
fn a_pinned_object_survives_and_its_commit_is_readable() {
    let (_d, store, _c) = manual_store();
    let held = store.stage_bytes(b"in flight").unwrap();
    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.objects, r.objects_pinned), (0, 1));
    store.commit(Batch::new().put("u", 1, &held)).unwrap();
    drop(held);
    assert_eq!(store.gc(now_gc()).unwrap().objects, 0);
    let e = store.get("u").unwrap().unwrap();
    assert_eq!(
        store.snapshot().unwrap().read_object(&e).unwrap(),
        b"in flight"
    );
}

#[test]
fn retention_prunes_history_and_moves_the_horizon() {
    let (_d, store, clock) = manual_store();
    let s1 = store.put("u", 1, b"v1").unwrap().outcome.seq().unwrap();
    clock.advance_ms(1_000);
    let s2 = store.put("u", 2, b"v2").unwrap().outcome.seq().unwrap();
    store.put("other", 1, b"o1").unwrap();
    let v1_path = store.object_path(&oncelake::ObjectId::of(b"v1"));
    clock.advance_ms(5_000);

    // Superseded 5 s ago; kept for 10 s.
    let keep = GcOptions {
        retain: Duration::from_secs(10),
        ..now_gc()
    };
    let r = store.gc(keep).unwrap();
    assert_eq!(
        (r.history_rows_pruned, r.objects, r.history_from),
        (0, 0, 0)
    );
    assert_eq!(
        store
            .snapshot_at(s1)
            .unwrap()
            .get("u")
            .unwrap()
            .unwrap()
            .source_version,
        1
    );

    clock.advance_ms(10_000);
    let dry = store
        .gc(GcOptions {
            dry_run: true,
            ..keep
        })
        .unwrap();
    assert_eq!(
        (dry.history_rows_pruned, dry.objects, dry.history_from),
        (1, 1, s2)
    );
    assert!(v1_path.exists());
    let r = store.gc(keep).unwrap();
    assert_eq!(
        (r.history_rows_pruned, r.objects, r.history_from),
        (1, 1, s2)
    );
    assert!(!v1_path.exists());
    assert!(matches!(
        store.snapshot_at(s1),
        Err(Error::SeqOutOfRange { asked, oldest, .. }) if asked == s1 && oldest == s2
    ));
    let at = store.snapshot_at(s2).unwrap();
    assert_eq!(at.get("u").unwrap().unwrap().source_version, 2);
    assert_eq!(
        at.get("other").unwrap(),
        None,
        "other was committed after s2"
    );
    verified_clean(&store);

    // The horizon survives a reopen and never moves back.
    let path = store.path().to_path_buf();
    drop(at);
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.snapshot().unwrap().history_from(), s2);
    assert_eq!(store.gc(now_gc()).unwrap().history_from, s2);
}

#[test]
fn restaging_content_gc_removed_publishes_it_again() {
    let (_d, store, clock) = manual_store();
    store.put("u", 1, b"old bytes").unwrap();
    clock.advance_ms(1);
    store.put("u", 2, b"new bytes").unwrap();
    clock.advance_ms(1);
    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.history_rows_pruned, r.objects), (1, 1));
    // The unit goes back to the old content at a newer version.
    let out = store.put("u", 3, b"old bytes").unwrap();
    assert_eq!(out.outcome.name(), "committed");
    let e = store.get("u").unwrap().unwrap();
    assert_eq!(
        store.snapshot().unwrap().read_object(&e).unwrap(),
        b"old bytes"
    );
    verified_clean(&store);
}

#[test]
fn staging_leftovers_older_than_the_grace_period_are_removed() {
    let (_d, store, _c) = manual_store();
    let staging = store.path().join("staging");
    std::fs::write(staging.join("12345-0.part"), b"half an object").unwrap();
    let r = store
        .gc(GcOptions {
            grace: Duration::from_secs(3600),
            ..now_gc()
        })
        .unwrap();
    assert_eq!(r.staging_files, 0, "too young");
    let dry = store
        .gc(GcOptions {
            dry_run: true,
            ..now_gc()
        })
        .unwrap();
    assert_eq!((dry.staging_files, dry.staging_bytes), (1, 14));
    assert!(staging.join("12345-0.part").exists());
    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.staging_files, r.staging_bytes), (1, 14));
    assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);
}

#[test]
fn stray_files_are_left_alone() {
    let (_d, store, _c) = manual_store();
    let stray = store.path().join("objects").join("notes.txt");
    std::fs::write(&stray, b"mine").unwrap();
    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.objects, r.stray_files), (0, 1));
    assert!(stray.exists());
}

// ---------------------------------------------------------------------------------------------
// Readers: an open snapshot pins what it can read (SPEC R14, I8).

fn retain_nothing() -> GcOptions {
    now_gc()
}

#[test]
fn an_open_snapshot_keeps_what_it_can_read_whatever_the_retention() {
    let (_d, store, clock) = manual_store();
    let s1 = store.put("u", 1, b"v1").unwrap().outcome.seq().unwrap();
    // Held across the commits below: it reads u@1 as current.
    let held = store.snapshot().unwrap();
    clock.advance_ms(1_000);
    store.put("u", 2, b"v2").unwrap();
    store.put("w", 1, b"w1").unwrap();
    clock.advance_ms(1_000);
    store.put("w", 2, b"w2").unwrap();
    // Opened as of an older seq after the commits.
    let old = store.snapshot_at(s1).unwrap();
    clock.advance_ms(1_000);
    let v1_path = store.object_path(&oncelake::ObjectId::of(b"v1"));

    let dry = store
        .gc(GcOptions {
            dry_run: true,
            ..retain_nothing()
        })
        .unwrap();
    let r = store.gc(retain_nothing()).unwrap();
    assert_eq!(
        (dry.history_rows_pruned, dry.objects),
        (r.history_rows_pruned, r.objects),
        "a dry run plans what the run does"
    );
    // w@1 was superseded at seq 4, after every pinned seq (s1): kept as well.
    assert_eq!((r.history_rows_pruned, r.objects), (0, 0), "{r:?}");
    assert!(v1_path.exists());
    for snap in [&held, &old] {
        let e = snap.get("u").unwrap().unwrap();
        assert_eq!(e.source_version, 1);
        assert_eq!(snap.read_object(&e).unwrap(), b"v1");
        assert_eq!(snap.map_object(&e).unwrap().as_ref(), b"v1");
    }
    // While they are open, a view as of their seq can still be opened.
    assert!(store.snapshot_at(s1).is_ok());
    verified_clean(&store);

    // Dropping the snapshots releases the pin.
    drop(held);
    drop(old);
    let r = store.gc(retain_nothing()).unwrap();
    assert_eq!((r.history_rows_pruned, r.objects), (2, 2), "{r:?}");
    assert!(!v1_path.exists());
    assert!(matches!(
        store.snapshot_at(s1),
        Err(Error::SeqOutOfRange { asked, .. }) if asked == s1
    ));
}

#[test]
fn the_lowest_open_snapshot_bounds_the_prune() {
    let (_d, store, clock) = manual_store();
    let mut seqs = Vec::new();
    for v in 1..=4u64 {
        seqs.push(
            store
                .put("u", v, format!("v{v}").as_bytes())
                .unwrap()
                .outcome
                .seq()
                .unwrap(),
        );
        clock.advance_ms(1_000);
    }
    // Pinned at u@2: u@1 may go (its successor u@2 is visible to the view), u@2 and u@3 stay.
    let at2 = store.snapshot_at(seqs[1]).unwrap();
    let r = store.gc(retain_nothing()).unwrap();
    assert_eq!(
        (r.history_rows_pruned, r.objects, r.history_from),
        (1, 1, seqs[1])
    );
    let e = at2.get("u").unwrap().unwrap();
    assert_eq!(at2.read_object(&e).unwrap(), b"v2");
    let at3 = store.snapshot_at(seqs[2]).unwrap();
    assert_eq!(
        at3.read_object(&at3.get("u").unwrap().unwrap()).unwrap(),
        b"v3"
    );
    drop(at2);
    drop(at3);
    let r = store.gc(retain_nothing()).unwrap();
    assert_eq!(
        (r.history_rows_pruned, r.objects, r.history_from),
        (2, 2, seqs[3])
    );
}

// ---------------------------------------------------------------------------------------------
// Unlinks outside the pin lock: a Vfs whose object removals park until the test lets them go.

#[derive(Debug, Default)]
struct Gate {
    state: std::sync::Mutex<GateState>,
    cv: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    /// Removals of objects currently parked.
    parked: usize,
    released: bool,
    /// Links into objects/ made while a removal was parked.
    links_while_parked: usize,
}

impl Gate {
    fn wait_parked(&self) {
        let g = self.state.lock().unwrap();
        let (_g, t) = self
            .cv
            .wait_timeout_while(g, Duration::from_secs(120), |s| s.parked == 0)
            .unwrap();
        assert!(!t.timed_out(), "GC never reached an unlink");
    }
    fn release(&self) {
        self.state.lock().unwrap().released = true;
        self.cv.notify_all();
    }
}

/// Parks each removal in objects/ until the gate is released, and counts the links into
/// objects/ made meanwhile.
#[derive(Debug)]
struct Parking(Arc<Gate>);

fn is_object(path: &std::path::Path) -> bool {
    path.components().any(|c| c.as_os_str() == "objects")
}

impl Hook for Parking {
    fn before_link(&self, to: &std::path::Path) {
        if is_object(to) {
            let mut s = self.0.state.lock().unwrap();
            if s.parked > 0 {
                s.links_while_parked += 1;
                self.0.cv.notify_all();
            }
        }
    }
    fn before_remove(&self, path: &std::path::Path) {
        if is_object(path) {
            let mut s = self.0.state.lock().unwrap();
            s.parked += 1;
            self.0.cv.notify_all();
            while !s.released {
                s = self.0.cv.wait(s).unwrap();
            }
            s.parked -= 1;
        }
    }
}

fn parking_store() -> (tempfile::TempDir, Store, Arc<Gate>) {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let store = Store::open_with(
        dir.path().join("lake"),
        Options {
            vfs: Arc::new(Hooked::real(Parking(gate.clone()))),
            ..Options::default()
        },
    )
    .unwrap();
    (dir, store, gate)
}

/// Runs `work` on another thread and waits for it, up to a generous bound that only a writer
/// stuck behind the GC would reach; lets the GC go either way, so a failure never hangs.
fn completes_while_gc_is_parked<T: Send + 'static>(
    gate: &Gate,
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(work());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => {
            worker.join().unwrap();
            v
        }
        Err(_) => {
            gate.release();
            worker.join().unwrap();
            panic!("{what} waited for GC's unlink");
        }
    }
}

#[test]
fn commits_claims_and_staging_go_on_while_gc_is_parked_in_an_unlink() {
    let (_d, store, gate) = parking_store();
    for i in 0..3 {
        drop(store.stage_bytes(format!("orphan {i}").as_bytes()).unwrap());
    }
    let held = store.stage_bytes(b"staged before the GC").unwrap();
    let gc = {
        let store = store.clone();
        std::thread::spawn(move || store.gc(now_gc()))
    };
    gate.wait_parked();

    // The leader drops the group's pins after the commit: it must not wait for the unlink.
    let s = store.clone();
    let out = completes_while_gc_is_parked(&gate, "a commit", move || {
        s.commit(Batch::new().put("a", 1, &held)).unwrap()
    });
    assert!(out.applied());
    let s = store.clone();
    let claim = completes_while_gc_is_parked(&gate, "a claim", move || {
        s.claim("c", 1, "w1", Duration::from_secs(60)).unwrap()
    });
    assert!(matches!(claim, oncelake::ClaimOutcome::Granted { .. }));
    let s = store.clone();
    let put =
        completes_while_gc_is_parked(&gate, "staging and committing new content", move || {
            s.put("b", 1, b"new content").unwrap()
        });
    assert_eq!(put.outcome.name(), "committed");

    gate.release();
    let r = gc.join().unwrap().unwrap();
    assert_eq!(r.objects, 3, "{r:?}");
    let snap = store.snapshot().unwrap();
    for (unit, bytes) in [("a", &b"staged before the GC"[..]), ("b", b"new content")] {
        assert_eq!(
            snap.read_object(&snap.get(unit).unwrap().unwrap()).unwrap(),
            bytes
        );
    }
    verified_clean(&store);
}

#[test]
fn publishing_content_that_gc_is_unlinking_waits_and_publishes_a_fresh_copy() {
    let (_d, store, gate) = parking_store();
    drop(store.stage_bytes(b"doomed content").unwrap());
    let gc = {
        let store = store.clone();
        std::thread::spawn(move || store.gc(now_gc()))
    };
    gate.wait_parked();
    let put = {
        let store = store.clone();
        std::thread::spawn(move || store.put("u", 1, b"doomed content"))
    };
    // Either the publisher parks behind the unlink (right), or it links onto the doomed file
    // while the unlink is parked (wrong: its commit would reference a file about to vanish).
    loop {
        let linked = gate.state.lock().unwrap().links_while_parked;
        assert_eq!(linked, 0, "published onto a file GC is unlinking");
        if store.publishers_waiting_for_gc() == 1 {
            break;
        }
        assert!(
            !put.is_finished(),
            "the put finished while GC was unlinking its object"
        );
        std::thread::yield_now();
    }
    gate.release();
    assert_eq!(gc.join().unwrap().unwrap().objects, 1);
    assert_eq!(put.join().unwrap().unwrap().outcome.name(), "committed");
    assert_eq!(crate::common::current_bytes(&store, "u"), b"doomed content");
    verified_clean(&store);
}

// ---------------------------------------------------------------------------------------------
// Staging leftovers: writers that are gone are told by name (SPEC R14).

#[test]
fn staging_files_of_writers_that_are_gone_are_removed_without_waiting() {
    let (_d, store, _c) = manual_store();
    let staging = store.path().join("staging");
    // Named like the stager names files, by another process (or an earlier opening).
    let gone = staging.join("4242-18a2b3c4d5e6f708-0.part");
    std::fs::write(&gone, b"half an object").unwrap();
    let unknown = staging.join("someone-elses.tmp");
    std::fs::write(&unknown, b"???").unwrap();
    let hour = GcOptions {
        grace: Duration::from_secs(3600),
        ..now_gc()
    };
    let v = store.verify(VerifyOptions::default()).unwrap();
    assert!(v.is_ok(), "leftovers are not problems: {v:?}");
    let mut staged: Vec<_> = v
        .reclaimable
        .staging
        .iter()
        .map(|f| (f.path.clone(), f.bytes, f.owner_gone))
        .collect();
    staged.sort();
    assert_eq!(
        staged,
        vec![(gone.clone(), 14, true), (unknown.clone(), 3, false)]
    );

    let dry = store
        .gc(GcOptions {
            dry_run: true,
            ..hour
        })
        .unwrap();
    assert_eq!(
        (
            dry.staging_files,
            dry.staging_bytes,
            dry.staging_files_young
        ),
        (1, 14, 1)
    );
    assert!(gone.exists());
    let r = store.gc(hour).unwrap();
    assert_eq!(
        (r.staging_files, r.staging_bytes, r.staging_files_young),
        (1, 14, 1)
    );
    assert!(!gone.exists(), "a gone writer's file goes at once");
    assert!(
        unknown.exists(),
        "an unknown writer's file waits for the grace period"
    );
    let r = store.gc(now_gc()).unwrap();
    assert_eq!((r.staging_files, r.staging_files_young), (1, 0));
    assert!(store.verify(VerifyOptions::default()).unwrap().is_clean());
}

/// A reader that hands out one chunk, then blocks until told to finish.
struct SlowReader {
    first: Option<Vec<u8>>,
    /// Told when the first part has been read (the stager has created its file by then).
    started: std::sync::mpsc::Sender<()>,
    rest: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl std::io::Read for SlowReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let chunk = match self.first.take() {
            Some(c) => {
                let _ = self.started.send(());
                c
            }
            None => self.rest.recv().unwrap_or_default(),
        };
        buf[..chunk.len()].copy_from_slice(&chunk);
        Ok(chunk.len())
    }
}

/// GC never removes a staging file being written, and verify does not call it reclaimable. Run
/// on the real file system (where Linux offers unnamed `O_TMPFILE` staging files, nothing is
/// in `staging/` to remove) and through the fault model's seam, which offers no unnamed files and
/// so makes the stager write a named `.part` that stays in flight until it is published.
#[test]
fn a_staging_file_being_written_is_never_removed() {
    let plain = manual_store();
    let dir = tempfile::tempdir().unwrap();
    let named = Store::open_with(
        dir.path().join("lake"),
        Options {
            vfs: Arc::new(oncelake::fault::FaultyVfs::new(
                Arc::new(oncelake::vfs::RealVfs),
                oncelake::fault::FaultPlan::new(),
            )),
            clock: Arc::new(ManualClock::new(1_000_000)),
            ..Options::default()
        },
    )
    .unwrap();
    for (store, must_name) in [(&plain.1, false), (&named, true)] {
        let staging = store.path().join("staging");
        let (tx, rx) = std::sync::mpsc::channel();
        let (started_tx, started) = std::sync::mpsc::channel();
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || {
                store.stage_reader(SlowReader {
                    first: Some(b"first part".to_vec()),
                    started: started_tx,
                    rest: rx,
                })
            })
        };
        // The stager creates its file before it reads anything.
        started.recv().unwrap();
        let in_staging = std::fs::read_dir(&staging).unwrap().count();
        if must_name {
            assert_eq!(in_staging, 1, "the named staging file is being written");
        }
        let r = store.gc(now_gc()).unwrap();
        assert_eq!((r.staging_files, r.staging_files_young), (0, 0), "{r:?}");
        assert_eq!(std::fs::read_dir(&staging).unwrap().count(), in_staging);
        let v = store.verify(VerifyOptions::default()).unwrap();
        assert!(v.reclaimable.staging.is_empty(), "{v:?}");
        tx.send(b", second part".to_vec()).unwrap();
        drop(tx);
        let staged = writer.join().unwrap().unwrap();
        assert_eq!(staged.meta().size, 23);
        assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Staged handles belong to their store (SPEC R2, I2, I8).

#[test]
fn a_handle_staged_by_another_store_is_refused_and_nothing_is_committed() {
    let (_d, a, _ca) = manual_store();
    let (_e, b, _cb) = manual_store();
    let foreign = a.stage_bytes(b"staged by a").unwrap();
    let own = b.stage_bytes(b"staged by b").unwrap();
    let err = b
        .commit(Batch::new().put("own", 1, &own).put("x", 1, &foreign))
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidRequest(m) if m.contains("another store") && m.contains("\"x\"")),
        "{err}"
    );
    assert_eq!(b.last_seq().unwrap(), 0, "nothing was committed");
    assert!(b.get("own").unwrap().is_none() && b.get("x").unwrap().is_none());
    assert!(!b.object_path(&foreign.id()).exists());
    // Its own store takes it.
    assert!(a
        .commit(Batch::new().put("x", 1, &foreign))
        .unwrap()
        .applied());

    // A handle of an earlier opening of the same store is refused too: that opening's GC knew
    // its pin, this one's does not.
    let path = a.path().to_path_buf();
    let stale = a.stage_bytes(b"staged before a reopen").unwrap();
    drop(a);
    let a = Store::open(&path).unwrap();
    assert!(matches!(
        a.commit(Batch::new().put("y", 1, &stale)),
        Err(Error::InvalidRequest(_))
    ));
    assert!(a.get("y").unwrap().is_none());
}

// ---------------------------------------------------------------------------------------------
// Publishing an object that is already there syncs its directory unless that is known to be
// durable — also after a restart (SPEC R2, R5, I2).

/// Fails the next directory sync once armed, as a crash between a link and its sync would leave
/// things.
#[derive(Debug)]
struct FailDirSyncOnce {
    armed: std::sync::atomic::AtomicBool,
}

impl Hook for FailDirSyncOnce {
    fn sync_dir(&self, _path: &std::path::Path) -> Option<std::io::Result<()>> {
        let armed = self.armed.swap(false, std::sync::atomic::Ordering::SeqCst);
        armed.then(|| {
            Err(std::io::Error::other(
                "injected: crashed before the directory sync",
            ))
        })
    }
}

#[test]
fn an_object_found_after_a_restart_is_made_durable_before_it_is_committed() {
    use oncelake::fault::{FaultPlan, FaultyVfs};
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let plan = FaultPlan::new();
    plan.lose_unsynced_writes(true);
    let open = |fail_next_dir_sync: bool| {
        Store::open_with(
            &lake,
            Options {
                vfs: Arc::new(Hooked {
                    inner: Arc::new(FaultyVfs::new(
                        Arc::new(oncelake::vfs::RealVfs),
                        plan.clone(),
                    )),
                    hook: FailDirSyncOnce {
                        armed: fail_next_dir_sync.into(),
                    },
                }),
                ..Options::default()
            },
        )
        .unwrap()
    };
    // The first process links the object, then dies before its directory sync: the entry is in
    // the page cache, not on disk. What that process knew dies with it.
    let store = open(false);
    store
        .put("other", 1, b"makes the store's own entries durable")
        .unwrap();
    drop(store);
    let store = open(true);
    assert!(store.stage_bytes(b"payload").is_err());
    drop(store);

    // The next process finds the object "already there", commits, and is acknowledged.
    let store = open(false);
    let out = store.put("u", 1, b"payload").unwrap();
    assert_eq!(out.outcome.name(), "committed");
    drop(store);

    // Power loss: every link whose directory was never synced disappears.
    plan.apply_power_loss(&lake.join(oncelake::DB_FILE))
        .unwrap();
    let store = Store::open(&lake).unwrap();
    let e = store
        .get("u")
        .unwrap()
        .expect("an acknowledged commit survives");
    let snap = store.snapshot().unwrap();
    assert_eq!(
        snap.read_object(&e)
            .expect("I2: the committed object survives the power loss"),
        b"payload"
    );
    let v = store.verify(VerifyOptions { deep: true }).unwrap();
    assert!(v.is_intact(), "{v:?}");
}

/// Retention zero means "keep nothing superseded": an entry superseded in the very millisecond GC
/// runs goes too, with its object (the clock does not move in this test). Before, the cutoff was
/// strict, so a GC right after a fast commit kept what retain 0 promises to remove.
#[test]
fn retain_zero_prunes_an_entry_superseded_in_the_same_millisecond() {
    let (_dir, store, _clock) = manual_store();
    let old = store.put("k", 1, b"old").unwrap();
    let new = store.put("k", 2, b"new").unwrap();
    let old_path = store.object_path(&old.object);
    assert!(old_path.is_file());
    let report = store.gc(now_gc()).unwrap();
    assert_eq!(report.history_rows_pruned, 1, "{report:?}");
    assert_eq!(report.objects, 1, "{report:?}");
    assert!(!old_path.is_file(), "the superseded object was kept");
    assert!(store.object_path(&new.object).is_file());
    assert_eq!(store.get("k").unwrap().map(|e| e.source_version), Some(2));
}
