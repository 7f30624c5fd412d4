//! A server shut down while its clients misbehave: SIGTERM arrives while client threads commit,
//! while raw connections send a put or a commit and hang up before the answer, and while others
//! have sent half a body and wait. The server exits 0 in bounded time, removes its files and
//! releases its lock; the store then holds every commit a client saw acknowledged and nothing
//! nobody sent, verifies intact, and a new server serves it.

use crate::support;

use oncelake_server::wire::CommitItemW;
use oncelake_server::Client;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{new_store, Server};

/// Client threads (each writes its own units in turn, with rising versions).
const CLIENTS: usize = 6;
/// Threads that send a request on a raw connection and hang up before the answer.
const DROPPERS: usize = 3;
/// Acknowledged commits before the SIGTERM, so that it lands in a busy server.
const ACKED_BEFORE_TERM: u64 = 30;
/// Bounds that only a hang exceeds (the machine may be loaded: never a speed check).
const GENEROUS: Duration = Duration::from_secs(60);

/// The bytes sent as `unit` at `version`, so that the store's bytes name what was sent.
fn bytes_of(unit: &str, version: u64) -> Vec<u8> {
    format!("{unit} v{version};").repeat(16).into_bytes()
}

/// A commit item of `unit` at `version`, staged as `staged`.
fn item(unit: &str, version: u64, staged: u64) -> CommitItemW {
    CommitItemW {
        unit: unit.into(),
        source_version: version,
        staged,
        token: None,
        correct: false,
    }
}

/// What the clients sent (unit → versions) and saw acknowledged (unit → newest version).
#[derive(Default)]
struct Model {
    sent: BTreeMap<String, BTreeSet<u64>>,
    acked: BTreeMap<String, u64>,
}

type Shared = Arc<Mutex<Model>>;

fn note_sent(model: &Shared, unit: &str, version: u64) {
    let mut m = model.lock().unwrap();
    m.sent.entry(unit.to_string()).or_default().insert(version);
}

/// Where raw connections go, and the credential a TCP server wants.
#[derive(Clone)]
struct Endpoint {
    address: String,
    auth: String,
}

/// A raw connection of either kind.
trait Conn: Read + Write + Send {}
impl<T: Read + Write + Send> Conn for T {}

impl Endpoint {
    fn of(server: &Server, store: &Path) -> Endpoint {
        let info: serde_json::Value =
            serde_json::from_slice(&std::fs::read(store.join("serve.json")).unwrap()).unwrap();
        let auth = match info["token"].as_str() {
            Some(t) => format!("Authorization: Bearer {t}\r\n"),
            None => String::new(),
        };
        Endpoint {
            address: server.address.clone(),
            auth,
        }
    }

    fn connect(&self) -> std::io::Result<Box<dyn Conn>> {
        Ok(match self.address.strip_prefix("unix:") {
            Some(path) => Box::new(std::os::unix::net::UnixStream::connect(path)?),
            None => Box::new(std::net::TcpStream::connect(
                self.address.strip_prefix("tcp:").unwrap(),
            )?),
        })
    }

    /// A request's head declaring a body of `len` bytes.
    fn head(&self, method: &str, path: &str, len: usize, close: bool) -> String {
        let close = if close { "Connection: close\r\n" } else { "" };
        format!(
            "{method} {path} HTTP/1.1\r\nHost: l\r\n{}{close}Content-Length: {len}\r\n\r\n",
            self.auth
        )
    }

    /// Stages `body` on a connection of its own: the handle, if the server answered with one.
    fn stage(&self, body: &[u8]) -> Option<u64> {
        let mut c = self.connect().ok()?;
        c.write_all(self.head("POST", "/v1/stage", body.len(), true).as_bytes())
            .ok()?;
        c.write_all(body).ok()?;
        let mut answer = String::new();
        c.read_to_string(&mut answer).ok()?;
        let (_, json) = answer.split_once("\r\n\r\n")?;
        serde_json::from_str::<serde_json::Value>(json).ok()?["staged"].as_u64()
    }

    /// Sends a put, or a stage and then a commit, of `unit` at version 1, and hangs up `after`
    /// without reading the answer. False once the server no longer takes connections.
    fn send_and_hang_up(
        &self,
        model: &Shared,
        unit: &str,
        by_commit: bool,
        after: Duration,
    ) -> bool {
        let body = bytes_of(unit, 1);
        let (path, body) = if by_commit {
            let Some(staged) = self.stage(&body) else {
                return false;
            };
            let items = [item(unit, 1, staged)];
            let json = serde_json::json!({ "items": items }).to_string();
            ("/v1/commit".to_string(), json.into_bytes())
        } else {
            (format!("/v1/put?unit={unit}&version=1"), body)
        };
        let Ok(mut c) = self.connect() else {
            return false;
        };
        note_sent(model, unit, 1);
        let method = if by_commit { "POST" } else { "PUT" };
        let head = self.head(method, &path, body.len(), false);
        let sent = c.write_all(head.as_bytes()).is_ok() && c.write_all(&body).is_ok();
        std::thread::sleep(after);
        sent
    }

    /// A put or a commit whose body stops half way, the connection left open.
    fn half_sent(&self, unit: &str, commit: bool) -> Box<dyn Conn> {
        let (method, path) = if commit {
            ("POST", "/v1/commit".to_string())
        } else {
            ("PUT", format!("/v1/put?unit={unit}&version=1"))
        };
        let body = if commit {
            format!(r#"{{"items":[{{"unit":"{unit}","source_version":1,"staged":1}}]}}"#)
                .into_bytes()
        } else {
            bytes_of(unit, 1)
        };
        let mut c = self.connect().unwrap();
        c.write_all(self.head(method, &path, body.len(), false).as_bytes())
            .unwrap();
        c.write_all(&body[..body.len() / 2]).unwrap();
        c
    }
}

/// The client threads that have had a commit acknowledged.
fn writers_answered(model: &Shared) -> usize {
    let m = model.lock().unwrap();
    let writers: BTreeSet<&str> = m.acked.keys().filter_map(|u| u.split('/').next()).collect();
    writers.len()
}

/// Puts (even threads) or stages and commits (odd ones) its units in turn until the server is
/// gone; every answer before that must be a commit or a duplicate (of a retried request).
fn client_writer(client: Client, t: usize, model: Shared, acks: Arc<AtomicU64>) {
    for i in 0u64.. {
        let unit = format!("c{t}/u{}", i % 4);
        let version = i / 4 + 1;
        let bytes = bytes_of(&unit, version);
        note_sent(&model, &unit, version);
        let outcome = if t.is_multiple_of(2) {
            client
                .put_reader(&unit, version, None, false, &bytes[..])
                .map(|(o, _)| o)
        } else {
            client.stage_reader(&bytes[..]).and_then(|(staged, _)| {
                let mut r = client.commit(vec![item(&unit, version, staged)], false)?;
                Ok(r.units.remove(0))
            })
        };
        let Ok(o) = outcome else { return };
        let name = o.outcome.name();
        assert!(
            name == "committed" || name == "duplicate",
            "{unit} v{version}: {o:?}"
        );
        model.lock().unwrap().acked.insert(unit, version);
        acks.fetch_add(1, Ordering::Relaxed);
    }
}

/// The store, opened in-process at once (the server released its lock) and closed by the server,
/// against the model: every acknowledged version (or a later one sent) is there with its bytes,
/// nothing that was not sent, nothing of a half-sent request; and it verifies.
fn check_store(store: &Path, model: &Model, half: &[String]) {
    let opts = oncelake::Options {
        lock_wait: Duration::ZERO,
        ..Default::default()
    };
    let s = oncelake::Store::open_with(store, opts)
        .unwrap_or_else(|e| panic!("the stopped server left the store unopenable: {e}"));
    // Closed, not just gone: the close persisted the index as of the last commit.
    let closed_at = s.open_report().snapshot_seq;
    assert_eq!(
        closed_at,
        Some(s.last_seq().unwrap()),
        "the server did not close the store"
    );
    let snap = s.snapshot().unwrap();
    let mut found = BTreeMap::new();
    for e in snap.iter().unwrap() {
        let e = e.unwrap();
        let sent = model.sent.get(&e.unit);
        assert!(
            sent.is_some_and(|v| v.contains(&e.source_version)),
            "{} holds v{}, which nobody sent",
            e.unit,
            e.source_version
        );
        let bytes = snap.read_object(&e).unwrap();
        assert_eq!(bytes, bytes_of(&e.unit, e.source_version), "{}", e.unit);
        found.insert(e.unit.clone(), e.source_version);
    }
    for (unit, acked) in &model.acked {
        let held = found.get(unit).copied();
        assert!(
            held.is_some_and(|v| v >= *acked),
            "{unit}: v{acked} was acknowledged, the store holds {held:?}"
        );
    }
    for unit in half {
        assert!(!found.contains_key(unit), "{unit} was only half sent");
    }
    let report = s.verify(oncelake::VerifyOptions { deep: true }).unwrap();
    assert!(report.is_ok(), "{report:?}");
}

fn shutdown_while_clients_misbehave(extra: &[&str]) {
    let (_dir, store) = new_store();
    // A stalled body is given up after 5 s, well within the drain's 30 s.
    let args = [extra, &["--request-timeout", "5s"]].concat();
    let mut server = Server::start_with(&store, &args);
    let endpoint = Endpoint::of(&server, &store);
    let client = Client::for_store(&store).unwrap();
    let model: Shared = Arc::default();
    let acks = Arc::new(AtomicU64::new(0));
    let gone = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for t in 0..CLIENTS {
        let (c, m, a) = (client.clone(), model.clone(), acks.clone());
        threads.push(std::thread::spawn(move || client_writer(c, t, m, a)));
    }
    for d in 0..DROPPERS {
        let (ep, m, gone) = (endpoint.clone(), model.clone(), gone.clone());
        threads.push(std::thread::spawn(move || {
            for i in 0.. {
                let unit = format!("raw{d}/u{i}");
                // Hung up at once (the request may not even be read), or a little later (its
                // write may be queued already).
                let after = Duration::from_millis(i % 5 * 3);
                if gone.load(Ordering::Relaxed)
                    || !ep.send_and_hang_up(&m, &unit, i % 2 == 1, after)
                {
                    return;
                }
            }
        }));
    }
    let half: Vec<String> = (0..4).map(|i| format!("half/u{i}")).collect();
    let held: Vec<_> = half
        .iter()
        .enumerate()
        .map(|(i, unit)| endpoint.half_sent(unit, i % 2 == 1))
        .collect();
    // The SIGTERM lands in a busy server: every writer has been answered, and many times.
    let t0 = Instant::now();
    while acks.load(Ordering::Relaxed) < ACKED_BEFORE_TERM || writers_answered(&model) < CLIENTS {
        let stopped = threads[..CLIENTS].iter().any(|t| t.is_finished());
        assert!(
            !stopped && t0.elapsed() < GENEROUS,
            "a writer stopped, or too few answers: {} after {:?}",
            acks.load(Ordering::Relaxed),
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let status = server.terminate_within(GENEROUS);
    gone.store(true, Ordering::Relaxed);
    assert!(status.is_some(), "the server did not exit after SIGTERM");
    assert!(status.unwrap().success(), "{status:?}");
    for t in threads {
        t.join().unwrap();
    }
    drop(held);
    drop(client);
    for file in ["serve.sock", "serve.json"] {
        assert!(!store.join(file).exists(), "the server left {file}");
    }
    let model = model.lock().unwrap();
    check_store(&store, &model, &half);

    // A new server takes the store and answers.
    let server = Server::start_with(&store, extra);
    let client = Client::for_store(&store).unwrap();
    let (unit, acked) = model.acked.iter().next().unwrap();
    let held = client.lookup(unit).unwrap().unwrap();
    assert!(held.source_version >= *acked, "{unit}: {held:?}");
    drop(client);
    server.stop();
}

#[test]
fn a_server_shut_down_on_its_unix_socket_keeps_every_acknowledged_commit() {
    shutdown_while_clients_misbehave(&[]);
}

#[test]
fn a_server_shut_down_on_tcp_keeps_every_acknowledged_commit() {
    shutdown_while_clients_misbehave(&["--listen", "127.0.0.1:0"]);
}

/// Commits sent by clients that hang up at once, then a SIGTERM at once: the drain has nothing to
/// wait for while those writes are still queued, and the store's last handle is then a
/// submission thread's, which closes it. The server waits for that close (the index it persists
/// is the last commit's) instead of exiting in the middle of it. A race, so several rounds.
#[test]
fn the_store_is_closed_after_the_writes_of_clients_that_hung_up() {
    for round in 0..6u64 {
        let (_dir, store) = new_store();
        let mut server = Server::start(&store);
        let endpoint = Endpoint::of(&server, &store);
        let model: Shared = Arc::default();
        let units: Vec<String> = (0..16).map(|i| format!("gone/u{i}")).collect();
        let staged: Vec<u64> = units
            .iter()
            .map(|u| endpoint.stage(&bytes_of(u, 1)).unwrap())
            .collect();
        let hung_up: Vec<_> = units
            .iter()
            .zip(staged)
            .map(|(unit, s)| {
                let json = serde_json::json!({ "items": [item(unit, 1, s)] }).to_string();
                let mut c = endpoint.connect().unwrap();
                let head = endpoint.head("POST", "/v1/commit", json.len(), false);
                c.write_all(head.as_bytes()).unwrap();
                c.write_all(json.as_bytes()).unwrap();
                note_sent(&model, unit, 1);
                c
            })
            .collect();
        std::thread::sleep(Duration::from_millis(round % 3));
        drop(hung_up);
        let status = server.terminate_within(GENEROUS);
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
        check_store(&store, &model.lock().unwrap(), &[]);
    }
}
