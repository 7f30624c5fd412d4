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

/// Every command with --json, in every outcome it has, in order, a step a line: the label its
/// JSON lines are checked under | its exit code | its standard input (`-`: none) | the name its
/// tokens are saved under (`-`: none) | its arguments. In the arguments `{lake}`, `{etl}` and
/// `{listing}` are the run's paths and `{NAME}` a token an earlier step saved: a step saving as
/// NAME saves its first line's token as NAME and each unit's token as `NAME:UNIT`. `#` lines are
/// comments.
const TOUR: &str = "
init | 0 | - | - | init {lake} --json
init | 0 | - | - | init {lake} --json
# put: committed, duplicate, conflict, stale, busy, fenced, committed with a token.
put | 0 | one | - | put {lake} a/1 1 - --json
put | 0 | one | - | put {lake} a/1 1 - --json
put | 3 | other | - | put {lake} a/1 1 - --json
put | 4 | old | - | put {lake} a/1 0 - --json
claim | 0 | - | token | claim {lake} a/2 5 --worker w1 --json
claim | 6 | - | - | claim {lake} a/2 5 --worker w2 --json
put | 6 | two | - | put {lake} a/2 5 - --json
put | 5 | two | - | put {lake} a/2 5 - --token 999 --json
put | 0 | two | - | put {lake} a/2 5 - --token {token} --json
put | 0 | fixed | - | put {lake} a/1 1 - --correct --json
claim | 0 | - | - | claim {lake} a/2 5 --worker w2 --json
# release: not the holder, released, then the same token again (fenced).
claim | 0 | - | t | claim {lake} c/1 1 --worker w1 --json
release | 5 | - | - | release {lake} c/1 --worker w9 --token {t} --json
release | 0 | - | - | release {lake} c/1 --worker w1 --token {t} --json
release | 5 | - | - | release {lake} c/1 --worker w1 --token {t} --json
# pipeline: set-version (committed, duplicate, stale), ready, claim, complete, fail, explain.
set-version | 0 | in | - | pipeline set-version {lake} u/1 3 - --json
set-version | 0 | in | - | pipeline set-version {lake} u/1 3 - --json
set-version | 4 | in | - | pipeline set-version {lake} u/1 2 - --json
set-version | 0 | - | - | pipeline set-version {lake} u/2 1 --json
status | 0 | - | - | pipeline status {lake} --pipeline {etl} --json
ready | 0 | - | - | pipeline ready {lake} --pipeline {etl} --json
ready | 0 | - | cell | pipeline ready {lake} --pipeline {etl} --claim --worker w1 --json
complete | 6 | x | - | pipeline complete {lake} --pipeline {etl} u/1 ingest - --json
complete | 5 | x | - | pipeline complete {lake} --pipeline {etl} u/1 ingest - --token 999 --json
complete | 0 | x | - | pipeline complete {lake} --pipeline {etl} u/1 ingest - --token {cell:u/1} --json
complete | 0 | x | - | pipeline complete {lake} --pipeline {etl} u/1 ingest - --token {cell:u/1} --json
fail | 6 | - | - | pipeline fail {lake} --pipeline {etl} u/2 ingest --error boom --json
fail | 5 | - | - | pipeline fail {lake} --pipeline {etl} u/2 ingest --error boom --token 999 --json
fail | 0 | - | - | pipeline fail {lake} --pipeline {etl} u/2 ingest --error boom --token {cell:u/2} --json
explain | 0 | - | - | pipeline explain {lake} --pipeline {etl} u/1 --json
explain | 0 | - | - | pipeline explain {lake} --pipeline {etl} u/2 --json
# The same input at a newer version: the done cells of u/1 are cut off (SPEC R24).
set-version | 0 | in | - | pipeline set-version {lake} u/1 4 - --json
explain | 0 | - | - | pipeline explain {lake} --pipeline {etl} u/1 --json
# Reads, maintenance, tables.
ls | 0 | - | - | ls {lake} --json
ls | 0 | - | - | ls {lake} --all --json
log | 0 | - | - | log {lake} --json
reconcile | 0 | - | - | reconcile {lake} --source {listing} --json
reconcile-summary | 0 | - | - | reconcile {lake} --source {listing} --changes-only --json
verify | 0 | - | - | verify {lake} --deep --json
gc | 0 | - | - | gc {lake} --dry-run --json
gc | 0 | - | - | gc {lake} --json
stats | 0 | - | - | stats {lake} --json
table | 0 | - | - | table create {lake} sales --prefix sales/ --json
table | 0 | - | - | table publish {lake} sales --json
table | 0 | - | - | table ls {lake} --json
simulate | 0 | - | - | simulate --units 200 --workers 2 --mode both --json
simulate | 0 | - | - | simulate --pipeline --units 300 --json
";

/// One step of [`TOUR`].
struct Step<'a> {
    label: &'a str,
    code: i32,
    stdin: Option<&'a [u8]>,
    save: Option<&'a str>,
    args: &'a str,
}

/// The steps of [`TOUR`], in order.
fn tour() -> Vec<Step<'static>> {
    TOUR.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, " | ").collect();
            assert_eq!(f.len(), 5, "a tour line has five fields: {l}");
            let given = |x: &'static str| (x != "-").then_some(x);
            Step {
                label: f[0],
                code: f[1].parse().unwrap_or_else(|_| panic!("exit code of {l}")),
                stdin: given(f[2]).map(str::as_bytes),
                save: given(f[3]),
                args: f[4],
            }
        })
        .collect()
}

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
    for (i, step) in tour().iter().enumerate() {
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
