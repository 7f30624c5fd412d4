//! Argument parsing and dispatch. One file per command family; shared helpers in `common`.

/// `println!` that never panics: see "Output" in `common`. After a closed standard output it
/// writes nothing; loops check `stdout_open()` to stop early.
macro_rules! outln {
    () => {
        $crate::cli::common::write_out_unit(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::cli::common::write_out_unit(format_args!($($arg)*), true)
    };
}

/// `print!` that never panics: see "Output" in `common`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::common::write_out_unit(format_args!($($arg)*), false)
    };
}

/// `eprintln!` that never panics on a closed standard error.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::common::write_err(format_args!($($arg)*), true)
    };
}

mod bench;
mod bench_dedup;
mod bench_reconcile;
mod common;
mod error;
mod maint_cmds;
mod pipeline_cmds;
mod reconcile_cmd;
mod remote;
mod serve;
mod sim_cmds;
mod store_cmds;
mod table_bench;
mod table_cmds;

use clap::{Parser, Subcommand};
pub(crate) use common::*;
pub(crate) use error::CliError;
use std::process::ExitCode;

const EXAMPLES: &str = "\
Examples:
  oncelake init ./lake
  echo 'rows' | oncelake put ./lake orders/date=2026-11-29 7 -
  oncelake get ./lake orders/date=2026-11-29 -o out.parquet
  oncelake ls ./lake --prefix orders/ --json
  oncelake log ./lake --since 10
  oncelake gc ./lake --dry-run
  oncelake verify ./lake --deep
  oncelake claim ./lake orders/date=2026-11-29 7 --worker w1 --ttl 30s
  oncelake stats ./lake --prometheus
  oncelake simulate --mode both --json
  oncelake reconcile ./lake --source listing.csv --json
  oncelake bench dedup --units 10000,100000

Exit codes: 0 ok (committed or duplicate), 1 I/O or internal failure, 2 usage or bad input,
3 conflict, 4 stale, 5 fenced, 6 store locked or busy, 7 verify found problems.
A closed standard output (`| head`) is not an error: the command finishes its work (a put stays
committed), stops writing and exits with the code of what it did.";

/// Exactly-once results per unit of work: stage objects, commit them atomically, inspect the store.
#[derive(Parser, Debug)]
#[command(name = "oncelake", version, about, after_help = EXAMPLES)]
pub(crate) struct Cli {
    /// How long to wait for another process that holds the store (e.g. 10s, 2m; 0 = fail at once).
    #[arg(long, global = true, default_value = "10s", value_parser = parse_duration)]
    pub wait: std::time::Duration,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Create a store in a missing or empty directory.
    Init(store_cmds::InitArgs),
    /// Stage a file (or standard input) and commit it as the output of UNIT at VERSION.
    Put(store_cmds::PutArgs),
    /// Write a unit's current object (or its object as of --at SEQ).
    Get(store_cmds::GetArgs),
    /// List current entries.
    Ls(store_cmds::LsArgs),
    /// Show the commit log.
    Log(store_cmds::LogArgs),
    /// Remove orphaned objects, old staging files and history beyond the retention window.
    Gc(maint_cmds::GcArgs),
    /// Check every referenced object and replay the log; exit 7 if anything is wrong.
    Verify(maint_cmds::VerifyArgs),
    /// Pipelines: ready cells, completions, failures, explanations, the DAG's status.
    Pipeline(pipeline_cmds::PipelineArgs),
    /// Run the worked example: workers, overlapping units, optional crashes; print what it measured.
    Simulate(sim_cmds::SimulateArgs),
    /// Show the store's metrics (table, --json or --prometheus).
    Stats(sim_cmds::StatsArgs),
    /// Claim a unit for a worker (coordinator mode by hand); exit 6 if another worker holds it.
    Claim(sim_cmds::ClaimArgs),
    /// Give back a lease by its fencing token; exit 5 if it is no longer the live lease.
    Release(sim_cmds::ReleaseArgs),
    /// Plan what must be (re)processed, from the source's listing of (unit, version).
    Reconcile(reconcile_cmd::ReconcileArgs),
    /// Built-in benchmarks, with their baselines in the same run.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Lake tables: publish a unit prefix as a Delta Lake table under STORE/tables/NAME.
    Table(table_cmds::TableArgs),
    /// Serve the store to other processes over HTTP (Unix socket, or loopback TCP with a token);
    /// every command finds the server by itself.
    #[command(
        after_help = "Examples:\n  oncelake serve ./lake &\n  oncelake ls ./lake\n  curl --unix-socket ./lake/serve.sock http://localhost/metrics"
    )]
    Serve(serve::ServeArgs),
}

/// `oncelake bench <kind>`: each kind runs its baselines side by side in the same run.
#[derive(Subcommand, Debug)]
pub(crate) enum BenchCommand {
    /// Durable commits of one unit each, objects pre-staged (P1), against one redb transaction
    /// per commit (b1) and the seed 001 pattern on SQLite (b2), at several thread counts.
    #[command(after_help = "Example:\n  oncelake bench commit --threads 1,4,16,64 --json")]
    Commit(bench::CommitBenchArgs),
    /// Dedup decision (P2) via the in-memory index vs a plain redb point lookup; open time (P6).
    Dedup(bench_dedup::DedupArgs),
    /// Full and incremental reconcile (P3) vs one redb lookup per listed unit.
    Reconcile(bench_reconcile::ReconcileBenchArgs),
    /// Open a store and print the open time and peak memory (used by `bench dedup`).
    #[command(hide = true)]
    Open(bench_dedup::OpenArgs),
}

pub(crate) fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {e}");
            e.exit_code()
        }
    };
    // A closed standard output (`| head`) is not a failure; any other write failure is.
    match finish_stdout() {
        Some(e) => {
            errln!(
                "error: could not write standard output: {e}; the command's work itself is done \
                 (a put stays committed: running it again reports a duplicate)"
            );
            ExitCode::from(if code == 0 { 1 } else { code })
        }
        None => ExitCode::from(code),
    }
}

/// Runs one command; returns the exit code for outcomes that are not errors (0, 3, 4, 5, 7).
fn run(cli: Cli) -> Result<u8, CliError> {
    let wait = cli.wait;
    // A store held by a live `oncelake serve` is used through it (SPEC R20).
    if let Some(done) = remote::route(&cli.command) {
        return done;
    }
    match cli.command {
        Command::Init(a) => store_cmds::init(a, wait),
        Command::Put(a) => store_cmds::put(a, wait),
        Command::Get(a) => store_cmds::get(a, wait),
        Command::Ls(a) => store_cmds::ls(a, wait),
        Command::Log(a) => store_cmds::log(a, wait),
        Command::Gc(a) => maint_cmds::gc(a, wait),
        Command::Verify(a) => maint_cmds::verify(a, wait),
        Command::Pipeline(a) => pipeline_cmds::run(a, wait),
        Command::Simulate(a) => sim_cmds::simulate_cmd(a),
        Command::Stats(a) => sim_cmds::stats(a, wait),
        Command::Claim(a) => sim_cmds::claim(a, wait),
        Command::Release(a) => sim_cmds::release(a, wait),
        Command::Reconcile(a) => reconcile_cmd::reconcile(a, wait),
        Command::Bench(BenchCommand::Dedup(a)) => bench_dedup::run(a),
        Command::Bench(BenchCommand::Reconcile(a)) => bench_reconcile::run(a),
        Command::Bench(BenchCommand::Open(a)) => bench_dedup::open_only(a),
        Command::Bench(BenchCommand::Commit(a)) => bench::commit(a),
        Command::Table(a) => table_cmds::run(a, wait),
        Command::Serve(a) => serve::serve(a, wait),
    }
}
