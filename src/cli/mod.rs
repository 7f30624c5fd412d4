//! Argument parsing and dispatch. One file per command family; shared helpers in `common`.

mod bench;
mod bench_commit;
mod common;
mod error;
mod store_cmds;

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

Exit codes: 0 ok (committed or duplicate), 1 I/O or internal failure, 2 usage or bad input,
3 conflict, 4 stale, 5 fenced, 6 store locked or busy, 7 verify found problems.";

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
    /// Built-in benchmarks, with their baselines side by side in the same run.
    Bench(bench::BenchArgs),
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
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Runs one command; returns the exit code for outcomes that are not errors (0, 3, 4, 5, 7).
fn run(cli: Cli) -> Result<u8, CliError> {
    let wait = cli.wait;
    match cli.command {
        Command::Init(a) => store_cmds::init(a, wait),
        Command::Put(a) => store_cmds::put(a, wait),
        Command::Get(a) => store_cmds::get(a, wait),
        Command::Ls(a) => store_cmds::ls(a, wait),
        Command::Log(a) => store_cmds::log(a, wait),
        Command::Bench(a) => bench::run(a),
    }
}
