//! HTTP/1.1 framing on a connection: request bodies sent chunked, answers' heads and bodies read.

use crate::conn::Conn;
use crate::error::{ClientError, Result};
use crate::wire::ErrorBody;
use std::io::{BufRead, BufReader, Read, Write};

/// Why a streamed upload stopped.
pub(crate) enum Sent {
    Input(std::io::Error),
    Conn(std::io::Error),
}

impl From<std::io::Error> for Sent {
    fn from(e: std::io::Error) -> Self {
        Sent::Conn(e)
    }
}

pub(crate) fn send_chunked(
    conn: &mut Box<dyn Conn>,
    input: &mut dyn Read,
) -> std::result::Result<(), Sent> {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Sent::Input(e)),
        };
        conn.write_all(format!("{n:x}\r\n").as_bytes())?;
        conn.write_all(&buf[..n])?;
        conn.write_all(b"\r\n")?;
    }
    conn.write_all(b"0\r\n\r\n")?;
    Ok(())
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| ClientError::Protocol(e.to_string()))
}

pub(crate) fn unit_query(base: &str, unit: &str, at: Option<u64>) -> String {
    let mut q = format!("{base}?unit={}", encode(unit));
    if let Some(at) = at {
        q.push_str(&format!("&at={at}"));
    }
    q
}

/// Percent-encodes a query value (everything but unreserved characters).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An answer: status, headers, and its body as a reader.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Box<dyn Read + Send>,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How an answer's body is delimited.
#[derive(Clone, Copy)]
pub(crate) enum Length {
    Exact(u64),
    Chunked,
    UntilClose,
}

/// An answer's status line and headers.
pub(crate) struct Head {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) length: Length,
    /// The server keeps the connection open after this answer.
    pub(crate) keep_alive: bool,
}

pub(crate) fn read_head_from(r: &mut impl BufRead) -> std::io::Result<Head> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if line.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the server closed the connection without an answer",
        ));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP status line: {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the answer's headers broke off",
            ));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let length = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        Length::Chunked
    } else if let Some(n) = find("content-length").and_then(|v| v.parse().ok()) {
        Length::Exact(n)
    } else {
        Length::UntilClose
    };
    let keep_alive = !find("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    Ok(Head {
        status,
        headers,
        length,
        keep_alive,
    })
}

pub(crate) fn read_head(conn: Box<dyn Conn>) -> std::io::Result<Response> {
    let mut r = BufReader::new(conn);
    let head = read_head_from(&mut r)?;
    let body: Box<dyn Read + Send> = match head.length {
        Length::Chunked => Box::new(Chunked {
            inner: r,
            left: 0,
            done: false,
        }),
        Length::Exact(n) => Box::new(Exact {
            inner: r.take(n),
            want: n,
        }),
        Length::UntilClose => Box::new(r),
    };
    Ok(Response {
        status: head.status,
        headers: head.headers,
        body,
    })
}

/// Turns an error status into its [`ClientError`].
pub(crate) fn check(mut resp: Response, during: &str) -> Result<Response> {
    if resp.status < 400 {
        return Ok(resp);
    }
    let mut text = String::new();
    let _ = resp.body.read_to_string(&mut text);
    let (kind, message) = match serde_json::from_str::<ErrorBody>(&text) {
        Ok(b) => (b.error, b.message),
        Err(_) => (
            "http".to_string(),
            format!("{during}: HTTP {}: {text}", resp.status),
        ),
    };
    Err(match resp.status {
        401 => ClientError::Unauthorized { message },
        413 => ClientError::TooLarge { message },
        400 => ClientError::BadRequest { kind, message },
        status => ClientError::Store {
            kind,
            status,
            message,
        },
    })
}

/// A body of known length: ending early is an error, not a short body.
pub(crate) struct Exact<R> {
    pub(crate) inner: std::io::Take<R>,
    pub(crate) want: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.inner.limit() > 0 && !buf.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the answer ended after {} of {} bytes",
                    self.want - self.inner.limit(),
                    self.want
                ),
            ));
        }
        Ok(n)
    }
}

/// A chunked body; ending before the last chunk is an error.
pub(crate) struct Chunked<R> {
    pub(crate) inner: R,
    pub(crate) left: u64,
    pub(crate) done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            self.inner.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or("");
            self.left = u64::from_str_radix(size, 16).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the answer broke off (chunk header {line:?})"),
                )
            })?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left as usize);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the answer broke off mid-chunk",
            ));
        }
        self.left -= n as u64;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}
