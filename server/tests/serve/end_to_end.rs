//! `oncelake serve` end to end (SPEC R20): many CLI processes against one served store checked
//! against a model, the metrics scrape, the bearer token, bad and cut-off requests, the server
//! killed under load, and SIGTERM.

use crate::support;

use oncelake_server::wire::CommitItemW;
use oncelake_server::{Client, ClientError};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{bin, new_store, oncelake, served_store, verifies, Server};

/// `ls --json` as (unit → (version, object)).
fn listing(store: &Path) -> BTreeMap<String, (u64, String)> {
    let out = oncelake(&["ls", store.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["unit"].as_str().unwrap().to_string(),
                (
                    v["source_version"].as_u64().unwrap(),
                    v["object"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

fn hex_of(bytes: &[u8]) -> String {
    oncelake::ObjectId::of(bytes).to_hex()
}

/// 8 threads × 6 `oncelake put` processes each, every unit written by two processes with the
/// same bytes (one commits, one is a duplicate): the listing through the server, the store after
/// the server stopped, and the persisted counters all match the model.
#[test]
fn many_cli_processes_against_one_served_store_match_a_model() {
    let (_dir, store) = new_store();
    let server = Server::start(&store);
    let s = store.to_str().unwrap().to_string();
    let model: BTreeMap<String, (u64, Vec<u8>)> = (0..24)
        .map(|i| {
            (
                format!("orders/day={i:02}"),
                (1 + i % 3, format!("rows of day {i}").into_bytes()),
            )
        })
        .collect();
    let jobs: Vec<(String, u64, Vec<u8>)> = model
        .iter()
        .flat_map(|(u, (v, b))| [(u.clone(), *v, b.clone()), (u.clone(), *v, b.clone())])
        .collect();
    let jobs = Arc::new(Mutex::new(jobs));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (jobs, outcomes, s) = (jobs.clone(), outcomes.clone(), s.clone());
            std::thread::spawn(move || loop {
                let Some((unit, version, bytes)) = jobs.lock().unwrap().pop() else {
                    return;
                };
                let mut child = Command::new(bin::oncelake())
                    .args(["put", &s, &unit, &version.to_string(), "-", "--json"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                child.stdin.take().unwrap().write_all(&bytes).unwrap();
                let out = child.wait_with_output().unwrap();
                assert_eq!(out.status.code(), Some(0), "{out:?}");
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                outcomes
                    .lock()
                    .unwrap()
                    .push((unit, v["outcome"].as_str().unwrap().to_string()));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Every unit: exactly one process committed it, the other got a duplicate.
    let outcomes = outcomes.lock().unwrap();
    for unit in model.keys() {
        let mut mine: Vec<&str> = outcomes
            .iter()
            .filter(|(u, _)| u == unit)
            .map(|(_, o)| o.as_str())
            .collect();
        mine.sort();
        assert_eq!(mine, ["committed", "duplicate"], "{unit}");
    }
    let want: BTreeMap<String, (u64, String)> = model
        .iter()
        .map(|(u, (v, b))| (u.clone(), (*v, hex_of(b))))
        .collect();
    assert_eq!(listing(&store), want, "through the server");
    // Bytes through the server.
    let (unit, (_, bytes)) = model.iter().next().unwrap();
    let out = oncelake(&["get", &s, unit]);
    assert_eq!(&out.stdout, bytes);
    // The persisted counters, through the server and then from a fresh process.
    let stats = |s: &str| -> serde_json::Value {
        let out = oncelake(&["stats", s, "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let served = stats(&s);
    assert_eq!(served["commits"], 24);
    assert_eq!(served["duplicates_collapsed"], 24);
    assert_eq!(served["units"], 24);
    assert!(served["server"]["requests"].as_u64().unwrap() > 48);
    assert!(server.terminate().success());
    assert!(!store.join("serve.sock").exists() && !store.join("serve.json").exists());
    assert_eq!(listing(&store), want, "in-process after the server stopped");
    let fresh = stats(&s);
    assert_eq!(
        fresh["commits"], 24,
        "a fresh process reports the store's counters"
    );
    assert_eq!(fresh["duplicates_collapsed"], 24);
    assert!(fresh["process_only"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("bytes_staged")));
    verifies(&store);
}

/// `/metrics` is Prometheus text with every counter labelled by scope, the server's own
/// counters, and the values the store holds.
#[test]
fn metrics_scrape_and_healthz() {
    let (_dir, store, _server, client) = served_store();
    for i in 0..3u64 {
        let (u, _) = client
            .put_reader(&format!("u/{i}"), 1, None, false, &b"x"[..])
            .unwrap();
        assert_eq!(u.outcome.name(), "committed");
    }
    // One of them again: a duplicate.
    client.put_reader("u/0", 1, None, false, &b"x"[..]).unwrap();
    let text = client.metrics_text().unwrap();
    let value = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("oncelake_commits_total"), 3);
    assert_eq!(value("oncelake_duplicates_collapsed_total"), 1);
    assert_eq!(value("oncelake_last_seq"), 3);
    assert!(value("oncelake_server_requests_total") >= 5);
    assert!(text.contains("# HELP oncelake_commits_total commits (persisted in the store"));
    assert!(text.contains("# HELP oncelake_bytes_staged_total bytes staged (this process only"));
    // Every sample line is `name value` or `name{labels} value` with a number.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, v) = l.rsplit_once(' ').unwrap();
        assert!(v.parse::<f64>().is_ok(), "{l}");
    }
    let h = client.health().unwrap();
    assert_eq!(h["ok"], true);
    assert_eq!(h["seq"], 3);
    // gc and verify go through the server, printed like in-process.
    let s = store.to_str().unwrap();
    let out = oncelake(&["gc", s, "--dry-run", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(
        v["objects_referenced"], 1,
        "three units, one object (the same bytes)"
    );
    let out = verifies(&store);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: no problems found"));
    // The pipeline's cell commands go through the server too (never "locked" while it runs).
    let def = store.with_file_name("etl.toml");
    std::fs::write(&def, "[stage.ingest]\ncode_version = 1\n").unwrap();
    let out = oncelake(&["pipeline", "ready", s, "--pipeline", def.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// The socket and the address file are owner-only; over TCP a request without the right token
/// gets 401 and changes nothing.
#[test]
fn tcp_needs_the_token_and_files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, store) = new_store();
    let server = Server::start_with(&store, &["--listen", "127.0.0.1:0"]);
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store.join("serve.json")).unwrap()).unwrap();
    let mode = std::fs::metadata(store.join("serve.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let addr = server.address.strip_prefix("tcp:").unwrap();
    assert!(addr.starts_with("127.0.0.1:"));
    let token = info["token"].as_str().unwrap();
    for bad in [None, Some("wrong"), Some(&token[1..])] {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let auth = bad
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            c,
            "PUT /v1/put?unit=x&version=1 HTTP/1.1\r\nHost: l\r\n{auth}Content-Length: 1\r\nConnection: close\r\n\r\nx"
        )
        .unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
        assert!(answer.contains("\"error\":\"unauthorized\""), "{answer}");
    }
    let wrong = Client::tcp(addr, "nope");
    assert!(matches!(
        wrong.put_reader("x", 1, None, false, &b"x"[..]),
        Err(ClientError::Unauthorized { .. })
    ));
    let client = Client::for_store(&store).unwrap();
    assert_eq!(client.lookup("x").unwrap(), None, "nothing changed");
    assert_eq!(listing(&store), BTreeMap::new());
    client.put_reader("x", 1, None, false, &b"x"[..]).unwrap();
    assert_eq!(listing(&store).len(), 1, "the CLI uses the token by itself");
    drop(server);

    let _unix = Server::start(&store);
    let mode = std::fs::metadata(store.join("serve.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the socket is owner-only");
}

/// Malformed requests get 400 with a message, oversized ones 413; nothing is committed.
#[test]
fn bad_and_oversized_requests_are_refused_and_change_nothing() {
    let (_dir, store) = new_store();
    let server = Server::start_with(&store, &["--max-upload", "1000"]);
    let sock = server.address.strip_prefix("unix:").unwrap();
    let raw = |req: &str| -> String {
        let mut c = std::os::unix::net::UnixStream::connect(sock).unwrap();
        c.write_all(req.as_bytes()).unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        answer
    };
    let a = raw("POST /v1/commit HTTP/1.1\r\nHost: l\r\nContent-Length: 5\r\nConnection: close\r\n\r\n{nope");
    assert!(a.starts_with("HTTP/1.1 400"), "{a}");
    assert!(a.contains("not the expected JSON"), "{a}");
    let a = raw(
        "PUT /v1/put?unit=x HTTP/1.1\r\nHost: l\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert!(
        a.starts_with("HTTP/1.1 400") && a.contains("bad query string"),
        "{a}"
    );
    let a = raw("garbage\r\n\r\n");
    assert!(a.starts_with("HTTP/1.1 400"), "{a}");
    let client = Client::for_store(&store).unwrap();
    match client.put_reader("bad\u{1}key", 1, None, false, &b"x"[..]) {
        Err(ClientError::BadRequest { kind, .. }) => assert_eq!(kind, "invalid_key"),
        other => panic!("{other:?}"),
    }
    let unknown = CommitItemW {
        unit: "x".into(),
        source_version: 1,
        staged: 999,
        token: None,
        correct: false,
    };
    assert!(matches!(
        client.commit(vec![unknown], false),
        Err(ClientError::BadRequest { .. })
    ));
    let big = vec![7u8; 5000];
    match client.put_reader("big", 1, None, false, &big[..]) {
        Err(ClientError::TooLarge { .. }) => {}
        other => panic!("{other:?}"),
    }
    // The CLI says so with exit 1 and the server's message.
    let out = Command::new(bin::oncelake())
        .args(["put", store.to_str().unwrap(), "big", "1", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            let _ = c.stdin.take().unwrap().write_all(&big);
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than 1000 bytes"));
    // A batch through stage + commit works.
    let (h1, _) = client.stage_reader(&b"one"[..]).unwrap();
    let (h2, _) = client.stage_reader(&b"two"[..]).unwrap();
    let item = |unit: &str, staged| CommitItemW {
        unit: unit.into(),
        source_version: 1,
        staged,
        token: None,
        correct: false,
    };
    let r = client
        .commit(vec![item("b/1", h1), item("b/2", h2)], false)
        .unwrap();
    assert!(r.applied() && r.seq.is_some());
    let got: Vec<String> = listing(&store).into_keys().collect();
    assert_eq!(got, ["b/1", "b/2"], "only the batch was committed");
}

/// A client that goes away in the middle of an upload: nothing is committed, no object is
/// published, the server goes on.
#[test]
fn a_client_killed_mid_upload_commits_nothing() {
    let (_dir, store) = new_store();
    let server = Server::start(&store);
    let sock = server.address.strip_prefix("unix:").unwrap().to_string();
    let objects = |store: &Path| -> usize { walk(&store.join("objects")) };
    let before = objects(&store);
    {
        let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        write!(
            c,
            "PUT /v1/put?unit=cut&version=1 HTTP/1.1\r\nHost: l\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n"
        )
        .unwrap();
        c.write_all(&[1u8; 30000]).unwrap();
        // Dropped here: the connection closes mid-chunk.
    }
    // A later request on another connection sees the state after the cut upload was handled:
    // wait until the server counted it aborted and has no upload in flight. (Waiting for "none
    // in flight" alone can end before the server even read the cut request.)
    let client = Client::for_store(&store).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = client.stats().unwrap();
        if s.server["uploads_in_flight"] == 0 && s.server["uploads_aborted"] != 0 {
            assert_eq!(s.server["uploads_aborted"], 1);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the cut upload was not counted aborted within a minute: {:?}",
            s.server
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(client.lookup("cut").unwrap(), None);
    assert_eq!(objects(&store), before, "no object was published");
    assert!(client.put_reader("ok", 1, None, false, &b"x"[..]).is_ok());
}

fn walk(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk(&e.path())
            } else {
                1
            }
        })
        .sum()
}

/// SIGKILL while 8 clients commit: every acknowledged commit is there after the restart, the
/// clients get a clear error, the stale files do not confuse the CLI, the next server takes over.
#[test]
fn a_server_killed_under_load_loses_no_acknowledged_commit() {
    let (_dir, store) = new_store();
    let mut server = Server::start(&store);
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (acked, errors, store) = (acked.clone(), errors.clone(), store.clone());
            std::thread::spawn(move || {
                let client = Client::for_store(&store).unwrap();
                for i in 0.. {
                    let unit = format!("t{t}/u{i}");
                    let bytes = format!("{unit} payload").into_bytes();
                    match client.put_reader(&unit, 1, None, false, &bytes[..]) {
                        Ok((u, _)) => {
                            assert_eq!(u.outcome.name(), "committed");
                            acked.lock().unwrap().insert(unit, hex_of(&bytes));
                        }
                        Err(e) => {
                            errors.lock().unwrap().push(e);
                            return;
                        }
                    }
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 200 {
        std::thread::yield_now();
    }
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    for e in errors.lock().unwrap().iter() {
        assert!(
            matches!(
                e,
                ClientError::Connect { .. } | ClientError::ConnectionLost { .. }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("oncelake serve") || e.to_string().contains("unknown"));
    }
    // The stale socket and address file are there; the CLI runs in-process.
    assert!(store.join("serve.json").exists());
    let after = listing(&store);
    for (unit, object) in acked.lock().unwrap().iter() {
        assert_eq!(
            after.get(unit).map(|e| &e.1),
            Some(object),
            "{unit} was acknowledged"
        );
    }
    let restarted = Server::start(&store);
    assert!(Client::for_store(&store).unwrap().health().is_ok());
    assert!(restarted.terminate().success());
    verifies(&store);
}

/// SIGTERM: the server finishes, removes its socket and address file, exits 0; and a long-poll
/// of the change feed is answered by the next commit.
#[test]
fn sigterm_cleans_up_and_long_polls_wake_on_commit() {
    let (_dir, store, server, client) = served_store();
    let poller = {
        let client = client.clone();
        std::thread::spawn(move || client.changes_since(0, Duration::from_secs(60), 100))
    };
    client.put_reader("a", 1, None, false, &b"x"[..]).unwrap();
    let (records, seq) = poller.join().unwrap().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].seq, 1);
    assert_eq!(seq, 1);
    assert!(server.terminate().success());
    assert!(!store.join("serve.sock").exists());
    assert!(!store.join("serve.json").exists());
    assert!(matches!(
        Client::for_store(&store),
        Err(ClientError::NotServed { .. })
    ));
}

/// An upload is streamed into staging, never held whole: a 96 MiB put leaves the server's peak
/// resident memory far below the upload's size.
#[test]
fn a_large_upload_is_streamed_not_buffered() {
    let (_dir, store) = new_store();
    let server = Server::start(&store);
    let peak_kib = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    let before = peak_kib();
    let size: u64 = 96 << 20;
    // A reader that produces the bytes as they are sent (the client holds none of them either).
    let input = std::io::repeat(0x5a).take(size);
    let client = Client::for_store(&store).unwrap();
    let (u, meta) = client.put_reader("big", 1, None, false, input).unwrap();
    assert_eq!(u.outcome.name(), "committed");
    assert_eq!(meta.size, size);
    let grown = peak_kib().saturating_sub(before);
    assert!(
        grown < 32 << 10,
        "the server's peak memory grew by {grown} KiB for a {} KiB upload",
        size >> 10
    );
}

/// A served lake node (SPEC R20, R23), the server built with the engine's `lake` feature of its
/// own: `serve_until` serves node 1 of a file:// lake in this process; commits through it (a new
/// unit, a duplicate, a conflicting output) get the rules' answers, and node 2, opened beside it
/// and synced, holds exactly the model.
#[test]
fn a_served_lake_node_commits_into_the_lake_and_another_node_sees_it_after_sync() {
    use oncelake::{Options, Outcome, Store};
    let dir = tempfile::tempdir().unwrap();
    let lake = format!("file://{}", dir.path().join("lake").display());
    let bound = |name: &str| {
        let node = dir.path().join(name);
        let opts = Options {
            lake: Some(lake.clone()),
            ..Options::default()
        };
        drop(Store::open_with(&node, opts).unwrap());
        node
    };
    let (node1, node2) = (bound("node1"), bound("node2"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, address) = std::sync::mpsc::channel::<String>();
    let served = node1.clone();
    let server = std::thread::spawn(move || {
        let opts = oncelake_server::ServeOptions {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            malloc_arenas: None,
            ..oncelake_server::ServeOptions::default()
        };
        let stop = Box::pin(async move {
            let _ = stopped.await;
        });
        oncelake_server::serve_until(&served, opts, |a| ready.send(a.into()).unwrap(), Some(stop))
    });
    address.recv_timeout(Duration::from_secs(60)).unwrap();
    let client = Client::for_store(&node1).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..6u64 {
        let (unit, bytes) = (format!("sales/day={i}"), format!("rows {i}").into_bytes());
        let (o, _) = client
            .put_reader(&unit, 1, None, false, &bytes[..])
            .unwrap();
        assert!(matches!(o.outcome, Outcome::Committed { .. }), "{o:?}");
        model.insert(unit, (1u64, hex_of(&bytes)));
    }
    // The same bytes again are a duplicate; other bytes at the same version, a conflict.
    for (bytes, want) in [(&b"rows 0"[..], "duplicate"), (b"other rows", "conflict")] {
        let (again, _) = client
            .put_reader("sales/day=0", 1, None, false, bytes)
            .unwrap();
        assert_eq!(again.outcome.name(), want, "{again:?}");
    }

    let node2 = Store::open(&node2).unwrap();
    node2.sync().unwrap();
    let seen: BTreeMap<String, (u64, String)> = node2
        .snapshot()
        .unwrap()
        .iter()
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.unit, (e.source_version, e.object.id.to_hex())))
        .collect();
    assert_eq!(seen, model);
    stop.send(()).unwrap();
    server.join().unwrap().unwrap();
}

/// One sequence of the store's operations, written once over `oncelake::UnitStore`, checked
/// against a model (a BTreeMap of each unit's current version and bytes) and the commit rules;
/// returns what it saw, so that a store in this process and a served one can be compared.
fn operations_against_a_model<S: oncelake::UnitStore>(s: &S) -> Vec<String>
where
    S::Error: std::fmt::Debug,
{
    let mut model = Model::new();
    let mut seen = Vec::new();
    puts_against_the_model(s, &mut model, &mut seen);
    a_batch_whole_and_partial(s, &mut model, &mut seen);
    reads_agree_with_the_model(s, &model, &mut seen);
    a_lease_renewed_and_fenced(s);
    the_worker_loop_over_the_trait(s);
    seen
}

/// Each unit's current version and bytes.
type Model = BTreeMap<String, (u64, Vec<u8>)>;

/// Seeded puts of a few units at random versions, each answered as the commit rules say.
fn puts_against_the_model<S: oncelake::UnitStore>(s: &S, model: &mut Model, seen: &mut Vec<String>)
where
    S::Error: std::fmt::Debug,
{
    let mut x = 7u64;
    for _ in 0..40 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let unit = format!("t/u{}", (x >> 33) % 6);
        let version = (x >> 40) % 5;
        let bytes = format!("{unit}@{version}:{}", (x >> 50) % 2).into_bytes();
        let expect = match model.get(&unit) {
            None => "committed",
            Some((v, _)) if version > *v => "committed",
            Some((v, b)) if version == *v && *b == bytes => "duplicate",
            Some((v, _)) if version == *v => "conflict",
            Some(_) => "stale",
        };
        let out = s.put(&unit, version, &bytes).unwrap();
        assert_eq!(out.outcome.name(), expect, "{unit} at {version}");
        if expect == "committed" {
            model.insert(unit.clone(), (version, bytes));
        }
        seen.push(format!("{unit} {version} {expect}"));
    }
}

fn a_batch_whole_and_partial<S: oncelake::UnitStore>(
    s: &S,
    model: &mut Model,
    seen: &mut Vec<String>,
) where
    S::Error: std::fmt::Debug,
{
    use oncelake::Put;
    // A batch: all-or-nothing refuses every unit for one stale one; partial applies the rest.
    let stale_unit = model.keys().next().unwrap().clone();
    let batch = [
        Put {
            unit: "t/new",
            source_version: 1,
            bytes: b"new",
            token: None,
            correct: false,
        },
        Put {
            unit: &stale_unit,
            source_version: 0,
            bytes: b"older",
            token: None,
            correct: false,
        },
    ];
    // (The older bytes are stale, or a conflict at version 0: refused either way.)
    let whole = s.commit(&batch, false).unwrap();
    assert_eq!(whole.seq, None, "{whole:?}");
    assert!(!whole.units[1].outcome.is_success(), "{whole:?}");
    let partial = s.commit(&batch, true).unwrap();
    assert!(partial.units[0].outcome.is_success(), "{partial:?}");
    model.insert("t/new".into(), (1, b"new".to_vec()));
    seen.push(format!(
        "batch {:?}",
        whole
            .units
            .iter()
            .map(|u| u.outcome.name())
            .collect::<Vec<_>>()
    ));
}

fn reads_agree_with_the_model<S: oncelake::UnitStore>(s: &S, model: &Model, seen: &mut Vec<String>)
where
    S::Error: std::fmt::Debug,
{
    // Reads agree with the model.
    let mut listed = BTreeMap::new();
    s.ls("t/", &mut |e| {
        listed.insert(e.unit.clone(), e.source_version);
        true
    })
    .unwrap();
    let versions: BTreeMap<String, u64> = model.iter().map(|(u, (v, _))| (u.clone(), *v)).collect();
    assert_eq!(listed, versions);
    for (unit, (version, bytes)) in model {
        let (entry, read) = s.read(unit).unwrap().unwrap();
        assert_eq!((entry.source_version, &read), (*version, bytes));
        assert_eq!(s.get(unit).unwrap(), Some(entry));
    }
    assert_eq!(s.get("t/none").unwrap(), None);
    // What the store holds, read from the store: the model's units and bytes at the newest seq;
    // the metrics count the commits that made them.
    let stats = s.stats().unwrap();
    let bytes = model.values().map(|(_, b)| b.len() as u64).sum();
    let newest = s.last_seq().unwrap();
    assert_eq!(
        (stats.units, stats.bytes_stored, stats.last_seq),
        (model.len() as u64, bytes, newest)
    );
    assert_eq!(stats.metrics.commits, newest, "{stats:?}");
    seen.push(format!("stats {} units {bytes} bytes", stats.units));
    let records = s.changes(0, usize::MAX).unwrap();
    assert!(records.windows(2).all(|w| w[0].seq < w[1].seq));
    seen.push(format!("{} records", records.len()));
}

fn a_lease_renewed_and_fenced<S: oncelake::UnitStore>(s: &S)
where
    S::Error: std::fmt::Debug,
{
    use oncelake::{ClaimOutcome, Put, ReleaseOutcome, RenewOutcome};
    // Coordinator mode: a lease, its renewal and fencing, ended by the commit it fenced.
    let lease = match s.claim("c/x", 1, "w1", Duration::from_secs(30)).unwrap() {
        ClaimOutcome::Granted { lease, .. } => lease,
        other => panic!("{other:?}"),
    };
    assert!(matches!(
        s.claim("c/x", 1, "w2", Duration::from_secs(30)).unwrap(),
        ClaimOutcome::Held { .. }
    ));
    let lease = match s.renew(&lease, Duration::from_secs(60)).unwrap() {
        RenewOutcome::Renewed(l) => l,
        other => panic!("{other:?}"),
    };
    let fenced = Put {
        unit: "c/x",
        source_version: 1,
        bytes: b"claimed",
        token: Some(lease.token),
        correct: false,
    };
    assert!(s.commit(&[fenced], false).unwrap().units[0]
        .outcome
        .is_success());
    assert!(matches!(
        s.release(&lease).unwrap(),
        ReleaseOutcome::Lost { .. }
    ));
    assert!(matches!(
        s.claim("c/x", 1, "w2", Duration::from_secs(30)).unwrap(),
        ClaimOutcome::AlreadyDone(_)
    ));
}

fn the_worker_loop_over_the_trait<S: oncelake::UnitStore>(s: &S)
where
    S::Error: std::fmt::Debug,
{
    use oncelake::pipeline::{PipelineDef, WorkOptions};
    // The pipeline's worker loop over the trait: every cell once, then nothing left.
    let p = oncelake::pipeline::Pipeline::new(
        PipelineDef::builder()
            .stage("upper", 1, &[])
            .build()
            .unwrap(),
    );
    for (i, unit) in ["a", "b", "c"].into_iter().enumerate() {
        s.set_source_version(unit, i as u64 + 1, unit.as_bytes())
            .unwrap();
    }
    let run = |expect: u64| {
        let report = oncelake::api::work(s, &p, "w1", &WorkOptions::default(), |cell| {
            let input = s.cell_input(cell, None).map_err(|e| format!("{e:?}"))?;
            Ok(input.to_ascii_uppercase())
        })
        .unwrap();
        assert_eq!(
            (report.runs, report.completed),
            (expect, expect),
            "{report:?}"
        );
    };
    run(3);
    run(0);
    let status = s.pipeline_status(&p).unwrap();
    assert_eq!(status.stages[0].done, 3, "{status:?}");
    let gc = s
        .gc(oncelake::GcOptions {
            dry_run: true,
            ..Default::default()
        })
        .unwrap();
    assert!(gc.dry_run);
    assert!(s.verify(true).unwrap().is_ok());
}

/// The operations written once answer alike in this process and through `oncelake serve`.
#[test]
fn the_store_operations_answer_alike_in_process_and_served() {
    let (_local_dir, local) = new_store();
    let in_process = operations_against_a_model(&oncelake::Store::open(&local).unwrap());
    let (_dir, store) = new_store();
    let _server = Server::start(&store);
    let served = operations_against_a_model(&Client::for_store(&store).unwrap());
    assert_eq!(in_process, served);
}
