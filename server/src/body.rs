//! Request bodies: JSON bodies read within the limit, and uploads streamed into staging at a
//! bounded memory cost, with the size limit and the idle timeout enforced as pieces arrive.

use crate::api_error::{ApiError, ApiResult};
use crate::app::{App, Limits};
use axum::body::HttpBody as _;
use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use http_body_util::BodyExt;
use oncelake::Staged;
use serde::Deserialize;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

/// Reads a whole body of at most `max_json` bytes within the idle timeout; `too_large` says what
/// to do instead (it gets the limit).
pub(crate) async fn read_body(
    app: &App,
    body: Body,
    too_large: impl FnOnce(usize) -> String,
) -> ApiResult<axum::body::Bytes> {
    read_body_max(app, body, app.limits.max_json, too_large).await
}

/// [`read_body`] with a limit of `max` bytes.
pub(crate) async fn read_body_max(
    app: &App,
    body: Body,
    max: usize,
    too_large: impl FnOnce(usize) -> String,
) -> ApiResult<axum::body::Bytes> {
    // A declared length over the limit is refused before any of it is read: waiting for bytes
    // that will be refused anyway would hold the connection until the idle timeout.
    if body.size_hint().lower() > max as u64 {
        app.live.too_large();
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            too_large(max),
        ));
    }
    let limited = http_body_util::Limited::new(body, max);
    let collected = tokio::time::timeout(app.limits.body_idle, limited.collect())
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "the request body did not arrive in time; send it at once",
            )
        })?;
    let collected = collected.map_err(|e| {
        if e.is::<http_body_util::LengthLimitError>() {
            app.live.too_large();
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", too_large(max))
        } else {
            ApiError::bad(format!("could not read the request body: {e}"))
        }
    })?;
    Ok(collected.to_bytes())
}

/// Reads a whole JSON body within the size limit and the idle timeout.
pub(crate) async fn read_json<T: for<'de> Deserialize<'de>>(app: &App, body: Body) -> ApiResult<T> {
    let bytes = read_body(app, body, |max| {
        format!("the JSON request body is larger than {max} bytes; split the batch")
    })
    .await?;
    // Not counted here: every 400 answer is counted once, where it leaves (`auth::service`).
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad(format!("the request body is not the expected JSON: {e}")))
}

/// Uploads of at most this many bytes are read whole by the connection's thread and staged on a
/// store thread ([`upload`]); larger ones stream to the blocking pool.
pub(crate) const SMALL_UPLOAD: u64 = 64 << 10;

/// Stages a request body. A body that ends within [`SMALL_UPLOAD`] bytes (the usual put of one
/// small object) is read whole into memory by the connection's thread and staged on one of the
/// store threads ([`crate::pool`]): one hand-off, no channel, and no thread made per upload (so
/// a load of small puts runs on the server's fixed threads alone).
/// A larger body streams into the engine's staging writer on the blocking pool: pieces go
/// through a small bounded channel (so memory stays constant whatever the size), the size limit
/// and the idle timeout are enforced as they arrive, and a body that ends in an error (the
/// client went away) makes the staging fail, so its unnamed file is discarded and nothing is
/// committed.
pub(crate) async fn upload(app: &Arc<App>, mut body: Body) -> ApiResult<Staged> {
    let _in_flight = app.live.upload_started();
    // A declared length over the limit: refused at once, nothing staged (as `read_body`).
    if body.size_hint().lower() > app.limits.max_upload {
        app.live.too_large();
        app.live.upload_aborted();
        return Err(upload_too_large(app));
    }
    let mut head: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    let mut pace = Pace::new(&app.limits);
    if crate::conns::on_connection_thread() {
        while total <= SMALL_UPLOAD {
            match next_data(app, &mut body, &mut total, &mut pace).await {
                Err(e) => {
                    app.live.upload_aborted();
                    return Err(e);
                }
                Ok(Some(data)) => head.push(data),
                Ok(None) => {
                    let store = app.store.clone();
                    let staged = app
                        .store_threads
                        .run(move || {
                            store.stage_reader(PiecesReader {
                                pieces: head.into(),
                            })
                        })
                        .await;
                    return match staged {
                        Ok(r) => r.map_err(ApiError::from),
                        Err(crate::pool::Panicked) => Err(ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "internal",
                            "staging did not finish (it panicked); nothing was committed",
                        )),
                    };
                }
            }
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Piece>(4);
    let app2 = app.clone();
    // The writer holds a thread of the pool for as long as the client takes to send the body:
    // bounded per client and in total like every call there, so slow uploads cannot take the
    // threads that reads and other clients need.
    let writer = match app.spawn_blocking(move || app2.store.stage_reader(ChannelReader::new(rx))) {
        Ok(w) => w,
        Err(over) => {
            app.live.upload_aborted();
            return Err(over.into());
        }
    };
    let fed = feed(app, &mut body, tx, head, total, pace).await;
    let staged = writer.await;
    if let Err(e) = fed {
        app.live.upload_aborted();
        return Err(e);
    }
    match staged {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("staging did not finish ({e}); nothing was committed"),
        )),
    }
}

/// A `Read` over a small upload's pieces, read whole before staging.
pub(crate) struct PiecesReader {
    pieces: std::collections::VecDeque<Bytes>,
}

impl Read for PiecesReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(front) = self.pieces.front_mut() {
            if front.is_empty() {
                self.pieces.pop_front();
                continue;
            }
            let n = buf.len().min(front.len());
            buf[..n].copy_from_slice(&front[..n]);
            *front = front.slice(n..);
            return Ok(n);
        }
        Ok(0)
    }
}

/// The pace of an upload: the bytes that arrived in the current window of `body_idle`, which
/// must reach `min_body_rate` per second over the window (a slow-loris trickling a byte now and
/// then is cut off, not kept with its file and thread forever).
pub(crate) struct Pace {
    window: Duration,
    /// Bytes each window must bring (0: no rate is checked).
    need: u64,
    ends: tokio::time::Instant,
    got: u64,
}

impl Pace {
    pub(crate) fn new(limits: &Limits) -> Pace {
        let window = limits.body_idle;
        Pace {
            window,
            need: (limits.min_body_rate as u128 * window.as_millis() / 1000) as u64,
            ends: tokio::time::Instant::now() + window,
            got: 0,
        }
    }

    /// When the wait for the next piece ends: the idle timeout, or sooner the window's end while
    /// the window has not brought its bytes.
    fn deadline(&self) -> tokio::time::Instant {
        let idle = tokio::time::Instant::now() + self.window;
        if self.got < self.need {
            idle.min(self.ends)
        } else {
            idle
        }
    }

    /// Counts `n` bytes arrived; starts the next window once this one has ended.
    fn arrived(&mut self, n: usize) -> Result<(), ()> {
        self.got += n as u64;
        self.check()
    }

    /// At or after the window's end: whether it brought enough, and a new window if so.
    fn check(&mut self) -> Result<(), ()> {
        let now = tokio::time::Instant::now();
        if now < self.ends {
            return Ok(());
        }
        if self.got < self.need {
            return Err(());
        }
        self.ends = now + self.window;
        self.got = 0;
        Ok(())
    }

    fn too_slow(&self) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!(
                "the upload arrived slower than {} bytes in {:?}; the staging was discarded and \
                 nothing committed. Send the body at once",
                self.need, self.window
            ),
        )
    }
}

/// The next piece of an upload's data (`None` at its end), within the idle timeout and the
/// slowest pace accepted, counted into `total` against the upload limit.
pub(crate) async fn next_data(
    app: &App,
    body: &mut Body,
    total: &mut u64,
    pace: &mut Pace,
) -> ApiResult<Option<Bytes>> {
    loop {
        let frame = match tokio::time::timeout_at(pace.deadline(), body.frame()).await {
            Err(_) => {
                if pace.check().is_err() {
                    return Err(pace.too_slow());
                }
                return Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    format!(
                        "no upload data for {:?}; the staging was discarded and nothing committed",
                        app.limits.body_idle
                    ),
                ));
            }
            Ok(None) => return Ok(None),
            Ok(Some(Err(e))) => {
                return Err(ApiError::bad(format!(
                    "the upload broke off ({e}); the staging was discarded and nothing committed"
                )))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        *total += data.len() as u64;
        if *total > app.limits.max_upload {
            app.live.too_large();
            return Err(upload_too_large(app));
        }
        if pace.arrived(data.len()).is_err() {
            return Err(pace.too_slow());
        }
        return Ok(Some(data));
    }
}

pub(crate) fn upload_too_large(app: &App) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!(
            "the upload is larger than {} bytes; nothing was committed",
            app.limits.max_upload
        ),
    )
}

/// Feeds an upload into the staging writer's channel: first `head` (the pieces already read,
/// `total` bytes), then the rest of the body. Any error is also sent, so the staging fails. A
/// full channel (the disk is slower than the network) is waited for here, on the connection's
/// runtime, holding no thread.
pub(crate) async fn feed(
    app: &App,
    body: &mut Body,
    tx: tokio::sync::mpsc::Sender<Piece>,
    head: Vec<Bytes>,
    mut total: u64,
    mut pace: Pace,
) -> ApiResult<()> {
    for data in head {
        if tx.send(Piece::Data(data)).await.is_err() {
            // The staging writer stopped (its error is reported by `upload`).
            return Ok(());
        }
    }
    loop {
        match next_data(app, body, &mut total, &mut pace).await {
            Err(e) => {
                let _ = tx.send(Piece::Failed(e.message.clone())).await;
                return Err(e);
            }
            Ok(None) => {
                let _ = tx.send(Piece::End).await;
                return Ok(());
            }
            Ok(Some(data)) => {
                if tx.send(Piece::Data(data)).await.is_err() {
                    // The staging writer stopped (its error is reported by `upload`).
                    return Ok(());
                }
            }
        }
    }
}

/// One piece of an upload on its way to the staging writer.
pub(crate) enum Piece {
    Data(Bytes),
    /// The body ended normally.
    End,
    /// The upload failed; staging must fail.
    Failed(String),
}

/// A `Read` over the pieces of an upload. Only an explicit end is the end: a sender that
/// vanished (the handler was dropped because the client went away) is an error, so a cut-off
/// upload never becomes a (truncated) object.
pub(crate) struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Piece>,
    cur: Bytes,
    ended: bool,
}

impl ChannelReader {
    /// Reads `rx` from a thread of the blocking pool (it blocks for each piece).
    pub(crate) fn new(rx: tokio::sync::mpsc::Receiver<Piece>) -> Self {
        ChannelReader {
            rx,
            cur: Bytes::new(),
            ended: false,
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            if self.ended {
                return Ok(0);
            }
            match self.rx.blocking_recv() {
                Some(Piece::Data(b)) => self.cur = b,
                Some(Piece::End) => self.ended = true,
                Some(Piece::Failed(why)) => return Err(std::io::Error::other(why)),
                None => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the upload was cut off",
                    ))
                }
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        Ok(n)
    }
}
