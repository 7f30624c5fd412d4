//! The worked example of `seeds/000` run for real (SPEC R18): worker threads run logical units
//! through the engine's own [`Store::run_optimistic_many`] (optimistic mode, the seed's
//! "distributed idempotency check") or [`Store::run_once_many`] (coordinated mode) — the batched
//! forms of [`Store::run_optimistic`] and [`Store::run_once`], which are the same code for a batch
//! of one — while the scheduler hands a fraction of the units to two workers at once (rebalancing)
//! and, optionally, workers crash in the middle of their work.
//!
//! Nothing here is computed from a formula, and the simulation counts nothing the engine can count:
//! `computations`, `redundant_computations`, `runs_already_done`, `runs_busy`, the claim and commit
//! counters are the engine's metrics ([`Store::metrics`]), counted in `run.rs` and the commit path
//! where the work and the decisions really happen. The manifest entries, the orphans and the replay
//! check are read back from the store. The only figures of the simulation's own are the crashes it
//! injected and the attempts they lost.
//!
//! # Chunks
//!
//! A worker takes a *chunk* of tasks ([`SimConfig::chunk`], [`DEFAULT_CHUNK`]) from a shared queue
//! and runs it through one batched engine call, as a real worker takes a batch of partitions: the
//! dedup-index check of every unit, then (coordinated) one `claim_many` transaction, the work of
//! every unit that runs, each output staged, and one partial commit of the chunk, each unit fenced
//! by its own lease. That is two write transactions per chunk instead of two per unit.
//!
//! # Schedule
//!
//! Each overlapped unit is queued twice, once in each chunk of a *pair* of adjacent chunks (the
//! pair's overlapped units first, the rest filled with single units), so two workers pick it up one
//! right after the other. What happens then depends on the [`Schedule`]:
//!
//! - [`Schedule::Premise`] (the default) reproduces the seed's premise — "two workers both picking
//!   up the same partition before either commits". The two chunks of a pair share a `Meeting`. A
//!   chunk's side is *decided* once its engine call has decided what to run: at its first work
//!   (every dedup check, and in coordinated mode the claim, is done by then), or when the call
//!   returns or unwinds without one. The work of an overlapped unit waits until the other side is
//!   decided. So neither worker commits an overlapped unit before the other has checked or claimed
//!   it. In optimistic mode both checks find the unit not done, both works run, and one output
//!   collapses as a duplicate in the commit: the engine counts 2 computations, 1 redundant. In
//!   coordinated mode the later claim meets the earlier claimer's live lease (held while its work
//!   waits): `run_once_many` answers busy and the work runs once, 0 redundant. The worked example
//!   gives exactly 102,000 / 2,000 and 100,000 / 0.
//! - [`Schedule::Natural`]: no meeting; real timing decides whether the second chunk's check or
//!   claim comes before the first chunk's commit (optimistic: redundant work; coordinated: busy) or
//!   after it (already done). The report says what happened.
//!
//! No deadlock: a work waits only for the other side of its own pair to be decided, and a side is
//! decided without waiting on anything (checks and claims never wait; the first work decides before
//! it waits). So a waiting worker waits either for a taken chunk, which gets decided, or for a
//! chunk nobody has taken yet. Chunks are taken one
//! at a time in queue order, and a pair's chunks are adjacent: the first chunk of a pair can wait for
//! the next chunk of the queue, the second chunk's partner was taken earlier. At most one worker —
//! the holder of the newest chunk taken — can wait for an untaken chunk, so with two or more workers
//! someone is free to take it. With one worker the meeting is skipped (the second copy then finds
//! the unit done).
//!
//! # Crashes
//!
//! With a crash rate, an attempt may "die" in the middle of its work: it writes half of its output
//! into a file in `staging/` and unwinds out of the engine call without running the panic hook, as
//! a killed worker would stop. A killed worker loses its whole chunk: nothing of it is committed,
//! and in coordinated mode every lease the chunk was granted is left behind (the batch forms never
//! release a lease on unwinding; a dead process cannot release). The simulation counts the crashes
//! and the works that ran in crashed chunks (`crashed_attempts`, each a computation that produced
//! nothing, not a redundant one). After a round, the scheduler re-offers every unit the manifest
//! does not have (a reconcile) in chunks, the simulated clock moves past the lease TTL so that
//! abandoned leases expire and are taken over with a higher token, and the workers go again. The
//! outputs a crashed chunk had staged are the same bytes its retry commits (the work is
//! deterministic), so the only orphans are the crash files. Since a crash loses a chunk, a per-attempt
//! crash rate costs more the bigger the chunk.
//!
//! # The store
//!
//! The store is a real one in `store_dir` (the CLI puts it in `/dev/shm` where that exists, else
//! the temp dir), opened with the default options but two: a [`ManualClock`] — leases expire only
//! when the scheduler moves time, so no live lease can expire under a slow thread and the counts
//! are exact — and relaxed durability (group commits synced at most 50 ms apart, and at the clean
//! close). No count depends on durability: the crashes are simulated, the process does not die.
//!
//! # Orphans
//!
//! At the end the real garbage collector ([`Store::gc`], SPEC R14) runs with no grace and no
//! retention: it removes the abandoned staging files (named `sim-crash-<n>.part`, never a name the
//! stager is writing) and any object no entry references; `orphans_collected` is what it reports.
//! A dry-run GC afterwards must find nothing (`orphans_left`).

#![warn(missing_docs)]

pub mod lake_env;
pub mod nodes;
pub mod pipeline;
pub mod weed;

use oncelake::gc::GcOptions;
use oncelake::{
    Clock, Error, ManualClock, Options, Result, RunError, RunOutcome, Store, SystemClock,
};
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::io::Write;
use std::panic::AssertUnwindSafe;
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
/// Tasks per chunk unless configured: big enough that a chunk's two write transactions are cheap
/// next to its staging, small enough that 100,000 units still spread over 10 workers evenly.
pub const DEFAULT_CHUNK: usize = 128;

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
    /// The seed's premise: both workers of an overlapped unit check or claim it before either
    /// commits (their chunks meet inside the work).
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
                "worst case: both workers of each unit handed out twice look it up or claim it \
                 before either commits (their chunks meet inside the work)"
            }
            Schedule::Natural => {
                "natural: the two workers of an overlapped unit take it in two adjacent chunks, \
                 one right after the other, and real timing decides what each finds"
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
    /// Tasks a worker takes at once and runs through one batched engine call
    /// ([`Store::run_optimistic_many`] / [`Store::run_once_many`]).
    pub chunk: usize,
    /// Run as one node process of a run across nodes on a shared lake ([`nodes`]): the store is
    /// a node of that lake, only this node's chunks run, in one round (no crashes), and no GC
    /// runs (a lake node's GC is refused).
    pub node: Option<nodes::NodeShare>,
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
            chunk: DEFAULT_CHUNK,
            node: None,
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
        if self.chunk == 0 || self.chunk > 4096 {
            return bad(format!("chunk is {}; use 1..=4096 tasks", self.chunk));
        }
        if self.object_bytes < 2 {
            return bad("object_bytes must be at least 2".into());
        }
        if let Some(n) = &self.node {
            if n.index >= n.nodes || self.crash_rate > 0.0 {
                return bad(format!(
                    "node {} of {} with crash rate {}: a run across nodes needs an index below \
                     the node count and no crashes (a crashed chunk's retry is not built across \
                     nodes)",
                    n.index, n.nodes, self.crash_rate
                ));
            }
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
    /// Tasks per chunk (one batched engine call each).
    pub chunk: usize,
    /// Logical units.
    pub units: u64,
    /// Units the scheduler handed to two workers.
    pub overlapped: u64,
    /// Work closures run (engine counter `computations`), crashed attempts included.
    pub computations: u64,
    /// Of those, the ones whose output did not become the entry (engine counter
    /// `redundant_computations`).
    pub redundant: u64,
    /// Crashes the simulation injected (its own count): each killed a worker in the middle of one
    /// unit's work and lost its whole chunk.
    pub crashes: u64,
    /// Attempts lost to those crashes (its own count): every work that ran in a crashed chunk, the
    /// one that crashed included. Each is a computation that produced nothing.
    pub crashed_attempts: u64,
    /// Runs that found the unit already done and did not compute (engine counter
    /// `runs_already_done`).
    pub already_done: u64,
    /// Runs that found the unit held by another worker and did not compute (engine counter
    /// `runs_busy`).
    pub busy: u64,
    /// Entries in the manifest at the end.
    pub entries: u64,
    /// Units committed (engine counter `units_committed`): one per unit when every unit was
    /// written once; a unit written twice (a second output, a new revision) counts again.
    pub units_committed: u64,
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

impl SimReport {
    /// Units whose output was committed more than once: commits of units beyond one per entry.
    pub fn written_twice(&self) -> u64 {
        self.units_committed.saturating_sub(self.entries)
    }

    /// Whether exactly-once held: one entry per unit, each written once, no orphan left, and
    /// the log replays to the manifest.
    pub fn exactly_once(&self) -> bool {
        self.entries == self.units
            && self.units_committed == self.units
            && self.orphans_left == 0
            && self.replay_clean
    }
}

/// Progress: (attempts finished, attempts scheduled so far). Called from the calling thread.
pub type Progress<'a> = &'a dyn Fn(u64, u64);

/// Runs the simulation into a new store at `cfg.store_dir` and reports what it measured.
///
/// ```
/// # fn main() -> oncelake::Result<()> {
/// use oncelake_sim::{simulate, SimConfig, SimMode};
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
        lake: cfg.node.as_ref().map(|n| n.lake.clone()),
        clock: Arc::new(clock.clone()),
        // Per-unit commits: see "The store" above for why not `Durable`.
        durability: oncelake::Durability::Relaxed {
            max_delay: Duration::from_millis(50),
        },
        ..Options::default()
    };
    if cfg.store_dir.join(oncelake::MARKER_FILE).exists() {
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
    let (collected, left) = match cfg.node {
        Some(_) => (0, 0),
        None => collect_orphans(&store)?,
    };
    let snap = store.snapshot()?;
    // Counting the entries and replaying the log read the same snapshot, each on its own core.
    let (entries, replay_clean) = std::thread::scope(|s| {
        let count = s.spawn(|| snap.iter().map(|entries| entries.count() as u64));
        let replay = oncelake::replay(&snap).map(|r| r.is_clean());
        let count = count
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (count, replay)
    });
    let (entries, replay_clean) = (entries?, replay_clean?);
    drop(snap);

    let m = store.metrics();
    let crashed = sim.crashed.load(Ordering::Relaxed);
    Ok(SimReport {
        mode: cfg.mode,
        // Across node processes the pairs cannot meet in memory: real timing decides.
        schedule: match cfg.node {
            Some(_) => Schedule::Natural,
            None => cfg.schedule,
        },
        workers: cfg.workers,
        chunk: cfg.chunk,
        units: cfg.units,
        overlapped,
        computations: m.computations,
        redundant: m.redundant_computations,
        crashes: sim.crash_seq.load(Ordering::Relaxed),
        crashed_attempts: crashed,
        already_done: m.runs_already_done,
        busy: m.runs_busy,
        entries,
        units_committed: m.units_committed,
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

/// Removes a store the simulation made and no longer needs (the CLI's throwaway stores), its
/// fan-out directories on several threads at once: 100,000 objects are 100,000 unlinks, which on a
/// machine with idle cores need not run one after the other. Refuses a directory that is not an
/// oncelake store, so that a wrong path cannot delete anything else.
pub fn remove_store(dir: &Path) -> Result<()> {
    if !dir.join(oncelake::MARKER_FILE).is_file() {
        return Err(Error::InvalidRequest(format!(
            "{} is not an oncelake store; only a store is removed",
            dir.display()
        )));
    }
    let objects = dir.join("objects");
    let fanouts: Vec<PathBuf> = match std::fs::read_dir(&objects) {
        Ok(list) => list.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8);
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(fanout) = fanouts.get(next.fetch_add(1, Ordering::Relaxed)) {
                    // What fails here fails again below, with its error reported.
                    let _ = std::fs::remove_dir_all(fanout);
                }
            });
        }
    });
    std::fs::remove_dir_all(dir).map_err(|source| Error::Io {
        context: format!("remove {}", dir.display()),
        source,
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

/// What a worker takes from the scheduler's queue at once: one batched engine call.
struct Chunk {
    /// The queue position of its first task; with the round, it fixes which attempts crash.
    first_task: usize,
    /// The units, each at most once. Under a pair, the pair's overlapped units come first.
    units: Vec<u32>,
    /// The overlapped units' [`Meeting`] and this chunk's side of it, shared by the two adjacent
    /// chunks of a pair that both hold the pair's overlapped units.
    pair: Option<(Arc<Meeting>, usize)>,
    /// How many of `units` (from the front) are the pair's overlapped units.
    shared: usize,
}

/// Where the two chunks of a pair meet (premise schedule). A side is *decided* once the engine
/// call of its chunk has decided what to run — its dedup checks (optimistic) or its claims
/// (coordinated) are done: at its first work, or when the call returns or unwinds without work.
/// The work of an overlapped unit waits until the other side is decided.
#[derive(Default)]
struct Meeting {
    decided: Mutex<[bool; 2]>,
    changed: Condvar,
}

impl Meeting {
    fn decide(&self, side: usize) {
        self.decided.lock()[side] = true;
        self.changed.notify_all();
    }

    /// Waits until `side` is decided; gives up if the simulation is aborting.
    fn wait_for(&self, side: usize, abort: &AtomicBool) {
        let mut decided = self.decided.lock();
        while !decided[side] && !abort.load(Ordering::Relaxed) {
            self.changed
                .wait_for(&mut decided, Duration::from_millis(20));
        }
    }
}

/// One chunk's engine call, seen from its works: announces the side decided once (at the first
/// work, or on drop, also while unwinding), waits for the other side before an overlapped unit's
/// work, and counts the works started (for the crash accounting).
struct ChunkCall<'a> {
    pair: Option<(&'a Meeting, usize)>,
    abort: &'a AtomicBool,
    decided: Cell<bool>,
    partner_decided: Cell<bool>,
    started: Cell<u64>,
}

impl<'a> ChunkCall<'a> {
    fn new(chunk: &'a Chunk, abort: &'a AtomicBool) -> Self {
        ChunkCall {
            pair: chunk.pair.as_ref().map(|(m, side)| (m.as_ref(), *side)),
            abort,
            decided: Cell::new(false),
            partner_decided: Cell::new(false),
            started: Cell::new(0),
        }
    }

    fn decide(&self) {
        if let Some((m, side)) = self.pair.filter(|_| !self.decided.replace(true)) {
            m.decide(side);
        }
    }

    /// A work starts: this side is decided; an overlapped unit's work waits for the other side.
    fn work_starts(&self, overlapped: bool) {
        self.started.set(self.started.get() + 1);
        self.decide();
        if let Some((m, side)) = self.pair.filter(|_| overlapped) {
            if !self.partner_decided.replace(true) {
                m.wait_for(1 - side, self.abort);
            }
        }
    }
}

impl Drop for ChunkCall<'_> {
    fn drop(&mut self) {
        self.decide();
    }
}

/// The payload a simulated crash unwinds with (through `resume_unwind`, so no panic hook runs and
/// nothing is printed).
struct SimulatedCrash;

/// The first round's queue, in chunks of at most `chunk` tasks: every unit once, and the
/// `overlapped` units chosen by the seed twice — once in each chunk of a pair of adjacent chunks
/// (sharing a [`Meeting`] when `meet`). The overlapped units are spread evenly over the pairs.
///
/// Why it fits: with `P = ⌈⌈(units + overlapped) / chunk⌉ / 2⌉` pairs, a pair gets at most
/// `⌈overlapped / P⌉ ≤ chunk` overlapped units (as `overlapped ≤ units`), and the pairs have room
/// for `2·chunk·P − 2·overlapped ≥ units − overlapped` single units, which is all of them.
fn first_round(units: u64, overlapped: u64, seed: u64, chunk: usize, meet: bool) -> Vec<Chunk> {
    let mut order: Vec<u32> = (0..units as u32).collect();
    let mut twice = vec![false; units as usize];
    let mut state = seed;
    // A partial Fisher-Yates shuffle picks `overlapped` distinct units.
    for i in 0..overlapped as usize {
        let j = i + (splitmix(&mut state) % (units - i as u64)) as usize;
        order.swap(i, j);
        twice[order[i] as usize] = true;
    }
    let doubled: Vec<u32> = (0..units as u32).filter(|&u| twice[u as usize]).collect();
    let mut singles = (0..units as u32).filter(|&u| !twice[u as usize]);
    let tasks = (units + overlapped) as usize;
    let pairs = tasks.div_ceil(chunk).div_ceil(2).max(1) as u128;
    let mut out = Vec::with_capacity(2 * pairs as usize);
    let mut next_task = 0;
    for j in 0..pairs {
        let share = |k: u128| (overlapped as u128 * k / pairs) as usize;
        let both = &doubled[share(j)..share(j + 1)];
        debug_assert!(
            both.len() <= chunk,
            "invariant: a pair's overlap fits a chunk"
        );
        let meeting = (meet && !both.is_empty()).then(|| Arc::new(Meeting::default()));
        for side in 0..2 {
            let mut us = both.to_vec();
            us.extend(singles.by_ref().take(chunk.saturating_sub(both.len())));
            // Only a pair without overlap can come out empty (at the end): nothing to pair.
            if us.is_empty() {
                continue;
            }
            let len = us.len();
            out.push(Chunk {
                first_task: next_task,
                units: us,
                pair: meeting.clone().map(|m| (m, side)),
                shared: both.len(),
            });
            next_task += len;
        }
    }
    debug_assert!(singles.next().is_none(), "invariant: every unit is queued");
    out
}

/// A retry round's queue: `units` in chunks, no overlap.
fn retry_round(units: Vec<u32>, chunk: usize) -> Vec<Chunk> {
    units
        .chunks(chunk)
        .enumerate()
        .map(|(i, us)| Chunk {
            first_task: i * chunk,
            units: us.to_vec(),
            pair: None,
            shared: 0,
        })
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
        let meet = cfg.schedule == Schedule::Premise && cfg.workers > 1 && cfg.node.is_none();
        let mut chunks = first_round(cfg.units, overlapped, cfg.seed, cfg.chunk, meet);
        if let Some(n) = &cfg.node {
            // This node's chunks; the others' are the other nodes' (see `nodes`).
            let mine = chunks
                .into_iter()
                .enumerate()
                .filter(|(k, _)| k % n.nodes == n.index);
            chunks = mine.map(|(_, c)| c).collect();
            let tasks = chunks.iter().map(|c| c.units.len() as u64).sum();
            self.round(1, &chunks, &|done| progress(done, tasks))?;
            return Ok(1);
        }
        let (mut done_before, mut scheduled) = (0u64, cfg.units + overlapped);
        let mut rounds = 0;
        loop {
            rounds += 1;
            let finished = self.round(rounds, &chunks, &|done| {
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
            chunks = retry_round(missing, cfg.chunk);
        }
    }

    /// Runs one round of `chunks` on the worker threads; returns the attempts (tasks) finished.
    fn round(&self, round: u32, chunks: &[Chunk], progress: &dyn Fn(u64)) -> Result<u64> {
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
                        // Worker names are lease holders: unique across the nodes of a lake too.
                        let worker = match &self.cfg.node {
                            Some(n) => format!("node{}-worker-{w}", n.index),
                            None => format!("worker-{w}"),
                        };
                        // One chunk at a time, taken in queue order: see "Schedule" in the module
                        // doc for why the meetings cannot deadlock.
                        while !abort.load(Ordering::Relaxed) {
                            let i = cursor.fetch_add(1, Ordering::Relaxed);
                            let Some(chunk) = chunks.get(i) else { break };
                            if let Err(e) = self.run_chunk(&worker, round, chunk, abort) {
                                abort.store(true, Ordering::Relaxed);
                                first_error.lock().get_or_insert(e);
                                break;
                            }
                            finished.fetch_add(chunk.units.len() as u64, Ordering::Relaxed);
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

    /// One worker's attempt at one chunk, through one call of the engine's own
    /// `run_optimistic_many` or `run_once_many`.
    fn run_chunk(&self, worker: &str, round: u32, chunk: &Chunk, abort: &AtomicBool) -> Result<()> {
        let units: Vec<(&str, u64)> = chunk
            .units
            .iter()
            .map(|&u| (self.keys[u as usize].as_str(), VERSION))
            .collect();
        let call = ChunkCall::new(chunk, abort);
        let work = |i: usize| {
            let crashes = self.cfg.crash_rate > 0.0
                && roll(self.cfg.seed, round, chunk.first_task + i) < self.cfg.crash_rate;
            self.work(units[i].0, &call, i < chunk.shared, crashes)
        };
        // A simulated crash unwinds out of the engine call, as a killed worker would stop there.
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| match self.cfg.mode {
            SimMode::Optimistic => self.store.run_optimistic_many(&units, work),
            SimMode::Coordinated => self.store.run_once_many(&units, worker, TTL, work),
        }));
        // A chunk whose call answered every unit without work is decided now.
        call.decide();
        let answers = match ran {
            Ok(answers) => answers?,
            Err(payload) if payload.is::<SimulatedCrash>() => {
                // Every work that ran in the chunk is lost with it.
                self.crashed
                    .fetch_add(call.started.get(), Ordering::Relaxed);
                return Ok(());
            }
            Err(payload) => std::panic::resume_unwind(payload),
        };
        for answer in answers {
            match answer {
                Ok(
                    RunOutcome::Processed(_)
                    | RunOutcome::AlreadyDone(_)
                    | RunOutcome::BusyElsewhere { .. },
                ) => {}
                Err(RunError::Work(e) | RunError::Engine(e)) => return Err(e),
            }
        }
        Ok(())
    }

    /// A unit's work: meet the other chunk of the pair (premise schedule, overlapped units),
    /// compute, and maybe crash half-way through writing the output.
    fn work(
        &self,
        unit: &str,
        call: &ChunkCall<'_>,
        overlapped: bool,
        crashes: bool,
    ) -> Result<Vec<u8>> {
        call.work_starts(overlapped);
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
        // A new file, as a killed worker's half-written staging file would be (never a name the
        // stager writes: GC removes it as an abandoned staging file).
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&output[..output.len() / 2]))
            .map_err(|source| Error::Io {
                context: format!(
                    "write the crashed attempt at {unit:?} to {}",
                    path.display()
                ),
                source,
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Every unit queued once, the overlapped ones twice: at the front of the two adjacent chunks
    /// of a pair, which share a meeting (only when asked), on sides 0 and 1. No chunk is too big.
    #[test]
    fn first_round_queues_each_overlapped_unit_in_both_chunks_of_a_pair() {
        for (units, overlapped, chunk) in [
            (1000, 37, 64),
            (1000, 0, 64),
            (1000, 1000, 64),
            (5, 5, 1),
            (1, 1, 128),
            (130, 2, 7),
            (2000, 100, 16),
        ] {
            for meet in [true, false] {
                let chunks = first_round(units, overlapped, 7, chunk, meet);
                let mut seen: HashMap<u32, Vec<usize>> = HashMap::new();
                let mut next_task = 0;
                for (c, ch) in chunks.iter().enumerate() {
                    assert!(!ch.units.is_empty() && ch.units.len() <= chunk);
                    assert_eq!(ch.first_task, next_task);
                    next_task += ch.units.len();
                    for &u in &ch.units {
                        seen.entry(u).or_default().push(c);
                    }
                }
                assert_eq!(next_task as u64, units + overlapped);
                assert_eq!(seen.len() as u64, units, "every unit queued");
                let mut doubled = 0;
                for (u, at) in &seen {
                    match at.as_slice() {
                        [c] => {
                            let ch = &chunks[*c];
                            let pos = ch.units.iter().position(|x| x == u).unwrap();
                            assert!(pos >= ch.shared, "unit {u} single but in the shared part");
                        }
                        [a, b] => {
                            doubled += 1;
                            assert_eq!(a + 1, *b, "unit {u}: chunks {a} and {b} not adjacent");
                            let (x, y) = (&chunks[*a], &chunks[*b]);
                            assert_eq!(x.units[..x.shared], y.units[..y.shared]);
                            assert!(x.units[..x.shared].contains(u));
                            match (&x.pair, &y.pair) {
                                (Some((m, 0)), Some((n, 1))) => {
                                    assert!(meet && Arc::ptr_eq(m, n))
                                }
                                (None, None) => assert!(!meet),
                                _ => panic!("unit {u}: the pair's meeting is wrong"),
                            }
                        }
                        more => panic!("unit {u} queued {} times", more.len()),
                    }
                }
                assert_eq!(doubled, overlapped);
            }
        }
    }

    /// A store goes whole, objects and all; anything that is not a store is refused untouched.
    #[test]
    fn remove_store_removes_a_store_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("store");
        let store = Store::open(&store_dir).unwrap();
        for i in 0..300u32 {
            store.stage_bytes(&i.to_le_bytes()).unwrap();
        }
        drop(store);
        let other = dir.path().join("not-a-store");
        std::fs::create_dir_all(other.join("objects/ab")).unwrap();
        std::fs::write(other.join("objects/ab/kept"), b"kept").unwrap();
        assert!(matches!(
            remove_store(&other),
            Err(Error::InvalidRequest(_))
        ));
        assert_eq!(
            std::fs::read(other.join("objects/ab/kept")).unwrap(),
            b"kept"
        );
        remove_store(&store_dir).unwrap();
        assert!(!store_dir.exists());
    }

    #[test]
    fn retry_rounds_queue_the_missing_units_once() {
        let chunks = retry_round((0..10).collect(), 4);
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c.pair.is_none() && c.shared == 0));
        let all: Vec<u32> = chunks.iter().flat_map(|c| c.units.clone()).collect();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
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
            SimConfig {
                chunk: 0,
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
