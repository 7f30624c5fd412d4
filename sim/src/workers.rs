//! The worker threads: rounds of chunks through the engine's batched calls, the simulated
//! crashes in the middle of a work, and the retry rounds until every unit has its entry.

use crate::queue::{first_round, retry_round, roll, Chunk, ChunkCall};
use crate::{Schedule, SimConfig, SimMode};
use oncelake::{Error, ManualClock, Result, RunError, RunOutcome, Store};
use parking_lot::Mutex;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Progress: (attempts finished, attempts scheduled so far). Called from the calling thread.
pub type Progress<'a> = &'a dyn Fn(u64, u64);

/// The source version every simulated unit is produced at.
const VERSION: u64 = 1;
/// The lease TTL of simulated workers. The simulated clock only moves between rounds, so a live
/// lease never expires while its worker runs.
const TTL: Duration = Duration::from_secs(30);
/// More rounds than this means crashes never stop: give up rather than loop.
const MAX_ROUNDS: u32 = 10_000;

/// The key of unit `i`: one partition per customer, as in the seed.
pub(crate) fn unit_key(i: u64) -> String {
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

/// The payload a simulated crash unwinds with (through `resume_unwind`, so no panic hook runs and
/// nothing is printed).
struct SimulatedCrash;

/// One simulation's shared state: the configuration, the store, the unit keys and the crash
/// counts of every worker thread.
pub(crate) struct Sim<'a> {
    pub(crate) cfg: &'a SimConfig,
    pub(crate) store: &'a Store,
    pub(crate) keys: Vec<String>,
    pub(crate) crashed: AtomicU64,
    pub(crate) crash_seq: AtomicU64,
}

impl Sim<'_> {
    /// Runs rounds until every unit has its entry; returns how many rounds it took.
    pub(crate) fn run_rounds(
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
