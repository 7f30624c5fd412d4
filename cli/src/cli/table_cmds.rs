//! `oncelake table ...`: lake tables (SPEC R21) — create, list, publish (the P8 benchmark is
//! `oncelake-bench table`).

use super::store_ops::StoreOps;
use super::{exit, print_json, CliError, Open};
use oncelake::table::{PublishReport, TableFormat, TableStatus};
use std::path::{Path, PathBuf};

/// Runs as written when pasted in order after `oncelake init ./lake` (tests/cli_examples.rs);
/// the lines that need a Parquet file of the reader's own are comments.
const EXAMPLES: &str = "\
Examples:
  oncelake table create ./lake sales --prefix sales/
  oncelake table publish ./lake sales --json
  oncelake table ls ./lake
  # With a Parquet file (the repository's examples/sales.parquet is a tiny one), and the Python
  # deltalake package to read the table (docs/tables.md: deltalake and DuckDB):
  #   oncelake put ./lake sales/date=2026-11-29/region=eu 1 part.parquet
  #   oncelake table publish ./lake sales
  #   python -c \"import deltalake as d; print(d.DeltaTable('lake/tables/sales').version())\"";

/// `oncelake table <command>`.
#[derive(clap::Args, Debug)]
#[command(after_help = super::help::join(EXAMPLES, super::help::TABLE_CODES))]
pub(crate) struct TableArgs {
    #[command(subcommand)]
    pub command: TableCommand,
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum TableCommand {
    /// Define a table publishing the units under a prefix (k=v key segments become partitions).
    Create(CreateArgs),
    /// List the tables and how far each is published.
    Ls(LsArgs),
    /// Publish the commits since each table's last version (one table version per commit).
    Publish(PublishArgs),
    /// Moved: the P8 benchmark is `oncelake-bench table`; this only says so.
    #[command(hide = true)]
    Bench(BenchArgs),
}

#[derive(clap::Args, Debug)]
pub(crate) struct CreateArgs {
    /// The store.
    pub store: PathBuf,
    /// Table name (directory STORE/tables/NAME): letters, digits, '_' and '-'.
    pub name: String,
    /// Unit-key prefix the table publishes (e.g. sales/); empty for every unit.
    #[arg(long)]
    pub prefix: String,
    /// Table format.
    #[arg(long, default_value = "delta")]
    pub format: TableFormat,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct LsArgs {
    /// The store.
    pub store: PathBuf,
    /// One JSON line per table.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct PublishArgs {
    /// The store.
    pub store: PathBuf,
    /// The table (default: every table).
    pub name: Option<String>,
    /// One JSON line per table.
    #[arg(long)]
    pub json: bool,
}

/// `table bench ...`: moved to `oncelake-bench table` (see `bench_moved`).
#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// The benchmark's directory and flags, as `oncelake-bench table` takes them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<std::ffi::OsString>,
}

/// Runs `oncelake table ...` on the store `open` gives (in this process or its server's client).
pub(crate) fn run_on<S: StoreOps>(cmd: &TableCommand, open: Open<S>) -> Result<u8, CliError> {
    match cmd {
        TableCommand::Create(a) => create(a, open),
        TableCommand::Ls(a) => ls(a, open),
        TableCommand::Publish(a) => publish(a, open),
        TableCommand::Bench(a) => Err(super::bench_moved::moved("table", &a.args)),
    }
}

const NO_TABLES: &str = "no tables; create one with `oncelake table create STORE NAME --prefix P`";

/// One answer as a JSON line: the engine's own serialisation (its `serde` feature, the HTTP
/// API's fields), through `serde_json::Value` as every JSON line of the CLI.
fn print_serde<T: serde::Serialize>(v: &T) -> Result<(), CliError> {
    let v = serde_json::to_value(v).map_err(|e| CliError::io("writing JSON", e.into()))?;
    print_json(&v);
    Ok(())
}

/// One answer: its JSON line, or the line `text` makes of it.
fn print_as<T: serde::Serialize>(
    v: &T,
    json: bool,
    text: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    if json {
        return print_serde(v);
    }
    outln!("{}", text(v));
    Ok(())
}

/// A table for `table create`.
fn print_created(t: &TableStatus, json: bool) -> Result<(), CliError> {
    print_as(t, json, |t| {
        let d = &t.def;
        let at = t.path.display();
        format!(
            "table {} ({}) publishes units under {:?} at {at}",
            d.name, d.format, d.prefix
        )
    })
}

/// A table's line for `table ls`.
fn print_listed(t: &TableStatus, json: bool) -> Result<(), CliError> {
    print_as(t, json, |t| {
        let version = match t.position.version {
            Some(v) => format!("version {v} (seq {})", t.position.seq),
            None => "not published yet".into(),
        };
        let d = &t.def;
        format!("{}\t{}\tprefix {:?}\t{version}", d.name, d.format, d.prefix)
    })
}

/// A publish report for `table publish`.
fn print_report(r: &PublishReport, json: bool) -> Result<(), CliError> {
    if json {
        return print_serde(r);
    }
    outln!(
        "{}",
        publish_line(&r.table, r.versions, r.adds, r.removes, r.version, r.seq)
    );
    for s in &r.skipped {
        outln!(
            "  left out unit {:?} seq {}: unpublishable and superseded",
            s.unit,
            s.seq
        );
    }
    Ok(())
}

fn create<S: StoreOps>(a: &CreateArgs, open: Open<S>) -> Result<u8, CliError> {
    let t = open(&a.store)?.create_table(&a.name, &a.prefix, a.format)?;
    print_created(&t, a.json)?;
    Ok(exit::OK)
}

fn ls<S: StoreOps>(a: &LsArgs, open: Open<S>) -> Result<u8, CliError> {
    let tables = open(&a.store)?.each_table(&mut |t| print_listed(t, a.json))?;
    if tables == 0 && !a.json {
        errln!("{NO_TABLES}");
    }
    Ok(exit::OK)
}

/// `1 file`, `2 files`.
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The line of a publish report for people.
fn publish_line(
    table: &str,
    versions: u64,
    adds: u64,
    removes: u64,
    version: Option<u64>,
    seq: u64,
) -> String {
    let at = match version {
        Some(v) => format!("at version {v} (seq {seq})"),
        None => "nothing published yet".into(),
    };
    format!(
        "{table}: {}, {} added, {removes} removed; {at}",
        plural(versions, "new version", "new versions"),
        plural(adds, "file", "files"),
    )
}

/// Why a table has no version after a publish, and what to do (standard error, also under
/// --json): its first version needs a Parquet unit under its prefix. A unit there that is not
/// Parquet stops the publish with an error, so a publish that leaves no version found none.
fn nothing_yet(store: &Path, table: &str, prefix: &str) -> String {
    let (store, example) = (store.display(), format!("{prefix}date=2026-11-29"));
    format!(
        "table {table}: nothing to publish — no units under its prefix {prefix:?} yet; a table \
         publishes the Parquet files put under its prefix (`oncelake put {store} {example} 1 \
         part.parquet`), then `oncelake table publish {store} {table}` again"
    )
}

fn publish<S: StoreOps>(a: &PublishArgs, open: Open<S>) -> Result<u8, CliError> {
    let store = open(&a.store)?;
    let reports = store.publish(a.name.as_deref())?;
    if reports.is_empty() && !a.json {
        errln!("{NO_TABLES}");
    }
    for r in &reports {
        if r.version.is_none() {
            let prefix = store.table_prefix(&r.table)?;
            errln!("{}", nothing_yet(&a.store, &r.table, &prefix));
        }
        print_report(r, a.json)?;
    }
    Ok(exit::OK)
}
