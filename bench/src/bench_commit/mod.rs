//! The commit workload of SPEC P1, shared by `oncelake-bench commit` and `benches/commit.rs`,
//! so that both measure exactly the same thing.
//!
//! Every system starts from a store preloaded with [`Workload::preload`] units (built once per
//! system, in large transactions, and reused for every thread count), then commits one unit per
//! commit, durably, from `threads` threads:
//!
//! * **oncelake**: `Store::commit` of one pre-staged object per unit (default durable options),
//!   through the group-commit queue;
//! * **redb txn/commit** (baseline b1): one plain redb write transaction per unit
//!   (`Durability::Immediate`), read-then-insert of the unit key;
//! * **sqlite seed 001** (baseline b2): the seed 001 `process_batch` pattern on SQLite (WAL,
//!   `synchronous=FULL`), `BEGIN IMMEDIATE; SELECT ...; INSERT ...; COMMIT` per unit, measured two
//!   ways: each thread on its own connection with a busy timeout (`sqlite_seed001`), and one
//!   connection shared behind a mutex (`sqlite_seed001_shared`).
//!
//! Keys ([`Keys`]): `random` draws keys spread over the whole key space (a bijective hash of the
//! unit number), half of the commits new units and half new versions of preloaded units (each
//! preloaded unit is updated by one thread only, with versions from a rising counter, so no
//! commit is stale); `sequential` commits new units only, at keys that sort after every earlier
//! one (the old P1 variant; with `preload: 0` it is the old sequential/empty bench).
//!
//! It depends only on the engine and on crates both users have (redb, rusqlite); no CLI crates.

mod keys;
mod measurement;
mod oncelake_system;
mod redb_baseline;
mod sqlite_baseline;

pub use keys::{unit_key, KeySource, Next, Writer};
use measurement::finish;
pub use measurement::{quantile, Measurement, Reads};
pub use oncelake_system::preload_oncelake_store;
use oncelake_system::{oncelake_commits, oncelake_preload};
use redb_baseline::{redb_commits, redb_preload};
use sqlite_baseline::{sqlite_commits, sqlite_open, sqlite_preload, sqlite_shared_commits};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// oncelake's group commit.
    Oncelake,
    /// Baseline b1: one redb write transaction per commit.
    RedbTxnPerCommit,
    /// Baseline b2: the seed 001 pattern on SQLite, one connection per thread.
    SqliteSeed001,
    /// Baseline b2': the seed 001 pattern on SQLite, one connection shared behind a mutex.
    SqliteSeed001Shared,
}

impl System {
    /// Every system, oncelake first.
    pub const ALL: [System; 4] = [
        System::Oncelake,
        System::RedbTxnPerCommit,
        System::SqliteSeed001,
        System::SqliteSeed001Shared,
    ];

    /// A short snake_case name for tables, JSON and criterion ids.
    pub fn name(self) -> &'static str {
        match self {
            System::Oncelake => "oncelake",
            System::RedbTxnPerCommit => "redb_txn_per_commit",
            System::SqliteSeed001 => "sqlite_seed001",
            System::SqliteSeed001Shared => "sqlite_seed001_shared",
        }
    }

    /// Parses a name as printed by [`System::name`] (or a short alias).
    pub fn parse(s: &str) -> Option<System> {
        match s.trim() {
            "oncelake" => Some(System::Oncelake),
            "redb" | "redb_txn_per_commit" | "b1" => Some(System::RedbTxnPerCommit),
            "sqlite" | "sqlite_seed001" | "b2" => Some(System::SqliteSeed001),
            "sqlite_shared" | "sqlite_seed001_shared" | "b2s" => Some(System::SqliteSeed001Shared),
            _ => None,
        }
    }

    /// Whether this is one of the SQLite baselines (the target quotes the faster of the two).
    pub fn is_sqlite(self) -> bool {
        matches!(self, System::SqliteSeed001 | System::SqliteSeed001Shared)
    }
}

/// Which keys the commits carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Keys spread over the key space; half new units, half new versions of preloaded units.
    Random,
    /// New units only, each key sorting after every earlier one.
    Sequential,
}

impl Keys {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Keys::Random => "random",
            Keys::Sequential => "sequential",
        }
    }

    /// Parses [`Keys::name`].
    pub fn parse(s: &str) -> Option<Keys> {
        match s.trim() {
            "random" => Some(Keys::Random),
            "sequential" => Some(Keys::Sequential),
            _ => None,
        }
    }
}

/// What every system's store holds before the timed commits, and which keys they carry.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Units committed before the timed part (SPEC P1: 1,000,000).
    pub preload: u64,
    /// The keys of the timed commits.
    pub keys: Keys,
    /// The engine's backlog limits for the timed commits (`None`: the engine's defaults).
    pub tuning: Tuning,
}

pub use crate::tuning::{Floor, Tuning};

impl Workload {
    /// SPEC P1: 1,000,000 preloaded units, random keys, the engine's defaults.
    pub const P1: Workload = Workload {
        preload: 1_000_000,
        keys: Keys::Random,
        tuning: Tuning {
            backlog_bytes: None,
            apply_batch_bytes: None,
            cache_bytes: None,
            apply_min_bytes: None,
            background_apply: None,
            floor: Floor::None,
        },
    };
}

/// How much to run one configuration.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Writer threads.
    pub threads: usize,
    /// Stop after this many committed units (a commit that starts below it completes, so with
    /// several units a commit the last one may go past it by less than one commit).
    pub max_units: usize,
    /// ... or after this much time, whichever comes first.
    pub max_time: Duration,
    /// Units each commit carries (SPEC P1: 1). Every system commits them in one transaction: one
    /// oncelake `Batch`, one redb write transaction, one SQLite `BEGIN IMMEDIATE … COMMIT` with
    /// seed 001's check-then-insert per unit. A caller that gathers its units — a batch job, the
    /// server's committers — pays a thread's wait and wake once per commit, not per unit.
    pub units_per_commit: usize,
    /// oncelake: time one read ([`oncelake::Store::get`] of a preloaded unit) every 20 ms while
    /// the writers run, on a thread of its own. A read sees every commit acknowledged before it,
    /// so it waits for (or applies) the backlog acknowledged by then: what a reader pays under
    /// the write load.
    pub read_probe: bool,
    /// oncelake: commits each writer keeps in flight through [`oncelake::Store::submit`] (0:
    /// one blocking [`oncelake::Store::commit`] at a time). A commit's latency is from its
    /// submission to its answer.
    pub in_flight: usize,
}

impl Plan {
    /// `threads` writers committing one unit per commit until `max_units` or `max_time`.
    pub fn new(threads: usize, max_units: usize, max_time: Duration) -> Plan {
        Plan {
            threads,
            max_units,
            max_time,
            units_per_commit: 1,
            read_probe: false,
            in_flight: 0,
        }
    }
}

/// Builds a system's preloaded store once in a fresh directory under `scratch`; [`Bench::run`]
/// then measures any number of thread counts on it. The directory is removed on drop.
pub struct Bench {
    system: System,
    workload: Workload,
    dir: PathBuf,
    target: Target,
    keygen: KeySource,
    /// Units in the store now.
    units: u64,
    /// How long building the preload took.
    pub preload_time: Duration,
}

enum Target {
    Oncelake {
        store: oncelake::Store,
        staged: oncelake::Staged,
    },
    Redb(redb::Database),
    Sqlite(PathBuf),
    SqliteShared(Mutex<rusqlite::Connection>),
}

impl Drop for Bench {
    fn drop(&mut self) {
        // Close the store before its directory goes.
        self.target = Target::Sqlite(PathBuf::new());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs one configuration on a fresh preloaded store under `scratch` (removed afterwards).
pub fn measure(
    system: System,
    workload: Workload,
    plan: Plan,
    scratch: &Path,
) -> Result<Measurement, String> {
    Bench::new(system, workload, scratch)?.run(plan)
}

impl Bench {
    /// Creates `system`'s store under `scratch` and preloads it.
    pub fn new(system: System, workload: Workload, scratch: &Path) -> Result<Bench, String> {
        let dir = scratch.join(format!("{}-{}", system.name(), std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let t0 = Instant::now();
        let target = match system {
            System::Oncelake => oncelake_preload(&dir, workload)?,
            System::RedbTxnPerCommit => Target::Redb(redb_preload(&dir, workload)?),
            System::SqliteSeed001 => Target::Sqlite(sqlite_preload(&dir, workload)?),
            System::SqliteSeed001Shared => {
                Target::SqliteShared(Mutex::new(sqlite_open(&sqlite_preload(&dir, workload)?)?))
            }
        };
        Ok(Bench {
            system,
            workload,
            dir,
            target,
            keygen: KeySource::new(workload),
            units: workload.preload,
            preload_time: t0.elapsed(),
        })
    }

    /// Measures `plan` on the store as it is now (it keeps the units of earlier runs).
    pub fn run(&mut self, plan: Plan) -> Result<Measurement, String> {
        let keygen = &self.keygen;
        let cpu_before = crate::bench_fixtures::cpu_time();
        let rss_reset = crate::bench_fixtures::reset_peak_rss();
        let mut m = match &self.target {
            Target::Oncelake { store, staged } => oncelake_commits(store, staged, keygen, plan)?,
            Target::Redb(db) => finish(
                System::RedbTxnPerCommit,
                plan,
                redb_commits(db, keygen, plan)?,
            ),
            Target::Sqlite(path) => finish(
                System::SqliteSeed001,
                plan,
                sqlite_commits(path, keygen, plan)?,
            ),
            Target::SqliteShared(conn) => finish(
                System::SqliteSeed001Shared,
                plan,
                sqlite_shared_commits(conn, keygen, plan)?,
            ),
        };
        debug_assert_eq!(m.system, self.system);
        m.cpu = cpu_before
            .zip(crate::bench_fixtures::cpu_time())
            .map(|(b, a)| a.saturating_sub(b));
        m.peak_rss = rss_reset
            .then(crate::bench_fixtures::peak_rss_bytes)
            .flatten();
        m.store_units_before = self.units;
        self.units += m.units;
        Ok(m)
    }

    /// The workload this bench was built for.
    pub fn workload(&self) -> Workload {
        self.workload
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Every system runs on a preloaded store and commits exactly what the plan asks, one unit or
    /// five per commit (oncelake fails the run on any outcome but committed), and oncelake's
    /// store then holds every unit.
    #[test]
    fn every_system_commits_the_plan_on_a_preloaded_store() {
        let scratch = tempfile::tempdir().unwrap();
        let w = Workload {
            preload: 3000,
            ..Workload::P1
        };
        for system in System::ALL {
            let mut bench = Bench::new(system, w, scratch.path()).unwrap();
            let mut total = 0;
            // In flight: oncelake through `Store::submit` (the other systems ignore it).
            for (threads, per_commit, in_flight) in
                [(1, 1, 0), (4, 1, 0), (4, 5, 0), (1, 1, 16), (2, 5, 4)]
            {
                let plan = Plan {
                    units_per_commit: per_commit,
                    in_flight,
                    ..Plan::new(threads, 200, Duration::from_secs(600))
                };
                let before = match &bench.target {
                    Target::Oncelake { store, .. } => Some(store.metrics()),
                    _ => None,
                };
                let m = bench.run(plan).unwrap();
                assert_eq!(m.units, 200, "{} {per_commit}", system.name());
                if let (Target::Oncelake { store, .. }, Some(before)) = (&bench.target, before) {
                    // The engine's own counts: 200 units, in commits of `per_commit` each.
                    let after = store.metrics();
                    assert_eq!(after.units_committed - before.units_committed, 200);
                    assert_eq!(after.commits - before.commits, 200 / per_commit as u64);
                }
                assert_eq!(m.store_units_before, 3000 + total);
                total += m.units;
            }
            if let Target::Oncelake { store, .. } = &bench.target {
                let new_units = bench.keygen.next_new.load(Ordering::Relaxed) - 3000;
                let entries = store.snapshot().unwrap().iter().unwrap().count() as u64;
                assert_eq!(entries, 3000 + new_units);
                assert!(new_units < total, "some commits were updates");
            }
        }
    }
}
