//! The load test of `oncelake serve`: many clients for a while against one
//! server process, its resident memory sampled from `/proc/PID/status`, and every acknowledged
//! commit checked afterwards against a model — through the server, then in-process after the
//! server stopped. The key space is fixed (each client rewrites its own units with rising
//! versions), so the store's in-memory index cannot grow with time: memory that keeps growing
//! is the server's own.

use oncelake::{ObjectId, Outcome};
use oncelake_server::Client;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a load run does.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Client threads (sharing one client and its kept-alive connections).
    pub clients: usize,
    /// How long the clients run.
    pub duration: Duration,
    /// Units each client owns and rewrites in turn.
    pub units_per_client: usize,
    /// Bytes of each object.
    pub object_bytes: usize,
    /// How often the server's memory is sampled.
    pub sample_every: Duration,
    /// The server's page cache in MiB (`serve --cache-mib`; its default when `None`).
    pub server_cache_mib: Option<u64>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            clients: 64,
            duration: Duration::from_secs(60),
            units_per_client: 64,
            object_bytes: 1024,
            sample_every: Duration::from_millis(200),
            server_cache_mib: None,
        }
    }
}

/// What a load run saw.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Client threads.
    pub clients: usize,
    /// Wall time of the client phase.
    pub elapsed: Duration,
    /// Puts answered `committed`.
    pub committed: u64,
    /// Retried puts answered `duplicate` (each client retries every 8th put).
    pub duplicates: u64,
    /// Lookups answered (every 16th operation).
    pub lookups: u64,
    /// Answers that were neither expected outcomes nor success, with what they were (the first 20).
    pub errors: Vec<String>,
    /// Errors in all.
    pub error_count: u64,
    /// (seconds since start, resident KiB) of the server.
    pub rss_kib: Vec<(f64, u64)>,
    /// (seconds since start, anonymous resident KiB: heap and stacks, without the file pages
    /// that are resident because they were read or mapped, which the kernel reclaims).
    pub anon_kib: Vec<(f64, u64)>,
    /// (seconds since start, KiB) of the server's heap allocated and not freed, from its
    /// `/metrics` once a second (glibc only; empty elsewhere): bounded while `rss_kib` rises
    /// means the allocator keeps freed memory, not a leak.
    pub heap_in_use_kib: Vec<(f64, u64)>,
    /// (seconds since start, KiB) the server's allocator holds from the system (as above).
    pub heap_held_kib: Vec<(f64, u64)>,
    /// (seconds since start, threads of the server) at each RSS sample.
    pub threads: Vec<(f64, u64)>,
    /// Distinct threads of the server seen over the run (`/proc/PID/task`, sampled with the
    /// RSS): far more than the peak of [`LoadReport::threads`] means threads were created and
    /// exited continually.
    pub threads_seen: u64,
    /// Units of the model (the acknowledged state).
    pub model_units: usize,
    /// Model units absent or different through the server after the run.
    pub served_mismatches: Vec<String>,
    /// Model units absent or different in the store reopened in-process after SIGTERM.
    pub reopened_mismatches: Vec<String>,
    /// The server exited 0 on SIGTERM.
    pub clean_exit: bool,
}

impl LoadReport {
    /// Acknowledged puts (committed and duplicate) per second.
    pub fn puts_per_sec(&self) -> f64 {
        (self.committed + self.duplicates) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The peak resident KiB of the samples in the `part`-th third (0, 1, 2) of the run.
    pub fn third_peak_kib(&self, part: usize) -> u64 {
        let end = self.rss_kib.last().map_or(0.0, |s| s.0).max(1e-9);
        self.rss_kib
            .iter()
            .filter(|(t, _)| ((t / end * 3.0) as usize).min(2) == part)
            .map(|s| s.1)
            .max()
            .unwrap_or(0)
    }

    /// The peak resident KiB in each of `parts` equal slices of the run (the curve a plateau
    /// shows in).
    pub fn peaks_by(&self, parts: usize) -> Vec<u64> {
        peaks_by(&self.rss_kib, parts)
    }

    /// [`LoadReport::peaks_by`] of the anonymous resident memory.
    pub fn anon_peaks_by(&self, parts: usize) -> Vec<u64> {
        peaks_by(&self.anon_kib, parts)
    }

    /// [`LoadReport::peaks_by`] of the heap in use, over the same time axis as the RSS (so the
    /// slices line up with [`LoadReport::peaks_by`]); empty without heap samples.
    pub fn heap_in_use_peaks_by(&self, parts: usize) -> Vec<u64> {
        self.aligned_peaks(&self.heap_in_use_kib, parts)
    }

    /// [`LoadReport::peaks_by`] of the server's thread count.
    pub fn thread_peaks_by(&self, parts: usize) -> Vec<u64> {
        peaks_by(&self.threads, parts)
    }

    /// [`LoadReport::heap_in_use_peaks_by`] of the heap the allocator holds.
    pub fn heap_held_peaks_by(&self, parts: usize) -> Vec<u64> {
        self.aligned_peaks(&self.heap_held_kib, parts)
    }

    fn aligned_peaks(&self, samples: &[(f64, u64)], parts: usize) -> Vec<u64> {
        if samples.is_empty() {
            return Vec::new();
        }
        let end = self.rss_kib.last().map_or(0.0, |s| s.0);
        let mut with_end = samples.to_vec();
        // The RSS's end fixes the slices; a zero-sized sample there moves no peak.
        if with_end.last().is_some_and(|s| s.0 < end) {
            with_end.push((end, 0));
        }
        peaks_by(&with_end, parts)
    }

    /// Memory is bounded: the last third's peak is at most the first third's plus `margin_kib`.
    pub fn memory_bounded(&self, margin_kib: u64) -> bool {
        self.third_peak_kib(2) <= self.third_peak_kib(0) + margin_kib
    }

    /// Every acknowledged commit is there, through the server and after reopening, and no
    /// answer was unexpected.
    pub fn model_holds(&self) -> bool {
        self.error_count == 0
            && self.served_mismatches.is_empty()
            && self.reopened_mismatches.is_empty()
            && self.model_units > 0
    }
}

/// The peak of `samples` in each of `parts` equal slices of the run.
fn peaks_by(samples: &[(f64, u64)], parts: usize) -> Vec<u64> {
    let parts = parts.max(1);
    let end = samples.last().map_or(0.0, |s| s.0).max(1e-9);
    let mut out = vec![0; parts];
    for (t, kib) in samples {
        let i = ((t / end * parts as f64) as usize).min(parts - 1);
        out[i] = out[i].max(*kib);
    }
    out
}

/// The acknowledged state: unit → (version, object).
type Model = BTreeMap<String, (u64, ObjectId)>;

/// Runs the load test: `exe serve` on a fresh store under `scratch` (removed afterwards).
pub fn serve_load(exe: &Path, scratch: &Path, opts: &LoadOptions) -> Result<LoadReport, String> {
    let dir = scratch.join(format!("serve-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = dir.join("lake");
    drop(oncelake::Store::open(&store).map_err(|e| e.to_string())?);
    let result = run_against(exe, &store, opts);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Starts `exe serve store` and waits for its ready line; the server is killed if it never says
/// it is ready.
pub(crate) fn start_server(exe: &Path, store: &Path, extra: &[String]) -> Result<Child, String> {
    let mut server = Command::new(exe)
        .arg("serve")
        .arg(store)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("start {} serve: {e}", exe.display()))?;
    let mut line = String::new();
    if let Some(out) = server.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    if line.is_empty() {
        let _ = server.kill();
        let _ = server.wait();
        return Err("the server did not start".into());
    }
    Ok(server)
}

/// Stops a server started by [`start_server`] with SIGTERM (it finishes in-flight commits) and
/// waits for it.
pub(crate) fn stop_server(server: &mut Child) {
    // SAFETY: kill(2) on our own child, not yet reaped (its pid cannot have been reused).
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let _ = server.wait();
}

fn run_against(exe: &Path, store: &Path, opts: &LoadOptions) -> Result<LoadReport, String> {
    let extra: Vec<String> = match opts.server_cache_mib {
        Some(m) => vec!["--cache-mib".into(), m.to_string()],
        None => Vec::new(),
    };
    let mut server = start_server(exe, store, &extra)?;
    let pid = server.id();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, every, store) = (stop.clone(), opts.sample_every, store.to_path_buf());
        std::thread::spawn(move || sample_rss(pid, &store, &stop, every))
    };
    let mut report = LoadReport {
        clients: opts.clients,
        ..LoadReport::default()
    };
    let driven = drive(store, opts, &mut report);
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().unwrap_or_default();
    report.rss_kib = samples.rss.iter().map(|s| (s.0, s.1)).collect();
    report.anon_kib = samples.rss.iter().map(|s| (s.0, s.2)).collect();
    report.heap_in_use_kib = samples.heap.iter().map(|s| (s.0, s.1)).collect();
    report.heap_held_kib = samples.heap.iter().map(|s| (s.0, s.2)).collect();
    report.threads = samples.threads;
    report.threads_seen = samples.tids.len() as u64;
    let model = match driven {
        Ok(m) => m,
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            return Err(e);
        }
    };
    report.model_units = model.len();
    report.served_mismatches = check_served(store, &model)?;
    // SAFETY: kill(2) on our own child, not yet reaped (its pid cannot have been reused).
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    report.clean_exit = server.wait().map(|s| s.success()).unwrap_or(false);
    report.reopened_mismatches = check_reopened(store, &model)?;
    Ok(report)
}

/// What the sampler saw: (seconds, VmRSS KiB, RssAnon KiB), and (seconds, heap in use KiB,
/// heap held KiB).
#[derive(Default)]
struct Samples {
    rss: Vec<(f64, u64, u64)>,
    heap: Vec<(f64, u64, u64)>,
    threads: Vec<(f64, u64)>,
    tids: std::collections::HashSet<u64>,
}

/// How often the heap gauges are read from `/metrics` (a request to the server each time).
const HEAP_EVERY: Duration = Duration::from_secs(1);

/// Samples the resident memory of `pid` until `stop`, and the heap gauges of its `/metrics`
/// once a second.
fn sample_rss(pid: u32, store: &Path, stop: &AtomicBool, every: Duration) -> Samples {
    let t0 = Instant::now();
    let client = Client::for_store(store).ok();
    let mut samples = Samples::default();
    let mut next_heap = t0;
    while !stop.load(Ordering::Relaxed) {
        if let Some(kib) = rss_kib(pid) {
            let anon = status_kib(pid, "RssAnon:").unwrap_or(0);
            let t = t0.elapsed().as_secs_f64();
            samples.rss.push((t, kib, anon));
            if let Some(n) = status_kib(pid, "Threads:") {
                samples.threads.push((t, n));
            }
            samples.tids.extend(task_ids(pid));
        }
        if let Some(c) = client.as_ref().filter(|_| Instant::now() >= next_heap) {
            next_heap += HEAP_EVERY;
            if let Some((in_use, held)) = c.metrics_text().ok().as_deref().and_then(heap_gauges) {
                samples
                    .heap
                    .push((t0.elapsed().as_secs_f64(), in_use / 1024, held / 1024));
            }
        }
        std::thread::sleep(every);
    }
    samples
}

/// The thread ids of `pid` now (`/proc/PID/task`).
fn task_ids(pid: u32) -> Vec<u64> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The heap gauges (in use, held) of a `/metrics` text, when the server reports them.
fn heap_gauges(text: &str) -> Option<(u64, u64)> {
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    };
    Some((
        gauge("oncelake_server_heap_in_use_bytes")?,
        gauge("oncelake_server_heap_held_bytes")?,
    ))
}

/// `VmRSS` of `/proc/PID/status`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// A KiB field of `/proc/PID/status`.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What every client thread shares.
struct Shared {
    client: Client,
    deadline: Instant,
    opts: LoadOptions,
    report: Mutex<LoadReport>,
}

fn drive(store: &Path, opts: &LoadOptions, report: &mut LoadReport) -> Result<Model, String> {
    let client = Client::for_store(store).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let shared = Arc::new(Shared {
        client,
        deadline: started + opts.duration,
        opts: opts.clone(),
        report: Mutex::new(LoadReport::default()),
    });
    let threads: Vec<_> = (0..opts.clients.max(1))
        .map(|c| {
            let shared = shared.clone();
            std::thread::spawn(move || client_loop(c, &shared))
        })
        .collect();
    let mut model = Model::new();
    for t in threads {
        model.extend(
            t.join()
                .map_err(|_| "a client thread panicked".to_string())?,
        );
    }
    report.elapsed = started.elapsed();
    let r = shared.report.lock().unwrap_or_else(|p| p.into_inner());
    report.committed = r.committed;
    report.duplicates = r.duplicates;
    report.lookups = r.lookups;
    report.errors = r.errors.clone();
    report.error_count = r.error_count;
    Ok(model)
}

/// The object of client `c`'s unit `u` at version `v`: distinct for every (c, u, v).
fn object_bytes(c: usize, u: usize, v: u64, len: usize) -> Vec<u8> {
    let head = format!("client {c} unit {u} version {v}\n");
    let mut b = head.into_bytes();
    b.resize(len.max(b.len()), b'.');
    b
}

fn unit_key(c: usize, u: usize) -> String {
    format!("load/client={c:03}/unit={u:04}")
}

/// One client: rewrites its units in turn with rising versions, retries every 8th put (a
/// duplicate) and looks a unit up every 16th operation, until the deadline. Its model.
fn client_loop(c: usize, sh: &Shared) -> Model {
    let mut model = Model::new();
    let units = sh.opts.units_per_client.max(1);
    let mut op: u64 = 0;
    while Instant::now() < sh.deadline {
        op += 1;
        let u = (op as usize) % units;
        let v = op / units as u64 + 1;
        let unit = unit_key(c, u);
        if op.is_multiple_of(16) {
            match sh.client.lookup(&unit) {
                Ok(_) => sh.report.lock().unwrap_or_else(|p| p.into_inner()).lookups += 1,
                Err(e) => note_error(sh, format!("lookup {unit}: {e}")),
            }
            continue;
        }
        let bytes = object_bytes(c, u, v, sh.opts.object_bytes);
        let tries = if op.is_multiple_of(8) { 2 } else { 1 };
        for attempt in 0..tries {
            match sh.client.put_reader(&unit, v, None, false, &bytes[..]) {
                Ok((o, meta)) => {
                    let expected = if attempt == 0 {
                        "committed"
                    } else {
                        "duplicate"
                    };
                    let mut r = sh.report.lock().unwrap_or_else(|p| p.into_inner());
                    match (&o.outcome, attempt) {
                        (Outcome::Committed { .. }, 0) => r.committed += 1,
                        (Outcome::Duplicate { .. }, 1) => r.duplicates += 1,
                        (other, _) => {
                            drop(r);
                            note_error(
                                sh,
                                format!("put {unit}@{v}: {other:?}, expected {expected}"),
                            );
                            continue;
                        }
                    }
                    model.insert(unit.clone(), (v, meta.id));
                }
                Err(e) => note_error(sh, format!("put {unit}@{v}: {e}")),
            }
        }
    }
    model
}

fn note_error(sh: &Shared, what: String) {
    let mut r = sh.report.lock().unwrap_or_else(|p| p.into_inner());
    r.error_count += 1;
    if r.errors.len() < 20 {
        r.errors.push(what);
    }
}

/// The model's units that the server lists differently (or not at all), and units it lists
/// that the model does not have.
fn check_served(store: &Path, model: &Model) -> Result<Vec<String>, String> {
    let client = Client::for_store(store).map_err(|e| e.to_string())?;
    let mut seen = Model::new();
    client
        .ls("load/", None, |e| {
            seen.insert(e.unit, (e.source_version, e.object.id));
            true
        })
        .map_err(|e| e.to_string())?;
    Ok(diff(model, &seen))
}

fn check_reopened(store: &Path, model: &Model) -> Result<Vec<String>, String> {
    let s = oncelake::Store::open(store).map_err(|e| e.to_string())?;
    let snap = s.snapshot().map_err(|e| e.to_string())?;
    let mut seen = Model::new();
    for e in snap.prefix("load/").map_err(|e| e.to_string())? {
        let e = e.map_err(|e| e.to_string())?;
        seen.insert(e.unit, (e.source_version, e.object.id));
    }
    Ok(diff(model, &seen))
}

fn diff(model: &Model, seen: &Model) -> Vec<String> {
    let mut out: Vec<String> = model
        .iter()
        .filter(|(u, want)| seen.get(*u) != Some(want))
        .map(|(u, want)| format!("{u}: acknowledged {want:?}, found {:?}", seen.get(u)))
        .collect();
    out.extend(
        seen.keys()
            .filter(|u| !model.contains_key(*u))
            .map(|u| format!("{u}: present but never acknowledged")),
    );
    out
}

/// Where `serve_load` puts its scratch store by default.
pub fn default_scratch() -> PathBuf {
    std::env::temp_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_check_names_missing_changed_and_unacknowledged_units() {
        let (a, b) = (ObjectId::of(b"a"), ObjectId::of(b"b"));
        let model: Model = [("u/1".to_string(), (2, a)), ("u/2".to_string(), (1, a))].into();
        assert!(diff(&model, &model).is_empty());
        let seen: Model = [("u/1".to_string(), (2, b)), ("u/3".to_string(), (1, a))].into();
        let d = diff(&model, &seen);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d[0].starts_with("u/1") && d[1].starts_with("u/2") && d[2].starts_with("u/3"));
    }

    #[test]
    fn heap_gauges_are_read_from_the_metrics_text() {
        let text = "# HELP oncelake_server_heap_in_use_bytes x\n\
                    oncelake_server_heap_in_use_bytes 2048\n\
                    oncelake_server_heap_held_bytes_total 1\n\
                    oncelake_server_heap_held_bytes 4096\n";
        assert_eq!(heap_gauges(text), Some((2048, 4096)));
        assert_eq!(heap_gauges("oncelake_server_requests_total 3\n"), None);
    }

    #[test]
    fn heap_peaks_use_the_rss_time_axis() {
        // RSS sampled to t = 9.8 s, the heap once a second to t = 8 s: ten slices of ~1 s.
        let r = LoadReport {
            rss_kib: (0..50).map(|i| (i as f64 * 0.2, 1000)).collect(),
            heap_in_use_kib: (0..9).map(|i| (i as f64, 100 + i)).collect(),
            ..LoadReport::default()
        };
        let peaks = r.heap_in_use_peaks_by(10);
        assert_eq!(peaks.len(), 10);
        // t = 8 s falls in the ninth slice of 9.8 s (not the last, as on its own axis).
        assert_eq!(peaks[8], 108, "{peaks:?}");
        assert_eq!(peaks[9], 0, "{peaks:?}");
        assert!(LoadReport::default().heap_held_peaks_by(10).is_empty());
    }

    #[test]
    fn thread_peaks_are_by_slice_of_the_run() {
        let r = LoadReport {
            threads: vec![(0.0, 100), (1.0, 120), (2.0, 110), (3.0, 150)],
            ..LoadReport::default()
        };
        assert_eq!(r.thread_peaks_by(2), vec![120, 150]);
        assert!(!task_ids(std::process::id()).is_empty());
    }

    #[test]
    fn memory_is_bounded_only_when_the_last_third_stays_near_the_first() {
        let flat = LoadReport {
            rss_kib: (0..30).map(|i| (i as f64, 1000 + i % 3)).collect(),
            ..LoadReport::default()
        };
        assert!(flat.memory_bounded(10));
        let growing = LoadReport {
            rss_kib: (0..30).map(|i| (i as f64, 1000 + 100 * i)).collect(),
            ..LoadReport::default()
        };
        assert_eq!(growing.third_peak_kib(0), 1900);
        assert_eq!(growing.third_peak_kib(2), 3900);
        assert!(!growing.memory_bounded(1000));
    }
}
