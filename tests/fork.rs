//! A `fork()`ed child holds a copy of its parent's open store (`src/owner.rs`). Every read and
//! write through that copy is refused with `Error::Forked`, and dropping it in the child changes
//! nothing: not one byte of the store's files, not the parent's lock, not the parent's store.
//!
//! One test in this binary: the child of a multi-threaded process may only rely on what the fork
//! copied, so the fewer threads the harness runs, the less can be held at the fork.
#![cfg(unix)]

mod common;

use common::tree;
use oncelake::{Error, GcOptions, Options, Snapshot, Store};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The store's table publisher (`AutoPublisher`, with the `tables` feature): a thread of the
/// parent's that the child does not have.
#[cfg(feature = "tables")]
type Publisher = oncelake::table::AutoPublisher;
#[cfg(not(feature = "tables"))]
struct Publisher;

fn publisher(store: &Store) -> Publisher {
    #[cfg(feature = "tables")]
    return oncelake::table::AutoPublisher::start(store.clone(), Duration::from_secs(3600));
    #[cfg(not(feature = "tables"))]
    {
        let _ = store;
        Publisher
    }
}

/// The handles of the open store that the fork copies into the child.
enum Handles {
    /// With the store's table publisher.
    Store(Store, Publisher),
    /// A snapshot open across the fork; in the child it outlives the store handle.
    StoreAndSnapshot(Store, Snapshot),
    /// Only a snapshot: the parent dropped its store handle before the fork, so in the child
    /// the snapshot holds the last reference to the open store.
    Snapshot(Snapshot),
}

/// What the child found, as its exit status: 0 when every call was refused as it must be.
fn child(handles: Handles, parent: u32) -> i32 {
    let (store, snapshot) = match handles {
        Handles::Store(s, publisher) => {
            // Dropped first: its thread is the parent's (a unit without the `tables` feature).
            {
                let _stopped = publisher;
            }
            (Some(s), None)
        }
        Handles::StoreAndSnapshot(s, snap) => (Some(s), Some(snap)),
        Handles::Snapshot(snap) => (None, Some(snap)),
    };
    if let Some(store) = &store {
        if let Some(code) = refused_in_child(store, parent) {
            return code;
        }
    }
    // Neither drop may close, sync, unlock or join a thread the child does not have.
    drop(store);
    drop(snapshot);
    0
}

/// The first call through `store` that was not refused with `Error::Forked` (its code), if any.
fn refused_in_child(store: &Store, parent: u32) -> Option<i32> {
    let this = std::process::id();
    let forked = |r: Result<(), Error>| match r {
        Err(Error::Forked {
            opened_by, this: t, ..
        }) => opened_by == parent && t == this,
        _ => false,
    };
    let checks: [(i32, bool); 7] = [
        (
            10,
            forked(store.put("child/1", 1, b"from the child").map(drop)),
        ),
        (
            11,
            forked(store.stage_bytes(b"staged by the child").map(drop)),
        ),
        (12, forked(store.snapshot().map(drop))),
        (13, forked(store.flush())),
        (14, forked(store.gc(GcOptions::default()).map(drop))),
        (15, forked(store.wait_applied())),
        // The in-memory dedup answer stays as the fork left it.
        (16, store.is_done("parent/3", 1).unwrap_or(false)),
    ];
    checks.iter().find(|(_, ok)| !ok).map(|(code, _)| *code)
}

/// Forks; the child gets `handles` as its only handles and drops them. Returns the child's exit
/// status and, to the parent, its own handles.
fn fork_and_run_child(handles: Handles) -> (i32, Handles) {
    let parent = std::process::id();
    // SAFETY: the child runs only `child` and `_exit`s without returning into the test harness;
    // the parent's store is idle at the fork (its backlog is empty and no call is in flight), so
    // no lock the child takes was held by a thread it lost.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child(handles, parent)))
                .unwrap_or(99);
        // SAFETY: ends the child at once, without running the parent's atexit handlers or the
        // harness' code.
        unsafe { libc::_exit(code) };
    }
    (wait_child(pid), handles)
}

/// The child's exit status; a child that does not end within a minute hung (on a join of a
/// thread it does not have, say) and is killed.
fn wait_child(pid: libc::pid_t) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; `pid` is our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if r == pid {
            assert!(
                libc::WIFEXITED(status),
                "the child died: status {status:#x}"
            );
            return libc::WEXITSTATUS(status);
        }
        if Instant::now() > deadline {
            // SAFETY: our own child, which has not been reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the child did not end within a minute (hung in its store's drop?)");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether an exclusive `flock` on a new open file description of `lock` is granted (and then
/// released at once): false while the store's owner holds it.
fn lock_is_free(lock: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(lock).unwrap();
    // SAFETY: `f` is an open descriptor for the call's duration.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    r == 0
}

/// The store's units and their objects' bytes, read in a fresh open.
fn contents(path: &Path, options: &Options) -> BTreeMap<String, String> {
    let store = Store::open_with(path, options.clone()).unwrap();
    assert!(store.check_invariants().unwrap().is_empty());
    let snap = store.snapshot().unwrap();
    let mut found = BTreeMap::new();
    for e in snap.iter().unwrap() {
        let e = e.unwrap();
        let bytes = String::from_utf8(snap.read_object(&e).unwrap()).unwrap();
        found.insert(e.unit, bytes);
    }
    found
}

fn put(store: &Store, model: &mut BTreeMap<String, String>, i: u64, version: u64) {
    let unit = format!("parent/{i}");
    let bytes = format!("v{version} of {unit}");
    store.put(&unit, version, bytes.as_bytes()).unwrap();
    model.insert(unit, bytes);
}

/// `kind`: which handles the child gets: 0 the store, 1 the store and a snapshot, 2 a snapshot.
fn run(path: &Path, options: Options, kind: u8) {
    let store = Store::open_with(path, options.clone()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..20 {
        put(&store, &mut model, i, 1);
    }
    store.wait_applied().unwrap();
    // The handles are the process' only ones, so in the child their drop is the last.
    let handles = match kind {
        0 => {
            let publisher = publisher(&store);
            Handles::Store(store, publisher)
        }
        1 => {
            let snapshot = store.snapshot().unwrap();
            Handles::StoreAndSnapshot(store, snapshot)
        }
        _ => {
            let snapshot = store.snapshot().unwrap();
            drop(store);
            Handles::Snapshot(snapshot)
        }
    };
    let before = tree(path);

    let (code, handles) = fork_and_run_child(handles);
    assert_eq!(code, 0, "see `child` for the code");

    let after = tree(path);
    let changed: Vec<&String> = after
        .keys()
        .chain(before.keys())
        .filter(|k| after.get(*k) != before.get(*k))
        .collect();
    assert!(changed.is_empty(), "the child changed {changed:?}");
    // The parent still holds the store's lock: unlocking the shared description in the child
    // would let another open file description of `LOCK` take it.
    assert!(
        !lock_is_free(&path.join("LOCK")),
        "the child released the parent's lock"
    );
    // The parent's store works on, and its close is the store's only one.
    if let Handles::Store(store, _) | Handles::StoreAndSnapshot(store, _) = &handles {
        for i in 0..5 {
            put(store, &mut model, i, 2);
        }
    }
    drop(handles);
    assert_eq!(contents(path, &options), model);
}

#[test]
fn a_forked_child_can_neither_use_nor_close_its_parents_store() {
    let dir = tempfile::tempdir().unwrap();
    let relaxed = Options {
        durability: common::relaxed(),
        ..Options::default()
    };
    for kind in 0..3 {
        // Durable: the store has its applier thread, which the child does not.
        run(
            &dir.path().join(format!("durable-{kind}")),
            Options::default(),
            kind,
        );
        // Relaxed: groups not synced yet, which a close in the child would sync into the
        // parent's files.
        run(
            &dir.path().join(format!("relaxed-{kind}")),
            relaxed.clone(),
            kind,
        );
    }
}
