//! Helpers every command uses: opening a store, parsing durations, writing output.
//!
//! # Output
//!
//! Every command writes through [`write_out`] (the `outln!`/`out!` macros) and [`write_err`]
//! (`errln!`), never `println!`, which panics when standard output is a closed pipe
//! (`oncelake ls ./lake | head -1`). The rule: a closed standard output is not an error. The
//! command does its work to the end — a put stays committed, a gc collects — stops writing, and
//! exits with the code of what it did (0 committed or duplicate, 3 conflict, ...); commands whose
//! only work is their output (`ls`, `log`) stop early, exit 0. Any other write failure (a full
//! disk behind `> file`) is reported once at the end and turns an exit 0 into 1.

use super::CliError;
use oncelake::{Options, Store};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Set once standard output turned out to be a closed pipe: nothing more is written to it.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
/// The first failure writing standard output other than a closed pipe.
static STDOUT_FAILED: Mutex<Option<std::io::Error>> = Mutex::new(None);

/// Writes to standard output (with a newline if `newline`). Returns `false` once standard output
/// is closed or failed, so that a listing can stop early; never panics.
pub(crate) fn write_out(args: std::fmt::Arguments<'_>, newline: bool) -> bool {
    if !stdout_open() {
        return false;
    }
    match write_line(std::io::stdout().lock(), args, newline) {
        Ok(()) => true,
        Err(e) => {
            note_stdout_error(e);
            false
        }
    }
}

/// [`write_out`] for the macros, which are statements.
pub(crate) fn write_out_unit(args: std::fmt::Arguments<'_>, newline: bool) {
    let _ = write_out(args, newline);
}

/// Writes raw bytes to standard output (an object's content); like [`write_out`].
pub(crate) fn write_out_bytes(bytes: &[u8]) -> bool {
    if !stdout_open() {
        return false;
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) => {
            note_stdout_error(e);
            false
        }
    }
}

/// Whether standard output still takes output.
pub(crate) fn stdout_open() -> bool {
    !STDOUT_CLOSED.load(Ordering::Relaxed)
}

fn note_stdout_error(e: std::io::Error) {
    STDOUT_CLOSED.store(true, Ordering::Relaxed);
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        let mut failed = STDOUT_FAILED.lock().unwrap_or_else(|p| p.into_inner());
        failed.get_or_insert(e);
    }
}

/// Flushes standard output at the end of a command and returns the failure to report, if any
/// (a closed pipe is none).
pub(crate) fn finish_stdout() -> Option<std::io::Error> {
    if stdout_open() {
        if let Err(e) = std::io::stdout().lock().flush() {
            note_stdout_error(e);
        }
    }
    STDOUT_FAILED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
}

/// Writes to standard error; a closed or failing standard error is ignored (there is nowhere
/// left to say anything).
pub(crate) fn write_err(args: std::fmt::Arguments<'_>, newline: bool) {
    let _ = write_line(std::io::stderr().lock(), args, newline);
}

/// Writes `args` to `w` (a locked standard stream), then a newline if `newline`.
fn write_line(
    mut w: impl Write,
    args: std::fmt::Arguments<'_>,
    newline: bool,
) -> std::io::Result<()> {
    w.write_fmt(args)?;
    if newline {
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// How a command written once over the engine's `UnitStore` gets its store from the store
/// directory: opened in this process (`open_store`), or the client of the server that holds it
/// (`remote.rs`).
pub(crate) type Open<'a, S> = &'a dyn Fn(&Path) -> Result<S, CliError>;

/// Opens an existing store (or creates one if `create`), waiting up to `wait` for its lock.
pub(crate) fn open_store(path: &Path, wait: Duration, create: bool) -> Result<Store, CliError> {
    if !create {
        must_be_a_store(path)?;
    }
    let options = waiting(path, wait);
    let opened = match Store::open_with(path, options.clone()) {
        // A store on read-only media (or in a directory this user cannot write): open it
        // read-only, so reads work and writes are refused with a clear error.
        Err(oncelake::Error::Io { source, .. }) if !create && cannot_write(&source) => {
            Store::open_with(
                path,
                Options {
                    read_only: true,
                    ..options
                },
            )
        }
        other => other,
    };
    match opened {
        Err(oncelake::Error::Locked { .. }) => Err(locked(path, wait, false)),
        other => Ok(other?),
    }
}

/// Creates (or opens) the lake node `path` bound to the lake `url` (SPEC R23).
pub(crate) fn open_node(path: &Path, wait: Duration, url: &str) -> Result<Store, CliError> {
    let options = Options {
        lake: Some(url.to_string()),
        ..waiting(path, wait)
    };
    match Store::open_with(path, options) {
        Err(oncelake::Error::Locked { .. }) => Err(locked(path, wait, false)),
        other => Ok(other?),
    }
}

/// Opens an existing store for a command that only reads it (`ls`, `get`, `log`, `verify`):
/// read-only, so the command never changes a file of the store (SPEC I9), also when the store
/// was not closed cleanly (the library recovers it in memory). Waits up to `wait` for its lock.
pub(crate) fn open_store_to_read(path: &Path, wait: Duration) -> Result<Store, CliError> {
    must_be_a_store(path)?;
    // A lake node's reads must see the lake as of now (SPEC R23): it is opened to sync, which
    // writes its replica (never a commit of its own).
    if path.join(oncelake::LAKE_FILE).exists() {
        return open_store(path, wait, false);
    }
    let options = Options {
        read_only: true,
        ..waiting(path, wait)
    };
    match Store::open_with(path, options) {
        Err(oncelake::Error::Locked { .. }) => Err(locked(path, wait, false)),
        other => Ok(other?),
    }
}

/// Refuses a directory that holds no store, saying how to create one.
fn must_be_a_store(path: &Path) -> Result<(), CliError> {
    if path.join(oncelake::MARKER_FILE).exists() {
        return Ok(());
    }
    Err(CliError::NotAStore(format!(
        "{} is not an oncelake store; create one with `oncelake init {}`",
        path.display(),
        path.display()
    )))
}

/// The options of a command's open: it waits up to `wait` for the store's lock, says once whom
/// it waits for, and stops waiting once a server of the store answers.
fn waiting(path: &Path, wait: Duration) -> Options {
    Options {
        lock_wait: wait,
        lock_wait_stop: Some(say_waiting(path, wait, stop_when_served(path, wait))),
        ..Options::default()
    }
}

/// Who holds the store's lock, for people: `pid N (`command`)`, or `another process` when it
/// recorded nothing (a read-only holder, or one from before holders were recorded).
fn holder_text(store: &Path) -> String {
    match oncelake::lock_holder(store) {
        Some(h) => format!("pid {} (`{}`)", h.pid, h.command),
        None => "another process".into(),
    }
}

/// `--wait` as it would be written on the command line (`10s`, `1500ms`, `5m`).
pub(crate) fn wait_text(wait: Duration) -> String {
    let (s, ms) = (wait.as_secs(), wait.as_millis());
    if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else if s != 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s != 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// The error of a command that waited --wait for the store's lock and gave up: who holds it and
/// what to do, in the CLI's words (the engine's message speaks of its Rust options). `serving`:
/// the command is `oncelake serve` itself.
pub(crate) fn locked(store: &Path, wait: Duration, serving: bool) -> CliError {
    let d = store.display();
    let fix = if serving {
        "serve the store once that process has finished, or wait longer (e.g. --wait 5m)".into()
    } else {
        format!(
            "to let several processes use the store at once, run `oncelake serve {d}` (every \
             command then goes through it), or wait longer (e.g. --wait 5m)"
        )
    };
    CliError::Locked(format!(
        "store {d} is locked by {}, which held it longer than --wait {}; {fix}",
        holder_text(store),
        wait_text(wait)
    ))
}

/// Says once on standard error that the command waits for the store's lock and for whom
/// ("waiting for the store's lock, held by pid N (`oncelake ...`)"), as progress is said: not
/// under --quiet, at once on a terminal, else once the wait has lasted a progress period (a
/// lock let go within it costs no line). `stop` is asked first: a wait that ends because a
/// server of the store answers (the command then goes through it) says nothing.
fn say_waiting(
    store: &Path,
    wait: Duration,
    stop: oncelake::LockWaitStop,
) -> oncelake::LockWaitStop {
    let store = store.to_path_buf();
    let started = std::time::Instant::now();
    let said = std::sync::atomic::AtomicBool::new(false);
    oncelake::LockWaitStop(std::sync::Arc::new(move || {
        if (stop.0)() {
            return true;
        }
        if !said.load(std::sync::atomic::Ordering::Relaxed)
            && super::progress::note_due(started)
            && !said.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            errln!(
                "oncelake: waiting for the store's lock, held by {}; up to --wait {} (`oncelake \
                 serve {}` lets several processes share the store)",
                holder_text(&store),
                wait_text(wait),
                store.display()
            );
        }
        false
    }))
}

/// Stops waiting for the store's lock once a server of the store answers: its holder is then a
/// server, which will not let go, and the command goes through it instead (`cli::run`). Asked
/// when the waiter wakes — on a release, or a file appearing in the store directory, as the
/// server's address file does when it is ready — so no timer looks for it.
pub(crate) fn stop_when_served(store: &Path, wait: Duration) -> oncelake::LockWaitStop {
    let store = store.to_path_buf();
    oncelake::LockWaitStop(std::sync::Arc::new(move || {
        oncelake_server::Client::for_store_within(&store, probe_timeout(wait)).is_ok()
    }))
}

/// How long a command waits for a server's answer to its first question: what `--wait` allows
/// (so that a hung server costs a command no more than a held lock would), but at least
/// [`MIN_PROBE`] and at most the client's own bound.
pub(crate) fn probe_timeout(wait: Duration) -> Duration {
    wait.clamp(MIN_PROBE, oncelake_server::client::HEALTH_TIMEOUT)
}

/// The shortest wait for a server's first answer, even under `--wait 0`: a server that answers
/// at all answers the identity question at once.
const MIN_PROBE: Duration = Duration::from_secs(1);

fn cannot_write(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
    )
}

/// Opens the input file argument of a command before any store is opened, so that a refused
/// input leaves the store untouched: `-` is standard input (`None`, whatever it is); a path must
/// be a regular file or a pipe (a FIFO, or `<(producer)` in a shell). A directory, a device
/// (`/dev/null` included: for an empty output pass an empty file or `- < /dev/null`), a socket or
/// a missing path is bad input. Every command taking an input file (put, reconcile's listing,
/// pipeline set-version and complete) goes through here, so the same input gets the same answer.
pub(crate) fn open_input(arg: impl AsRef<Path>) -> Result<Option<std::fs::File>, CliError> {
    let path = arg.as_ref();
    if path.as_os_str() == "-" {
        return Ok(None);
    }
    let shown = path.display();
    let hint = "pass a regular file, a pipe, or - for standard input";
    let f = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => CliError::Input(format!("{shown}: no such file; {hint}")),
        std::io::ErrorKind::PermissionDenied => {
            CliError::Input(format!("{shown}: permission denied; {hint}"))
        }
        _ => CliError::io(format!("open {shown}"), e),
    })?;
    let kind = f
        .metadata()
        .map_err(|e| CliError::io(format!("stat {shown}"), e))?
        .file_type();
    if kind.is_file() || is_pipe(&kind) {
        return Ok(Some(f));
    }
    let what = if kind.is_dir() {
        "a directory"
    } else {
        "a device or socket, not a file"
    };
    Err(CliError::Input(format!("{shown} is {what}; {hint}")))
}

/// Whether an input argument is read as a stream (standard input or a pipe), which can be read
/// only once, rather than a regular file, which can be read twice (reconcile checks a listing
/// file before it plans from it).
pub(crate) fn is_stream_input(arg: impl AsRef<Path>) -> bool {
    let path = arg.as_ref();
    path.as_os_str() == "-" || std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

#[cfg(unix)]
fn is_pipe(kind: &std::fs::FileType) -> bool {
    std::os::unix::fs::FileTypeExt::is_fifo(kind)
}

#[cfg(not(unix))]
fn is_pipe(_: &std::fs::FileType) -> bool {
    false
}
