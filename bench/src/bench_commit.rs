//! The commit workload of SPEC P1, shared by `oncelake bench commit` and `benches/commit.rs`,
//! so that both measure exactly the same thing.
//!
//! Every system commits distinct units, one per commit, durably, from `threads` threads:
//!
//! * **oncelake**: `Store::commit` of one pre-staged object per unit (default durable options),
//!   through the group-commit queue;
//! * **redb txn/commit** (baseline b1): one plain redb write transaction per unit
//!   (`Durability::Immediate`), check-then-insert of the unit key;
//! * **sqlite seed 001** (baseline b2): the seed 001 `process_batch` pattern on SQLite (WAL,
//!   `synchronous=FULL`), `BEGIN IMMEDIATE; SELECT ...; INSERT ...; COMMIT` per unit, each thread on
//!   its own connection with a busy timeout.
//!
//! It depends only on the engine and on crates both users have (redb, rusqlite); no CLI crates.

use redb::ReadableTable;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// A system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// oncelake's group commit.
    Oncelake,
    /// Baseline b1: one redb write transaction per commit.
    RedbTxnPerCommit,
    /// Baseline b2: the seed 001 pattern on SQLite.
    SqliteSeed001,
}

impl System {
    /// Every system, oncelake first.
    pub const ALL: [System; 3] = [
        System::Oncelake,
        System::RedbTxnPerCommit,
        System::SqliteSeed001,
    ];

    /// A short snake_case name for tables, JSON and criterion ids.
    pub fn name(self) -> &'static str {
        match self {
            System::Oncelake => "oncelake",
            System::RedbTxnPerCommit => "redb_txn_per_commit",
            System::SqliteSeed001 => "sqlite_seed001",
        }
    }

    /// Parses a name as printed by [`System::name`] (or a short alias).
    pub fn parse(s: &str) -> Option<System> {
        match s.trim() {
            "oncelake" => Some(System::Oncelake),
            "redb" | "redb_txn_per_commit" | "b1" => Some(System::RedbTxnPerCommit),
            "sqlite" | "sqlite_seed001" | "b2" => Some(System::SqliteSeed001),
            _ => None,
        }
    }
}

/// How much to run one configuration.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Writer threads.
    pub threads: usize,
    /// Stop after this many committed units.
    pub max_units: usize,
    /// ... or after this much time, whichever comes first.
    pub max_time: Duration,
}

/// What one configuration measured.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// The system.
    pub system: System,
    /// Writer threads.
    pub threads: usize,
    /// Units committed.
    pub units: u64,
    /// Wall time from the start signal until the last writer finished.
    pub elapsed: Duration,
    /// Median commit latency, microseconds.
    pub p50_us: u64,
    /// 99th percentile commit latency, microseconds.
    pub p99_us: u64,
    /// Largest commit latency, microseconds.
    pub max_us: u64,
    /// oncelake only: mean units per commit group (redb transaction).
    pub mean_group: Option<f64>,
    /// oncelake only: groups written.
    pub groups: Option<u64>,
}

impl Measurement {
    /// Throughput.
    pub fn units_per_sec(&self) -> f64 {
        self.units as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs one configuration in a fresh directory under `scratch` (removed afterwards).
pub fn measure(system: System, plan: Plan, scratch: &Path) -> Result<Measurement, String> {
    let threads = plan.threads.max(1);
    let dir = scratch.join(format!(
        "{}-{}t-{}",
        system.name(),
        threads,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let result = match system {
        System::Oncelake => oncelake_commits(&dir, plan),
        System::RedbTxnPerCommit => redb_commits(&dir, plan),
        System::SqliteSeed001 => sqlite_commits(&dir, plan),
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The timings of one run of the driver.
struct Timings {
    units: u64,
    elapsed: Duration,
    latencies_us: Vec<u32>,
}

/// Runs `threads` writers, each first preparing its own state with `setup`, then, after a common
/// start signal, committing units (numbered from a shared counter) with `commit` until the plan
/// is exhausted.
fn drive<S, C, W>(plan: Plan, setup: S, commit: C) -> Result<Timings, String>
where
    S: Fn(usize) -> Result<W, String> + Sync,
    C: Fn(&mut W, usize) -> Result<(), String> + Sync,
{
    let threads = plan.threads.max(1);
    let next = AtomicUsize::new(0);
    let start_line = Barrier::new(threads + 1);
    let start = std::sync::OnceLock::new();
    let results: Vec<Result<Vec<u32>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (setup, commit, next, start_line, start) =
                    (&setup, &commit, &next, &start_line, &start);
                s.spawn(move || {
                    let state = setup(t);
                    start_line.wait();
                    let mut state = state?;
                    let start: &Instant = start.wait();
                    let mut lat = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= plan.max_units || start.elapsed() >= plan.max_time {
                            break;
                        }
                        let t0 = Instant::now();
                        commit(&mut state, i)?;
                        lat.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    }
                    Ok(lat)
                })
            })
            .collect();
        start_line.wait();
        let _ = start.set(Instant::now());
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into())))
            .collect()
    });
    let elapsed = start.get().map(|s| s.elapsed()).unwrap_or_default();
    let mut latencies_us = Vec::new();
    for r in results {
        latencies_us.extend(r?);
    }
    Ok(Timings {
        units: latencies_us.len() as u64,
        elapsed,
        latencies_us,
    })
}

fn finish(system: System, plan: Plan, mut t: Timings) -> Measurement {
    t.latencies_us.sort_unstable();
    let q = |q: f64| -> u64 {
        if t.latencies_us.is_empty() {
            return 0;
        }
        let i = ((t.latencies_us.len() as f64 * q).ceil() as usize).clamp(1, t.latencies_us.len());
        u64::from(t.latencies_us[i - 1])
    };
    Measurement {
        system,
        threads: plan.threads.max(1),
        units: t.units,
        elapsed: t.elapsed,
        p50_us: q(0.50),
        p99_us: q(0.99),
        max_us: q(1.0),
        mean_group: None,
        groups: None,
    }
}

fn unit_key(i: usize) -> String {
    format!("bench/orders/customer={:06}/date=2026-11-29", i)
}

fn oncelake_commits(dir: &Path, plan: Plan) -> Result<Measurement, String> {
    let store = oncelake::Store::open(dir.join("lake")).map_err(|e| e.to_string())?;
    // Objects are pre-staged (P1 measures the commit path): one per writer thread.
    let staged: Vec<oncelake::Staged> = (0..plan.threads.max(1))
        .map(|t| store.stage_bytes(format!("bench output of writer {t}").as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let before = store.metrics();
    let timings = drive(
        plan,
        |t| Ok(staged[t].clone()),
        |staged, i| {
            let report = store
                .commit(oncelake::Batch::new().put(unit_key(i), 1, staged))
                .map_err(|e| e.to_string())?;
            match report.units[0].outcome {
                oncelake::Outcome::Committed { .. } => Ok(()),
                other => Err(format!("unit {i} was not committed: {other:?}")),
            }
        },
    )?;
    let after = store.metrics();
    let mut m = finish(System::Oncelake, plan, timings);
    let groups = after.groups - before.groups;
    let units = after.group_units.sum - before.group_units.sum;
    m.groups = Some(groups);
    m.mean_group = Some(units as f64 / groups.max(1) as f64);
    Ok(m)
}

const REDB_UNITS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("units");

fn redb_commits(dir: &Path, plan: Plan) -> Result<Measurement, String> {
    let db = redb::Database::create(dir.join("b1.redb")).map_err(|e| e.to_string())?;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    {
        let txn = db.begin_write().map_err(|e| err(&e))?;
        txn.open_table(REDB_UNITS).map_err(|e| err(&e))?;
        txn.commit().map_err(|e| err(&e))?;
    }
    // The same 64-byte value an oncelake manifest entry carries, roughly: hash, size, crc, seq.
    let value = [7u8; 64];
    let timings = drive(
        plan,
        |_| Ok(()),
        |_, i| {
            let key = unit_key(i);
            let mut txn = db.begin_write().map_err(|e| err(&e))?;
            txn.set_durability(redb::Durability::Immediate)
                .map_err(|e| err(&e))?;
            {
                let mut t = txn.open_table(REDB_UNITS).map_err(|e| err(&e))?;
                let exists = t.get(key.as_str()).map_err(|e| err(&e))?.is_some();
                if !exists {
                    t.insert(key.as_str(), value.as_slice())
                        .map_err(|e| err(&e))?;
                }
            }
            txn.commit().map_err(|e| err(&e))
        },
    )?;
    Ok(finish(System::RedbTxnPerCommit, plan, timings))
}

fn sqlite_open(path: &PathBuf) -> Result<rusqlite::Connection, String> {
    let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
    conn.busy_timeout(Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
        .map_err(|e| e.to_string())?;
    Ok(conn)
}

fn sqlite_commits(dir: &Path, plan: Plan) -> Result<Measurement, String> {
    let path = dir.join("b2.sqlite");
    sqlite_open(&path)?
        .execute_batch(
            "CREATE TABLE checkpoints (batch_id TEXT NOT NULL, hash TEXT NOT NULL, \
             PRIMARY KEY (batch_id, hash));",
        )
        .map_err(|e| e.to_string())?;
    let hash = oncelake::ObjectId::of(b"bench output").to_hex();
    let timings = drive(
        plan,
        |_| sqlite_open(&path),
        |conn, i| {
            let key = unit_key(i);
            let e = |e: rusqlite::Error| e.to_string();
            conn.execute_batch("BEGIN IMMEDIATE").map_err(e)?;
            let done = (|| -> Result<(), rusqlite::Error> {
                let exists = {
                    let mut check = conn.prepare_cached(
                        "SELECT 1 FROM checkpoints WHERE batch_id = ?1 AND hash = ?2",
                    )?;
                    check.exists((key.as_str(), hash.as_str()))?
                };
                if !exists {
                    conn.prepare_cached(
                        "INSERT INTO checkpoints (batch_id, hash) VALUES (?1, ?2)",
                    )?
                    .execute((key.as_str(), hash.as_str()))?;
                }
                conn.execute_batch("COMMIT")
            })();
            if let Err(err) = done {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(err.to_string());
            }
            Ok(())
        },
    )?;
    Ok(finish(System::SqliteSeed001, plan, timings))
}

/// The disk's sync latency right now: the median of `n` 4 KiB writes, each followed by
/// `fdatasync`, in a file under `scratch`. The disk here swings from fast to slow when other
/// processes write, so the bench prints this next to its figures.
pub fn fsync_probe(scratch: &Path, n: usize) -> Result<Duration, String> {
    use std::io::Write;
    let path = scratch.join(format!("fsync-probe-{}", std::process::id()));
    let run = || -> std::io::Result<Duration> {
        let mut f = std::fs::File::create(&path)?;
        let block = [0x5au8; 4096];
        let mut times = Vec::with_capacity(n.max(1));
        for _ in 0..n.max(1) {
            let t0 = Instant::now();
            f.write_all(&block)?;
            f.sync_data()?;
            times.push(t0.elapsed());
        }
        times.sort_unstable();
        Ok(times[times.len() / 2])
    };
    let r = run().map_err(|e| format!("fsync probe in {}: {e}", scratch.display()));
    let _ = std::fs::remove_file(&path);
    r
}
