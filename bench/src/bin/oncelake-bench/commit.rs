//! `oncelake-bench commit` (SPEC P1): durable commits against their baselines in the same run.

use super::scratch::Probe;
use super::{print_json, BenchError};
use oncelake_bench::bench_commit::{Bench, Floor, Keys, Measurement, Plan, System, Workload};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct CommitBenchArgs {
    /// Writer thread counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    pub threads: Vec<usize>,
    /// Units to commit per system and thread count at most (the run stops earlier at --seconds).
    #[arg(long, default_value_t = 100_000_000)]
    pub commits: usize,
    /// Time limit per system and thread count (e.g. 10s, 500ms).
    #[arg(long, default_value = "10s", value_parser = super::parse_duration)]
    pub seconds: Duration,
    /// Units each commit carries, in one transaction on every system (SPEC P1: 1); a writer that
    /// gathers its units waits for the disk once per commit, not once per unit.
    #[arg(long, default_value_t = 1, conflicts_with_all = ["via_server", "seed001"])]
    pub units_per_commit: usize,
    /// Units in every system's store before the timed commits (built once per system, in large
    /// transactions, and kept for all thread counts) [default: 1000000; with --via-server 0,
    /// a fresh store per client count on both sides].
    #[arg(long)]
    pub preload: Option<u64>,
    /// Keys of the timed commits: random (half new units, half new versions of preloaded ones)
    /// or sequential (new units only, in key order; with --preload 0 the old empty-store bench)
    /// [default: random; with --via-server sequential].
    #[arg(long, value_parser = parse_keys)]
    pub keys: Option<Keys>,
    /// Systems to run, comma separated: oncelake, redb (b1), sqlite (b2, a connection per
    /// thread), sqlite_shared (b2, one connection behind a mutex).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "oncelake,redb,sqlite,sqlite_shared"
    )]
    pub systems: Vec<String>,
    /// Directory for the scratch stores, created if missing (default: the system's temporary
    /// directory). Put it on the disk you want to measure.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// oncelake's backlog bound in MiB (`Options::backlog_bytes`; default: the engine's, 32).
    #[arg(long)]
    pub backlog_mib: Option<usize>,
    /// oncelake's largest applier transaction in MiB of redo (`Options::apply_batch_bytes`;
    /// default: the engine's, 4).
    #[arg(long)]
    pub apply_batch_mib: Option<usize>,
    /// oncelake's page cache in MiB (`Options::cache_bytes`; default: the engine's, 64).
    #[arg(long)]
    pub cache_mib: Option<usize>,
    /// The redo in KiB that waits before the backlog is applied (`Options::apply_min_bytes`;
    /// default: the engine's, 256; 0 applies after every commit).
    #[arg(long)]
    pub apply_min_kib: Option<usize>,
    /// oncelake: the writers apply the backlog after their commits instead of the store's
    /// applier thread (`Options::background_apply` off).
    #[arg(long)]
    pub apply_on_writers: bool,
    /// oncelake: also time one read (`Store::get` of a preloaded unit) every 20 ms while the
    /// writers run (`read_p50_us`, `read_p99_us`, `read_max_us`): a read sees every commit
    /// acknowledged before it, so it waits for the backlog acknowledged by then.
    #[arg(long)]
    pub read_probe: bool,
    /// oncelake: each writer thread keeps this many commits in flight through `Store::submit`
    /// (a handle each, waited for oldest first) instead of one blocking `Store::commit` at a
    /// time; e.g. `--threads 1 --in-flight 64`. Latency is from submission to answer.
    #[arg(long, default_value_t = 0)]
    pub in_flight: usize,
    /// oncelake with part of its commit path switched off, to measure what the rest costs:
    /// none, wal-only (the backlog never applied to the B-trees) or wal-only-nosync (nor the
    /// write-ahead append synced). Needs the benchmark built with `--features floor`.
    #[arg(long, hide = true, default_value = "none", value_parser = parse_floor)]
    pub floor: Floor,
    /// The RocksDB peer program (`bench/peers/rocks_p1.cc` built, e.g. `target/rocks_p1` by
    /// `.ci/run`): with it, RocksDB's `TransactionDB` (GetForUpdate + Put + Commit) and plain
    /// Put/WriteBatch, both sync=true, run at every thread count after the other systems, same
    /// preload, time and units a call (`rocksdb_txn`, `rocksdb_put`).
    #[arg(long, value_name = "PROGRAM", conflicts_with_all = ["via_server", "seed001"])]
    pub rocksdb: Option<PathBuf>,
    /// Commit through `oncelake serve` from --clients connections instead, beside in-process
    /// threads of the same counts in the same run (P7).
    #[arg(long)]
    pub via_server: bool,
    /// Client connection counts for --via-server, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub clients: Vec<usize>,
    /// With --via-server: rounds per client count, each in-process then through the server, back
    /// to back; the ratio printed is the median of the rounds' ratios (the machine may be shared).
    #[arg(long, default_value_t = 1, requires = "via_server")]
    pub rounds: usize,
    /// With --via-server: run the batch-job scenario of examples/seed001.py instead (16 worker
    /// processes, 2,000 batches each delivered twice, 2–20 ms of work, claim → work → fenced
    /// put) (P9).
    #[arg(long, requires = "via_server")]
    pub seed001: bool,
}

fn parse_keys(s: &str) -> Result<Keys, String> {
    Keys::parse(s).ok_or_else(|| format!("unknown key order {s:?}; choose random or sequential"))
}

fn parse_floor(s: &str) -> Result<Floor, String> {
    Floor::parse(s)
        .ok_or_else(|| format!("unknown floor {s:?}; choose none, wal-only or wal-only-nosync"))
}

fn parse_systems(names: &[String]) -> Result<Vec<System>, BenchError> {
    names
        .iter()
        .map(|s| {
            System::parse(s).ok_or_else(|| {
                let known: Vec<&str> = System::ALL.iter().map(|s| s.name()).collect();
                BenchError::Usage(format!(
                    "unknown system {s:?}; choose from oncelake, redb, sqlite, sqlite_shared ({})",
                    known.join(", ")
                ))
            })
        })
        .collect()
}

/// `oncelake-bench commit`.
pub(crate) fn commit(a: CommitBenchArgs) -> Result<u8, BenchError> {
    if a.seed001 {
        return super::served::seed001(a.dir, a.json);
    }
    if a.via_server {
        // The via-server bench's defaults stay the fresh store with sequential keys it was first
        // quoted on (BENCHMARKS.md, "Server: P7"); `--preload 1000000 --keys random` is SPEC P1's.
        let workload = Workload {
            preload: a.preload.unwrap_or(0),
            keys: a.keys.unwrap_or(Keys::Sequential),
            tuning: Default::default(),
        };
        return super::served::via_server(
            &a.clients, a.rounds, a.commits, a.seconds, workload, a.dir, a.json,
        );
    }
    let systems = parse_systems(&a.systems)?;
    check_counts(&a)?;
    let workload = Workload {
        preload: a.preload.unwrap_or(Workload::P1.preload),
        keys: a.keys.unwrap_or(Workload::P1.keys),
        tuning: oncelake_bench::bench_commit::Tuning {
            backlog_bytes: a.backlog_mib.map(|m| m << 20),
            apply_batch_bytes: a.apply_batch_mib.map(|m| m << 20),
            cache_bytes: a.cache_mib.map(|m| m << 20),
            apply_min_bytes: a.apply_min_kib.map(|k| k << 10),
            background_apply: a.apply_on_writers.then_some(false),
            floor: a.floor,
        },
    };
    let scratch = super::scratch::scratch_dir(a.dir.clone())?;
    let bar = indicatif::ProgressBar::new((a.threads.len() * systems.len()) as u64);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    let probe = |when: &str| super::scratch::probe(&scratch, when);
    let peer = a
        .rocksdb
        .as_deref()
        .map(|p| super::rocksdb::RocksPeer::new(p, &scratch))
        .transpose()?;
    let mut probes = vec![probe("before")?];
    let mut results: Vec<Measurement> = Vec::new();
    for &system in &systems {
        bar.set_message(format!(
            "{}: preloading {} units",
            system.name(),
            workload.preload
        ));
        let mut bench = Bench::new(system, workload, &scratch)
            .map_err(|e| BenchError::Usage(format!("bench {} preload: {e}", system.name())))?;
        for &threads in &a.threads {
            bar.set_message(format!("{} at {threads} threads", system.name()));
            let plan = Plan {
                units_per_commit: a.units_per_commit,
                read_probe: a.read_probe,
                in_flight: a.in_flight,
                ..Plan::new(threads, a.commits, a.seconds)
            };
            let m = bench
                .run(plan)
                .map_err(|e| BenchError::Usage(format!("bench {}: {e}", system.name())))?;
            bar.inc(1);
            results.push(m);
        }
    }
    let rocks = run_rocks(peer, &a, workload.preload, &bar)?;
    bar.finish_and_clear();
    probes.push(probe("after")?);
    if a.json {
        print_jsons(&results, &probes, workload, a.units_per_commit);
        print_rocks_jsons(&results, &rocks, workload);
    } else {
        print_table(&results, &a.threads, &probes, workload, a.units_per_commit);
        print_rocks_table(&results, &rocks);
    }
    Ok(0)
}

/// Refuses thread, commit and unit counts the benchmark cannot run.
fn check_counts(a: &CommitBenchArgs) -> Result<(), BenchError> {
    if a.threads.is_empty() || a.threads.contains(&0) {
        return Err(BenchError::Usage(
            "--threads needs positive thread counts, e.g. --threads 1,4,16,64".into(),
        ));
    }
    if a.commits == 0 {
        return Err(BenchError::Usage("--commits must be at least 1".into()));
    }
    if a.units_per_commit == 0 {
        return Err(BenchError::Usage(
            "--units-per-commit must be at least 1 (P1 commits one unit each)".into(),
        ));
    }
    Ok(())
}

/// The RocksDB peer's runs (each mode at each thread count), when `--rocksdb` names it.
fn run_rocks(
    peer: Option<super::rocksdb::RocksPeer>,
    a: &CommitBenchArgs,
    preload: u64,
    bar: &indicatif::ProgressBar,
) -> Result<Vec<super::rocksdb::RocksRun>, BenchError> {
    let mut rocks = Vec::new();
    let Some(peer) = peer else {
        return Ok(rocks);
    };
    for mode in super::rocksdb::MODES {
        for &threads in &a.threads {
            bar.set_message(format!("rocksdb_{mode} at {threads} threads"));
            rocks.push(peer.run(mode, threads, a.seconds, preload, a.units_per_commit)?);
        }
    }
    Ok(rocks)
}

/// oncelake's units/s over the RocksDB run's at the same thread count.
fn ratio_vs_rocks(results: &[Measurement], r: &super::rocksdb::RocksRun) -> Option<f64> {
    let ours = find(results, System::Oncelake, r.threads)?;
    Some(ours.units_per_sec() / r.units_per_s.max(1e-9))
}

fn print_rocks_jsons(results: &[Measurement], rocks: &[super::rocksdb::RocksRun], w: Workload) {
    for r in rocks {
        print_json(&json!({
            "bench": "commit",
            "system": r.system,
            "threads": r.threads,
            "preload": w.preload,
            "units_per_commit": r.units_per_commit,
            "units_per_s": r.units_per_s,
            "p50_us": r.p50_us,
            "p99_us": r.p99_us,
            "oncelake_ratio": ratio_vs_rocks(results, r),
        }));
    }
}

fn print_rocks_table(results: &[Measurement], rocks: &[super::rocksdb::RocksRun]) {
    if rocks.is_empty() {
        return;
    }
    outln!(
        "{:>8} {:>14} {:>10} {:>10} {:>12}",
        "threads",
        "RocksDB",
        "units/s",
        "p99 µs",
        "oncelake ×"
    );
    for r in rocks {
        let ratio = ratio_vs_rocks(results, r).map_or("-".to_string(), |x| format!("{x:.2}"));
        outln!(
            "{:>8} {:>14} {:>10.0} {:>10} {:>12}",
            r.threads,
            r.system,
            r.units_per_s,
            r.p99_us,
            ratio
        );
    }
}

fn find(results: &[Measurement], system: System, threads: usize) -> Option<&Measurement> {
    results
        .iter()
        .find(|m| m.system == system && m.threads == threads)
}

fn ratio(results: &[Measurement], threads: usize, base: System) -> Option<f64> {
    let ours = find(results, System::Oncelake, threads)?;
    let theirs = find(results, base, threads)?;
    Some(ours.units_per_sec() / theirs.units_per_sec().max(1e-9))
}

/// oncelake against the faster of the two SQLite baselines (SPEC P1 quotes the faster).
fn ratio_sqlite_best(results: &[Measurement], threads: usize) -> Option<f64> {
    let a = ratio(results, threads, System::SqliteSeed001);
    let b = ratio(results, threads, System::SqliteSeed001Shared);
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn print_jsons(results: &[Measurement], probes: &[Probe], w: Workload, units_per_commit: usize) {
    super::scratch::print_probes("commit", probes);
    for m in results {
        let oncelake = m.system == System::Oncelake;
        print_json(&json!({
            "bench": "commit",
            "system": m.system.name(),
            "threads": m.threads,
            "preload": w.preload,
            "keys": w.keys.name(),
            "units_per_commit": units_per_commit,
            "store_units_before": m.store_units_before,
            "units": m.units,
            "seconds": m.elapsed.as_secs_f64(),
            "units_per_s": m.units_per_sec(),
            "p50_us": m.p50_us,
            "p99_us": m.p99_us,
            "max_us": m.max_us,
            "mean_group": m.mean_group,
            "groups": m.groups,
            "us_per_group": us_per_group(m),
            "sustained_units_per_s": oncelake.then(|| m.sustained_units_per_sec()),
            "max_backlog": m.max_backlog,
            "backlog_by_tenth": oncelake.then(|| m.backlog_by_tenth.clone()),
            "applier_thread": m.applier_thread,
            "cpu_us_per_unit": m.cpu_us_per_unit(),
            "peak_rss_mib": m.peak_rss.map(|b| b >> 20),
            "floor": oncelake.then(|| w.tuning.floor.name()),
            "reads": m.reads.map(|r| r.count),
            "read_p50_us": m.reads.map(|r| r.p50_us),
            "read_p99_us": m.reads.map(|r| r.p99_us),
            "read_max_us": m.reads.map(|r| r.max_us),
        }));
    }
    let mut threads: Vec<usize> = results.iter().map(|m| m.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    for t in threads {
        print_json(&json!({
            "bench": "commit",
            "threads": t,
            "ratio_vs_redb_txn_per_commit": ratio(results, t, System::RedbTxnPerCommit),
            "ratio_vs_sqlite_seed001": ratio(results, t, System::SqliteSeed001),
            "ratio_vs_sqlite_seed001_shared": ratio(results, t, System::SqliteSeed001Shared),
            "ratio_vs_sqlite_best": ratio_sqlite_best(results, t),
        }));
    }
}

/// Wall time per commit group: how long one redb transaction plus its sync took, on average.
fn us_per_group(m: &Measurement) -> Option<f64> {
    m.groups
        .filter(|&g| g > 0)
        .map(|g| m.elapsed.as_secs_f64() * 1e6 / g as f64)
}

fn print_table(
    results: &[Measurement],
    threads: &[usize],
    probes: &[Probe],
    w: Workload,
    units_per_commit: usize,
) {
    outln!(
        "durable commits, {} unit{} each, objects pre-staged, {} preloaded units, {} keys; \
         disk fdatasync(4 KiB) p50: {}",
        units_per_commit,
        if units_per_commit == 1 { "" } else { "s" },
        w.preload,
        w.keys.name(),
        super::scratch::probes_text(probes)
    );
    outln!(
        "{:<22} {:>7} {:>9} {:>12} {:>9} {:>9} {:>10} {:>10}",
        "system",
        "threads",
        "units",
        "units/s",
        "p50 µs",
        "p99 µs",
        "mean group",
        "µs/group"
    );
    for m in results {
        outln!(
            "{:<22} {:>7} {:>9} {:>12.0} {:>9} {:>9} {:>10.1} {:>10}",
            m.system.name(),
            m.threads,
            m.units,
            m.units_per_sec(),
            m.p50_us,
            m.p99_us,
            m.mean_group,
            us_per_group(m)
                .map(|g| format!("{g:.0}"))
                .unwrap_or_else(|| "-".into())
        );
    }
    for m in results {
        if let Some(r) = m.reads {
            outln!(
                "{} at {} threads, read probe: {} reads, p50 {} µs, p99 {} µs, max {} µs",
                m.system.name(),
                m.threads,
                r.count,
                r.p50_us,
                r.p99_us,
                r.max_us
            );
        }
    }
    let fmt = |r: Option<f64>| r.map(|r| format!("{r:.1}x")).unwrap_or_else(|| "-".into());
    outln!();
    outln!(
        "{:>7} {:>22} {:>28}",
        "threads",
        "oncelake / redb (b1)",
        "oncelake / best sqlite (b2)"
    );
    for &t in threads {
        outln!(
            "{:>7} {:>22} {:>28}",
            t,
            fmt(ratio(results, t, System::RedbTxnPerCommit)),
            fmt(ratio_sqlite_best(results, t))
        );
    }
}
