//! The worked example of `seeds/000` run for real (SPEC R18): worker threads compute outputs for
//! logical units, stage them and commit them into a store, while the scheduler hands a fraction of
//! the units to two workers at once (rebalancing) and, optionally, workers crash mid-write.
//!
//! Nothing here is computed from a formula. Every count in the [`SimReport`] is read back from the
//! engine (its metrics and its manifest) after the threads ran:
//!
//! - **Optimistic mode** (SPEC R10, the seed's "distributed idempotency check"): a worker checks
//!   whether the unit is done, computes, stages and commits through [`Store::run_optimistic`]; a
//!   unit handed to two workers is computed twice and the second commit collapses as a duplicate.
//! - **Coordinated mode** (SPEC R9/R11): every attempt goes through [`Store::run_once`], so the
//!   second worker of a doubly handed unit is answered "held" or "already done" by its claim and
//!   does not compute.
//!
//! # Overlap
//!
//! The seed's overlap is "two workers both picking up the same partition before either commits".
//! The scheduler is one shared queue that workers pop with an atomic cursor; an overlapped unit is
//! enqueued twice, back to back, and both copies share a *rendezvous*: a worker that picked a copy
//! (and, in optimistic mode, found the unit not yet done) waits there until the other copy has been
//! picked too. The second copy is always popped by a different worker (the first one is waiting),
//! so each overlapped unit really is in the hands of two workers at the same time; what they then
//! do — compute twice, or be stopped by the claim — is the engine's doing and is measured.
//!
//! # Crashes
//!
//! With a crash rate, an attempt may "die" mid-write: the worker writes part of its output into a
//! file in `staging/` and abandons it — and, in coordinated mode, the lease it was granted (not
//! released, as a dead process cannot release). After a round, the scheduler re-offers every unit
//! the manifest does not have (a reconcile), the simulated clock moves past the lease TTL so that
//! abandoned leases expire and are taken over with a higher token, and the workers go again.
//!
//! # The store
//!
//! The store is a real one in `store_dir`, opened with a [`ManualClock`] (leases expire only when
//! the scheduler moves time, so no live lease can expire under a slow thread and the counts are
//! exact), [`Durability::Relaxed`] with a final [`Store::flush`], and a file seam that skips fsync:
//! the simulation measures coordination and the commit path (staging, publish, group commit, redb
//! transactions, claims, fencing), not the disk's sync latency, which `bench commit` measures.
//!
//! # Orphans
//!
//! At the end, abandoned staging files and objects that no entry references are removed and
//! counted. This is a minimal stand-in that is only valid on a quiescent store (no writer running,
//! single-version history); it is to be replaced by the real garbage collector (`gc`, SPEC R14) when
//! the branches merge.

use crate::clock::{Clock, ManualClock, SystemClock};
use crate::error::{Error, IoContext, Result};
use crate::object::ObjectId;
use crate::run::{RunError, RunOutcome};
use crate::store::{Durability, Options, Store};
use crate::vfs::{RealVfs, Vfs, VfsFile};
use parking_lot::{Condvar, Mutex};
use std::collections::HashSet;
use std::convert::Infallible;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The source version every simulated unit is produced at.
const VERSION: u64 = 1;
/// The lease TTL of simulated workers. The simulated clock only moves between rounds, so a live
/// lease never expires while its worker runs.
const TTL: Duration = Duration::from_secs(30);
/// More rounds than this means crashes never stop: give up rather than loop.
const MAX_ROUNDS: u32 = 10_000;
/// How often the store is made durable while workers run.
const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Optimistic (no claims) or coordinated (claims, `run_once`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimMode {
    /// Any worker computes any unit; duplicates collapse at commit (SPEC R10).
    Optimistic,
    /// Workers claim units through `run_once` (SPEC R9, R11).
    Coordinated,
}

impl SimMode {
    /// `optimistic` or `coordinated`.
    pub fn name(&self) -> &'static str {
        match self {
            SimMode::Optimistic => "optimistic",
            SimMode::Coordinated => "coordinated",
        }
    }
}

/// What to simulate. [`SimConfig::new`] gives the worked example of the seed.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Worker threads.
    pub workers: usize,
    /// Logical units.
    pub units: u64,
    /// Fraction of units handed to two workers at once (0..=1).
    pub overlap: f64,
    /// Optimistic or coordinated.
    pub mode: SimMode,
    /// Probability that an attempt crashes mid-write (0..1).
    pub crash_rate: f64,
    /// Seeds which units overlap and which attempts crash.
    pub seed: u64,
    /// A missing or empty directory for the store.
    pub store_dir: PathBuf,
    /// Size of each unit's output, bytes.
    pub object_bytes: usize,
}

impl SimConfig {
    /// The worked example: 10 workers, 100,000 units, 2% overlap, optimistic, no crashes.
    pub fn new(store_dir: impl Into<PathBuf>) -> Self {
        SimConfig {
            workers: 10,
            units: 100_000,
            overlap: 0.02,
            mode: SimMode::Optimistic,
            crash_rate: 0.0,
            seed: 1,
            store_dir: store_dir.into(),
            object_bytes: 256,
        }
    }

    /// The number of units handed to two workers: `overlap × units`, rounded.
    pub fn overlapped_units(&self) -> u64 {
        ((self.overlap * self.units as f64).round() as u64).min(self.units)
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidRequest(m));
        if self.workers == 0 || self.workers > 4096 {
            return bad(format!(
                "workers is {}; use 1..=4096 worker threads",
                self.workers
            ));
        }
        if self.units == 0 || self.units > u32::MAX as u64 {
            return bad(format!("units is {}; use 1..=4294967295", self.units));
        }
        if !(0.0..=1.0).contains(&self.overlap) {
            return bad(format!(
                "overlap is {}; use a fraction from 0 to 1 (0.02 = 2%)",
                self.overlap
            ));
        }
        if !(0.0..1.0).contains(&self.crash_rate) {
            return bad(format!(
                "crash rate is {}; use a fraction from 0 up to (not including) 1",
                self.crash_rate
            ));
        }
        if self.workers < 2 && self.overlapped_units() > 0 {
            return bad("overlap hands a unit to two workers at once; use at least 2 workers or --overlap 0".into());
        }
        if self.object_bytes < 2 {
            return bad("object_bytes must be at least 2".into());
        }
        Ok(())
    }
}

/// What a simulation measured, all read back from the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct SimReport {
    /// The mode simulated.
    pub mode: SimMode,
    /// Worker threads.
    pub workers: usize,
    /// Logical units.
    pub units: u64,
    /// Units the scheduler handed to two workers at once.
    pub overlapped: u64,
    /// Work closures that ran to completion (engine counter `computations`).
    pub computations: u64,
    /// Of those, the ones whose output did not become the entry (engine counter
    /// `redundant_computations`).
    pub redundant: u64,
    /// Attempts that crashed mid-write (their work was lost).
    pub crashed_attempts: u64,
    /// Attempts that found the unit already done and did not compute.
    pub already_done: u64,
    /// Attempts that found the unit held by another worker and did not compute.
    pub busy: u64,
    /// Entries in the manifest at the end.
    pub entries: u64,
    /// Wasted share of all work: (redundant + crashed) / (computations + crashed).
    pub wasted_fraction: f64,
    /// Commits collapsed as duplicates (engine counter).
    pub duplicates_collapsed: u64,
    /// Claims granted (engine counter).
    pub claims_granted: u64,
    /// Claims answered "held by another worker" (engine counter).
    pub claims_held: u64,
    /// Claims answered "already done" (engine counter).
    pub claims_already_done: u64,
    /// Expired leases taken over (engine counter).
    pub claims_taken_over: u64,
    /// Commits rejected because of an outdated fencing token (engine counter).
    pub fenced_rejections: u64,
    /// Commit groups (one redb write transaction each) the engine wrote.
    pub commit_groups: u64,
    /// Mean operations (commits, claims) per commit group.
    pub mean_group_ops: f64,
    /// Rounds the scheduler needed (1 without crashes).
    pub rounds: u32,
    /// Abandoned staging files and unreferenced objects removed at the end.
    pub orphans_collected: u64,
    /// Orphans still there after the cleanup (must be 0).
    pub orphans_left: u64,
    /// Whether replaying the commit log reproduced the manifest (invariant I7).
    pub replay_clean: bool,
    /// Wall time of the whole simulation, store creation to final checks.
    pub elapsed: Duration,
}

/// Progress: (attempts finished, attempts scheduled so far). Called from the calling thread.
pub type Progress<'a> = &'a dyn Fn(u64, u64);

/// Runs the simulation into a new store at `cfg.store_dir` and reports what it measured.
///
/// ```
/// # fn main() -> oncelake::Result<()> {
/// use oncelake::simulate::{simulate, SimConfig, SimMode};
/// let dir = tempfile::tempdir().unwrap();
/// let cfg = SimConfig { units: 500, workers: 4, overlap: 0.1, ..SimConfig::new(dir.path().join("sim")) };
/// let r = simulate(&cfg, &|_, _| {})?;
/// assert_eq!((r.computations, r.redundant, r.entries), (550, 50, 500));
/// # Ok(()) }
/// ```
pub fn simulate(cfg: &SimConfig, progress: Progress<'_>) -> Result<SimReport> {
    cfg.validate()?;
    let start = Instant::now();
    let clock = ManualClock::new(SystemClock.now_ms());
    let options = Options {
        durability: Durability::Relaxed {
            max_delay: Duration::from_secs(1),
        },
        clock: Arc::new(clock.clone()),
        vfs: Arc::new(NoSyncVfs),
        ..Options::default()
    };
    if cfg.store_dir.join(crate::MARKER_FILE).exists() {
        return Err(Error::InvalidRequest(format!(
            "{} already holds a store; the simulation needs a missing or empty directory",
            cfg.store_dir.display()
        )));
    }
    let store = Store::open_with(&cfg.store_dir, options)?;
    let sim = Sim {
        cfg,
        store: &store,
        keys: (0..cfg.units).map(unit_key).collect(),
        crashed: AtomicU64::new(0),
        crash_seq: AtomicU64::new(0),
        already_done: AtomicU64::new(0),
        busy: AtomicU64::new(0),
    };

    let overlapped = cfg.overlapped_units();
    let mut tasks = first_round(cfg.units, overlapped, cfg.seed);
    let (mut done_before, mut scheduled) = (0u64, tasks.len() as u64);
    let mut rounds = 0;
    loop {
        rounds += 1;
        let finished = sim.round(rounds, &tasks, &|done| {
            progress(done_before + done, scheduled)
        })?;
        done_before += finished;
        // Reconcile: every unit the manifest does not have goes again. Without crashes this is
        // empty; it also proves that every unit has its entry.
        let missing: Vec<u32> = (0..cfg.units as u32)
            .filter(|&u| !matches!(store.is_done(&sim.keys[u as usize], VERSION), Ok(true)))
            .collect();
        if missing.is_empty() {
            break;
        }
        if rounds >= MAX_ROUNDS {
            return Err(Error::InvalidRequest(format!(
                "{} units still missing after {rounds} rounds; lower the crash rate",
                missing.len()
            )));
        }
        // Time passes: the leases abandoned by crashed workers expire and may be taken over.
        clock.advance_ms(TTL.as_millis() as u64 + 1_000);
        tasks = missing
            .into_iter()
            .map(|unit| Task { unit, pair: None })
            .collect();
        scheduled += tasks.len() as u64;
    }
    progress(done_before, scheduled);
    store.flush()?;

    let (collected, bytes) = collect_orphans(&store)?;
    crate::metrics::add(&store.inner.metrics.c.orphans_collected, collected);
    crate::metrics::add(&store.inner.metrics.c.bytes_collected, bytes);
    let left = count_orphans(&store)?;
    let snap = store.snapshot()?;
    let entries = snap.iter()?.count() as u64;
    let replay_clean = crate::replay::replay(&snap)?.is_clean();
    drop(snap);

    let m = store.metrics();
    let crashed = sim.crashed.load(Ordering::Relaxed);
    let work = m.computations + crashed;
    Ok(SimReport {
        mode: cfg.mode,
        workers: cfg.workers,
        units: cfg.units,
        overlapped,
        computations: m.computations,
        redundant: m.redundant_computations,
        crashed_attempts: crashed,
        already_done: sim.already_done.load(Ordering::Relaxed),
        busy: sim.busy.load(Ordering::Relaxed),
        entries,
        wasted_fraction: if work == 0 {
            0.0
        } else {
            (m.redundant_computations + crashed) as f64 / work as f64
        },
        duplicates_collapsed: m.duplicates_collapsed,
        claims_granted: m.claims_granted,
        claims_held: m.claims_held,
        claims_already_done: m.claims_already_done,
        claims_taken_over: m.claims_taken_over,
        fenced_rejections: m.fenced_rejections,
        commit_groups: m.groups,
        mean_group_ops: m.group_units.mean(),
        rounds,
        orphans_collected: collected,
        orphans_left: left,
        replay_clean,
        elapsed: start.elapsed(),
    })
}

/// The key of unit `i`: one partition per customer, as in the seed.
fn unit_key(i: u64) -> String {
    format!("orders/customer={i:06}/date=2026-11-29")
}

/// The unit's output: a deterministic function of (unit, version), so that two workers computing
/// the same unit produce the same object.
fn compute(unit: &str, version: u64, size: usize) -> Vec<u8> {
    let mut h = blake3::Hasher::new();
    h.update(unit.as_bytes());
    h.update(&version.to_le_bytes());
    let mut out = vec![0u8; size];
    h.finalize_xof().fill(&mut out);
    out
}

/// One item of the scheduler's queue.
struct Task {
    unit: u32,
    /// Shared by the two copies of an overlapped unit.
    pair: Option<Arc<Rendezvous>>,
}

/// Where the two workers holding an overlapped unit meet: each arrives after picking it, and
/// neither goes on before both hold it.
#[derive(Default)]
struct Rendezvous {
    arrived: Mutex<u8>,
    both: Condvar,
}

impl Rendezvous {
    /// Waits for the other copy's worker; gives up if the simulation is aborting.
    fn meet(&self, abort: &AtomicBool) {
        let mut n = self.arrived.lock();
        *n += 1;
        if *n >= 2 {
            self.both.notify_all();
            return;
        }
        while *n < 2 && !abort.load(Ordering::Relaxed) {
            self.both.wait_for(&mut n, Duration::from_millis(20));
        }
    }
}

/// The first round's queue: every unit once, in order, and the `overlapped` units chosen by the
/// seed twice, back to back, sharing a rendezvous.
fn first_round(units: u64, overlapped: u64, seed: u64) -> Vec<Task> {
    let mut order: Vec<u32> = (0..units as u32).collect();
    let mut twice = vec![false; units as usize];
    let mut state = seed;
    // A partial Fisher-Yates shuffle picks `overlapped` distinct units.
    for i in 0..overlapped as usize {
        let j = i + (splitmix(&mut state) % (units - i as u64)) as usize;
        order.swap(i, j);
        twice[order[i] as usize] = true;
    }
    let mut tasks = Vec::with_capacity((units + overlapped) as usize);
    for unit in 0..units as u32 {
        if twice[unit as usize] {
            let r = Arc::new(Rendezvous::default());
            tasks.push(Task {
                unit,
                pair: Some(r.clone()),
            });
            tasks.push(Task {
                unit,
                pair: Some(r),
            });
        } else {
            tasks.push(Task { unit, pair: None });
        }
    }
    tasks
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in [0, 1) fixed by (seed, round, task).
fn roll(seed: u64, round: u32, task: usize) -> f64 {
    let mut s = seed ^ ((round as u64) << 40) ^ task as u64;
    let _ = splitmix(&mut s);
    (splitmix(&mut s) >> 11) as f64 / (1u64 << 53) as f64
}

struct Sim<'a> {
    cfg: &'a SimConfig,
    store: &'a Store,
    keys: Vec<String>,
    crashed: AtomicU64,
    crash_seq: AtomicU64,
    already_done: AtomicU64,
    busy: AtomicU64,
}

impl Sim<'_> {
    /// Runs one round of `tasks` on the worker threads; returns the attempts finished.
    fn round(&self, round: u32, tasks: &[Task], progress: &dyn Fn(u64)) -> Result<u64> {
        let cursor = AtomicUsize::new(0);
        let finished = AtomicU64::new(0);
        let abort = AtomicBool::new(false);
        let first_error: Mutex<Option<Error>> = Mutex::new(None);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.cfg.workers)
                .map(|w| {
                    let (cursor, finished, abort, first_error) =
                        (&cursor, &finished, &abort, &first_error);
                    s.spawn(move || {
                        let worker = format!("worker-{w}");
                        while !abort.load(Ordering::Relaxed) {
                            let i = cursor.fetch_add(1, Ordering::Relaxed);
                            let Some(task) = tasks.get(i) else { break };
                            if let Err(e) = self.attempt(&worker, round, i, task, abort) {
                                abort.store(true, Ordering::Relaxed);
                                first_error.lock().get_or_insert(e);
                                break;
                            }
                            finished.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            let mut last_flush = Instant::now();
            while !handles.iter().all(|h| h.is_finished()) {
                progress(finished.load(Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(5));
                // redb's non-durable commits pile up work for the next durable one: make the store
                // durable on a timer (a synced, empty group through the commit queue), as
                // `Durability::Relaxed { max_delay }` does when its clock moves.
                if last_flush.elapsed() >= FLUSH_EVERY {
                    if let Err(e) = self.store.flush() {
                        abort.store(true, Ordering::Relaxed);
                        first_error.lock().get_or_insert(e);
                    }
                    last_flush = Instant::now();
                }
            }
        });
        progress(finished.load(Ordering::Relaxed));
        match first_error.into_inner() {
            Some(e) => Err(e),
            None => Ok(finished.into_inner()),
        }
    }

    /// One worker's attempt at one task.
    fn attempt(
        &self,
        worker: &str,
        round: u32,
        i: usize,
        task: &Task,
        abort: &AtomicBool,
    ) -> Result<()> {
        let unit = self.keys[task.unit as usize].as_str();
        let crash =
            self.cfg.crash_rate > 0.0 && roll(self.cfg.seed, round, i) < self.cfg.crash_rate;
        let size = self.cfg.object_bytes;
        match self.cfg.mode {
            SimMode::Optimistic => {
                // The seed's distributed idempotency check, then the rebalanced partner, if any.
                let done = self.store.is_done(unit, VERSION);
                if let Some(r) = &task.pair {
                    r.meet(abort);
                }
                if done? {
                    self.already_done.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                if crash {
                    return self.crash(unit, compute(unit, VERSION, size));
                }
                self.store
                    .run_optimistic(unit, VERSION, || {
                        Ok::<_, Infallible>(compute(unit, VERSION, size))
                    })
                    .map_err(engine)?;
            }
            SimMode::Coordinated => {
                if let Some(r) = &task.pair {
                    r.meet(abort);
                }
                if crash {
                    // A worker that dies mid-write: granted, computes, writes part, vanishes —
                    // without releasing its lease (a dead process cannot).
                    match self.store.claim(unit, VERSION, worker, TTL)? {
                        crate::ClaimOutcome::Granted { .. } => {
                            return self.crash(unit, compute(unit, VERSION, size))
                        }
                        crate::ClaimOutcome::Held { .. } => {
                            self.busy.fetch_add(1, Ordering::Relaxed)
                        }
                        crate::ClaimOutcome::AlreadyDone(_) => {
                            self.already_done.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                    return Ok(());
                }
                let outcome = self
                    .store
                    .run_once(unit, VERSION, worker, TTL, || {
                        Ok::<_, Infallible>(compute(unit, VERSION, size))
                    })
                    .map_err(engine)?;
                match outcome {
                    RunOutcome::Processed(u) => debug_assert!(
                        u.outcome.is_success(),
                        "a simulated worker's commit was rejected: {u:?}"
                    ),
                    RunOutcome::AlreadyDone(_) => {
                        self.already_done.fetch_add(1, Ordering::Relaxed);
                    }
                    RunOutcome::BusyElsewhere { .. } => {
                        self.busy.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(())
    }

    /// Leaves half of `output` in a staging file, as a worker killed mid-write would.
    fn crash(&self, unit: &str, output: Vec<u8>) -> Result<()> {
        let n = self.crash_seq.fetch_add(1, Ordering::Relaxed);
        let path = self
            .store
            .path()
            .join("staging")
            .join(format!("sim-crash-{n}.part"));
        std::fs::write(&path, &output[..output.len() / 2]).ctx(|| {
            format!(
                "write the crashed attempt at {unit:?} to {}",
                path.display()
            )
        })?;
        self.crashed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn engine(e: RunError<Infallible>) -> Error {
    match e {
        RunError::Engine(e) => e,
        RunError::Work(never) => match never {},
    }
}

/// Removes every staging file and every object no current entry references or staging pins.
///
/// Stand-in for the real GC (SPEC R14), valid only here: no writer runs (so no staging file is in
/// flight) and each unit has one version (so the current manifest is everything the retention
/// window references). Returns (files removed, bytes freed).
fn collect_orphans(store: &Store) -> Result<(u64, u64)> {
    let (mut n, mut bytes) = (0, 0);
    for path in staging_files(store)? {
        bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        std::fs::remove_file(&path).ctx(|| format!("remove {}", path.display()))?;
        n += 1;
    }
    let referenced = referenced(store)?;
    let pins = store.inner.stager.pins.lock();
    for (id, path) in objects(store)? {
        if !referenced.contains(&id) && !pins.contains_key(&id) {
            bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            std::fs::remove_file(&path).ctx(|| format!("remove {}", path.display()))?;
            n += 1;
        }
    }
    Ok((n, bytes))
}

/// Staging files plus objects that no current entry references.
fn count_orphans(store: &Store) -> Result<u64> {
    let referenced = referenced(store)?;
    let unreferenced = objects(store)?
        .into_iter()
        .filter(|(id, _)| !referenced.contains(id))
        .count();
    Ok(staging_files(store)?.len() as u64 + unreferenced as u64)
}

fn referenced(store: &Store) -> Result<HashSet<ObjectId>> {
    let mut set = HashSet::new();
    for e in store.snapshot()?.iter()? {
        set.insert(e?.object.id);
    }
    Ok(set)
}

fn staging_files(store: &Store) -> Result<Vec<PathBuf>> {
    list(&store.inner.stager.staging)
}

/// Every published object: (id, path). Files whose names are not object ids are left alone.
fn objects(store: &Store) -> Result<Vec<(ObjectId, PathBuf)>> {
    let mut out = Vec::new();
    for fanout in list(&store.inner.stager.objects)? {
        if !fanout.is_dir() {
            continue;
        }
        for path in list(&fanout)? {
            let id = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<ObjectId>().ok());
            if let Some(id) = id {
                out.push((id, path));
            }
        }
    }
    Ok(out)
}

fn list(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).ctx(|| format!("list {}", dir.display()))? {
        out.push(e.ctx(|| format!("list {}", dir.display()))?.path());
    }
    Ok(out)
}

/// The real file system without fsync: the simulation's objects need not survive power loss, and
/// sync latency (measured by `bench commit`) would hide the coordination being measured.
#[derive(Debug, Clone, Copy)]
struct NoSyncVfs;

struct NoSyncFile(Box<dyn VfsFile>);

impl Write for NoSyncFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl VfsFile for NoSyncFile {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Vfs for NoSyncVfs {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        Ok(Box::new(NoSyncFile(RealVfs.create_new(path)?)))
    }
    fn link_no_replace(&self, from: &Path, to: &Path) -> io::Result<bool> {
        RealVfs.link_no_replace(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        RealVfs.remove(path)
    }
    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
    fn set_read_only(&self, path: &Path) -> io::Result<()> {
        RealVfs.set_read_only(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        RealVfs.create_dir_all(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_round_doubles_exactly_the_overlapped_units_back_to_back() {
        let tasks = first_round(1000, 37, 7);
        assert_eq!(tasks.len(), 1037);
        let mut doubled = HashSet::new();
        for w in tasks.windows(2) {
            if w[0].unit == w[1].unit {
                assert!(Arc::ptr_eq(
                    w[0].pair.as_ref().unwrap(),
                    w[1].pair.as_ref().unwrap()
                ));
                doubled.insert(w[0].unit);
            }
        }
        assert_eq!(doubled.len(), 37);
        assert_eq!(
            tasks.iter().filter(|t| t.pair.is_some()).count(),
            74,
            "only doubled units carry a rendezvous"
        );
    }

    #[test]
    fn rolls_are_uniform_enough() {
        let n = 100_000;
        let hits = (0..n).filter(|&i| roll(3, 1, i) < 0.05).count();
        assert!((4_000..6_000).contains(&hits), "{hits}");
    }

    #[test]
    fn bad_configs_are_refused_with_a_reason() {
        let base = SimConfig::new("/nonexistent/never-created");
        for cfg in [
            SimConfig {
                workers: 0,
                ..base.clone()
            },
            SimConfig {
                overlap: 1.5,
                ..base.clone()
            },
            SimConfig {
                crash_rate: 1.0,
                ..base.clone()
            },
            SimConfig {
                workers: 1,
                ..base.clone()
            },
            SimConfig {
                units: 0,
                ..base.clone()
            },
        ] {
            assert!(matches!(
                simulate(&cfg, &|_, _| {}),
                Err(Error::InvalidRequest(_))
            ));
        }
    }
}
