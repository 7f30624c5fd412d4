//! Every store command of SPEC R17's table on the nodes of a shared lake (SPEC R23), driven only
//! through the `oncelake` binary: one script of steps spread over two nodes of one `file://`
//! lake, each answer checked against a model of what the lake must hold, and against what the
//! same script answers on one local store (both "nodes" of the local run are that store).
//!
//! Normalized before the lake and local answers are compared: times (`committed_at_ms`,
//! `expires_at_ms`, the date in `explain`'s `why`), the directories and URLs (`store`, `path`,
//! `lake`), the table's `app_id` (it holds the store id), error `message`s (they name paths),
//! and in `stats` the per-process counters the answer itself lists in `process_only`, `groups`
//! (how many groups a run took is not an answer) and the refusal counters (see
//! [`NODE_LOCAL_COUNTERS`]).

use crate::bin::run as oncelake;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// Counters of refusals that changed nothing (duplicates, conflicts, stale, fenced, busy, held):
/// a lake node logs no segment for them, so another node sees them only once the node that
/// answered wins its next segment (docs/lake.md, "Refusal counters arrive late"; modelled in
/// `tests/lake/counters.rs`); when, depends on the script's order, not on the answers.
const NODE_LOCAL_COUNTERS: &[&str] = &[
    "duplicates_collapsed",
    "conflicts",
    "stale_rejections",
    "fenced_rejections",
    "busy_rejections",
    "claims_held",
    "claims_already_done",
];

/// GC's count of a node's own orphaned objects.
const ORPHANS: &[&str] = &["objects", "object_bytes"];

/// Keys whose values differ between runs by nature, never by the answer.
const VOLATILE: &[&str] = &[
    "committed_at_ms",
    "expires_at_ms",
    "store",
    "path",
    "lake",
    "app_id",
    "message",
    "groups",
];

/// How a step's answer is compared between the lake and the local store.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Cmp {
    /// Every stdout line as JSON (normalized), and a `--json` error's kind.
    Json,
    /// Stdout byte for byte.
    Bytes,
}

/// One command of the script: on node 0 or 1, its arguments (`{S}` is the node, `{D}` the
/// scratch directory), its input, the exit code it must have, and what a success commits.
struct Step {
    node: usize,
    args: String,
    stdin: Option<Vec<u8>>,
    code: i32,
    cmp: Cmp,
    /// A commit the model gains when the step succeeds: (unit, version, bytes).
    commits: Option<(String, u64, Vec<u8>)>,
    /// Wait this long first (a lease's TTL running out).
    sleep_ms: u64,
    /// Fields left out of this step's comparison with the local store (never of the model's).
    node_local: &'static [&'static str],
}

/// The script, one step a line (its syntax is at its top).
const SCRIPT: &str = include_str!("lake_script.txt");

/// The script's steps; it runs every store command (a script read as nothing would pass every
/// comparison).
fn script() -> Vec<Step> {
    let steps: Vec<Step> = SCRIPT
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(parse_step)
        .collect();
    let commands = "put get ls log claim release reconcile pipeline table gc verify stats sync";
    for command in commands.split(' ') {
        assert!(
            steps
                .iter()
                .any(|st| st.args.starts_with(&format!("{command} "))),
            "the script runs no `{command}`"
        );
    }
    steps
}

/// One line of the script: `NODE EXIT ARGS`, then its options after ` | `.
fn parse_step(line: &str) -> Step {
    let (command, options) = line.split_once(" | ").unwrap_or((line, ""));
    let bad = |what: &str| -> ! { panic!("script line {line:?}: {what}") };
    let mut fields = command.splitn(3, ' ');
    let mut field = |what: &str| fields.next().unwrap_or_else(|| bad(what));
    let node = field("no node").parse().unwrap_or_else(|_| bad("bad node"));
    let code = field("no exit code")
        .parse()
        .unwrap_or_else(|_| bad("bad exit code"));
    let mut st = Step {
        node,
        args: field("no arguments").replace("\\u{1}", "\u{1}"),
        stdin: None,
        code,
        cmp: Cmp::Json,
        commits: None,
        sleep_ms: 0,
        node_local: &[],
    };
    for option in options.split(';').map(str::trim).filter(|o| !o.is_empty()) {
        let (key, value) = option.split_once(' ').unwrap_or((option, ""));
        match key {
            "stdin" => st.stdin = Some(value.as_bytes().to_vec()),
            "commits" => {
                let mut v = value.splitn(3, ' ');
                let (unit, version, bytes) = (v.next(), v.next(), v.next());
                let version = version.and_then(|n| n.parse().ok());
                let (Some(unit), Some(version), Some(bytes)) = (unit, version, bytes) else {
                    bad("commits takes UNIT VERSION TEXT")
                };
                st.commits = Some((unit.into(), version, bytes.as_bytes().to_vec()));
            }
            "bytes" => st.cmp = Cmp::Bytes,
            "after_ms" => st.sleep_ms = value.parse().unwrap_or_else(|_| bad("bad after_ms")),
            "orphans" => st.node_local = ORPHANS,
            _ => bad("unknown option"),
        }
    }
    st
}

/// The scratch files the script reads.
fn scratch(dir: &Path) {
    let files: [(&str, &[u8]); 6] = [
        ("rows.bin", b"rows"),
        ("other.bin", b"other"),
        ("input.csv", b"a,b\n"),
        ("listing.csv", b"orders/day=1,8\norders/day=2,2\norders/day=9,1\njobs/a,1\n"),
        (
            "etl.toml",
            b"[stage.ingest]\ncode_version = 1\n[stage.transform]\ncode_version = 3\nupstream = [\"ingest\"]\n",
        ),
        ("missing.csv.not", b""),
    ];
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    std::fs::copy(
        Path::new(crate::REPO).join("examples/sales.parquet"),
        dir.join("sales.parquet"),
    )
    .unwrap();
}

/// What one step answered, normalized.
#[derive(Debug, PartialEq)]
struct Answer {
    code: Option<i32>,
    stdout: Vec<Value>,
    raw: Vec<u8>,
    error: Option<Value>,
}

fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let process_only: Vec<String> = m
                .get("process_only")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            if !process_only.is_empty() {
                for k in process_only
                    .iter()
                    .map(String::as_str)
                    .chain(NODE_LOCAL_COUNTERS.iter().copied())
                {
                    m.remove(k);
                }
            }
            for k in VOLATILE {
                m.remove(*k);
            }
            if let Some(Value::String(why)) = m.get_mut("why") {
                if let Some(i) = why.find(" until ") {
                    why.truncate(i);
                }
            }
            m.values_mut().for_each(normalize);
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn json_lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let mut v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            normalize(&mut v);
            v
        })
        .collect()
}

fn answer(out: &Output, cmp: Cmp) -> Answer {
    let stderr = json_lines(&out.stderr);
    Answer {
        code: out.status.code(),
        stdout: if cmp == Cmp::Json {
            json_lines(&out.stdout)
        } else {
            Vec::new()
        },
        raw: if cmp == Cmp::Bytes {
            out.stdout.clone()
        } else {
            Vec::new()
        },
        error: stderr.into_iter().find(|v| v.get("error").is_some()),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Fails unless `out` exited 0, showing its standard error; else `out`.
#[track_caller]
fn succeeded(out: Output) -> Output {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `args` with `stdin` as one `oncelake` command that must succeed.
#[track_caller]
fn ok(args: &[&str], stdin: Option<&[u8]>) -> Output {
    succeeded(oncelake(args, stdin))
}

/// Runs `args` (with `{S}` and `{D}` filled in) as one `oncelake` command.
fn run_on(node: &Path, dir: &Path, args: &str, stdin: Option<&[u8]>) -> Output {
    let filled: Vec<String> = args
        .split(' ')
        .map(|a| a.replace("{S}", s(node)).replace("{D}", s(dir)))
        .collect();
    let argv: Vec<&str> = filled.iter().map(String::as_str).collect();
    oncelake(&argv, stdin)
}

/// The model: unit → (version, object hash, size), as `ls --json` shows current entries.
type Model = BTreeMap<String, (u64, String, u64)>;

fn listed(node: &Path, dir: &Path) -> Model {
    let out = succeeded(run_on(node, dir, "ls {S} --json", None));
    json_lines(&out.stdout)
        .into_iter()
        .map(|v| {
            let unit = v["unit"].as_str().unwrap().to_string();
            let entry = (
                v["source_version"].as_u64().unwrap(),
                v["object"].as_str().unwrap().to_string(),
                v["size"].as_u64().unwrap(),
            );
            (unit, entry)
        })
        // Pipeline bookkeeping units are the engine's own (the model holds user units).
        .filter(|(u, _)| !u.starts_with(".pipeline/") && !u.starts_with("sales/"))
        .collect()
}

/// Runs the script on `nodes`, checking each step's exit code and, after each commit, that
/// every node lists exactly the model; returns the answers.
fn walk(nodes: &[PathBuf; 2], dir: &Path) -> Vec<Answer> {
    let mut model = Model::new();
    let mut answers = Vec::new();
    for st in script() {
        std::thread::sleep(std::time::Duration::from_millis(st.sleep_ms));
        let out = run_on(&nodes[st.node], dir, &st.args, st.stdin.as_deref());
        let mut got = answer(&out, st.cmp);
        for v in &mut got.stdout {
            if let Value::Object(m) = v {
                st.node_local.iter().for_each(|k| drop(m.remove(*k)));
            }
        }
        assert_eq!(
            out.status.code(),
            Some(st.code),
            "`{}` on node {}: stdout {} stderr {}",
            st.args,
            st.node,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some((unit, version, bytes)) = &st.commits {
            let hash = blake3::hash(bytes).to_hex().to_string();
            model.insert(unit.clone(), (*version, hash, bytes.len() as u64));
            for node in nodes {
                assert_eq!(
                    listed(node, dir),
                    model,
                    "after `{}`, {}",
                    st.args,
                    node.display()
                );
            }
        }
        answers.push(got);
    }
    answers
}

/// A new `file://` lake in `dir`: its directory and URL.
fn file_lake(dir: &Path) -> (PathBuf, String) {
    let lake = dir.join("lake");
    std::fs::create_dir(&lake).unwrap();
    let url = format!("file://{}", s(&lake));
    (lake, url)
}

/// Two nodes of a new `file://` lake in `dir`: (the lake's directory, the nodes).
fn two_nodes(dir: &Path) -> (PathBuf, [PathBuf; 2]) {
    let (lake, url) = file_lake(dir);
    let nodes = [dir.join("node1"), dir.join("node2")];
    for n in &nodes {
        ok(&["init", s(n), "--lake", &url], None);
    }
    (lake, nodes)
}

/// The script's answers on the lake's nodes equal those of the same script on a local store.
fn same_as_local(dir: &Path, on_lake: &[Answer]) {
    let local = dir.join("local");
    ok(&["init", s(&local)], None);
    let on_local = walk(&[local.clone(), local], dir);
    for ((st, l), o) in script().iter().zip(on_lake).zip(&on_local) {
        assert_eq!(
            l, o,
            "`{}`: the lake node answered differently from the local store",
            st.args
        );
    }
}

#[test]
fn every_store_command_answers_on_lake_nodes_as_on_a_local_store() {
    let dir = tempfile::tempdir().unwrap();
    scratch(dir.path());
    let (lake, nodes) = two_nodes(dir.path());
    let on_lake = walk(&nodes, dir.path());
    same_as_local(dir.path(), &on_lake);
    // The table went into the lake, where delta-rs reads it (docs/tables.md).
    assert!(lake
        .join("tables/sales/_delta_log/00000000000000000000.json")
        .is_file());
}

/// The same script with node 1 served: every command on it goes through `oncelake serve`.
#[test]
fn every_store_command_answers_the_same_through_a_served_node() {
    let dir = tempfile::tempdir().unwrap();
    scratch(dir.path());
    let (_, nodes) = two_nodes(dir.path());
    let (_server, _) = serve(&nodes[0]);
    let on_lake = walk(&nodes, dir.path());
    same_as_local(dir.path(), &on_lake);
}

/// `checkpoint` and `sync` on a node (a local store refuses a checkpoint: it has no lake).
#[test]
fn checkpoint_and_sync_answer_on_a_node_and_a_checkpoint_seeds_a_new_node() {
    let dir = tempfile::tempdir().unwrap();
    let (_, url) = file_lake(dir.path());
    let (n1, n3) = (dir.path().join("n1"), dir.path().join("n3"));
    ok(&["init", s(&n1), "--lake", &url], None);
    ok(&["put", s(&n1), "u/1", "1", "-"], Some(b"one"));
    let out = ok(&["checkpoint", s(&n1), "--json"], None);
    let v = &json_lines(&out.stdout)[0];
    assert_eq!(
        (v["segment"].as_u64(), v["written"].as_bool()),
        (Some(1), Some(true))
    );
    ok(&["init", s(&n3), "--lake", &url], None);
    let got = oncelake(&["get", s(&n3), "u/1"], None);
    assert_eq!(
        got.stdout, b"one",
        "a node seeded from the checkpoint reads the object"
    );

    let local = dir.path().join("local");
    ok(&["init", s(&local)], None);
    let out = oncelake(&["checkpoint", s(&local), "--json"], None);
    assert_eq!(out.status.code(), Some(2));
    let err = &json_lines(&out.stderr)[0];
    assert_eq!(err["error"], "invalid_request");
}

/// A served node: a running `oncelake serve` on a node of a lake.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(node: &Path) -> (Served, String) {
    let (child, address) = crate::bin::spawn_serve(
        Command::new(crate::bin::oncelake())
            .args(["serve", s(node), "--listen", "127.0.0.1:0"])
            .stderr(Stdio::null()),
    );
    let addr = address
        .strip_prefix("tcp:")
        .unwrap_or_else(|| panic!("not a TCP address: {address:?}"))
        .to_string();
    (Served(child), addr)
}

/// `GET path` on the served node with its bearer token: (status line, body).
fn http_get(node: &Path, addr: &str, path: &str) -> (String, String) {
    let info: Value =
        serde_json::from_slice(&std::fs::read(node.join("serve.json")).unwrap()).unwrap();
    let token = info["token"].as_str().unwrap();
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

#[test]
fn a_served_node_commits_syncs_and_answers_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (_, [n1, n2]) = two_nodes(dir.path());
    let (_server, addr) = serve(&n1);
    let put = ok(&["put", s(&n1), "u/1", "1", "-", "--json"], Some(b"served"));
    assert_eq!(json_lines(&put.stdout)[0]["outcome"], "committed");
    ok(&["sync", s(&n2)], None);
    assert_eq!(oncelake(&["get", s(&n2), "u/1"], None).stdout, b"served");

    // What node 2 commits, the served node sees on its next command (it syncs first).
    ok(&["put", s(&n2), "u/2", "1", "-"], Some(b"from n2"));
    let out = oncelake(&["get", s(&n1), "u/2", "--wait", "2s"], None);
    assert_eq!(
        out.stdout,
        b"from n2",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ok(&["sync", s(&n1), "--json", "--wait", "2s"], None);
    assert_eq!(json_lines(&out.stdout)[0]["seq"], 2);
    let out = ok(&["checkpoint", s(&n1), "--json", "--wait", "2s"], None);
    assert_eq!(json_lines(&out.stdout)[0]["segment"], 2);

    let (status, body) = http_get(&n1, &addr, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(body.lines().any(|l| l == "oncelake_last_seq 2"), "{body}");
    assert!(
        body.lines().any(|l| l == "oncelake_commits_total 2"),
        "{body}"
    );
    let (status, body) = http_get(&n1, &addr, "/v1/stats");
    assert!(status.contains("200"), "{status}");
    let stats: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(
        (&stats["seq"], &stats["units"]),
        (&2.into(), &2.into()),
        "{stats}"
    );
    assert_eq!(
        stats["counters"]["commits"], 2,
        "the lake's commits, node 2's included"
    );
}
