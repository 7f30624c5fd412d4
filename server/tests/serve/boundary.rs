//! The server's boundary, as a shell or Python user meets it: a
//! server started with a relative store path is found from any directory; hostile requests get
//! a clear 4xx with a JSON body and change nothing; `/metrics` is valid Prometheus text whose
//! store figures (units, bytes stored, seq, the persisted counters) survive a restart; the 400
//! counter counts each refused request once.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use support::{bin, new_store, oncelake, oncelake_with_input, Server};

/// One request on a fresh connection to the Unix socket: (status, body).
fn raw(sock: &Path, req: &str) -> (u16, String) {
    let mut c = std::os::unix::net::UnixStream::connect(sock).unwrap();
    c.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn get(sock: &Path, path: &str) -> (u16, String) {
    raw(
        sock,
        &format!("GET {path} HTTP/1.1\r\nHost: l\r\nConnection: close\r\n\r\n"),
    )
}

fn send(sock: &Path, method: &str, path: &str, content_type: &str, body: &str) -> (u16, String) {
    raw(
        sock,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: l\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// The answer is an error of `status` whose JSON body has `kind`; its message is returned.
fn error_of(answer: (u16, String), status: u16, kind: &str) -> String {
    let (got, body) = answer;
    assert_eq!(got, status, "{body}");
    let v: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"));
    assert_eq!(v["error"], kind, "{body}");
    let message = v["message"].as_str().unwrap_or_default().to_string();
    assert!(!message.is_empty(), "{body}");
    message
}

/// `serve lake` from the store's parent directory writes an address that names the socket for
/// every client, so a command run elsewhere goes through the server (it used to find
/// `unix:lake/serve.sock`, connect to nothing, fall back to opening the store in-process and
/// give up on the server's lock).
#[test]
fn a_server_started_with_a_relative_path_is_found_from_any_directory() {
    let (dir, store) = new_store();
    let mut serve = Command::new(bin::oncelake());
    serve.args(["serve", "lake"]).current_dir(dir.path());
    let server = Server::spawn(serve);
    assert!(
        server.address.starts_with("unix:/"),
        "the ready line's address: {}",
        server.address
    );
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(store.join("serve.json")).unwrap()).unwrap();
    let address = info["address"].as_str().unwrap();
    let sock = Path::new(address.strip_prefix("unix:").unwrap());
    assert!(sock.is_absolute(), "serve.json: {info}");
    assert_eq!(sock, std::path::absolute(store.join("serve.sock")).unwrap());
    // From another working directory, without waiting for the server's lock.
    let elsewhere = tempfile::tempdir().unwrap();
    let s = store.to_str().unwrap();
    let out = Command::new(bin::oncelake())
        .args(["--wait", "0", "put", s, "a/1", "1", "-"])
        .current_dir(elsewhere.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(b"bytes")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let h: serde_json::Value = serde_json::from_str(&get(sock, "/healthz").1).unwrap();
    assert_eq!(h["seq"], 1, "the put went through the server: {h}");
    // Every path the server hands out names the file for any client: an object's path.
    let (_, body) = send(sock, "POST", "/v1/snapshot", "application/json", "");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["snapshot"].clone();
    let object = oncelake::ObjectId::of(b"bytes").to_hex();
    let (status, body) = get(
        sock,
        &format!("/v1/snapshot/object_path?id={id}&object={object}"),
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let path = Path::new(v["path"].as_str().unwrap());
    assert!(path.is_absolute(), "{v}");
    assert_eq!(std::fs::read(path).unwrap(), b"bytes");
}

/// A request the server must refuse: what is sent (a GET without a body, or a body with its
/// content type), the status and error kind it gets, and what the message must name.
struct Refused {
    method: &'static str,
    path: String,
    body: Option<(&'static str, String)>,
    status: u16,
    kind: &'static str,
    says: Vec<String>,
}

fn refused(method: &'static str, path: String, status: u16, kind: &'static str) -> Refused {
    Refused {
        method,
        path,
        body: None,
        status,
        kind,
        says: Vec::new(),
    }
}

impl Refused {
    fn with_body(self, content_type: &'static str, body: &str) -> Refused {
        Refused {
            body: Some((content_type, body.to_string())),
            ..self
        }
    }

    fn saying(mut self, what: &str) -> Refused {
        self.says.push(what.to_string());
        self
    }
}

/// Every refused request of the hostile test, `id` a live snapshot lease.
fn refused_requests(id: u64) -> Vec<Refused> {
    let mut all = Vec::new();
    // Unit keys no unit can have, on every read that takes one: a mistake, not "no entry".
    for bad in ["", "%01x", "a%0Ab"] {
        for path in ["/v1/lookup", "/v1/entry", "/v1/object"] {
            all.push(
                refused("GET", format!("{path}?unit={bad}"), 400, "invalid_key")
                    .saying("invalid unit key"),
            );
        }
    }
    let long = "k".repeat(1025);
    all.push(refused(
        "GET",
        format!("/v1/lookup?unit={long}"),
        400,
        "invalid_key",
    ));
    // Versions that are not a u64.
    for v in ["-1", "18446744073709551616", "1.5", "x"] {
        all.push(
            refused(
                "PUT",
                format!("/v1/put?unit=a%2F2&version={v}"),
                400,
                "bad_request",
            )
            .with_body("application/octet-stream", "x")
            .saying("version"),
        );
        let commit = format!(r#"{{"items":[{{"unit":"a/2","source_version":{v},"staged":1}}]}}"#);
        all.push(
            refused("POST", "/v1/commit".into(), 400, "bad_request")
                .with_body("application/json", &commit)
                .saying("JSON"),
        );
    }
    // A body that is not JSON, whatever its content type says.
    for ct in [
        "application/json",
        "text/plain",
        "multipart/form-data; boundary=x",
    ] {
        all.push(
            refused("POST", "/v1/claim".into(), 400, "bad_request")
                .with_body(ct, "--x\r\nnot json"),
        );
    }
    // A commit naming a staging handle (an object) this server never issued.
    all.push(
        refused("POST", "/v1/commit".into(), 400, "bad_request")
            .with_body(
                "application/json",
                r#"{"items":[{"unit":"a/1","source_version":9,"staged":12345}]}"#,
            )
            .saying("unknown to this server"),
    );
    // Unknown routes and wrong methods.
    all.push(refused("GET", "/v1/nope".into(), 404, "not_found"));
    all.push(refused("GET", "/../../etc/passwd".into(), 404, "not_found"));
    for (method, path) in [
        ("GET", "/v1/put"),
        ("DELETE", "/healthz"),
        ("POST", "/metrics"),
        ("GET", "/v1/commit"),
        ("PUT", "/v1/lookup"),
    ] {
        all.push(
            refused(method, path.into(), 405, "method_not_allowed")
                .with_body("application/json", "")
                .saying(path)
                .saying(method),
        );
    }
    // Object names that are not a content hash (path traversal) on a live snapshot lease.
    for name in ["..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "zz", ""] {
        let path = format!("/v1/snapshot/object_path?id={id}&object={name}");
        all.push(refused("GET", path, 400, "bad_request"));
    }
    let path = format!("/v1/snapshot/entry?id={id}&unit=");
    all.push(refused("GET", path, 400, "invalid_key"));
    all
}

/// Bad keys, versions, bodies, content types, routes, methods and object names: each a 4xx with
/// a JSON body saying what was wrong, and the store is as it was.
#[test]
fn hostile_requests_get_a_json_4xx_and_change_nothing() {
    let (_dir, store) = new_store();
    let s = store.to_str().unwrap();
    let out = oncelake_with_input(&["put", s, "a/1", "1", "-"], b"one");
    assert!(out.status.success(), "{out:?}");
    let server = Server::start(&store);
    let sock = Path::new(server.address.strip_prefix("unix:").unwrap()).to_path_buf();
    let sock = sock.as_path();
    let before = oncelake(&["ls", s, "--json"]).stdout;

    // A live snapshot lease, for the requests on one.
    let (status, body) = send(sock, "POST", "/v1/snapshot", "application/json", "");
    assert_eq!(status, 200, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["snapshot"]
        .as_u64()
        .unwrap();
    for r in refused_requests(id) {
        let answer = match r.body {
            None => get(sock, &r.path),
            Some((content_type, ref body)) => send(sock, r.method, &r.path, content_type, body),
        };
        let m = error_of(answer, r.status, r.kind);
        for says in &r.says {
            assert!(m.contains(says.as_str()), "{} {}: {m}", r.method, r.path);
        }
    }

    server.stop();
    assert_eq!(
        oncelake(&["ls", s, "--json"]).stdout,
        before,
        "a refused request changed the store"
    );
    let out = oncelake(&["verify", s, "--deep"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// Checks Prometheus text format 0.0.4 as a scraper reads it: every family has one HELP and one
/// TYPE line before its samples, every sample belongs to the family declared last, no series
/// (name and labels) appears twice, values are numbers, histograms are cumulative and end in
/// `+Inf` equal to their `_count`. Returns the unlabelled samples by name.
fn check_prometheus(text: &str) -> BTreeMap<String, f64> {
    let mut help = BTreeSet::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut series = BTreeSet::new();
    let mut plain = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut buckets: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split_whitespace().next().unwrap().to_string();
            assert!(rest.len() > name.len() + 1, "an empty HELP: {line}");
            assert!(help.insert(name.clone()), "a second HELP for {name}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty),
                "{line}"
            );
            assert!(help.contains(name), "TYPE before HELP: {line}");
            assert!(
                types.insert(name.to_string(), ty.to_string()).is_none(),
                "a second TYPE for {name}"
            );
            current = Some(name.to_string());
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
        let (key, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {line}"));
        let name = key.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        let family = current
            .as_deref()
            .unwrap_or_else(|| panic!("no TYPE: {line}"));
        let ty = &types[family];
        let belongs = name == family
            || (ty == "histogram"
                && [
                    format!("{family}_bucket"),
                    format!("{family}_sum"),
                    format!("{family}_count"),
                ]
                .iter()
                .any(|n| n == name));
        assert!(belongs, "{name} is not of the family {family} ({ty})");
        assert!(series.insert(key.to_string()), "a duplicate series: {key}");
        if name.ends_with("_bucket") {
            buckets.entry(family.to_string()).or_default().push(value);
            if key.contains("le=\"+Inf\"") {
                let b = &buckets[family];
                assert!(b.windows(2).all(|w| w[0] <= w[1]), "{family}: {b:?}");
            }
        } else if !key.contains('{') {
            plain.insert(name.to_string(), value);
        }
    }
    for (family, b) in &buckets {
        assert_eq!(
            b.last().copied(),
            plain.get(&format!("{family}_count")).copied(),
            "{family}: +Inf bucket != count"
        );
    }
    plain
}

/// A store with units, duplicates, a conflict and a renewed claim, served: `/metrics` parses,
/// says how many units and bytes the store holds, and the server's 400 counter counts each
/// refused request once; after a restart the store's figures are the same (never zero).
#[test]
fn metrics_parse_and_what_the_store_knows_survives_a_restart() {
    let (_dir, store) = new_store();
    let s = store.to_str().unwrap();
    let server = Server::start(&store);
    let sock = Path::new(server.address.strip_prefix("unix:").unwrap()).to_path_buf();
    let sock = sock.as_path();
    for (unit, bytes) in [("u/1", "aaaa"), ("u/2", "bbbbbbbb"), ("u/1", "aaaa")] {
        let out = oncelake_with_input(&["put", s, unit, "1", "-"], bytes.as_bytes());
        assert!(out.status.success(), "{out:?}");
    }
    let out = oncelake_with_input(&["put", s, "u/2", "1", "-"], b"other");
    assert_eq!(out.status.code(), Some(3), "a conflict: {out:?}");
    let out = oncelake(&[
        "claim", s, "c/1", "1", "--worker", "w", "--ttl", "60s", "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let renew = format!(
        r#"{{"lease":{{"unit":"c/1","worker":"w","token":{},"source_version":1,"expires_at_ms":0}},"ttl_ms":60000}}"#,
        lease["token"]
    );
    let (status, body) = send(sock, "POST", "/v1/renew", "application/json", &renew);
    assert_eq!(status, 200, "{body}");
    // Three refused requests, each counted once.
    for _ in 0..3 {
        let (status, _) = send(sock, "POST", "/v1/commit", "application/json", "{nope");
        assert_eq!(status, 400);
    }

    let (status, text) = get(sock, "/metrics");
    assert_eq!(status, 200);
    let m = check_prometheus(&text);
    assert_eq!(m["oncelake_units"], 2.0, "{text}");
    assert_eq!(m["oncelake_bytes_stored"], 12.0, "{text}");
    assert_eq!(m["oncelake_server_bad_requests_total"], 3.0, "{text}");
    let seq = m["oncelake_last_seq"];
    // The renewal is a log record: healthz reports the store's seq, not the last commit's.
    let h: serde_json::Value = serde_json::from_str(&get(sock, "/healthz").1).unwrap();
    assert_eq!(h["seq"].as_f64(), Some(seq), "{h} vs {text}");
    let served = store_figures(&m);
    let out = oncelake(&["stats", s, "--prometheus"]);
    assert!(out.status.success(), "{out:?}");
    let through = check_prometheus(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(store_figures(&through), served);
    let out = oncelake(&["stats", s, "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["bytes_stored"], 12, "{j}");
    assert_eq!(j["units"], 2, "{j}");
    server.stop();

    // A fresh process, in-process and as a restarted server: the same figures, none zero.
    let out = oncelake(&["stats", s, "--prometheus"]);
    assert!(out.status.success(), "{out:?}");
    let fresh = check_prometheus(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(store_figures(&fresh), served);
    let server = Server::start(&store);
    let (_, text) = get(sock, "/metrics");
    let restarted = check_prometheus(&text);
    assert_eq!(store_figures(&restarted), served);
    assert!(
        served.values().all(|v| *v > 0.0),
        "a figure the store knows is zero: {served:?}"
    );
    server.stop();
}

/// The figures the store itself knows (persisted or read from it), by name.
fn store_figures(m: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    [
        "oncelake_units",
        "oncelake_bytes_stored",
        "oncelake_last_seq",
        "oncelake_commits_total",
        "oncelake_units_committed_total",
        "oncelake_duplicates_collapsed_total",
        "oncelake_conflicts_total",
        "oncelake_claims_granted_total",
        "oncelake_claims_renewed_total",
    ]
    .iter()
    .map(|n| {
        let v = m
            .get(*n)
            .copied()
            .unwrap_or_else(|| panic!("no {n} in {m:?}"));
        (n.to_string(), v)
    })
    .collect()
}

/// Holds `store`'s process lock from this test process (as another process's open store does).
fn hold_lock(store: &Path) -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(store.join("LOCK"))
        .unwrap();
    f.try_lock().unwrap();
    f
}

fn spawn(args: &[&str]) -> std::process::Child {
    Command::new(bin::oncelake())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Two `serve`s wait for a store held by another process; when it lets go, one serves and the
/// other stops waiting as soon as the first announces itself: exit 6 naming the running server
/// (it used to wait out its --wait and then report the store "locked").
#[test]
fn of_two_waiting_serves_the_second_stops_when_the_first_is_ready() {
    let (_dir, store) = new_store();
    let s = store.to_str().unwrap();
    let lock = hold_lock(&store);
    let serves = [
        spawn(&["--wait", "20s", "serve", s]),
        spawn(&["--wait", "20s", "serve", s]),
    ];
    // Both are waiting for the lock (or about to): let go.
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(lock);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut servers = Vec::new();
    for mut child in serves {
        let tx = tx.clone();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        servers.push(child);
    }
    // The first line printed is the winner's ready line; the loser prints nothing on stdout.
    let ready = rx.recv().unwrap();
    assert!(ready.starts_with("serving "), "{ready:?}");
    // The loser exits by itself: find it.
    let (loser, status) = loop {
        if let Some(status) = servers[0].try_wait().unwrap() {
            break (0, status);
        }
        if let Some(status) = servers[1].try_wait().unwrap() {
            break (1, status);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    servers[loser]
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(6), "{err}");
    assert!(err.contains("already served at unix:"), "{err}");
    let mut winner = servers.remove(1 - loser);
    let _ = winner.kill();
    let _ = winner.wait();
}

/// A command waiting for a store held by another process, which a server takes over when that
/// process lets go: the command goes through the server (it used to wait out --wait and fail
/// "locked" whenever the server got the lock first). Either may get the lock first; both orders
/// must end with the put committed and the server running, so the race is run a few times.
#[test]
fn a_command_waiting_for_the_lock_goes_through_the_server_that_took_it() {
    for round in 0..4 {
        let (_dir, store) = new_store();
        let s = store.to_str().unwrap();
        let lock = hold_lock(&store);
        // Waits bounded below the test's patience: the old behaviour ends in "locked".
        let mut put = spawn(&["--wait", "20s", "put", s, "u/1", "1", "-"]);
        put.stdin.take().unwrap().write_all(b"bytes").unwrap();
        let mut serve = spawn(&["--wait", "20s", "serve", s]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(lock);
        let out = put.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "round {round}: {out:?}");
        let mut line = String::new();
        BufReader::new(serve.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("serving "), "round {round}: {line:?}");
        let server = Server {
            child: serve,
            address: String::new(),
        };
        let out = oncelake(&["ls", s, "--json"]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("\"u/1\""));
        server.stop();
    }
}

/// A request that declares a body over the limit is answered 413 at once, before any of it is
/// sent (it used to wait for the bytes until the request timeout, then answer 408); nothing is
/// staged or committed.
#[test]
fn a_declared_length_over_the_limit_is_refused_at_once() {
    let (_dir, store) = new_store();
    let server = Server::start_with(
        &store,
        &["--max-upload", "1000", "--request-timeout", "20s"],
    );
    let sock = Path::new(server.address.strip_prefix("unix:").unwrap()).to_path_buf();
    let sock = sock.as_path();
    // Only the head and a first byte are sent, the socket left open: a 408 would come after 20 s.
    let head_only = |req: &str| -> String {
        let mut c = std::os::unix::net::UnixStream::connect(sock).unwrap();
        c.write_all(req.as_bytes()).unwrap();
        let mut answer = vec![0u8; 4096];
        let n = c.read(&mut answer).unwrap();
        String::from_utf8_lossy(&answer[..n]).into_owned()
    };
    let a = head_only(
        "PUT /v1/put?unit=a&version=1 HTTP/1.1\r\nHost: l\r\nContent-Length: 5000\r\n\r\nx",
    );
    assert!(a.starts_with("HTTP/1.1 413"), "{a}");
    assert!(a.contains("larger than 1000 bytes"), "{a}");
    let a = head_only("POST /v1/stage HTTP/1.1\r\nHost: l\r\nContent-Length: 5000\r\n\r\nx");
    assert!(a.starts_with("HTTP/1.1 413"), "{a}");
    let a = head_only(&format!(
        "POST /v1/commit HTTP/1.1\r\nHost: l\r\nContent-Length: {}\r\n\r\n{{",
        (16u64 << 20) + 1
    ));
    assert!(a.starts_with("HTTP/1.1 413"), "{a}");
    assert!(a.contains("split the batch"), "{a}");
    let (_, text) = get(sock, "/metrics");
    let m = check_prometheus(&text);
    assert_eq!(m["oncelake_server_too_large_total"], 3.0, "{text}");
    assert_eq!(m["oncelake_objects_staged_total"], 0.0, "{text}");
    assert_eq!(m["oncelake_last_seq"], 0.0, "{text}");
    server.stop();
}

/// A client that asks for an object and stops reading is cut off once the answer has made no
/// progress for the request timeout: the producer thread and the file it reads are let go (they
/// used to wait for room in the socket forever). A reader that is slow but reads gets it all.
#[test]
fn a_client_that_stops_reading_is_cut_off() {
    let (_dir, store) = new_store();
    let big: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    let s = store.to_str().unwrap();
    let out = oncelake_with_input(&["put", s, "big", "1", "-"], &big);
    assert!(out.status.success(), "{out:?}");
    let server = Server::start_with(&store, &["--request-timeout", "2s"]);
    let sock = Path::new(server.address.strip_prefix("unix:").unwrap()).to_path_buf();
    let sock = sock.as_path();
    let mut stalled = std::os::unix::net::UnixStream::connect(sock).unwrap();
    stalled
        .write_all(b"GET /v1/object?unit=big HTTP/1.1\r\nHost: l\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 64];
    let n = stalled.read(&mut first).unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200"));
    // It reads no more. The server closes it (each check opens one connection of its own).
    let open = || {
        let (_, text) = get(sock, "/metrics");
        check_prometheus(&text)["oncelake_server_connections_open"]
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while open() > 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled connection is still open"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest);
    assert!(rest.len() + n < big.len(), "the answer was cut off");
    // A slow reader that keeps reading gets every byte.
    let mut c = std::os::unix::net::UnixStream::connect(sock).unwrap();
    c.write_all(b"GET /v1/object?unit=big HTTP/1.1\r\nHost: l\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut all = Vec::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = c.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n]);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let body = &all[all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
    assert_eq!(body, &big[..]);
    server.stop();
}
