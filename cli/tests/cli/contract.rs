//! The uniform command-line contract of docs/cli.md (SPEC R17): one field one meaning across
//! commands, errors as JSON objects under --json with stable kinds, one exit code per failure,
//! dates in human output, progress on a non-terminal, internal units protected and hidden, and no
//! store nested in another. The field table itself is checked in `json_fields.rs`.

use crate::bin;
use crate::bin::{run, run_env};
use crate::kit::{exits_saying, lines, new_store, pipeline, s, store_files, text, ETL};

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs one command, checks its exit code, and returns its first JSON line.
#[track_caller]
fn one(args: &[&str], stdin: Option<&[u8]>, code: i32) -> Value {
    let out = run(args, stdin);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {}",
        text(&out.stderr)
    );
    lines(&out).remove(0)
}

/// put, ls and log agree on the entry; returns what put said.
fn put_ls_and_log_agree_on_the_entry(l: &str) -> Value {
    let put = one(&["put", l, "a/1", "8", "-", "--json"], Some(b"eight"), 0);
    let ls = one(&["ls", l, "--json"], None, 0);
    let log = one(&["log", l, "--json"], None, 0);
    let logged = &log["entries"][0];
    for f in [
        "unit",
        "source_version",
        "revision",
        "object",
        "size",
        "crc32",
    ] {
        assert_eq!(put[f], ls[f], "put vs ls: {f}");
        assert_eq!(put[f], logged[f], "put vs log: {f}");
    }
    assert_eq!(put["seq"], ls["seq"]);
    assert_eq!(put["seq"], log["seq"]);
    assert_eq!(ls["committed_at_ms"], log["committed_at_ms"]);

    put
}

/// claim: source_version is the version claimed, current_version the store's; a stale put says
/// the same of the same versions.
fn claim_and_put_say_the_same_of_the_versions(l: &str, put: &Value) {
    let done = one(
        &["claim", l, "a/1", "7", "--worker", "w", "--json"],
        None,
        0,
    );
    assert_eq!(done["outcome"], "already_done");
    assert_eq!(done["source_version"], 7, "{done}");
    assert_eq!(done["current_version"], 8, "{done}");
    assert_eq!(done["seq"], put["seq"], "{done}");
    let stale = one(&["put", l, "a/1", "7", "-", "--json"], Some(b"seven"), 4);
    assert_eq!(
        (&stale["source_version"], &stale["current_version"]),
        (&done["source_version"], &done["current_version"]),
        "claim and put say the same of the same versions"
    );
}

/// A granted claim has no current version; its record's end is the claim's, a release record
/// has none.
fn a_release_record_has_no_end_time(l: &str) {
    let granted = one(
        &["claim", l, "a/2", "1", "--worker", "w", "--json"],
        None,
        0,
    );
    assert_eq!(granted["current_version"], Value::Null, "{granted}");
    let t = granted["token"].to_string();
    one(
        &[
            "release", l, "a/2", "--worker", "w", "--token", &t, "--json",
        ],
        None,
        0,
    );
    let log = lines(&run(&["log", l, "--json"], None));
    let claim_rec = log.iter().find(|r| r["kind"] == "claim_granted").unwrap();
    let release_rec = log.iter().find(|r| r["kind"] == "claim_released").unwrap();
    assert_eq!(claim_rec["expires_at_ms"], granted["expires_at_ms"]);
    assert_eq!(release_rec["expires_at_ms"], Value::Null, "{release_rec}");
}

/// Pipeline cells: the same cell and source_version whichever command shows them.
fn a_cell_is_the_same_in_every_command(l: &str, p: &str) {
    one(
        &["pipeline", "set-version", l, "u/1", "3", "-", "--json"],
        Some(b"in"),
        0,
    );
    let explain = |unit: &str| -> BTreeMap<String, Value> {
        lines(&run(
            &["pipeline", "explain", l, "--pipeline", p, unit, "--json"],
            None,
        ))
        .into_iter()
        .map(|v| (v["stage"].as_str().unwrap().to_string(), v))
        .collect()
    };
    let cells = explain("u/1");
    assert_eq!(cells["ingest"]["state"], "ready");
    assert_eq!(cells["transform"]["state"], "blocked");
    for c in cells.values() {
        assert_eq!(c["source_version"], 3, "{c}");
    }
    let ready = one(
        &pipeline("ready", l, p, &["--claim", "--worker", "w1", "--json"]),
        None,
        0,
    );
    let running = &explain("u/1")["ingest"];
    assert_eq!(running["state"], "running");
    for f in ["cell", "source_version", "token", "worker", "expires_at_ms"] {
        assert_eq!(running[f], ready[f], "ready vs explain: {f}");
    }
    let token = ready["token"].to_string();
    let complete = one(
        &pipeline(
            "complete",
            l,
            p,
            &["u/1", "ingest", "-", "--token", &token, "--json"],
        ),
        Some(b"out"),
        0,
    );
    assert_eq!(complete["cell"], ready["cell"]);
    assert_eq!(complete["source_version"], ready["source_version"]);
    let transform = &explain("u/1")["transform"];
    assert_eq!(transform["state"], "ready");
    let fail = one(
        &pipeline(
            "fail",
            l,
            p,
            &["u/1", "transform", "--error", "boom", "--json"],
        ),
        None,
        0,
    );
    assert_eq!(fail["cell"], transform["cell"], "{fail}");
    assert_eq!(fail["source_version"], 3, "{fail}");
    assert_eq!(explain("u/1")["transform"]["attempts"], fail["attempts"]);
}

/// One field means one thing in every command, with the same value for the same fact: a put's
/// entry is the entry `ls` and `log` show; `source_version` is the version asked about and
/// `current_version` the store's (a claim of an older version than the one committed once
/// reported the committed version as its `source_version`); a pipeline cell has the same `cell`
/// and `source_version` in `ready`, `explain`, `complete` and `fail` (`explain` once left
/// `source_version` null for running and ready cells, `fail` had neither); a release record has
/// no end time (it once said `expires_at_ms: 0`, 1970).
#[test]
fn one_field_has_one_meaning_and_value_across_commands() {
    let (dir, lake) = new_store();
    let l = s(&lake);
    let etl = dir.path().join("etl.toml");
    std::fs::write(&etl, ETL).unwrap();
    let put = put_ls_and_log_agree_on_the_entry(l);
    claim_and_put_say_the_same_of_the_versions(l, &put);
    a_release_record_has_no_end_time(l);
    a_cell_is_the_same_in_every_command(l, s(&etl));
}

/// A failure of `args`: in human form an `error` line with exit `code`; under --json nothing on
/// stdout and one JSON object on stderr with the `kind`, the exit code and a message for people.
fn fails_alike_in_both_forms(args: &[&str], kind: &str, code: i32) {
    let args = args.to_vec();
    // Human form first: a plain `error:` line, the same exit code.
    exits_saying(&run(&args, Some(b"x")), code, "error", &args);
    let mut jargs = args.clone();
    jargs.push("--json");
    let out = run(&jargs, Some(b"x"));
    assert_eq!(
        out.status.code(),
        Some(code),
        "{jargs:?}: {}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "{jargs:?}: {}", text(&out.stdout));
    let err = text(&out.stderr);
    let v: Value = serde_json::from_str(err.trim())
        .unwrap_or_else(|e| panic!("{jargs:?}: stderr is not one JSON object ({e}): {err}"));
    assert_eq!(v["error"], kind, "{jargs:?}: {v}");
    assert_eq!(v["exit_code"], code, "{jargs:?}: {v}");
    assert!(
        v["message"].as_str().is_some_and(|m| m.len() > 10),
        "{jargs:?}: {v}"
    );
    if kind == "seq_out_of_range" {
        assert!(message_says_what_to_do(&v), "{jargs:?}: {v}");
    }
    // The message is the text for people, without clap's decoration (the kind is `error`).
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        !message.starts_with("error:") && !message.contains("For more information"),
        "{jargs:?}: {v}"
    );
}

/// Errors under --json are one JSON object on standard error with a stable kind and the exit
/// code; the same failure has the same exit code in every command (a missing put input, pipeline
/// file and listing are all bad input, exit 2; the pipeline file was exit 1 before).
#[test]
fn errors_under_json_are_json_objects_with_stable_kinds_and_one_exit_code_per_failure() {
    let (dir, lake) = new_store();
    let l = s(&lake);
    let missing = dir.path().join("missing.file");
    let m = s(&missing);
    let nostore = dir.path().join("nostore");
    let inner = lake.join("inner");
    let a_dir = dir.path().join("a-dir");
    std::fs::create_dir(&a_dir).unwrap();
    let d = s(&a_dir);
    let cases: Vec<(Vec<&str>, &str, i32)> = vec![
        (vec!["put", l, "u", "1", m], "bad_input", 2),
        (
            vec!["pipeline", "status", l, "--pipeline", m],
            "bad_input",
            2,
        ),
        (
            vec!["pipeline", "ready", l, "--pipeline", m],
            "bad_input",
            2,
        ),
        (
            vec!["pipeline", "set-version", l, "u", "1", m],
            "bad_input",
            2,
        ),
        (vec!["reconcile", l, "--source", m], "bad_input", 2),
        // A directory is bad input wherever an input file is named (a listing once exited 1).
        (vec!["put", l, "u", "1", d], "bad_input", 2),
        (vec!["reconcile", l, "--source", d], "bad_input", 2),
        (
            vec!["reconcile", l, "--source", d, "--changes-only"],
            "bad_input",
            2,
        ),
        (
            vec!["pipeline", "set-version", l, "u", "1", d],
            "bad_input",
            2,
        ),
        (vec!["ls", s(&nostore)], "not_a_store", 2),
        (vec!["put", l, "bad\u{1}key", "1", "-"], "invalid_key", 2),
        (
            vec!["put", l, ".pipeline/source/u", "1", "-"],
            "invalid_key",
            2,
        ),
        (vec!["ls", l, "--at", "99"], "seq_out_of_range", 2),
        (vec!["get", l, "u", "--at", "99"], "seq_out_of_range", 2),
        (vec!["gc", l, "--grace", "5parsecs"], "usage", 2),
        (vec!["put", l, "u", "notanumber", "-"], "usage", 2),
        (vec!["frobnicate"], "usage", 2),
        (vec!["get", l, "no/such/unit"], "not_found", 2),
        (vec!["init", s(&inner)], "nested_store", 2),
        // The benchmarks moved to `oncelake-bench`: the old commands say so (see below).
        (vec!["bench", "commit", "--threads", "64"], "usage", 2),
        (vec!["table", "bench", d, "--changes", "10"], "usage", 2),
    ];
    for (args, kind, code) in cases {
        fails_alike_in_both_forms(&args, kind, code);
    }
    // A locked store: exit 6, kind locked.
    let store = oncelake::Store::open(&lake).unwrap();
    let out = run(&["ls", l, "--wait", "0", "--json"], None);
    assert_eq!(out.status.code(), Some(6));
    let v: Value = serde_json::from_str(text(&out.stderr).trim()).unwrap();
    assert_eq!(v["error"], "locked", "{v}");
    drop(store);
}

/// `oncelake bench ...` (and `table bench`) runs nothing and names the `oncelake-bench` command
/// with the same arguments; no scratch store is left behind.
#[test]
fn the_benchmarks_moved_to_oncelake_bench_and_the_old_commands_say_where() {
    let dir = tempfile::tempdir().unwrap();
    let d = s(dir.path());
    let cases: [(&[&str], &str); 3] = [
        (
            &["bench", "commit", "--threads", "64", "--dir", d],
            "`oncelake-bench commit --threads 64 --dir ",
        ),
        (&["bench"], "`oncelake-bench --help`"),
        (
            &["table", "bench", d, "--versions", "3"],
            "`oncelake-bench table ",
        ),
    ];
    for (args, names) in cases {
        let out = run(args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = text(&out.stderr);
        assert!(err.contains(names), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// `2026-11-30T08:15:00.123Z`-shaped dates.
fn dates_in(s: &str) -> Vec<String> {
    s.as_bytes()
        .windows(24)
        .filter(|w| {
            w.iter().enumerate().all(|(j, &c)| match j {
                4 | 7 => c == b'-',
                10 => c == b'T',
                13 | 16 => c == b':',
                19 => c == b'.',
                23 => c == b'Z',
                _ => c.is_ascii_digit(),
            })
        })
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

/// Human output shows times as RFC 3339 dates (UTC), never epoch milliseconds; JSON keeps the
/// milliseconds. (Fails on the old code: `ls` and `log` showed no time, `claim` "until N ms".)
#[test]
fn human_output_shows_times_as_dates() {
    let (dir, lake) = new_store();
    let l = s(&lake);
    assert_eq!(
        run(&["put", l, "a", "1", "-"], Some(b"x")).status.code(),
        Some(0)
    );
    let claim = run(
        &["claim", l, "b", "1", "--worker", "w1", "--ttl", "1h"],
        None,
    );
    let claim_text = text(&claim.stdout);
    let held = run(&["claim", l, "b", "1", "--worker", "w2"], None);
    let busy = run(&["put", l, "b", "1", "-"], Some(b"y"));
    let ls = text(&run(&["ls", l], None).stdout);
    let log = text(&run(&["log", l], None).stdout);
    let entry = &lines(&run(&["ls", l, "--json"], None))[0];
    let ms = entry["committed_at_ms"].as_u64().unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(ms <= now_ms && now_ms - ms < 3_600_000, "{ms}");
    let ls_dates = dates_in(&ls);
    assert_eq!(ls_dates.len(), 1, "{ls}");
    assert!(dates_in(&log).len() >= 2, "{log}");
    assert!(!ls.contains(&ms.to_string()), "{ls}");
    // A running pipeline cell's lease end, in `pipeline explain`.
    let etl = dir.path().join("etl.toml");
    std::fs::write(&etl, ETL).unwrap();
    let p = s(&etl);
    run(&["pipeline", "set-version", l, "u", "1"], None);
    let claimed = run(
        &pipeline("ready", l, p, &["--claim", "--worker", "w1"]),
        None,
    );
    let explain = run(&["pipeline", "explain", l, "--pipeline", p, "u"], None);
    let explain_text = text(&explain.stdout);
    assert!(explain_text.contains("running by w1"), "{explain_text}");
    for (what, out) in [
        ("explain", explain_text),
        ("ready --claim", text(&claimed.stdout)),
        ("claim", claim_text),
        ("held", text(&held.stderr)),
        ("busy", text(&busy.stderr)),
        ("log", log),
    ] {
        assert!(!dates_in(&out).is_empty(), "{what}: {out}");
        assert!(!out.contains(" ms"), "{what} shows milliseconds: {out}");
        let digits13 = out
            .split(|c: char| !c.is_ascii_digit())
            .any(|w| w.len() >= 13);
        assert!(!digits13, "{what} shows an epoch number: {out}");
    }
}

/// On a non-terminal standard error, long work prints plain progress lines (here every update:
/// ONCELAKE_PROGRESS_INTERVAL=0), large puts included; --quiet prints none. (Fails on the old
/// code: progress only on a terminal, none for put.)
#[test]
fn progress_is_a_plain_periodic_line_when_stderr_is_not_a_terminal() {
    let (dir, lake) = new_store();
    let l = s(&lake);
    let big = vec![7u8; 4 << 20];
    let every = [("ONCELAKE_PROGRESS_INTERVAL", "0")];
    let put = run_env(&["put", l, "big", "1", "-"], Some(&big), &every);
    assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));
    let err = text(&put.stderr);
    assert!(
        err.contains("oncelake put: ") && err.contains("bytes read"),
        "{err}"
    );
    let file = dir.path().join("big.bin");
    std::fs::write(&file, &big).unwrap();
    let put = run_env(&["put", l, "big2", "1", s(&file)], None, &every);
    let err = text(&put.stderr);
    assert!(
        err.contains(&format!("/{} bytes read", big.len())),
        "a file's size is the total: {err}"
    );
    for args in [vec!["verify", l], vec!["gc", l, "--dry-run"]] {
        let out = run_env(&args, None, &every);
        assert_eq!(out.status.code(), Some(0));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("oncelake {}: ", args[0])),
            "{args:?}: {err}"
        );
    }
    let quiet = run_env(&["put", l, "big3", "1", "-", "--quiet"], Some(&big), &every);
    assert_eq!(quiet.status.code(), Some(0));
    assert!(quiet.stderr.is_empty(), "{}", text(&quiet.stderr));
    // The default period: a short put prints nothing.
    let short = run(&["put", l, "small", "1", "-"], Some(b"x"));
    assert!(short.stderr.is_empty(), "{}", text(&short.stderr));
}

/// No internal unit can be written through the CLI (put, a correction, a pipeline's source),
/// and a refused write changes no file.
fn the_cli_writes_no_internal_unit(lake: &Path) {
    let l = s(lake);
    let before = store_files(lake);
    for key in [
        ".pipeline/source/orders/1",
        ".pipeline/cell/ingest/orders/1/1-0123456789abcdef",
        ".pipeline/definition",
    ] {
        for extra in [&[][..], &["--correct"][..]] {
            let args = [&["put", l, key, "9", "-"][..], extra].concat();
            let out = run(&args, Some(b"forged"));
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            assert!(
                text(&out.stderr).contains("reserved for the pipeline engine")
                    && text(&out.stderr).contains("oncelake pipeline set-version"),
                "{}",
                text(&out.stderr)
            );
        }
    }
    // Nor can a pipeline's unit be one of them (it once became `.pipeline/source/.pipeline/...`).
    let out = run(
        &[
            "pipeline",
            "set-version",
            l,
            ".pipeline/source/x",
            "1",
            "--json",
        ],
        None,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let v: Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(v["error"], "invalid_key", "{v}");
    assert!(
        !err.contains("with the CLI"),
        "a hint for put, not here: {err}"
    );
    assert_eq!(store_files(lake), before, "a refused write changes no file");
}

/// ls: only the user's unit; --all and a .pipeline/ prefix show the internal ones.
fn ls_hides_internal_units_unless_asked(l: &str) {
    let units = |args: &[&str]| -> Vec<String> {
        lines(&run(args, None))
            .iter()
            .map(|v| v["unit"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(units(&["ls", l, "--json"]), ["orders/1"]);
    let all = units(&["ls", l, "--all", "--json"]);
    assert_eq!(all, [".pipeline/source/orders/1", "orders/1"]);
    assert_eq!(
        units(&["ls", l, "--prefix", ".pipeline/", "--json"]),
        [".pipeline/source/orders/1"]
    );
    assert!(!text(&run(&["ls", l], None).stdout).contains(".pipeline"));
}

/// reconcile: a source lists user units, so the internal ones are neither "unknown to the
/// source" (full form) nor nameable in a listing.
fn reconcile_neither_plans_nor_takes_internal_units(dir: &Path, l: &str) {
    let listing = dir.join("listing.csv");
    std::fs::write(&listing, "orders/9,1\n").unwrap();
    let plan = lines(&run(
        &["reconcile", l, "--source", s(&listing), "--json"],
        None,
    ));
    let planned: Vec<&str> = plan.iter().filter_map(|v| v["unit"].as_str()).collect();
    assert_eq!(planned, ["orders/1", "orders/9"], "{plan:?}");
    assert_eq!(plan.last().unwrap()["summary"]["unknown"], 1, "{plan:?}");
    for changes_only in [false, true] {
        let args = [
            &["reconcile", l, "--source", "-", "--json"][..],
            if changes_only {
                &["--changes-only"][..]
            } else {
                &[][..]
            },
        ]
        .concat();
        let out = run(&args, Some(b".pipeline/source/orders/1,3\n"));
        exits_saying(&out, 2, "reserved", &args);
        assert!(out.stdout.is_empty(), "{args:?}: no plan line");
    }
}

/// The library's boundary: a user batch is refused whole, the pipeline engine writes.
fn the_library_refuses_a_user_batch_with_an_internal_unit(lake: &Path) {
    let store = oncelake::Store::open(lake).unwrap();
    let staged = store.stage_bytes(b"forged").unwrap();
    let e = store
        .commit(oncelake::Batch::new().put("fine", 1, &staged).put(
            ".pipeline/source/x",
            1,
            &staged,
        ))
        .unwrap_err();
    assert!(matches!(e, oncelake::Error::InvalidKey { .. }), "{e}");
    assert!(store.put(".pipeline/definition", 1, b"x").is_err());
    assert!(
        store.get("fine").unwrap().is_none(),
        "nothing of the refused batch was committed"
    );
    let u = oncelake::pipeline::set_source_version(&store, "orders/2", 1, b"in").unwrap();
    assert_eq!(u.outcome.name(), "committed");
    assert_eq!(
        store
            .get(".pipeline/source/orders/2")
            .unwrap()
            .map(|e| e.source_version),
        Some(1)
    );
}

/// A user cannot write an internal unit (`.pipeline/...`), by the CLI or the library, while the
/// pipeline engine still can; `ls` hides internal units unless asked. (Fails on the old code: the
/// put was committed and `ls` listed the pipeline's units.)
#[test]
fn internal_units_are_protected_from_user_writes_and_hidden_from_ls() {
    let (dir, lake) = new_store();
    let l = s(&lake);
    let ok = run(
        &["pipeline", "set-version", l, "orders/1", "3", "-"],
        Some(b"in"),
    );
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    assert_eq!(
        run(&["put", l, "orders/1", "1", "-"], Some(b"out"))
            .status
            .code(),
        Some(0)
    );
    the_cli_writes_no_internal_unit(&lake);
    ls_hides_internal_units_unless_asked(l);
    reconcile_neither_plans_nor_takes_internal_units(dir.path(), l);
    the_library_refuses_a_user_batch_with_an_internal_unit(&lake);
}

/// The library's own entry points hold the same rule as a batch: `put`/`correct` refuse an internal
/// key before staging anything (no unreferenced object left behind), and `claim`/`claim_many`
/// refuse a lease on one (it would block the pipeline engine's cell). The pipeline engine still
/// claims its cells. (Fails on the old code: the refused put left an object, the claims were
/// granted.)
#[test]
fn the_library_refuses_internal_units_before_writing_anything() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let store = oncelake::Store::open(dir.path().join("lake")).unwrap();
    let ttl = Duration::from_secs(60);
    for key in [
        ".pipeline/definition",
        ".pipeline/cell/s/u/1-0123456789abcdef",
    ] {
        let e = store.put(key, 1, b"forged").unwrap_err();
        assert!(matches!(e, oncelake::Error::InvalidKey { .. }), "{e}");
        let e = store.correct(key, 1, b"forged").unwrap_err();
        assert!(matches!(e, oncelake::Error::InvalidKey { .. }), "{e}");
        let e = store.claim(key, 1, "w", ttl).unwrap_err();
        assert!(matches!(e, oncelake::Error::InvalidKey { .. }), "{e}");
        let e = store
            .claim_many(&[("ok", 1), (key, 1)], "w", ttl)
            .unwrap_err();
        assert!(matches!(e, oncelake::Error::InvalidKey { .. }), "{e}");
    }
    assert!(store.lookup("ok").unwrap().is_none());
    let gc = store
        .gc(oncelake::GcOptions {
            dry_run: true,
            grace: Duration::ZERO,
            retain: Duration::ZERO,
        })
        .unwrap();
    assert_eq!(
        (gc.objects, gc.staging_files),
        (0, 0),
        "a refused write staged nothing"
    );
    assert_eq!(store.snapshot().unwrap().seq(), 0, "nothing was logged");
    // A user key is claimed as before.
    assert!(matches!(
        store.claim("ok", 1, "w", ttl).unwrap(),
        oncelake::ClaimOutcome::Granted { .. }
    ));
}

/// `init` refuses to create a store inside another one, and writes nothing; an existing store and
/// a sibling directory are fine. (Fails on the old code: the inner store was created.)
#[test]
fn init_refuses_to_nest_a_store_inside_another() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    assert_eq!(run(&["init", s(&lake)], None).status.code(), Some(0));
    let before = store_files(&lake);
    for inner in [
        lake.join("inner"),
        lake.join("objects").join("deep").join("er"),
        lake.join("staging"),
    ] {
        let out = run(&["init", s(&inner)], None);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.contains("inside the oncelake store") && err.contains("outside"),
            "{err}"
        );
        assert!(!inner.join(oncelake::MARKER_FILE).exists());
    }
    assert!(!lake.join("inner").exists(), "nothing was created");
    assert_eq!(store_files(&lake), before);
    // Relative paths are resolved too.
    let out = Command::new(bin::oncelake())
        .args(["init", "sub/lake2"])
        .current_dir(&lake)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!lake.join("sub").exists());
    // The library refuses it the same way.
    let e = oncelake::Store::open(lake.join("x")).unwrap_err();
    assert!(matches!(e, oncelake::Error::NestedStore { .. }), "{e}");
    // The store itself and a sibling still open / create.
    assert_eq!(run(&["init", s(&lake)], None).status.code(), Some(0));
    assert_eq!(
        run(&["init", s(&dir.path().join("lake2"))], None)
            .status
            .code(),
        Some(0)
    );
}

/// A named pipe is an input like a file for every command that takes one (`put`, reconcile's
/// listing, `pipeline set-version`); a listing from a pipe is read once (a second reader once
/// took rows from the first, and an unsorted piped listing failed) and sorted like standard input.
#[test]
fn every_input_file_may_be_a_named_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let l = s(&lake);
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|st| st.success()) {
        return; // no mkfifo on this system
    }
    run(&["init", l], None);
    let through_fifo = |data: Vec<u8>, args: &[&str]| -> Output {
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::write(fifo, data))
        };
        let out = run(args, None);
        if !writer.is_finished() {
            unblock_writer(&fifo);
        }
        let _ = writer.join().unwrap(); // the command's output says whether it read the pipe
        out
    };
    let f = s(&fifo);
    let out = through_fifo(
        b"in".to_vec(),
        &["pipeline", "set-version", l, "p/1", "1", f, "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(lines(&out)[0]["outcome"], "committed");
    // Large enough that the pipe is read in many pieces, out of order, with units in the store.
    for i in [3, 7] {
        let unit = format!("u/{i:05}");
        assert_eq!(
            run(&["put", l, &unit, "1", "-"], Some(b"x")).status.code(),
            Some(0)
        );
    }
    let mut rows: Vec<String> = (0..20_000).map(|i| format!("u/{i:05},1\n")).collect();
    rows.reverse();
    let listing = rows.concat().into_bytes();
    for form in [&[][..], &["--changes-only"][..]] {
        let args = [&["reconcile", l, "--source", f, "--json"][..], form].concat();
        let out = through_fifo(listing.clone(), &args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let plan = lines(&out);
        let summary = &plan.last().unwrap()["summary"];
        assert_eq!(summary["listed"], 20_000, "{args:?}: {summary}");
        assert_eq!(summary["missing"], 19_998, "{args:?}: {summary}");
        assert_eq!(summary["up_to_date"], 2, "{args:?}: {summary}");
    }
}

/// Lets the writer of `fifo` finish when the command under test never read the pipe to its end
/// (a refusal): opens the read end without blocking and drains it until no writer is left.
fn unblock_writer(fifo: &Path) {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    const O_NONBLOCK: i32 = 0o4000; // Linux
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(fifo)
    else {
        return;
    };
    let mut buf = vec![0u8; 1 << 16];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        match f.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(1))
            }
            Err(_) => return,
        }
    }
}

/// An `--at` error says how to find a readable seq.
fn message_says_what_to_do(v: &Value) -> bool {
    v["message"]
        .as_str()
        .is_some_and(|m| m.contains("--at") && m.contains("oncelake log"))
}

/// A second process that finds the store's lock held says once, on standard error, for whom it
/// waits (the holder's pid and command line, from the `LOCK` file), and on giving up names the
/// holder and the fix in the CLI's words (`oncelake serve`, `--wait`), never the Rust API's
/// `Options::lock_wait`; exit 6, `locked` under --json; nothing under --quiet. (The wait was once
/// silent and the message named `Options::lock_wait`.)
#[test]
fn a_waiting_command_names_the_locks_holder_and_the_fix() {
    let (_dir, lake) = new_store();
    let l = s(&lake);
    // The holder: a put that holds the store while it reads its standard input, kept open.
    let mut holder = Command::new(bin::oncelake())
        .args(["put", l, "held/unit", "1", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let recorded = format!("pid {}\n", holder.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(lake.join("LOCK"))
        .unwrap_or_default()
        .starts_with(&recorded)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the holder recorded itself"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let waiting = format!(
        "waiting for the store's lock, held by pid {} (`oncelake put {l} held/unit 1 -`)",
        holder.id()
    );
    let every_update = [("ONCELAKE_PROGRESS_INTERVAL", "0")];
    let out = run_env(
        &["put", l, "other/unit", "1", "-", "--wait", "1500ms"],
        Some(b"x"),
        &every_update,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{err}");
    assert_eq!(err.matches(&waiting).count(), 1, "said once: {err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: ")
            && last.contains(&format!("pid {}", holder.id()))
            && last.contains(&format!("`oncelake serve {l}`"))
            && last.contains("--wait 1500ms"),
        "{err}"
    );
    assert!(!err.contains("Options::"), "{err}");
    // --json: the kind; --quiet: no waiting line.
    let out = run_env(
        &[
            "put",
            l,
            "other/unit",
            "1",
            "-",
            "--wait",
            "1s",
            "--json",
            "-q",
        ],
        Some(b"x"),
        &every_update,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{err}");
    assert!(!err.contains("waiting"), "{err}");
    let v: Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(v["error"], "locked");
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains(&format!("pid {}", holder.id())));
    // The holder finishes; the record goes with it; the store is free.
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    assert_eq!(std::fs::read_to_string(lake.join("LOCK")).unwrap(), "");
    let out = run(
        &["put", l, "other/unit", "1", "-", "--wait", "0"],
        Some(b"x"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// What a newcomer meets in the tour reads right: a publish with nothing to publish says why;
/// "1 new version, 1 file added"; `get -o` says what it wrote (not under --json or --quiet); a
/// unit with no entry is `not_found`; the `stats` values are in one column; `simulate` ends with
/// whether exactly-once held, with the numbers, and never says "seed".
#[test]
fn the_tours_output_reads_right() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let l = s(&lake);
    let parquet = Path::new(crate::REPO).join("examples/sales.parquet");
    assert_eq!(run(&["init", l], None).status.code(), Some(0));
    let ok = |args: &[&str]| {
        let out = run(args, None);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        (text(&out.stdout), text(&out.stderr))
    };
    ok(&["table", "create", l, "sales", "--prefix", "sales/"]);
    for json in [false, true] {
        let mut args = vec!["table", "publish", l, "sales"];
        if json {
            args.push("--json");
        }
        let (_, err) = ok(&args);
        assert!(
            err.contains("nothing to publish — no units under its prefix \"sales/\" yet")
                && err.contains(&format!(
                    "`oncelake put {l} sales/date=2026-11-29 1 part.parquet`"
                )),
            "{err}"
        );
    }
    ok(&["put", l, "sales/date=2026-11-29", "1", s(&parquet)]);
    let (out, err) = ok(&["table", "publish", l, "sales"]);
    assert!(
        out.starts_with("sales: 1 new version, 1 file added, 0 removed; at version 0"),
        "{out}"
    );
    assert!(err.is_empty(), "{err}");

    let file = dir.path().join("day.parquet");
    let (_, err) = ok(&["get", l, "sales/date=2026-11-29", "-o", s(&file)]);
    assert_eq!(
        err,
        format!(
            "wrote 519 bytes of sales/date=2026-11-29@1 (seq 1) to {}\n",
            file.display()
        )
    );
    for quiet in ["--json", "-q"] {
        let (_, err) = ok(&["get", l, "sales/date=2026-11-29", "-o", s(&file), quiet]);
        assert!(err.is_empty(), "{quiet}: {err}");
    }
    let out = run(&["get", l, "no/such", "--json"], None);
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(v["error"], "not_found");

    // Every counter's value starts in one column (`pipeline_cells_invalidated` did not).
    let (out, _) = ok(&["stats", l]);
    let columns: BTreeSet<usize> = out
        .lines()
        .filter(|line| line.starts_with("  ") && !line.contains(" count "))
        .map(|line| line.rfind(' ').unwrap())
        .collect();
    assert_eq!(columns.len(), 1, "{out}");

    let (out, _) = ok(&["simulate", "--units", "300", "--workers", "3", "-q"]);
    assert_eq!(
        out.lines().last().unwrap(),
        "exactly-once held: 300 units, 300 entries, 0 written twice (every mode)",
        "{out}"
    );
    assert!(!out.to_lowercase().contains("seed"), "{out}");
    assert!(
        out.contains("rebalancing") && out.contains("check-then-act"),
        "{out}"
    );
}
