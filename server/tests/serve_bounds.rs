//! The server against a hostile local client (SPEC R20): slow uploads, floods of half-sent
//! request heads, huge pipeline definitions, staging handles never committed, and the footprint
//! a burst leaves. Each attack comes from this process over loopback TCP, the attacker's
//! sockets bound to other loopback addresses (127.0.0.2, ...) so that the server tells it apart
//! from the honest client on 127.0.0.1 (on TCP a client is a host). The server runs in this
//! process with small limits ([`oncelake_server::serve_until`]), so its threads and file
//! descriptors are this process's: the tests run one at a time and read `/proc/self`.
//!
//! During each attack `/healthz` must answer within 100 ms. The machine these run on is shared
//! (other builds take the cores at times), so one probe in ten may be late, none by more than a
//! second; before the bounds every probe waited for the attack (seconds).

use oncelake_server::{serve_until, Limits, ServeOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// One test at a time: they count the process's threads and descriptors.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A server running in this process on loopback TCP; stopped (and joined) when dropped.
struct InProcess {
    addr: SocketAddr,
    token: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl InProcess {
    fn start(limits: Limits, tune: impl FnOnce(&mut ServeOptions)) -> InProcess {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("lake");
        oncelake::Store::open(&store).unwrap();
        let mut opts = ServeOptions {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            limits,
            header_timeout: Duration::from_secs(30),
            // This process's allocator is the test harness's; leave it as it is.
            malloc_arenas: None,
            ..ServeOptions::default()
        };
        tune(&mut opts);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, address) = std::sync::mpsc::channel::<String>();
        let s = store.clone();
        let thread = std::thread::spawn(move || {
            serve_until(
                &s,
                opts,
                |a| ready.send(a.to_string()).unwrap(),
                Some(Box::pin(async move {
                    let _ = stopped.await;
                })),
            )
            .unwrap();
        });
        let address = address.recv_timeout(Duration::from_secs(30)).unwrap();
        let addr = address.strip_prefix("tcp:").unwrap().parse().unwrap();
        let token = oncelake_server::discovery::read_info(&store)
            .unwrap()
            .token
            .unwrap();
        InProcess {
            addr,
            token,
            stop: Some(stop),
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// A request's head (without the blank line that ends it), with the token.
    fn head(&self, method: &str, path: &str, extra: &str) -> String {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: l\r\nAuthorization: Bearer {}\r\n{extra}",
            self.token
        )
    }

    /// One whole request from 127.0.0.`host` on a fresh connection: (status, head, body).
    fn call(&self, host: u8, method: &str, path: &str, body: &[u8]) -> (u16, String, String) {
        let mut s = connect_from(host, self.addr);
        let mut req = self
            .head(
                method,
                path,
                &format!(
                    "Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                ),
            )
            .into_bytes();
        req.extend_from_slice(body);
        // A request refused before its body was read may find the connection closed.
        let _ = s.write_all(&req);
        answer(&mut s)
    }

    /// How long `/healthz` took from 127.0.0.1 (connecting included); it answered 200.
    fn healthz(&self) -> Duration {
        let t = Instant::now();
        let (status, _, body) = self.call(1, "GET", "/healthz", b"");
        assert_eq!(status, 200, "{body}");
        t.elapsed()
    }

    /// A server counter or gauge from `/metrics`.
    fn metric(&self, name: &str) -> f64 {
        let (status, _, text) = self.call(1, "GET", "/metrics", b"");
        assert_eq!(status, 200, "{text}");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

/// A connection to `to` from 127.0.0.`host` (a client of its own to the server).
fn connect_from(host: u8, to: SocketAddr) -> TcpStream {
    let s = runtime()
        .block_on(async {
            let s = tokio::net::TcpSocket::new_v4()?;
            s.bind(SocketAddr::from(([127, 0, 0, host], 0)))?;
            s.connect(to).await
        })
        .unwrap()
        .into_std()
        .unwrap();
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Reads an answer to the end of the connection (waiting up to 20 s): (status, head, body).
fn answer(s: &mut TcpStream) -> (u16, String, String) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_answer(&raw)
}

fn parse_answer(raw: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8_lossy(raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let head = head.to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, head, body)
}

/// The data of a chunked body.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}

/// The answer is a shed request: `503` with `Retry-After` and a JSON body saying why.
fn assert_shed((status, head, body): &(u16, String, String)) {
    assert_eq!(*status, 503, "{head}\n{body}");
    assert!(head.contains("retry-after: 1"), "{head}");
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["error"], "overloaded", "{body}");
    assert!(
        v["message"].as_str().unwrap().contains("retry after"),
        "{body}"
    );
}

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Probes `/healthz` `n` times, 50 ms apart: the 100 ms rule (see the module docs). One late
/// probe in ten, rounded up: of five probes one may be late (a 250 ms scheduling hiccup on a
/// busy CI machine failed five probes held to zero).
fn healthz_stays_quick(server: &InProcess, n: usize) {
    let took: Vec<Duration> = (0..n)
        .map(|_| {
            let t = server.healthz();
            std::thread::sleep(Duration::from_millis(50));
            t
        })
        .collect();
    let late = took
        .iter()
        .filter(|t| **t > Duration::from_millis(100))
        .count();
    assert!(
        late <= n.div_ceil(10) && took.iter().all(|t| *t < Duration::from_secs(1)),
        "/healthz took {took:?}"
    );
}

/// Waits up to `within` for `f` to hold.
fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Names the units under `prefix` (through `/v1/ls`).
fn units(server: &InProcess, prefix: &str) -> Vec<String> {
    let (status, _, body) = server.call(1, "GET", &format!("/v1/ls?prefix={prefix}"), b"");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["unit"].as_str().unwrap().to_string()
        })
        .collect()
}

/// Starts a put of `total` bytes from 127.0.0.`host` that sends its first `first` bytes at
/// once (past the 64 KiB read whole, so it streams to the blocking pool), then stalls.
fn start_upload(server: &InProcess, host: u8, unit: &str, total: usize, first: usize) -> TcpStream {
    let mut s = connect_from(host, server.addr);
    let head = server.head(
        "PUT",
        &format!("/v1/put?unit={unit}&version=1"),
        &format!("Content-Length: {total}\r\nConnection: close\r\n\r\n"),
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&vec![b'x'; first]).unwrap();
    s
}

/// Whether the server has answered on `s` within `wait` (a shed upload is answered at once).
fn answered_within(s: &mut TcpStream, wait: Duration) -> Option<(u16, String, String)> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut first = [0u8; 1];
    match s.read(&mut first) {
        Ok(1) => {
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut raw = first.to_vec();
            let _ = s.read_to_end(&mut raw);
            Some(parse_answer(&raw))
        }
        _ => None,
    }
}

/// The default limits but for the blocking pool: `total` calls at once, `per_client` of them
/// from one client.
fn blocking_bounded(total: usize, per_client: usize) -> Limits {
    Limits {
        max_blocking: total,
        max_blocking_per_client: per_client,
        ..Limits::default()
    }
}

/// A server under `limits` whose idle blocking-pool threads exit after half a second, answering.
fn with_a_short_keep_alive(limits: Limits) -> InProcess {
    let server = InProcess::start(limits, |o| {
        o.blocking_keep_alive = Duration::from_millis(500)
    });
    server.healthz();
    server
}

/// Slow uploads (finding: 1,100 of them, a byte every 8 s, took all 1,024 threads of the pool,
/// and `/healthz` and reads timed out). Now each holds a call on the blocking pool, bounded per
/// client and in total: the ones beyond are shed at once with `503`, `/healthz` answers, an
/// honest client's call succeeds or is shed the same way, and the trickle is cut off at the
/// slowest pace accepted: counted aborted, nothing committed. Then the pool's threads exit.
#[test]
fn slow_uploads_are_bounded_shed_and_cut_off() {
    let _one = serial();
    let limits = Limits {
        body_idle: Duration::from_secs(3),
        min_body_rate: 1000,
        ..blocking_bounded(6, 3)
    };
    let server = with_a_short_keep_alive(limits);
    let idle_threads = threads();
    // Two attacking hosts, 8 uploads each: each host may hold 3 calls, all together 6.
    let mut held = Vec::new();
    let mut shed = 0;
    for host in [2u8, 3] {
        for i in 0..8 {
            let mut s = start_upload(
                &server,
                host,
                &format!("slow/h{host}-{i}"),
                1 << 20,
                70 << 10,
            );
            match answered_within(&mut s, Duration::from_millis(300)) {
                Some(a) => {
                    assert_shed(&a);
                    shed += 1;
                }
                None => held.push(s),
            }
        }
    }
    assert_eq!(held.len(), 6, "uploads held at once");
    assert_eq!(shed, 10);
    // The trickle: a byte every 200 ms from each (never idle for the 3 s idle timeout), while
    // /healthz is probed, until the server has answered each or 15 s have passed.
    let trickling = Instant::now();
    std::thread::scope(|sc| {
        let trickler = sc.spawn(|| {
            let mut answered = vec![false; held.len()];
            while answered.contains(&false) && trickling.elapsed() < Duration::from_secs(15) {
                for (s, done) in held.iter_mut().zip(&mut answered) {
                    s.set_nonblocking(true).unwrap();
                    let mut b = [0u8; 1];
                    // Anything to read (the answer) or the end: the server has cut it off.
                    *done |= !matches!(s.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
                    s.set_nonblocking(false).unwrap();
                    if !*done {
                        let _ = s.write_all(b"y");
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        healthz_stays_quick(&server, 10);
        // An honest client's upload while the pool is full: refused at once, clearly.
        let mut honest = start_upload(&server, 1, "honest/big", 100 << 10, 70 << 10);
        let a = answered_within(&mut honest, Duration::from_secs(2))
            .expect("an upload over the bounds is answered at once");
        assert_shed(&a);
        trickler.join().unwrap();
    });
    // Each slow upload was cut off while it still trickled, with 408: the second window of 3 s
    // brought less than 3,000 bytes.
    assert!(
        trickling.elapsed() < Duration::from_secs(15),
        "the trickling uploads were not cut off"
    );
    for s in &mut held {
        let (status, _, body) = answer(s);
        assert_eq!(status, 408, "{body}");
        assert!(body.contains("slower than"), "{body}");
    }
    assert!(server.metric("oncelake_server_uploads_aborted_total") >= 16.0);
    // The 10 uploads and the honest one shed were counted.
    assert_eq!(server.metric("oncelake_server_overloaded_total"), 11.0);
    assert!(
        units(&server, "slow/").is_empty(),
        "a cut-off upload was committed"
    );
    // With the attack gone, the honest upload goes through.
    let (status, _, body) = server.call(
        1,
        "PUT",
        "/v1/put?unit=honest/big&version=1",
        &[7u8; 100 << 10],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(units(&server, "honest/"), ["honest/big"]);
    // The pool's threads exit once idle: back to the idle count.
    assert!(
        eventually(Duration::from_secs(10), || threads() <= idle_threads + 1),
        "{} threads after the attack, {idle_threads} before",
        threads()
    );
}

/// Half-sent request heads (finding: 1,100 of them exhausted the descriptors and the accept
/// loop spun). Now the connections are bounded per client (the ones beyond answered `503`) and
/// in total (a new connection evicts the one idle longest), so `/healthz` gets in, the
/// server's descriptors stay bounded, and the heads left are cut off at the header timeout.
#[test]
fn a_flood_of_half_sent_heads_is_bounded_and_cut_off() {
    let _one = serial();
    const TOTAL: usize = 24;
    const PER_CLIENT: usize = 8;
    let limits = Limits {
        max_connections: TOTAL,
        max_connections_per_client: PER_CLIENT,
        ..Limits::default()
    };
    let header_timeout = Duration::from_secs(6);
    let server = InProcess::start(limits, |o| o.header_timeout = header_timeout);
    server.healthz();
    let idle_fds = fds();
    let half = server.head("PUT", "/v1/put?unit=a&version=1", "Content-Le");
    let started = Instant::now();
    let mut flood = Vec::new();
    // 30 from one host (8 may stay), then 10 from each of five more (8 each): 80 connections,
    // 48 within the per-client bounds, twice the total.
    for (host, n) in [(2u8, 30), (3, 10), (4, 10), (5, 10), (6, 10), (7, 10)] {
        for _ in 0..n {
            let mut s = connect_from(host, server.addr);
            let _ = s.write_all(half.as_bytes());
            flood.push((host, s));
        }
    }
    // Those over their host's bound were told why (the rest get nothing yet).
    let mut refused = 0;
    for (_, s) in flood.iter_mut().filter(|(h, _)| *h == 2).skip(PER_CLIENT) {
        let a = answered_within(s, Duration::from_secs(2)).expect("refused with an answer");
        assert_shed(&a);
        assert!(a.2.contains("open connections"), "{}", a.2);
        refused += 1;
    }
    assert_eq!(refused, 30 - PER_CLIENT);
    // This process holds the 80 client ends; the server at most its total, once the refusals
    // (each kept a second at most, so that the answer is not lost to a reset) are done.
    std::thread::sleep(Duration::from_millis(1200));
    let during = fds();
    assert!(
        during <= idle_fds + flood.len() + TOTAL + 4,
        "{during} descriptors during the flood, {idle_fds} before it"
    );
    healthz_stays_quick(&server, 10);
    assert!(
        started.elapsed() < header_timeout,
        "the checks above must run before the heads time out"
    );
    // The heads never finished: the header timeout closes what the bounds let in.
    std::thread::sleep(header_timeout.saturating_sub(started.elapsed()) + Duration::from_secs(1));
    let mut open = 0;
    for (_, s) in &mut flood {
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut b = [0u8; 512];
        let still = matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
            || e.kind() == std::io::ErrorKind::TimedOut);
        open += usize::from(still);
    }
    assert_eq!(open, 0, "connections still open after the header timeout");
    drop(flood);
    assert!(
        eventually(Duration::from_secs(5), || fds() <= idle_fds + 2),
        "{} descriptors after the flood, {idle_fds} before it",
        fds()
    );
    healthz_stays_quick(&server, 5);
}

/// A definition of `stages` stages, the last listing all the others upstream.
fn wide_definition(stages: usize) -> String {
    let mut text = String::new();
    let mut ups = Vec::new();
    for i in 0..stages - 1 {
        text.push_str(&format!("[stage.s{i}]\ncode_version = 1\n"));
        ups.push(format!("\"s{i}\""));
    }
    text.push_str(&format!(
        "[stage.sink]\ncode_version = 1\nupstream = [{}]\n",
        ups.join(",")
    ));
    text
}

/// Huge pipeline definitions (finding: two of 50,000 stages stalled every lookup for 5.9 s, a
/// quadratic check on the connection threads). Now definitions are read on the blocking pool
/// and checked in linear time, so lookups and `/healthz` answer meanwhile; a definition over
/// the limit is `413`.
#[test]
fn huge_pipeline_definitions_stall_no_lookup() {
    let _one = serial();
    let limits = Limits {
        max_definition: 4 << 20,
        ..Limits::default()
    };
    let server = InProcess::start(limits, |_| {});
    let def = wide_definition(50_000);
    let body = serde_json::json!({ "pipeline": def }).to_string();
    std::thread::scope(|sc| {
        let calls: Vec<_> = [2u8, 3]
            .into_iter()
            .map(|host| {
                let (server, body) = (&server, &body);
                sc.spawn(move || server.call(host, "POST", "/v1/pipeline/status", body.as_bytes()))
            })
            .collect();
        // While both are read, lookups (answered on the connection threads) and /healthz.
        std::thread::sleep(Duration::from_millis(100));
        let mut took = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            let (status, _, b) = server.call(1, "GET", "/v1/lookup?unit=a", b"");
            assert_eq!(status, 200, "{b}");
            took.push(t.elapsed());
            std::thread::sleep(Duration::from_millis(30));
        }
        let late = took
            .iter()
            .filter(|t| **t > Duration::from_millis(100))
            .count();
        assert!(
            late <= 1 && took.iter().all(|t| *t < Duration::from_secs(1)),
            "lookups took {took:?}"
        );
        healthz_stays_quick(&server, 5);
        for c in calls {
            let (status, _, b) = c.join().unwrap();
            assert_eq!(status, 200, "{}", &b[..b.len().min(300)]);
        }
    });
    // A definition over the limit is 413, naming it: declared so by the body's length (refused
    // before any of it is read), or found so once read.
    let mut s = connect_from(1, server.addr);
    let head = server.head(
        "POST",
        "/v1/pipeline/status",
        &format!("Content-Length: {}\r\nConnection: close\r\n\r\n", 6 << 20),
    );
    s.write_all(head.as_bytes()).unwrap();
    let declared = answer(&mut s);
    let mut over = wide_definition(10);
    over.push_str(&"#".repeat((4 << 20) + 100 - over.len()));
    let read = server.call(
        1,
        "POST",
        "/v1/pipeline/status",
        serde_json::json!({ "pipeline": over })
            .to_string()
            .as_bytes(),
    );
    for (status, _, b) in [declared, read] {
        let v: serde_json::Value = serde_json::from_str(&b).unwrap();
        assert_eq!(
            (status, v["error"].as_str()),
            (413, Some("too_large")),
            "{b}"
        );
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains(&(4u64 << 20).to_string()),
            "{b}"
        );
    }
}

/// Staging handles (finding: unbounded, a few hundred bytes and a pinned object each). Now a
/// client may hold so many (`429` beyond: commit or drop some) and all clients so many
/// (`503` beyond); dropping or committing makes room again.
#[test]
fn staging_handles_are_bounded_per_client_and_in_total() {
    let _one = serial();
    let limits = Limits {
        max_staged: 8,
        max_staged_per_client: 5,
        ..Limits::default()
    };
    let server = InProcess::start(limits, |_| {});
    let stage = |host: u8, i: usize| {
        server.call(
            host,
            "POST",
            "/v1/stage",
            format!("object {host}/{i}").as_bytes(),
        )
    };
    let id = |a: &(u16, String, String)| -> u64 {
        assert_eq!(a.0, 200, "{}", a.2);
        let v: serde_json::Value = serde_json::from_str(&a.2).unwrap();
        v["staged"].as_u64().unwrap()
    };
    let mine: Vec<u64> = (0..5).map(|i| id(&stage(2, i))).collect();
    let (status, _, body) = stage(2, 5);
    assert_eq!(status, 429, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"], "too_many_staged");
    assert!(v["message"]
        .as_str()
        .unwrap()
        .contains("commit them or drop them"));
    let theirs: Vec<u64> = (0..3).map(|i| id(&stage(3, i))).collect();
    assert_shed(&stage(3, 3));
    assert_eq!(server.metric("oncelake_server_staged_handles"), 8.0);
    // Dropping one and committing another makes room for two.
    let (status, _, body) = server.call(2, "DELETE", &format!("/v1/stage?id={}", mine[0]), b"");
    assert_eq!(status, 200, "{body}");
    let commit =
        serde_json::json!({"items": [{"unit": "h/1", "source_version": 1, "staged": mine[1]}]});
    let (status, _, body) = server.call(2, "POST", "/v1/commit", commit.to_string().as_bytes());
    assert_eq!(status, 200, "{body}");
    id(&stage(3, 4));
    id(&stage(2, 6));
    assert_shed(&stage(4, 0));
    assert_eq!(theirs.len(), 3);
    assert_eq!(units(&server, "h/"), ["h/1"]);
}

/// The footprint after a burst (finding: the server kept 1,097 threads and 264 MiB after one).
/// The blocking pool's threads exit once idle, so the thread count returns to what it was.
#[test]
fn after_a_burst_the_pool_threads_exit() {
    let _one = serial();
    let server = with_a_short_keep_alive(blocking_bounded(24, 24));
    let idle = threads();
    // 16 streamed uploads at once (each holds a pool thread while its body arrives).
    let mut open: Vec<TcpStream> = (0..16)
        .map(|i| start_upload(&server, 1, &format!("burst/{i:02}"), 140 << 10, 70 << 10))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let peak = threads();
    for s in &mut open {
        s.write_all(&[b'z'; 70 << 10]).unwrap();
    }
    for s in &mut open {
        let (status, _, body) = answer(s);
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(units(&server, "burst/").len(), 16);
    // (Slack for pool threads that were there, idle, when the burst came.)
    assert!(
        peak >= idle + 12,
        "the burst ran on {peak} threads, {idle} before it"
    );
    assert!(
        eventually(Duration::from_secs(10), || threads() <= idle + 1),
        "{} threads after the burst, {idle} before it",
        threads()
    );
}

/// This process's CPU time so far, in clock ticks (utime + stime of `/proc/self/stat`, read
/// through `stat`, opened beforehand: it is read while no descriptor is left).
fn cpu_ticks(stat: &mut std::fs::File) -> u64 {
    use std::io::Seek;
    stat.seek(std::io::SeekFrom::Start(0)).unwrap();
    let mut text = String::new();
    stat.read_to_string(&mut text).unwrap();
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let rest = &text[text.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Out of descriptors, accepting fails while connections wait in the listen backlog (finding:
/// the accept loop then retried at once, in a loop that took a whole core). It now waits before
/// each new try, and serves again once descriptors are free.
#[test]
fn out_of_descriptors_the_accept_loop_does_not_spin() {
    let _one = serial();
    let server = InProcess::start(Limits::default(), |_| {});
    server.healthz();
    let mut stat = std::fs::File::open("/proc/self/stat").unwrap();
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `lim`, which we own.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    // Client sockets made (and bound) while descriptors are free, connected once the limit is
    // down to 10 more than this process holds: the server accepts about 10, then the rest wait
    // in the backlog while every accept fails.
    let sockets: Vec<tokio::net::TcpSocket> = (0..30)
        .map(|_| {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(SocketAddr::from(([127, 0, 0, 2], 0))).unwrap();
            s
        })
        .collect();
    let low = libc::rlimit {
        rlim_cur: (fds() + 10) as libc::rlim_t,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads `low`; lowering the soft limit is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let addr = server.addr;
    let clients: Vec<_> = runtime().block_on(async move {
        let mut out = Vec::new();
        for s in sockets {
            out.push(s.connect(addr).await);
        }
        out
    });
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(&mut stat);
    std::thread::sleep(Duration::from_secs(1));
    let spent = cpu_ticks(&mut stat) - before;
    // SAFETY: as above, restoring the limit we read.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    assert!(
        clients.iter().all(|c| c.is_ok()),
        "connecting needs no new descriptor"
    );
    drop(clients);
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    assert!(
        spent * 4 < per_second,
        "the process spent {spent} of {per_second} ticks in a second while accepting failed"
    );
    healthz_stays_quick(&server, 5);
}
