//! `oncelake bench dedup`: the dedup decision (SPEC P2) and opening a large store (P6), with a
//! plain redb point lookup as the same-run baseline.

use super::{print_json, CliError};
use oncelake_bench::bench_fixtures as fx;
use serde_json::json;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Options shared by `bench dedup` and `bench reconcile`.
#[derive(clap::Args, Debug)]
pub(crate) struct SizeArgs {
    /// Manifest sizes to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub units: Vec<u64>,
    /// Timed rounds per measurement; the fastest is reported (the machine is shared).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Where to build the bench stores (default: the system temp directory).
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
}

#[derive(clap::Args, Debug)]
pub(crate) struct OpenArgs {
    /// The store to open.
    pub store: PathBuf,
}

/// `oncelake bench open STORE` (hidden): opens a store in a fresh process and prints the open time
/// and the process's peak RSS, so `bench dedup` can measure P6 without its own allocations in the
/// figure.
pub(crate) fn open_only(a: OpenArgs) -> Result<u8, CliError> {
    let start = Instant::now();
    let store = fx::open_bench_store(&a.store)?;
    let open = start.elapsed();
    print_json(&json!({
        "open_ms": open.as_secs_f64() * 1e3,
        "peak_rss_bytes": fx::peak_rss_bytes(),
        "rss_bytes": fx::rss_bytes(),
    }));
    drop(store);
    Ok(0)
}

/// Runs `bench open` on `store` in a child process: (open ms, peak RSS bytes).
fn open_in_child(store: &Path) -> Result<(f64, Option<u64>), CliError> {
    let exe = std::env::current_exe().map_err(|e| CliError::io("find this executable", e))?;
    let out = std::process::Command::new(exe)
        .arg("bench")
        .arg("open")
        .arg(store)
        .output()
        .map_err(|e| CliError::io("run `oncelake bench open`", e))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|_| {
        CliError::Usage(format!(
            "`oncelake bench open` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    })?;
    Ok((
        v["open_ms"].as_f64().unwrap_or(f64::NAN),
        v["peak_rss_bytes"].as_u64(),
    ))
}

/// A fresh work directory for one size; removed on drop unless kept.
pub(crate) struct WorkDir {
    pub path: PathBuf,
    keep: bool,
}

impl WorkDir {
    pub(crate) fn new(args: &SizeArgs, bench: &str, n: u64) -> Result<WorkDir, CliError> {
        let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
        let path = base.join(format!("oncelake-bench-{bench}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(|e| CliError::io(format!("create {}", path.display()), e))?;
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

pub(crate) fn build_store(dir: &Path, n: u64) -> Result<(oncelake::Store, Duration), CliError> {
    status(&format!("building a {n}-unit store in {}", dir.display()));
    let start = Instant::now();
    let store = fx::open_bench_store(dir)?;
    fx::fill_store(&store, n)?;
    Ok((store, start.elapsed()))
}

fn redb_err(e: redb::Error) -> CliError {
    CliError::Usage(format!("baseline redb database: {e}"))
}

pub(crate) fn run(a: DedupArgs) -> Result<u8, CliError> {
    if !a.size.json {
        print_header(&a);
    }
    for &n in &a.size.units {
        if n == 0 {
            return Err(CliError::Usage("--units must be positive".into()));
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
        "{:>9}  {:>12}  {:>12}  {:>6}  {:>14}  {:>14}  {:>8}  {:>12}  {:>9}",
        "units",
        "lookup/s",
        "redb get/s",
        "ratio",
        "lookup_many/s",
        "snapshot get/s",
        "open ms",
        "open +RSS MiB",
        "B/unit"
    );
}

/// What one size measured.
struct DedupRow {
    units: u64,
    queries: u64,
    build: Duration,
    open: OpenFootprint,
    lookup: f64,
    redb_get: f64,
    snap_get: f64,
    many: f64,
}

/// P6: opening the store in a fresh process, net of what an empty store's process takes.
struct OpenFootprint {
    ms: f64,
    peak: Option<u64>,
    empty_peak: Option<u64>,
    rss: Option<u64>,
}

/// The best of `rounds` timings of each lookup path, as lookups per second.
struct Rates {
    lookup: f64,
    redb_get: f64,
    snap_get: f64,
    many: f64,
}

/// Builds an `n`-unit store and its redb baseline in `work` and measures both.
fn measure_size(a: &DedupArgs, n: u64, work: &WorkDir) -> Result<DedupRow, CliError> {
    let store_dir = work.path.join("store");
    let (store, build) = build_store(&store_dir, n)?;
    drop(store);
    let open = open_footprint(work, &store_dir)?;
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
        lookup: rates.lookup,
        redb_get: rates.redb_get,
        snap_get: rates.snap_get,
        many: rates.many,
    })
}

/// P6: the dedup index is built from the manifest at open, so the store is opened in a fresh
/// process; the same for an empty store gives the process's own footprint.
fn open_footprint(work: &WorkDir, store_dir: &Path) -> Result<OpenFootprint, CliError> {
    let (ms, peak) = open_in_child(store_dir)?;
    let empty_dir = work.path.join("empty");
    drop(fx::open_bench_store(&empty_dir)?);
    let (_, empty_peak) = open_in_child(&empty_dir)?;
    let rss = match (peak, empty_peak) {
        (Some(p), Some(e)) => Some(p.saturating_sub(e)),
        _ => None,
    };
    Ok(OpenFootprint {
        ms,
        peak,
        empty_peak,
        rss,
    })
}

/// Times the four lookup paths over `queries`, `rounds` times each, and checks that they agree.
fn time_lookups(
    store: &oncelake::Store,
    db: &redb::Database,
    queries: &[(String, u64)],
    rounds: usize,
) -> Result<Rates, CliError> {
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
        return Err(CliError::Usage(
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
    let ratio = r.lookup / r.redb_get;
    let per_unit = r.open.rss.map(|b| b as f64 / r.units as f64);
    print_json(&json!({
        "bench": "dedup",
        "units": r.units,
        "queries": r.queries,
        "rounds": a.size.rounds,
        "lookup_per_s": r.lookup.round(),
        "redb_get_per_s": r.redb_get.round(),
        "ratio_vs_redb": (ratio * 100.0).round() / 100.0,
        "snapshot_get_per_s": r.snap_get.round(),
        "lookup_many_per_s": r.many.round(),
        "lookup_many_ratio_vs_redb": (r.many / r.redb_get * 100.0).round() / 100.0,
        "lookup_ns": (1e9 / r.lookup).round(),
        "redb_get_ns": (1e9 / r.redb_get).round(),
        "open_ms": (r.open.ms * 10.0).round() / 10.0,
        "open_peak_rss_bytes": r.open.peak,
        "empty_open_peak_rss_bytes": r.open.empty_peak,
        "open_rss_bytes": r.open.rss,
        "open_rss_bytes_per_unit": per_unit.map(|b| b.round()),
        "build_s": (r.build.as_secs_f64() * 100.0).round() / 100.0,
    }));
}

fn print_table_row(r: &DedupRow) {
    let per_unit = r.open.rss.map(|b| b as f64 / r.units as f64);
    outln!(
        "{:>9}  {:>12.0}  {:>12.0}  {:>5.1}x  {:>14.0}  {:>14.0}  {:>8.1}  {:>12}  {:>9}",
        r.units,
        r.lookup,
        r.redb_get,
        r.lookup / r.redb_get,
        r.many,
        r.snap_get,
        r.open.ms,
        r.open.rss.map_or("?".into(), |b| format!(
            "{:.1}",
            b as f64 / (1 << 20) as f64
        )),
        per_unit.map_or("?".into(), |b| format!("{b:.0}")),
    );
}
