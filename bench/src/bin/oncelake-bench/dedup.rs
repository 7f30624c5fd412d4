//! `oncelake-bench dedup`: the dedup decision (SPEC P2) and opening a large store (P6), with a
//! plain redb point lookup as the same-run baseline.

use super::{print_json, BenchError};
use oncelake_bench::bench_fixtures as fx;
use serde_json::json;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Options shared by `oncelake-bench dedup` and `oncelake-bench reconcile`.
#[derive(clap::Args, Debug)]
pub(crate) struct SizeArgs {
    /// Manifest sizes to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub units: Vec<u64>,
    /// Timed rounds per measurement; the fastest is reported (the machine is shared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Where to build the bench stores, created if missing (default: the system temp directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the bench stores instead of deleting them (e.g. to time `oncelake ls` on them).
    #[arg(long)]
    pub keep: bool,
    /// One JSON object per size.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct DedupArgs {
    #[command(flatten)]
    pub size: SizeArgs,
    /// Dedup queries per round (random committed units).
    #[arg(long, default_value_t = 1_000_000)]
    pub queries: usize,
    /// Rounds of the open measurements (P6): each round opens the store cleanly closed, without
    /// its snapshot, after a crash without its snapshot, and after a crash with it.
    #[arg(long, default_value_t = 1)]
    pub open_rounds: usize,
    /// Measure only opening (P6), not the dedup decision (no redb baseline is built).
    #[arg(long)]
    pub open_only: bool,
    /// Measure an existing store (kept by an earlier `--keep` run, holding `--units` units)
    /// instead of building one; it is left in place.
    #[arg(long)]
    pub store: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub(crate) struct OpenArgs {
    /// The store to open.
    pub store: PathBuf,
    /// Open without a usable `index.snap` (the dedup index is rebuilt from the manifest): the
    /// file is moved aside for the open and put back afterwards.
    #[arg(long)]
    pub no_snapshot: bool,
    /// Leave without closing the store (the process aborts after printing), as a crash would:
    /// no snapshot is written, and the next open of STORE recovers the database.
    #[arg(long)]
    pub crash: bool,
    /// redb's page cache in MiB (default: the engine's, 64 MiB): what of the peak RSS is the
    /// cache rather than the index.
    #[arg(long)]
    pub cache_mib: Option<usize>,
}

/// Where `bench open --no-snapshot` keeps `index.snap` while it opens the store.
const SNAP_ASIDE: &str = "index.snap.bench-aside";

/// `oncelake-bench open STORE` (hidden): opens a store in a fresh process and prints the open time
/// and the process's peak RSS, so `oncelake-bench dedup` can measure P6 without its own allocations in the
/// figure. With `--no-snapshot` the index comes from the manifest scan; with `--crash` the process
/// ends without a clean close, so the next open is the one after a crash.
pub(crate) fn open_only(a: OpenArgs) -> Result<u8, BenchError> {
    let snap = a.store.join("index.snap");
    let aside = a.store.join(SNAP_ASIDE);
    let moved = a.no_snapshot && snap.exists();
    if moved {
        std::fs::rename(&snap, &aside)
            .map_err(|e| BenchError::io(format!("move {} aside", snap.display()), e))?;
    }
    let cpu_before = fx::cpu_time();
    let start = Instant::now();
    let opened = fx::open_bench_store_with_cache(&a.store, a.cache_mib.map(|m| m << 20));
    let open = start.elapsed();
    let cpu = match (cpu_before, fx::cpu_time()) {
        (Some(b), Some(e)) => Some(e.saturating_sub(b).as_secs_f64() * 1e3),
        _ => None,
    };
    let peak = fx::peak_rss_bytes();
    let rss = fx::rss_bytes();
    if moved {
        // Put back before anything else can fail: a clean close then rewrites it anyway.
        std::fs::rename(&aside, &snap)
            .map_err(|e| BenchError::io(format!("put back {}", snap.display()), e))?;
    }
    let store = opened?;
    let report = store.open_report();
    print_json(&json!({
        "open_ms": open.as_secs_f64() * 1e3,
        "index_ms": report.index_micros as f64 / 1e3,
        "cpu_ms": cpu,
        "index_from_snapshot": report.index_from_snapshot,
        "replayed_records": report.replayed_records,
        "fallback": report.fallback,
        "peak_rss_bytes": peak,
        "rss_bytes": rss,
    }));
    if a.crash {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::abort();
    }
    drop(store);
    Ok(0)
}

#[derive(clap::Args, Debug)]
pub(crate) struct CrashArgs {
    /// The store (built by `bench dedup --keep`: units `0..` at their bench versions).
    pub store: PathBuf,
    /// Durable one-unit commits to make before the crash (updates of units 0, 1, 2, ...).
    #[arg(long, default_value_t = 100_000)]
    pub commits: u64,
    /// Committing threads.
    #[arg(long, default_value_t = 16)]
    pub threads: u64,
}

/// `oncelake-bench crash STORE` (hidden): durable one-unit commits from several threads (each a
/// new version of an existing unit), then the process aborts without closing the store. The
/// next open replays the write-ahead log's unapplied groups and catches the index up with the
/// log records after `index.snap` (or scans the manifest).
pub(crate) fn crash(a: CrashArgs) -> Result<u8, BenchError> {
    let store = oncelake::Store::open(&a.store)?;
    let staged = store.stage_bytes(b"bench crash output")?;
    // Newer than every earlier run's: the bench versions are 1..=5, then seconds since the epoch.
    let version = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(6, |d| d.as_secs());
    let start = Instant::now();
    let threads = a.threads.max(1);
    std::thread::scope(|s| -> Result<(), BenchError> {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (store, staged) = (&store, &staged);
                s.spawn(move || -> Result<(), BenchError> {
                    let mut i = t;
                    while i < a.commits {
                        let batch = oncelake::Batch::new().put(fx::unit_key(i), version, staged);
                        store.commit(batch)?;
                        i += threads;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| BenchError::Usage("a committing thread panicked".into()))??;
        }
        Ok(())
    })?;
    print_json(&json!({
        "commits": a.commits,
        "threads": threads,
        "commit_s": start.elapsed().as_secs_f64(),
    }));
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::abort();
}

/// What one `oncelake-bench open` child measured.
#[derive(Clone, Debug, Default)]
struct ChildOpen {
    ms: f64,
    cpu_ms: f64,
    index_ms: f64,
    peak: Option<u64>,
    from_snapshot: bool,
}

/// Runs `oncelake-bench open` on `store` in a child process (with `flags`).
fn open_in_child(store: &Path, flags: &[&str]) -> Result<ChildOpen, BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::io("find this executable", e))?;
    let out = std::process::Command::new(exe)
        .arg("open")
        .arg(store)
        .args(flags)
        .output()
        .map_err(|e| BenchError::io("run `oncelake-bench open`", e))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|_| {
        BenchError::Usage(format!(
            "`oncelake-bench open` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    })?;
    Ok(ChildOpen {
        ms: v["open_ms"].as_f64().unwrap_or(f64::NAN),
        index_ms: v["index_ms"].as_f64().unwrap_or(f64::NAN),
        cpu_ms: v["cpu_ms"].as_f64().unwrap_or(f64::NAN),
        peak: v["peak_rss_bytes"].as_u64(),
        from_snapshot: v["index_from_snapshot"].as_bool().unwrap_or(false),
    })
}

/// A fresh work directory for one size; removed on drop unless kept.
pub(crate) struct WorkDir {
    pub path: PathBuf,
    keep: bool,
}

impl WorkDir {
    pub(crate) fn new(args: &SizeArgs, bench: &str, n: u64) -> Result<WorkDir, BenchError> {
        let base = super::scratch::scratch_dir(args.dir.clone())?;
        let path = base.join(format!("oncelake-bench-{bench}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(|e| BenchError::io(format!("create {}", path.display()), e))?;
        Ok(WorkDir {
            path,
            keep: args.keep,
        })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            errln!("kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

pub(crate) fn status(msg: &str) {
    if std::io::stderr().is_terminal() {
        errln!("{msg}");
    }
}

pub(crate) fn per_sec(count: u64, d: Duration) -> f64 {
    count as f64 / d.as_secs_f64().max(1e-9)
}

pub(crate) fn build_store(dir: &Path, n: u64) -> Result<(oncelake::Store, Duration), BenchError> {
    status(&format!("building a {n}-unit store in {}", dir.display()));
    let start = Instant::now();
    let store = fx::open_bench_store(dir)?;
    fx::fill_store(&store, n)?;
    Ok((store, start.elapsed()))
}

fn redb_err(e: redb::Error) -> BenchError {
    BenchError::Usage(format!("baseline redb database: {e}"))
}

pub(crate) fn run(a: DedupArgs) -> Result<u8, BenchError> {
    if !a.size.json {
        print_header(&a);
    }
    if a.store.is_some() && a.size.units.len() != 1 {
        return Err(BenchError::Usage(
            "--store takes one --units (the units that store holds)".into(),
        ));
    }
    for &n in &a.size.units {
        if n == 0 {
            return Err(BenchError::Usage("--units must be positive".into()));
        }
        let work = WorkDir::new(&a.size, "dedup", n)?;
        let row = measure_size(&a, n, &work)?;
        if a.size.json {
            print_json_row(&a, &row);
        } else {
            print_table_row(&row);
        }
        // Removed (or reported as kept) after the row is printed.
        drop(work);
    }
    Ok(0)
}

fn print_header(a: &DedupArgs) {
    outln!(
        "dedup decision (P2): {} random queries per round, best of {}; baseline: plain redb point get (same keys, 72-byte values, one read txn)",
        a.queries, a.size.rounds
    );
    outln!(
        "{:>9}  {:>12}  {:>12}  {:>6}  {:>14}  {:>14}  {:>8}  {:>6}  {:>9}  {:>9}  {:>6}",
        "units",
        "lookup/s",
        "redb get/s",
        "ratio",
        "lookup_many/s",
        "snapshot get/s",
        "open ms",
        "B/unit",
        "scan ms",
        "crash ms",
        "B/unit"
    );
}

/// What one size measured.
struct DedupRow {
    units: u64,
    queries: u64,
    build: Duration,
    open: OpenFootprint,
    rates: Option<Rates>,
}

/// P6: opening the store in fresh processes, every round of each case, and an empty store's
/// process for the baseline memory.
struct OpenFootprint {
    /// Cleanly closed: the index comes from `index.snap`.
    clean: Vec<ChildOpen>,
    /// Cleanly closed database, no usable `index.snap`: the manifest scan.
    scan: Vec<ChildOpen>,
    /// After a crash (database recovery), no usable `index.snap`.
    crash: Vec<ChildOpen>,
    /// After a crash, with `index.snap` (a crash right after a clean close's snapshot).
    crash_snapshot: Vec<ChildOpen>,
    empty_peak: Option<u64>,
}

/// The best of `rounds` timings of each lookup path, as lookups per second.
struct Rates {
    lookup: f64,
    redb_get: f64,
    snap_get: f64,
    many: f64,
}

/// Builds an `n`-unit store (or takes `--store`) and its redb baseline in `work` and measures
/// both.
fn measure_size(a: &DedupArgs, n: u64, work: &WorkDir) -> Result<DedupRow, BenchError> {
    let (store_dir, build) = match &a.store {
        Some(dir) => (dir.clone(), Duration::ZERO),
        None => {
            let dir = work.path.join("store");
            let (store, build) = build_store(&dir, n)?;
            drop(store);
            (dir, build)
        }
    };
    let open = open_footprint(work, &store_dir, a.open_rounds)?;
    if a.open_only {
        return Ok(DedupRow {
            units: n,
            queries: 0,
            build,
            open,
            rates: None,
        });
    }
    let store = fx::open_bench_store(&store_dir)?;

    status("building the plain redb baseline");
    let db = fx::build_baseline(&work.path.join("baseline.redb"), n).map_err(redb_err)?;
    let queries = fx::dedup_queries(n, a.queries, n);
    // Warm both sides (page cache, redb's cache) before timing.
    let warm = &queries[..queries.len() / 10];
    fx::run_lookups(&store, warm)?;
    fx::run_lookup_many(&store, warm)?;
    fx::run_redb_gets(&db, warm).map_err(redb_err)?;
    fx::run_snapshot_gets(&store, warm)?;

    status("timing");
    let rates = time_lookups(&store, &db, &queries, a.size.rounds)?;
    Ok(DedupRow {
        units: n,
        queries: queries.len() as u64,
        build,
        open,
        rates: Some(rates),
    })
}

/// P6: the store is opened in fresh processes, `rounds` times each way, in this order every round
/// (each case leaves the store as the next one needs it):
/// 1. cleanly closed, with `index.snap`;
/// 2. cleanly closed database, `index.snap` moved aside, and the child aborts: a crash;
/// 3. so the database needs recovery; `index.snap` moved aside again, the child aborts again;
/// 4. recovery again, with `index.snap`; this child closes cleanly, as round 1 expects.
///
/// The same for an empty store gives the process's own footprint.
fn open_footprint(
    work: &WorkDir,
    store_dir: &Path,
    rounds: usize,
) -> Result<OpenFootprint, BenchError> {
    let mut f = OpenFootprint {
        clean: Vec::new(),
        scan: Vec::new(),
        crash: Vec::new(),
        crash_snapshot: Vec::new(),
        empty_peak: None,
    };
    for round in 0..rounds.max(1) {
        status(&format!("open round {}", round + 1));
        f.clean.push(open_in_child(store_dir, &[])?);
        f.scan
            .push(open_in_child(store_dir, &["--no-snapshot", "--crash"])?);
        f.crash
            .push(open_in_child(store_dir, &["--no-snapshot", "--crash"])?);
        f.crash_snapshot.push(open_in_child(store_dir, &[])?);
    }
    let empty_dir = work.path.join("empty");
    drop(fx::open_bench_store(&empty_dir)?);
    f.empty_peak = open_in_child(&empty_dir, &[])?.peak;
    Ok(f)
}

/// The median of `xs` (the upper one of an even count); NaN for none.
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

impl OpenFootprint {
    /// One case's figures: median ms, median index ms, median peak RSS over the empty store's,
    /// per unit, every run's ms, and whether every run built the index the expected way.
    fn summary(&self, runs: &[ChildOpen], units: u64, snapshot: bool) -> serde_json::Value {
        let net: Vec<f64> = runs
            .iter()
            .filter_map(|r| Some(r.peak?.saturating_sub(self.empty_peak?) as f64))
            .collect();
        let per_unit = (!net.is_empty()).then(|| (median(net.clone()) / units as f64).round());
        json!({
            "ms": round1(median(runs.iter().map(|r| r.ms).collect())),
            "index_ms": round1(median(runs.iter().map(|r| r.index_ms).collect())),
            "cpu_ms": round1(median(runs.iter().map(|r| r.cpu_ms).collect())),
            "runs_ms": runs.iter().map(|r| round1(r.ms)).collect::<Vec<_>>(),
            "rss_bytes_per_unit": per_unit,
            "peak_rss_bytes": runs.iter().map(|r| r.peak).collect::<Vec<_>>(),
            "as_expected": runs.iter().all(|r| r.from_snapshot == snapshot),
        })
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Times the four lookup paths over `queries`, `rounds` times each, and checks that they agree.
fn time_lookups(
    store: &oncelake::Store,
    db: &redb::Database,
    queries: &[(String, u64)],
    rounds: usize,
) -> Result<Rates, BenchError> {
    let mut t_lookup = Vec::new();
    let mut t_redb = Vec::new();
    let mut t_snap = Vec::new();
    let mut t_many = Vec::new();
    let mut agree = true;
    for _ in 0..rounds.max(1) {
        let s = Instant::now();
        let x = fx::run_lookups(store, queries)?;
        t_lookup.push(s.elapsed());
        let s = Instant::now();
        let y = fx::run_redb_gets(db, queries).map_err(redb_err)?;
        t_redb.push(s.elapsed());
        let s = Instant::now();
        let z = fx::run_snapshot_gets(store, queries)?;
        t_snap.push(s.elapsed());
        let s = Instant::now();
        let m = fx::run_lookup_many(store, queries)?;
        t_many.push(s.elapsed());
        agree &= x == y && y == z && z == m && x == queries.len() as u64;
    }
    if !agree {
        return Err(BenchError::Usage(
            "bench dedup: the three lookup paths disagreed; this is a bug, please report it".into(),
        ));
    }
    let best = |v: &Vec<Duration>| v.iter().min().copied().unwrap_or_default();
    let q = queries.len() as u64;
    Ok(Rates {
        lookup: per_sec(q, best(&t_lookup)),
        redb_get: per_sec(q, best(&t_redb)),
        snap_get: per_sec(q, best(&t_snap)),
        many: per_sec(q, best(&t_many)),
    })
}

fn print_json_row(a: &DedupArgs, r: &DedupRow) {
    let o = &r.open;
    let clean = o.summary(&o.clean, r.units, true);
    let mut row = json!({
        "bench": "dedup",
        "units": r.units,
        "open_rounds": a.open_rounds.max(1),
        "open_ms": clean["ms"],
        "open_rss_bytes_per_unit": clean["rss_bytes_per_unit"],
        "open": {
            "clean": clean,
            "scan": o.summary(&o.scan, r.units, false),
            "crash": o.summary(&o.crash, r.units, false),
            "crash_snapshot": o.summary(&o.crash_snapshot, r.units, true),
        },
        "empty_open_peak_rss_bytes": o.empty_peak,
        "build_s": (r.build.as_secs_f64() * 100.0).round() / 100.0,
    });
    if let (Some(x), Some(m)) = (&r.rates, row.as_object_mut()) {
        let ratio = x.lookup / x.redb_get;
        m.insert("queries".into(), json!(r.queries));
        m.insert("rounds".into(), json!(a.size.rounds));
        m.insert("lookup_per_s".into(), json!(x.lookup.round()));
        m.insert("redb_get_per_s".into(), json!(x.redb_get.round()));
        m.insert(
            "ratio_vs_redb".into(),
            json!((ratio * 100.0).round() / 100.0),
        );
        m.insert("snapshot_get_per_s".into(), json!(x.snap_get.round()));
        m.insert("lookup_many_per_s".into(), json!(x.many.round()));
        m.insert(
            "lookup_many_ratio_vs_redb".into(),
            json!((x.many / x.redb_get * 100.0).round() / 100.0),
        );
        m.insert("lookup_ns".into(), json!((1e9 / x.lookup).round()));
        m.insert("redb_get_ns".into(), json!((1e9 / x.redb_get).round()));
    }
    print_json(&row);
}

fn print_table_row(r: &DedupRow) {
    let o = &r.open;
    let ms = |runs: &[ChildOpen]| median(runs.iter().map(|x| x.ms).collect());
    let per_unit = o.summary(&o.clean, r.units, true)["rss_bytes_per_unit"]
        .as_f64()
        .map_or("?".into(), |b| format!("{b:.0}"));
    let scan_per_unit = o.summary(&o.crash, r.units, false)["rss_bytes_per_unit"]
        .as_f64()
        .map_or("?".into(), |b| format!("{b:.0}"));
    let (lookup, redb_get, many, snap_get) = r
        .rates
        .as_ref()
        .map_or((f64::NAN, f64::NAN, f64::NAN, f64::NAN), |x| {
            (x.lookup, x.redb_get, x.many, x.snap_get)
        });
    outln!(
        "{:>9}  {:>12.0}  {:>12.0}  {:>5.1}x  {:>14.0}  {:>14.0}  {:>8.1}  {:>6}  {:>9.1}  {:>9.1}  {:>6}",
        r.units,
        lookup,
        redb_get,
        lookup / redb_get,
        many,
        snap_get,
        ms(&o.clean),
        per_unit,
        ms(&o.scan),
        ms(&o.crash),
        scan_per_unit,
    );
}
