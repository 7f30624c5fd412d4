//! The client's one error type: what went wrong talking to a server, and what to do.

use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong talking to a server; each variant says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No server answers for the store.
    #[error("no server answers for store {store}; start one with `oncelake serve {store}` or open the store in-process")]
    NotServed {
        /// The store directory.
        store: PathBuf,
    },
    /// The server could not be reached.
    #[error("cannot reach the oncelake server at {address}: {source}; is `oncelake serve` still running? (if it was killed, start it again: it takes over cleanly)")]
    Connect {
        /// Where.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The connection broke after the request was sent: its outcome is unknown.
    #[error("the connection to the oncelake server broke during {during}: {source}; the outcome is unknown — look the unit up before retrying (a retried put of the same bytes is answered as a duplicate if it was committed)")]
    ConnectionLost {
        /// The request.
        during: String,
        /// Why.
        source: std::io::Error,
    },
    /// The server refused the bearer token.
    #[error("the server refused the request (401): {message}")]
    Unauthorized {
        /// The server's message.
        message: String,
    },
    /// The request was too large.
    #[error("the request is too large (413): {message}")]
    TooLarge {
        /// The server's message.
        message: String,
    },
    /// The server found the request malformed, or the store refused it as invalid.
    #[error("{message}")]
    BadRequest {
        /// Stable kind (`bad_request`, `invalid_key`, `invalid_request`, `seq_out_of_range`, ...).
        kind: String,
        /// The message.
        message: String,
    },
    /// An object the server sent does not match its entry's size and CRC32: the engine's own
    /// `Error::Corrupt`, exactly what an in-process read of it returns (SPEC I2, I9).
    #[error("{0}")]
    Damaged(oncelake::Error),
    /// The store failed the operation on the server side (I/O, read-only, failed state, ...).
    #[error("{message}")]
    Store {
        /// Stable kind (`io`, `read_only`, `failed`, `missing_object`, `corrupt`, ...).
        kind: String,
        /// HTTP status.
        status: u16,
        /// The message.
        message: String,
    },
    /// Reading the local input of an upload failed; nothing was committed.
    #[error("reading the upload's input failed: {0}; nothing was committed")]
    Input(std::io::Error),
    /// The server answered something this client does not understand.
    #[error("unexpected answer from the oncelake server: {0}; are the client and server the same version?")]
    Protocol(String),
    /// What answers at the address in the store's `serve.json` is not the server of this store
    /// (SPEC R20): it could not prove that it holds it. Neither the token nor any data was sent.
    #[error(
        "{address}, named by {store}/serve.json, is not the server of {store}: {found}. Nothing \
         was sent to it (neither the token nor any data). The server that wrote serve.json (pid \
         {pid}) may have been killed and its address taken over by another process: start \
         `oncelake serve {store}` again (it replaces serve.json), or remove {store}/serve.json \
         to use the store in-process",
        store = .store.display()
    )]
    NotItsServer {
        /// The store directory.
        store: PathBuf,
        /// The address in `serve.json`.
        address: String,
        /// The pid in `serve.json`.
        pid: u32,
        /// What was found there instead.
        found: String,
    },
    /// The server of the store accepted the connection but did not answer in time: it holds the
    /// store (or something holds its address) and is hung or overloaded.
    #[error(
        "the oncelake server of {store} at {address} (pid {pid}{running}) accepted the \
         connection but did not answer within {waited:?}; it is hung or overloaded and the store \
         is busy: wait longer (--wait), or stop it (`kill {pid}`) and run again",
        store = .store.display(),
        running = if *.running { "" } else { ", no longer running" }
    )]
    NoAnswer {
        /// The store directory.
        store: PathBuf,
        /// The address in `serve.json`.
        address: String,
        /// The pid in `serve.json`.
        pid: u32,
        /// Whether that pid is a live process.
        running: bool,
        /// How long the client waited.
        waited: Duration,
    },
}

/// Result of client calls.
pub type Result<T> = std::result::Result<T, ClientError>;

/// The connection broke during `during`: the outcome is unknown.
pub(crate) fn lost(during: &str, source: std::io::Error) -> ClientError {
    ClientError::ConnectionLost {
        during: during.to_string(),
        source,
    }
}
