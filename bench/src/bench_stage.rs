//! The staging workload of SPEC P4, used by `oncelake-bench stage`: `threads` threads each
//! write objects of one size, durably, against the same bytes written the plainest durable way.
//!
//! * **oncelake**: per object `Store::stage_bytes` (hash and CRC32 while writing, the file
//!   fsynced, linked under its hash, its directory fsynced) and then `Store::commit` of it as a
//!   new unit (default, durable options: group commit, one redb sync per group);
//! * **raw** (the baseline): per object a new file in one directory, `write` of the same bytes,
//!   `fdatasync`, `close` — no hash, no directory sync, no commit.
//!
//! Both write the same bytes (a random block per thread whose first 16 bytes carry the run, the
//! thread and a counter, so every object is distinct and nothing collapses as a duplicate), of the
//! same size, from the same number of threads, on the same file system (two directories side by
//! side under one scratch directory). Each system keeps its directory for the whole bench — one
//! store, opened once, as an application keeps it — and nothing is deleted until the bench ends:
//! on an ext4 without a journal, creating files within a minute of deleting thousands makes the
//! inode allocator skip every recently freed inode, which cost a third of all CPU and halved the
//! rounds that followed a deletion (BENCHMARKS, P4). The scratch directory therefore holds up to
//! rounds × sizes × 2 × the byte limit until the bench ends. The CLI alternates the two systems
//! round by round, so both see the same moments of a shared machine, and quotes medians.
//!
//! It depends only on the engine: no CLI crates.

use crate::bench_fixtures::Rng;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// A system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// `stage_bytes` + `commit` per object.
    Oncelake,
    /// Baseline: create, write, fdatasync, close per object.
    Raw,
}

impl System {
    /// Both systems, the baseline first (the order of a round).
    pub const ALL: [System; 2] = [System::Raw, System::Oncelake];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            System::Oncelake => "oncelake",
            System::Raw => "raw",
        }
    }
}

/// How much to run one configuration.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Writer threads.
    pub threads: usize,
    /// Size of every object, bytes.
    pub object_bytes: usize,
    /// Stop after this many bytes written in all (rounded up to whole objects) ...
    pub max_bytes: u64,
    /// ... or after this much time, whichever comes first.
    pub max_time: Duration,
}

impl Plan {
    /// Objects the byte limit allows (at least one).
    pub fn max_objects(&self) -> u64 {
        self.max_bytes
            .div_ceil(self.object_bytes.max(1) as u64)
            .max(1)
    }
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// The system.
    pub system: System,
    /// Writer threads.
    pub threads: usize,
    /// Size of every object, bytes.
    pub object_bytes: usize,
    /// Objects written (and, for oncelake, committed).
    pub objects: u64,
    /// Wall time from the start signal until the last writer finished.
    pub elapsed: Duration,
    /// Median time per object, microseconds.
    pub p50_us: u64,
    /// 99th percentile time per object, microseconds.
    pub p99_us: u64,
    /// oncelake only: commit groups written (redb write transactions).
    pub groups: Option<u64>,
}

impl Measurement {
    /// Bytes written.
    pub fn bytes(&self) -> u64 {
        self.objects * self.object_bytes as u64
    }

    /// Throughput in MiB/s.
    pub fn mib_per_sec(&self) -> f64 {
        self.bytes() as f64 / (1024.0 * 1024.0) / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The scratch directory of one `bench stage`: `raw/` and `lake/` (one store) side by side, kept
/// for every run of the bench and removed on drop.
pub struct StageBench {
    dir: PathBuf,
    /// The store of every oncelake run, opened at its first (default, durable options).
    store: Option<oncelake::Store>,
    /// Runs so far: names every run's files and units, and salts its objects.
    run: u64,
}

impl Drop for StageBench {
    fn drop(&mut self) {
        drop(self.store.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl StageBench {
    /// A fresh scratch directory under `scratch`.
    pub fn new(scratch: &Path) -> Result<StageBench, String> {
        let dir = scratch.join(format!("stage-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("raw"))
            .map_err(|e| format!("create {}: {e}", dir.display()))?;
        Ok(StageBench {
            dir,
            store: None,
            run: 0,
        })
    }

    /// Runs `plan` on `system`: new files in the system's directory, new units in its store.
    pub fn run(&mut self, system: System, plan: Plan) -> Result<Measurement, String> {
        self.run += 1;
        match system {
            System::Raw => raw_run(&self.dir.join("raw"), self.run, plan),
            System::Oncelake => {
                if self.store.is_none() {
                    // Default options: durable commits, as a user gets them.
                    let store =
                        oncelake::Store::open(self.dir.join("lake")).map_err(|e| e.to_string())?;
                    self.store = Some(store);
                }
                let store = self
                    .store
                    .as_ref()
                    .expect("invariant: the store was opened just above");
                oncelake_run(store, self.run, plan)
            }
        }
    }
}

/// A writer's bytes: one random block, its first 16 bytes rewritten per object with
/// (thread, counter), so every object of a run is distinct. The block depends on the size and
/// the thread only: the raw run and the oncelake run of a round write exactly the same bytes.
struct Payload {
    bytes: Vec<u8>,
    tag: u64,
    counter: u64,
}

impl Payload {
    /// Thread `thread`'s objects of run `run`: the same sequence for the same (size, thread),
    /// distinct from every other run's and thread's by their first 16 bytes.
    fn new(size: usize, run: u64, thread: usize) -> Self {
        let mut rng = Rng::new(0x5eed ^ ((size as u64) << 20) ^ thread as u64);
        let mut bytes = vec![0u8; size.max(16)];
        for chunk in bytes.chunks_mut(8) {
            let x = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&x[..chunk.len()]);
        }
        bytes.truncate(size);
        Payload {
            bytes,
            tag: (run << 32) | thread as u64,
            counter: 0,
        }
    }

    /// The next object's bytes.
    fn next(&mut self) -> &[u8] {
        self.counter += 1;
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&self.tag.to_le_bytes());
        head[8..].copy_from_slice(&self.counter.to_le_bytes());
        let n = self.bytes.len().min(16);
        self.bytes[..n].copy_from_slice(&head[..n]);
        &self.bytes
    }
}

/// Runs `plan.threads` writers, each with its own state from `setup(thread)`, writing objects
/// with `write` from a common start signal until the plan is exhausted. Returns the per-object
/// latencies and the wall time.
fn drive<S, W, F>(plan: Plan, setup: S, write: F) -> Result<(Vec<u32>, Duration), String>
where
    S: Fn(usize) -> W + Sync,
    F: Fn(&mut W) -> Result<(), String> + Sync,
{
    let run = crate::writers::Run {
        threads: plan.threads,
        step: 1,
        limit: plan.max_objects(),
        max_time: plan.max_time,
    };
    crate::writers::drive(&run, |t| Ok(setup(t)), write)
}

fn finish(
    system: System,
    plan: Plan,
    (mut lat, elapsed): (Vec<u32>, Duration),
    groups: Option<u64>,
) -> Measurement {
    lat.sort_unstable();
    let q = |q: f64| crate::bench_commit::quantile(&lat, q);
    Measurement {
        system,
        threads: plan.threads.max(1),
        object_bytes: plan.object_bytes,
        objects: lat.len() as u64,
        elapsed,
        p50_us: q(0.50),
        p99_us: q(0.99),
        groups,
    }
}

/// The baseline: a new file per object in `dir`, written, `fdatasync`ed, closed.
fn raw_run(dir: &Path, run: u64, plan: Plan) -> Result<Measurement, String> {
    let names = AtomicUsize::new(0);
    let timings = drive(
        plan,
        |t| Payload::new(plan.object_bytes, run, t),
        |payload| {
            let n = names.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("{run}-{n}.raw"));
            let io = |e: std::io::Error| format!("raw write {}: {e}", path.display());
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(io)?;
            f.write_all(payload.next()).map_err(io)?;
            f.sync_data().map_err(io)
        },
    )?;
    Ok(finish(System::Raw, plan, timings, None))
}

/// oncelake: stage the object, then commit it as a new unit, from every thread at once.
fn oncelake_run(store: &oncelake::Store, run: u64, plan: Plan) -> Result<Measurement, String> {
    let e = |e: oncelake::Error| e.to_string();
    let units = AtomicU64::new(0);
    let before = store.metrics().groups;
    let prefix = format!("bench/stage/{run:06}/");
    let timings = drive(
        plan,
        |t| Payload::new(plan.object_bytes, run, t),
        |payload| {
            let staged = store.stage_bytes(payload.next()).map_err(e)?;
            let n = units.fetch_add(1, Ordering::Relaxed);
            let unit = format!("{prefix}{n:09}");
            let report = store
                .commit(oncelake::Batch::new().put(unit, 1, &staged))
                .map_err(e)?;
            if !report.applied() {
                return Err("bench stage: a new unit's commit was not applied".into());
            }
            Ok(())
        },
    )?;
    let groups = store.metrics().groups - before;
    // Outside the timed part: every acknowledged object must be a unit of the store.
    let entries = store
        .snapshot()
        .and_then(|s| s.prefix(&prefix).map(|it| it.count() as u64))
        .map_err(e)?;
    if entries != timings.0.len() as u64 {
        return Err(format!(
            "bench stage: {} objects acknowledged but the store holds {entries} units of the run",
            timings.0.len()
        ));
    }
    Ok(finish(System::Oncelake, plan, timings, Some(groups)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every object of a run is distinct (nothing collapses as a duplicate), of the planned size,
    /// and the byte limit stops the run: both systems write the same number of objects.
    #[test]
    fn both_systems_write_the_planned_distinct_objects() {
        let mut seen = HashSet::new();
        for run in 1..=2 {
            for thread in 0..3 {
                let mut p = Payload::new(100, run, thread);
                for _ in 0..50 {
                    let b = p.next().to_vec();
                    assert_eq!(b.len(), 100);
                    assert!(seen.insert(b), "an object repeated");
                }
            }
        }
        // Two runs with the same (size, thread) write the same bytes but the first 16.
        let sequence = |run| {
            let mut p = Payload::new(100, run, 1);
            (0..5).map(|_| p.next()[16..].to_vec()).collect::<Vec<_>>()
        };
        assert_eq!(sequence(1), sequence(2));
        let scratch = tempfile::tempdir().unwrap();
        let mut bench = StageBench::new(scratch.path()).unwrap();
        let plan = Plan {
            threads: 2,
            object_bytes: 4096,
            max_bytes: 40 * 4096,
            max_time: Duration::from_secs(60),
        };
        // Two rounds in the same directories: the second writes 40 new objects (none collapses
        // onto the first round's), and nothing of the first is deleted.
        for round in 1..=2u64 {
            for system in System::ALL {
                let m = bench.run(system, plan).unwrap();
                assert_eq!(m.objects, 40, "{system:?} round {round}");
                assert_eq!(m.bytes(), 40 * 4096);
                assert!(m.p50_us <= m.p99_us);
            }
        }
        let raw_files = std::fs::read_dir(bench.dir.join("raw")).unwrap().count();
        assert_eq!(raw_files, 80, "both raw rounds' files are kept");
        let store = bench.store.as_ref().unwrap();
        let units = store
            .snapshot()
            .and_then(|s| s.prefix("bench/stage/").map(|it| it.count()))
            .unwrap();
        assert_eq!(
            units, 80,
            "both oncelake rounds' units are in the one store"
        );
        let dir = bench.dir.clone();
        drop(bench);
        assert!(!dir.exists(), "the scratch directory is removed at the end");
    }
}
