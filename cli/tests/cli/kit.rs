//! What the CLI tests share: paths as arguments, output as text and JSON lines, the pipeline
//! definition they run, and the files of a store.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A path as a command-line argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The JSON lines of standard output, each parsed (a line that is not JSON fails the test).
pub fn lines(out: &Output) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("not a JSON line ({e}): {l}\nstderr: {}", text(&out.stderr))
            })
        })
        .collect()
}

/// The first line of standard output, parsed as JSON (none, or not JSON, fails the test).
pub fn json_line(out: &Output) -> Value {
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no output; stderr: {}", text(&out.stderr)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// Fails unless `out` (of the command `args`) exited with `code` and its standard error says
/// `says`.
#[track_caller]
pub fn exits_saying(out: &Output, code: i32, says: &str, args: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

/// A store made by `oncelake init` in a new directory (which must outlive it), and its path.
pub fn new_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let out = crate::bin::run(&["init", s(&lake)], None);
    assert_eq!(out.status.code(), Some(0), "init: {}", text(&out.stderr));
    (dir, lake)
}

/// The arguments `pipeline COMMAND LAKE --pipeline DEF REST...`.
pub fn pipeline<'a>(
    command: &'a str,
    lake: &'a str,
    def: &'a str,
    rest: &[&'a str],
) -> Vec<&'a str> {
    [&["pipeline", command, lake, "--pipeline", def][..], rest].concat()
}

/// A two-stage pipeline (ingest -> transform, two attempts) the tests run cells of.
pub const ETL: &str = "[stage.ingest]\ncode_version = 1\n[stage.transform]\ncode_version = 3\nupstream = [\"ingest\"]\nmax_attempts = 2\n";

/// Every file of a store but its lock, by its path relative to the store, with its bytes.
pub fn store_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = crate::common::files(dir);
    files.retain(|p, _| p.file_name().is_some_and(|n| n != "LOCK"));
    files
}
