//! A client talks only to the server of its own store (SPEC R20): a dead server's TCP port taken
//! over by another process, a copied store directory, and a server that accepts but never
//! answers. Each fake server here is a plain `TcpListener` that records every byte it is sent.

use crate::support;

use oncelake_server::{Client, ClientError};
use std::collections::BTreeSet;
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

/// A process on a port: accepts every connection, records what it is sent, and answers each
/// request head with `answer` (or never, when `None`).
struct Squatter {
    received: Arc<Mutex<Vec<u8>>>,
}

impl Squatter {
    fn on(listener: TcpListener, answer: Option<&'static str>) -> Squatter {
        let received = Arc::new(Mutex::new(Vec::new()));
        let r = received.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let r = r.clone();
                std::thread::spawn(move || {
                    use std::io::Write;
                    let mut buf = [0u8; 64 << 10];
                    let mut seen = Vec::new();
                    loop {
                        let n = match conn.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        r.lock().unwrap().extend_from_slice(&buf[..n]);
                        seen.extend_from_slice(&buf[..n]);
                        // One answer per request head seen: what a careless or hostile HTTP
                        // server does.
                        while let Some(i) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..i + 4);
                            if let Some(a) = answer {
                                let _ = conn.write_all(a.as_bytes());
                            }
                        }
                    }
                });
            }
        });
        Squatter { received }
    }

    fn received(&self) -> Vec<u8> {
        self.received.lock().unwrap().clone()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn serve_json(store: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(store.join("serve.json")).unwrap()).unwrap()
}

/// An answer that would pass for a put's (and for anything the old client asked first).
const PLAUSIBLE: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";

/// The units listed by `ls` (through the store's server when one proves itself).
fn units(store: &Path) -> BTreeSet<String> {
    let (code, out) = run(&["ls", store.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{out}");
    out.lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["unit"].as_str().map(str::to_string)
        })
        .collect()
}

/// A SIGKILLed TCP server's port taken over by another process: the CLI's `put`, a new `Client`
/// and a `Client` made while the server was alive all refuse, clearly, and the squatter never
/// gets the token or a byte of the payload.
#[test]
fn a_dead_servers_port_taken_over_gets_neither_token_nor_payload() {
    let (_dir, store) = new_store();
    let s = store.to_str().unwrap();
    let server = Server::start_with(&store, &["--listen", "127.0.0.1:0"]);
    let addr = server.address.strip_prefix("tcp:").unwrap().to_string();
    let token = serve_json(&store)["token"].as_str().unwrap().to_string();
    let early = Client::for_store(&store).unwrap();
    early
        .put_reader("before", 1, None, false, &b"b"[..])
        .unwrap();
    drop(server); // SIGKILL: serve.json stays behind
    assert!(store.join("serve.json").exists());
    let squatter = Squatter::on(TcpListener::bind(&addr).unwrap(), Some(PLAUSIBLE));

    let payload = b"PAYLOAD-only-for-the-real-server";
    let nothing_sent = |what: &str| {
        let got = squatter.received();
        assert!(
            !got.is_empty(),
            "{what}: the squatter was asked (so the test tests something)"
        );
        assert!(
            !contains(&got, token.as_bytes()),
            "{what}: the token reached the squatter"
        );
        assert!(
            !contains(&got, b"Authorization"),
            "{what}: a credential reached the squatter"
        );
        assert!(
            !contains(&got, payload),
            "{what}: the payload reached the squatter"
        );
        assert!(
            !contains(&got, b"/v1/put"),
            "{what}: a put reached the squatter"
        );
    };
    let out = oncelake_with_input(&["put", s, "u", "1", "-"], payload);
    nothing_sent("put");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("committed"),
        "{out:?}"
    );
    assert!(err.contains("is not the server of"), "{err}");
    assert!(
        err.contains(&addr),
        "the message names what answered: {err}"
    );
    let json = oncelake_with_input(&["put", s, "u", "1", "-", "--json"], payload);
    let e: serde_json::Value = serde_json::from_slice(&json.stderr).unwrap();
    assert_eq!(e["error"], "impostor", "{e}");

    match Client::for_store(&store) {
        Err(ClientError::NotItsServer { address, .. }) => assert!(address.contains(&addr)),
        other => panic!("{other:?}"),
    }
    // A client made while the real server lived: its next connection asks first too.
    match early.put_reader("u", 1, None, false, &payload[..]) {
        Err(ClientError::NotItsServer { .. }) => {}
        other => panic!("{other:?}"),
    }
    nothing_sent("Client");

    // A new `serve` is not stopped by the stranger (the lock decides) and replaces serve.json;
    // the store holds only what the real server committed.
    let again = Server::start(&store);
    assert_eq!(units(&store), BTreeSet::from(["before".to_string()]));
    again.stop();
    nothing_sent("after");
}

/// A copy (`cp -a`) of a served store carries the original's `serve.json`: a put through the
/// copy must not change the original. The copy is not served, so it is opened in-process.
#[test]
fn a_put_through_a_copy_of_a_served_store_never_writes_the_original() {
    for listen in [None, Some("127.0.0.1:0")] {
        let (dir, store) = new_store();
        put(&store, "orig", 1, b"o");
        let extra: Vec<&str> = listen.map(|l| vec!["--listen", l]).unwrap_or_default();
        let server = Server::start_with(&store, &extra);
        let copy = dir.path().join("copy");
        let cp = std::process::Command::new("cp")
            .arg("-a")
            .arg(&store)
            .arg(&copy)
            .output()
            .unwrap();
        assert!(cp.status.success(), "{cp:?}");
        assert!(
            copy.join("serve.json").exists(),
            "the copy carries serve.json"
        );

        let c = copy.to_str().unwrap();
        let out = oncelake_with_input(&["put", c, "via-copy", "1", "-"], b"copy bytes");
        assert_eq!(out.status.code(), Some(0), "{listen:?} {out:?}");
        let served: BTreeSet<String> = {
            let client = Client::for_store(&store).unwrap();
            let mut all = BTreeSet::new();
            client
                .ls("", None, |e| {
                    all.insert(e.unit);
                    true
                })
                .unwrap();
            all
        };
        assert_eq!(
            served,
            BTreeSet::from(["orig".to_string()]),
            "{listen:?}: the original changed"
        );
        assert!(matches!(
            Client::for_store(&copy),
            Err(ClientError::NotServed { .. })
        ));
        server.stop();
        assert_eq!(units(&store), BTreeSet::from(["orig".to_string()]));
        assert_eq!(
            units(&copy),
            BTreeSet::from(["orig".to_string(), "via-copy".to_string()]),
            "{listen:?}: the put went to the copy"
        );
    }
}

/// A server that holds the store but does not answer (stopped with SIGSTOP), and a stranger that
/// accepts and never answers: `ls --wait 1s` gives up within a few seconds with exit 6 and names
/// the server, instead of waiting 10 s per probe and blaming "another process".
#[test]
fn a_hung_server_costs_no_more_than_wait_and_is_named() {
    let (_dir, store) = new_store();
    let s = store.to_str().unwrap();
    for listen in [None, Some("127.0.0.1:0")] {
        let extra: Vec<&str> = listen.map(|l| vec!["--listen", l]).unwrap_or_default();
        let server = Server::start_with(&store, &extra);
        let pid = server.pid();
        // SAFETY: kill(2) on our own unreaped child.
        assert_eq!(unsafe { libc::kill(server.pid(), libc::SIGSTOP) }, 0);
        let t0 = Instant::now();
        let out = oncelake(&["ls", s, "--wait", "1s"]);
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(server.pid(), libc::SIGCONT) }, 0);
        drop(server);
        assert_eq!(out.status.code(), Some(6), "{listen:?} {out:?}");
        assert!(took < Duration::from_secs(8), "{listen:?}: took {took:?}");
        assert!(err.contains(&format!("pid {pid}")), "{listen:?}: {err}");
        assert!(err.contains("did not answer"), "{listen:?}: {err}");
        let _ = std::fs::remove_file(store.join("serve.json"));
    }

    // A stranger that accepts and never answers, named by a serve.json.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let squatter = Squatter::on(listener, None);
    let info = serde_json::json!({
        "address": format!("tcp:{addr}"),
        "pid": std::process::id(),
        "token": "secret-token",
        "key": "ab".repeat(32),
        "store_id": 1,
    });
    std::fs::write(store.join("serve.json"), info.to_string()).unwrap();
    let t0 = Instant::now();
    let out = oncelake(&["ls", s, "--wait", "1s", "--json"]);
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    assert!(took < Duration::from_secs(8), "took {took:?}");
    let e: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(e["error"], "locked", "{e}");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains(&addr) && m.contains(&format!("pid {}", std::process::id())),
        "{m}"
    );
    assert!(!contains(&squatter.received(), b"secret-token"));
    // Nor does it keep a new server from starting: the store's lock is free, so it is served.
    let server = Server::start(&store);
    let (code, _) = run(&["ls", s, "--wait", "1s"]);
    assert_eq!(code, 0);
    server.stop();
}

/// A server that takes no connection at all (its queue of connections not yet accepted is
/// full, as a hung server's fills): `connect` on its Unix socket would wait for ever; `ls --wait
/// 1s` exits 6 within a few seconds, naming it.
#[test]
fn a_server_whose_queue_is_full_costs_no_more_than_wait() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let (_dir, store) = new_store();
    let sock = std::path::absolute(store.join("serve.sock")).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    // Fill the queue: non-blocking connections until one would have to wait.
    let mut held = Vec::new();
    let c = std::ffi::CString::new(sock.as_os_str().as_bytes()).unwrap();
    loop {
        assert!(held.len() < 100_000, "the queue never filled");
        // SAFETY: socket(2) with constant arguments; the descriptor is owned right below.
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        assert!(fd >= 0);
        // SAFETY: a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: zeroed sockaddr_un filled with a NUL-terminated path shorter than sun_path.
        let r = unsafe {
            let mut a: libc::sockaddr_un = std::mem::zeroed();
            a.sun_family = libc::AF_UNIX as libc::sa_family_t;
            for (d, s) in a.sun_path.iter_mut().zip(c.as_bytes()) {
                *d = *s as libc::c_char;
            }
            libc::connect(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                (&a as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
            break;
        }
        held.push(fd);
    }
    let info = serde_json::json!({
        "address": format!("unix:{}", sock.display()),
        "pid": std::process::id(),
        "token": null,
        "key": "cd".repeat(32),
        "store_id": 1,
    });
    std::fs::write(store.join("serve.json"), info.to_string()).unwrap();
    let t0 = Instant::now();
    let mut child = std::process::Command::new(bin::oncelake())
        .args(["ls", store.to_str().unwrap(), "--wait", "1s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t0.elapsed();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(took < Duration::from_secs(8), "took {took:?}: {out:?}");
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&sock.display().to_string()) && err.contains("pid"),
        "{err}"
    );
    drop(held);
}
