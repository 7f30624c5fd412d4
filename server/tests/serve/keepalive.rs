//! Kept-alive connections: the client reuses its connections, the server answers many requests
//! on one connection, and the server's idle timeout still closes an idle connection (a client
//! whose pooled connection the server closed still gets through).

use crate::support;

use oncelake_server::wire::CommitItemW;
use oncelake_server::Client;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use support::{new_store, served_store, Server};

fn connections(c: &Client) -> u64 {
    c.stats().unwrap().server["connections"].as_u64().unwrap()
}

/// Commits `unit` at `version` with `bytes` through `c` and records it in the model.
fn commit(c: &Client, model: &mut BTreeMap<String, (u64, String)>, unit: &str, version: u64) {
    let bytes = format!("{unit} v{version}");
    let (h, _) = c.stage_reader(bytes.as_bytes()).unwrap();
    let r = c
        .commit(
            vec![CommitItemW {
                unit: unit.into(),
                source_version: version,
                staged: h,
                token: None,
                correct: false,
            }],
            false,
        )
        .unwrap();
    assert!(r.applied(), "{:?}", r.units);
    model.insert(unit.into(), (version, bytes));
}

fn check_model(c: &Client, model: &BTreeMap<String, (u64, String)>) {
    let mut seen = BTreeMap::new();
    c.ls("", None, |e| {
        seen.insert(e.unit.clone(), e.source_version);
        true
    })
    .unwrap();
    let want: BTreeMap<String, u64> = model.iter().map(|(k, v)| (k.clone(), v.0)).collect();
    assert_eq!(seen, want);
    for (unit, (_, bytes)) in model {
        let mut out = Vec::new();
        c.read_object(unit, None, &mut out).unwrap().unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), *bytes, "{unit}");
    }
}

#[test]
fn a_client_reuses_its_connections_and_every_commit_is_there() {
    let (_dir, _store, server, c) = served_store();
    let before = connections(&c);
    let mut model = BTreeMap::new();
    for i in 0..40u64 {
        let unit = format!("ka/u{}", i % 10);
        commit(&c, &mut model, &unit, i / 10 + 1);
        assert!(c.lookup(&unit).unwrap().is_some());
    }
    // 40 uploads, 40 commits and 40 lookups in a row: one connection (a few if the machine
    // stalls the client past the upload's reuse window), not one per call.
    let used = connections(&c) - before;
    assert!(used <= 5, "{used} connections for 120 calls");
    assert_eq!(c.idle_connections(), 1);
    check_model(&c, &model);

    // Shared by threads, the pool holds at most one idle connection per concurrent call.
    std::thread::scope(|s| {
        for t in 0..8 {
            let c = c.clone();
            s.spawn(move || {
                for _ in 0..20 {
                    c.health().unwrap();
                    c.lookup(&format!("ka/u{t}")).unwrap();
                }
            });
        }
    });
    assert!((1..=8).contains(&c.idle_connections()), "{c:?}");
    drop(c);
    server.stop();
}

/// One raw request without `Connection: close`; the answer's body.
fn raw_get(conn: &mut BufReader<UnixStream>, path: &str) -> String {
    write!(
        conn.get_mut(),
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut len = 0usize;
    let mut line = String::new();
    conn.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line:?}");
    loop {
        line.clear();
        conn.read_line(&mut line).unwrap();
        if line.trim_end().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

#[test]
fn the_server_answers_many_requests_on_one_connection_and_closes_idle_ones() {
    let (_dir, store) = new_store();
    let server = Server::start_with(&store, &["--request-timeout", "1s"]);
    let path = store.join("serve.sock");
    let mut conn = BufReader::new(UnixStream::connect(&path).unwrap());
    for _ in 0..5 {
        assert!(raw_get(&mut conn, "/healthz").contains("\"ok\":true"));
    }
    // Idle past the server's timeout: the server closes the connection (end of stream, not a
    // hang).
    conn.get_ref()
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let t0 = std::time::Instant::now();
    let mut rest = Vec::new();
    let n = conn.read_to_end(&mut rest).unwrap_or(0);
    assert_eq!(n, 0, "unexpected bytes on an idle connection: {rest:?}");
    assert!(t0.elapsed() < Duration::from_secs(15));

    // A client whose pooled connection the server closed meanwhile still gets through, and
    // nothing is committed twice or lost.
    let c = Client::for_store(&store).unwrap();
    let mut model = BTreeMap::new();
    for round in 1..=3u64 {
        commit(&c, &mut model, "ka/idle", round);
        commit(&c, &mut model, &format!("ka/r{round}"), 1);
        std::thread::sleep(Duration::from_millis(1_300));
    }
    check_model(&c, &model);
    assert_eq!(
        c.stats().unwrap().counters["commits"],
        6,
        "every commit applied exactly once"
    );
    drop(c);
    server.stop();
}
