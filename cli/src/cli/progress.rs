//! Progress on long work (SPEC R17): a bar (or spinner) when standard error is a terminal, else a
//! plain line every few seconds, so that a log or CI job shows the work is alive; nothing with
//! `--quiet`. Work that ends within one period prints nothing on a non-terminal.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The default period of the plain lines; `ONCELAKE_PROGRESS_INTERVAL` (a duration, e.g. `0` to
/// print every update, as the tests do) overrides it.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);

static QUIET: AtomicBool = AtomicBool::new(false);

/// `--quiet`: no progress at all.
pub(crate) fn set_quiet(on: bool) {
    QUIET.store(on, Ordering::Relaxed);
}

/// Whether `--quiet` was given (it also quiets the notes for people on standard error).
pub(crate) fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Whether a note about work under way since `started` is due, by the rules of progress: never
/// under --quiet, at once on a terminal, else once a period has passed.
pub(crate) fn note_due(started: Instant) -> bool {
    !quiet() && (std::io::stderr().is_terminal() || started.elapsed() >= interval())
}

fn interval() -> Duration {
    std::env::var("ONCELAKE_PROGRESS_INTERVAL")
        .ok()
        .and_then(|s| super::parse_duration(&s).ok())
        .unwrap_or(DEFAULT_INTERVAL)
}

/// The progress of one piece of work, counted in `unit`s (objects, rows, bytes...).
pub(crate) struct Progress {
    what: String,
    unit: &'static str,
    bar: Option<indicatif::ProgressBar>,
    plain: Option<Mutex<Plain>>,
}

struct Plain {
    start: Instant,
    last: Instant,
    every: Duration,
    total: Option<u64>,
}

impl Progress {
    /// Progress of `what` (e.g. "verify"), `total` units if known.
    pub(crate) fn new(what: &str, unit: &'static str, total: Option<u64>) -> Self {
        let mut p = Progress {
            what: what.to_string(),
            unit,
            bar: None,
            plain: None,
        };
        if QUIET.load(Ordering::Relaxed) {
            return p;
        }
        if std::io::stderr().is_terminal() {
            let bar = match total {
                Some(n) => indicatif::ProgressBar::new(n).with_style(
                    indicatif::ProgressStyle::with_template(&format!(
                        "{what} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{per_sec}}, {{eta}} left)"
                    ))
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
                ),
                None => indicatif::ProgressBar::new_spinner().with_style(
                    indicatif::ProgressStyle::with_template(&format!(
                        "{{spinner}} {what}: {{pos}} {unit} ({{elapsed}})"
                    ))
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
                ),
            };
            bar.enable_steady_tick(Duration::from_millis(200));
            p.bar = Some(bar);
        } else {
            let now = Instant::now();
            p.plain = Some(Mutex::new(Plain {
                start: now,
                last: now,
                every: interval(),
                total,
            }));
        }
        p
    }

    /// Sets (or corrects) the total.
    pub(crate) fn set_total(&self, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(total);
        }
        if let Some(plain) = &self.plain {
            lock(plain).total = Some(total);
        }
    }

    /// `done` units are done; a plain line if a period has passed since the last one.
    pub(crate) fn update(&self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
        if let Some(plain) = &self.plain {
            let mut p = lock(plain);
            let now = Instant::now();
            if now.duration_since(p.last) < p.every {
                return;
            }
            p.last = now;
            let elapsed = now.duration_since(p.start).as_secs_f64();
            let amount = match p.total {
                Some(t) if t > 0 => format!(
                    "{done}/{t} {} ({:.0}%)",
                    self.unit,
                    done as f64 * 100.0 / t as f64
                ),
                _ => format!("{done} {}", self.unit),
            };
            errln!("oncelake {}: {amount}, {elapsed:.1} s", self.what);
        }
    }

    /// Ends the work: the bar is cleared.
    pub(crate) fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

fn lock(m: &Mutex<Plain>) -> std::sync::MutexGuard<'_, Plain> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Progress for work that reports none of its own (gc): a spinner, or a plain "still working"
/// line every period from a helper thread, until dropped.
pub(crate) struct Heartbeat {
    progress: Option<Progress>,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    pub(crate) fn start(what: &str) -> Self {
        let progress = Progress::new(what, "s", None);
        if progress.plain.is_none() {
            return Heartbeat {
                progress: Some(progress),
                stop: None,
                thread: None,
            };
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let every = interval();
        if every.is_zero() {
            errln!("oncelake {what}: working");
        }
        let every = every.max(Duration::from_millis(10));
        let what = what.to_string();
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                errln!(
                    "oncelake {what}: still working, {:.1} s",
                    start.elapsed().as_secs_f64()
                );
            }
        });
        Heartbeat {
            progress: None,
            stop: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(p) = self.progress.take() {
            p.finish();
        }
    }
}

/// A reader that reports the bytes read so far (a large put's input).
pub(crate) struct CountingReader<'p, R> {
    pub inner: R,
    pub read: u64,
    pub progress: &'p Progress,
}

impl<R: std::io::Read> std::io::Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        self.progress.update(self.read);
        Ok(n)
    }
}
