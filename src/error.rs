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
    /// A store was to be created inside the directory tree of another store.
    #[error("{path} is inside the oncelake store {outer}; a store cannot hold another store (its GC and verify would see the inner store's files as strays) — pick a directory outside {outer}")]
    NestedStore {
        /// The directory where the new store was to be created.
        path: PathBuf,
        /// The store that holds it.
        outer: PathBuf,
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
    /// The store has a format from before this build's: only development builds of this
    /// repository ever wrote one (no older format was released), and none is upgraded.
    #[error("store {path} has format version {found}, written by a development build of oncelake before format {supported}; this build reads only format {supported} and upgrades none (nothing was changed) — open it with the build that wrote it and copy its entries into a new store")]
    OlderFormat {
        /// The store directory.
        path: PathBuf,
        /// The version stamped in the store.
        found: u32,
        /// The only version this build reads.
        supported: u32,
    },
    /// A store file is damaged.
    ///
    /// Also every record read back from the database that fails its checksum, or that redb
    /// cannot read: the engine refuses to answer from it rather than answer wrongly (SPEC I9).
    #[error("{path} is corrupt: {detail}; nothing was changed — verify the store (`Store::verify`, on a copy) to see what is affected, and restore it from a backup")]
    Corrupt {
        /// The damaged file or directory (the database file for a damaged record).
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The store was opened read-only (explicitly, or because its media cannot be written).
    #[error("store {path} is open read-only ({why}); reads work, writes do not — open it on writable media to change it")]
    ReadOnly {
        /// The store directory.
        path: PathBuf,
        /// Why it is read-only.
        why: String,
    },
    /// Another process holds the store's lock.
    #[error("store {path} is locked by another process; wait for it to finish (`Options::lock_wait` waits for it)")]
    Locked {
        /// The store directory.
        path: PathBuf,
    },
    /// The store was opened by another process, of which this one is a `fork()`ed child: the
    /// child's copy of the open store cannot be used (it would write the parent's files behind
    /// its back), and dropping it leaves the parent's store as it is.
    #[error("store {path} was opened by process {opened_by}, and this process ({this}) is a fork of it: a forked child cannot use its parent's open store (nothing was changed) — open the store in the child after the parent has closed it, or let a server of the store serve both processes")]
    Forked {
        /// The store directory.
        path: PathBuf,
        /// The process that opened the store.
        opened_by: u32,
        /// The calling process.
        this: u32,
    },
    /// An earlier write failed to reach the disk; the store refuses writes until it is reopened.
    #[error("store is in a failed state after an I/O error ({cause}); no later write is accepted — reopen the store to recover from its last durable state")]
    Failed {
        /// The error that put the store in this state.
        cause: String,
    },
    /// The shared lake (SPEC R23) could not be used: its URL is wrong, its object store
    /// refused or kept failing a request, or what it holds does not follow this node's replica.
    #[error("lake {url}: {what} failed: {detail}; {todo}")]
    Lake {
        /// The lake's URL, as the node is bound to it.
        url: String,
        /// What the node was doing.
        what: String,
        /// The object store's or the check's own words.
        detail: String,
        /// What to do about it.
        todo: &'static str,
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
    #[error("database error while {context}: {source}")]
    Database {
        /// What was being done.
        context: &'static str,
        /// redb's error.
        #[source]
        source: redb::Error,
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
    #[error("object {object} is missing from the store (unit {unit:?}); verify the store (`Store::verify`) to see what else is affected")]
    MissingObject {
        /// Hex content hash.
        object: String,
        /// The unit that references it.
        unit: String,
    },
    /// A request was malformed.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A commit leader panicked while deciding or writing this group, or an earlier one (SPEC
    /// I10): the store is failed. Whether this operation took effect is known only after a
    /// reopen, which reads what is durable; a retry there is decided by the usual rules.
    #[error("internal error: a commit leader panicked, so the store was failed; whether this write took effect is known after reopening the store (a retry is then safe) — please report this")]
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

    pub(crate) fn corrupt_record(
        table: &'static str,
        unit: &str,
        detail: impl Into<String>,
    ) -> Self {
        Error::Corrupt {
            path: PathBuf::from(crate::layout::DB_FILE),
            detail: format!(
                "the {table} record of {unit:?} is damaged ({}); nothing was answered from it",
                detail.into()
            ),
        }
    }

    pub(crate) fn db(context: &'static str, e: impl Into<redb::Error>) -> Self {
        Error::Database {
            context,
            source: e.into(),
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

impl<T, E: Into<redb::Error>> DbContext<T> for std::result::Result<T, E> {
    fn db(self, context: &'static str) -> Result<T> {
        self.map_err(|e| Error::db(context, e))
    }
}

/// Runs `f`, turning a panic raised inside redb (which it does on some damaged pages) into
/// [`Error::Corrupt`] on the database file, printed by nobody (SPEC I9). A panic raised anywhere
/// else is a bug, not damage: it is printed by the previous panic hook and keeps unwinding.
///
/// How the printing is kept quiet: the first call installs, once per process, a panic hook that
/// wraps the one it finds. While the panicking thread is inside `contain` and the panic comes
/// from redb's source, the hook only remembers the message (for the error); in every other case
/// it hands the panic to the previous hook, so the application's own hook and the default
/// backtrace printing are untouched outside guarded redb calls.
pub(crate) fn contain<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    guard::install_hook();
    let depth = guard::Depth::enter();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    drop(depth);
    match r {
        Ok(r) => r,
        Err(payload) => match guard::take_redb_panic() {
            Some(msg) => Err(Error::Corrupt {
                path: PathBuf::from(crate::layout::DB_FILE),
                detail: format!(
                    "redb could not read a damaged page ({msg}); nothing was answered from it"
                ),
            }),
            None => std::panic::resume_unwind(payload),
        },
    }
}

/// Wraps a fallible iterator so that every step runs under [`contain`]; after a contained panic
/// it yields the error once and then ends (redb's iterator state is not trusted after it).
pub(crate) struct Contained<I> {
    inner: Option<I>,
}

impl<I> Contained<I> {
    pub(crate) fn new(inner: I) -> Self {
        Contained { inner: Some(inner) }
    }
}

impl<T, I: Iterator<Item = Result<T>>> Iterator for Contained<I> {
    type Item = Result<T>;
    fn next(&mut self) -> Option<Result<T>> {
        let it = self.inner.as_mut()?;
        match contain(|| Ok(it.next())) {
            Ok(item) => item,
            Err(e) => {
                self.inner = None;
                Some(Err(e))
            }
        }
    }
}

mod guard {
    use std::cell::{Cell, RefCell};
    use std::sync::Once;

    thread_local! {
        static DEPTH: Cell<u32> = const { Cell::new(0) };
        static REDB_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
    }

    /// Marks the current thread as inside [`super::contain`] while alive.
    pub(super) struct Depth;

    impl Depth {
        pub(super) fn enter() -> Depth {
            DEPTH.with(|d| d.set(d.get() + 1));
            Depth
        }
    }

    impl Drop for Depth {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        }
    }

    /// The message of a redb panic the hook swallowed on this thread, if any.
    pub(super) fn take_redb_panic() -> Option<String> {
        REDB_PANIC.with(|p| p.borrow_mut().take())
    }

    fn from_redb(info: &std::panic::PanicHookInfo<'_>) -> bool {
        info.location().is_some_and(|l| {
            let f = l.file().replace('\\', "/");
            f.contains("/redb-") || f.contains("/redb/")
        })
    }

    pub(super) fn install_hook() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let guarded = DEPTH.try_with(|d| d.get() > 0).unwrap_or(false);
                if guarded && from_redb(info) {
                    let msg = match info.payload().downcast_ref::<&str>() {
                        Some(s) => s.to_string(),
                        None => info
                            .payload()
                            .downcast_ref::<String>()
                            .cloned()
                            .unwrap_or_else(|| "a panic".into()),
                    };
                    let at = info
                        .location()
                        .map(|l| format!(" at {}:{}", l.file(), l.line()))
                        .unwrap_or_default();
                    let _ = REDB_PANIC.try_with(|p| *p.borrow_mut() = Some(format!("{msg}{at}")));
                    return;
                }
                previous(info)
            }));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_error_keeps_redb_as_its_source() {
        let e = Error::db(
            "read a table",
            redb::StorageError::Corrupted("bad page".into()),
        );
        let source = std::error::Error::source(&e).expect("redb's error is the source");
        assert!(source.downcast_ref::<redb::Error>().is_some(), "{source:?}");
        assert!(e.to_string().contains("bad page"), "{e}");
    }

    #[test]
    fn library_messages_name_no_cli_commands_or_flags() {
        let errors = [
            Error::Corrupt {
                path: "x".into(),
                detail: "d".into(),
            },
            Error::Locked { path: "x".into() },
            Error::Forked {
                path: "x".into(),
                opened_by: 1,
                this: 2,
            },
            Error::MissingObject {
                object: "o".into(),
                unit: "u".into(),
            },
        ];
        for e in errors {
            let m = e.to_string();
            assert!(!m.contains("--") && !m.contains("`oncelake "), "{m}");
        }
    }
}
