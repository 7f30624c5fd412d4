//! `oncelake bench commit` (SPEC P1): durable commits against their baselines in the same run.

use super::{print_json, CliError};
use oncelake_bench::bench_commit::{self as workload, Measurement, Plan, System};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct CommitBenchArgs {
    /// Writer thread counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    pub threads: Vec<usize>,
    /// Units to commit per system and thread count (the run stops earlier at --seconds).
    #[arg(long, default_value_t = 50_000)]
    pub commits: usize,
    /// Time limit per system and thread count (e.g. 3s, 500ms).
    #[arg(long, default_value = "3s", value_parser = super::parse_duration)]
    pub seconds: Duration,
    /// Systems to run, comma separated: oncelake, redb (b1), sqlite (b2).
    #[arg(long, value_delimiter = ',', default_value = "oncelake,redb,sqlite")]
    pub systems: Vec<String>,
    /// Directory for the scratch stores (default: the system's temporary directory). Put it on the
    /// disk you want to measure.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Commit through `oncelake serve` from --clients connections instead, beside in-process
    /// threads of the same counts in the same run (P7).
    #[arg(long)]
    pub via_server: bool,
    /// Client connection counts for --via-server, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub clients: Vec<usize>,
    /// With --via-server: run seed 001's scenario instead (16 workers, 2,000 batches each
    /// delivered twice, 2–20 ms of work, claim → work → fenced put) (P9).
    #[arg(long, requires = "via_server")]
    pub seed001: bool,
}

/// `oncelake bench commit`.
pub(crate) fn commit(a: CommitBenchArgs) -> Result<u8, CliError> {
    if a.seed001 {
        return super::serve::bench_seed001(a.dir, a.json);
    }
    if a.via_server {
        return super::serve::bench_via_server(&a.clients, a.commits, a.seconds, a.dir, a.json);
    }
    let systems: Vec<System> = a
        .systems
        .iter()
        .map(|s| {
            System::parse(s).ok_or_else(|| {
                let known: Vec<&str> = System::ALL.iter().map(|s| s.name()).collect();
                CliError::Usage(format!(
                    "unknown system {s:?}; choose from oncelake, redb, sqlite ({})",
                    known.join(", ")
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    if a.threads.is_empty() || a.threads.contains(&0) {
        return Err(CliError::Usage(
            "--threads needs positive thread counts, e.g. --threads 1,4,16,64".into(),
        ));
    }
    if a.commits == 0 {
        return Err(CliError::Usage("--commits must be at least 1".into()));
    }
    let scratch = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let bar = indicatif::ProgressBar::new((a.threads.len() * systems.len()) as u64);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    let probe = |when: &str| {
        workload::fsync_probe(&scratch, 50)
            .map_err(|e| CliError::Usage(format!("{e} (pass --dir to bench another directory)")))
            .map(|d| (when.to_string(), d))
    };
    let mut probes = vec![probe("before")?];
    let mut results: Vec<Measurement> = Vec::new();
    for &threads in &a.threads {
        for &system in &systems {
            bar.set_message(format!("{} at {threads} threads", system.name()));
            let plan = Plan {
                threads,
                max_units: a.commits,
                max_time: a.seconds,
            };
            let m = workload::measure(system, plan, &scratch)
                .map_err(|e| CliError::Usage(format!("bench {}: {e}", system.name())))?;
            bar.inc(1);
            results.push(m);
        }
    }
    bar.finish_and_clear();
    probes.push(probe("after")?);
    if a.json {
        print_jsons(&results, &probes);
    } else {
        print_table(&results, &a.threads, &probes);
    }
    Ok(0)
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

fn print_jsons(results: &[Measurement], probes: &[(String, Duration)]) {
    for (when, d) in probes {
        print_json(&json!({
            "bench": "commit",
            "probe": "fdatasync_4k",
            "when": when,
            "p50_us": d.as_micros() as u64,
        }));
    }
    for m in results {
        print_json(&json!({
            "bench": "commit",
            "system": m.system.name(),
            "threads": m.threads,
            "units": m.units,
            "seconds": m.elapsed.as_secs_f64(),
            "units_per_sec": m.units_per_sec(),
            "p50_us": m.p50_us,
            "p99_us": m.p99_us,
            "max_us": m.max_us,
            "mean_group_units": m.mean_group,
            "groups": m.groups,
            "us_per_group": us_per_group(m),
        }));
    }
    let mut threads: Vec<usize> = results.iter().map(|m| m.threads).collect();
    threads.dedup();
    for t in threads {
        print_json(&json!({
            "bench": "commit",
            "threads": t,
            "ratio_vs_redb_txn_per_commit": ratio(results, t, System::RedbTxnPerCommit),
            "ratio_vs_sqlite_seed001": ratio(results, t, System::SqliteSeed001),
        }));
    }
}

/// Wall time per commit group: how long one redb transaction plus its sync took, on average.
fn us_per_group(m: &Measurement) -> Option<f64> {
    m.groups
        .filter(|&g| g > 0)
        .map(|g| m.elapsed.as_secs_f64() * 1e6 / g as f64)
}

fn print_table(results: &[Measurement], threads: &[usize], probes: &[(String, Duration)]) {
    let probes: Vec<String> = probes
        .iter()
        .map(|(when, d)| format!("{} µs {when}", d.as_micros()))
        .collect();
    outln!(
        "durable commits, 1 unit each, objects pre-staged; disk fdatasync(4 KiB) p50: {}",
        probes.join(", ")
    );
    outln!(
        "{:<20} {:>7} {:>9} {:>12} {:>9} {:>9} {:>10} {:>10}",
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
            "{:<20} {:>7} {:>9} {:>12.0} {:>9} {:>9} {:>10} {:>10}",
            m.system.name(),
            m.threads,
            m.units,
            m.units_per_sec(),
            m.p50_us,
            m.p99_us,
            m.mean_group
                .map(|g| format!("{g:.1}"))
                .unwrap_or_else(|| "-".into()),
            us_per_group(m)
                .map(|g| format!("{g:.0}"))
                .unwrap_or_else(|| "-".into())
        );
    }
    let fmt = |r: Option<f64>| r.map(|r| format!("{r:.1}x")).unwrap_or_else(|| "-".into());
    outln!();
    outln!(
        "{:>7} {:>22} {:>22}",
        "threads",
        "oncelake / redb (b1)",
        "oncelake / sqlite (b2)"
    );
    for &t in threads {
        outln!(
            "{:>7} {:>22} {:>22}",
            t,
            fmt(ratio(results, t, System::RedbTxnPerCommit)),
            fmt(ratio(results, t, System::SqliteSeed001))
        );
    }
}
