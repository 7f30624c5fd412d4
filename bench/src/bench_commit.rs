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

use crate::bench_fixtures::Rng;
use redb::ReadableTable;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// Mean units per durable transaction (oncelake: per commit group; baselines: 1).
    pub mean_group: f64,
    /// oncelake only: groups written.
    pub groups: Option<u64>,
    /// Wall time until every acknowledged unit was also applied to the B-trees. oncelake
    /// acknowledges a group once its write-ahead record is synced and applies it to the B-trees
    /// afterwards (its backlog), so this is `elapsed` plus the time to drain what is left; the
    /// baselines apply before they answer.
    pub applied_elapsed: Duration,
    /// The most units acknowledged but not yet applied, sampled every 20 ms over the run
    /// (oncelake; the backlog is bounded, so this stays below its bound).
    pub max_backlog: Option<u64>,
    /// The backlog's size in units at each tenth of the run (oncelake).
    pub backlog_by_tenth: Vec<u64>,
    /// oncelake only: whether the store's own thread applied the backlog (else the writers did).
    pub applier_thread: Option<bool>,
    /// oncelake with [`Plan::read_probe`]: the probe's reads.
    pub reads: Option<Reads>,
    /// Units preloaded before this configuration ran (the preload plus earlier runs' units).
    pub store_units_before: u64,
    /// CPU time of the whole process (user + system) from the writers' start until every unit
    /// was applied (oncelake: the drain included); `None` where /proc is not available.
    pub cpu: Option<Duration>,
    /// The process's peak resident set over the same span (its high-water mark reset at the
    /// start); `None` where /proc is not available.
    pub peak_rss: Option<u64>,
}

impl Measurement {
    /// CPU microseconds per committed unit, all threads together (see [`Measurement::cpu`]).
    pub fn cpu_us_per_unit(&self) -> Option<f64> {
        self.cpu
            .map(|c| c.as_secs_f64() * 1e6 / self.units.max(1) as f64)
    }

    /// Throughput of acknowledged units.
    pub fn units_per_sec(&self) -> f64 {
        self.units as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Throughput counted until everything acknowledged was also applied.
    pub fn sustained_units_per_sec(&self) -> f64 {
        self.units as f64 / self.applied_elapsed.as_secs_f64().max(1e-9)
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

/// The timings of one run of the driver.
struct Timings {
    units: u64,
    elapsed: Duration,
    latencies_us: Vec<u32>,
}

/// Runs `threads` writers, each first preparing its own state with `setup(thread)`, then, after
/// a common start signal, making commits of `plan.units_per_commit` units with `commit` until the
/// plan is exhausted.
fn drive<S, C, W>(plan: Plan, setup: S, commit: C) -> Result<Timings, String>
where
    S: Fn(usize) -> Result<W, String> + Sync,
    C: Fn(&mut W) -> Result<(), String> + Sync,
{
    let per_commit = plan.units_per_commit.max(1);
    let run = crate::writers::Run {
        threads: plan.threads,
        step: per_commit as u64,
        limit: plan.max_units as u64,
        max_time: plan.max_time,
    };
    let (latencies_us, elapsed) = crate::writers::drive(&run, setup, commit)?;
    Ok(Timings {
        units: (latencies_us.len() * per_commit) as u64,
        elapsed,
        latencies_us,
    })
}

/// The nearest-rank `q` quantile of `sorted` (0 when it is empty): every bench's latency figures.
pub fn quantile<T: Copy + Into<u64>>(sorted: &[T], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[i - 1].into()
}

/// What the read probe ([`Plan::read_probe`]) measured.
#[derive(Clone, Copy, Debug)]
pub struct Reads {
    /// Reads made.
    pub count: usize,
    /// Median read latency, microseconds.
    pub p50_us: u64,
    /// 99th percentile, microseconds.
    pub p99_us: u64,
    /// Largest, microseconds.
    pub max_us: u64,
}

impl Reads {
    fn of(sorted_us: &[u64]) -> Reads {
        Reads {
            count: sorted_us.len(),
            p50_us: quantile(sorted_us, 0.50),
            p99_us: quantile(sorted_us, 0.99),
            max_us: quantile(sorted_us, 1.0),
        }
    }
}

fn finish(system: System, plan: Plan, mut t: Timings) -> Measurement {
    t.latencies_us.sort_unstable();
    let q = |q: f64| quantile(&t.latencies_us, q);
    Measurement {
        system,
        threads: plan.threads.max(1),
        units: t.units,
        elapsed: t.elapsed,
        p50_us: q(0.50),
        p99_us: q(0.99),
        max_us: q(1.0),
        mean_group: 1.0,
        groups: None,
        applied_elapsed: t.elapsed,
        max_backlog: None,
        backlog_by_tenth: Vec::new(),
        applier_thread: None,
        reads: None,
        store_units_before: 0,
        cpu: None,
        peak_rss: None,
    }
}

/// A bijection of `u64` (splitmix64's finaliser): spreads unit numbers over the key space.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key of unit number `i` under `keys`.
pub fn unit_key(keys: Keys, i: u64) -> String {
    match keys {
        Keys::Random => format!("bench/orders/customer={:016x}/date=2026-11-29", mix(i)),
        Keys::Sequential => format!("bench/orders/customer={i:016}/date=2026-11-29"),
    }
}

/// Version of every preloaded unit.
const PRELOAD_VERSION: u64 = 1;

/// The keys and versions of the timed commits, shared by the threads of one system's runs
/// (public for `oncelake-bench commit --via-server`, whose clients commit the same keys).
pub struct KeySource {
    workload: Workload,
    /// The next new unit's number (starts after the preload).
    next_new: AtomicU64,
    /// The next version of an update: rises across all runs, so a unit's versions only rise.
    next_version: AtomicU64,
}

/// One commit to make.
pub struct Next {
    /// The unit.
    pub key: String,
    /// Its source version.
    pub version: u64,
}

/// A writer thread's key generator.
pub struct Writer {
    thread: u64,
    threads: u64,
    rng: Rng,
}

impl KeySource {
    /// The keys of `workload`'s timed commits on a store that holds its preload.
    pub fn new(workload: Workload) -> Self {
        KeySource {
            workload,
            next_new: AtomicU64::new(workload.preload),
            next_version: AtomicU64::new(PRELOAD_VERSION + 1),
        }
    }

    /// The workload the keys are of.
    pub fn workload(&self) -> Workload {
        self.workload
    }

    /// Writer `thread` of `threads`: each updates only its own share of the preloaded units.
    pub fn writer(&self, thread: usize, threads: usize) -> Writer {
        Writer {
            thread: thread as u64,
            threads: threads.max(1) as u64,
            rng: Rng::new(
                0x5eed ^ ((thread as u64 + 1) << 20) ^ self.next_new.load(Ordering::Relaxed),
            ),
        }
    }

    /// Writer `w`'s next `n` units, distinct (a commit names each unit once).
    pub fn next_units(&self, w: &mut Writer, n: usize) -> Vec<Next> {
        let mut units: Vec<Next> = Vec::with_capacity(n);
        while units.len() < n {
            let next = self.next(w);
            if units.iter().all(|u| u.key != next.key) {
                units.push(next);
            }
        }
        units
    }

    /// Writer `w`'s next unit.
    pub fn next(&self, w: &mut Writer) -> Next {
        let keys = self.workload.keys;
        let n = self.workload.preload;
        // Preloaded units this thread owns: numbers t, t + threads, ... below the preload.
        let owned = if n > w.thread {
            (n - w.thread).div_ceil(w.threads)
        } else {
            0
        };
        if keys == Keys::Random && owned > 0 && w.rng.next_u64() & 1 == 1 {
            let i = w.thread + w.rng.below(owned) * w.threads;
            return Next {
                key: unit_key(keys, i),
                version: self.next_version.fetch_add(1, Ordering::Relaxed),
            };
        }
        let i = self.next_new.fetch_add(1, Ordering::Relaxed);
        Next {
            key: unit_key(keys, i),
            version: PRELOAD_VERSION,
        }
    }
}

/// Units per transaction while preloading.
const PRELOAD_BATCH: u64 = 20_000;

/// The preloaded keys, in chunks of [`PRELOAD_BATCH`], each chunk sorted (B-trees fill fastest
/// in key order).
fn preload_chunks(w: Workload) -> impl Iterator<Item = Vec<String>> {
    (0..w.preload.div_ceil(PRELOAD_BATCH)).map(move |c| {
        let end = ((c + 1) * PRELOAD_BATCH).min(w.preload);
        let mut keys: Vec<String> = (c * PRELOAD_BATCH..end)
            .map(|i| unit_key(w.keys, i))
            .collect();
        keys.sort_unstable();
        keys
    })
}

/// Creates an oncelake store at `path` holding `w`'s preload, and closes it (what the P1 run and
/// `oncelake-bench commit --via-server`'s server start from).
pub fn preload_oncelake_store(path: &Path, w: Workload) -> Result<(), String> {
    let e = |e: oncelake::Error| e.to_string();
    let store = crate::bench_fixtures::open_bench_store(path).map_err(e)?;
    let staged = store.stage_bytes(b"bench preload").map_err(e)?;
    for chunk in preload_chunks(w) {
        let mut batch = oncelake::Batch::new();
        for k in chunk {
            batch = batch.put(k, PRELOAD_VERSION, &staged);
        }
        let r = store.commit(batch).map_err(e)?;
        if !r.applied() {
            return Err("preload: a batch was not applied".into());
        }
    }
    store.flush().map_err(e)
}

fn oncelake_preload(dir: &Path, w: Workload) -> Result<Target, String> {
    let path = dir.join("lake");
    let e = |e: oncelake::Error| e.to_string();
    preload_oncelake_store(&path, w)?;
    // Reopen with the default (durable) options: the timed part measures them.
    let mut options = oncelake::Options::default();
    w.tuning.set(&mut options)?;
    let store = oncelake::Store::open_with(&path, options).map_err(e)?;
    let staged = store.stage_bytes(b"bench output").map_err(e)?;
    Ok(Target::Oncelake { store, staged })
}

fn oncelake_commits(
    store: &oncelake::Store,
    staged: &oncelake::Staged,
    keys: &KeySource,
    plan: Plan,
) -> Result<Measurement, String> {
    let before = store.metrics();
    let sampler = BacklogSampler::start(store);
    let reader = plan
        .read_probe
        .then(|| ReadProbe::start(store, keys.workload()));
    let batch_of = |units: &[Next]| {
        units.iter().fold(oncelake::Batch::new(), |b, u| {
            b.put(u.key.as_str(), u.version, staged)
        })
    };
    let timings = if plan.in_flight > 0 {
        drive_in_flight(store, keys, plan, &batch_of)?
    } else {
        drive(
            plan,
            |t| Ok(keys.writer(t, plan.threads)),
            |w| {
                let units = keys.next_units(w, plan.units_per_commit.max(1));
                let report = store.commit(batch_of(&units)).map_err(|e| e.to_string())?;
                all_committed(&units, &report)
            },
        )?
    };
    let samples = sampler.stop();
    let reads = reader.map(ReadProbe::stop).transpose()?;
    let drain = std::time::Instant::now();
    store.wait_applied().map_err(|e| e.to_string())?;
    let drained_in = drain.elapsed();
    let after = store.metrics();
    let mut m = finish(System::Oncelake, plan, timings);
    m.applied_elapsed = m.elapsed + drained_in;
    m.max_backlog = samples.iter().copied().max().or(Some(0));
    m.applier_thread = Some(store.has_applier_thread());
    m.reads = reads.map(|r| Reads::of(&r));
    m.backlog_by_tenth = (1..=10)
        .filter_map(|k| {
            samples
                .get((samples.len() * k / 10).saturating_sub(1))
                .copied()
        })
        .collect();
    let groups = after.groups - before.groups;
    let units = after.group_units.sum - before.group_units.sum;
    m.groups = Some(groups);
    m.mean_group = units as f64 / groups.max(1) as f64;
    Ok(m)
}

fn all_committed(units: &[Next], report: &oncelake::CommitReport) -> Result<(), String> {
    for (u, r) in units.iter().zip(&report.units) {
        if !matches!(r.outcome, oncelake::Outcome::Committed { .. }) {
            return Err(format!(
                "{}@{} was not committed: {:?}",
                u.key, u.version, r.outcome
            ));
        }
    }
    Ok(())
}

/// [`drive`] through [`oncelake::Store::submit`]: each writer keeps `plan.in_flight` commits in
/// flight, waiting for its oldest before it submits another, and waits for all of them at the
/// end. Counts the acknowledged units.
fn drive_in_flight(
    store: &oncelake::Store,
    keys: &KeySource,
    plan: Plan,
    batch_of: &(dyn Fn(&[Next]) -> oncelake::Batch + Sync),
) -> Result<Timings, String> {
    let per_commit = plan.units_per_commit.max(1);
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    type InFlight = (Instant, Vec<Next>, oncelake::CommitHandle);
    let answer = |(t0, units, h): InFlight| -> Result<u32, String> {
        let report = h.wait().map_err(|e| e.to_string())?;
        all_committed(&units, &report)?;
        Ok(t0.elapsed().as_micros().min(u32::MAX as u128) as u32)
    };
    let results: Vec<Result<Vec<u32>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..plan.threads.max(1))
            .map(|t| {
                let (next, answer) = (&next, &answer);
                s.spawn(move || {
                    let mut w = keys.writer(t, plan.threads);
                    let mut flight = std::collections::VecDeque::new();
                    let mut lat = Vec::new();
                    loop {
                        let i = next.fetch_add(per_commit, Ordering::Relaxed);
                        if i >= plan.max_units || start.elapsed() >= plan.max_time {
                            break;
                        }
                        let units = keys.next_units(&mut w, per_commit);
                        let h = store.submit(batch_of(&units)).map_err(|e| e.to_string())?;
                        flight.push_back((Instant::now(), units, h));
                        if flight.len() >= plan.in_flight {
                            lat.push(answer(flight.pop_front().expect("just pushed"))?);
                        }
                    }
                    for f in flight {
                        lat.push(answer(f)?);
                    }
                    Ok(lat)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into())))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut latencies_us = Vec::new();
    for r in results {
        latencies_us.extend(r?);
    }
    Ok(Timings {
        units: (latencies_us.len() * per_commit) as u64,
        elapsed,
        latencies_us,
    })
}

/// Samples a store's backlog (units acknowledged, not yet applied) every 20 ms on its own thread.
struct BacklogSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u64>>,
}

impl BacklogSampler {
    fn start(store: &oncelake::Store) -> BacklogSampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (store, flag) = (store.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                samples.push(store.backlog().units as u64);
                std::thread::sleep(Duration::from_millis(20));
            }
            samples
        });
        BacklogSampler { stop, thread }
    }

    fn stop(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Times one `Store::get` of a preloaded unit every 20 ms on its own thread ([`Plan::read_probe`]).
struct ReadProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Result<Vec<u64>, String>>,
}

impl ReadProbe {
    fn start(store: &oncelake::Store, w: Workload) -> ReadProbe {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (store, flag) = (store.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut latencies = Vec::new();
            let mut i: u64 = 0;
            while !flag.load(Ordering::Relaxed) {
                // Spread over the preloaded units (a stride prime to any preload); with none
                // preloaded the read finds nothing, and still waits for the backlog.
                i = i.wrapping_add(7_919);
                let key = unit_key(w.keys, i % w.preload.max(1));
                let t0 = std::time::Instant::now();
                store.get(&key).map_err(|e| format!("read probe: {e}"))?;
                latencies.push(t0.elapsed().as_micros() as u64);
                std::thread::sleep(Duration::from_millis(20));
            }
            latencies.sort_unstable();
            Ok(latencies)
        });
        ReadProbe { stop, thread }
    }

    fn stop(self) -> Result<Vec<u64>, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| "the read probe panicked".to_string())?
    }
}

const REDB_UNITS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("units");

/// The same 64-byte value an oncelake manifest entry carries, roughly: version, hash, size, crc, seq.
fn redb_value(version: u64) -> [u8; 64] {
    let mut v = [7u8; 64];
    v[..8].copy_from_slice(&version.to_le_bytes());
    v
}

fn redb_preload(dir: &Path, w: Workload) -> Result<redb::Database, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let db = redb::Database::create(dir.join("b1.redb")).map_err(|e| err(&e))?;
    let value = redb_value(PRELOAD_VERSION);
    let txn = db.begin_write().map_err(|e| err(&e))?;
    {
        let mut t = txn.open_table(REDB_UNITS).map_err(|e| err(&e))?;
        for chunk in preload_chunks(w) {
            for k in chunk {
                t.insert(k.as_str(), value.as_slice())
                    .map_err(|e| err(&e))?;
            }
        }
    }
    txn.commit().map_err(|e| err(&e))?;
    Ok(db)
}

fn redb_commits(db: &redb::Database, keys: &KeySource, plan: Plan) -> Result<Timings, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    drive(
        plan,
        |t| Ok(keys.writer(t, plan.threads)),
        |w| {
            let units = keys.next_units(w, plan.units_per_commit.max(1));
            let mut txn = db.begin_write().map_err(|e| err(&e))?;
            txn.set_durability(redb::Durability::Immediate)
                .map_err(|e| err(&e))?;
            {
                let mut t = txn.open_table(REDB_UNITS).map_err(|e| err(&e))?;
                for next in &units {
                    let current = t
                        .get(next.key.as_str())
                        .map_err(|e| err(&e))?
                        .map(|v| u64::from_le_bytes(v.value()[..8].try_into().unwrap_or([0; 8])));
                    if current.is_none_or(|v| v < next.version) {
                        t.insert(next.key.as_str(), redb_value(next.version).as_slice())
                            .map_err(|e| err(&e))?;
                    }
                }
            }
            txn.commit().map_err(|e| err(&e))
        },
    )
}

fn sqlite_open(path: &PathBuf) -> Result<rusqlite::Connection, String> {
    let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
    conn.busy_timeout(Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
        .map_err(|e| e.to_string())?;
    Ok(conn)
}

/// The hash seed 001 stores beside the batch id: here a function of the version, so a new
/// version is a new row, as a new output is in the seed.
fn sqlite_hash(version: u64) -> String {
    format!("{:064x}", mix(version))
}

fn sqlite_preload(dir: &Path, w: Workload) -> Result<PathBuf, String> {
    let path = dir.join("b2.sqlite");
    let mut conn = sqlite_open(&path)?;
    let e = |e: rusqlite::Error| e.to_string();
    conn.execute_batch(
        "CREATE TABLE checkpoints (batch_id TEXT NOT NULL, hash TEXT NOT NULL, \
         PRIMARY KEY (batch_id, hash));",
    )
    .map_err(e)?;
    let hash = sqlite_hash(PRELOAD_VERSION);
    for chunk in preload_chunks(w) {
        let txn = conn.transaction().map_err(e)?;
        {
            let mut ins = txn
                .prepare_cached("INSERT INTO checkpoints (batch_id, hash) VALUES (?1, ?2)")
                .map_err(e)?;
            for k in chunk {
                ins.execute((k.as_str(), hash.as_str())).map_err(e)?;
            }
        }
        txn.commit().map_err(e)?;
    }
    Ok(path)
}

/// Seed 001's `process_batch` on one connection: check, then insert, in one immediate
/// transaction (for each of the commit's units).
fn sqlite_commit(conn: &rusqlite::Connection, units: &[Next]) -> Result<(), String> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| e.to_string())?;
    let done = (|| -> Result<(), rusqlite::Error> {
        for next in units {
            let hash = sqlite_hash(next.version);
            let exists = {
                let mut check = conn.prepare_cached(
                    "SELECT 1 FROM checkpoints WHERE batch_id = ?1 AND hash = ?2",
                )?;
                check.exists((next.key.as_str(), hash.as_str()))?
            };
            if !exists {
                conn.prepare_cached("INSERT INTO checkpoints (batch_id, hash) VALUES (?1, ?2)")?
                    .execute((next.key.as_str(), hash.as_str()))?;
            }
        }
        conn.execute_batch("COMMIT")
    })();
    if let Err(err) = done {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(err.to_string());
    }
    Ok(())
}

fn sqlite_commits(path: &PathBuf, keys: &KeySource, plan: Plan) -> Result<Timings, String> {
    drive(
        plan,
        |t| Ok((sqlite_open(path)?, keys.writer(t, plan.threads))),
        |(conn, w)| sqlite_commit(conn, &keys.next_units(w, plan.units_per_commit.max(1))),
    )
}

fn sqlite_shared_commits(
    conn: &Mutex<rusqlite::Connection>,
    keys: &KeySource,
    plan: Plan,
) -> Result<Timings, String> {
    drive(
        plan,
        |t| Ok(keys.writer(t, plan.threads)),
        |w| {
            let units = keys.next_units(w, plan.units_per_commit.max(1));
            let conn = conn
                .lock()
                .map_err(|_| "the shared connection's lock is poisoned")?;
            sqlite_commit(&conn, &units)
        },
    )
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
    use std::collections::{BTreeMap, HashSet};

    /// The random mix: about half updates of preloaded units (each owned by one thread, versions
    /// rising per unit), the rest new units never seen before.
    #[test]
    fn random_keys_mix_new_units_and_rising_versions_of_preloaded_ones() {
        let w = Workload {
            preload: 1000,
            ..Workload::P1
        };
        let preloaded: HashSet<String> = preload_chunks(w).flatten().collect();
        assert_eq!(preloaded.len(), 1000, "preloaded keys are distinct");
        let src = KeySource::new(w);
        let mut versions: BTreeMap<String, u64> = preloaded
            .iter()
            .map(|k| (k.clone(), PRELOAD_VERSION))
            .collect();
        let mut owner: BTreeMap<String, u64> = BTreeMap::new();
        let (mut updates, mut new) = (0, 0);
        for threads in [1usize, 4] {
            let mut writers: Vec<Writer> = (0..threads).map(|t| src.writer(t, threads)).collect();
            for n in 0..4000 {
                let t = n % threads;
                let next = src.next(&mut writers[t]);
                let previous = versions.insert(next.key.clone(), next.version);
                match previous {
                    Some(v) => {
                        assert!(
                            preloaded.contains(&next.key),
                            "only preloaded units are updated"
                        );
                        assert!(
                            next.version > v,
                            "{}: version {} after {v}",
                            next.key,
                            next.version
                        );
                        if threads == 4 {
                            let o = *owner.entry(next.key.clone()).or_insert(t as u64);
                            assert_eq!(o, t as u64, "one thread owns each updated unit");
                        }
                        updates += 1;
                    }
                    None => new += 1,
                }
            }
        }
        assert!((3000..5000).contains(&updates), "{updates} updates of 8000");
        assert_eq!(updates + new, 8000);
    }

    #[test]
    fn sequential_keys_are_new_units_in_key_order() {
        let w = Workload {
            preload: 10,
            keys: Keys::Sequential,
            ..Workload::P1
        };
        let src = KeySource::new(w);
        let mut wr = src.writer(0, 1);
        let mut last = unit_key(Keys::Sequential, 9);
        for _ in 0..100 {
            let next = src.next(&mut wr);
            assert!(next.key > last, "{} after {last}", next.key);
            assert_eq!(next.version, PRELOAD_VERSION);
            last = next.key;
        }
    }

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
