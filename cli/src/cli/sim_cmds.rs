//! The coordination commands: `simulate` (the worked example, SPEC R18), `stats` (R16) and the
//! coordinator mode by hand, `claim` and `release` (R9).

use super::output::{held_by_another, thousands};
use super::sim_args::SimulateArgs;
use super::store_ops::StoreOps;
use super::{exit, parse_duration, print_json, rfc3339, CliError, Open, Output, Progress};
use oncelake::metrics::{scope_of, Scope};
use oncelake::{ClaimOutcome, Lease, ReleaseOutcome, StoreStats, UnitStore};
use oncelake_sim::{simulate, SimMode, SimReport};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct StatsArgs {
    /// The store.
    pub store: PathBuf,
    /// One JSON object.
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// The Prometheus text exposition format.
    #[arg(long)]
    pub prometheus: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ClaimArgs {
    /// The store.
    pub store: PathBuf,
    /// Unit key.
    pub unit: String,
    /// Source version the worker will produce.
    pub version: u64,
    /// The worker's name (1..=256 bytes).
    #[arg(long)]
    pub worker: String,
    /// How long the lease lasts before another worker may take it over (e.g. 30s, 5m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ReleaseArgs {
    /// The store.
    pub store: PathBuf,
    /// Unit key.
    pub unit: String,
    /// The worker that holds the lease.
    #[arg(long)]
    pub worker: String,
    /// The lease's fencing token (printed by `claim`).
    #[arg(long)]
    pub token: u64,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn simulate_cmd(a: SimulateArgs) -> Result<u8, CliError> {
    let modes = a.modes();
    if a.node_lake.is_some() {
        return super::sim_nodes::run_node(&a);
    }
    let (root, temporary) = match &a.store {
        Some(dir) => {
            let empty = std::fs::read_dir(dir)
                .map(|mut d| d.next().is_none())
                .unwrap_or(true);
            if !empty {
                return Err(CliError::Usage(format!(
                    "{} is not empty; give --store a missing or empty directory",
                    dir.display()
                )));
            }
            (dir.clone(), false)
        }
        None => (temp_root(), true),
    };
    if a.pipeline {
        let args = super::sim_pipeline::PipelineSimArgs {
            units: a.units,
            workers: a.pipeline_workers,
            bump: a.bump,
            changed: a.changed,
            seed: a.seed,
            json: a.json,
        };
        let result = super::sim_pipeline::run(&args, &root);
        if temporary {
            let _ = std::fs::remove_dir_all(&root);
        }
        return result;
    }
    if let Some(nodes) = a.nodes {
        let result = super::sim_nodes::run(&a, modes, nodes, &root);
        if temporary {
            let _ = std::fs::remove_dir_all(&root);
        }
        return result;
    }
    let result = run_modes(&a, modes, &root, temporary);
    if temporary {
        let _ = std::fs::remove_dir_all(&root);
    }
    let reports = result?;
    if !a.json {
        print_table(&a, &reports);
    }
    let ok = reports.iter().all(SimReport::exactly_once);
    Ok(if ok { exit::OK } else { exit::FAILURE })
}

fn run_modes(
    a: &SimulateArgs,
    modes: &[SimMode],
    root: &Path,
    temporary: bool,
) -> Result<Vec<SimReport>, CliError> {
    let mut reports = Vec::new();
    // A finished mode's throwaway store (100,000 objects) is removed while the next mode runs:
    // the removal is a second or two of unlinking that need not wait for the end.
    let mut removals = Vec::new();
    for &mode in modes {
        let cfg = a.config(mode, root.join(mode.name()));
        let bar = Progress::new(
            &format!("simulate {}", mode.name()),
            "attempts",
            Some(a.units),
        );
        let progress = |done: u64, total: u64| {
            bar.set_total(total);
            bar.update(done);
        };
        let report = simulate(&cfg, &progress);
        bar.finish();
        let report = report?;
        if a.json {
            print_json(&report_json(&report, a));
        }
        reports.push(report);
        if temporary {
            let dir = cfg.store_dir.clone();
            removals.push(std::thread::spawn(move || {
                let _ = oncelake_sim::remove_store(&dir);
            }));
        }
    }
    for r in removals {
        let _ = r.join();
    }
    Ok(reports)
}

/// A fresh directory for throwaway stores: in memory (`/dev/shm`) where the system has it, else
/// under the temporary directory. The simulation measures coordination and the commit path; on a
/// disk shared with other writers, the metadata journal of its 100,000 small files would dominate.
pub(crate) fn temp_root() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!("oncelake-sim-{}-{nanos}", std::process::id());
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && std::fs::create_dir(shm.join(&name)).is_ok() {
        return shm.join(name);
    }
    std::env::temp_dir().join(name)
}

fn report_json(r: &SimReport, a: &SimulateArgs) -> serde_json::Value {
    json!({
        "mode": r.mode.name(),
        "workers": r.workers,
        "chunk": r.chunk,
        "units": r.units,
        "schedule": r.schedule.name(),
        "schedule_note": r.schedule.describe(),
        "overlap": a.overlap,
        "crash_rate": a.crash_rate,
        "seed": a.seed,
        "overlapped_units": r.overlapped,
        "computations": r.computations,
        "redundant": r.redundant,
        "crashes": r.crashes,
        "crashed_attempts": r.crashed_attempts,
        "already_done": r.already_done,
        "busy": r.busy,
        "manifest_entries": r.entries,
        "units_committed": r.units_committed,
        "written_twice": r.written_twice(),
        "exactly_once": r.exactly_once(),
        "wasted_fraction": r.wasted_fraction,
        "duplicates_collapsed": r.duplicates_collapsed,
        "claims_granted": r.claims_granted,
        "claims_held": r.claims_held,
        "claims_already_done": r.claims_already_done,
        "claims_taken_over": r.claims_taken_over,
        "fenced_rejections": r.fenced_rejections,
        "commit_groups": r.commit_groups,
        "mean_group_ops": r.mean_group_ops,
        "rounds": r.rounds,
        "orphans_collected": r.orphans_collected,
        "orphans_left": r.orphans_left,
        "replay_clean": r.replay_clean,
        "elapsed_ms": r.elapsed.as_secs_f64() * 1000.0,
    })
}

/// One row of the report table: its label and how to render a mode's value.
type Cell = Box<dyn Fn(&SimReport) -> String>;

/// The rows of the report table, in the order printed.
fn table_rows() -> Vec<(&'static str, Cell)> {
    vec![
        ("workers", Box::new(|r| r.workers.to_string())),
        ("tasks per chunk", Box::new(|r| r.chunk.to_string())),
        ("units", Box::new(|r| r.units.to_string())),
        (
            "handed to two workers",
            Box::new(|r| r.overlapped.to_string()),
        ),
        ("computations", Box::new(|r| r.computations.to_string())),
        (
            "redundant computations",
            Box::new(|r| r.redundant.to_string()),
        ),
        ("crashes", Box::new(|r| r.crashes.to_string())),
        (
            "attempts lost to crashes",
            Box::new(|r| r.crashed_attempts.to_string()),
        ),
        (
            "found already done",
            Box::new(|r| r.already_done.to_string()),
        ),
        ("found busy", Box::new(|r| r.busy.to_string())),
        ("manifest entries", Box::new(|r| r.entries.to_string())),
        (
            "wasted compute",
            Box::new(|r| format!("{:.2}%", r.wasted_fraction * 100.0)),
        ),
        (
            "duplicates collapsed",
            Box::new(|r| r.duplicates_collapsed.to_string()),
        ),
        ("claims granted", Box::new(|r| r.claims_granted.to_string())),
        ("claims held", Box::new(|r| r.claims_held.to_string())),
        (
            "claims already done",
            Box::new(|r| r.claims_already_done.to_string()),
        ),
        (
            "claims taken over",
            Box::new(|r| r.claims_taken_over.to_string()),
        ),
        (
            "fenced rejections",
            Box::new(|r| r.fenced_rejections.to_string()),
        ),
        ("commit groups", Box::new(|r| r.commit_groups.to_string())),
        (
            "ops per group (mean)",
            Box::new(|r| format!("{:.1}", r.mean_group_ops)),
        ),
        ("rounds", Box::new(|r| r.rounds.to_string())),
        (
            "orphans collected",
            Box::new(|r| r.orphans_collected.to_string()),
        ),
        ("orphans left", Box::new(|r| r.orphans_left.to_string())),
        (
            "log replays to manifest",
            Box::new(|r| if r.replay_clean { "yes" } else { "NO" }.into()),
        ),
        (
            "elapsed",
            Box::new(|r| format!("{:.2} s", r.elapsed.as_secs_f64())),
        ),
    ]
}

/// `0.02` as `2`, `0.015` as `1.5` (a percentage without float noise).
fn percent(fraction: f64) -> String {
    let s = format!("{:.3}", fraction * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The scenario in the product's words, above the table: what the workers are handed and what a
/// check-then-act job would do with it.
fn print_scenario(a: &SimulateArgs, r: &SimReport) {
    outln!(
        "{} units of work (one output each, like a day's partition) go to {} workers; a rebalancing \
         scheduler hands {} of them ({}%) to two workers at once.",
        thousands(r.units),
        r.workers,
        thousands(r.overlapped),
        percent(a.overlap)
    );
    outln!(
        "A check-then-act job (look the unit up, compute, write, record it as done) writes those \
         units twice. Here: optimistic — both workers compute, the engine keeps one output (the \
         second commit is a duplicate); coordinated — the second worker finds the unit claimed \
         (busy) and does not compute."
    );
    if a.crash_rate > 0.0 {
        outln!(
            "Workers crash in {}% of attempts, losing their chunk; the scheduler hands it out again.",
            percent(a.crash_rate)
        );
    }
    outln!("Timing — {}.", r.schedule.describe());
}

/// The last line: whether exactly-once held, with the numbers (one line when every mode agrees).
fn print_verdict(reports: &[SimReport]) {
    let line = |r: &SimReport| {
        format!(
            "{}: {} units, {} entries, {} written twice",
            if r.exactly_once() {
                "exactly-once held"
            } else {
                "exactly-once FAILED"
            },
            thousands(r.units),
            thousands(r.entries),
            thousands(r.written_twice())
        )
    };
    let lines: Vec<String> = reports.iter().map(line).collect();
    if lines.windows(2).all(|w| w[0] == w[1]) {
        if let Some(first) = lines.first() {
            let modes = if reports.len() > 1 {
                " (every mode)".to_string()
            } else {
                String::new()
            };
            outln!("{first}{modes}");
        }
    } else {
        for (r, l) in reports.iter().zip(&lines) {
            outln!("{l} ({})", r.mode.name());
        }
    }
}

fn print_table(a: &SimulateArgs, reports: &[SimReport]) {
    let rows = table_rows();
    if let Some(r) = reports.first() {
        print_scenario(a, r);
    }
    out!("{:<26}", "");
    for r in reports {
        out!("{:>14}", r.mode.name());
    }
    outln!();
    for (name, cell) in &rows {
        out!("{name:<26}");
        for r in reports {
            out!("{:>14}", cell(r));
        }
        outln!();
    }
    print_verdict(reports);
}

/// `oncelake stats`, on the store in this process or through its server (which adds its own
/// counters).
pub(crate) fn stats<S: StoreOps>(a: &StatsArgs, open: Open<S>) -> Result<u8, CliError> {
    let s = open(&a.store)?.stats()?;
    let server = s.server.as_ref();
    if a.prometheus {
        print_prometheus(&s.store, server.map(|(_, prom)| prom.as_str()));
    } else {
        let out = Output::new(a.json);
        print_stats(&out, &a.store, &s.store, server.map(|(json, _)| json));
    }
    Ok(exit::OK)
}

/// Prints `stats --prometheus`; `server` is a serving process's own metrics in the same format.
fn print_prometheus(s: &StoreStats, server: Option<&str>) {
    out!("{}", s.to_prometheus());
    if let Some(prom) = server {
        out!("{prom}");
    }
}

/// Prints `stats`: a table, or one JSON object (`store, units, bytes_stored, last_seq`, every counter by its
/// metric name, the histograms as objects, `counted_since_seq`, the names of the counters only a
/// running process knows in `process_only`, and a serving process's own counters in `server`).
fn print_stats(out: &Output, store: &Path, s: &StoreStats, server: Option<&Value>) {
    if !out.json {
        print_stats_table(store, s, server);
        return;
    }
    let m = &s.metrics;
    let mut v = json!({"store": store.display().to_string(), "units": s.units,
                       "bytes_stored": s.bytes_stored, "last_seq": s.last_seq});
    if let Some(o) = v.as_object_mut() {
        for (name, n) in m.counters() {
            o.insert(name.into(), json!(n));
        }
        o.insert("group_units".into(), histogram_json(&m.group_units));
        o.insert(
            "commit_latency_us".into(),
            histogram_json(&m.commit_latency_us),
        );
        o.insert("counted_since_seq".into(), json!(m.counted_since_seq));
        let process_only: Vec<&str> = m
            .counters()
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| scope_of(n) == Scope::Process)
            .chain(["group_units", "commit_latency_us"])
            .collect();
        o.insert("process_only".into(), json!(process_only));
        o.insert("server".into(), server.cloned().unwrap_or(Value::Null));
    }
    print_json(&v);
}

fn histogram_json(h: &oncelake::metrics::HistogramSnapshot) -> serde_json::Value {
    json!({"count": h.count, "sum": h.sum, "mean": h.mean(),
           "p50": h.quantile(0.5), "p99": h.quantile(0.99)})
}

fn print_stats_table(store: &Path, s: &StoreStats, server: Option<&Value>) {
    let m = &s.metrics;
    outln!("store      {}", store.display());
    outln!("units      {}", s.units);
    outln!("stored     {} bytes", s.bytes_stored);
    outln!("last seq   {}", s.last_seq);
    outln!();
    let since = match m.counted_since_seq {
        0 => String::new(),
        s => format!(" since seq {s}"),
    };
    // One column for every name, the longest included (`pipeline_cells_invalidated` once
    // pushed its value out of line).
    let w = m
        .counters()
        .iter()
        .map(|(n, _)| n.len())
        .chain(match server {
            Some(Value::Object(live)) => live.keys().map(String::len).collect(),
            _ => Vec::new(),
        })
        .chain(["commit latency us".len()])
        .max()
        .unwrap_or(0);
    outln!("counters of the store (persisted with its commits{since}):");
    for (name, n) in m.counters() {
        if scope_of(name) == Scope::Store {
            outln!("  {name:<w$} {n}");
        }
    }
    outln!();
    match server {
        Some(_) => outln!("counters of the serving process only (since it opened the store):"),
        None => outln!("counters of this process only (zero in a fresh process):"),
    }
    for (name, n) in m.counters() {
        if scope_of(name) == Scope::Process {
            outln!("  {name:<w$} {n}");
        }
    }
    for (name, h) in [
        ("group units", &m.group_units),
        ("commit latency us", &m.commit_latency_us),
    ] {
        outln!(
            "  {name:<w$} count {} mean {:.1} p50 ≤{} p99 ≤{}",
            h.count,
            h.mean(),
            h.quantile(0.5),
            h.quantile(0.99)
        );
    }
    if let Some(Value::Object(live)) = server {
        outln!();
        outln!("the server's own counters (this server process only):");
        for (name, v) in live {
            outln!("  {name:<w$} {v}");
        }
    }
}

pub(crate) fn claim<S: UnitStore>(a: &ClaimArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    // A lease on an internal unit would block the pipeline engine's own cells.
    oncelake::validate_user_key(&a.unit)?;
    let outcome = open(&a.store)?.claim(&a.unit, a.version, &a.worker, a.ttl)?;
    Ok(print_claim(
        &Output::new(a.json),
        &a.unit,
        a.version,
        &outcome,
    ))
}

/// Prints the outcome of `claim` and returns its exit code. Under --json the same fields whatever
/// the outcome: `unit, source_version, outcome, worker, token, expires_at_ms, took_over, holder,
/// current_version, seq, object` (the last three for a unit already done). `source_version` is
/// the version claimed and `current_version` the one the store holds, as in a stale `put`.
pub(crate) fn print_claim(out: &Output, unit: &str, version: u64, outcome: &ClaimOutcome) -> u8 {
    let mut v = json!({
        "unit": unit, "source_version": version, "outcome": Value::Null, "worker": Value::Null,
        "token": Value::Null, "expires_at_ms": Value::Null, "took_over": Value::Null,
        "holder": Value::Null, "current_version": Value::Null, "seq": Value::Null,
        "object": Value::Null,
    });
    let code = match outcome {
        ClaimOutcome::Granted { lease, took_over } => {
            (v["outcome"], v["worker"]) = (json!("granted"), json!(lease.worker));
            (v["token"], v["took_over"]) = (json!(lease.token), json!(took_over));
            v["expires_at_ms"] = json!(lease.expires_at_ms);
            v["source_version"] = json!(lease.source_version);
            if !out.json {
                outln!(
                    "granted {} @ {} to {} with token {} until {}{}; commit with `oncelake put ... --token {}`",
                    lease.unit,
                    lease.source_version,
                    lease.worker,
                    lease.token,
                    rfc3339(lease.expires_at_ms),
                    if *took_over { " (took over an expired lease)" } else { "" },
                    lease.token
                );
            }
            exit::OK
        }
        ClaimOutcome::Held {
            worker,
            expires_at_ms,
        } => {
            held_by_another(
                out,
                &mut v,
                "held",
                (worker, *expires_at_ms),
                format_args!(
                    "busy: {unit} is held by {worker} until {}; try again after that",
                    rfc3339(*expires_at_ms)
                ),
            );
            exit::BUSY
        }
        ClaimOutcome::AlreadyDone(entry) => {
            v["outcome"] = json!("already_done");
            v["current_version"] = json!(entry.source_version);
            (v["seq"], v["object"]) = (json!(entry.seq), json!(entry.object.id.to_hex()));
            if !out.json {
                outln!(
                    "already done: {} is committed at version {} (seq {}); nothing to do",
                    entry.unit,
                    entry.source_version,
                    entry.seq
                );
            }
            exit::OK
        }
    };
    if out.json {
        print_json(&v);
    }
    code
}

pub(crate) fn release<S: UnitStore>(a: &ReleaseArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    oncelake::validate_key(&a.unit)?;
    let store = open(&a.store)?;
    // The worker and the token identify the lease; only its holder may give it back.
    let lease = Lease {
        unit: a.unit.clone(),
        worker: a.worker.clone(),
        token: a.token,
        source_version: 0,
        expires_at_ms: 0,
    };
    let outcome = store.release(&lease)?;
    Ok(print_release(&Output::new(a.json), &lease, &outcome))
}

/// Prints the outcome of `release` and returns its exit code. Under --json the same fields
/// whatever the outcome: `unit, worker, token, outcome, holder, newest_token, reason`.
pub(crate) fn print_release(out: &Output, lease: &Lease, outcome: &ReleaseOutcome) -> u8 {
    let (name, code) = match outcome {
        ReleaseOutcome::Released => ("released", exit::OK),
        ReleaseOutcome::NotHolder { .. } => ("not_holder", exit::FENCED),
        ReleaseOutcome::Lost { .. } => ("fenced", exit::FENCED),
    };
    if out.json {
        let mut v = json!({"unit": lease.unit, "worker": lease.worker, "token": lease.token,
                           "outcome": name, "holder": Value::Null, "newest_token": Value::Null,
                           "reason": Value::Null});
        match outcome {
            ReleaseOutcome::NotHolder { holder } => v["holder"] = json!(holder),
            ReleaseOutcome::Lost { newest_token } => {
                v["newest_token"] = json!(newest_token);
                v["reason"] =
                    json!(oncelake::FenceReason::of(lease.token, *newest_token).to_string());
            }
            ReleaseOutcome::Released => {}
        }
        print_json(&v);
        return code;
    }
    match outcome {
        ReleaseOutcome::Released => outln!("released {} (token {})", lease.unit, lease.token),
        ReleaseOutcome::NotHolder { holder } => errln!(
            "refused: the lease with token {} on {} is held by {holder}, not {}; only its holder can release it. Nothing changed",
            lease.token, lease.unit, lease.worker
        ),
        ReleaseOutcome::Lost { newest_token } => errln!(
            "fenced: token {} is not a lease of {} that can be released: {} (its newest lease token is {newest_token}); nothing changed",
            lease.token,
            lease.unit,
            oncelake::FenceReason::of(lease.token, *newest_token)
        ),
    }
    code
}
