//! The script contract of the command line (SPEC R17): arguments, JSON fields, exit codes.

use crate::bin;
use crate::bin::run as oncelake;
use crate::kit::{json_line, new_store, s};

use std::path::Path;
use std::process::{Command, Output, Stdio};

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
            "no such file",
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
    // The holder is named (this test process, which recorded itself), and the fix.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("locked by pid {} (`", std::process::id()))
            && err.contains("`oncelake serve"),
        "{err}"
    );
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

/// Runs the binary with standard output a pipe whose read end is already closed, as
/// `oncelake ... | head -0` does by the time the command writes.
fn oncelake_into_closed_pipe(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    // Quiet means no error here: a progress line (a slow run on a loaded machine) is not one.
    bin::run_into(args, stdin, Stdio::from(writer), &QUIET)
}

/// A progress interval no run of these tests reaches.
const QUIET: [(&str, &str); 1] = [("ONCELAKE_PROGRESS_INTERVAL", "1h")];

/// Every command writing into a closed standard output ends quietly (no panic, nothing on
/// stderr) with the exit code of what it did; a put's commit stands.
#[test]
fn a_closed_stdout_ends_every_command_quietly_with_the_code_of_what_it_did() {
    let (dir, lake) = new_store();
    let l = s(&lake);
    for i in 0..30 {
        let unit = format!("u/{i}");
        let out = oncelake(&["put", l, &unit, "1", "-"], Some(unit.as_bytes()));
        assert_eq!(out.status.code(), Some(0));
    }
    let listing = dir.path().join("listing.csv");
    std::fs::write(&listing, "u/0,1\nu/1,2\n").unwrap();
    let sim_store = dir.path().join("sim");
    /// Arguments, standard input, expected exit code.
    type Case<'a> = (Vec<&'a str>, Option<&'a [u8]>, i32);
    let cases: Vec<Case> = vec![
        (vec!["ls", l], None, 0),
        (vec!["ls", l, "--json"], None, 0),
        (vec!["log", l], None, 0),
        (vec!["log", l, "--json"], None, 0),
        (vec!["get", l, "u/3"], None, 0),
        (vec!["stats", l], None, 0),
        (vec!["stats", l, "--json"], None, 0),
        (vec!["stats", l, "--prometheus"], None, 0),
        (vec!["verify", l], None, 0),
        (vec!["verify", l, "--deep", "--json"], None, 0),
        (vec!["gc", l, "--dry-run"], None, 0),
        (vec!["gc", l, "--json"], None, 0),
        (vec!["reconcile", l, "--source", s(&listing)], None, 0),
        (
            vec!["claim", l, "c/1", "1", "--worker", "w", "--json"],
            None,
            0,
        ),
        (vec!["put", l, "new/1", "1", "-", "--json"], Some(b"new"), 0),
        (vec!["put", l, "new/2", "1", "-"], Some(b"new 2"), 0),
        (vec!["put", l, "new/1", "1", "-", "--json"], Some(b"new"), 0),
        (
            vec!["put", l, "new/1", "1", "-", "--json"],
            Some(b"other"),
            3,
        ),
        (vec!["put", l, "new/1", "0", "-", "--json"], Some(b"old"), 4),
        (vec!["--help"], None, 0),
        // The lake-table commands print through the same writer as the rest (they once used
        // `println!`, which panics on a closed pipe).
        (
            vec!["table", "create", l, "sales", "--prefix", "sales/"],
            None,
            0,
        ),
        (vec!["table", "ls", l], None, 0),
        (vec!["table", "ls", l, "--json"], None, 0),
        (vec!["table", "publish", l], None, 0),
        (
            vec![
                "simulate",
                "--units",
                "50",
                "--workers",
                "2",
                "--json",
                "--store",
                s(&sim_store),
            ],
            None,
            0,
        ),
    ];
    for (args, input, code) in cases {
        let out = oncelake_into_closed_pipe(&args, input);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        // (A publish that finds nothing to publish says why, on standard error.)
        if code == 0 && !err.starts_with("table sales: nothing to publish") {
            assert!(err.is_empty(), "{args:?} is not quiet: {err}");
        }
    }
    // The commits made with a closed stdout stand.
    let ls = oncelake(&["ls", l, "--prefix", "new/", "--json"], None);
    let units: Vec<String> = String::from_utf8_lossy(&ls.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["unit"].to_string())
        .collect();
    assert_eq!(units, ["\"new/1\"", "\"new/2\""]);
}

/// Runs the binary with standard output `/dev/full`: every write fails with "no space left".
fn oncelake_into_full_disk(args: &[&str]) -> Output {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    bin::run_into(args, None, Stdio::from(full), &QUIET)
}

/// Output that cannot be written (a full disk behind `> file`), unlike a closed pipe, is a
/// failure: exit 1 with an `io` error, never exit 0 with the output lost, never a panic.
#[test]
fn a_failing_stdout_is_an_io_failure_in_every_command() {
    if !Path::new("/dev/full").exists() {
        return;
    }
    let (dir, lake) = new_store();
    let l = s(&lake);
    let out = oncelake(&["put", l, "u/1", "1", "-"], Some(b"one"));
    assert_eq!(out.status.code(), Some(0));
    let listing = dir.path().join("listing.csv");
    std::fs::write(&listing, "u/1,2\nu/2,1\n").unwrap();
    let src = s(&listing);
    let cases: Vec<Vec<&str>> = vec![
        vec!["ls", l],
        vec!["log", l, "--json"],
        vec!["stats", l],
        // The plan is buffered; a failure at its flush once exited 0 with the plan lost.
        vec!["reconcile", l, "--source", src],
        vec!["reconcile", l, "--source", src, "--json"],
        vec!["reconcile", l, "--source", src, "--changes-only"],
        vec!["table", "create", l, "sales", "--prefix", "sales/"],
        vec!["table", "ls", l],
        vec!["table", "publish", l],
    ];
    for args in cases {
        let out = oncelake_into_full_disk(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("No space left"), "{args:?}: {err}");
        // Only a put has a commit to speak of.
        assert!(!err.contains("committed"), "{args:?}: {err}");
    }
    let out = oncelake_into_full_disk(&["put", l, "u/2", "1", "-"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("stays committed"), "{err}");
}

/// Durations beyond what any flag means (and beyond what `Duration` holds) are usage errors.
#[test]
fn out_of_range_durations_are_usage_errors_not_panics() {
    let (_dir, lake) = new_store();
    let l = s(&lake);
    let huge = "99999999999999999999999";
    let huge_days = "99999999999999999999d";
    for args in [
        vec!["--wait", huge, "ls", l],
        vec!["ls", l, "--wait", huge_days],
        vec!["gc", l, "--grace", huge_days],
        vec!["gc", l, "--retain", huge],
        vec!["claim", l, "u", "1", "--worker", "w", "--ttl", huge_days],
        vec!["gc", l, "--grace", "36501d"],
    ] {
        let out = oncelake(&args, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("too long"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // The longest accepted duration works.
    let out = oncelake(&["gc", l, "--grace", "36500d", "--dry-run"], None);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// An input the command refuses is refused before the store is opened: the store's files stay
/// byte-identical.
#[test]
fn refused_inputs_leave_the_store_files_byte_identical() {
    let (dir, lake) = new_store();
    let l = s(&lake);
    for i in 0..5 {
        let out = oncelake(&["put", l, &format!("u/{i}"), "1", "-"], Some(b"rows"));
        assert_eq!(out.status.code(), Some(0));
    }
    let before = crate::common::files(&lake);
    let a_dir = dir.path().join("a-directory");
    std::fs::create_dir(&a_dir).unwrap();
    let missing = dir.path().join("missing");
    let into_missing_dir = dir.path().join("no-such-dir").join("out");
    let huge = "99999999999999999999d";
    for (args, needle) in [
        (vec!["put", l, "u/9", "1", s(&missing)], "no such file"),
        (vec!["put", l, "u/9", "1", s(&a_dir)], "a directory"),
        (vec!["put", l, "u/9", "1", "/dev/null"], "device"),
        (vec!["put", l, "u/9", "1", "-", "--wait", huge], "too long"),
        (vec!["get", l, "u/1", "-o", s(&a_dir)], "a directory"),
        (
            vec!["get", l, "u/1", "-o", s(&into_missing_dir)],
            "does not exist",
        ),
        (
            vec!["reconcile", l, "--source", s(&missing)],
            "no such file",
        ),
        (vec!["reconcile", l, "--source", s(&a_dir)], "a directory"),
    ] {
        let out = oncelake(&args, Some(b"ignored"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(
            crate::common::files(&lake) == before,
            "{args:?} changed the store's files"
        );
    }
}

/// A pipe is a valid input (`put STORE UNIT V <(producer)` in a shell).
#[cfg(unix)]
#[test]
fn put_reads_a_named_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return; // no mkfifo on this system
    }
    oncelake(&["init", s(&lake)], None);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, b"from a pipe"))
    };
    let out = oncelake(&["put", s(&lake), "p/1", "1", s(&fifo), "--json"], None);
    writer.join().unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json_line(&out)["size"], 11);
}
