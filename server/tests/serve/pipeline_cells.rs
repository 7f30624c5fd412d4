//! `oncelake pipeline ready`, `complete` and `fail` through `oncelake serve` (SPEC R13, R20):
//! each command runs on a served store and on an in-process twin with the same history, and must
//! print the same and exit with the same code; the cells' states afterwards are checked against
//! a model of what was recorded.

use crate::support;

use std::path::Path;
use support::{cells, json_lines, Server, Twins};

const DEF: &str = "[stage.ingest]\ncode_version = 1\nmax_attempts = 2\n[stage.transform]\ncode_version = 3\nupstream = [\"ingest\"]\n";

/// One completion or failure of a cell through both: `complete` (with `input`) or `fail` (error
/// "timeout"), the token sent (none, a forged one, or a claim's `t1`/`t2`), JSON or human form,
/// and the exit code.
struct Attempt {
    command: &'static str,
    /// (unit, stage)
    cell: (&'static str, &'static str),
    /// (token, JSON or not)
    sent: (Option<&'static str>, bool),
    input: &'static [u8],
    code: i32,
}

const fn complete(
    unit: &'static str,
    stage: &'static str,
    token: Option<&'static str>,
    json: bool,
    input: &'static [u8],
    code: i32,
) -> Attempt {
    let (command, cell, sent) = ("complete", (unit, stage), (token, json));
    Attempt {
        command,
        cell,
        sent,
        input,
        code,
    }
}

const fn fail(unit: &'static str, token: Option<&'static str>, json: bool, code: i32) -> Attempt {
    Attempt {
        command: "fail",
        ..complete(unit, "ingest", token, json, b"", code)
    }
}

/// In order, after day=1 and day=2 were claimed by w1 (tokens t1, t2).
const ATTEMPTS: &[Attempt] = &[
    // Without the token while w1's lease is live: busy (exit 6), nothing recorded.
    complete("orders/day=1", "ingest", None, false, b"out1", 6),
    complete("orders/day=1", "ingest", None, true, b"out1", 6),
    // A token that is not the lease's: fenced (exit 5).
    complete("orders/day=1", "ingest", Some("999"), true, b"out1", 5),
    // The lease's token: committed; again with the same bytes a duplicate (the commit ended the
    // lease); other bytes without a lease conflict.
    complete("orders/day=1", "ingest", Some("t1"), true, b"out1", 0),
    complete("orders/day=1", "ingest", Some("t1"), false, b"out1", 0),
    complete("orders/day=1", "ingest", None, true, b"other", 3),
    // A blocked cell, an unknown stage, a unit without a source version: usage errors (exit 2).
    complete("orders/day=2", "transform", None, false, b"x", 2),
    complete("orders/day=2", "nope", None, false, b"x", 2),
    complete("nobody", "ingest", None, false, b"x", 2),
    // Failures: without the token busy, with a wrong one fenced.
    fail("orders/day=2", None, true, 6),
    fail("orders/day=2", Some("999"), false, 5),
];

/// Runs `attempt` on both, with the claims' tokens, and checks its exit code; its output.
fn attempt(t: &Twins, attempt: &Attempt, tokens: &[(&str, &str)]) -> String {
    let (unit, stage) = attempt.cell;
    let (token, json) = attempt.sent;
    let mut args = vec![unit, stage];
    if attempt.command == "complete" {
        args.push("-");
    } else {
        args.extend(["--error", "timeout"]);
    }
    if let Some(token) = token {
        let token = tokens
            .iter()
            .find(|(name, _)| *name == token)
            .map_or(token, |(_, t)| t);
        args.extend(["--token", token]);
    }
    if json {
        args.push("--json");
    }
    let (code, out) = t.pipeline(attempt.command, &args, attempt.input);
    assert_eq!(code, attempt.code, "{} {args:?}: {out}", attempt.command);
    out
}

/// Sources at three versions: every unit has a ready ingest cell, transform is blocked (the
/// model); then --limit and --claim: day=1 and day=2 claimed by w1, the same tokens both ways.
/// Returns the two tokens.
fn sources_then_two_claimed(t: &Twins) -> (String, String) {
    for (unit, version) in [
        ("orders/day=1", "7"),
        ("orders/day=2", "3"),
        ("orders/day=3", "1"),
    ] {
        t.run(
            &["pipeline", "set-version", "{}", unit, version, "-"],
            b"input",
        );
    }
    assert_eq!(
        t.ready(),
        cells(&[
            ("orders/day=1", "ingest"),
            ("orders/day=2", "ingest"),
            ("orders/day=3", "ingest")
        ])
    );
    let (code, out) = t.pipeline(
        "ready",
        &["--limit", "2", "--claim", "--worker", "w1", "--json"],
        b"",
    );
    assert_eq!(code, 0);
    let claimed = json_lines(&out);
    assert_eq!(claimed.len(), 2, "{out}");
    assert_eq!(claimed[0]["worker"], "w1");
    let token = |i: usize| claimed[i]["token"].as_u64().unwrap().to_string();
    // Claimed cells are not ready any more.
    assert_eq!(t.ready(), cells(&[("orders/day=3", "ingest")]));
    (token(0), token(1))
}

/// The object of day=1's ingest cell is the completed bytes, read through the server; a stage
/// that is not an input of the cell is the engine's refusal, as a bad request.
fn inputs_are_read_through_the_server(served: &Path) {
    let client = oncelake_server::Client::for_store(served).unwrap();
    let cells = client.pipeline_ready(DEF, 10).unwrap();
    let transform = cells.iter().find(|c| c.stage == "transform").unwrap();
    assert_eq!(transform.inputs[0].stage.as_deref(), Some("ingest"));
    assert_eq!(
        client.pipeline_input(transform, Some("ingest")).unwrap(),
        b"out1"
    );
    assert!(matches!(
        client.pipeline_input(transform, None),
        Err(oncelake_server::ClientError::BadRequest { .. })
    ));
}

#[test]
fn ready_complete_and_fail_through_the_server_match_in_process_and_the_model() {
    let t = Twins::new(DEF);
    let _server = Server::start(&t.served);
    let (t1, t2) = sources_then_two_claimed(&t);
    let tokens = [("t1", t1.as_str()), ("t2", t2.as_str())];
    for a in ATTEMPTS {
        attempt(&t, a, &tokens);
    }
    // With the lease's token the failure is recorded.
    let out = attempt(&t, &fail("orders/day=2", Some("t2"), true, 0), &tokens);
    let recorded = &json_lines(&out)[0];
    assert_eq!(
        (recorded["outcome"].as_str(), recorded["attempts"].as_u64()),
        (Some("recorded"), Some(1))
    );
    // The failure ended the lease: a token-less failure is recorded and uses up max_attempts = 2.
    let out = attempt(&t, &fail("orders/day=2", None, false, 0), &tokens);
    assert!(out.contains("no attempts left"), "{out}");
    // The model after all that: day=1 ingest done and its transform ready, day=2 ingest failed,
    // day=3 ingest ready.
    assert_eq!(t.states("orders/day=1"), ["done", "ready"]);
    assert_eq!(t.states("orders/day=2"), ["failed", "blocked"]);
    assert_eq!(t.states("orders/day=3"), ["ready", "blocked"]);
    assert_eq!(
        t.ready(),
        cells(&[("orders/day=1", "transform"), ("orders/day=3", "ingest")])
    );
    inputs_are_read_through_the_server(&t.served);
}
