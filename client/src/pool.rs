//! The kept-alive connections a client and its clones share.

use crate::conn::Conn;
use std::io::BufReader;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most idle connections a client keeps.
pub const POOL_MAX: usize = 64;

/// An idle connection older than this is closed rather than reused: the server closes idle
/// connections after its header timeout (30 s by default, as low as a second when configured),
/// and a connection it is closing must not carry a request.
pub(crate) const POOL_IDLE: Duration = Duration::from_secs(2);

/// An upload reuses only a connection idle for less than this (see [`Client::exchange`]).
pub(crate) const UPLOAD_REUSE: Duration = Duration::from_millis(250);

/// A connection with what the server sent on it and was not read yet (nothing, when idle).
pub(crate) type Pooled = BufReader<Box<dyn Conn>>;

/// The idle kept-alive connections of a client and its clones: each with when it was last used
/// and the read/write timeout it has (clones may differ in timeout, and setting it costs two
/// system calls per request, so it is set only when it changes).
///
/// The connections belong to the process that made them. A child `fork()`ed from it (a
/// `multiprocessing` worker with the parent's served `Store`) inherits copies of the same
/// sockets: were both to send on one, each could read the other's answer — the outcome of
/// another unit's commit. So the first use in another process drops the inherited ones
/// (closing the child's descriptors only; the parent's connections stay open) and the pool is
/// the child's from then on.
#[derive(Default)]
pub(crate) struct Pool {
    pub(crate) idle: Mutex<Idle>,
}

/// The idle connections and the process they belong to (0 before the first is kept).
#[derive(Default)]
pub(crate) struct Idle {
    pub(crate) conns: Vec<(Pooled, Instant, Option<Duration>)>,
    pub(crate) owner: u32,
}

impl Idle {
    /// The connections of this process, dropping those inherited across a `fork()`.
    pub(crate) fn of_this_process(&mut self) -> &mut Vec<(Pooled, Instant, Option<Duration>)> {
        let me = std::process::id();
        if self.owner != me {
            self.conns.clear();
            self.owner = me;
        }
        &mut self.conns
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.idle.lock().map(|v| v.conns.len()).unwrap_or(0);
        write!(f, "Pool({n} idle)")
    }
}

impl Pool {
    /// An idle connection the server has not closed, if any.
    /// The most recently used idle connection, if it was used less than `max_age` ago and
    /// the server has not closed it. Older ones are closed.
    pub(crate) fn take(&self, max_age: Duration) -> Option<(Pooled, Option<Duration>)> {
        loop {
            let (conn, at, timeout) = {
                let mut guard = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                let idle = guard.of_this_process();
                match idle.last() {
                    Some((_, at, _)) if at.elapsed() >= POOL_IDLE => {
                        // All are older (the newest is last): close them.
                        idle.clear();
                        return None;
                    }
                    Some((_, at, _)) if at.elapsed() >= max_age => return None,
                    Some(_) => idle.pop()?,
                    None => return None,
                }
            };
            // Anything readable on an idle connection (end of stream, or bytes nobody asked
            // for) means it cannot carry another request.
            if at.elapsed() < max_age && conn.buffer().is_empty() && conn.get_ref().idle_open() {
                return Some((conn, timeout));
            }
        }
    }

    pub(crate) fn put(&self, conn: Pooled, timeout: Option<Duration>) {
        let mut guard = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let idle = guard.of_this_process();
        if idle.len() < POOL_MAX {
            idle.push((conn, Instant::now(), timeout));
        }
    }

    /// Idle connections kept (for tests).
    pub(crate) fn len(&self) -> usize {
        self.idle.lock().map(|v| v.conns.len()).unwrap_or(0)
    }
}
