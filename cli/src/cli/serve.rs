//! `oncelake serve STORE`: one process owns the store and serves it to the others (SPEC R20).

use super::{parse_duration, CliError};
use oncelake_server::{Client, ClientError, ServeError, ServeOptions};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct ServeArgs {
    /// The store.
    pub store: PathBuf,
    /// Listen on TCP (e.g. 127.0.0.1:7070; port 0 picks a free one) instead of the store's Unix
    /// socket; every request then needs the bearer token written to STORE/serve.json.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Allow a --listen address that is not loopback (the API has no TLS).
    #[arg(long)]
    pub allow_remote: bool,
    /// The largest upload accepted, in bytes (larger ones get 413 and commit nothing).
    #[arg(long, default_value_t = 64 << 30)]
    pub max_upload: u64,
    /// How long a client may stall while sending a request, or while it should be reading an
    /// answer, before it is dropped.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// redb's page cache in MiB (default: the engine's, 64); the server's memory is about this
    /// plus a few tens of MiB.
    #[arg(long)]
    pub cache_mib: Option<usize>,
    /// Threads that serve the connections (read requests, write answers); they never wait for
    /// the disk, so a few serve many connections. Made once; they never exit.
    #[arg(long, default_value_t = oncelake_server::DEFAULT_CONNECTION_THREADS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub connection_threads: usize,
    /// Threads that take every write waiting from all connections (commits, claims, renewals,
    /// releases) and hand them to the engine as one request, so that writes from many clients
    /// share durable groups.
    #[arg(long, default_value_t = oncelake_server::DEFAULT_COMMITTERS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub committers: usize,
    /// Threads that stage small uploads (a write and an fsync each): at most this many run at
    /// once, the others queue. Made once.
    #[arg(long, alias = "write-threads", default_value_t = oncelake_server::DEFAULT_STORE_THREADS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub store_threads: usize,
}

pub(crate) fn serve(a: ServeArgs, wait: Duration) -> Result<u8, CliError> {
    if !a.store.join(oncelake::MARKER_FILE).exists() {
        return Err(CliError::Usage(format!(
            "{} is not an oncelake store; create one with `oncelake init {}`",
            a.store.display(),
            a.store.display()
        )));
    }
    if let Some(code) = already_served(&a.store, wait, false)? {
        return Ok(code);
    }
    let mut opts = ServeOptions {
        listen: a.listen,
        allow_remote: a.allow_remote,
        lock_wait: wait,
        // Another `serve` that took the lock first will not let go: stop waiting once it
        // answers, and say so (below) instead of "locked" at the end of --wait.
        lock_wait_stop: Some(super::stop_when_served(&a.store, wait)),
        header_timeout: a.request_timeout,
        cache_bytes: a.cache_mib.map(|m| m << 20),
        connection_threads: a.connection_threads,
        committers: a.committers,
        store_threads: a.store_threads,
        ..ServeOptions::default()
    };
    opts.limits.max_upload = a.max_upload;
    opts.limits.body_idle = a.request_timeout;
    let store = a.store.display().to_string();
    let served = oncelake_server::serve(&a.store, opts, |address| {
        outln!(
            "serving {store} on {address} (pid {}); stop with SIGTERM or Ctrl-C",
            std::process::id()
        );
    });
    match served {
        Ok(()) => Ok(0),
        Err(ServeError::Store(oncelake::Error::Locked { .. })) => {
            already_served(&a.store, wait, true)?.ok_or_else(|| super::locked(&a.store, wait, true))
        }
        Err(ServeError::Store(e)) => Err(CliError::Engine(e)),
        Err(e @ ServeError::NotLoopback(_)) => Err(CliError::Usage(e.to_string())),
        Err(ServeError::Listen { address, source }) => {
            Err(CliError::io(format!("listen on {address}"), source))
        }
        Err(ServeError::Io { context, source }) => Err(CliError::io(context, source)),
    }
}

/// Exit 6 (`Some`) with a message naming the running server when one answers for the store.
/// Something else at the address of a `serve.json` left behind (a stranger on a dead server's
/// port) serves nothing: the store's lock decides, and the new server replaces the file. So
/// does a server that does not answer, until the lock turns out to be held (`locked`): then
/// the error names that server rather than "another process".
fn already_served(
    store: &std::path::Path,
    wait: Duration,
    locked: bool,
) -> Result<Option<u8>, CliError> {
    match Client::for_store_within(store, super::probe_timeout(wait)) {
        Err(ClientError::NotServed { .. } | ClientError::NotItsServer { .. }) => Ok(None),
        Err(ClientError::NoAnswer { .. }) if !locked => Ok(None),
        Ok(c) => {
            errln!(
                "error: store {} is already served at {}; use that server (every command finds it by itself)",
                store.display(),
                c.address()
            );
            Ok(Some(super::exit::BUSY))
        }
        Err(e) => Err(super::error::client_error(e)),
    }
}
