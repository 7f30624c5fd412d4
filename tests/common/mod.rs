//! Helpers shared by the integration tests, included with `mod common;`: the deterministic random generators
//! (so that a failure replays from its printed seed), store set-up, and file-tree oracles.
//!
//! Each test file is its own crate and uses only a part of this module, hence the `dead_code` allowance.
#![allow(dead_code)]

use oncelake::{Batch, ClaimOutcome, Durability, Lease, ManualClock, Options, Outcome, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// SplitMix64: small, and the same sequence on every platform for a seed (the fault model's generator).
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One element of `v`, or `None` when it is empty.
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() {
            None
        } else {
            Some(&v[self.below(v.len() as u64) as usize])
        }
    }
}

/// xorshift64*: deterministic and dependency-free. The seed must not be 0 (the sequence would stay 0).
#[derive(Clone, Debug)]
pub struct XorShift64Star(pub u64);

impl XorShift64Star {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// In `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Relaxed durability that never syncs on its own in a test's lifetime: the same decisions as a durable
/// store, without a disk sync per commit (synced on `flush` and on a clean close).
pub fn relaxed() -> Durability {
    Durability::Relaxed {
        max_delay: Duration::from_secs(3600),
    }
}

/// Opens (or creates) a durable store at `dir` whose leases follow `clock`.
pub fn open_with_clock(dir: &Path, clock: &ManualClock) -> Store {
    Store::open_with(
        dir,
        Options {
            clock: Arc::new(clock.clone()),
            ..Options::default()
        },
    )
    .unwrap()
}

/// The value of the environment variable `name` (a test's size knob), `default` when it is unset
/// or does not parse.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The bytes of `unit`'s current object in a snapshot of `store` (the unit must be there).
pub fn current_bytes(store: &Store, unit: &str) -> Vec<u8> {
    let snap = store.snapshot().unwrap();
    let e = snap
        .get(unit)
        .unwrap()
        .unwrap_or_else(|| panic!("{unit} is not in the store"));
    snap.read_object(&e).unwrap()
}

/// GC options that remove everything they may at once: no grace for staging leftovers, no
/// retention of superseded history, not a dry run.
pub fn gc_everything() -> oncelake::gc::GcOptions {
    oncelake::gc::GcOptions {
        dry_run: false,
        grace: Duration::ZERO,
        retain: Duration::ZERO,
    }
}

/// A new store `name` with `options` in a new temporary directory (which must outlive it).
pub fn open_new(name: &str, options: Options) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(dir.path().join(name), options).unwrap();
    (dir, store)
}

/// A store of its own, opened by `open` (one of the `open_*with_clock` here) in a new temporary
/// directory, on a manual clock standing at `t0`: the directory (which must outlive the store),
/// the clock and the store.
pub fn on_clock(
    t0: u64,
    open: fn(&Path, &ManualClock) -> Store,
) -> (tempfile::TempDir, ManualClock, Store) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(t0);
    let store = open(&dir.path().join("s"), &clock);
    (dir, clock, store)
}

/// Opens (or creates) a store at `dir` with [`relaxed`] durability whose leases follow `clock`.
pub fn open_relaxed_with_clock(dir: &Path, clock: &ManualClock) -> Store {
    Store::open_with(
        dir,
        Options {
            clock: Arc::new(clock.clone()),
            durability: relaxed(),
            ..Options::default()
        },
    )
    .unwrap()
}

/// Opens (or creates) a store at `dir` with [`relaxed`] durability and the wall clock.
pub fn open_relaxed(dir: &Path) -> Store {
    Store::open_with(
        dir,
        Options {
            durability: relaxed(),
            ..Options::default()
        },
    )
    .unwrap()
}

/// The lease of a granted claim; any other answer fails the test.
pub fn granted(c: ClaimOutcome) -> Lease {
    match c {
        ClaimOutcome::Granted { lease, .. } => lease,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Commits `bytes` for `lease`'s unit and source version under its token; that unit's outcome.
pub fn commit_fenced(store: &Store, lease: &Lease, bytes: &[u8]) -> Outcome {
    let staged = store.stage_bytes(bytes).unwrap();
    store
        .commit(Batch::new().put_fenced(&lease.unit, lease.source_version, &staged, lease.token))
        .unwrap()
        .units[0]
        .outcome
}

/// A late commit under `old` once `new` took its unit over is fenced, naming both tokens, and
/// leaves the unit's entry as it was.
#[track_caller]
pub fn late_commit_is_fenced(store: &Store, old: &Lease, new: &Lease) {
    let before = store.get(&old.unit).unwrap();
    assert_eq!(
        commit_fenced(store, old, b"late"),
        Outcome::Fenced {
            token: old.token,
            newest_token: new.token
        }
    );
    assert_eq!(
        store.get(&old.unit).unwrap(),
        before,
        "a fenced commit changes nothing"
    );
}

/// The lease of a granted claim and whether it took an expired lease over; any other answer
/// fails the test.
pub fn granted_taking_over(c: ClaimOutcome) -> (Lease, bool) {
    match c {
        ClaimOutcome::Granted { lease, took_over } => (lease, took_over),
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// The store's group commit so far, for a test's closing line: the groups and the mean units in
/// one.
pub fn groups_line(store: &Store) -> String {
    let m = store.metrics();
    format!(
        "{} commit groups, mean group {:.2} units",
        m.groups,
        m.group_units.mean()
    )
}

/// A scratch directory named `prefix…`, in memory when the machine has /dev/shm: tests that simulate their
/// crashes need no real fsync, and thousands of small files then take seconds, not minutes.
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new().prefix(prefix).tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// Copies the directory tree `from` to `to` (created if missing).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// Calls `seen` with every file and directory below `dir` (a directory before what it holds) and
/// whether it is a directory.
pub fn walk(dir: &Path, seen: &mut dyn FnMut(&Path, bool)) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let is_dir = p.is_dir();
            seen(&p, is_dir);
            if is_dir {
                stack.push(p);
            }
        }
    }
}

/// Every file and directory below `dir` with its bytes (directories end in `/`, with no bytes): the
/// "nothing changed" oracle.
pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    walk(dir, &mut |p, is_dir| {
        if is_dir {
            out.insert(format!("{}/", p.display()), Vec::new());
        } else {
            out.insert(p.display().to_string(), std::fs::read(p).unwrap());
        }
    });
    out
}

/// Every file below `dir` by its path relative to `dir`, with its bytes.
pub fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    walk(dir, &mut |p, is_dir| {
        if !is_dir {
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            out.insert(rel, std::fs::read(p).unwrap());
        }
    });
    out
}

/// Every file below `dir` whose path `keep` accepts, not entering hidden directories nor those named in
/// `skipped` (build output, caches). A missing `dir` yields nothing.
pub fn files_below(
    dir: &Path,
    skipped: &[&str],
    keep: &dyn Fn(&Path) -> bool,
    out: &mut Vec<PathBuf>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && !skipped.contains(&name.as_str()) {
                files_below(&path, skipped, keep, out);
            }
        } else if keep(&path) {
            out.push(path);
        }
    }
}

/// Store options whose file operations go through the fault model of `plan`, on `clock`.
pub fn faulty_options(
    plan: &std::sync::Arc<oncelake::fault::FaultPlan>,
    clock: &oncelake::ManualClock,
) -> oncelake::Options {
    oncelake::Options {
        vfs: std::sync::Arc::new(oncelake::fault::FaultyVfs::new(
            std::sync::Arc::new(oncelake::vfs::RealVfs),
            plan.clone(),
        )),
        faults: Some(plan.clone()),
        clock: std::sync::Arc::new(clock.clone()),
        ..oncelake::Options::default()
    }
}

/// A store created at `path` on the real file system, then reopened with its file operations
/// going through a fresh fault plan: the plan and the store.
pub fn created_then_faulty(
    path: &Path,
    clock: &ManualClock,
) -> (Arc<oncelake::fault::FaultPlan>, Store) {
    created_then_through(path, clock, oncelake::fault::FaultPlan::new())
}

/// [`created_then_faulty`] in a new directory, on a clock at `t0`: the directory (removed on
/// drop), the store's path, the clock, the plan and the store.
pub fn new_faulty_store(
    t0: u64,
) -> (
    tempfile::TempDir,
    PathBuf,
    ManualClock,
    Arc<oncelake::fault::FaultPlan>,
    Store,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let clock = ManualClock::new(t0);
    let (plan, store) = created_then_faulty(&path, &clock);
    (dir, path, clock, plan, store)
}

/// [`created_then_faulty`] with a plan that loses every unsynced write at a power cut, from the
/// first operation of the faulty open: what the store acknowledges survives in its log alone.
pub fn created_then_losing_unsynced(
    path: &Path,
    clock: &ManualClock,
) -> (Arc<oncelake::fault::FaultPlan>, Store) {
    let plan = oncelake::fault::FaultPlan::new();
    plan.lose_unsynced_writes(true);
    created_then_through(path, clock, plan)
}

fn created_then_through(
    path: &Path,
    clock: &ManualClock,
    plan: Arc<oncelake::fault::FaultPlan>,
) -> (Arc<oncelake::fault::FaultPlan>, Store) {
    drop(Store::open_with(path, real_options(clock)).unwrap());
    let store = Store::open_with(path, faulty_options(&plan, clock)).unwrap();
    (plan, store)
}

/// Store options on the real file system, on `clock`.
pub fn real_options(clock: &oncelake::ManualClock) -> oncelake::Options {
    oncelake::Options {
        clock: std::sync::Arc::new(clock.clone()),
        ..oncelake::Options::default()
    }
}

/// A caller's clock that panics at one reading, when armed (quietly: the panic unwinds with
/// `resume_unwind`, so no panic hook prints it); otherwise it reads `inner`.
#[derive(Debug)]
pub struct PanickyClock {
    inner: ManualClock,
    calls: std::sync::atomic::AtomicU64,
    panic_at: std::sync::atomic::AtomicU64,
}

impl PanickyClock {
    /// A clock that reads `inner` (sharing its time) and is not armed.
    pub fn new(inner: &ManualClock) -> Arc<PanickyClock> {
        Arc::new(PanickyClock {
            inner: inner.clone(),
            calls: Default::default(),
            panic_at: Default::default(),
        })
    }

    /// Arms the clock: the `n`-th reading from now (1: the next) panics.
    pub fn panic_in(&self, n: u64) {
        use std::sync::atomic::Ordering::SeqCst;
        self.panic_at.store(self.calls.load(SeqCst) + n, SeqCst);
    }

    /// Disarms the clock; returns whether the armed reading came (and panicked).
    pub fn disarm(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let at = self.panic_at.swap(0, SeqCst);
        at != 0 && self.calls.load(SeqCst) >= at
    }
}

impl oncelake::Clock for PanickyClock {
    fn now_ms(&self) -> u64 {
        use std::sync::atomic::Ordering::SeqCst;
        let n = self.calls.fetch_add(1, SeqCst) + 1;
        if n == self.panic_at.load(SeqCst) {
            std::panic::resume_unwind(Box::new(format!("injected clock panic at reading {n}")));
        }
        oncelake::Clock::now_ms(&self.inner)
    }
}

/// The harness's name of test `name` in the module `module_path` (its `module_path!()`): what a
/// test passes with `--exact` to run one test of its own binary in a child process.
pub fn test_path(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_string(),
    }
}
