//! `oncelake-bench lake` (SPEC P10): N nodes × T threads committing one unit per call on
//! overlapping units of one shared lake — SeaweedFS (the S3 endpoint of the environment or a
//! temporary `weed mini`) or a shared directory — beside the same run's single node and the run
//! with one node more; then the same load with lost responses injected (the engine's
//! `LakeFaults`), every answer checked against the lake's log (double commits, lost
//! acknowledgements); then a new node opening the lake the main run left.
//!
//! The nodes are store handles in this process, each with its own directory, replica, commit
//! leader and lake client: they share nothing but the lake (and this machine's cores, as node
//! processes on one machine would).

use super::{print_json, BenchError, Progress};
use oncelake::log::RecordBody;
use oncelake::{FaultRates, FloorSpec, LakeFaults, ObjectId, Options, Outcome, Store};
use oncelake_sim::lake_env::{LakeChoice, LakeEnv};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub(crate) struct LakeBenchArgs {
    /// Nodes of the main run (the single-node run and the run with one node more are measured
    /// beside it).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Committing threads per node.
    #[arg(long, default_value_t = 64)]
    pub threads: usize,
    /// How long each run commits.
    #[arg(long, default_value = "10s", value_parser = super::parse_duration)]
    pub duration: Duration,
    /// Distinct units the threads pick from at random (every node picks from all of them: the
    /// units overlap).
    #[arg(long, default_value_t = 100_000)]
    pub units: u64,
    /// The lake: auto, s3, weed or file.
    #[arg(long, value_enum, default_value = "auto")]
    pub lake: LakeChoice,
    /// Lost responses injected in the fault run, per mille of the lake's PUTs (half the
    /// timeout form, half the 5xx-then-412 form).
    #[arg(long, default_value_t = 50)]
    pub lost_per_mille: u32,
    /// Directory for the node directories (and a shared-directory lake); default the system's
    /// temporary directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Measure only the object store's floor (the last section of the full report): plain
    /// PUTs at the runs' concurrency and racing put-if-absent slots, with no log.
    #[arg(long)]
    pub floor: bool,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// What one run measured.
struct RunFigures {
    nodes: usize,
    acknowledged: u64,
    answers: u64,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    /// Every answer that says the unit version is in the lake: (unit, version, object).
    acks: Vec<(u64, u64, ObjectId)>,
    /// Where the nodes' group time went during the run.
    groups: serde_json::Value,
}

impl RunFigures {
    fn per_sec(&self) -> f64 {
        self.acknowledged as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    fn json(&self) -> serde_json::Value {
        json!({
            "nodes": self.nodes,
            "acknowledged_units": self.acknowledged,
            "answers": self.answers,
            "seconds": self.elapsed.as_secs_f64(),
            "acknowledged_units_per_sec": self.per_sec(),
            "p50_ms": self.p50.as_secs_f64() * 1e3,
            "p99_ms": self.p99.as_secs_f64() * 1e3,
            "groups": self.groups,
        })
    }
}

pub(crate) fn run(a: LakeBenchArgs) -> Result<u8, BenchError> {
    if a.nodes == 0 || a.threads == 0 || a.units == 0 {
        return Err(BenchError::Usage(
            "--nodes, --threads and --units must be at least 1".into(),
        ));
    }
    let root = super::scratch::scratch_dir(a.dir.clone())?.join(format!(
        "oncelake-bench-lake-{}-{}",
        std::process::id(),
        nanos()
    ));
    std::fs::create_dir_all(&root).map_err(|e| BenchError::io("create the scratch dir", e))?;
    let result = measure(&a, &root);
    let _ = std::fs::remove_dir_all(&root);
    let report = result?;
    if a.json {
        print_json(&report);
    } else {
        print_table(&report);
    }
    let clean =
        a.floor || (report["faults"]["double_commits"] == 0 && report["faults"]["lost_acks"] == 0);
    Ok(if clean {
        super::error::OK
    } else {
        super::error::FAILURE
    })
}

fn measure(a: &LakeBenchArgs, root: &Path) -> Result<serde_json::Value, BenchError> {
    let unique = root
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into());
    let lake = LakeEnv::start(a.lake, root, &unique).map_err(BenchError::Usage)?;
    for (k, v) in &lake.envs {
        // Before any thread of this process exists: the nodes are in this process and read
        // the endpoint of the temporary server from the environment.
        std::env::set_var(k, v);
    }
    if a.floor {
        return Ok(json!({"bench": "lake", "lake": lake.described, "floor": floor(a, &lake)?}));
    }
    let spinner = Progress::new("lake: single node");
    let single = load(a, root, &lake.url("single"), 1)?;
    spinner.finish();
    let spinner = Progress::new(&format!("lake: {} nodes", a.nodes));
    let main = load(a, root, &lake.url("main"), a.nodes)?;
    spinner.finish();
    let spinner = Progress::new(&format!("lake: {} nodes", a.nodes + 1));
    let more = load(a, root, &lake.url("more"), a.nodes + 1)?;
    spinner.finish();
    let spinner = Progress::new("lake: lost responses");
    let url = lake.url("faults");
    let plan = LakeFaults::install_on(&url, 7);
    plan.set_rates(FaultRates {
        after: a.lost_per_mille / 2,
        after_already_exists: a.lost_per_mille - a.lost_per_mille / 2,
        ..FaultRates::default()
    });
    let faulty = load(a, root, &url, a.nodes)?;
    let injected = plan.counts();
    let (double, lost, log_units) = check_acks(root, &url, &faulty.acks)?;
    spinner.finish();
    let spinner = Progress::new("lake: a new node opens the main lake");
    let (open, entries, records) = open_new_node(root, &lake.url("main"))?;
    spinner.finish();
    let floor = floor(a, &lake)?;
    let drop_pct = (1.0 - more.per_sec() / main.per_sec().max(1e-9)) * 100.0;
    Ok(json!({
        "bench": "lake",
        "lake": lake.described,
        "threads_per_node": a.threads,
        "units": a.units,
        "single_node": single.json(),
        "main": main.json(),
        "plus_one_node": more.json(),
        "plus_one_node_drop_pct": drop_pct,
        "main_vs_single": main.per_sec() / single.per_sec().max(1e-9),
        "faults": {
            "run": faulty.json(),
            "lost_responses_injected": injected.lost_responses,
            "acknowledged_checked": faulty.acks.len(),
            "log_units": log_units,
            "double_commits": double,
            "lost_acks": lost,
        },
        "new_node_open": {
            "lake_entries": entries,
            "log_records": records,
            "seconds": open.as_secs_f64(),
            "how": "replay from segment 1 (no lake checkpoints yet; a build with them opens from \
                    the newest checkpoint and replays the tail, measured by the same command)",
        },
        "floor": floor,
    }))
}

/// Bytes of a plain PUT of the floor: about a unit's object ("unit N version V").
const FLOOR_OBJECT_BYTES: usize = 32;
/// Bytes of a racing slot of the floor: about a 32-unit segment.
const FLOOR_SLOT_BYTES: usize = 4096;

/// The object store's floor for this run's shape: `nodes` clients × `threads` plain PUTs in
/// flight, and `nodes` clients racing for put-if-absent slots, on a lake of its own.
fn floor(a: &LakeBenchArgs, lake: &LakeEnv) -> Result<serde_json::Value, BenchError> {
    let spinner = Progress::new("lake: the object store's floor");
    let spec = FloorSpec {
        clients: a.nodes,
        in_flight: a.threads,
        object_bytes: FLOOR_OBJECT_BYTES,
        slot_bytes: FLOOR_SLOT_BYTES,
        duration: a.duration,
    };
    let f = oncelake::lake_floor(&lake.url("floor"), spec)?;
    spinner.finish();
    Ok(json!({
        "clients": spec.clients,
        "puts_in_flight": spec.clients * spec.in_flight,
        "object_bytes": spec.object_bytes,
        "slot_bytes": spec.slot_bytes,
        "puts": f.puts,
        "puts_per_sec": f.puts_per_sec,
        "put_p50_ms": f.put_p50_ms,
        "put_p99_ms": f.put_p99_ms,
        "slots_created": f.slots,
        "slots_per_sec": f.slots_per_sec,
        "slots_found_taken": f.slots_lost,
        "create_p50_ms": f.create_p50_ms,
    }))
}

/// `nodes` fresh nodes of the lake `url`, `threads` each, committing for the run's duration.
fn load(a: &LakeBenchArgs, root: &Path, url: &str, nodes: usize) -> Result<RunFigures, BenchError> {
    let stores = (0..nodes)
        .map(|i| open_node(&root.join(node_dir(url, i)), url))
        .collect::<Result<Vec<_>, _>>()?;
    let version = AtomicU64::new(1);
    let stop = AtomicBool::new(false);
    let before = oncelake::lake_timings();
    let start = Instant::now();
    let per_thread = std::thread::scope(|s| {
        let handles: Vec<_> = stores
            .iter()
            .flat_map(|store| (0..a.threads).map(move |t| (store, t)))
            .enumerate()
            .map(|(i, (store, _))| {
                let (version, stop) = (&version, &stop);
                s.spawn(move || commit_loop(store, a.units, i as u64, version, stop))
            })
            .collect();
        std::thread::sleep(a.duration);
        stop.store(true, Ordering::Relaxed);
        let elapsed = start.elapsed();
        let joined = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<Vec<_>>();
        (joined, elapsed)
    });
    let (per_thread, elapsed) = per_thread;
    let groups = group_breakdown(before, oncelake::lake_timings());
    let mut latencies = Vec::new();
    let (mut acknowledged, mut answers, mut acks) = (0, 0, Vec::new());
    for t in per_thread {
        let t = t?;
        latencies.extend(t.latencies);
        acknowledged += t.committed;
        answers += t.answers;
        acks.extend(t.acks);
    }
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Ok(RunFigures {
        nodes,
        acknowledged,
        answers,
        elapsed,
        p50: pct(0.50),
        p99: pct(0.99),
        acks,
        groups,
    })
}

/// The group attempts between two readings of the lake's timings, and the mean milliseconds
/// per attempt of each phase (summed over nodes: an attempt is one node's).
fn group_breakdown(a: oncelake::LakeTimings, b: oncelake::LakeTimings) -> serde_json::Value {
    let attempts = b.attempts - a.attempts;
    let per = |x: u64, y: u64| (y - x) as f64 / 1e6 / attempts.max(1) as f64;
    json!({
        "attempts": attempts,
        "won": b.won - a.won,
        "uploads": b.uploads - a.uploads,
        "ms_per_attempt": {
            "sync": per(a.sync_ns, b.sync_ns),
            "decide": per(a.decide_ns, b.decide_ns),
            "upload": per(a.upload_ns, b.upload_ns),
            "publish": per(a.publish_ns, b.publish_ns),
            "apply_won": per(a.apply_ns, b.apply_ns),
            "lost_apply_and_backoff": per(a.lost_ns, b.lost_ns),
            "of_sync_and_lost_fetching_objects": per(a.fetch_ns, b.fetch_ns),
        },
    })
}

fn node_dir(url: &str, i: usize) -> String {
    let lake = url.rsplit('/').next().unwrap_or("lake");
    format!("{lake}-node{i}")
}

fn open_node(dir: &Path, url: &str) -> Result<Store, BenchError> {
    let opts = Options {
        lake: Some(url.to_string()),
        ..Options::default()
    };
    Ok(Store::open_with(dir, opts)?)
}

/// One thread's answers.
struct ThreadFigures {
    committed: u64,
    answers: u64,
    latencies: Vec<Duration>,
    acks: Vec<(u64, u64, ObjectId)>,
}

/// Commits one unit per call until `stop`: a random unit of `units`, at the next version of the
/// run (so each call is new work; an older version than the unit's is answered stale).
fn commit_loop(
    store: &Store,
    units: u64,
    seed: u64,
    version: &AtomicU64,
    stop: &AtomicBool,
) -> Result<ThreadFigures, BenchError> {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut f = ThreadFigures {
        committed: 0,
        answers: 0,
        latencies: Vec::new(),
        acks: Vec::new(),
    };
    while !stop.load(Ordering::Relaxed) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let unit = rng % units;
        let v = version.fetch_add(1, Ordering::Relaxed);
        let bytes = format!("unit {unit} version {v}").into_bytes();
        let t = Instant::now();
        let o = store.put(&unit_key(unit), v, &bytes)?;
        let acked = (unit, v, ObjectId::of(&bytes));
        if stop.load(Ordering::Relaxed) {
            // Answered after the run's end: checked, not counted in the rate.
            if matches!(
                o.outcome,
                Outcome::Committed { .. } | Outcome::Duplicate { .. }
            ) {
                f.acks.push(acked);
            }
            break;
        }
        f.latencies.push(t.elapsed());
        f.answers += 1;
        match o.outcome {
            Outcome::Committed { .. } => {
                f.committed += 1;
                f.acks.push(acked);
            }
            Outcome::Duplicate { .. } => f.acks.push(acked),
            _ => {}
        }
    }
    Ok(f)
}

fn unit_key(unit: u64) -> String {
    format!("bench/unit={unit:07}")
}

/// Opens a new node of `url` and reads its log: (double commits, lost acknowledgements, unit
/// commits in the log). A double commit is a unit version committed twice; a lost
/// acknowledgement an answered commit the log does not hold.
fn check_acks(
    root: &Path,
    url: &str,
    acks: &[(u64, u64, ObjectId)],
) -> Result<(u64, u64, u64), BenchError> {
    let store = open_node(&root.join("faults-checker"), url)?;
    let snap = store.snapshot()?;
    let mut logged: BTreeMap<(String, u64), ObjectId> = BTreeMap::new();
    let (mut double, mut log_units) = (0u64, 0u64);
    for r in snap.changes_since(0)? {
        if let RecordBody::Commit { entries } = r?.body {
            for e in entries {
                log_units += 1;
                if logged
                    .insert((e.unit, e.source_version), e.object.id)
                    .is_some()
                {
                    double += 1;
                }
            }
        }
    }
    let mut seen = HashSet::new();
    let lost = acks
        .iter()
        .filter(|(u, v, _)| seen.insert((*u, *v)))
        .filter(|(u, v, id)| logged.get(&(unit_key(*u), *v)) != Some(id))
        .count() as u64;
    Ok((double, lost, log_units))
}

/// The time a new node takes to open the lake `url` (binding, replay, caught up), and the
/// lake's entries and log records.
fn open_new_node(root: &Path, url: &str) -> Result<(Duration, u64, u64), BenchError> {
    let t = Instant::now();
    let store = open_node(&root.join("new-node"), url)?;
    let open = t.elapsed();
    let snap = store.snapshot()?;
    let entries = snap.iter()?.count() as u64;
    let records = snap.changes_since(0)?.count() as u64;
    Ok((open, entries, records))
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

fn print_table(r: &serde_json::Value) {
    outln!("P10 shared lake on {}", r["lake"].as_str().unwrap_or("?"));
    if r.get("main").is_none() {
        print_floor(&r["floor"]);
        return;
    }
    outln!("  run                  units/s     p50 ms   p99 ms   acknowledged");
    for (name, key) in [
        ("single node", "single_node"),
        ("main", "main"),
        ("one node more", "plus_one_node"),
        ("lost responses", ""),
    ] {
        let f = if key.is_empty() {
            &r["faults"]["run"]
        } else {
            &r[key]
        };
        outln!(
            "  {:<14} {:>2} n {:>10.0} {:>10.2} {:>8.2} {:>14}",
            name,
            f["nodes"],
            f["acknowledged_units_per_sec"].as_f64().unwrap_or(0.0),
            f["p50_ms"].as_f64().unwrap_or(0.0),
            f["p99_ms"].as_f64().unwrap_or(0.0),
            f["acknowledged_units"]
        );
    }
    outln!(
        "  one node more: {:+.1}% ({} → {} nodes); main / single node: {:.2}×",
        -r["plus_one_node_drop_pct"].as_f64().unwrap_or(0.0),
        r["main"]["nodes"],
        r["plus_one_node"]["nodes"],
        r["main_vs_single"].as_f64().unwrap_or(0.0)
    );
    let g = &r["main"]["groups"];
    let ms = &g["ms_per_attempt"];
    outln!(
        "  main run's group attempts: {} ({} won, {} objects uploaded); ms per attempt: sync \
         {:.1}, decide {:.1}, upload {:.1}, publish {:.1}, apply {:.1}, after a loss {:.1}",
        g["attempts"],
        g["won"],
        g["uploads"],
        ms["sync"].as_f64().unwrap_or(0.0),
        ms["decide"].as_f64().unwrap_or(0.0),
        ms["upload"].as_f64().unwrap_or(0.0),
        ms["publish"].as_f64().unwrap_or(0.0),
        ms["apply_won"].as_f64().unwrap_or(0.0),
        ms["lost_apply_and_backoff"].as_f64().unwrap_or(0.0)
    );
    let f = &r["faults"];
    outln!(
        "  lost responses injected: {}; acknowledged units checked: {}; double commits: {}; \
         lost acknowledgements: {}",
        f["lost_responses_injected"],
        f["acknowledged_checked"],
        f["double_commits"],
        f["lost_acks"]
    );
    let o = &r["new_node_open"];
    outln!(
        "  a new node opens the main lake ({} entries, {} log records): {:.2} s ({})",
        o["lake_entries"],
        o["log_records"],
        o["seconds"].as_f64().unwrap_or(0.0),
        o["how"].as_str().unwrap_or("")
    );
    print_floor(&r["floor"]);
}

fn print_floor(f: &serde_json::Value) {
    outln!(
        "  the object store's floor, no log: {:.0} plain PUTs/s ({} in flight from {} clients, \
         {} B each; p50 {:.1} ms, p99 {:.1} ms); {:.0} put-if-absent slots/s ({} clients racing, \
         {} B each, {} found taken; create p50 {:.1} ms)",
        f["puts_per_sec"].as_f64().unwrap_or(0.0),
        f["puts_in_flight"],
        f["clients"],
        f["object_bytes"],
        f["put_p50_ms"].as_f64().unwrap_or(0.0),
        f["put_p99_ms"].as_f64().unwrap_or(0.0),
        f["slots_per_sec"].as_f64().unwrap_or(0.0),
        f["clients"],
        f["slot_bytes"],
        f["slots_found_taken"],
        f["create_p50_ms"].as_f64().unwrap_or(0.0)
    );
}
