//! The status page's server side (SPEC R25, docs/server.md "The status page"): `GET
//! /v1/overview` against a model of what was committed, GC'd, verified and defined, and the
//! authentication on TCP — only the page's three files answer without the token. The page itself
//! is tested in a real browser by `tests/python/test_status_page.py`.

use crate::support;

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use support::{new_store, Server};

/// Where a request goes: the Unix socket, or TCP with an optional bearer token.
enum To<'a> {
    Unix(&'a Path),
    Tcp(&'a str, Option<&'a str>),
}

/// One request on a fresh connection: (status, head, body).
fn call(to: &To, method: &str, path: &str, body: &[u8]) -> (u16, String, String) {
    let auth = match to {
        To::Tcp(_, Some(t)) => format!("Authorization: Bearer {t}\r\n"),
        _ => String::new(),
    };
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: l\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let mut answer = String::new();
    match to {
        To::Unix(sock) => {
            let mut c = std::os::unix::net::UnixStream::connect(sock).unwrap();
            c.write_all(&req).unwrap();
            c.read_to_string(&mut answer).unwrap();
        }
        To::Tcp(addr, _) => {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.write_all(&req).unwrap();
            c.read_to_string(&mut answer).unwrap();
        }
    }
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn json_of(to: &To, method: &str, path: &str, body: &[u8]) -> Value {
    let (status, _, body) = call(to, method, path, body);
    assert_eq!(status, 200, "{method} {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {body}"))
}

fn put(to: &To, unit: &str, version: u64, bytes: &[u8]) -> Value {
    let q = format!(
        "/v1/put?unit={}&version={version}",
        unit.replace('=', "%3D")
    );
    json_of(to, "PUT", &q, bytes)
}

const PIPELINE: &str = "[stage.load]\ncode_version = 1\n[stage.sum]\ncode_version = 4\nupstream = [\"load\"]\n[stage.top]\ncode_version = 1\nupstream = [\"load\", \"sum\"]\n";

#[test]
fn overview_lists_what_the_model_holds() {
    let (_tmp, store) = new_store();
    let server = Server::start(&store);
    let sock = store.join("serve.sock");
    let to = To::Unix(&sock);

    let empty = json_of(&to, "GET", "/v1/overview", b"");
    assert_eq!(empty["records"], json!([]));
    assert!(empty["gc"].is_null() && empty["verify"].is_null() && empty["pipeline"].is_null());

    // seq -> (unit, version, size) of every commit record, from the answers.
    let mut model: BTreeMap<u64, (String, u64, u64)> = BTreeMap::new();
    for i in 0..30u64 {
        let unit = format!("orders/d={}", i % 12);
        let bytes = vec![b'x'; 10 + i as usize];
        let a = put(&to, &unit, i / 12 + 1, &bytes);
        assert_eq!(a["outcome"], "committed", "{a}");
        model.insert(
            a["seq"].as_u64().unwrap(),
            (unit, i / 12 + 1, bytes.len() as u64),
        );
    }
    // A duplicate writes no record: the list does not change.
    assert_eq!(
        put(&to, "orders/d=0", 3, &[b'x'; 34])["outcome"],
        "duplicate"
    );

    let ov = json_of(&to, "GET", "/v1/overview?records=7", b"");
    let newest: Vec<_> = model.iter().rev().take(7).collect();
    let records = ov["records"].as_array().unwrap();
    assert_eq!(records.len(), 7);
    assert_eq!(ov["seq"].as_u64(), model.keys().next_back().copied());
    for (r, (seq, (unit, version, size))) in records.iter().zip(newest) {
        assert_eq!(r["seq"].as_u64(), Some(*seq));
        assert_eq!(r["kind"], "commit");
        assert_eq!(
            r["units"],
            json!([{"unit": unit, "version": version, "size": size}])
        );
    }
    let all = json_of(&to, "GET", "/v1/overview?records=100000", b"");
    assert_eq!(all["records"].as_array().unwrap().len(), model.len());
    let (status, _, _) = call(&to, "GET", "/v1/overview?records=many", b"");
    assert_eq!(status, 400);

    // GC and verify: the latest run through this server, as its answers said.
    let gc = json_of(&to, "POST", "/v1/gc", br#"{"grace_ms":0}"#);
    let verify = json_of(&to, "POST", "/v1/verify", b"{}");
    let ov = json_of(&to, "GET", "/v1/overview", b"");
    assert_eq!(ov["gc"]["objects"], gc["objects"]);
    assert_eq!(ov["gc"]["objects_referenced"], gc["objects_referenced"]);
    assert_eq!(ov["verify"]["ok"], true);
    assert_eq!(ov["verify"]["entries_checked"], verify["entries_checked"]);
    assert_eq!(ov["verify"]["problems"], 0);

    // The recorded pipeline: its stages, their upstream stages and the counts of status.
    let def = json!({ "pipeline": PIPELINE }).to_string();
    json_of(&to, "POST", "/v1/pipeline/define", def.as_bytes());
    for u in ["a", "b", "c"] {
        json_of(
            &to,
            "PUT",
            &format!("/v1/pipeline/source?unit={u}&version=1"),
            u.as_bytes(),
        );
    }
    let latest = json_of(&to, "GET", "/v1/overview?records=4", b"");
    assert_eq!(latest["records"][3]["kind"], "definition", "{latest}");
    let status = json_of(&to, "POST", "/v1/pipeline/status", def.as_bytes());
    let p = &json_of(&to, "GET", "/v1/overview", b"")["pipeline"];
    assert_eq!(p["units"], 3);
    let upstream: BTreeMap<&str, Value> = [
        ("load", json!([])),
        ("sum", json!(["load"])),
        ("top", json!(["load", "sum"])),
    ]
    .into();
    let stages = p["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 3);
    for (s, st) in stages.iter().zip(status["stages"].as_array().unwrap()) {
        assert_eq!(s["upstream"], upstream[s["stage"].as_str().unwrap()], "{s}");
        for k in [
            "stage",
            "code_version",
            "done",
            "ready",
            "running",
            "blocked",
            "failed",
            "cut_off",
        ] {
            assert_eq!(s[k], st[k], "{k} of {s}");
        }
    }
    assert_eq!(stages[0]["ready"], 3);
    assert_eq!(stages[1]["blocked"], 3);
    server.stop();
}

#[test]
fn only_the_page_files_answer_without_the_token_on_tcp() {
    let (_tmp, store) = new_store();
    let server = Server::start_with(&store, &["--listen", "127.0.0.1:0"]);
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(store.join("serve.json")).unwrap()).unwrap();
    let token = info["token"].as_str().unwrap();
    let addr = server.address.trim_start_matches("tcp:").to_string();
    let anyone = To::Tcp(&addr, None);
    let owner = To::Tcp(&addr, Some(token));
    put(&owner, "secret/unit", 1, b"payload");

    for (path, kind) in [
        ("/", "text/html"),
        ("/status-page/app.js", "text/javascript"),
        ("/status-page/style.css", "text/css"),
    ] {
        let (status, head, body) = call(&anyone, "GET", path, b"");
        assert_eq!(status, 200, "{path}");
        assert!(head.contains(&format!("content-type: {kind}")), "{head}");
        assert!(
            head.contains("content-security-policy: default-src 'none'"),
            "{head}"
        );
        assert!(head.contains("x-frame-options: deny"), "{head}");
        assert!(
            !body.contains("secret/unit") && !body.contains(token),
            "{path}"
        );
    }
    let page = call(&anyone, "GET", "/", b"").2;
    assert!(page.contains("/status-page/app.js") && !page.contains("<script>"));

    let before = json_of(&owner, "GET", "/v1/stats", b"")["server"]["unauthorized"]
        .as_u64()
        .unwrap();
    let refused = [
        ("GET", "/v1/overview"),
        ("GET", "/v1/stats"),
        ("GET", "/metrics"),
        ("GET", "/v1/ls"),
        ("GET", "/status-page/other.js"),
        ("GET", "/favicon.ico"),
        ("POST", "/"),
        ("PUT", "/status-page/app.js"),
    ];
    for (method, path) in refused {
        let (status, _, body) = call(&anyone, method, path, b"");
        assert_eq!(status, 401, "{method} {path}: {body}");
        assert!(!body.contains("secret/unit"));
    }
    let after = json_of(&owner, "GET", "/v1/stats", b"")["server"]["unauthorized"]
        .as_u64()
        .unwrap();
    assert_eq!(after - before, refused.len() as u64);
    let ov = json_of(&owner, "GET", "/v1/overview", b"");
    assert_eq!(ov["records"][0]["units"][0]["unit"], "secret/unit");
    server.stop();
}
