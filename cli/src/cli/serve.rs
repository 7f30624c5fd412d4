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
    /// How long a client may stall while sending a request before it is dropped.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,
}

pub(crate) fn serve(a: ServeArgs, wait: Duration) -> Result<u8, CliError> {
    if !a.store.join(oncelake::MARKER_FILE).exists() {
        return Err(CliError::Usage(format!(
            "{} is not an oncelake store; create one with `oncelake init {}`",
            a.store.display(),
            a.store.display()
        )));
    }
    match Client::for_store(&a.store) {
        Err(ClientError::NotServed { .. }) => {}
        Ok(c) => {
            errln!(
                "error: store {} is already served at {}; use that server (every command finds it by itself)",
                a.store.display(),
                c.address()
            );
            return Ok(6);
        }
        Err(e) => return Err(super::remote::client_error(e)),
    }
    let mut opts = ServeOptions {
        listen: a.listen,
        allow_remote: a.allow_remote,
        lock_wait: wait,
        header_timeout: a.request_timeout,
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
        Err(ServeError::Store(e)) => Err(CliError::Engine(e)),
        Err(e @ ServeError::NotLoopback(_)) => Err(CliError::Usage(e.to_string())),
        Err(ServeError::Listen { address, source }) => {
            Err(CliError::io(format!("listen on {address}"), source))
        }
        Err(ServeError::Io { context, source }) => Err(CliError::io(context, source)),
    }
}
