//! A write timeout for connections: a client that stops reading an answer (a streamed object, a
//! listing, a plan) must not hold the server's resources forever. While its socket buffer is
//! full, the answer's producer — a thread of the blocking pool, holding an open file or a
//! snapshot (a redb read transaction, and GC pins) — waits for room in its channel, and hyper
//! has no write timeout of its own. So a write that makes no progress for the limit fails the
//! connection: hyper drops it, the producer's channel closes, the producer stops and lets go.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, whose writes (and flushes) fail with `TimedOut` once they have been pending for
/// `limit` without progress.
pub(crate) struct WriteTimeout<S> {
    inner: S,
    limit: Duration,
    /// Armed when a write first found the socket full; cleared by any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteTimeout<S> {
    pub(crate) fn new(inner: S, limit: Duration) -> Self {
        WriteTimeout {
            inner,
            limit,
            stalled: None,
        }
    }

    /// After a pending write: arms the timer (or checks the armed one).
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing of the answer for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// What a write or flush of the inner stream answered: pending arms the timer, anything
    /// else is progress and disarms it.
    fn progress<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.pending(cx),
            done => {
                self.stalled = None;
                done
            }
        }
    }
}

use std::future::Future;

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
