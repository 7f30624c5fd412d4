//! The script contract of the command line (SPEC R17): arguments, JSON fields, exit codes.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn oncelake(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncelake"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(data) = stdin {
        let _ = input.write_all(data); // the command may exit before it reads its input
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn json_line(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or_else(|| {
        panic!(
            "no output; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn put_get_ls_log_follow_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let out = oncelake(&["init", s(&lake)], None);
    assert_eq!(out.status.code(), Some(0));
    let again = oncelake(&["init", s(&lake)], None);
    assert_eq!(again.status.code(), Some(0), "init is idempotent");
    assert!(String::from_utf8_lossy(&again.stdout).contains("already an oncelake store"));

    let out = oncelake(
        &["put", s(&lake), "orders/d=1", "7", "-", "--json"],
        Some(b"rows v7"),
    );
    assert_eq!(out.status.code(), Some(0));
    let v = json_line(&out);
    assert_eq!(v["unit"], "orders/d=1");
    assert_eq!(v["source_version"], 7);
    assert_eq!(v["outcome"], "committed");
    assert_eq!(v["seq"], 1);
    assert_eq!(v["size"], 7);
    assert_eq!(
        v["object"].as_str().unwrap(),
        blake3::hash(b"rows v7").to_hex().as_str()
    );

    let file = dir.path().join("out.bin");
    std::fs::write(&file, b"rows v7").unwrap();
    let out = oncelake(
        &["put", s(&lake), "orders/d=1", "7", s(&file), "--json"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "a duplicate is success");
    assert_eq!(json_line(&out)["outcome"], "duplicate");
    assert_eq!(json_line(&out)["seq"], 1);

    let out = oncelake(
        &["put", s(&lake), "orders/d=1", "7", "-", "--json"],
        Some(b"different"),
    );
    assert_eq!(out.status.code(), Some(3), "conflict");
    assert_eq!(json_line(&out)["winner_seq"], 1);
    let out = oncelake(&["put", s(&lake), "orders/d=1", "6", "-"], Some(b"older"));
    assert_eq!(out.status.code(), Some(4), "stale");
    assert!(String::from_utf8_lossy(&out.stderr).contains("stale"));

    let out = oncelake(&["put", s(&lake), "orders/d=1", "8", "-"], Some(b"rows v8"));
    assert_eq!(out.status.code(), Some(0));

    let got = dir.path().join("got.bin");
    let out = oncelake(&["get", s(&lake), "orders/d=1", "-o", s(&got)], None);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read(&got).unwrap(), b"rows v8");
    let out = oncelake(&["get", s(&lake), "orders/d=1", "--at", "1"], None);
    assert_eq!(out.stdout, b"rows v7", "time travel");

    let out = oncelake(&["ls", s(&lake), "--prefix", "orders/", "--json"], None);
    let v = json_line(&out);
    assert_eq!(
        (
            v["unit"].as_str(),
            v["source_version"].as_u64(),
            v["seq"].as_u64()
        ),
        (Some("orders/d=1"), Some(8), Some(2))
    );
    let out = oncelake(&["ls", s(&lake), "--at", "1", "--json"], None);
    assert_eq!(json_line(&out)["source_version"], 7);

    let out = oncelake(&["log", s(&lake), "--json"], None);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["kind"], "commit");
    assert_eq!(lines[1]["entries"][0]["source_version"], 8);
    let out = oncelake(&["log", s(&lake), "--since", "1", "--json"], None);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    oncelake(&["init", s(&lake)], None);
    for (args, needle) in [
        (vec!["put", s(&lake), "", "1", "-"], "empty"),
        (
            vec!["put", s(&lake), "u", "notanumber", "-"],
            "invalid value",
        ),
        (
            vec!["put", s(&lake), "u", "1", "/no/such/file"],
            "not a readable file",
        ),
        (vec!["get", s(&lake), "missing-unit"], "has no entry"),
        (vec!["ls", s(dir.path())], "not an oncelake store"),
        (vec!["ls", s(&lake), "--at", "99"], "not readable"),
        (vec!["ls", s(&lake), "--wait", "5 parsecs"], "unknown unit"),
    ] {
        let out = oncelake(&args, Some(b"x"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert_eq!(
        oncelake(&["ls", s(&lake)], None).status.code(),
        Some(0),
        "the store is still fine"
    );
}

#[test]
fn a_locked_store_exits_6_after_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let store = oncelake::Store::open(&lake).unwrap();
    let out = oncelake(&["ls", s(&lake), "--wait", "200ms"], None);
    assert_eq!(out.status.code(), Some(6));
    assert!(String::from_utf8_lossy(&out.stderr).contains("locked by another process"));
    drop(store);
    assert_eq!(
        oncelake(&["ls", s(&lake), "--wait", "0"], None)
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn help_has_examples() {
    let out = oncelake(&["--help"], None);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Examples:") && text.contains("Exit codes"),
        "{text}"
    );
}
