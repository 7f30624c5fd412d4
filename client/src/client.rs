//! The blocking client of `oncelake serve`: the store's operations over the HTTP API, answering
//! with the engine's own types. Calls answered with one JSON value reuse kept-alive connections
//! from a small pool shared by the clones of a `Client` (a connection per call costs the server
//! an accept, a task and a connection state each time, which dominated small commits); streamed
//! answers (ls, objects, reconcile plans) use a connection of their own. Uploads are streamed with
//! chunked transfer encoding, never held in memory.

use crate::conn::{process_running, tcp_connect, unix_connect, Conn, PollFirst};
use crate::discovery;
use crate::discovery::Address;
use crate::error::{lost, ClientError, Result};
use crate::http1::{
    check, read_head, read_head_from, send_chunked, Chunked, Length, Response, Sent,
};
use crate::pool::{Pool, Pooled, POOL_IDLE, UPLOAD_REUSE};
use crate::wire;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long [`Client::for_store`] waits for the server's answer to its identity question.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection target and credentials. Clones share one pool of kept-alive connections, so a
/// `Client` shared by many threads holds at most [`POOL_MAX`](crate::POOL_MAX) idle connections.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) address: Address,
    pub(crate) token: Option<String>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) pool: Arc<Pool>,
    /// The server this client must reach, when it was found through a store's `serve.json`:
    /// each new TCP connection asks the identity question before anything else is sent on it.
    pub(crate) verified: Option<Arc<Verified>>,
}

/// What the server of a store found through its `serve.json` must prove.
#[derive(Debug)]
pub(crate) struct Verified {
    pub(crate) store: PathBuf,
    pub(crate) pid: u32,
    pub(crate) expect: crate::identity::Expected,
}

/// A request body.
pub(crate) enum Payload<'a> {
    Empty,
    Json(Vec<u8>),
    Stream(&'a mut dyn Read),
}

impl Client {
    /// A client of the server listening on a Unix socket.
    pub fn unix(path: impl Into<PathBuf>) -> Client {
        Client {
            address: Address::Unix(path.into()),
            token: None,
            timeout: None,
            pool: Arc::default(),
            verified: None,
        }
    }

    /// A client of a server on TCP with its bearer token.
    pub fn tcp(address: impl Into<String>, token: impl Into<String>) -> Client {
        Client {
            address: Address::Tcp(address.into()),
            token: Some(token.into()),
            timeout: None,
            pool: Arc::default(),
            verified: None,
        }
    }

    /// The client of the server that holds `store`, found through its `serve.json`, if one
    /// answers and proves that it is the server of this store directory (SPEC R20,
    /// [`crate::identity`]) within [`HEALTH_TIMEOUT`]; see [`Client::for_store_within`].
    pub fn for_store(store: &Path) -> Result<Client> {
        Client::for_store_within(store, HEALTH_TIMEOUT)
    }

    /// The client of the server that holds `store`, if the server named by its `serve.json`
    /// proves within `probe` that it holds this store directory. Nothing else is sent before it
    /// has (no token, no data), and every new TCP connection of the client asks again.
    ///
    /// [`ClientError::NotServed`]: no `serve.json`, nothing listening at its address (a killed
    /// server's), or the genuine server of another directory (a copy of a served store carries
    /// the original's `serve.json`): the store is used in-process. [`ClientError::NotItsServer`]:
    /// something else answers there. [`ClientError::NoAnswer`]: a connection is accepted but
    /// nothing answers (or no connection is accepted) within `probe`.
    pub fn for_store_within(store: &Path, probe: Duration) -> Result<Client> {
        let not_served = || ClientError::NotServed {
            store: store.to_path_buf(),
        };
        let info = discovery::read_info(store).ok_or_else(not_served)?;
        let address = match info.parsed().ok_or_else(not_served)? {
            // A relative path (written by a server before it made its path absolute) is
            // relative to that server's working directory, not ours; the socket is in the
            // store directory either way.
            Address::Unix(p) if p.is_relative() => {
                Address::Unix(store.join(discovery::SOCKET_FILE))
            }
            a => a,
        };
        let dir = crate::identity::DirId::of(store).map_err(|_| not_served())?;
        let mut client = Client {
            address,
            token: info.token.clone(),
            timeout: Some(probe),
            pool: Arc::default(),
            verified: None,
        };
        // A hung server must not hang every command: the probe has a timeout, the client none.
        let mut conn = match client.connect_only() {
            // Something listens there but takes no connection in time: a hung server's full
            // queue (or a stranger's).
            Err(ClientError::Connect { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ) =>
            {
                return Err(ClientError::NoAnswer {
                    store: store.to_path_buf(),
                    address: client.address(),
                    pid: info.pid,
                    running: process_running(info.pid),
                    waited: probe,
                })
            }
            Ok(c) => c,
            Err(ClientError::Connect { .. }) => return Err(not_served()),
            Err(e) => return Err(e),
        };
        // Something listens there: it must prove what serve.json lets it prove.
        let expect = match crate::identity::Expected::new(&info, dir) {
            Ok(e) => e,
            Err(found) => return Err(client.not_its_server(store, info.pid, found)),
        };
        client.verified = Some(Arc::new(Verified {
            store: store.to_path_buf(),
            pid: info.pid,
            expect,
        }));
        match client.ask_identity(&mut conn) {
            Ok(()) => {}
            // The genuine server of the original of this copy: nobody serves this directory.
            Err(Asked::OtherDirectory(_)) => return Err(not_served()),
            // Closed before answering (a server shutting down): not served, as a refused
            // connection is. Nothing but the question was sent.
            Err(Asked::Closed) => return Err(not_served()),
            Err(e) => return Err(client.asked_error(e)),
        }
        client.timeout = None;
        // The proved connection carries the first call (with this client's timeout then).
        client.pool.put(BufReader::new(conn), Some(probe));
        Ok(client)
    }

    /// Sets a read/write timeout on every call (none by default: a commit waits for its group).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = Some(timeout);
        self
    }

    /// Idle kept-alive connections this client (and its clones) hold.
    pub fn idle_connections(&self) -> usize {
        self.pool.len()
    }

    /// The address, as `unix:PATH` or `tcp:HOST:PORT`.
    pub fn address(&self) -> String {
        match &self.address {
            Address::Unix(p) => format!("unix:{}", p.display()),
            Address::Tcp(a) => format!("tcp:{a}"),
        }
    }
}

/// The transport: connections, the identity question, one exchange.
impl Client {
    pub(crate) fn json<T: for<'de> serde::Deserialize<'de>>(
        &self,
        method: &str,
        path: &str,
        payload: Payload<'_>,
    ) -> Result<T> {
        let during = format!("{method} {}", path.split('?').next().unwrap_or(path));
        let body = self.exchange(method, path, payload, &during)?;
        serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(format!("{during}: {e}")))
    }

    /// One request on a kept-alive connection whose whole answer is read: its body when the
    /// status is a success. A reused connection that the server closed before answering (it
    /// timed out idle just as the request went out) did not process the request: it is sent
    /// once more on a new connection.
    pub(crate) fn exchange(
        &self,
        method: &str,
        path: &str,
        mut payload: Payload<'_>,
        during: &str,
    ) -> Result<Vec<u8>> {
        // An upload cannot be sent twice (its input is read as it goes), so it rides only on a
        // connection used a moment ago, which the server's idle timeout cannot be closing.
        let reused = match payload {
            Payload::Stream(_) => self.pool.take(UPLOAD_REUSE),
            _ => self.pool.take(POOL_IDLE),
        };
        if let Some((conn, has)) = reused {
            match self.exchange_on(conn, has, method, path, &mut payload, during) {
                Err(Exchange::Unanswered(e)) => {
                    // A fresh connection that cannot even connect means the server went away:
                    // the first attempt's outcome is what is unknown.
                    let conn = self.connect().map_err(|c| match c {
                        // Whoever answers now is not our server: say so, not "lost".
                        c @ (ClientError::NotItsServer { .. } | ClientError::NoAnswer { .. }) => c,
                        _ => ClientError::from(e),
                    })?;
                    return self.finish(self.exchange_on(
                        BufReader::new(conn),
                        self.timeout,
                        method,
                        path,
                        &mut payload,
                        during,
                    ));
                }
                other => return self.finish(other),
            }
        }
        let conn = BufReader::new(self.connect()?);
        self.finish(self.exchange_on(conn, self.timeout, method, path, &mut payload, during))
    }

    /// The client error of an exchange that was not (or could not be) sent again.
    pub(crate) fn finish(&self, r: std::result::Result<Vec<u8>, Exchange>) -> Result<Vec<u8>> {
        r.map_err(|e| match e {
            Exchange::Unanswered(e) | Exchange::Broken(e) | Exchange::Failed(e) => e.into(),
        })
    }

    /// One exchange on `conn`, whose read/write timeout is `has` (set to this client's first
    /// when it differs).
    pub(crate) fn exchange_on(
        &self,
        mut conn: Pooled,
        has: Option<Duration>,
        method: &str,
        path: &str,
        payload: &mut Payload<'_>,
        during: &str,
    ) -> std::result::Result<Vec<u8>, Exchange> {
        let io = |e: std::io::Error| ExchangeError::Io(during.to_string(), e);
        if has != self.timeout {
            conn.get_ref()
                .set_timeouts(self.timeout)
                .map_err(|e| Exchange::Broken(io(e)))?;
        }
        let streamed = matches!(payload, Payload::Stream(_));
        let sent = self.send(conn.get_mut(), method, path, payload, false);
        let sent = match sent {
            Err(Sent::Input(e)) => {
                return Err(Exchange::Failed(ExchangeError::Client(ClientError::Input(
                    e,
                ))))
            }
            Err(Sent::Conn(e)) => Err(e),
            Ok(()) => Ok(()),
        };
        // A server may answer before reading the whole body (401, 413): read its answer even if
        // sending failed, and report the send failure only when there is none.
        let head = match read_head_from(&mut conn) {
            Ok(h) => h,
            Err(e) => {
                let e = sent.err().unwrap_or(e);
                let unanswered = matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                );
                return Err(if unanswered && conn.buffer().is_empty() {
                    Exchange::Unanswered(io(e))
                } else {
                    Exchange::Broken(io(e))
                });
            }
        };
        let mut body = Vec::new();
        let read = match head.length {
            Length::Exact(n) => (&mut conn).take(n).read_to_end(&mut body).and_then(|got| {
                if (got as u64) < n {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("the answer ended after {got} of {n} bytes"),
                    ))
                } else {
                    Ok(())
                }
            }),
            Length::Chunked => Chunked {
                inner: &mut conn,
                left: 0,
                done: false,
            }
            .read_to_end(&mut body)
            .map(|_| ()),
            Length::UntilClose => conn.read_to_end(&mut body).map(|_| ()),
        };
        read.map_err(|e| Exchange::Broken(io(e)))?;
        // Kept only when the server will take another request on it and this one is fully
        // done: an upload the server refused may not have been read to its end.
        let reusable = sent.is_ok()
            && head.keep_alive
            && !matches!(head.length, Length::UntilClose)
            && (head.status < 400 || !streamed);
        let resp = Response {
            status: head.status,
            headers: head.headers,
            body: Box::new(std::io::Cursor::new(body)),
        };
        let mut resp =
            check(resp, during).map_err(|e| Exchange::Failed(ExchangeError::Client(e)))?;
        if reusable {
            self.pool.put(conn, self.timeout);
        }
        let mut out = Vec::new();
        let _ = resp.body.read_to_end(&mut out);
        Ok(out)
    }

    /// Writes the request: head and body. With `close`, the server closes the connection after
    /// its answer (the answer is then read to its end by the caller's reader).
    pub(crate) fn send(
        &self,
        conn: &mut Box<dyn Conn>,
        method: &str,
        path: &str,
        payload: &mut Payload<'_>,
        close: bool,
    ) -> std::result::Result<(), Sent> {
        let mut head = String::with_capacity(160);
        head.push_str(method);
        head.push(' ');
        head.push_str(path);
        head.push_str(" HTTP/1.1\r\nHost: localhost\r\n");
        if close {
            head.push_str("Connection: close\r\n");
        }
        if let Some(t) = &self.token {
            head.push_str("Authorization: Bearer ");
            head.push_str(t);
            head.push_str("\r\n");
        }
        match payload {
            Payload::Empty => {
                head.push_str("Content-Length: 0\r\n\r\n");
                conn.write_all(head.as_bytes())?;
            }
            Payload::Json(body) => {
                use std::fmt::Write as _;
                let _ = write!(
                    head,
                    "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                // One write for a small request: one segment, one wake-up of the server.
                if body.len() <= 8 << 10 {
                    let mut all = head.into_bytes();
                    all.extend_from_slice(body);
                    conn.write_all(&all)?;
                } else {
                    conn.write_all(head.as_bytes())?;
                    conn.write_all(body)?;
                }
            }
            Payload::Stream(input) => {
                head.push_str("Transfer-Encoding: chunked\r\n\r\n");
                conn.write_all(head.as_bytes())?;
                send_chunked(conn, &mut **input)?;
            }
        }
        conn.flush()?;
        Ok(())
    }

    /// A new connection, proved to reach the server of this client's store first when it is
    /// TCP ([`Client::for_store`]): a port is anyone's to take once its server is gone, while the
    /// Unix socket lives in the owner-only store directory (and was proved when found).
    pub(crate) fn connect(&self) -> Result<Box<dyn Conn>> {
        let mut conn = self.connect_only()?;
        if matches!(self.address, Address::Tcp(_)) && self.verified.is_some() {
            // The question is answered without waiting for the store: bounded even for a
            // client without a timeout, so that a stranger that never answers cannot hang it.
            let bound = self.timeout.unwrap_or(HEALTH_TIMEOUT);
            if self.timeout.is_none() {
                conn.set_timeouts(Some(bound))
                    .map_err(|e| self.connect_failed(e))?;
            }
            self.ask_identity(&mut conn)
                .map_err(|e| self.asked_error(e))?;
            if self.timeout.is_none() {
                conn.set_timeouts(None)
                    .map_err(|e| self.connect_failed(e))?;
            }
        }
        Ok(conn)
    }

    pub(crate) fn connect_failed(&self, source: std::io::Error) -> ClientError {
        ClientError::Connect {
            address: self.address(),
            source,
        }
    }

    /// A new connection, not proved.
    pub(crate) fn connect_only(&self) -> Result<Box<dyn Conn>> {
        let conn: Box<dyn Conn> = match &self.address {
            Address::Unix(p) => Box::new(PollFirst::new(
                unix_connect(p, self.timeout).map_err(|e| self.connect_failed(e))?,
            )),
            Address::Tcp(a) => {
                let s = tcp_connect(a, self.timeout).map_err(|e| self.connect_failed(e))?;
                let _ = s.set_nodelay(true);
                Box::new(s)
            }
        };
        conn.set_timeouts(self.timeout)
            .map_err(|e| self.connect_failed(e))?;
        Ok(conn)
    }

    /// Asks the identity question on a fresh connection and checks the answer (a client
    /// without a store to prove asks nothing). Only the question is sent: no token, no data.
    pub(crate) fn ask_identity(&self, conn: &mut Box<dyn Conn>) -> std::result::Result<(), Asked> {
        let Some(v) = &self.verified else {
            return Ok(());
        };
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Asked::Silent,
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe => Asked::Closed,
            _ => Asked::Io(e),
        };
        let nonce = crate::identity::random().map_err(Asked::Io)?;
        let question = format!(
            "GET {}?nonce={} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
            crate::identity::PATH,
            wire::to_hex(&nonce)
        );
        conn.write_all(question.as_bytes()).map_err(io)?;
        conn.flush().map_err(io)?;
        // Bounded: a stranger sending an endless line must not fill this process' memory.
        let mut r = BufReader::with_capacity(4096, (&mut **conn).take(IDENTITY_MAX));
        let head = read_head_from(&mut r).map_err(|e| match e.kind() {
            std::io::ErrorKind::Other | std::io::ErrorKind::InvalidData => {
                Asked::NotProved(format!("it does not speak HTTP ({e})"))
            }
            _ => io(e),
        })?;
        let Length::Exact(n) = head.length else {
            return Err(Asked::NotProved("its answer has no length".into()));
        };
        if n > IDENTITY_MAX {
            return Err(Asked::NotProved(format!("its answer is {n} bytes long")));
        }
        let mut body = Vec::new();
        (&mut r).take(n).read_to_end(&mut body).map_err(io)?;
        if (body.len() as u64) < n {
            return Err(Asked::Closed);
        }
        if !r.buffer().is_empty() || !head.keep_alive {
            return Err(Asked::NotProved(
                "it sent more than an answer, or closed the connection after it".into(),
            ));
        }
        if head.status == 503 {
            // A server shedding load answers every request so: its error, as any call would get.
            let resp = Response {
                status: head.status,
                headers: head.headers,
                body: Box::new(std::io::Cursor::new(body)),
            };
            return Err(match check(resp, crate::identity::PATH) {
                Err(e) => Asked::Refused(e),
                Ok(_) => Asked::NotProved("it answered HTTP 503".into()),
            });
        }
        if head.status != 200 {
            let text = String::from_utf8_lossy(&body);
            let text: String = text.chars().take(200).collect();
            return Err(Asked::NotProved(format!(
                "it answered the identity question with HTTP {} ({text}); an `oncelake serve` \
                 older than this client answers so too",
                head.status
            )));
        }
        let answer: crate::identity::IdentityW = serde_json::from_slice(&body).map_err(|e| {
            Asked::NotProved(format!(
                "its answer to the identity question is no identity ({e})"
            ))
        })?;
        match v.expect.check(&nonce, &answer) {
            crate::identity::Verdict::Ours => Ok(()),
            crate::identity::Verdict::OtherDirectory { path } => Err(Asked::OtherDirectory(path)),
            crate::identity::Verdict::NotProved(found) => Err(Asked::NotProved(found)),
        }
    }

    /// The error of a failed identity question.
    pub(crate) fn asked_error(&self, e: Asked) -> ClientError {
        let Some(v) = &self.verified else {
            return ClientError::Protocol("an identity question without a store".into());
        };
        match e {
            Asked::Io(source) => self.connect_failed(source),
            Asked::Closed => self.connect_failed(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the connection was closed before the server proved its identity",
            )),
            Asked::Silent => ClientError::NoAnswer {
                store: v.store.clone(),
                address: self.address(),
                pid: v.pid,
                running: process_running(v.pid),
                waited: self.timeout.unwrap_or(HEALTH_TIMEOUT),
            },
            Asked::OtherDirectory(path) => self.not_its_server(
                &v.store,
                v.pid,
                format!(
                    "it is the server of {path}, another directory of the same store (this one \
                     is a copy of it, or that one of this)"
                ),
            ),
            Asked::NotProved(found) => self.not_its_server(&v.store, v.pid, found),
            Asked::Refused(e) => e,
        }
    }

    pub(crate) fn not_its_server(&self, store: &Path, pid: u32, found: String) -> ClientError {
        ClientError::NotItsServer {
            store: store.to_path_buf(),
            address: self.address(),
            pid,
            found,
        }
    }

    /// Sends one request on a connection of its own and reads the answer's head (its body is
    /// then read as it streams); an error status becomes its error.
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        mut payload: Payload<'_>,
    ) -> Result<Response> {
        let during = format!("{method} {}", path.split('?').next().unwrap_or(path));
        let mut conn = self.connect()?;
        let sent = match self.send(&mut conn, method, path, &mut payload, true) {
            Err(Sent::Input(e)) => return Err(ClientError::Input(e)),
            Err(Sent::Conn(e)) => Err(e),
            Ok(()) => Ok(()),
        };
        // A server may answer before reading the whole body (401, 413): read its answer even if
        // sending failed, and report the send failure only when there is none.
        match read_head(conn) {
            Ok(resp) => check(resp, &during),
            Err(e) => Err(lost(&during, sent.err().unwrap_or(e))),
        }
    }
}

/// Why the identity question failed.
pub(crate) enum Asked {
    /// No answer within the timeout.
    Silent,
    /// The connection ended before a whole answer.
    Closed,
    /// The genuine server of another directory (the original of a copy), named.
    OtherDirectory(String),
    /// An answer that proves nothing: what it was.
    NotProved(String),
    /// Another I/O failure.
    Io(std::io::Error),
    /// An error answer the server gives every request now (503: overloaded).
    Refused(ClientError),
}

/// The longest identity answer read, head and body (a real one is about 400 bytes).
pub(crate) const IDENTITY_MAX: u64 = 16 << 10;

/// How a kept-alive exchange failed.
pub(crate) enum Exchange {
    /// The connection ended (or was reset) before any byte of an answer: the server did not
    /// take the request.
    Unanswered(ExchangeError),
    /// The connection broke later: the outcome is unknown.
    Broken(ExchangeError),
    /// An answer or a local failure, final.
    Failed(ExchangeError),
}

pub(crate) enum ExchangeError {
    /// The connection failed during the named request: its outcome is unknown.
    Io(String, std::io::Error),
    Client(ClientError),
}

impl From<ExchangeError> for ClientError {
    fn from(e: ExchangeError) -> Self {
        match e {
            ExchangeError::Io(during, e) => lost(&during, e),
            ExchangeError::Client(c) => c,
        }
    }
}
