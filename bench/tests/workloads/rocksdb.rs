//! `oncelake-bench commit --rocksdb PROGRAM`: RocksDB (transactions and plain puts) beside oncelake
//! in the same run, through the peer program `bench/peers/rocks_p1.cc` built against the
//! distribution's librocksdb. Without g++ and librocksdb-dev the run-through test says so and
//! passes, unless `ONCELAKE_REQUIRE_ROCKSDB=1` (`.ci/run` sets it after installing them).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The peer built into `dir`, or why it could not be.
fn build_peer(dir: &Path) -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/rocks_p1.cc");
    let program = dir.join("rocks_p1");
    let out = Command::new("g++")
        .args(["-O2", "-std=c++17"])
        .arg(&source)
        .args(["-lrocksdb", "-lpthread", "-o"])
        .arg(&program)
        .output()
        .map_err(|e| format!("g++: {e}"))?;
    if out.status.success() {
        Ok(program)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn rocksdb_runs_beside_oncelake_in_the_same_run_at_every_thread_count() {
    let tools = tempfile::tempdir().unwrap();
    let program = match build_peer(tools.path()) {
        Ok(p) => p,
        Err(e) if std::env::var_os("ONCELAKE_REQUIRE_ROCKSDB").is_none() => {
            eprintln!("skipped: the RocksDB peer does not build here (install g++ and librocksdb-dev): {e}");
            return;
        }
        Err(e) => panic!("ONCELAKE_REQUIRE_ROCKSDB is set but the peer does not build: {e}"),
    };
    let scratch = tempfile::tempdir().unwrap();
    let out = support::oncelake_bench()
        .args([
            "commit",
            "--threads",
            "1,2",
            "--seconds",
            "1",
            "--preload",
            "2000",
        ])
        .args([
            "--units-per-commit",
            "2",
            "--systems",
            "oncelake",
            "--json",
            "-q",
        ])
        .arg("--rocksdb")
        .arg(&program)
        .arg("--dir")
        .arg(scratch.path())
        .output()
        .unwrap();
    let lines = support::json_lines(&out);
    let row = |system: &str, threads: u64| {
        lines
            .iter()
            .find(|l| l["system"] == system && l["threads"] == threads)
            .unwrap_or_else(|| panic!("no {system} row at {threads} threads: {lines:?}"))
    };
    for threads in [1, 2] {
        let ours = row("oncelake", threads)["units_per_s"].as_f64().unwrap();
        for system in ["rocksdb_txn", "rocksdb_put"] {
            let r = row(system, threads);
            let rate = r["units_per_s"].as_f64().unwrap();
            assert!(rate > 0.0, "{r}");
            assert_eq!(r["units_per_commit"], 2, "{r}");
            assert_eq!(r["preload"], 2000, "{r}");
            assert!(r["p99_us"].as_u64() >= r["p50_us"].as_u64(), "{r}");
            let ratio = r["oncelake_ratio"].as_f64().unwrap();
            assert!((ratio - ours / rate).abs() <= 1e-9 * ratio.max(1.0), "{r}");
        }
    }
    // The peer's databases are removed with the rest of the scratch stores.
    support::nothing_left_in(scratch.path());
}

#[test]
fn a_missing_peer_program_is_refused_with_how_to_build_it_before_anything_runs() {
    let (out, scratch) = support::bench_in_scratch(&[
        "commit",
        "--threads",
        "1",
        "--seconds",
        "1",
        "--preload",
        "100",
        "--systems",
        "oncelake",
        "--rocksdb",
        "/nonexistent/rocks_p1",
    ]);
    support::usage_error(&out, &["bench/peers/rocks_p1.cc", "librocksdb-dev"]);
    support::nothing_left_in(scratch.path());
}
