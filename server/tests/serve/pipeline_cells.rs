//! `oncelake pipeline ready`, `complete` and `fail` through `oncelake serve` (SPEC R13, R20):
//! each command runs on a served store and on an in-process twin with the same history, and must
//! print the same and exit with the same code; the cells' states afterwards are checked against
//! a model of what was recorded.

use crate::support;

use serde_json::Value;
use std::path::Path;
use support::{new_store, Server};

const DEF: &str = "[stage.ingest]\ncode_version = 1\nmax_attempts = 2\n[stage.transform]\ncode_version = 3\nupstream = [\"ingest\"]\n";

/// Runs `args` (`{}` is the store) on both stores; the served answer, after checking it equals
/// the in-process one. Times that depend on when each ran (`expires_at_ms`, and the dates in
/// human output) are masked.
fn twins(served: &Path, local: &Path, args: &[&str], stdin: &[u8]) -> (i32, String) {
    let run = |store: &Path| {
        let a: Vec<String> = args
            .iter()
            .map(|a| a.replace("{}", store.to_str().unwrap()))
            .collect();
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, out) = support::run_with_input(&a, stdin);
        (code, mask(&out.replace(store.to_str().unwrap(), "STORE")))
    };
    let through = run(served);
    let in_process = run(local);
    assert_eq!(
        through, in_process,
        "{args:?}: through the server vs in-process"
    );
    through
}

fn mask(out: &str) -> String {
    out.lines()
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(mut m)) => {
                if m.get("expires_at_ms").is_some_and(|v| !v.is_null()) {
                    m.insert("expires_at_ms".into(), "T".into());
                }
                Value::Object(m).to_string()
            }
            _ => match l.find(" until ") {
                Some(i) => format!("{} until T", &l[..i]),
                None => l.to_string(),
            },
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn ready_complete_and_fail_through_the_server_match_in_process_and_the_model() {
    let (dir, served) = new_store();
    let (_dir_b, local) = new_store();
    let def_path = dir.path().join("etl.toml");
    std::fs::write(&def_path, DEF).unwrap();
    let def = def_path.to_str().unwrap();
    let _server = Server::start(&served);
    for (unit, version) in [
        ("orders/day=1", "7"),
        ("orders/day=2", "3"),
        ("orders/day=3", "1"),
    ] {
        twins(
            &served,
            &local,
            &["pipeline", "set-version", "{}", unit, version, "-"],
            b"input",
        );
    }
    let ready = |json: bool| {
        let mut a = vec!["pipeline", "ready", "{}", "--pipeline", def];
        if json {
            a.push("--json");
        }
        a
    };
    twins(&served, &local, &ready(false), b"");
    let (code, out) = twins(&served, &local, &ready(true), b"");
    assert_eq!(code, 0);
    let cells: Vec<(String, String)> = json_lines(&out)
        .iter()
        .map(|v| {
            (
                v["unit"].as_str().unwrap().into(),
                v["stage"].as_str().unwrap().into(),
            )
        })
        .collect();
    // Model: every unit with a source version has a ready ingest cell, transform is blocked.
    let model: Vec<(String, String)> = ["orders/day=1", "orders/day=2", "orders/day=3"]
        .iter()
        .map(|u| (u.to_string(), "ingest".to_string()))
        .collect();
    assert_eq!(cells, model);
    // --limit and --claim: day=1 and day=2 claimed by w1, the same tokens both ways.
    let (code, out) = twins(
        &served,
        &local,
        &[
            "pipeline",
            "ready",
            "{}",
            "--pipeline",
            def,
            "--limit",
            "2",
            "--claim",
            "--worker",
            "w1",
            "--json",
        ],
        b"",
    );
    assert_eq!(code, 0);
    let claimed = json_lines(&out);
    assert_eq!(claimed.len(), 2, "{out}");
    let token = |i: usize| claimed[i]["token"].as_u64().unwrap().to_string();
    let (t1, t2) = (token(0), token(1));
    assert_eq!(claimed[0]["worker"], "w1");
    // Claimed cells are not ready any more.
    let (_, out) = twins(&served, &local, &ready(true), b"");
    assert_eq!(json_lines(&out).len(), 1, "{out}");
    let complete = |unit: &'static str, stage: &'static str, token: Option<&str>, json: bool| {
        let mut a = vec![
            "pipeline",
            "complete",
            "{}",
            "--pipeline",
            def,
            unit,
            stage,
            "-",
        ];
        if let Some(t) = token {
            a.extend(["--token", t]);
        }
        if json {
            a.push("--json");
        }
        a.into_iter().map(String::from).collect::<Vec<String>>()
    };
    let fail = |unit: &'static str, token: Option<&str>, json: bool| {
        let mut a = vec![
            "pipeline",
            "fail",
            "{}",
            "--pipeline",
            def,
            unit,
            "ingest",
            "--error",
            "timeout",
        ];
        if let Some(t) = token {
            a.extend(["--token", t]);
        }
        if json {
            a.push("--json");
        }
        a.into_iter().map(String::from).collect::<Vec<String>>()
    };
    let go = |args: Vec<String>, stdin: &[u8]| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        twins(&served, &local, &a, stdin)
    };
    // Without the token while w1's lease is live: busy (exit 6), nothing recorded.
    assert_eq!(
        go(complete("orders/day=1", "ingest", None, false), b"out1").0,
        6
    );
    assert_eq!(
        go(complete("orders/day=1", "ingest", None, true), b"out1").0,
        6
    );
    // A token that is not the lease's: fenced (exit 5).
    assert_eq!(
        go(
            complete("orders/day=1", "ingest", Some("999"), true),
            b"out1"
        )
        .0,
        5
    );
    // The lease's token: committed; again with the same bytes a duplicate (the commit ended the
    // lease); other bytes without a lease conflict.
    assert_eq!(
        go(complete("orders/day=1", "ingest", Some(&t1), true), b"out1").0,
        0
    );
    assert_eq!(
        go(
            complete("orders/day=1", "ingest", Some(&t1), false),
            b"out1"
        )
        .0,
        0
    );
    assert_eq!(
        go(complete("orders/day=1", "ingest", None, true), b"other").0,
        3
    );
    // A blocked cell, an unknown stage, a unit without a source version: usage errors (exit 2).
    assert_eq!(
        go(complete("orders/day=2", "transform", None, false), b"x").0,
        2
    );
    assert_eq!(go(complete("orders/day=2", "nope", None, false), b"x").0, 2);
    assert_eq!(go(complete("nobody", "ingest", None, false), b"x").0, 2);
    // Failures: without the token busy, with a wrong one fenced, with the lease's recorded.
    assert_eq!(go(fail("orders/day=2", None, true), b"").0, 6);
    assert_eq!(go(fail("orders/day=2", Some("999"), false), b"").0, 5);
    let (code, out) = go(fail("orders/day=2", Some(&t2), true), b"");
    assert_eq!(code, 0);
    assert_eq!(
        (
            json_lines(&out)[0]["outcome"].as_str(),
            json_lines(&out)[0]["attempts"].as_u64()
        ),
        (Some("recorded"), Some(1))
    );
    // The failure ended the lease: a token-less failure is recorded and uses up max_attempts = 2.
    let (code, out) = go(fail("orders/day=2", None, false), b"");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no attempts left"), "{out}");
    // The model after all that: day=1 ingest done and its transform ready, day=2 ingest failed,
    // day=3 ingest ready.
    let explain = |unit: &str| {
        let (code, out) = twins(
            &served,
            &local,
            &[
                "pipeline",
                "explain",
                "{}",
                "--pipeline",
                def,
                unit,
                "--json",
            ],
            b"",
        );
        assert_eq!(code, 0);
        json_lines(&out)
            .iter()
            .map(|v| v["state"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(explain("orders/day=1"), ["done", "ready"]);
    assert_eq!(explain("orders/day=2"), ["failed", "blocked"]);
    assert_eq!(explain("orders/day=3"), ["ready", "blocked"]);
    let (_, out) = twins(&served, &local, &ready(true), b"");
    let now: Vec<(String, String)> = json_lines(&out)
        .iter()
        .map(|v| {
            (
                v["unit"].as_str().unwrap().into(),
                v["stage"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        now,
        [
            ("orders/day=1".to_string(), "transform".to_string()),
            ("orders/day=3".to_string(), "ingest".to_string())
        ]
    );
    // The object of day=1's ingest cell is the completed bytes, read through the server.
    let client = oncelake_server::Client::for_store(&served).unwrap();
    let cells = client.pipeline_ready(DEF, 10).unwrap();
    let transform = cells.iter().find(|c| c.stage == "transform").unwrap();
    assert_eq!(transform.inputs[0].stage.as_deref(), Some("ingest"));
    assert_eq!(
        client.pipeline_input(transform, Some("ingest")).unwrap(),
        b"out1"
    );
    // A stage that is not an input of the cell: the engine's refusal, as a bad request.
    assert!(matches!(
        client.pipeline_input(transform, None),
        Err(oncelake_server::ClientError::BadRequest { .. })
    ));
}
