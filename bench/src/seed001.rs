//! Seed 001's scenario through `oncelake serve` (SPEC P9): `workers` worker *processes* (the
//! benchmark's own binary, `oncelake-bench seed001-worker`), each taking deliveries from one shared queue
//! until it is empty; each delivery claims its batch, works 2–20 ms (a fixed pseudo-random time
//! per batch) and commits its output fenced by the lease's token. Every batch is delivered twice,
//! the two deliveries next to each other in the queue, so they race.
//!
//! The queue is this (the bench) process: each worker asks for its next delivery on its stdout
//! and gets it on its stdin, like a message-queue consumer; it reports what each delivery did on
//! the same line protocol, so "written twice" is counted from the server's answers.

use oncelake::UnitStore;
use oncelake_server::Client;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// What seed 001's scenario through a server measured (SPEC P9).
#[derive(Clone, Debug)]
pub struct Seed001Run {
    /// Worker processes.
    pub workers: usize,
    /// Distinct batches.
    pub batches: u64,
    /// Deliveries (each batch twice).
    pub deliveries: u64,
    /// From every worker ready (started, connected) until every delivery was handled.
    pub elapsed: Duration,
    /// From spawning the workers until every delivery was handled (includes their start-up).
    pub wall_with_startup: Duration,
    /// Work runs (claims granted).
    pub computations: u64,
    /// Deliveries skipped because the batch was already committed.
    pub already_done: u64,
    /// Deliveries skipped because another worker held the batch's lease.
    pub held: u64,
    /// Batches committed more than once (must be 0).
    pub written_twice: u64,
    /// Batches with an entry at the end, read from the server.
    pub committed: u64,
}

impl Seed001Run {
    /// Batches per second.
    pub fn batches_per_sec(&self) -> f64 {
        self.batches as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs the scenario against `server serve` (the `oncelake` binary) on a fresh store under
/// `scratch` (removed afterwards), with `worker seed001-worker` (the `oncelake-bench` binary) as
/// the worker processes.
pub fn seed001_via_server(
    server: &Path,
    worker: &Path,
    scratch: &Path,
    workers: usize,
    batches: usize,
) -> Result<Seed001Run, String> {
    let dir = scratch.join(format!("seed001-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = dir.join("lake");
    drop(oncelake::Store::open(&store).map_err(|e| e.to_string())?);
    let run = crate::serve_load::start_server(server, &store, &[]).and_then(|mut server| {
        let run = drive(worker, &store, workers.max(1), batches);
        crate::serve_load::stop_server(&mut server);
        run
    });
    let _ = std::fs::remove_dir_all(&dir);
    run
}

/// The queue and the tallies, shared by the threads that talk to the workers.
struct Queue {
    deliveries: Vec<usize>,
    next: AtomicUsize,
    computations: AtomicU64,
    already: AtomicU64,
    held: AtomicU64,
    /// Committed outcomes per batch.
    commits: Vec<AtomicU64>,
    errors: Mutex<Vec<String>>,
}

fn drive(exe: &Path, store: &Path, workers: usize, batches: usize) -> Result<Seed001Run, String> {
    let q = Queue {
        deliveries: (0..batches).flat_map(|b| [b, b]).collect(),
        next: AtomicUsize::new(0),
        computations: AtomicU64::new(0),
        already: AtomicU64::new(0),
        held: AtomicU64::new(0),
        commits: (0..batches).map(|_| AtomicU64::new(0)).collect(),
        errors: Mutex::new(Vec::new()),
    };
    let spawned = Instant::now();
    let mut children = Vec::new();
    for w in 0..workers {
        let child = Command::new(exe)
            .arg("seed001-worker")
            .arg(store)
            .args(["--worker", &format!("worker-{w}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                for mut c in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(format!("start worker {w} ({}): {e}", exe.display()));
            }
        }
    }
    // The clock starts when every worker has started and reached the server, as a pool of
    // long-running workers would be when the deliveries come.
    let ready = Barrier::new(workers + 1);
    let start: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    std::thread::scope(|s| {
        for child in children.iter_mut() {
            let (q, ready) = (&q, &ready);
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                continue;
            };
            s.spawn(move || talk(q, ready, stdin, BufReader::new(stdout)));
        }
        ready.wait();
        let _ = start.set(Instant::now());
    });
    let done = Instant::now();
    let mut failed = Vec::new();
    for (w, mut c) in children.into_iter().enumerate() {
        match c.wait() {
            Ok(st) if st.success() => {}
            Ok(st) => failed.push(format!("worker {w} exited with {st}")),
            Err(e) => failed.push(format!("worker {w}: {e}")),
        }
    }
    let errors = q.errors.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = errors.first().or(failed.first()) {
        return Err(format!(
            "{e} ({} problems in all)",
            errors.len() + failed.len()
        ));
    }
    let client = Client::for_store(store).map_err(|e| e.to_string())?;
    let mut committed = 0;
    client
        .ls("seed001/", None, |_| {
            committed += 1;
            true
        })
        .map_err(|e| e.to_string())?;
    let start = start.get().copied().unwrap_or(spawned);
    Ok(Seed001Run {
        workers,
        batches: batches as u64,
        deliveries: q.deliveries.len() as u64,
        elapsed: done - start,
        wall_with_startup: done - spawned,
        computations: q.computations.into_inner(),
        already_done: q.already.into_inner(),
        held: q.held.into_inner(),
        written_twice: q
            .commits
            .iter()
            .filter(|c| c.load(Ordering::Relaxed) > 1)
            .count() as u64,
        committed,
    })
}

/// Serves one worker: hands out deliveries, tallies its reports. The ready barrier is passed
/// exactly once whatever the worker does, so a worker that dies early cannot hang the run.
fn talk(
    q: &Queue,
    ready: &Barrier,
    mut to: std::process::ChildStdin,
    from: BufReader<std::process::ChildStdout>,
) {
    let mut waited = false;
    let note = |e: String| q.errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
    for line in from.lines() {
        let Ok(line) = line else { break };
        let (what, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let batch = || arg.parse::<usize>().ok().filter(|&b| b < q.commits.len());
        match what {
            "ready" if !waited => {
                waited = true;
                ready.wait();
            }
            "next" => {
                let i = q.next.fetch_add(1, Ordering::Relaxed);
                let answer = match q.deliveries.get(i) {
                    Some(b) => format!("{b}\n"),
                    None => "end\n".to_string(),
                };
                if to.write_all(answer.as_bytes()).is_err() {
                    break;
                }
            }
            "granted" => {
                q.computations.fetch_add(1, Ordering::Relaxed);
            }
            "already" => {
                q.already.fetch_add(1, Ordering::Relaxed);
            }
            "held" => {
                q.held.fetch_add(1, Ordering::Relaxed);
            }
            "committed" => match batch() {
                Some(b) => {
                    q.commits[b].fetch_add(1, Ordering::Relaxed);
                }
                None => note(format!("a worker reported a commit of {arg:?}")),
            },
            "error" => note(arg.to_string()),
            _ => note(format!("a worker said {line:?}")),
        }
    }
    if !waited {
        note("a worker ended before it was ready".into());
        ready.wait();
    }
}

/// The worker process (`oncelake-bench seed001-worker STORE --worker NAME`): reaches the server
/// of `store`, says `ready`, then asks for deliveries on `output` and reads them from `input`
/// until `end`, reporting each (`granted B`, `already B`, `held B`, `committed B`, `error ...`).
pub fn worker(
    store: &Path,
    name: &str,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
) -> Result<(), String> {
    use oncelake::ClaimOutcome;
    let say = |output: &mut dyn Write, s: &str| {
        output
            .write_all(s.as_bytes())
            .and_then(|()| output.flush())
            .map_err(|e| format!("the bench went away: {e}"))
    };
    let client = Client::for_store(store).map_err(|e| e.to_string())?;
    // The first call opens the kept-alive connection, as a worker would before its first job.
    client.health().map_err(|e| e.to_string())?;
    say(output, "ready\n")?;
    let mut line = String::new();
    loop {
        say(output, "next\n")?;
        line.clear();
        input.read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim();
        if line == "end" || line.is_empty() {
            return Ok(());
        }
        let b: u64 = line
            .parse()
            .map_err(|_| format!("not a delivery: {line:?}"))?;
        let unit = format!("seed001/batch={b:05}");
        let step = (|| -> Result<String, oncelake_server::ClientError> {
            let lease = match client.claim(&unit, 1, name, Duration::from_secs(60))? {
                ClaimOutcome::Granted { lease, .. } => lease,
                ClaimOutcome::AlreadyDone(_) => return Ok(format!("already {b}\n")),
                ClaimOutcome::Held { .. } => return Ok(format!("held {b}\n")),
            };
            let mut report = format!("granted {b}\n");
            // 2–20 ms of work, fixed per batch.
            let work = 2 + b.wrapping_mul(2_654_435_761) % 19;
            std::thread::sleep(Duration::from_millis(work));
            let output = format!("output of batch {b}");
            let (u, _) =
                client.put_reader(&unit, 1, Some(lease.token), false, output.as_bytes())?;
            if matches!(u.outcome, oncelake::Outcome::Committed { .. }) {
                report.push_str(&format!("committed {b}\n"));
            }
            Ok(report)
        })();
        match step {
            Ok(r) => say(output, &r)?,
            Err(e) => {
                let e = e.to_string().replace('\n', " ");
                say(output, &format!("error {name} batch {b}: {e}\n"))?
            }
        }
    }
}
