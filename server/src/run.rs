//! Running a server: take the store (its lock decides who serves it), clear what a killed
//! server left, listen, announce, serve until SIGTERM/SIGINT, then drain and clean up.

use crate::app::{App, Limits};
use crate::discovery::{self, ServeInfo, SOCKET_FILE};
use crate::http::router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Listen on TCP here instead of the store's Unix socket (requests need the bearer token).
    pub listen: Option<SocketAddr>,
    /// Allow a TCP address that is not loopback.
    pub allow_remote: bool,
    /// How long to wait for another process that holds the store.
    pub lock_wait: Duration,
    /// Stop waiting for the store's lock when this says so (see [`oncelake::Options`]): the CLI
    /// stops once another server of the store answers, which will not let go.
    pub lock_wait_stop: Option<oncelake::LockWaitStop>,
    /// Request limits and timeouts.
    pub limits: Limits,
    /// Longest wait for a request's headers on an open connection (slow clients), and longest
    /// a write of an answer may make no progress (a client that stopped reading) before the
    /// connection is dropped.
    pub header_timeout: Duration,
    /// Longest wait for in-flight requests at shutdown.
    pub drain_timeout: Duration,
    /// redb's page cache for the served store (the engine's default when `None`).
    pub cache_bytes: Option<usize>,
    /// Threads that serve the connections and run their commits, puts, claims, renewals and
    /// releases ([`crate::conns`]): at most this many wait for commit groups at once, and
    /// connections beyond this many share threads.
    pub connection_threads: usize,
    /// Threads that stage small uploads ([`crate::pool`]): made once, at most this many run at
    /// once.
    pub store_threads: usize,
    /// Threads that take the writes (commits, claims, renewals, releases) waiting from all
    /// connections and hand them to the engine as one request each time ([`crate::committer`]).
    pub committers: usize,
    /// glibc only: the most malloc arenas of this process (`mallopt(M_ARENA_MAX)`), set when
    /// serving starts unless `MALLOC_ARENA_MAX` is in the environment; `None` leaves glibc's
    /// default (8 per core). Process-wide: a program that embeds the server and tunes its own
    /// allocator sets `None`. See [`MALLOC_ARENAS`].
    pub malloc_arenas: Option<usize>,
    /// How long an idle thread of the blocking pool is kept before it exits, so that the
    /// threads a burst made (at most `limits.max_blocking` and a few for `/healthz`) are gone
    /// again once it has passed.
    pub blocking_keep_alive: Duration,
}

/// The server's default arena limit: one. With glibc's default each thread allocates from one of
/// up to 8 arenas per core, and the page cache's buffers (most of the server's heap, allocated by
/// whichever thread reads or writes a page: the connection threads and the blocking pool's) were
/// spread over 16 arenas here, each keeping its own freed chunks: resident memory kept rising
/// while the heap in use was level (BENCHMARKS.md, "Server"). In one arena a freed chunk is
/// reused by any thread. The lock it costs is taken only for chunks the per-thread caches do
/// not hold (larger than about 1 KiB), and on a machine with few cores few threads run at once.
pub const MALLOC_ARENAS: usize = 1;

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: None,
            allow_remote: false,
            lock_wait: Duration::from_secs(10),
            lock_wait_stop: None,
            limits: Limits::default(),
            header_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
            cache_bytes: None,
            connection_threads: crate::conns::DEFAULT_CONNECTION_THREADS,
            committers: crate::committer::DEFAULT_COMMITTERS,
            store_threads: crate::pool::DEFAULT_STORE_THREADS,
            malloc_arenas: Some(MALLOC_ARENAS),
            blocking_keep_alive: BLOCKING_KEEP_ALIVE,
        }
    }
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened (locked by another process, not a store, ...).
    #[error(transparent)]
    Store(#[from] oncelake::Error),
    /// Listening failed.
    #[error("cannot listen on {address}: {source}; pick another address or stop what uses it")]
    Listen {
        /// Where.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The TCP address is not loopback and remote access was not allowed.
    #[error("{0} is not a loopback address; the API has no TLS, so serve on 127.0.0.1 or ::1 (or allow remote access explicitly)")]
    NotLoopback(SocketAddr),
    /// Writing the address file, or another I/O step, failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why.
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServeError {
    let context = context.into();
    move |source| ServeError::Io { context, source }
}

enum Listener {
    Unix(tokio::net::UnixListener),
    Tcp(tokio::net::TcpListener),
}

/// Serves the store in `dir` until SIGTERM or SIGINT. `ready` is called with the address line
/// once requests are accepted. On return the store is closed (its index snapshot written) and
/// the socket and address files are removed.
pub fn serve(dir: &Path, opts: ServeOptions, ready: impl FnOnce(&str)) -> Result<(), ServeError> {
    serve_until(dir, opts, ready, None)
}

/// [`serve`], stopping also when `stop` completes (a program that embeds the server and ends it
/// itself). The signal handlers are installed either way.
pub fn serve_until(
    dir: &Path,
    opts: ServeOptions,
    ready: impl FnOnce(&str),
    stop: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
) -> Result<(), ServeError> {
    if let Some(addr) = opts.listen {
        if !addr.ip().is_loopback() && !opts.allow_remote {
            return Err(ServeError::NotLoopback(addr));
        }
    }
    if let Some(n) = opts.malloc_arenas {
        limit_malloc_arenas(n);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The async workers only accept connections (each is served on a connection thread,
        // `crate::conns`) and run the expiry timer: one is enough.
        .worker_threads(1)
        .enable_all()
        // The store calls that wait for no commit group (uploads, reads, listings, verify...)
        // run on the blocking pool, at most `max_blocking` at once (`crate::bounds`), and
        // `/healthz` beside them on threads of its own.
        .max_blocking_threads(opts.limits.max_blocking.max(1) + HEALTH_THREADS)
        // An idle pool thread exits after this: the footprint returns to idle after a burst.
        .thread_keep_alive(opts.blocking_keep_alive)
        .build()
        .map_err(io("start the server runtime"))?;
    runtime.block_on(serve_async(dir, opts, ready, stop))
}

/// Threads of the blocking pool beyond `max_blocking`: `/healthz` is counted against no bound,
/// so it finds a thread while clients run every call they may.
const HEALTH_THREADS: usize = 4;

/// How long the server waits after accepting failed (out of file descriptors, say) before it
/// tries again, instead of retrying at once in a loop that takes a whole core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Raises the soft limit on open files to the hard limit (servers hold a descriptor per
/// connection; the usual soft limit is 1024) and returns the soft limit now, if known.
fn raise_fd_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limits into `lim`, a valid rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit only reads `raised`; raising the soft limit up to the hard one is
        // always permitted.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    // rlim_t is u64 on Linux but not on every target.
    #[allow(clippy::unnecessary_cast)]
    Some(lim.rlim_cur as u64)
}

/// The connections the server may hold open: the configured bound, but never so many that the
/// descriptors the other bounded resources need (a file per call on the blocking pool and per
/// store thread, the store's own files, a margin) would run out, since accepting then fails.
fn connection_budget(limits: &Limits, store_threads: usize) -> usize {
    let Some(fds) = raise_fd_limit() else {
        return limits.max_connections;
    };
    let others = 2 * (limits.max_blocking + HEALTH_THREADS) + store_threads + 128;
    let room = usize::try_from(fds)
        .unwrap_or(usize::MAX)
        .saturating_sub(others);
    limits.max_connections.min(room.max(16))
}

/// Sets glibc's arena limit before the server's threads start (arenas are made as threads first
/// allocate), unless the environment sets it (`MALLOC_ARENA_MAX`, read by glibc itself).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas(n: usize) {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    let n = libc::c_int::try_from(n.max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only sets an allocator parameter (thread-safe in glibc); M_ARENA_MAX
    // bounds the arenas created from now on.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, n) };
}

/// Other allocators have no such setting.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas(_: usize) {}

/// How long an idle thread of the blocking pool is kept unless told otherwise: a load that
/// comes and goes within it reuses the threads it made.
pub const BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(10);

async fn serve_async(
    dir: &Path,
    opts: ServeOptions,
    ready: impl FnOnce(&str),
    stop: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
) -> Result<(), ServeError> {
    // Absolute, because every path the server hands out — the socket's in `serve.json` and the
    // ready line, objects' (`/v1/snapshot/object_path`), tables', verify's — goes to clients
    // whose working directory is not ours: a path relative to the server's would name nothing
    // for them (a command would not even find the server, fall back to opening the store
    // in-process and wait for its lock until it gave up).
    let dir = std::path::absolute(dir)
        .map_err(io(format!("resolve the store path {}", dir.display())))?;
    let store = {
        let (d, wait, cache) = (dir.clone(), opts.lock_wait, opts.cache_bytes);
        let stop = opts.lock_wait_stop.clone();
        tokio::task::spawn_blocking(move || {
            let mut o = oncelake::Options {
                lock_wait: wait,
                lock_wait_stop: stop,
                ..Default::default()
            };
            if let Some(c) = cache {
                o.cache_bytes = c;
            }
            oncelake::Store::open_with(&d, o)
        })
        .await
        .map_err(|e| io("open the store")(std::io::Error::other(e.to_string())))??
    };
    let dir: PathBuf = store.path().to_path_buf();
    // We hold the lock: whatever socket or address file is there was left by a dead server.
    discovery::remove_files(&dir);
    let store_id = store.store_id();
    let identity = crate::identity::Identity::new(store_id, &dir)
        .map_err(io(format!("read the identity of {}", dir.display())))?;
    let (listener, address, token) = listen(&dir, &opts).await?;
    let conns = crate::conns::ConnThreads::start(
        opts.connection_threads,
        tokio::runtime::Handle::current(),
    )
    .map_err(io("start the connection threads"))?;
    let committers = crate::committer::Committers::start(&store, opts.committers)
        .map_err(io("start the committer threads"))?;
    let store_threads = crate::pool::StoreThreads::start(opts.store_threads)
        .map_err(io("start the store threads"))?;
    let app = Arc::new(App::new(
        store,
        dir.clone(),
        opts.limits.clone(),
        committers,
        store_threads,
    )?);
    let info = ServeInfo {
        address: address.clone(),
        pid: std::process::id(),
        token: token.clone(),
        key: Some(identity.key_hex()),
        store_id: Some(store_id),
    };
    discovery::write_info(&dir, &info).map_err(io(format!(
        "write {}",
        dir.join(discovery::INFO_FILE).display()
    )))?;
    // Installed before the ready line: a SIGTERM sent as soon as it is read must drain.
    let signalled = shutdown_signal().map_err(io("install the SIGTERM/SIGINT handlers"))?;
    let shutdown = async move {
        match stop {
            Some(stop) => tokio::select! { _ = signalled => {}, _ = stop => {} },
            None => signalled.await,
        }
    };
    let table = crate::bounds::ConnTable::new(
        opts.limits.max_connections_per_client,
        connection_budget(&opts.limits, opts.store_threads),
    );
    ready(&address);
    let result = accept_loop(
        listener,
        app.clone(),
        &conns,
        &table,
        (token, Arc::new(identity)),
        &opts,
        shutdown,
    )
    .await;
    discovery::remove_files(&dir);
    // Stops the connection threads (connections still open after the drain are dropped), which
    // releases their references to the app.
    drop(conns);
    // The last reference: dropping the store syncs the tail and writes the index snapshot.
    drop(app);
    // A write whose client hung up while it was queued keeps the store open on one of the
    // engine's submission threads until it is answered; the store then closes there. Exiting
    // before that close is done would leave a log to replay at the next open.
    let (closing, bound) = (dir.to_path_buf(), opts.drain_timeout);
    let _ = tokio::task::spawn_blocking(move || oncelake::Store::wait_closed(closing, bound)).await;
    result
}

async fn listen(
    dir: &Path,
    opts: &ServeOptions,
) -> Result<(Listener, String, Option<String>), ServeError> {
    match opts.listen {
        None => {
            let path = dir.join(SOCKET_FILE);
            let l = bind_unix(&path)?;
            Ok((Listener::Unix(l), format!("unix:{}", path.display()), None))
        }
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Listen {
                    address: addr.to_string(),
                    source,
                })?;
            let local = l.local_addr().map_err(io("read the bound address"))?;
            let token = discovery::new_token().map_err(io("generate the bearer token"))?;
            Ok((Listener::Tcp(l), format!("tcp:{local}"), Some(token)))
        }
    }
}

/// Binds the socket owner-only: created under a umask of 077, so no other user can connect even
/// for an instant, then set to 0600.
fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, ServeError> {
    // SAFETY: umask only swaps the process's file-creation mask; it cannot fail. Other threads
    // creating files in between also get 077, which is only stricter.
    let old = unsafe { libc::umask(0o077) };
    let bound = tokio::net::UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let l = bound.map_err(|source| ServeError::Listen {
        address: path.display().to_string(),
        source,
    })?;
    // 0600 as documented (connecting needs write permission only; nobody else had any).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io(format!("chmod 0600 {}", path.display())))?;
    Ok(l)
}

async fn accept_loop(
    listener: Listener,
    app: Arc<App>,
    conns: &crate::conns::ConnThreads,
    table: &Arc<crate::bounds::ConnTable>,
    (token, identity): (Option<String>, Arc<crate::identity::Identity>),
    opts: &ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_timeout)
        .max_buf_size(64 << 10);
    let router = router(app.clone());
    let token: Option<Arc<str>> = token.map(Into::into);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut expire = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = expire.tick() => app.expire_staged(),
            conn = accept(&listener) => {
                let accepted = match conn {
                    Ok(a) => a,
                    Err(_) => {
                        // Out of descriptors or memory: try again in a while, not in a loop.
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                let ticket = match table.admit(accepted.client()) {
                    Ok(t) => t,
                    Err(over) => {
                        accepted.refuse(over, &app.live);
                        continue;
                    }
                };
                // The connection is served on a connection thread's runtime, so its socket is
                // registered with that runtime's reactor.
                let slot = conns.pick();
                let io = {
                    let _on = slot.handle.enter();
                    match accepted.adopt(opts.header_timeout) {
                        Ok(io) => io,
                        Err(_) => continue,
                    }
                };
                let svc = crate::conns::tracked(
                    crate::auth::service(
                        router.clone(),
                        app.clone(),
                        token.clone(),
                        identity.clone(),
                    ),
                    ticket.0.clone(),
                    {
                        let app = app.clone();
                        Arc::new(move || app.live.overloaded())
                    },
                );
                let conn = builder.serve_connection(io, svc);
                let watched = graceful.watch(conn);
                let guard = crate::app::ConnGuard::open(&app);
                let handle = slot.handle.clone();
                handle.spawn(async move {
                    // A connection the table evicted (it needed the place) is dropped, closed.
                    tokio::select! {
                        _ = watched => {}
                        _ = ticket.0.evicted() => {}
                    }
                    drop(guard);
                    drop(slot);
                    drop(ticket);
                });
            }
        }
    }
    drop(listener);
    // In-flight requests (commits above all) finish; idle connections close.
    let _ = tokio::time::timeout(opts.drain_timeout, graceful.shutdown()).await;
    Ok(())
}

/// An accepted connection of either kind, as one I/O type.
type Io = TokioIo<Box<dyn crate::auth::Stream>>;

/// An accepted connection, its socket still registered with the accept loop's reactor.
enum Accepted {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

impl Accepted {
    /// Who connected, for the per-client bounds: the peer's process on the Unix socket, its
    /// host on TCP.
    fn client(&self) -> crate::bounds::ClientId {
        use crate::bounds::ClientId;
        match self {
            Accepted::Unix(s) => match s.peer_cred() {
                Ok(c) => match c.pid() {
                    Some(pid) => ClientId::Process(pid),
                    None => ClientId::User(c.uid()),
                },
                Err(_) => ClientId::Unknown,
            },
            Accepted::Tcp(s) => match s.peer_addr() {
                Ok(a) => ClientId::Host(a.ip()),
                Err(_) => ClientId::Unknown,
            },
        }
    }

    /// Answers `503` and closes ([`crate::conns::refuse`]), on the accept loop's runtime.
    fn refuse(self, over: crate::bounds::Overloaded, live: &crate::live::Live) {
        match self {
            Accepted::Unix(s) => crate::conns::refuse(s, over, live),
            Accepted::Tcp(s) => crate::conns::refuse(s, over, live),
        }
    }

    /// Moves the socket to the reactor of the runtime entered now (a connection thread's), its
    /// writes failing once stalled for `write_timeout` (a client that stopped reading).
    fn adopt(self, write_timeout: Duration) -> std::io::Result<Io> {
        use crate::stall::WriteTimeout;
        Ok(match self {
            Accepted::Unix(s) => {
                let s = tokio::net::UnixStream::from_std(s.into_std()?)?;
                TokioIo::new(Box::new(WriteTimeout::new(s, write_timeout)))
            }
            Accepted::Tcp(s) => {
                let s = tokio::net::TcpStream::from_std(s.into_std()?)?;
                TokioIo::new(Box::new(WriteTimeout::new(s, write_timeout)))
            }
        })
    }
}

async fn accept(listener: &Listener) -> std::io::Result<Accepted> {
    Ok(match listener {
        Listener::Unix(l) => Accepted::Unix(l.accept().await?.0),
        Listener::Tcp(l) => {
            let (s, _) = l.accept().await?;
            let _ = s.set_nodelay(true);
            Accepted::Tcp(s)
        }
    })
}

/// Registers the handlers now; the future completes at the first SIGTERM or SIGINT.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
