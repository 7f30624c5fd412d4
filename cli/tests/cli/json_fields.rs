//! Every command's `--json` output against the field table of docs/cli.md (SPEC R17): one JSON
//! field name per concept in every command, of the documented type, and the same fields whatever
//! the outcome.

use crate::bin::run;
use crate::kit::{lines, s, text, ETL};

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One field of the table: its JSON type and whether it may be null.
#[derive(Debug)]
struct Field {
    ty: String,
    nullable: bool,
}

/// The field table of docs/cli.md (section "JSON output"), plus the engine's counter names that
/// `stats --json` prints as `uint` fields.
fn field_table() -> BTreeMap<String, Field> {
    let doc = std::fs::read_to_string(Path::new(crate::REPO).join("docs/cli.md")).unwrap();
    let section = doc
        .split("## JSON output")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/cli.md has a section \"JSON output\"");
    let mut table = BTreeMap::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[1].starts_with('`') {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        let (ty, nullable) = match cells[2].strip_suffix('?') {
            Some(t) => (t.to_string(), true),
            None => (cells[2].to_string(), false),
        };
        assert!(
            ["uint", "number", "string", "bool", "array", "object"].contains(&ty.as_str()),
            "docs/cli.md: field {name} has an unknown type {ty}"
        );
        assert!(
            table.insert(name.clone(), Field { ty, nullable }).is_none(),
            "docs/cli.md lists {name} twice"
        );
    }
    assert!(table.len() > 50, "the field table was not found");
    let dir = tempfile::tempdir().unwrap();
    let store = oncelake::Store::open(dir.path().join("lake")).unwrap();
    for (name, _) in store.metrics().counters() {
        table.entry(name.to_string()).or_insert(Field {
            ty: "uint".into(),
            nullable: false,
        });
    }
    table
}

/// Checks every field of `v`, at any depth, against the table; returns the problems.
fn check(v: &Value, table: &BTreeMap<String, Field>, at: &str, problems: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let ctx = format!("{at}.{k}");
                match table.get(k) {
                    None => problems.push(format!("{ctx}: field {k:?} is not in docs/cli.md")),
                    Some(f) => {
                        let ok = match x {
                            Value::Null => f.nullable,
                            Value::Number(n) => match f.ty.as_str() {
                                "uint" => n.is_u64(),
                                "number" => true,
                                _ => false,
                            },
                            Value::String(_) => f.ty == "string",
                            Value::Bool(_) => f.ty == "bool",
                            Value::Array(_) => f.ty == "array",
                            Value::Object(_) => f.ty == "object",
                        };
                        if !ok {
                            problems.push(format!(
                                "{ctx}: {x} is not a {}{}",
                                f.ty,
                                if f.nullable { "?" } else { "" }
                            ));
                        }
                    }
                }
                check(x, table, &ctx, problems);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                check(x, table, &format!("{at}[{i}]"), problems);
            }
        }
        _ => {}
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// One command of the tour: the label its JSON lines are checked under, its arguments, its
/// (split at spaces), standard input and exit code. `{lake}`, `{etl}` and `{listing}` in the arguments are the
/// run's paths, `{NAME}` a token saved by an earlier step; `save` names the token of a step's
/// first line (and `NAME:UNIT` the token of each unit's line).
struct Step {
    label: &'static str,
    args: &'static str,
    stdin: Option<&'static [u8]>,
    code: i32,
    save: Option<&'static str>,
}

const fn step(label: &'static str, args: &'static str, code: i32) -> Step {
    Step {
        label,
        args,
        stdin: None,
        code,
        save: None,
    }
}

const fn with_input(
    label: &'static str,
    args: &'static str,
    stdin: &'static [u8],
    code: i32,
) -> Step {
    Step {
        stdin: Some(stdin),
        ..step(label, args, code)
    }
}

const fn saving(label: &'static str, args: &'static str, code: i32, save: &'static str) -> Step {
    Step {
        save: Some(save),
        ..step(label, args, code)
    }
}

/// Every command with --json, in every outcome it has, in order.
const TOUR: &[Step] = &[
    step("init", "init {lake} --json", 0),
    step("init", "init {lake} --json", 0),
    // put: committed, duplicate, conflict, stale, busy, fenced, committed with a token.
    with_input("put", "put {lake} a/1 1 - --json", b"one", 0),
    with_input("put", "put {lake} a/1 1 - --json", b"one", 0),
    with_input("put", "put {lake} a/1 1 - --json", b"other", 3),
    with_input("put", "put {lake} a/1 0 - --json", b"old", 4),
    saving("claim", "claim {lake} a/2 5 --worker w1 --json", 0, "token"),
    step("claim", "claim {lake} a/2 5 --worker w2 --json", 6),
    with_input("put", "put {lake} a/2 5 - --json", b"two", 6),
    with_input("put", "put {lake} a/2 5 - --token 999 --json", b"two", 5),
    with_input(
        "put",
        "put {lake} a/2 5 - --token {token} --json",
        b"two",
        0,
    ),
    with_input("put", "put {lake} a/1 1 - --correct --json", b"fixed", 0),
    step("claim", "claim {lake} a/2 5 --worker w2 --json", 0),
    // release: not the holder, released, then the same token again (fenced).
    saving("claim", "claim {lake} c/1 1 --worker w1 --json", 0, "t"),
    step(
        "release",
        "release {lake} c/1 --worker w9 --token {t} --json",
        5,
    ),
    step(
        "release",
        "release {lake} c/1 --worker w1 --token {t} --json",
        0,
    ),
    step(
        "release",
        "release {lake} c/1 --worker w1 --token {t} --json",
        5,
    ),
    // pipeline: set-version (committed, duplicate, stale), ready, claim, complete, fail, explain.
    with_input(
        "set-version",
        "pipeline set-version {lake} u/1 3 - --json",
        b"in",
        0,
    ),
    with_input(
        "set-version",
        "pipeline set-version {lake} u/1 3 - --json",
        b"in",
        0,
    ),
    with_input(
        "set-version",
        "pipeline set-version {lake} u/1 2 - --json",
        b"in",
        4,
    ),
    step("set-version", "pipeline set-version {lake} u/2 1 --json", 0),
    step(
        "status",
        "pipeline status {lake} --pipeline {etl} --json",
        0,
    ),
    step("ready", "pipeline ready {lake} --pipeline {etl} --json", 0),
    saving(
        "ready",
        "pipeline ready {lake} --pipeline {etl} --claim --worker w1 --json",
        0,
        "cell",
    ),
    with_input(
        "complete",
        "pipeline complete {lake} --pipeline {etl} u/1 ingest - --json",
        b"x",
        6,
    ),
    with_input(
        "complete",
        "pipeline complete {lake} --pipeline {etl} u/1 ingest - --token 999 --json",
        b"x",
        5,
    ),
    with_input(
        "complete",
        "pipeline complete {lake} --pipeline {etl} u/1 ingest - --token {cell:u/1} --json",
        b"x",
        0,
    ),
    with_input(
        "complete",
        "pipeline complete {lake} --pipeline {etl} u/1 ingest - --token {cell:u/1} --json",
        b"x",
        0,
    ),
    step(
        "fail",
        "pipeline fail {lake} --pipeline {etl} u/2 ingest --error boom --json",
        6,
    ),
    step(
        "fail",
        "pipeline fail {lake} --pipeline {etl} u/2 ingest --error boom --token 999 --json",
        5,
    ),
    step(
        "fail",
        "pipeline fail {lake} --pipeline {etl} u/2 ingest --error boom --token {cell:u/2} --json",
        0,
    ),
    step(
        "explain",
        "pipeline explain {lake} --pipeline {etl} u/1 --json",
        0,
    ),
    step(
        "explain",
        "pipeline explain {lake} --pipeline {etl} u/2 --json",
        0,
    ),
    // The same input at a newer version: the done cells of u/1 are cut off (SPEC R24).
    with_input(
        "set-version",
        "pipeline set-version {lake} u/1 4 - --json",
        b"in",
        0,
    ),
    step(
        "explain",
        "pipeline explain {lake} --pipeline {etl} u/1 --json",
        0,
    ),
    // Reads, maintenance, tables.
    step("ls", "ls {lake} --json", 0),
    step("ls", "ls {lake} --all --json", 0),
    step("log", "log {lake} --json", 0),
    step("reconcile", "reconcile {lake} --source {listing} --json", 0),
    step(
        "reconcile-summary",
        "reconcile {lake} --source {listing} --changes-only --json",
        0,
    ),
    step("verify", "verify {lake} --deep --json", 0),
    step("gc", "gc {lake} --dry-run --json", 0),
    step("gc", "gc {lake} --json", 0),
    step("stats", "stats {lake} --json", 0),
    step(
        "table",
        "table create {lake} sales --prefix sales/ --json",
        0,
    ),
    step("table", "table publish {lake} sales --json", 0),
    step("table", "table ls {lake} --json", 0),
    step(
        "simulate",
        "simulate --units 200 --workers 2 --mode both --json",
        0,
    ),
    step("simulate", "simulate --pipeline --units 300 --json", 0),
];

/// Runs the tour in a new directory: the JSON lines of every step, by label.
fn run_the_tour() -> BTreeMap<String, Vec<Value>> {
    let dir = tempfile::tempdir().unwrap();
    let etl = dir.path().join("etl.toml");
    std::fs::write(&etl, ETL).unwrap();
    let listing = dir.path().join("listing.csv");
    std::fs::write(&listing, "a/1,1\na/2,5\nz/9,1\n").unwrap();
    let mut vars: BTreeMap<String, String> = BTreeMap::from([
        ("lake".into(), s(&dir.path().join("lake")).to_string()),
        ("etl".into(), s(&etl).to_string()),
        ("listing".into(), s(&listing).to_string()),
    ]);
    let mut by_label: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (i, step) in TOUR.iter().enumerate() {
        let args: Vec<String> = step
            .args
            .split_whitespace()
            .map(
                |a| match a.strip_prefix('{').and_then(|a| a.strip_suffix('}')) {
                    Some(name) => vars
                        .get(name)
                        .unwrap_or_else(|| panic!("step {i}: nothing saved as {name}"))
                        .clone(),
                    None => a.to_string(),
                },
            )
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args, step.stdin);
        assert_eq!(
            out.status.code(),
            Some(step.code),
            "step {i} {args:?}: {}",
            text(&out.stderr)
        );
        let ls = lines(&out);
        assert!(!ls.is_empty(), "step {i} {args:?} printed no JSON");
        if let Some(name) = step.save {
            let token = |v: &Value| v["token"].as_u64().map(|t| t.to_string());
            if let Some(t) = token(&ls[0]) {
                vars.insert(name.to_string(), t);
            }
            for v in &ls {
                if let (Some(unit), Some(t)) = (v["unit"].as_str(), token(v)) {
                    vars.insert(format!("{name}:{unit}"), t);
                }
            }
        }
        by_label.entry(step.label.into()).or_default().extend(ls);
    }
    by_label
}

/// Every command with --json, in every outcome it has: every field is in the table of
/// docs/cli.md with its type, and the lines of one command have the same fields whatever the
/// outcome. (Fails on the old code: `log` said `time_ms`, `put`'s fields varied by outcome.)
#[test]
fn every_json_output_uses_one_name_per_concept_and_the_same_fields_per_command() {
    let table = field_table();
    let by_label = run_the_tour();
    // The log holds every kind of record.
    let kinds: BTreeSet<String> = by_label["log"]
        .iter()
        .map(|v| v["kind"].as_str().unwrap().to_string())
        .collect();
    for k in ["commit", "claim_granted", "claim_released", "extension"] {
        assert!(kinds.contains(k), "the log lacks a {k} record: {kinds:?}");
    }
    let mut problems = Vec::new();
    for (label, vs) in &by_label {
        for v in vs {
            check(v, &table, label, &mut problems);
        }
    }
    // The same fields whatever the outcome (the table and ls listings mix record kinds only
    // within one command; reconcile ends with its summary line).
    for label in [
        "put",
        "claim",
        "release",
        "set-version",
        "complete",
        "fail",
        "explain",
        "ready",
        "log",
        "ls",
        "init",
    ] {
        let vs = &by_label[label];
        let first = keys(&vs[0]);
        for v in vs {
            if keys(v) != first {
                problems.push(format!(
                    "{label}: fields differ by outcome: {:?} vs {:?}",
                    first,
                    keys(v)
                ));
            }
        }
    }
    let outcomes: BTreeSet<&str> = by_label["put"]
        .iter()
        .map(|v| v["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        BTreeSet::from([
            "busy",
            "committed",
            "conflict",
            "duplicate",
            "fenced",
            "stale"
        ]),
        "every outcome of put was exercised"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
