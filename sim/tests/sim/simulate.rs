//! The worked example (SPEC R18) at a smaller scale, checked against the store it leaves behind,
//! and the `simulate`, `stats`, `claim` and `release` commands (R16, R17).

use crate::{bin, common};

use common::scratch;
use oncelake::{ManualClock, Options, Store};
use oncelake_sim::{simulate, Schedule, SimConfig, SimMode, SimReport};
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const UNITS: u64 = 2_000;

fn config(dir: &Path, mode: SimMode, crash_rate: f64) -> SimConfig {
    SimConfig {
        workers: 4,
        units: UNITS,
        overlap: 0.05,
        mode,
        crash_rate,
        seed: 42,
        ..SimConfig::new(dir.join(mode.name()))
    }
}

/// Opens what the simulation left and checks it independently of its report: one entry per unit
/// at version 1, every object readable with its size and CRC32, the log replaying to the manifest,
/// nothing left in staging and no unreferenced object.
fn check_store(dir: &Path) {
    let store = Store::open(dir).unwrap();
    let snap = store.snapshot().unwrap();
    let mut units = HashSet::new();
    let mut referenced = HashSet::new();
    for e in snap.iter().unwrap() {
        let e = e.unwrap();
        assert_eq!(e.source_version, 1);
        assert_eq!(e.revision, 0);
        snap.read_object(&e).unwrap();
        referenced.insert(e.object.id.to_hex());
        assert!(units.insert(e.unit.clone()), "unit {} twice", e.unit);
    }
    assert_eq!(units.len() as u64, UNITS);
    assert!(oncelake::replay(&snap).unwrap().is_clean());
    assert_eq!(std::fs::read_dir(dir.join("staging")).unwrap().count(), 0);
    let mut objects = 0;
    for fanout in std::fs::read_dir(dir.join("objects")).unwrap() {
        for f in std::fs::read_dir(fanout.unwrap().path()).unwrap() {
            let name = f.unwrap().file_name().into_string().unwrap();
            assert!(referenced.contains(&name), "orphan object {name}");
            objects += 1;
        }
    }
    assert_eq!(objects, referenced.len());
}

fn run(dir: &Path, mode: SimMode, crash_rate: f64) -> SimReport {
    let cfg = config(dir, mode, crash_rate);
    let r = simulate(&cfg, &|_, _| {}).unwrap();
    check_store(&cfg.store_dir);
    r
}

#[test]
fn optimistic_mode_measures_the_overlap_as_redundant_work() {
    let dir = scratch("oncelake-test");
    let r = run(dir.path(), SimMode::Optimistic, 0.0);
    assert_eq!(r.schedule, Schedule::Premise);
    assert_eq!(r.overlapped, 100);
    assert_eq!(r.computations, UNITS + 100);
    assert_eq!(r.redundant, 100);
    assert_eq!(r.duplicates_collapsed, 100);
    assert_eq!(r.entries, UNITS);
    assert!((r.wasted_fraction - 100.0 / 2100.0).abs() < 1e-12);
    assert_eq!((r.claims_granted, r.rounds, r.orphans_left), (0, 1, 0));
    assert_eq!((r.busy, r.already_done), (0, 0), "both copies computed");
    assert!(r.replay_clean);
    assert_batched(&r);
}

/// The workers go through the engine once per chunk, not once per unit: with 2,100 tasks in
/// chunks of 128 that is at most ~40 claim and commit operations, so few commit groups. One
/// engine call per unit cannot fit: each of the 4 workers has at most one operation in flight, so
/// a group holds at most 4 and 2,100 commits need at least 525 groups (coordinated: 4,100
/// operations, 1,025 groups).
fn assert_batched(r: &SimReport) {
    assert_eq!(r.chunk, oncelake_sim::DEFAULT_CHUNK);
    assert!(
        r.commit_groups < 100,
        "{:?}: {} commit groups for {} units",
        r.mode,
        r.commit_groups,
        r.units
    );
}

#[test]
fn coordinated_mode_does_no_redundant_work() {
    let dir = scratch("oncelake-test");
    let r = run(dir.path(), SimMode::Coordinated, 0.0);
    assert_eq!(r.computations, UNITS);
    assert_eq!(r.redundant, 0);
    assert_eq!(r.duplicates_collapsed, 0);
    assert_eq!(r.entries, UNITS);
    assert_eq!(r.claims_granted, UNITS);
    // Of each doubly handed unit, one worker was stopped by coordination: the other worker was
    // inside its work, holding a live lease, when it tried, so run_once answered busy.
    assert_eq!((r.busy, r.already_done), (100, 0));
    assert_eq!(r.claims_held, 100);
    assert_eq!((r.fenced_rejections, r.claims_taken_over), (0, 0));
    assert_eq!(r.wasted_fraction, 0.0);
    assert!(r.replay_clean);
    assert_batched(&r);
}

/// Under the premise schedule the overlap is real for any number of workers: both workers of
/// every overlapped unit try it before either commits (optimistic: both computed, one collapsed;
/// coordinated: one busy), and the engine's counts are exact. One worker runs the copies one after
/// the other instead.
#[test]
fn the_premise_schedule_overlaps_for_any_worker_count() {
    let dir = scratch("oncelake-test");
    for (i, (workers, overlap)) in [(2, 0.05), (3, 0.2), (10, 1.0), (16, 0.3)]
        .into_iter()
        .enumerate()
    {
        for mode in [SimMode::Optimistic, SimMode::Coordinated] {
            let cfg = SimConfig {
                workers,
                units: 500,
                overlap,
                mode,
                seed: i as u64,
                ..SimConfig::new(dir.path().join(format!("{i}-{}", mode.name())))
            };
            let r = simulate(&cfg, &|_, _| {}).unwrap();
            let o = cfg.overlapped_units();
            let case = format!("{mode:?} workers {workers} overlap {overlap}");
            assert_eq!(r.overlapped, o, "{case}");
            assert_eq!((r.entries, r.already_done), (500, 0), "{case}");
            match mode {
                SimMode::Optimistic => {
                    assert_eq!((r.computations, r.redundant), (500 + o, o), "{case}");
                    assert_eq!((r.duplicates_collapsed, r.busy), (o, 0), "{case}");
                }
                SimMode::Coordinated => {
                    assert_eq!((r.computations, r.redundant), (500, 0), "{case}");
                    assert_eq!(
                        (r.busy, r.claims_held, r.claims_granted),
                        (o, o, 500),
                        "{case}"
                    );
                }
            }
            assert_eq!((r.orphans_collected, r.orphans_left), (0, 0), "{case}");
        }
    }
    // One worker: no rendezvous, the second copy finds the unit done.
    for mode in [SimMode::Optimistic, SimMode::Coordinated] {
        let cfg = SimConfig {
            workers: 1,
            units: 300,
            overlap: 0.1,
            mode,
            ..SimConfig::new(dir.path().join(format!("one-{}", mode.name())))
        };
        let r = simulate(&cfg, &|_, _| {}).unwrap();
        assert_eq!((r.computations, r.redundant, r.already_done), (300, 0, 30));
    }
}

/// The natural schedule lets timing decide, and the engine's counters account for every second
/// copy either way: computed redundantly or found done (optimistic), busy or found done
/// (coordinated, never redundant).
#[test]
fn the_natural_schedule_accounts_for_every_second_copy() {
    let dir = scratch("oncelake-test");
    for mode in [SimMode::Optimistic, SimMode::Coordinated] {
        let cfg = SimConfig {
            schedule: Schedule::Natural,
            ..config(dir.path(), mode, 0.0)
        };
        let r = simulate(&cfg, &|_, _| {}).unwrap();
        check_store(&cfg.store_dir);
        assert_eq!(r.schedule, Schedule::Natural);
        assert_eq!(r.entries, UNITS);
        match mode {
            SimMode::Optimistic => {
                assert_eq!(r.computations, UNITS + r.redundant);
                assert_eq!(r.redundant + r.already_done, r.overlapped);
                assert_eq!((r.duplicates_collapsed, r.busy), (r.redundant, 0));
            }
            SimMode::Coordinated => {
                assert_eq!((r.computations, r.redundant), (UNITS, 0));
                assert_eq!(r.busy + r.already_done, r.overlapped);
            }
        }
    }
}

#[test]
fn crashes_leave_one_entry_per_unit_and_no_orphans() {
    let dir = scratch("oncelake-test");
    for mode in [SimMode::Optimistic, SimMode::Coordinated] {
        // Small chunks: a crash loses its worker's whole chunk.
        let cfg = SimConfig {
            chunk: 16,
            ..config(dir.path(), mode, 0.05)
        };
        let r = simulate(&cfg, &|_, _| {}).unwrap();
        check_store(&cfg.store_dir);
        assert!(r.crashes > 0, "{mode:?}: no crash happened");
        assert!(r.crashed_attempts >= r.crashes, "{mode:?}");
        assert!(r.rounds > 1, "{mode:?}: crashed units were not retried");
        assert_eq!(r.entries, UNITS);
        assert_eq!(r.orphans_left, 0);
        // Every crash left one partial staging file; the outputs its chunk had already staged are
        // the same bytes the retries commit, so nothing else is orphaned.
        assert_eq!(r.orphans_collected, r.crashes);
        assert!(r.replay_clean);
        // A lost attempt ran its work (a computation) and produced nothing (not redundant).
        assert_eq!(
            r.computations,
            UNITS + r.redundant + r.crashed_attempts,
            "{mode:?}"
        );
        if mode == SimMode::Coordinated {
            // A crashed chunk abandoned the lease of every unit it was granted: the ones whose work
            // ran (lost attempts) and at most the rest of its chunk. Every unit was granted once
            // more to the attempt that committed it. (A retry by the crashed worker's own name
            // re-claims its expired lease without counting as a takeover by another worker.)
            let abandoned = r.claims_granted - UNITS;
            assert!(
                abandoned >= r.crashed_attempts
                    && abandoned <= r.crashed_attempts + r.crashes * (cfg.chunk as u64 - 1),
                "{abandoned} abandoned leases for {} crashes losing {} attempts",
                r.crashes,
                r.crashed_attempts
            );
            assert!(r.claims_taken_over > 0 && r.claims_taken_over <= abandoned);
            assert_eq!((r.fenced_rejections, r.redundant), (0, 0));
        }
    }
}

fn oncelake(args: &[&str]) -> std::process::Output {
    Command::new(bin::oncelake()).args(args).output().unwrap()
}

#[test]
fn simulate_command_prints_one_json_line_per_mode() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("sim");
    let out = oncelake(&[
        "simulate",
        "--units",
        "400",
        "--workers",
        "3",
        "--overlap",
        "0.1",
        "--json",
        "--store",
        store.to_str().unwrap(),
    ]);
    let lines = bin::json_lines(&out);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["schedule"], "premise");
    assert_eq!(lines[0]["mode"], "optimistic");
    assert_eq!(lines[0]["computations"], 440);
    assert_eq!(lines[0]["redundant"], 40);
    assert_eq!(lines[1]["mode"], "coordinated");
    assert_eq!(lines[1]["computations"], 400);
    assert_eq!(lines[1]["redundant"], 0);
    for l in &lines {
        assert_eq!(l["manifest_entries"], 400);
        assert_eq!(l["orphans_left"], 0);
    }
    assert!(store.join("optimistic").join("ONCELAKE").exists());
    // Bad input is a usage error.
    let bad = oncelake(&["simulate", "--overlap", "2"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}

#[test]
fn claim_and_release_commands_follow_the_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s");
    let s = s.to_str().unwrap();
    assert!(oncelake(&["init", s]).status.success());
    let got = oncelake(&[
        "claim", s, "u", "3", "--worker", "w1", "--ttl", "5m", "--json",
    ]);
    assert_eq!(got.status.code(), Some(0), "{got:?}");
    let lease: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(lease["outcome"], "granted");
    let token = lease["token"].as_u64().unwrap().to_string();
    let busy = oncelake(&["claim", s, "u", "3", "--worker", "w2", "--ttl", "30s"]);
    assert_eq!(busy.status.code(), Some(6), "held → busy");
    assert!(String::from_utf8_lossy(&busy.stderr).contains("w1"));
    let wrong = oncelake(&["release", s, "u", "--worker", "w1", "--token", "999"]);
    assert_eq!(wrong.status.code(), Some(5));
    let ok = oncelake(&["release", s, "u", "--worker", "w1", "--token", &token]);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    let again = oncelake(&["claim", s, "u", "3", "--worker", "w2", "--json"]);
    assert_eq!(again.status.code(), Some(0));
}

// ---- A strict parser of the Prometheus text exposition format (0.0.4) ----

/// One sample: metric name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: bool,
    samples: Vec<Sample>,
}

fn valid_metric_name(n: &str) -> bool {
    let mut chars = n.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_value(v: &str) -> f64 {
    match v {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => v
            .parse()
            .unwrap_or_else(|_| panic!("bad sample value {v:?}")),
    }
}

/// Parses `name{l="v",...} value`, strictly.
fn parse_sample(line: &str) -> Sample {
    let (name_labels, value) = line
        .rsplit_once(' ')
        .unwrap_or_else(|| panic!("no value in {line:?}"));
    let (name, labels) = match name_labels.split_once('{') {
        None => (name_labels.to_string(), vec![]),
        Some((name, rest)) => {
            let body = rest
                .strip_suffix('}')
                .unwrap_or_else(|| panic!("unclosed labels in {line:?}"));
            let labels = body
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|pair| {
                    let (k, v) = pair
                        .split_once('=')
                        .unwrap_or_else(|| panic!("bad label {pair:?}"));
                    assert!(valid_metric_name(k) && !k.contains(':'), "label name {k:?}");
                    let v = v
                        .strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .unwrap_or_else(|| panic!("unquoted label value {v:?}"));
                    assert!(!v.contains('"') && !v.contains('\n'));
                    (k.to_string(), v.to_string())
                })
                .collect();
            (name.to_string(), labels)
        }
    };
    assert!(valid_metric_name(&name), "metric name {name:?}");
    (name, labels, parse_value(value))
}

/// Checks the whole exposition and returns the families by name.
fn parse_prometheus(text: &str) -> std::collections::BTreeMap<String, Family> {
    use std::collections::BTreeMap;
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut current: Option<String> = None;
    assert!(text.ends_with('\n'), "exposition must end with a newline");
    for line in text.lines() {
        assert!(!line.is_empty(), "no empty lines");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP needs a text");
            assert!(valid_metric_name(name) && !help.is_empty());
            let f = families.entry(name.to_string()).or_default();
            assert!(!f.help, "second HELP for {name}");
            assert!(f.samples.is_empty(), "HELP after samples of {name}");
            f.help = true;
            current = Some(name.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE needs a kind");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "kind {kind}"
            );
            let f = families.entry(name.to_string()).or_default();
            assert!(f.kind.is_empty(), "second TYPE for {name}");
            assert!(f.samples.is_empty(), "TYPE after samples of {name}");
            f.kind = kind.to_string();
            current = Some(name.to_string());
        } else if line.starts_with('#') {
            continue;
        } else {
            let (name, labels, v) = parse_sample(line);
            let family = current
                .clone()
                .unwrap_or_else(|| panic!("sample {name} before any TYPE"));
            let f = families.get_mut(&family).unwrap();
            let ok = match f.kind.as_str() {
                "histogram" => [
                    format!("{family}_bucket"),
                    format!("{family}_sum"),
                    format!("{family}_count"),
                ]
                .contains(&name),
                _ => name == family,
            };
            assert!(ok, "sample {name} does not belong to family {family}");
            if f.kind == "counter" {
                assert!(v >= 0.0 && v.is_finite(), "counter {name} = {v}");
                assert!(
                    family.ends_with("_total"),
                    "counter {family} must end in _total"
                );
            }
            f.samples.push((name, labels, v));
        }
    }
    for (name, f) in &families {
        assert!(f.help && !f.kind.is_empty(), "{name} lacks HELP or TYPE");
        assert!(!f.samples.is_empty(), "{name} has no samples");
        if f.kind == "histogram" {
            let buckets: Vec<(f64, f64)> = f
                .samples
                .iter()
                .filter(|s| s.0.ends_with("_bucket"))
                .map(|s| {
                    let le =
                        s.1.iter()
                            .find(|l| l.0 == "le")
                            .unwrap_or_else(|| panic!("bucket of {name} without le"));
                    (parse_value(&le.1), s.2)
                })
                .collect();
            assert!(!buckets.is_empty());
            for w in buckets.windows(2) {
                assert!(w[0].0 < w[1].0, "{name}: le bounds must rise");
                assert!(w[0].1 <= w[1].1, "{name}: buckets must be cumulative");
            }
            let (last_le, last_n) = *buckets.last().unwrap();
            assert_eq!(last_le, f64::INFINITY, "{name}: last bucket must be +Inf");
            let count = f
                .samples
                .iter()
                .find(|s| s.0 == format!("{name}_count"))
                .map(|s| s.2)
                .unwrap_or_else(|| panic!("{name}_count missing"));
            assert!(f.samples.iter().any(|s| s.0 == format!("{name}_sum")));
            assert_eq!(last_n, count, "{name}: +Inf bucket must equal the count");
        }
    }
    families
}

#[test]
fn the_prometheus_parser_rejects_what_it_must() {
    for bad in [
        "oncelake_x_total 1\n",                                  // no TYPE
        "# HELP a b\n# TYPE a counter\na 1\n",                   // counter without _total
        "# HELP a_total b\n# TYPE a_total counter\na_total 1",   // no final newline
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
        "# HELP 1a x\n# TYPE 1a gauge\n1a 1\n",
    ] {
        assert!(
            std::panic::catch_unwind(|| parse_prometheus(bad)).is_err(),
            "accepted {bad:?}"
        );
    }
}

#[test]
fn stats_prometheus_output_is_valid_exposition_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    {
        // Activity in-process, so that the histograms have data: parse the API's exposition too.
        let store = Store::open_with(
            &path,
            Options {
                clock: Arc::new(ManualClock::new(1_000)),
                ..Options::default()
            },
        )
        .unwrap();
        for i in 0..20 {
            store
                .run_once(&format!("u{i}"), 1, "w", Duration::from_secs(30), || {
                    Ok::<_, std::io::Error>(vec![i as u8; 10])
                })
                .unwrap();
        }
        store.put("u0", 1, &[0u8; 10]).unwrap(); // a duplicate
        let text = store.metrics().to_prometheus();
        let fams = parse_prometheus(&text);
        let c = |n: &str| fams[n].samples[0].2;
        assert_eq!(c("oncelake_computations_total"), 20.0);
        assert_eq!(c("oncelake_duplicates_collapsed_total"), 1.0);
        assert_eq!(c("oncelake_claims_granted_total"), 20.0);
        assert!(fams["oncelake_commit_latency_us"].samples.len() > 3);
    }
    let out = oncelake(&["stats", path.to_str().unwrap(), "--prometheus"]);
    assert!(out.status.success(), "{out:?}");
    let fams = parse_prometheus(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(fams["oncelake_units"].kind, "gauge");
    assert_eq!(fams["oncelake_units"].samples[0].2, 20.0);
    assert_eq!(fams["oncelake_group_units"].kind, "histogram");

    let json = oncelake(&["stats", path.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["units"], 20);
    assert!(v["last_seq"].as_u64().unwrap() >= 20);
}

/// `simulate --nodes 3` on a file:// lake: each mode's JSON line accounts for every task (each
/// was computed, found done or found busy), and every node directory it leaves, opened here and
/// synced, holds exactly the model's entries — one per unit at version 1, the same on every node.
#[test]
fn simulate_across_three_node_processes_ends_with_one_entry_per_unit_on_every_node() {
    let dir = scratch("oncelake-test");
    let root = dir.path().join("sim");
    let (units, overlap) = (600u64, 0.1);
    let out = Command::new(bin::oncelake())
        .args(["simulate", "--nodes", "3", "--lake", "file", "--json"])
        .args(["--units", &units.to_string(), "--workers", "5"])
        .args(["--overlap", &overlap.to_string(), "--chunk", "32"])
        .arg("--store")
        .arg(&root)
        .output()
        .unwrap();
    let lines = bin::json_lines(&out);
    assert_eq!(lines.len(), 2, "one line per mode");
    let model: std::collections::BTreeMap<String, u64> = (0..units)
        .map(|i| (format!("orders/customer={i:06}/date=2026-11-29"), 1))
        .collect();
    for l in &lines {
        let n = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k} in {l}"));
        assert_eq!(l["nodes"], 3);
        assert!(l["lake"].as_str().unwrap().contains("file://"), "{l}");
        assert_eq!((n("units"), n("overlapped_units")), (units, 60));
        // Every task handed out was computed, found done or found busy.
        assert_eq!(
            n("computations") + n("already_done") + n("busy"),
            units + 60
        );
        assert_eq!(n("computations"), units + n("redundant"), "{l}");
        assert_eq!(n("manifest_entries"), units);
        assert_eq!(
            (&l["views_identical"], &l["exactly_once"]),
            (&true.into(), &true.into())
        );
        let per_node = l["per_node"].as_array().unwrap();
        let sum = |k: &str| per_node.iter().map(|p| p[k].as_u64().unwrap()).sum::<u64>();
        assert_eq!(sum("computations"), n("computations"));
        assert_eq!(sum("workers"), 5);
        if l["mode"] == "coordinated" {
            assert_eq!(n("redundant"), 0, "a claim is exclusive across nodes: {l}");
        }
        // The node directories, opened here: each is the model.
        let mode_dir = root.join(l["mode"].as_str().unwrap());
        for i in 0..3 {
            let store = Store::open(mode_dir.join(format!("node{i}"))).unwrap();
            store.sync().unwrap();
            let snap = store.snapshot().unwrap();
            let got: std::collections::BTreeMap<String, u64> = snap
                .iter()
                .unwrap()
                .map(|e| e.unwrap())
                .map(|e| (e.unit, e.source_version))
                .collect();
            assert_eq!(got, model, "node{i} of {}", l["mode"]);
            assert!(oncelake::replay(&snap).unwrap().is_clean());
        }
    }
}

/// The same on a temporary SeaweedFS when `weed` is found (ONCELAKE_WEED or PATH); skipped
/// loudly without it.
#[test]
fn simulate_across_nodes_on_seaweedfs_is_exactly_once() {
    if oncelake_sim::lake_env::find_weed().is_none() {
        eprintln!("SKIPPED: no `weed` (set ONCELAKE_WEED or put weed on PATH)");
        return;
    }
    let out = Command::new(bin::oncelake())
        .args(["simulate", "--nodes", "3", "--lake", "weed", "--json"])
        .args(["--units", "300", "--workers", "3", "--mode", "coordinated"])
        .args(["--overlap", "0.1", "--chunk", "16"])
        .env_remove("AWS_ENDPOINT_URL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let l: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(l["lake"].as_str().unwrap().contains("SeaweedFS"), "{l}");
    assert_eq!(l["manifest_entries"], 300);
    assert_eq!(l["redundant"], 0);
    assert_eq!(
        (&l["views_identical"], &l["exactly_once"]),
        (&true.into(), &true.into())
    );
}
