//! The worked example of `seeds/000` run for real (SPEC R18): worker threads run logical units
//! through the engine's own [`Store::run_optimistic`] (optimistic mode, the seed's "distributed
//! idempotency check") or [`Store::run_once`] (coordinated mode), while the scheduler hands a
//! fraction of the units to two workers at once (rebalancing) and, optionally, workers crash in the
//! middle of their work.
//!
//! Nothing here is computed from a formula, and the simulation counts nothing the engine can count:
//! `computations`, `redundant_computations`, `runs_already_done`, `runs_busy`, the claim and commit
//! counters are the engine's metrics ([`Store::metrics`]), counted in `run.rs` and the commit path
//! where the work and the decisions really happen. The manifest entries, the orphans and the replay
//! check are read back from the store. The only figure of the simulation's own is the number of
//! crashes it injected.
//!
//! # Schedule
//!
//! Each overlapped unit is queued twice, as two adjacent tasks, so that two workers pick it up
//! one right after the other. What happens then depends on the [`Schedule`]:
//!
//! - [`Schedule::Premise`] (the default) reproduces the seed's premise — "two workers both picking
//!   up the same partition before either commits". The two tasks share a *rendezvous*, met inside
//!   the work closure: a worker whose work starts waits there until the other worker of the unit
//!   has either started its work too or got its answer without running it (already done, busy).
//!   So neither commits before both have tried the unit. In optimistic mode both checks find the
//!   unit not done, both work closures run and one output collapses as a duplicate at commit: the
//!   engine counts 2 computations, 1 redundant. In coordinated mode the second worker's claim finds
//!   the first worker's live lease: `run_once` answers busy and the work runs once, 0 redundant.
//!   The worked example gives exactly 102,000 / 2,000 and 100,000 / 0.
//! - [`Schedule::Natural`]: no rendezvous; real timing decides whether the second worker comes
//!   while the first works (optimistic: redundant work; coordinated: busy) or after its commit
//!   (already done). The report says what happened.
//!
//! No deadlock: a worker holds one task at a time and tasks are handed out in queue order. Only
//! the first task of a pair can wait for a task nobody has taken yet (its partner, the next task
//! of the queue), and at most one worker can be in that position at a time (the holder of the
//! newest first task), so with two or more workers someone is free to take the partner. A worker
//! holding the second task of a pair never waits: its partner was taken earlier and arrives
//! without waiting on anything. With one worker the rendezvous is skipped (the second copy then
//! finds the unit done).
//!
//! # Crashes
//!
//! With a crash rate, an attempt may "die" in the middle of its work: it writes half of its output
//! into a file in `staging/` and unwinds out of the engine call without running the panic hook,
//! as a killed worker would stop — in coordinated mode it leaves its lease behind (`run_once` never
//! releases a lease on unwinding; a dead process cannot release). After a round, the scheduler
//! re-offers every unit the manifest does not have (a reconcile), the simulated clock moves past
//! the lease TTL so that abandoned leases expire and are taken over with a higher token, and the
//! workers go again. A crashed attempt counts as a computation (its work ran), not as redundant
//! (it produced nothing).
//!
//! # The store
//!
//! The store is a real one in `store_dir` (the CLI puts it in `/dev/shm` where that exists, else
//! the temp dir), opened with the default options but two: a [`ManualClock`] — leases expire only
//! when the scheduler moves time, so no live lease can expire under a slow thread and the counts
//! are exact — and relaxed durability (group commits synced at most 50 ms apart, and at the clean
//! close). Every claim and every commit is its own operation on the group-commit path, ~2 per unit,
//! so the simulation writes ~40,000 redb transactions per 20,000 units; without the per-group
//! fsync that costs ~25% less CPU (measured on tmpfs: 9.6 s instead of 12.5 s of CPU for both
//! modes at 20,000 units). No count depends on durability: the crashes are simulated, the
//! process does not die.
//!
//! # Orphans
//!
//! At the end the real garbage collector ([`Store::gc`], SPEC R14) runs with no grace and no
//! retention: it removes the abandoned staging files (named `sim-crash-<n>.part`, never a name the
//! stager is writing) and any object no entry references; `orphans_collected` is what it reports.
//! A dry-run GC afterwards must find nothing (`orphans_left`).

use crate::clock::{Clock, ManualClock, SystemClock};
use crate::error::{Error, IoContext, Result};
use crate::gc::GcOptions;
use crate::run::{RunError, RunOutcome};
use crate::store::{Options, Store};
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
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

/// Optimistic (no claims) or coordinated (claims, `run_once`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimMode {
    /// Any worker computes any unit; duplicates collapse at commit (SPEC R10), through
    /// [`Store::run_optimistic`].
    Optimistic,
    /// Workers claim units through [`Store::run_once`] (SPEC R9, R11).
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

/// When the two workers of an overlapped unit work on it: see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// The seed's premise: both workers of an overlapped unit try it before either commits (a
    /// rendezvous inside the work).
    Premise,
    /// Real timing decides.
    Natural,
}

impl Schedule {
    /// `premise` or `natural`.
    pub fn name(&self) -> &'static str {
        match self {
            Schedule::Premise => "premise",
            Schedule::Natural => "natural",
        }
    }

    /// One sentence saying what the schedule does, for reports.
    pub fn describe(&self) -> &'static str {
        match self {
            Schedule::Premise => {
                "the seed's premise: both workers of each overlapped unit try it before either \
                 commits (they meet inside the work)"
            }
            Schedule::Natural => {
                "natural: the two workers of an overlapped unit take it one right after the other \
                 and real timing decides what each finds"
            }
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
    /// When the two workers of an overlapped unit work on it.
    pub schedule: Schedule,
    /// Probability that an attempt crashes in the middle of its work (0..1).
    pub crash_rate: f64,
    /// Seeds which units overlap and which attempts crash.
    pub seed: u64,
    /// A missing or empty directory for the store.
    pub store_dir: PathBuf,
    /// Size of each unit's output, bytes.
    pub object_bytes: usize,
}

impl SimConfig {
    /// The worked example: 10 workers, 100,000 units, 2% overlap, optimistic, the premise
    /// schedule, no crashes.
    pub fn new(store_dir: impl Into<PathBuf>) -> Self {
        SimConfig {
            workers: 10,
            units: 100_000,
            overlap: 0.02,
            mode: SimMode::Optimistic,
            schedule: Schedule::Premise,
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
        if self.object_bytes < 2 {
            return bad("object_bytes must be at least 2".into());
        }
        Ok(())
    }
}

/// What a simulation measured, read back from the engine's metrics and store.
#[derive(Clone, Debug, PartialEq)]
pub struct SimReport {
    /// The mode simulated.
    pub mode: SimMode,
    /// The schedule of the overlapped units.
    pub schedule: Schedule,
    /// Worker threads.
    pub workers: usize,
    /// Logical units.
    pub units: u64,
    /// Units the scheduler handed to two workers.
    pub overlapped: u64,
    /// Work closures run (engine counter `computations`), crashed attempts included.
    pub computations: u64,
    /// Of those, the ones whose output did not become the entry (engine counter
    /// `redundant_computations`).
    pub redundant: u64,
    /// Attempts the simulation made crash in the middle of their work (its own injection count).
    pub crashed_attempts: u64,
    /// Runs that found the unit already done and did not compute (engine counter
    /// `runs_already_done`).
    pub already_done: u64,
    /// Runs that found the unit held by another worker and did not compute (engine counter
    /// `runs_busy`).
    pub busy: u64,
    /// Entries in the manifest at the end.
    pub entries: u64,
    /// Wasted share of all work: (redundant + crashed) / computations.
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
    /// Abandoned staging files and unreferenced objects removed at the end by the garbage
    /// collector ([`Store::gc`]).
    pub orphans_collected: u64,
    /// Orphans a dry-run garbage collection still finds after the cleanup (must be 0).
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
        clock: Arc::new(clock.clone()),
        // Per-unit commits: see "The store" above for why not `Durable`.
        durability: crate::store::Durability::Relaxed {
            max_delay: Duration::from_millis(50),
        },
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
    };
    let overlapped = cfg.overlapped_units();
    let rounds = sim.run_rounds(&clock, overlapped, progress)?;
    let (collected, left) = collect_orphans(&store)?;
    let snap = store.snapshot()?;
    let entries = snap.iter()?.count() as u64;
    let replay_clean = crate::replay::replay(&snap)?.is_clean();
    drop(snap);

    let m = store.metrics();
    let crashed = sim.crashed.load(Ordering::Relaxed);
    Ok(SimReport {
        mode: cfg.mode,
        schedule: cfg.schedule,
        workers: cfg.workers,
        units: cfg.units,
        overlapped,
        computations: m.computations,
        redundant: m.redundant_computations,
        crashed_attempts: crashed,
        already_done: m.runs_already_done,
        busy: m.runs_busy,
        entries,
        wasted_fraction: if m.computations == 0 {
            0.0
        } else {
            (m.redundant_computations + crashed) as f64 / m.computations as f64
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

/// The real garbage collector, with no grace and no retention: every staging file not being
/// written by this process and every object no entry references goes. Then a dry run must find
/// nothing left. Returns (collected, left).
fn collect_orphans(store: &Store) -> Result<(u64, u64)> {
    let gc = store.gc(GcOptions {
        dry_run: false,
        grace: Duration::ZERO,
        retain: Duration::ZERO,
    })?;
    let after = store.gc(GcOptions {
        dry_run: true,
        grace: Duration::ZERO,
        retain: Duration::ZERO,
    })?;
    Ok((
        gc.staging_files + gc.objects,
        after.staging_files + after.objects + after.objects_pinned,
    ))
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

/// One attempt at a unit, as the scheduler hands it to a worker.
struct Task {
    unit: u32,
    /// Under the premise schedule, shared by the two adjacent tasks of an overlapped unit.
    pair: Option<Arc<Rendezvous>>,
}

/// Where the two workers of an overlapped unit meet (premise schedule). Each arrives once: inside
/// its work closure if the engine runs it (and then waits for the other), or right after the
/// engine answered without running it.
#[derive(Default)]
struct Rendezvous {
    arrived: Mutex<u8>,
    both: Condvar,
}

impl Rendezvous {
    fn arrive(&self) -> parking_lot::MutexGuard<'_, u8> {
        let mut n = self.arrived.lock();
        *n += 1;
        if *n >= 2 {
            self.both.notify_all();
        }
        n
    }

    /// Arrives and waits for the other worker; gives up if the simulation is aborting.
    fn arrive_and_wait(&self, abort: &AtomicBool) {
        let mut n = self.arrive();
        while *n < 2 && !abort.load(Ordering::Relaxed) {
            self.both.wait_for(&mut n, Duration::from_millis(20));
        }
    }
}

/// A task's side of its rendezvous, if it has one: arrives at most once.
struct Arrival<'a> {
    rendezvous: Option<&'a Rendezvous>,
    done: Cell<bool>,
    abort: &'a AtomicBool,
}

impl Arrival<'_> {
    /// Called inside the work: the other worker must have tried the unit before this one goes on.
    fn arrive_and_wait(&self) {
        if let Some(r) = self.rendezvous.filter(|_| !self.done.replace(true)) {
            r.arrive_and_wait(self.abort);
        }
    }

    /// Called after the engine answered: a no-op if the work already arrived.
    fn arrive(&self) {
        if let Some(r) = self.rendezvous.filter(|_| !self.done.replace(true)) {
            drop(r.arrive());
        }
    }
}

/// The payload a simulated crash unwinds with (through `resume_unwind`, so no panic hook runs and
/// nothing is printed).
struct SimulatedCrash;

/// The first round's queue: every unit once, in order, and each of the `overlapped` units chosen
/// by the seed a second time right after the first (the two adjacent tasks share a rendezvous
/// when `rendezvous`).
fn first_round(units: u64, overlapped: u64, seed: u64, rendezvous: bool) -> Vec<Task> {
    let mut order: Vec<u32> = (0..units as u32).collect();
    let mut twice = vec![false; units as usize];
    let mut state = seed;
    // A partial Fisher-Yates shuffle picks `overlapped` distinct units.
    for i in 0..overlapped as usize {
        let j = i + (splitmix(&mut state) % (units - i as u64)) as usize;
        order.swap(i, j);
        twice[order[i] as usize] = true;
    }
    let mut out = Vec::with_capacity((units + overlapped) as usize);
    for unit in 0..units as u32 {
        if twice[unit as usize] {
            let pair = rendezvous.then(|| Arc::new(Rendezvous::default()));
            out.push(Task {
                unit,
                pair: pair.clone(),
            });
            out.push(Task { unit, pair });
        } else {
            out.push(Task { unit, pair: None });
        }
    }
    out
}

/// A retry round's queue: `units` once each, no overlap.
fn retry_round(units: Vec<u32>) -> Vec<Task> {
    units
        .into_iter()
        .map(|unit| Task { unit, pair: None })
        .collect()
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
}

impl Sim<'_> {
    /// Runs rounds until every unit has its entry; returns how many rounds it took.
    fn run_rounds(
        &self,
        clock: &ManualClock,
        overlapped: u64,
        progress: Progress<'_>,
    ) -> Result<u32> {
        let cfg = self.cfg;
        let rendezvous = cfg.schedule == Schedule::Premise && cfg.workers > 1;
        let mut tasks = first_round(cfg.units, overlapped, cfg.seed, rendezvous);
        let (mut done_before, mut scheduled) = (0u64, cfg.units + overlapped);
        let mut rounds = 0;
        loop {
            rounds += 1;
            let finished = self.round(rounds, &tasks, &|done| {
                progress(done_before + done, scheduled)
            })?;
            done_before += finished;
            // Reconcile: every unit the manifest does not have goes again. Without crashes this is
            // empty; it also proves that every unit has its entry.
            let missing: Vec<u32> = (0..cfg.units as u32)
                .filter(|&u| {
                    !matches!(
                        self.store.is_done(&self.keys[u as usize], VERSION),
                        Ok(true)
                    )
                })
                .collect();
            if missing.is_empty() {
                progress(done_before, scheduled);
                return Ok(rounds);
            }
            if rounds >= MAX_ROUNDS {
                return Err(Error::InvalidRequest(format!(
                    "{} units still missing after {rounds} rounds; lower the crash rate",
                    missing.len()
                )));
            }
            // Time passes: the leases abandoned by crashed workers expire and may be taken over.
            clock.advance_ms(TTL.as_millis() as u64 + 1_000);
            scheduled += missing.len() as u64;
            tasks = retry_round(missing);
        }
    }

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
                        // One task at a time, taken in queue order: see "Schedule" in the module
                        // doc for why the rendezvous cannot deadlock.
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
            while !handles.iter().all(|h| h.is_finished()) {
                progress(finished.load(Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        progress(finished.load(Ordering::Relaxed));
        match first_error.into_inner() {
            Some(e) => Err(e),
            None => Ok(finished.into_inner()),
        }
    }

    /// One worker's attempt at one task, through the engine's own `run_optimistic` or `run_once`.
    fn attempt(
        &self,
        worker: &str,
        round: u32,
        pos: usize,
        task: &Task,
        abort: &AtomicBool,
    ) -> Result<()> {
        let unit = self.keys[task.unit as usize].as_str();
        let arrival = Arrival {
            rendezvous: task.pair.as_deref(),
            done: Cell::new(false),
            abort,
        };
        let crashes =
            self.cfg.crash_rate > 0.0 && roll(self.cfg.seed, round, pos) < self.cfg.crash_rate;
        let work = || self.work(unit, &arrival, crashes);
        // A simulated crash unwinds out of the engine call, as a killed worker would stop there.
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| match self.cfg.mode {
            SimMode::Optimistic => self.store.run_optimistic(unit, VERSION, work),
            SimMode::Coordinated => self.store.run_once(unit, VERSION, worker, TTL, work),
        }));
        // The engine answered without running the work (already done, busy): the other worker of
        // the unit may go on.
        arrival.arrive();
        match ran {
            Ok(Ok(
                RunOutcome::Processed(_)
                | RunOutcome::AlreadyDone(_)
                | RunOutcome::BusyElsewhere { .. },
            )) => Ok(()),
            Ok(Err(RunError::Work(e) | RunError::Engine(e))) => Err(e),
            Err(payload) if payload.is::<SimulatedCrash>() => Ok(()),
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }

    /// The unit's work: meet the other worker of the unit (premise schedule), compute, and maybe
    /// crash half-way through writing the output.
    fn work(&self, unit: &str, arrival: &Arrival<'_>, crashes: bool) -> Result<Vec<u8>> {
        arrival.arrive_and_wait();
        let output = compute(unit, VERSION, self.cfg.object_bytes);
        if crashes {
            self.crash(unit, &output)?;
            std::panic::resume_unwind(Box::new(SimulatedCrash));
        }
        Ok(output)
    }

    /// Leaves half of `output` in a staging file, as a worker killed mid-write would.
    fn crash(&self, unit: &str, output: &[u8]) -> Result<()> {
        let n = self.crash_seq.fetch_add(1, Ordering::Relaxed);
        // Not a name the stager would use (those are `<pid>-<session>-<n>.part` and listed as in
        // flight while written), so GC sees what it is: an abandoned staging file.
        let path = self
            .store
            .path()
            .join("staging")
            .join(format!("sim-crash-{n}.part"));
        let vfs = &self.store.inner.options.vfs;
        vfs.create_new(&path)
            .and_then(|mut f| f.write_all(&output[..output.len() / 2]))
            .ctx(|| {
                format!(
                    "write the crashed attempt at {unit:?} to {}",
                    path.display()
                )
            })?;
        self.crashed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Every unit queued once, the overlapped ones twice in adjacent tasks sharing a rendezvous
    /// (only under the premise schedule).
    #[test]
    fn first_round_queues_each_overlapped_unit_twice_in_adjacent_tasks() {
        for (units, overlapped) in [
            (1000, 37),
            (1000, 0),
            (1000, 1000),
            (5, 5),
            (1, 1),
            (130, 2),
        ] {
            for rendezvous in [true, false] {
                let tasks = first_round(units, overlapped, 7, rendezvous);
                assert_eq!(tasks.len() as u64, units + overlapped);
                let mut seen: HashMap<u32, Vec<usize>> = HashMap::new();
                for (i, t) in tasks.iter().enumerate() {
                    seen.entry(t.unit).or_default().push(i);
                }
                assert_eq!(seen.len() as u64, units, "every unit queued");
                let mut doubled = 0;
                for (u, at) in &seen {
                    match at.as_slice() {
                        [i] => assert!(tasks[*i].pair.is_none()),
                        [a, b] => {
                            doubled += 1;
                            assert_eq!(a + 1, *b, "unit {u}: tasks {a} and {b} are not adjacent");
                            match (&tasks[*a].pair, &tasks[*b].pair) {
                                (Some(x), Some(y)) => assert!(rendezvous && Arc::ptr_eq(x, y)),
                                (None, None) => assert!(!rendezvous),
                                _ => panic!("unit {u}: one task of the pair has no rendezvous"),
                            }
                        }
                        more => panic!("unit {u} queued {} times", more.len()),
                    }
                }
                assert_eq!(doubled, overlapped);
            }
        }
    }

    #[test]
    fn retry_rounds_queue_the_missing_units_once() {
        let tasks = retry_round((0..10).collect());
        assert_eq!(tasks.len(), 10);
        assert!(tasks.iter().all(|t| t.pair.is_none()));
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
