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

mod queue;
mod report;
mod workers;

pub use report::SimReport;
pub use workers::Progress;

use oncelake::gc::GcOptions;
use oncelake::{Clock, Error, ManualClock, Options, Result, Store, SystemClock};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use workers::{unit_key, Sim};

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

    pub(crate) fn validate(&self) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
