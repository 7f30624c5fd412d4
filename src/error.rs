//! The library's one error type. Rejections decided by the commit rules (duplicate, conflict,
//! stale, fenced) are *outcomes*, not errors: they are reported in a [`crate::CommitReport`].

use std::path::PathBuf;

/// Everything the engine's public API can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A unit key broke the key rules.
    #[error("invalid unit key {key:?}: {reason} (a unit key is UTF-8, 1..=1024 bytes, without control characters)")]
    InvalidKey {
        /// The offending key, shortened for display.
        key: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// The directory exists, is not empty and is not an oncelake store.
    #[error("{path} is not an oncelake store (it is not empty and has no {marker}); pick an empty or missing directory to create a store there")]
    NotAStore {
        /// The directory.
        path: PathBuf,
        /// The file whose absence proves it.
        marker: &'static str,
    },
    /// The store was written by a newer oncelake.
    #[error("store {path} has format version {found}, this oncelake understands up to {supported}; upgrade oncelake to open it (nothing was changed)")]
    NewerFormat {
        /// The store directory.
        path: PathBuf,
        /// The version stamped in the store.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// A store file is damaged.
    #[error("store {path} is corrupt: {detail}; nothing was changed — restore it from a backup or run `oncelake verify` on a copy")]
    Corrupt {
        /// The damaged file or directory.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// Another process holds the store's lock.
    #[error("store {path} is locked by another process; wait for it to finish (the CLI waits up to --wait)")]
    Locked {
        /// The store directory.
        path: PathBuf,
    },
    /// An earlier write failed to reach the disk; the store refuses writes until it is reopened.
    #[error("store is in a failed state after an I/O error ({cause}); no later write is accepted — reopen the store to recover from its last durable state")]
    Failed {
        /// The error that put the store in this state.
        cause: String,
    },
    /// An operating-system I/O error, with what the engine was doing.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, and on which path.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An error inside redb.
    #[error("database error while {context}: {detail}")]
    Database {
        /// What was being done.
        context: &'static str,
        /// redb's own message.
        detail: String,
    },
    /// A log record failed to decode.
    #[error("commit log record is invalid: {0}")]
    BadRecord(String),
    /// A read asked for a sequence number outside the history that is kept.
    #[error("seq {asked} is not readable: history is kept from seq {oldest} to {newest}")]
    SeqOutOfRange {
        /// The seq asked for.
        asked: u64,
        /// The oldest readable seq.
        oldest: u64,
        /// The newest committed seq.
        newest: u64,
    },
    /// An object referenced by the manifest is missing or unreadable.
    #[error("object {object} is missing from the store (unit {unit:?}); run `oncelake verify` to see what else is affected")]
    MissingObject {
        /// Hex content hash.
        object: String,
        /// The unit that references it.
        unit: String,
    },
    /// A request was malformed.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The commit leader panicked while deciding the group; nothing of it was applied.
    #[error("internal error: the commit leader panicked; the commit was not applied — please report this")]
    LeaderPanicked,
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn db(context: &'static str, e: impl std::fmt::Display) -> Self {
        Error::Database {
            context,
            detail: e.to_string(),
        }
    }
}

/// Attaches context to I/O results: `file.sync_all().ctx(|| format!("sync {path:?}"))?`.
pub(crate) trait IoContext<T> {
    fn ctx<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| Error::io(f(), e))
    }
}

/// Converts redb results, naming what was being done.
pub(crate) trait DbContext<T> {
    fn db(self, context: &'static str) -> Result<T>;
}

impl<T, E: std::fmt::Display> DbContext<T> for std::result::Result<T, E> {
    fn db(self, context: &'static str) -> Result<T> {
        self.map_err(|e| Error::db(context, e))
    }
}
