//! Commands routed through `oncelake serve` print what they print in-process, with the same
//! exit code (SPEC R17, R20): verify, reconcile and the pipeline commands, each compared with the
//! in-process run on the same store.

use crate::support;

use std::path::Path;
use support::{cells, json_lines, new_store, put, served_and_in_process, Server, Twins};

/// Every object file under `objects/`.
fn object_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(object_files(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn assert_same(store: &Path, args: &[&str], code: i32) {
    let (served, local) = served_and_in_process(store, args);
    assert_eq!(served, local, "{args:?}: through the server vs in-process");
    assert_eq!(served.0, code, "{args:?}: exit code; output {}", served.1);
}

#[test]
fn verify_through_the_server_prints_what_it_prints_in_process() {
    let (_dir, store) = new_store();
    let s = store.to_str().unwrap();
    {
        let _server = Server::start(&store);
        for i in 0..5 {
            let unit = format!("orders/d={i}");
            put(&store, &unit, 1, format!("rows {i}").as_bytes());
        }
        put(&store, "orders/d=0", 2, b"rows 0 again");
    }
    for args in [
        vec!["verify", s],
        vec!["verify", s, "--json"],
        vec!["verify", s, "--deep", "--json"],
    ] {
        assert_same(&store, &args, 0);
    }
    // A damaged store: one object corrupted, one missing (exit 7 both ways, same report).
    let objects = object_files(&store.join("objects"));
    assert!(objects.len() >= 6, "{objects:?}");
    std::fs::write(&objects[0], b"damaged").unwrap();
    std::fs::remove_file(&objects[1]).unwrap();
    for args in [
        vec!["verify", s],
        vec!["verify", s, "--json"],
        vec!["verify", s, "--deep"],
    ] {
        assert_same(&store, &args, 7);
    }
}

/// A store with units `u/000`..`u/009` at version 2 (and `zz/gone`, which no listing names).
fn reconcile_store() -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, store) = new_store();
    {
        let server = Server::start(&store);
        for i in 0..10 {
            let unit = format!("u/{i:03}");
            put(&store, &unit, 2, format!("out {i}").as_bytes());
        }
        put(&store, "zz/gone", 1, b"old");
        server.stop();
    }
    (dir, store)
}

#[test]
fn reconcile_through_the_server_prints_what_it_prints_in_process() {
    let (dir, store) = reconcile_store();
    let s = store.to_str().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    // Full, sorted: behind, up to date, missing, and zz/gone unknown to the source.
    let sorted = file(
        "sorted.csv",
        "u/000,3\nu/001,2\nu/002,1\nu/005,9\nu/100,1\nu/101,4\n",
    );
    // Full, out of order: the server sorts it first.
    let unsorted = file("unsorted.csv", "u/101,4\nu/000,3\nu/005,9\nu/001,2\n");
    let changes = file(
        "changes.jsonl",
        "{\"unit\": \"u/003\", \"version\": 5}\n{\"unit\": \"new/1\", \"version\": 1}\n",
    );
    for args in [
        vec!["reconcile", s, "--source", &sorted],
        vec!["reconcile", s, "--source", &sorted, "--json"],
        vec!["reconcile", s, "--source", &sorted, "--list-up-to-date"],
        vec!["reconcile", s, "--source", &unsorted, "--json"],
        vec!["reconcile", s, "--source", &changes, "--changes-only"],
        vec![
            "reconcile",
            s,
            "--source",
            &changes,
            "--changes-only",
            "--json",
        ],
    ] {
        assert_same(&store, &args, 0);
    }
    // Standard input (sorted first, as in-process).
    let (served, local) = support::served_and_in_process_with_input(
        &store,
        &["reconcile", s, "--source", "-", "--json"],
        b"u/009,2\nu/001,7\n",
    );
    assert_eq!(served, local);
    assert_eq!(served.0, 0);
    assert!(served.1.contains("\"unit\":\"u/001\""), "{}", served.1);
    // A bad line after good ones in an incremental listing: the same lines, then exit 2.
    let bad = file("bad.csv", "u/004,3\nu/007,x\nu/008,9\n");
    assert_same(
        &store,
        &["reconcile", s, "--source", &bad, "--changes-only", "--json"],
        2,
    );
    // A bad full listing is refused before any plan line.
    assert_same(&store, &["reconcile", s, "--source", &bad], 2);
}

/// A plan far larger than the socket buffers, against a model: every listed unit is missing,
/// so the plan names each one, in order, and the store's own units are unknown to the source.
#[test]
fn a_large_reconcile_streams_both_ways() {
    let (dir, store) = reconcile_store();
    let s = store.to_str().unwrap();
    let units: Vec<String> = (0..40_000).map(|i| format!("big/{i:06}")).collect();
    let listing: String = units.iter().map(|u| format!("{u},1\n")).collect();
    let path = dir.path().join("big.csv");
    std::fs::write(&path, listing).unwrap();
    let p = path.to_str().unwrap();
    let server = Server::start(&store);
    let (code, out) = support::run(&["reconcile", s, "--source", p, "--json"]);
    server.stop();
    assert_eq!(code, 0);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let planned: Vec<&str> = lines[..units.len()]
        .iter()
        .map(|v| {
            assert_eq!(v["action"], "missing", "{v}");
            v["unit"].as_str().unwrap()
        })
        .collect();
    assert_eq!(planned, units);
    let unknown: Vec<&str> = lines[units.len()..lines.len() - 1]
        .iter()
        .map(|v| v["unit"].as_str().unwrap())
        .collect();
    let mut expected: Vec<String> = (0..10).map(|i| format!("u/{i:03}")).collect();
    expected.push("zz/gone".into());
    assert_eq!(unknown, expected);
    let summary = &lines[lines.len() - 1]["summary"];
    assert_eq!(summary["missing"], units.len() as u64);
    assert_eq!(summary["unknown"], 11);
}

/// Stages ingest → transform: a unit with a source version has a ready ingest cell and a
/// blocked transform cell.
const DEF: &str =
    "[stage.ingest]\ncode_version = 1\n[stage.transform]\ncode_version = 3\nupstream = [\"ingest\"]\n";

/// set-version in both forms, against the rules (a duplicate, a stale version going back); the
/// number of units it recorded.
fn set_versions_follow_the_rules(t: &Twins) -> u64 {
    // unit → version: the model of what set-version recorded.
    let mut model = std::collections::BTreeMap::new();
    for (unit, version, input, code) in [
        ("orders/day=1", "7", "a,b", 0),
        ("orders/day=2", "3", "c", 0),
        ("orders/day=1", "7", "a,b", 0), // duplicate
        ("orders/day=1", "6", "x", 4),   // stale: versions never go back
        ("orders/day=3", "1", "", 0),
    ] {
        for json in [false, true] {
            let mut args = vec!["pipeline", "set-version", "{}", unit, version, "-"];
            if json {
                args.push("--json");
            }
            let (got, _) = t.run(&args, input.as_bytes());
            assert_eq!(got, code, "{args:?}");
        }
        if code == 0 {
            model.insert(unit, version);
        }
    }
    model.len() as u64
}

/// (done, ready, blocked) per stage, as `status --json` says (after the human and dot forms
/// answered alike).
fn stage_counts(t: &Twins) -> Vec<(String, u64, u64, u64)> {
    t.pipeline("status", &[], b"");
    t.pipeline("status", &["--dot"], b"");
    let (code, out) = t.pipeline("status", &["--json"], b"");
    assert_eq!(code, 0);
    json_lines(&out)
        .iter()
        .map(|v| {
            let n = |k: &str| v[k].as_u64().unwrap();
            (
                v["stage"].as_str().unwrap().to_string(),
                n("done"),
                n("ready"),
                n("blocked"),
            )
        })
        .collect()
}

/// explain in both forms answers alike; a unit without a source version is the same usage
/// error both ways.
fn explain_answers_alike(t: &Twins) {
    for args in [&["orders/day=1"][..], &["orders/day=2", "--json"][..]] {
        assert_eq!(t.pipeline("explain", args, b"").0, 0, "{args:?}");
    }
    assert_eq!(t.pipeline("explain", &["nobody"], b"").0, 2);
}

/// `pipeline set-version`, `status` and `explain` through the server, on a served store and an
/// in-process twin, against a model of the cells' states.
#[test]
fn pipeline_commands_through_the_server_match_in_process_and_the_model() {
    let t = Twins::new(DEF);
    let def = t.def();
    let server = Server::start(&t.served);
    let units = set_versions_follow_the_rules(&t);
    let ingest_ready = [
        ("ingest".to_string(), 0, units, 0),
        ("transform".to_string(), 0, 0, units),
    ];
    assert_eq!(stage_counts(&t), ingest_ready);
    explain_answers_alike(&t);
    // `pipeline ready` goes through the server too (pipeline_cells.rs compares it).
    let served = t.served.to_str().unwrap();
    let (code, _) = support::run(&["pipeline", "ready", served, "--pipeline", &def]);
    assert_eq!(code, 0);
    // Complete ingest of day=1 on both stores (in-process, the server stopped), then the cells'
    // states through the server again: ingest done for one unit, transform ready for it.
    server.stop();
    for store in [&t.served, &t.local] {
        let out = support::oncelake_with_input(
            &[
                "pipeline",
                "complete",
                store.to_str().unwrap(),
                "--pipeline",
                &def,
                "orders/day=1",
                "ingest",
                "-",
            ],
            b"ingested",
        );
        assert!(out.status.success(), "{out:?}");
    }
    let server = Server::start(&t.served);
    assert_eq!(
        t.explain("orders/day=1"),
        cells(&[("ingest", "done"), ("transform", "ready")])
    );
    assert_eq!(
        stage_counts(&t),
        [
            ("ingest".to_string(), 1, units - 1, 0),
            ("transform".to_string(), 0, 1, units - 1)
        ]
    );
    t.pipeline("explain", &["orders/day=1"], b"");
    server.stop();
}

/// The object file of `unit`'s current entry, made writable (objects are published read-only).
fn writable_object(store: &Path, unit: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let out = support::oncelake(&["ls", store.to_str().unwrap(), "--prefix", unit, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    let entry: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let hex = entry["object"].as_str().unwrap();
    let path = store.join("objects").join(&hex[..2]).join(hex);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path
}

/// (exit code, stdout, stderr) of a CLI call.
fn run_all(args: &[&str]) -> (i32, Vec<u8>, String) {
    let out = support::oncelake(args);
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `get` of a damaged object through the server fails as in-process (SPEC I2, R20): exit 1,
/// error kind `corrupt`, the same message, nothing on standard output and no file written —
/// whether the damage keeps the object's length (the client's CRC32 check finds it) or not
/// (the server's length check finds it before it answers).
#[test]
fn get_of_a_damaged_object_fails_through_the_server_as_in_process() {
    let (dir, store) = new_store();
    let s = store.to_str().unwrap();
    let good = b"twenty bytes of data";
    put(&store, "u/1", 1, good);
    let object = writable_object(&store, "u/1");
    let out = dir.path().join("out.bin");
    let o = out.to_str().unwrap();
    let damages: [(&str, &[u8]); 3] = [
        ("same length", b"twenty bytes of dat!"),
        ("truncated", b"twenty"),
        ("grown", b"twenty bytes of data, and more"),
    ];
    for (what, bytes) in damages {
        std::fs::write(&object, bytes).unwrap();
        for args in [
            vec!["get", s, "u/1"],
            vec!["get", s, "u/1", "--json"],
            vec!["get", s, "u/1", "-o", o, "--json"],
        ] {
            let server = Server::start(&store);
            let served = run_all(&args);
            server.stop();
            let local = run_all(&args);
            assert_eq!(
                (served.0, String::from_utf8_lossy(&served.1), &served.2),
                (local.0, String::from_utf8_lossy(&local.1), &local.2),
                "{what}, {args:?}: through the server vs in-process"
            );
            assert_eq!(served.0, 1, "{what}, {args:?}: {}", served.2);
            assert!(served.1.is_empty(), "{what}, {args:?}: wrote to stdout");
            if args.contains(&"--json") {
                let v: serde_json::Value = serde_json::from_str(served.2.trim()).unwrap();
                assert_eq!(v["error"], "corrupt", "{what}, {args:?}: {v}");
                assert_eq!(v["exit_code"], 1, "{what}, {args:?}: {v}");
            } else {
                assert!(served.2.contains("oncelake verify"), "{}", served.2);
            }
            assert!(!out.exists(), "{what}, {args:?}: -o wrote a file");
            assert!(!out.with_extension("oncelake-tmp").exists(), "{what}");
        }
    }

    // The library client checks too, for a snapshot's object as well.
    std::fs::write(&object, b"twenty bytes of dat!").unwrap();
    let server = Server::start(&store);
    let client = oncelake_server::Client::for_store(&store).unwrap();
    // The client's own check gives the engine's error itself; a length the server sees is wrong
    // is refused by the server as kind `corrupt`.
    let corrupt = |r: Result<_, oncelake_server::ClientError>| match r {
        Err(oncelake_server::ClientError::Damaged(oncelake::Error::Corrupt { .. })) => true,
        Err(oncelake_server::ClientError::Store { kind, .. }) => kind == "corrupt",
        _ => false,
    };
    assert!(corrupt(client.read_object("u/1", None, &mut Vec::new())));
    let view = client.snapshot_open(None, None).unwrap();
    assert!(corrupt(client.snapshot_read_object(
        view.id,
        "u/1",
        &mut Vec::new()
    )));
    // Repaired, it reads again both ways.
    std::fs::write(&object, good).unwrap();
    let mut bytes = Vec::new();
    assert!(client
        .read_object("u/1", None, &mut bytes)
        .unwrap()
        .is_some());
    assert_eq!(bytes, good);
    server.stop();
    assert_eq!(run_all(&["get", s, "u/1"]).1, good);
}

/// Engine refusals through the server keep their in-process error kind under `--json` (here
/// `seq_out_of_range`, which a served call reported as `usage`), with the same message.
#[test]
fn refusals_through_the_server_have_the_in_process_error_kind() {
    let (_dir, store) = new_store();
    let s = store.to_str().unwrap();
    put(&store, "u/1", 1, b"one");
    for args in [
        vec!["ls", s, "--at", "99", "--json"],
        vec!["get", s, "u/1", "--at", "99", "--json"],
    ] {
        let server = Server::start(&store);
        let served = run_all(&args);
        server.stop();
        let local = run_all(&args);
        assert_eq!(served, local, "{args:?}: through the server vs in-process");
        let v: serde_json::Value = serde_json::from_str(served.2.trim()).unwrap();
        assert_eq!(v["error"], "seq_out_of_range", "{args:?}: {v}");
        assert_eq!(v["exit_code"], 2, "{args:?}: {v}");
    }
}
