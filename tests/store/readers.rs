//! Readers never wait for GC or the backlog, and the commit path carries only what it must:
//! a group that changes no row writes no record, the write-ahead trim is the applier's, GC's
//! prune holds no reader while it drains and syncs, GC's second look holds no stager while it
//! waits, and a snapshot's cost does not grow with the backlog.

use oncelake::gc::GcOptions;
use oncelake::{Clock, ManualClock, Options, Outcome, Store};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Applied by nobody unless asked: every group stays in the backlog until a reader of the tables,
/// a flush or a close needs it.
fn held_backlog(clock: Arc<dyn Clock>) -> Options {
    Options {
        background_apply: false,
        apply_min_bytes: 64 << 20,
        clock,
        ..Options::default()
    }
}

fn counter(store: &Store, name: &str) -> u64 {
    store
        .metrics()
        .counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| v)
}

/// A group of duplicates and refusals only changes no row: it appends no record and queues
/// nothing, and its counts are not lost — they are written with the next group that changes a
/// row, or by the close.
#[test]
fn a_group_that_changes_nothing_appends_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let clock = ManualClock::new(1_000_000);
    let store = Store::open_with(&path, held_backlog(Arc::new(clock.clone()))).unwrap();
    assert!(matches!(
        store.put("u", 2, b"v2").unwrap().outcome,
        Outcome::Committed { .. }
    ));
    let records = store.wal_records().unwrap();
    let waiting = store.backlog();
    assert!(records > 0 && waiting.bytes > 0, "the commit is in the log");
    // A duplicate, and a stale version: neither changes a row.
    assert!(matches!(
        store.put("u", 2, b"v2").unwrap().outcome,
        Outcome::Duplicate { .. }
    ));
    assert!(matches!(
        store.put("u", 1, b"v1").unwrap().outcome,
        Outcome::Stale { .. }
    ));
    assert_eq!(store.wal_records().unwrap(), records, "no record appended");
    assert_eq!(store.backlog(), waiting, "nothing queued");
    let dups = counter(&store, "duplicates_collapsed");
    let stale = counter(&store, "stale_rejections");
    assert_eq!((dups, stale), (1, 1));
    // A claim is a change: it writes a lease row.
    store
        .claim("w", 1, "worker", Duration::from_secs(60))
        .unwrap();
    assert_eq!(store.wal_records().unwrap(), records + 1);
    assert!(matches!(
        store.put("u", 2, b"v2").unwrap().outcome,
        Outcome::Duplicate { .. }
    ));
    let groups = counter(&store, "groups");
    drop(store);
    // The counts survive a clean close, the last duplicate's included.
    let store = Store::open_with(&path, held_backlog(Arc::new(clock))).unwrap();
    assert_eq!(counter(&store, "duplicates_collapsed"), 2);
    assert_eq!(counter(&store, "stale_rejections"), 1);
    assert_eq!(counter(&store, "groups"), groups);
}

/// The records a checkpoint covers are trimmed by the checkpoint's applier, not by the next
/// commit's synced append: right after a checkpoint, with no commit since, the log is empty. (An
/// append that trims leaves at least its own record.)
#[test]
fn the_checkpoint_trims_the_log_without_a_commit() {
    let (_dir, store) = crate::common::open_new(
        "lake",
        Options {
            background_apply: false,
            // Every writer applies its own group after its answer; some of those applies are
            // checkpoints (every 64 groups at most).
            apply_min_bytes: 0,
            ..Options::default()
        },
    );
    let mut emptied = false;
    for i in 0..200 {
        store.put(&format!("u{i}"), 1, b"x").unwrap();
        assert_eq!(store.backlog().units, 0, "applied after its answer");
        if store.wal_records().unwrap() == 0 {
            emptied = true;
            break;
        }
    }
    assert!(emptied, "a checkpoint trimmed what it covers");
}

/// A clock whose calls on the thread named `gc` stop, from the `from`-th on (counting from 1):
/// each such call reports itself and waits until the test acknowledges it or releases them all.
/// So a test holds GC at a known step (the clock is read where a group is decided and where the
/// backlog is applied) and looks at what the other threads can do meanwhile.
#[derive(Debug)]
struct StepClock {
    inner: ManualClock,
    from: u64,
    state: Mutex<Steps>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Steps {
    calls: u64,
    reached: u64,
    acked: u64,
    released: bool,
}

impl StepClock {
    fn new(from: u64) -> Arc<StepClock> {
        Arc::new(StepClock {
            inner: ManualClock::new(1_000_000),
            from,
            state: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    /// Waits until GC's `k`-th call is held; `false` if it is not within `within`.
    fn wait_reached(&self, k: u64, within: Duration) -> bool {
        let s = self.state.lock().unwrap();
        let (s, _) = self
            .changed
            .wait_timeout_while(s, within, |s| s.reached < k)
            .unwrap();
        s.reached >= k
    }

    /// Lets GC's `k`-th call return.
    fn ack(&self, k: u64) {
        self.state.lock().unwrap().acked = k;
        self.changed.notify_all();
    }

    /// Lets every held and later call return.
    fn release(&self) {
        self.state.lock().unwrap().released = true;
        self.changed.notify_all();
    }
}

impl Clock for StepClock {
    fn now_ms(&self) -> u64 {
        if std::thread::current().name() == Some("gc") {
            let mut s = self.state.lock().unwrap();
            s.calls += 1;
            let k = s.calls;
            if k >= self.from && !s.released {
                s.reached = k;
                self.changed.notify_all();
                let _s = self
                    .changed
                    .wait_while(s, |s| s.acked < k && !s.released)
                    .unwrap();
            }
        }
        self.inner.now_ms()
    }
}

/// Runs `f` on a thread of its own; its result if it returns within `within`.
fn within<T: Send + 'static>(
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(within).ok()
}

fn spawn_gc(
    store: &Store,
    options: GcOptions,
) -> std::thread::JoinHandle<oncelake::Result<oncelake::gc::GcReport>> {
    let store = store.clone();
    std::thread::Builder::new()
        .name("gc".into())
        .spawn(move || store.gc(options))
        .unwrap()
}

/// GC's prune drains the backlog (and syncs) in the leader; meanwhile every reader of the newest
/// seq goes on: held inside the prune group's drain, GC holds no `get`, snapshot or scan.
#[test]
fn a_get_during_gcs_prune_does_not_wait_for_its_drain() {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::new(2);
    let store = Store::open_with(dir.path().join("lake"), held_backlog(clock.clone())).unwrap();
    for v in 1..=3 {
        for i in 0..20 {
            store
                .put(&format!("u{i}"), v, format!("{i}@{v}").as_bytes())
                .unwrap();
        }
    }
    assert!(
        store.backlog().units > 0,
        "the prune's group has a backlog to drain"
    );
    let gc = spawn_gc(&store, crate::common::gc_everything());
    // Call 1 is GC's cutoff; call 2 the prune group's decision; call 3 the drain's apply.
    assert!(
        clock.wait_reached(2, Duration::from_secs(10)),
        "GC submits its prune"
    );
    clock.ack(2);
    assert!(
        clock.wait_reached(3, Duration::from_secs(10)),
        "the prune's group drains the backlog"
    );
    let reader = store.clone();
    let read = within(Duration::from_secs(5), move || {
        let got = reader.get("u7").unwrap().map(|e| e.source_version);
        let all = reader.snapshot().unwrap().iter().unwrap().count();
        (got, all)
    });
    clock.release();
    let report = gc.join().unwrap().unwrap();
    assert_eq!(
        read,
        Some((Some(3), 20)),
        "a get and a scan answered while the prune drained"
    );
    assert_eq!(report.history_rows_pruned, 40);
    assert_eq!(store.get("u7").unwrap().unwrap().source_version, 3);
}

/// GC's second look (under the pin lock) reads the groups acknowledged before it from the backlog
/// instead of waiting for them to be applied: a writer staging meanwhile is not held, and what GC
/// keeps is still everything the commits since its first look reference.
#[test]
fn staging_does_not_wait_while_gcs_second_look_needs_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::new(2);
    let store = Store::open_with(dir.path().join("lake"), held_backlog(clock.clone())).unwrap();
    store.put("a", 1, b"a1").unwrap();
    // An object nobody references, so GC gets as far as deciding.
    drop(store.stage_bytes(b"garbage").unwrap());
    let gc = spawn_gc(
        &store,
        GcOptions {
            retain: Duration::ZERO,
            grace: Duration::ZERO,
            dry_run: true,
        },
    );
    // Call 1: the cutoff; call 2: the dry run's read applies the backlog; call 3: the first look
    // applies the commit made during call 2. A commit during call 3 is in the backlog when GC
    // takes its second look.
    for (k, unit) in [(2, "x"), (3, "y")] {
        assert!(
            clock.wait_reached(k, Duration::from_secs(10)),
            "GC applies at call {k}"
        );
        store.put(unit, 1, unit.as_bytes()).unwrap();
        clock.ack(k);
    }
    // Either GC is done, or it is held applying at its second look.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !gc.is_finished() && !clock.wait_reached(4, Duration::from_millis(20)) {
        assert!(
            std::time::Instant::now() < deadline,
            "GC neither ends nor applies"
        );
    }
    let stager = store.clone();
    let staged = within(Duration::from_secs(5), move || {
        stager.stage_bytes(b"staged meanwhile").is_ok()
    });
    clock.release();
    let report = gc.join().unwrap().unwrap();
    assert_eq!(
        staged,
        Some(true),
        "staging was not held by GC's second look"
    );
    assert_eq!(report.objects, 1, "only the garbage would go: {report:?}");
    for unit in ["a", "x", "y"] {
        let e = store.get(unit).unwrap().unwrap();
        store.snapshot().unwrap().read_object(&e).unwrap();
    }
}

/// Open snapshots read as of their seq whatever happens to the backlog they began over: groups
/// applied under them (then they read from a newer transaction), more commits, GC pruning all
/// the history it may. Every snapshot — of the newest seq, or as of an older one inside or
/// before its tail — answers every get, scan, change feed and object read as the model's state
/// at its seq.
#[test]
fn open_snapshots_read_as_of_their_seq_while_the_backlog_is_applied_under_them() {
    let held = held_backlog(Arc::new(ManualClock::new(1_000_000)));
    snapshots_against_the_model(held.clone());
    // A small backlog: the leader applies a few groups at a time (back-pressure), so a snapshot's
    // tail is applied in part under it while newer groups are queued behind it.
    snapshots_against_the_model(Options {
        backlog_bytes: 4 << 10,
        apply_batch_bytes: 1 << 10,
        ..held
    });
}

fn snapshots_against_the_model(options: Options) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path().join("lake"), options).unwrap();
    let mut rng = 0x5eed_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    // The model: the state after each seq (index 0: empty).
    let mut states: Vec<std::collections::BTreeMap<String, u64>> = vec![Default::default()];
    let mut versions = std::collections::BTreeMap::<String, u64>::new();
    let mut open: Vec<(oncelake::Snapshot, u64)> = Vec::new();
    for step in 0..400 {
        match next(20) {
            0 => store.flush().unwrap(),
            1 => {
                store.gc(crate::common::gc_everything()).unwrap();
            }
            2 | 3 => {
                let snap = store.snapshot().unwrap();
                let seq = snap.seq();
                assert_eq!(
                    seq as usize,
                    states.len() - 1,
                    "a snapshot sees every commit"
                );
                open.push((snap, seq));
            }
            4 => {
                let newest = states.len() as u64 - 1;
                let from = store.snapshot().unwrap().history_from().max(1);
                if newest >= from {
                    let seq = from + next(newest - from + 1);
                    open.push((store.snapshot_at(seq).unwrap(), seq));
                }
            }
            5 if !open.is_empty() => {
                let at = next(open.len() as u64) as usize;
                open.swap_remove(at);
            }
            _ => {
                let unit = format!("u{}", next(30));
                let v = versions.entry(unit.clone()).or_insert(0);
                *v += 1 + next(2);
                let bytes = format!("{unit}@{v}");
                assert!(matches!(
                    store.put(&unit, *v, bytes.as_bytes()).unwrap().outcome,
                    Outcome::Committed { .. }
                ));
                let mut state = states.last().unwrap().clone();
                state.insert(unit, *v);
                states.push(state);
            }
        }
        for (snap, seq) in &open {
            let want = &states[*seq as usize];
            let got: std::collections::BTreeMap<String, u64> = snap
                .iter()
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    let bytes = snap.read_object(&e).unwrap();
                    assert_eq!(
                        bytes,
                        format!("{}@{}", e.unit, e.source_version).into_bytes()
                    );
                    (e.unit, e.source_version)
                })
                .collect();
            assert_eq!(&got, want, "step {step}: the scan of the view as of {seq}");
            for i in [0, 7, 29] {
                let unit = format!("u{i}");
                assert_eq!(
                    snap.get(&unit).unwrap().map(|e| e.source_version),
                    want.get(&unit).copied(),
                    "step {step}: get {unit} as of {seq}"
                );
            }
            let records = snap.changes_since(0).unwrap().count() as u64;
            assert_eq!(records, *seq, "step {step}: the feed as of {seq}");
        }
    }
}
