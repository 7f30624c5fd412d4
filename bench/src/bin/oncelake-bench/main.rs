//! `oncelake-bench`: the benchmarks of SPEC P1–P10, each with its baselines in the same run. It is
//! a binary of its own so that the product, `oncelake`, links none of the baselines (SQLite above
//! all); the benchmarks through a server drive the `oncelake` binary's `serve` (see `served`).

/// `println!` that never panics on a closed standard output (see `output`).
macro_rules! outln {
    () => {
        $crate::output::write_out(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*), true)
    };
}

/// `eprintln!` that never panics on a closed standard error.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_err(format_args!($($arg)*))
    };
}

mod commit;
mod dedup;
mod error;
mod help;
mod lake;
mod output;
mod reconcile;
mod rocksdb;
mod scratch;
mod served;
mod stage;
mod table;

use clap::{Parser, Subcommand};
use error::BenchError;
use oncelake_server::client::duration::parse_duration;
use output::{print_json, Progress};
use std::process::ExitCode;

/// The benchmarks of oncelake (SPEC P1–P10), each beside its baselines in the same run.
#[derive(Parser, Debug)]
#[command(name = "oncelake-bench", version, about)]
struct Cli {
    /// No progress on standard error.
    #[arg(long, short = 'q', global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Durable commits of one unit each (or --units-per-commit N), objects pre-staged (P1),
    /// against one redb transaction per commit (b1) and a check-then-act job's pattern on SQLite
    /// (b2), at several thread counts; --via-server through `oncelake serve` (P7, P9).
    #[command(after_help = help::join(help::COMMIT, help::BENCH_CODES))]
    Commit(commit::CommitBenchArgs),
    /// Staging and committing objects (P4) against raw write + fdatasync of the same bytes,
    /// same threads, same file system, alternating round by round.
    #[command(after_help = help::join(help::STAGE, help::BENCH_CODES))]
    Stage(stage::StageBenchArgs),
    /// Dedup decision (P2) via the in-memory index vs a plain redb point lookup; open time (P6).
    #[command(after_help = help::join(help::DEDUP, help::BENCH_CODES))]
    Dedup(dedup::DedupArgs),
    /// Full and incremental reconcile (P3) vs one redb lookup per listed unit.
    #[command(after_help = help::join(help::RECONCILE, help::BENCH_CODES))]
    Reconcile(reconcile::ReconcileBenchArgs),
    /// Many clients against one `oncelake serve` for a while: server memory sampled, every
    /// acknowledged commit checked afterwards.
    ServeLoad(served::ServeLoadArgs),
    /// Publishing a lake table (P8): N unit changes into a fresh Delta table, and a table grown
    /// to many versions for a reader to open.
    #[command(after_help = help::join(help::TABLE, help::BENCH_CODES))]
    Table(table::TableBenchArgs),
    /// A shared lake (P10): N nodes × T threads, one unit per call on overlapping units, beside
    /// the same run's single node and one node more; lost responses injected and every answer
    /// checked against the log; a new node opening the lake.
    #[command(after_help = help::join(help::LAKE, help::BENCH_CODES))]
    Lake(lake::LakeBenchArgs),
    /// Open a store and print the open time and peak memory (used by `dedup`).
    #[command(hide = true)]
    Open(dedup::OpenArgs),
    /// Durable commits, then an abort without closing the store (a crash for `open`).
    #[command(hide = true)]
    Crash(dedup::CrashArgs),
    /// One worker process of `commit --via-server --seed001` (talks to the bench on stdio).
    #[command(hide = true)]
    Seed001Worker(served::Seed001WorkerArgs),
}

fn main() -> ExitCode {
    let json = std::env::args_os().any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print(); // --help and --version too
            return ExitCode::from(if e.use_stderr() {
                error::USAGE
            } else {
                error::OK
            });
        }
    };
    output::set_quiet(cli.quiet);
    let result = match cli.command {
        Command::Commit(a) => commit::commit(a),
        Command::Stage(a) => stage::run(a),
        Command::Dedup(a) => dedup::run(a),
        Command::Reconcile(a) => reconcile::run(a),
        Command::ServeLoad(a) => served::serve_load(a),
        Command::Table(a) => table::run(a),
        Command::Lake(a) => lake::run(a),
        Command::Open(a) => dedup::open_only(a),
        Command::Crash(a) => dedup::crash(a),
        Command::Seed001Worker(a) => served::seed001_worker(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if json {
                let kind = match e {
                    BenchError::Usage(_) => "usage",
                    BenchError::Io { .. } => "io",
                    BenchError::Engine(_) => "engine",
                    BenchError::Table(_) => "table",
                };
                errln!(
                    "{}",
                    serde_json::json!({"error": kind, "message": e.to_string(), "exit_code": e.exit_code()})
                );
            } else {
                errln!("error: {e}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}
