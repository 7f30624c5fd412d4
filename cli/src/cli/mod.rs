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

mod bench_moved;
mod common;
mod error;
mod help;
mod maint_cmds;
mod output;
mod output_file;
mod pipeline_cmds;
mod progress;
mod reconcile_cmd;
mod remote;
mod serve;
mod served_ops;
mod sim_args;
mod sim_cmds;
mod sim_nodes;
mod sim_pipeline;
mod store_cmds;
mod store_ops;
mod table_cmds;

use clap::{Parser, Subcommand};
pub(crate) use common::*;
pub(crate) use error::{exit, CliError};
pub(crate) use oncelake_server::client::duration::parse_duration;
pub(crate) use output::{print_json, rfc3339, Output};
pub(crate) use progress::{Heartbeat, Progress};
use std::process::ExitCode;

/// The examples of `oncelake --help`. They run as written when pasted in order into an empty
/// directory (tests/cli_examples.rs runs them).
const EXAMPLES: &str = "\
Examples:
  oncelake init ./lake
  echo 'rows' | oncelake put ./lake orders/date=2026-11-29 7 -
  oncelake get ./lake orders/date=2026-11-29 -o out.parquet
  oncelake ls ./lake --prefix orders/ --json
  oncelake log ./lake --since 0
  oncelake claim ./lake orders/date=2026-11-30 1 --worker w1 --ttl 30s
  printf 'orders/date=2026-11-29,7\\norders/date=2026-11-30,1\\n' > listing.csv
  oncelake reconcile ./lake --source listing.csv --json
  oncelake gc ./lake --dry-run
  oncelake verify ./lake --deep
  oncelake stats ./lake --prometheus
  oncelake simulate --units 2000 --mode both --json";

/// The examples of `oncelake serve --help`, runnable pasted in order (tests/cli_examples.rs): the
/// server runs in the background until the `kill`, which drains it and removes its socket.
const SERVE_EXAMPLES: &str = "\
Examples:
  oncelake serve ./lake > serve.log 2>&1 &
  timeout 10 sh -c 'until grep -q serving serve.log; do sleep 0.1; done'
  oncelake ls ./lake
  curl -s --unix-socket ./lake/serve.sock http://localhost/metrics | grep -c '^oncelake_'
  kill $(grep -o 'pid [0-9]*' serve.log | cut -d' ' -f2)
  timeout 10 sh -c 'while [ -S lake/serve.sock ]; do sleep 0.1; done'";

/// The text after `oncelake --help`: the examples, then the exit codes from their one table.
fn after_help() -> String {
    let codes: Vec<String> = exit::TABLE
        .iter()
        .map(|(code, what)| format!("  {code}  {what}"))
        .collect();
    format!(
        "{EXAMPLES}\n\nExit codes (the same for the same failure in every command):\n{}\n\n\
         Under --json, results are one JSON object per line on standard output and an error is one\n\
         JSON object on standard error: {{\"error\": KIND, \"message\": ..., \"exit_code\": N}}.\n\
         Times are RFC 3339 dates (UTC) for people, milliseconds since the epoch (`*_ms`) in JSON.\n\
         A closed standard output (`| head`) is not an error: the command finishes its work (a put\n\
         stays committed), stops writing and exits with the code of what it did. The whole contract:\n\
         docs/cli.md.",
        codes.join("\n")
    )
}

/// Exactly-once results per unit of work: stage objects, commit them atomically, inspect the store.
#[derive(Parser, Debug)]
#[command(name = "oncelake", version, about, after_help = after_help())]
pub(crate) struct Cli {
    /// How long to wait for another process that holds the store (e.g. 10s, 2m; 0 = fail at once).
    #[arg(long, global = true, default_value = "10s", value_parser = parse_duration)]
    pub wait: std::time::Duration,
    /// No progress output (bars, spinners, periodic lines) on standard error.
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Create a store in a missing or empty directory.
    #[command(after_help = help::INIT)]
    Init(store_cmds::InitArgs),
    /// Stage a file (or standard input) and commit it as the output of UNIT at VERSION.
    #[command(after_help = help::PUT)]
    Put(store_cmds::PutArgs),
    /// Bring a lake node up to date with its lake (every command on a node does this first).
    #[command(after_help = help::SYNC)]
    Sync(store_cmds::NodeArgs),
    /// Write a checkpoint of a lake node into its lake, so new nodes start from it.
    #[command(after_help = help::CHECKPOINT)]
    Checkpoint(store_cmds::NodeArgs),
    /// Write a unit's current object (or its object as of --at SEQ).
    #[command(after_help = help::GET)]
    Get(store_cmds::GetArgs),
    /// List current entries.
    #[command(after_help = help::LS)]
    Ls(store_cmds::LsArgs),
    /// Show the commit log.
    #[command(after_help = help::LOG)]
    Log(store_cmds::LogArgs),
    /// Remove orphaned objects, old staging files and history beyond the retention window.
    Gc(maint_cmds::GcArgs),
    /// Check every referenced object and replay the log; exit 7 if anything is wrong.
    Verify(maint_cmds::VerifyArgs),
    /// Pipelines: ready cells, completions, failures, explanations, the DAG's status.
    Pipeline(pipeline_cmds::PipelineArgs),
    /// Run the worked example: workers, overlapping units, optional crashes; print what it measured.
    #[command(after_help = help::SIMULATE)]
    Simulate(sim_args::SimulateArgs),
    /// Show the store's metrics (table, --json or --prometheus).
    #[command(after_help = help::STATS)]
    Stats(sim_cmds::StatsArgs),
    /// Claim a unit for a worker (coordinator mode by hand); exit 6 if another worker holds it.
    #[command(after_help = help::CLAIM)]
    Claim(sim_cmds::ClaimArgs),
    /// Give back a lease by its fencing token; exit 5 if it is no longer the live lease.
    #[command(after_help = help::RELEASE)]
    Release(sim_cmds::ReleaseArgs),
    /// Plan what must be (re)processed, from the source's listing of (unit, version).
    Reconcile(reconcile_cmd::ReconcileArgs),
    /// Moved: the benchmarks are the `oncelake-bench` binary, with the same subcommands and
    /// flags; this only says so.
    #[command(hide = true)]
    Bench(bench_moved::MovedArgs),
    /// Lake tables: publish a unit prefix as a Delta Lake table under STORE/tables/NAME.
    Table(table_cmds::TableArgs),
    /// Serve the store to other processes over HTTP (Unix socket, or loopback TCP with a token);
    /// every command finds the server by itself.
    #[command(after_help = help::join(SERVE_EXAMPLES, help::SERVE_CODES))]
    Serve(serve::ServeArgs),
}

pub(crate) fn main() -> ExitCode {
    // Known before parsing, so that even a usage error is a JSON object under --json.
    output::set_json_errors(std::env::args_os().any(|a| a == "--json"));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print(); // --help, --version
            return ExitCode::from(exit::OK);
        }
        Err(e) => {
            if output::json_errors() {
                report(&CliError::Usage(usage_message(&e.render().to_string())));
            } else {
                let _ = e.print();
            }
            return ExitCode::from(exit::USAGE);
        }
    };
    progress::set_quiet(cli.quiet);
    let is_put = matches!(cli.command, Command::Put(_));
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            report(&e);
            e.exit_code()
        }
    };
    // A closed standard output (`| head`) is not a failure; any other write failure is.
    match finish_stdout() {
        Some(e) => {
            report(&CliError::io(
                if is_put {
                    "could not write standard output (the put itself is done: it stays committed, \
                     and running it again reports a duplicate)"
                } else {
                    "could not write standard output (the command's work itself is done)"
                },
                e,
            ));
            ExitCode::from(if code == exit::OK {
                exit::FAILURE
            } else {
                code
            })
        }
        None => ExitCode::from(code),
    }
}

/// clap's rendering of a usage error as the `message` of a JSON error: without its `error: `
/// prefix (the object's `error` field says that) and its `For more information, try '--help'.`
/// tail, as every other message.
fn usage_message(rendered: &str) -> String {
    let m = rendered.trim();
    let m = m.strip_prefix("error: ").unwrap_or(m);
    let m = m
        .strip_suffix("For more information, try '--help'.")
        .unwrap_or(m);
    m.trim_end().to_string()
}

/// Writes an error to standard error: a JSON object under --json, else `error: message`.
fn report(e: &CliError) {
    if output::json_errors() {
        errln!("{}", e.to_json());
    } else {
        errln!("error: {e}");
    }
}

/// Runs one command; returns the exit code for outcomes that are not errors (0, 3, 4, 5, 7).
fn run(cli: Cli) -> Result<u8, CliError> {
    let wait = cli.wait;
    // A store held by a live `oncelake serve` is used through it (SPEC R20).
    if let Some(done) = remote::route(&cli.command, wait) {
        return done;
    }
    let write = |p: &std::path::Path| open_store(p, wait, false);
    let read = |p: &std::path::Path| open_store_to_read(p, wait);
    let result = match on_store(&cli.command, &write, &read) {
        Some(done) => done,
        None => match cli.command {
            Command::Init(a) => store_cmds::init(a, wait),
            Command::Simulate(a) => sim_cmds::simulate_cmd(a),
            Command::Bench(a) => bench_moved::run(a),
            Command::Serve(a) => serve::serve(a, wait),
            // `on_store` ran every other command.
            _ => unreachable!("invariant: on_store runs the commands that work on one store"),
        },
    };
    match result {
        // The lock's holder is a server that started while this command waited (the wait stops
        // when one announces itself, see `open_store`): the command goes through it after all.
        // Nothing was done before the store was opened, so the command runs from the start,
        // parsed again from the same arguments.
        Err(CliError::Locked(_) | CliError::Engine(oncelake::Error::Locked { .. })) => {
            match Cli::try_parse() {
                Ok(again) if !matches!(again.command, Command::Serve(_)) => {
                    remote::route(&again.command, wait).unwrap_or(result)
                }
                _ => result,
            }
        }
        other => other,
    }
}

/// Runs a command written once over the engine's `UnitStore` and the CLI's `StoreOps` on the
/// store its directory gives: `write` opens it for a command that may change it, `read` for one
/// that only reads it (the store in this process, or for both the client of the server that
/// holds it: `remote.rs`). `None` for the commands that do not work on one store (`init` creates
/// one).
fn on_store<S>(cmd: &Command, write: Open<S>, read: Open<S>) -> Option<Result<u8, CliError>>
where
    S: oncelake::UnitStore + store_ops::StoreOps,
    CliError: From<S::Error>,
{
    Some(match cmd {
        Command::Put(a) => store_cmds::put(a, write),
        Command::Get(a) => store_cmds::get(a, read),
        Command::Sync(a) => store_cmds::sync(a, write),
        Command::Checkpoint(a) => store_cmds::checkpoint(a, write),
        Command::Ls(a) => store_cmds::ls(a, read),
        Command::Log(a) => store_cmds::log(a, read),
        Command::Gc(a) => maint_cmds::gc(a, write),
        Command::Verify(a) => maint_cmds::verify(a, read),
        Command::Claim(a) => sim_cmds::claim(a, write),
        Command::Release(a) => sim_cmds::release(a, write),
        Command::Pipeline(p) => pipeline_cmds::run_on(&p.command, write),
        Command::Stats(a) => sim_cmds::stats(a, write),
        Command::Reconcile(a) => reconcile_cmd::reconcile(a, write),
        Command::Table(t) => table_cmds::run_on(&t.command, write),
        _ => return None,
    })
}
