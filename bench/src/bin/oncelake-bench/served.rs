//! The benchmarks through a real `oncelake serve` process: `commit --via-server` (P7),
//! `commit --via-server --seed001` (P9) with its hidden worker processes, and `serve-load`.
//! The server is the `oncelake` binary (see [`oncelake_binary`]); the workers are this one.

use super::BenchError;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `oncelake` binary whose `serve` the benchmarks drive: `$ONCELAKE_BIN` if set, else the
/// `oncelake` beside this binary (Cargo builds both into the same directory).
pub(crate) fn oncelake_binary() -> Result<PathBuf, BenchError> {
    if let Some(path) = std::env::var_os("ONCELAKE_BIN") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(BenchError::Usage(format!(
                "ONCELAKE_BIN is {}, which is no file; point it at a built oncelake binary \
                 (`cargo build --release -p oncelake-cli`) or unset it to use the one beside \
                 oncelake-bench",
                path.display()
            )))
        };
    }
    let me = std::env::current_exe()
        .map_err(|e| BenchError::io("find the oncelake-bench binary's own path", e))?;
    let beside = me.with_file_name(format!("oncelake{}", std::env::consts::EXE_SUFFIX));
    if beside.is_file() {
        Ok(beside)
    } else {
        Err(BenchError::Usage(format!(
            "no oncelake binary at {} to run `oncelake serve`; build it with the same profile \
             (`cargo build --release -p oncelake-cli`) or set ONCELAKE_BIN to its path",
            beside.display()
        )))
    }
}

/// This binary, for the worker processes of seed 001.
fn own_binary() -> Result<PathBuf, BenchError> {
    std::env::current_exe().map_err(|e| BenchError::io("find the oncelake-bench binary", e))
}

/// `oncelake-bench commit --via-server`: per client count, the in-process P1 workload with that
/// many threads and the same workload from that many connections through a served store,
/// `rounds` times back to back. The ratio quoted is the median of the rounds' own ratios: the two
/// sides of a round run one right after the other, so a machine that slows down for a while slows
/// both, where the ratio of two separate medians would pair figures from different minutes.
pub(crate) fn via_server(
    clients: &[usize],
    rounds: usize,
    commits: usize,
    seconds: Duration,
    workload: oncelake_bench::bench_commit::Workload,
    dir: Option<PathBuf>,
    json: bool,
) -> Result<u8, BenchError> {
    if clients.is_empty() || clients.contains(&0) || commits == 0 || rounds == 0 {
        return Err(BenchError::Usage(
            "--clients needs positive counts (e.g. --clients 1,16,64), --commits and --rounds at least 1"
                .into(),
        ));
    }
    let scratch = super::scratch::scratch_dir(dir)?;
    let exe = oncelake_binary()?;
    if !json {
        outln!(
            "durable commits, 1 unit each, objects pre-staged, {} preloaded units, {} keys: in-process threads vs clients of `oncelake serve`{}",
            workload.preload,
            workload.keys.name(),
            if rounds > 1 { format!(", {rounds} rounds (medians; the ratio is the median of the rounds' ratios)") } else { String::new() }
        );
        outln!(
            "{:>7} {:>14} {:>14} {:>8} {:>12} {:>12} {:>11}",
            "clients",
            "in-process u/s",
            "via server u/s",
            "ratio",
            "server p50µs",
            "server p99µs",
            "mean group"
        );
    }
    for &n in clients {
        let runs = (0..rounds)
            .map(|_| via_server_round(&exe, &scratch, n, commits, seconds, workload))
            .collect::<Result<Vec<_>, _>>()?;
        let of = |f: &dyn Fn(&ViaServerRound) -> f64| -> f64 {
            super::stage::median(runs.iter().map(f).collect()).unwrap_or(0.0)
        };
        let ratios: Vec<f64> = runs.iter().map(ViaServerRound::ratio).collect();
        let ratio = of(&ViaServerRound::ratio);
        let (local, remote) = (
            of(&|r| r.local_units_per_s),
            of(&|r| r.remote.units_per_sec()),
        );
        let (p50, p99) = (
            of(&|r| r.remote.p50_us as f64),
            of(&|r| r.remote.p99_us as f64),
        );
        let mean_group = of(&ViaServerRound::mean_group);
        if json {
            super::print_json(&serde_json::json!({
                "bench": "commit_via_server",
                "clients": n,
                "preload": workload.preload,
                "keys": workload.keys.name(),
                "rounds": rounds,
                "in_process_units_per_s": local,
                "in_process_mean_group": of(&|r| r.local_mean_group),
                "via_server_units_per_s": remote,
                "via_server_units": runs.iter().map(|r| r.remote.units).sum::<u64>(),
                "via_server_p50_us": p50 as u64,
                "via_server_p99_us": p99 as u64,
                "via_server_groups": runs.iter().map(|r| r.remote.groups).sum::<u64>(),
                "via_server_mean_group": mean_group,
                "ratio": ratio,
                "round_ratios": ratios,
            }));
        } else {
            outln!(
                "{:>7} {:>14.0} {:>14.0} {:>7.0}% {:>12} {:>12} {:>11.1}{}",
                n,
                local,
                remote,
                ratio * 100.0,
                p50 as u64,
                p99 as u64,
                mean_group,
                if rounds > 1 {
                    let each: Vec<String> = ratios
                        .iter()
                        .map(|r| format!("{:.0}%", r * 100.0))
                        .collect();
                    format!("   rounds: {}", each.join(" "))
                } else {
                    String::new()
                }
            );
        }
    }
    Ok(0)
}

/// One round of [`via_server`] at one client count: in-process, then through a server.
struct ViaServerRound {
    local_units_per_s: f64,
    local_mean_group: f64,
    remote: oncelake_bench::via_server::ServerRun,
}

impl ViaServerRound {
    fn ratio(&self) -> f64 {
        self.remote.units_per_sec() / self.local_units_per_s.max(1e-9)
    }
    fn mean_group(&self) -> f64 {
        self.remote.units as f64 / self.remote.groups.max(1) as f64
    }
}

fn via_server_round(
    exe: &Path,
    scratch: &Path,
    n: usize,
    commits: usize,
    seconds: Duration,
    workload: oncelake_bench::bench_commit::Workload,
) -> Result<ViaServerRound, BenchError> {
    use oncelake_bench::bench_commit::{self as bench, KeySource, Plan, System};
    let plan = Plan::new(n, commits, seconds);
    // Both sides run the same workload, each on a freshly preloaded store of its own: the
    // in-process threads on the store of `bench::measure`, the server's clients on one built
    // the same way (`preload_oncelake_store`) and then served, with the same key source.
    let local = bench::measure(System::Oncelake, workload, plan, scratch)
        .map_err(|e| BenchError::Usage(format!("bench in-process: {e}")))?;
    let source = KeySource::new(workload);
    let keys = |t: usize, n: usize| oncelake_bench::via_server::keys_of(&source, t, n);
    let served = oncelake_bench::via_server::Workload {
        prepare: &|p| bench::preload_oncelake_store(p, workload),
        keys: &keys,
    };
    let remote = oncelake_bench::via_server::commits_via_server_with(
        exe, scratch, n, commits, seconds, &served,
    )
    .map_err(|e| BenchError::Usage(format!("bench via server: {e}")))?;
    Ok(ViaServerRound {
        local_units_per_s: local.units_per_sec(),
        local_mean_group: local.mean_group,
        remote,
    })
}

/// `oncelake-bench commit --via-server --seed001`: seed 001's scenario through a server (P9).
pub(crate) fn seed001(dir: Option<PathBuf>, json: bool) -> Result<u8, BenchError> {
    let scratch = super::scratch::scratch_dir(dir)?;
    let exe = oncelake_binary()?;
    let r = oncelake_bench::seed001::seed001_via_server(&exe, &own_binary()?, &scratch, 16, 2_000)
        .map_err(|e| BenchError::Usage(format!("bench seed001 via server: {e}")))?;
    if json {
        super::print_json(&serde_json::json!({
            "bench": "seed001_via_server",
            "workers": r.workers,
            "batches": r.batches,
            "deliveries": r.deliveries,
            "worker_processes": r.workers,
            "seconds": r.elapsed.as_secs_f64(),
            "seconds_with_startup": r.wall_with_startup.as_secs_f64(),
            "batches_per_sec": r.batches_per_sec(),
            "computations": r.computations,
            "already_done": r.already_done,
            "held": r.held,
            "written_twice": r.written_twice,
            "committed": r.committed,
        }));
    } else {
        outln!(
            "seed 001 through `oncelake serve`: {} worker processes, {} batches delivered twice: {:.0} batches/s ({:.1} s; {:.1} s with the workers' start-up); {} computations, {} deliveries already done, {} held by another worker; {} batches written twice; {} committed",
            r.workers,
            r.batches,
            r.batches_per_sec(),
            r.elapsed.as_secs_f64(),
            r.wall_with_startup.as_secs_f64(),
            r.computations,
            r.already_done,
            r.held,
            r.written_twice,
            r.committed
        );
    }
    Ok(if r.written_twice == 0 && r.committed == r.batches {
        0
    } else {
        1
    })
}

/// `oncelake-bench seed001-worker STORE --worker NAME` (hidden): one worker process of
/// `oncelake-bench commit --via-server --seed001`; the bench hands it deliveries on stdin.
#[derive(clap::Args, Debug)]
pub(crate) struct Seed001WorkerArgs {
    /// The served store.
    pub store: PathBuf,
    /// The worker's name (its claims' holder).
    #[arg(long)]
    pub worker: String,
}

pub(crate) fn seed001_worker(a: Seed001WorkerArgs) -> Result<u8, BenchError> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    oncelake_bench::seed001::worker(&a.store, &a.worker, &mut stdin.lock(), &mut stdout.lock())
        .map_err(|e| BenchError::Usage(format!("seed001 worker {}: {e}", a.worker)))?;
    Ok(0)
}

/// `oncelake-bench serve-load`: many clients against one server for a while, the server's
/// memory sampled, every acknowledged commit checked afterwards.
#[derive(clap::Args, Debug)]
#[command(
    after_help = super::help::join("Example:\n  oncelake-bench serve-load --clients 4 --seconds 1 --json\n  # P7-sized (a minute of load): oncelake-bench serve-load --clients 64 --seconds 60", super::help::BENCH_CODES)
)]
pub(crate) struct ServeLoadArgs {
    /// Client threads (sharing one client and its kept-alive connections).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// How long the clients run.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Allowed growth of the server's resident memory: the last third's peak may exceed the
    /// first third's by this many MiB.
    #[arg(long, default_value_t = 32)]
    pub margin_mib: u64,
    /// Where the scratch store goes, created if missing (default: the system's temporary
    /// directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The server's page cache in MiB (`serve --cache-mib`; default: the engine's, 64).
    #[arg(long)]
    pub server_cache_mib: Option<u64>,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn serve_load(a: ServeLoadArgs) -> Result<u8, BenchError> {
    let scratch = super::scratch::scratch_dir(a.dir.clone())?;
    let exe = oncelake_binary()?;
    let opts = oncelake_bench::serve_load::LoadOptions {
        clients: a.clients.max(1),
        duration: Duration::from_secs(a.seconds.max(1)),
        server_cache_mib: a.server_cache_mib,
        ..Default::default()
    };
    let progress = super::Progress::new("oncelake-bench serve-load");
    let r = oncelake_bench::serve_load::serve_load(&exe, &scratch, &opts)
        .map_err(|e| BenchError::Usage(format!("bench serve-load: {e}")));
    progress.finish();
    let r = r?;
    let margin = a.margin_mib * 1024;
    let bounded = r.memory_bounded(margin);
    let peaks = [0, 1, 2].map(|p| r.third_peak_kib(p));
    if a.json {
        super::print_json(&serde_json::json!({
            "bench": "serve_load",
            "clients": r.clients,
            "seconds": r.elapsed.as_secs_f64(),
            "committed": r.committed,
            "duplicates": r.duplicates,
            "lookups": r.lookups,
            "puts_per_sec": r.puts_per_sec(),
            "errors": r.error_count,
            "error_examples": r.errors,
            "model_units": r.model_units,
            "served_mismatches": r.served_mismatches.len(),
            "reopened_mismatches": r.reopened_mismatches.len(),
            "clean_exit": r.clean_exit,
            "rss_samples": r.rss_kib.len(),
            "rss_peak_kib_by_third": peaks,
            "rss_peak_kib_by_tenth": r.peaks_by(10),
            "anon_rss_peak_kib_by_tenth": r.anon_peaks_by(10),
            "heap_in_use_peak_kib_by_tenth": r.heap_in_use_peaks_by(10),
            "heap_held_peak_kib_by_tenth": r.heap_held_peaks_by(10),
            "threads_peak_by_tenth": r.thread_peaks_by(10),
            "threads_seen": r.threads_seen,
            "server_cache_mib": a.server_cache_mib,
            "margin_kib": margin,
            "memory_bounded": bounded,
        }));
    } else {
        print_load_text(&r, &a, peaks, bounded);
    }
    Ok(if r.model_holds() && bounded && r.clean_exit {
        0
    } else {
        1
    })
}

/// `serve-load`'s report as text: the totals on one line, then the server's memory and threads
/// by tenth of the run and the first errors.
fn print_load_text(
    r: &oncelake_bench::serve_load::LoadReport,
    a: &ServeLoadArgs,
    peaks: [u64; 3],
    bounded: bool,
) {
    outln!(
        "serve load: {} clients for {:.1} s: {} committed, {} duplicates, {} lookups ({:.0} puts/s); {} errors; {} units checked: {} wrong through the server, {} wrong after reopen; server RSS peak by third {} / {} / {} KiB ({} samples; bounded within {} MiB: {}); clean exit on SIGTERM: {}",
        r.clients,
        r.elapsed.as_secs_f64(),
        r.committed,
        r.duplicates,
        r.lookups,
        r.puts_per_sec(),
        r.error_count,
        r.model_units,
        r.served_mismatches.len(),
        r.reopened_mismatches.len(),
        peaks[0],
        peaks[1],
        peaks[2],
        r.rss_kib.len(),
        a.margin_mib,
        if bounded { "yes" } else { "NO" },
        r.clean_exit
    );
    let tenths: Vec<String> = r.peaks_by(10).iter().map(u64::to_string).collect();
    outln!(
        "  server RSS peak by tenth of the run, KiB: {}",
        tenths.join(" ")
    );
    let anon: Vec<String> = r.anon_peaks_by(10).iter().map(u64::to_string).collect();
    outln!(
        "  of which anonymous (heap, stacks), KiB: {}",
        anon.join(" ")
    );
    let heap = |v: Vec<u64>| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
    if !r.heap_in_use_kib.is_empty() {
        outln!(
            "  heap in use (allocated, not freed), KiB: {}",
            heap(r.heap_in_use_peaks_by(10))
        );
        outln!(
            "  heap held by the allocator, KiB: {}",
            heap(r.heap_held_peaks_by(10))
        );
    }
    outln!(
        "  server threads, peak by tenth: {} ({} distinct threads seen)",
        heap(r.thread_peaks_by(10)),
        r.threads_seen
    );
    for e in r.errors.iter().chain(&r.served_mismatches).take(10) {
        errln!("  {e}");
    }
}
