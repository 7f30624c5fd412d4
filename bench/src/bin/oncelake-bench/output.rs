//! Standard output that never panics: after a closed standard output (`| head`) the benchmark
//! stops writing instead of dying on a broken pipe, and ends with the code of what it measured.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static QUIET: AtomicBool = AtomicBool::new(false);

/// Writes one line (or, without `newline`, a piece of one) to standard output.
pub(crate) fn write_out(args: std::fmt::Arguments<'_>, newline: bool) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| {
            if newline {
                out.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .and_then(|()| out.flush());
    if written.is_err() {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// Writes to standard error; a closed standard error is ignored (there is nowhere to say so).
pub(crate) fn write_err(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// One JSON object on a line of its own.
pub(crate) fn print_json(v: &serde_json::Value) {
    write_out(format_args!("{v}"), true);
}

/// `--quiet`: no progress on standard error.
pub(crate) fn set_quiet(on: bool) {
    QUIET.store(on, Ordering::Relaxed);
}

/// A spinner on standard error while a long run goes on (only on a terminal, never with
/// `--quiet`), so that a minute of load does not look like a hang.
pub(crate) struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    /// A spinner for `what`, counting nothing but the time.
    pub(crate) fn new(what: &str) -> Self {
        if QUIET.load(Ordering::Relaxed) || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = indicatif::ProgressBar::new_spinner().with_style(
            indicatif::ProgressStyle::with_template(&format!("{{spinner}} {what} ({{elapsed}})"))
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress(Some(bar))
    }

    /// Ends the run: the spinner is cleared.
    pub(crate) fn finish(self) {
        if let Some(bar) = self.0 {
            bar.finish_and_clear();
        }
    }
}
