//! The two binaries the benchmark tests run: `oncelake-bench` (this package's) and `oncelake`
//! (the CLI member's, whose `serve` the benchmarks through a server drive).
#![allow(dead_code)]

#[path = "../../../tests/bin/mod.rs"]
mod bin;

use std::path::Path;
use std::process::Command;

pub use bin::json_lines;

/// The `oncelake` binary (built on first use, or `$ONCELAKE_BIN`).
pub fn oncelake() -> &'static Path {
    bin::oncelake()
}

/// `oncelake-bench`, for the in-process benchmarks.
pub fn oncelake_bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oncelake-bench"))
}

/// `oncelake-bench` with `ONCELAKE_BIN` pointing at the `oncelake` binary, so that its
/// benchmarks through a server find the server whatever the test's profile.
pub fn oncelake_bench_served() -> Command {
    let mut c = oncelake_bench();
    c.env("ONCELAKE_BIN", oncelake());
    c
}

/// The path of `oncelake-bench` (for the worker processes of seed 001).
pub fn oncelake_bench_path() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_oncelake-bench"))
}

/// Runs `oncelake-bench ARGS --dir SCRATCH` in a new scratch directory: its output, and the
/// directory (to check what the run left in it).
pub fn bench_in_scratch(args: &[&str]) -> (std::process::Output, tempfile::TempDir) {
    let scratch = tempfile::tempdir().unwrap();
    let out = oncelake_bench()
        .args(args)
        .arg("--dir")
        .arg(scratch.path())
        .output()
        .unwrap();
    (out, scratch)
}

/// Fails unless `dir` is empty: the benchmark removed its scratch stores (or started none).
#[track_caller]
pub fn nothing_left_in(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Fails unless `out` is a usage error (exit 2) whose standard error says each of `says`.
#[track_caller]
pub fn usage_error(out: &std::process::Output, says: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(says.iter().all(|s| err.contains(s)), "{err}");
}
