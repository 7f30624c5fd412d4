//! Unit tests of the transport.

use super::*;
use crate::client::{Asked, Verified};
use crate::conn::{Conn, PollFirst};
use crate::discovery::Address;
use crate::http1::{encode, Chunked};
use crate::pool::{Pool, Pooled, POOL_IDLE};
use std::io::{BufReader, Read, Write};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn poll_first_reads_data_end_of_stream_and_times_out_like_a_socket_timeout() {
    let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut c = PollFirst::new(ours);
    c.set_timeouts(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 8];
    let t0 = std::time::Instant::now();
    let e = c.read(&mut buf).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
    assert!(
        t0.elapsed() >= Duration::from_millis(40),
        "{:?}",
        t0.elapsed()
    );
    theirs.write_all(b"answer").unwrap();
    assert_eq!(c.read(&mut buf).unwrap(), 6);
    assert_eq!(&buf[..6], b"answer");
    c.write_all(b"req").unwrap();
    let mut got = [0u8; 3];
    theirs.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"req");
    drop(theirs);
    assert_eq!(c.read(&mut buf).unwrap(), 0, "end of stream");
}

/// A pool whose connections were kept by another process (a fork's parent, as a child sees
/// its inherited pool) hands none of them out, and keeps this process' own from then on.
#[test]
fn a_pool_inherited_across_a_fork_hands_out_none_of_the_parents_connections() {
    let pool = Pool::default();
    let conn = || -> Pooled {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        std::mem::forget(theirs); // keep the peer open: the connection looks idle and healthy
        BufReader::new(Box::new(ours))
    };
    pool.put(conn(), None);
    assert!(
        pool.take(POOL_IDLE).is_some(),
        "this process' own connection"
    );
    pool.put(conn(), None);
    pool.put(conn(), None);
    assert_eq!(pool.len(), 2);
    // As in a child: the pool's connections belong to another process.
    pool.idle.lock().unwrap().owner = std::process::id().wrapping_add(1);
    assert!(pool.take(POOL_IDLE).is_none(), "a connection of the parent");
    assert_eq!(pool.len(), 0, "the inherited connections are dropped");
    pool.put(conn(), None);
    assert!(pool.take(POOL_IDLE).is_some(), "the child's own connection");
}

#[test]
fn chunked_bodies_decode_and_a_cut_is_an_error() {
    let whole = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    let mut out = String::new();
    Chunked {
        inner: &whole[..],
        left: 0,
        done: false,
    }
    .read_to_string(&mut out)
    .unwrap();
    assert_eq!(out, "abcde");
    let cut = b"3\r\nabc\r\n2\r\nd";
    let mut out = String::new();
    let r = Chunked {
        inner: &cut[..],
        left: 0,
        done: false,
    }
    .read_to_string(&mut out);
    assert!(r.is_err(), "a cut body must not look complete: {out:?}");
}

/// What a stranger may answer the identity question with — an endless line, bytes that are
/// not text, a plausible answer without the right MAC — proves nothing and is read no
/// further than an answer's length.
#[test]
fn a_strangers_answers_to_the_identity_question_prove_nothing() {
    let info = discovery::ServeInfo {
        address: "unix:/nowhere".into(),
        pid: 1,
        token: None,
        key: Some("ab".repeat(32)),
        store_id: Some(7),
    };
    let dir = crate::identity::DirId { dev: 1, ino: 2 };
    let client = Client {
        address: Address::Unix("/nowhere".into()),
        token: None,
        timeout: Some(Duration::from_secs(2)),
        pool: Arc::default(),
        verified: Some(Arc::new(Verified {
            store: "/s".into(),
            pid: 1,
            expect: crate::identity::Expected::new(&info, dir).unwrap(),
        })),
    };
    let forged = serde_json::json!({
        "store_id": 7, "pid": 1, "path": "/s", "dir": {"dev": 1, "ino": 2},
        "mac": "00".repeat(32),
    })
    .to_string();
    let answers: [Vec<u8>; 3] = [
        vec![b'A'; 1 << 20],
        b"\xff\xfe\r\n\r\n".to_vec(),
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{forged}",
            forged.len()
        )
        .into_bytes(),
    ];
    for answer in answers {
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let peer = std::thread::spawn(move || {
            let mut q = Vec::new();
            let mut b = [0u8; 512];
            while !q.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = theirs.read(&mut b).unwrap();
                q.extend_from_slice(&b[..n]);
            }
            let _ = theirs.write_all(&answer);
            // Kept open until the client is done: an end of stream would answer for it.
            let _ = theirs.read(&mut b);
            q
        });
        let mut conn: Box<dyn Conn> = Box::new(PollFirst::new(ours));
        conn.set_timeouts(client.timeout).unwrap();
        let r = client.ask_identity(&mut conn);
        assert!(
            matches!(r, Err(Asked::NotProved(_))),
            "{:?}",
            r.err().map(|e| client.asked_error(e))
        );
        drop(conn);
        let question = String::from_utf8(peer.join().unwrap()).unwrap();
        assert!(
            question.starts_with("GET /v1/identity?nonce="),
            "{question}"
        );
        assert!(!question.contains("Authorization"), "{question}");
    }
}

/// The refusals name what was found and say what to do, in one clean sentence each.
#[test]
fn refusals_name_the_address_and_pid_and_read_cleanly() {
    let not_its = ClientError::NotItsServer {
        store: "/s".into(),
        address: "tcp:127.0.0.1:9".into(),
        pid: 41,
        found: "it answered HTTP 404".into(),
    }
    .to_string();
    let silent = ClientError::NoAnswer {
        store: "/s".into(),
        address: "unix:/s/serve.sock".into(),
        pid: 42,
        running: false,
        waited: Duration::from_secs(1),
    }
    .to_string();
    for (m, what) in [
        (
            &not_its,
            ["tcp:127.0.0.1:9", "pid 41", "HTTP 404", "oncelake serve /s"],
        ),
        (
            &silent,
            [
                "unix:/s/serve.sock",
                "pid 42, no longer running",
                "1s",
                "kill 42",
            ],
        ),
    ] {
        for w in what {
            assert!(m.contains(w), "{w:?} missing: {m}");
        }
        assert!(!m.contains("  "), "{m}");
    }
}

#[test]
fn query_values_are_percent_encoded() {
    assert_eq!(encode("a/b=c d&e"), "a%2Fb%3Dc%20d%26e");
    assert_eq!(encode("é"), "%C3%A9");
}

/// The table answers are the engine's types; their JSON is the HTTP API's, field for field and
/// in the order the mirrors they replaced sent, and reads back to the same value.
#[test]
fn table_answers_keep_their_wire_json() {
    use oncelake::table::TableStatus;
    use oncelake::table::{position::Position, PublishReport, Skipped, TableDef, TableFormat};
    let t = TableStatus {
        def: TableDef {
            name: "sales".into(),
            format: TableFormat::Delta,
            prefix: "sales/".into(),
        },
        path: "/s/tables/sales".into(),
        position: Position {
            version: Some(2),
            seq: 7,
        },
    };
    let j = serde_json::to_string(&t).unwrap();
    assert_eq!(
        j,
        r#"{"table":"sales","format":"delta","prefix":"sales/","path":"/s/tables/sales","version":2,"seq":7}"#
    );
    assert_eq!(serde_json::from_str::<TableStatus>(&j).unwrap(), t);
    let none = r#"{"table":"t","format":"delta","prefix":"","path":"/p","version":null,"seq":0}"#;
    let back: TableStatus = serde_json::from_str(none).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), none);

    let r = PublishReport {
        table: "sales".into(),
        app_id: "oncelake:abc:sales".into(),
        versions: 1,
        adds: 2,
        removes: 0,
        skipped: vec![Skipped {
            unit: "sales/d=1/b".into(),
            seq: 4,
        }],
        version: Some(0),
        seq: 5,
    };
    let j = serde_json::to_string(&r).unwrap();
    assert_eq!(
        j,
        r#"{"table":"sales","app_id":"oncelake:abc:sales","versions":1,"adds":2,"removes":0,"skipped":[{"unit":"sales/d=1/b","seq":4}],"version":0,"seq":5}"#
    );
    assert_eq!(serde_json::from_str::<PublishReport>(&j).unwrap(), r);
}
