//! The worked example of `seeds/000` run for real (SPEC R18): worker threads compute outputs for
//! logical units, stage them and commit them into a store, while the scheduler hands a fraction of
//! the units to two workers at once (rebalancing) and, optionally, workers crash mid-write.
//!
//! Nothing here is computed from a formula. Every count in the [`SimReport`] is read back from the
//! engine (its metrics, its manifest, its garbage collector) after the threads ran.
//!
//! # Chunks
//!
//! Workers take *chunks* of consecutive tasks from a shared queue ([`SimConfig::chunk`], 64 by
//! default), as a real worker takes a batch of partitions, and go through the engine once per
//! chunk rather than once per unit — the same engine path (staging, publish, group commit, one
//! redb transaction per group, claims, fencing), with ~3,000 write transactions for the worked
//! example instead of ~200,000:
//!
//! - **Optimistic mode** (SPEC R10, the seed's "distributed idempotency check"): the worker checks
//!   [`Store::is_done`] for every unit of the chunk, computes and stages every unit found not done,
//!   and commits them in one partial [`Batch`]; a unit computed twice collapses there as a
//!   `Duplicate`. Computations and redundant computations are counted on the engine's counters
//!   exactly as [`Store::run_optimistic`] counts them (redundant = the outcome is not `Committed`).
//! - **Coordinated mode** (SPEC R9/R11): the worker claims the chunk's units not known done with one
//!   [`Store::claim_many`], computes and stages only the granted ones, and commits them in one
//!   partial batch, each unit fenced by its lease's token ([`Batch::put_fenced`]); a unit whose
//!   output is not committed has its lease released. This is [`Store::run_once`] batched, counted
//!   the same way; `run_once`'s in-process guard is not needed because no two threads share a
//!   worker name and a chunk holds a unit at most once.
//!
//! # Overlap
//!
//! The seed's overlap is "two workers both picking up the same partition before either commits".
//! The two copies of an overlapped unit go into the two chunks of a *pair* of adjacent chunks
//! (spread evenly over the pairs), and the pair shares a *rendezvous*: each of its two workers,
//! after its `is_done` checks (optimistic) or its `claim_many` (coordinated), waits there until
//! the other has done the same. So both workers really hold the unit before either commits; what
//! they then do — compute twice, or be stopped by the claim ("held") — is the engine's doing and is
//! measured. In the worked example that gives exactly 2,000 duplicates (optimistic) or 2,000
//! "held" answers (coordinated), and no "already done".
//!
//! No deadlock: a worker holds one chunk at a time and chunks are handed out in queue order. The
//! second chunk of a pair only waits for the first, which was taken earlier and whose worker
//! reaches the rendezvous without waiting on anything else. The first chunk waits for the
//! second, which is the next chunk of the queue: once the first was taken, any worker not waiting
//! takes the second next, and at most one worker (the holder of the newest first-of-a-pair) can be
//! waiting for a chunk nobody has taken yet — so with two or more workers someone is free to take
//! it. With one worker there is nobody to meet: the rendezvous is skipped and the two copies run
//! one after the other (the second then finds the unit done). Overlap is only concurrent with at
//! least two workers.
//!
//! # Crashes
//!
//! With a crash rate, an attempt at a unit may "die" mid-write: the worker writes half of its
//! output into a file in `staging/` and abandons it — and, in coordinated mode, the lease it was
//! granted (not released, as a dead process cannot release). After a round, the scheduler
//! re-offers every unit the manifest does not have (a reconcile), the simulated clock moves past
//! the lease TTL so that abandoned leases expire and are taken over with a higher token, and the
//! workers go again.
//!
//! # The store
//!
//! The store is a real one in `store_dir` (the CLI puts it in `/dev/shm` where that exists, else
//! the temp dir), opened with the default options — [`Durable`](crate::Durability::Durable) commits through the
//! real file seam, fsync included — and a [`ManualClock`] (leases expire only when the scheduler
//! moves time, so no live lease can expire under a slow thread and the counts are exact). With
//! chunked commits there are so few transactions (≈ 2,000 for both modes) that relaxed durability
//! measured no faster on tmpfs (coordinated, same load: 7.75 / 7.74 s wall with `Durable`,
//! 7.90 / 7.19 s with `Relaxed`, CPU equal within noise), so the simulation keeps the default.
//!
//! # Orphans
//!
//! At the end the real garbage collector ([`Store::gc`], SPEC R14) runs with no grace and no
//! retention: it removes the abandoned staging files (the crashed attempts' files are named
//! `sim-crash-<n>.part`, never a name the stager is writing, so GC treats them as abandoned) and
//! any object no entry references; `orphans_collected` is what it reports. A dry-run GC afterwards
//! must find nothing (`orphans_left`).

use crate::claim::ClaimOutcome;
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::commit::{Batch, Outcome};
use crate::error::{Error, IoContext, Result};
use crate::gc::GcOptions;
use crate::metrics::add;
use crate::store::{Options, Store};
use parking_lot::{Condvar, Mutex};
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
/// Tasks a worker takes from the queue at once, by default.
pub const DEFAULT_CHUNK: usize = 64;

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
    /// Tasks a worker takes from the queue at once (1..=4096): it checks or claims them together
    /// and commits their outputs in one batch.
    pub chunk: usize,
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
            chunk: DEFAULT_CHUNK,
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
    /// Tasks a worker took from the queue at once.
    pub chunk: usize,
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
    // Durable commits (the default) through the real file seam: see "The store" above.
    let options = Options {
        clock: Arc::new(clock.clone()),
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
    let mut chunks = first_round(cfg.units, overlapped, cfg.seed, cfg.chunk);
    let (mut done_before, mut scheduled) = (0u64, cfg.units + overlapped);
    let mut rounds = 0;
    loop {
        rounds += 1;
        let finished = sim.round(rounds, &chunks, &|done| {
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
        scheduled += missing.len() as u64;
        chunks = retry_round(missing, cfg.chunk);
    }
    progress(done_before, scheduled);

    // The real garbage collector, with no grace and no retention: every staging file not being
    // written by this process and every object no entry references goes. Then a dry run must
    // find nothing left.
    let gc = store.gc(GcOptions {
        dry_run: false,
        grace: Duration::ZERO,
        retain: Duration::ZERO,
    })?;
    let collected = gc.staging_files + gc.objects;
    let after = store.gc(GcOptions {
        dry_run: true,
        grace: Duration::ZERO,
        retain: Duration::ZERO,
    })?;
    let left = after.staging_files + after.objects + after.objects_pinned;
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
        chunk: cfg.chunk,
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

/// What a worker takes from the scheduler's queue at once: consecutive tasks.
struct Chunk {
    /// The queue position of its first task; with the round, it fixes which attempts crash.
    first_task: usize,
    /// The units, each at most once.
    units: Vec<u32>,
    /// Shared by the two chunks of a pair that both hold the pair's overlapped units; the two
    /// chunks are adjacent in the queue.
    pair: Option<Arc<Rendezvous>>,
}

/// Where the two workers holding a chunk pair meet: each arrives after its checks (optimistic) or
/// its claims (coordinated), and neither goes on to commit before both have arrived.
#[derive(Default)]
struct Rendezvous {
    arrived: Mutex<u8>,
    both: Condvar,
}

impl Rendezvous {
    /// Waits for the other chunk's worker; gives up if the simulation is aborting.
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

/// The first round's queue, in chunks of at most `chunk` tasks: every unit once, and the
/// `overlapped` units chosen by the seed twice — once in each chunk of a pair of adjacent chunks
/// that share a rendezvous. The overlapped units are spread evenly over the pairs.
///
/// Why it fits: with `P = ⌈⌈(units + overlapped) / chunk⌉ / 2⌉` pairs, a pair gets at most
/// `⌈overlapped / P⌉ ≤ chunk` overlapped units (as `overlapped ≤ units`), and the pairs have room
/// for `2·chunk·P − 2·overlapped ≥ units − overlapped` single units, which is all of them.
fn first_round(units: u64, overlapped: u64, seed: u64, chunk: usize) -> Vec<Chunk> {
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
        let pair = (!both.is_empty()).then(|| Arc::new(Rendezvous::default()));
        for _ in 0..2 {
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
                pair: pair.clone(),
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
    already_done: AtomicU64,
    busy: AtomicU64,
}

impl Sim<'_> {
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
                        let worker = format!("worker-{w}");
                        // One chunk at a time, taken in queue order: see "Overlap" in the module
                        // doc for why the rendezvous cannot deadlock.
                        while !abort.load(Ordering::Relaxed) {
                            let i = cursor.fetch_add(1, Ordering::Relaxed);
                            let Some(chunk) = chunks.get(i) else { break };
                            let r = match self.cfg.mode {
                                SimMode::Optimistic => self.optimistic(round, chunk, abort),
                                SimMode::Coordinated => {
                                    self.coordinated(&worker, round, chunk, abort)
                                }
                            };
                            if let Err(e) = r {
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

    /// Meets the worker of the other chunk of the pair. With one worker there is nobody to meet:
    /// the copies then run one after the other.
    fn meet(&self, chunk: &Chunk, abort: &AtomicBool) {
        if let (Some(r), true) = (&chunk.pair, self.cfg.workers > 1) {
            r.meet(abort);
        }
    }

    fn crashes(&self, round: u32, chunk: &Chunk, pos: usize) -> bool {
        self.cfg.crash_rate > 0.0
            && roll(self.cfg.seed, round, chunk.first_task + pos) < self.cfg.crash_rate
    }

    /// Optimistic mode: the seed's idempotency check for the whole chunk, then compute and stage
    /// every unit found not done, then one partial commit; duplicates collapse there.
    fn optimistic(&self, round: u32, chunk: &Chunk, abort: &AtomicBool) -> Result<()> {
        let checked: Result<Vec<usize>> = (0..chunk.units.len())
            .filter_map(
                |pos| match self.store.is_done(self.key(chunk, pos), VERSION) {
                    Ok(true) => {
                        self.already_done.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    Ok(false) => Some(Ok(pos)),
                    Err(e) => Some(Err(e)),
                },
            )
            .collect();
        // Both workers of a pair hold the overlapped units, checked and found not done, before
        // either commits: each computes them.
        self.meet(chunk, abort);
        let size = self.cfg.object_bytes;
        let c = &self.store.inner.metrics.c;
        let mut staged = Vec::new();
        for pos in checked? {
            let unit = self.key(chunk, pos);
            let output = compute(unit, VERSION, size);
            if self.crashes(round, chunk, pos) {
                self.crash(unit, output)?;
                continue;
            }
            add(&c.computations, 1);
            staged.push((unit, self.store.stage_bytes(&output)?));
        }
        if staged.is_empty() {
            return Ok(());
        }
        let batch = staged.iter().fold(Batch::new().partial(), |b, (unit, s)| {
            b.put(*unit, VERSION, s)
        });
        for u in self.store.commit(batch)?.units {
            // As `Store::run_optimistic` counts: work whose output did not become the entry.
            if !matches!(u.outcome, Outcome::Committed { .. }) {
                add(&c.redundant_computations, 1);
            }
        }
        Ok(())
    }

    /// Coordinated mode: one batched claim for the chunk's units not known done, then compute and
    /// stage the granted ones, then one partial commit, each unit fenced by its lease's token.
    ///
    /// This is `Store::run_once` per unit, batched; its in-process guard is not needed here, as no
    /// two threads share a worker name and a chunk holds a unit at most once.
    fn coordinated(
        &self,
        worker: &str,
        round: u32,
        chunk: &Chunk,
        abort: &AtomicBool,
    ) -> Result<()> {
        // The in-memory dedup index answers "done already" without a write, as in run_once.
        let mut positions = Vec::with_capacity(chunk.units.len());
        let mut wanted = Vec::with_capacity(chunk.units.len());
        for pos in 0..chunk.units.len() {
            if self.store.is_done(self.key(chunk, pos), VERSION)? {
                self.already_done.fetch_add(1, Ordering::Relaxed);
            } else {
                positions.push(pos);
                wanted.push((self.key(chunk, pos), VERSION));
            }
        }
        let claims = match wanted.is_empty() {
            true => Ok(Vec::new()),
            false => self.store.claim_many(&wanted, worker, TTL),
        };
        // Both workers of a pair have claimed before either commits: the second was told "held".
        self.meet(chunk, abort);
        let mut leases = Vec::with_capacity(wanted.len());
        for (&pos, claim) in positions.iter().zip(claims?) {
            match claim {
                ClaimOutcome::Granted { lease, .. } => leases.push((pos, lease)),
                ClaimOutcome::Held { .. } => {
                    self.busy.fetch_add(1, Ordering::Relaxed);
                }
                ClaimOutcome::AlreadyDone(_) => {
                    self.already_done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let size = self.cfg.object_bytes;
        let c = &self.store.inner.metrics.c;
        let mut staged = Vec::with_capacity(leases.len());
        let mut held = leases.into_iter();
        let mut failure = None;
        for (pos, lease) in held.by_ref() {
            let unit = self.key(chunk, pos);
            let output = compute(unit, VERSION, size);
            if self.crashes(round, chunk, pos) {
                // A worker that dies mid-write keeps its lease: a dead process cannot release.
                if let Err(e) = self.crash(unit, output) {
                    failure = Some(e);
                    break;
                }
                continue;
            }
            add(&c.computations, 1);
            match self.store.stage_bytes(&output) {
                Ok(s) => staged.push((lease, s)),
                Err(e) => {
                    let _ = self.store.release(&lease);
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failure {
            // The work of the rest of the chunk will not be committed: give its leases back so
            // that another worker may retry at once, as run_once does when work fails.
            for (_, lease) in held {
                let _ = self.store.release(&lease);
            }
            for (lease, _) in &staged {
                let _ = self.store.release(lease);
            }
            return Err(e);
        }
        if staged.is_empty() {
            return Ok(());
        }
        let batch = staged.iter().fold(Batch::new().partial(), |b, (l, s)| {
            b.put_fenced(l.unit.as_str(), VERSION, s, l.token)
        });
        let report = match self.store.commit(batch) {
            Ok(r) => r,
            Err(e) => {
                for (lease, _) in &staged {
                    let _ = self.store.release(lease);
                }
                return Err(e);
            }
        };
        for ((lease, _), u) in staged.iter().zip(report.units) {
            if !matches!(u.outcome, Outcome::Committed { .. }) {
                // A committed entry ended its lease in the same transaction; any other outcome
                // leaves it live, and the unit no longer needs it.
                add(&c.redundant_computations, 1);
                let _ = self.store.release(lease);
            }
        }
        Ok(())
    }

    fn key(&self, chunk: &Chunk, pos: usize) -> &str {
        &self.keys[chunk.units[pos] as usize]
    }

    /// Leaves half of `output` in a staging file, as a worker killed mid-write would.
    fn crash(&self, unit: &str, output: Vec<u8>) -> Result<()> {
        let n = self.crash_seq.fetch_add(1, Ordering::Relaxed);
        // Not a name the stager would use (those are `<pid>-<session>-<n>.part` and listed as in
        // flight while written), so GC sees what it is: an abandoned staging file.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Every unit queued once, the overlapped ones twice — in the two adjacent chunks of a pair
    /// sharing a rendezvous — chunks within size, and task positions consecutive.
    #[test]
    fn first_round_puts_each_overlapped_unit_in_both_chunks_of_a_pair() {
        for (units, overlapped, chunk) in [
            (1000, 37, 64),
            (1000, 0, 64),
            (1000, 1000, 64),
            (1000, 999, 7),
            (5, 5, 1),
            (1, 1, 64),
            (130, 2, 64),
        ] {
            let chunks = first_round(units, overlapped, 7, chunk);
            let mut seen: HashMap<u32, Vec<usize>> = HashMap::new();
            let mut next_task = 0;
            for (i, c) in chunks.iter().enumerate() {
                assert!(!c.units.is_empty() && c.units.len() <= chunk);
                assert_eq!(c.first_task, next_task);
                next_task += c.units.len();
                for &u in &c.units {
                    seen.entry(u).or_default().push(i);
                }
            }
            assert_eq!(next_task as u64, units + overlapped);
            assert_eq!(seen.len() as u64, units, "every unit queued");
            let mut doubled = 0;
            for (u, at) in &seen {
                match at.as_slice() {
                    [_] => {}
                    [a, b] => {
                        doubled += 1;
                        assert_eq!(a + 1, *b, "unit {u}: chunks {a} and {b} are not adjacent");
                        let (x, y) = (&chunks[*a].pair, &chunks[*b].pair);
                        assert!(Arc::ptr_eq(x.as_ref().unwrap(), y.as_ref().unwrap()));
                    }
                    more => panic!("unit {u} queued {} times", more.len()),
                }
            }
            assert_eq!(doubled, overlapped);
            // A rendezvous joins exactly two chunks, and only chunks that share a unit.
            let mut uses: HashMap<*const Rendezvous, usize> = HashMap::new();
            for c in &chunks {
                if let Some(r) = &c.pair {
                    *uses.entry(Arc::as_ptr(r)).or_default() += 1;
                }
            }
            assert!(
                uses.values().all(|&n| n == 2),
                "{units}/{overlapped}/{chunk}"
            );
        }
    }

    #[test]
    fn retry_rounds_chunk_the_missing_units() {
        let chunks = retry_round((0..10).collect(), 4);
        let sizes: Vec<usize> = chunks.iter().map(|c| c.units.len()).collect();
        assert_eq!(sizes, [4, 4, 2]);
        assert!(chunks.iter().all(|c| c.pair.is_none()));
        assert_eq!(chunks[2].first_task, 8);
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
                chunk: 0,
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
