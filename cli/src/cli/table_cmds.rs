//! `oncelake table ...`: lake tables (SPEC R21) — create, list, publish (the P8 benchmark is
//! `oncelake-bench table`).

use super::{open_store, print_json, CliError};
use oncelake::table::{PublishReport, TableDef, TableFormat};
use oncelake::Store;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

pub(crate) fn run(a: TableArgs, wait: Duration) -> Result<u8, CliError> {
    match a.command {
        TableCommand::Create(a) => create(a, wait),
        TableCommand::Ls(a) => ls(a, wait),
        TableCommand::Publish(a) => publish(a, wait),
        TableCommand::Bench(a) => Err(super::bench_moved::moved("table", &a.args)),
    }
}

fn def_json(store: &Store, d: &TableDef) -> Result<serde_json::Value, CliError> {
    let dir = store.table_dir(&d.name);
    let pos = store.table_position(&d.name)?;
    Ok(json!({
        "table": d.name,
        "format": d.format.to_string(),
        "prefix": d.prefix,
        "path": dir.display().to_string(),
        "version": pos.version,
        "seq": pos.seq,
    }))
}

fn create(a: CreateArgs, wait: Duration) -> Result<u8, CliError> {
    let store = open_store(&a.store, wait, false)?;
    let def = store.create_table(&a.name, &a.prefix, a.format)?;
    if a.json {
        print_json(&def_json(&store, &def)?);
    } else {
        outln!(
            "table {} ({}) publishes units under {:?} at {}",
            def.name,
            def.format,
            def.prefix,
            store.table_dir(&def.name).display()
        );
    }
    Ok(0)
}

fn ls(a: LsArgs, wait: Duration) -> Result<u8, CliError> {
    let store = open_store(&a.store, wait, false)?;
    let defs = store.tables()?;
    if defs.is_empty() && !a.json {
        errln!("no tables; create one with `oncelake table create STORE NAME --prefix P`");
    }
    for d in &defs {
        let j = def_json(&store, d)?;
        if a.json {
            print_json(&j);
        } else {
            let version = match j["version"].as_u64() {
                Some(v) => format!("version {v} (seq {})", j["seq"]),
                None => "not published yet".into(),
            };
            outln!("{}\t{}\tprefix {:?}\t{version}", d.name, d.format, d.prefix);
        }
    }
    Ok(0)
}

fn report_json(r: &PublishReport) -> serde_json::Value {
    json!({
        "table": r.table,
        "app_id": r.app_id,
        "versions": r.versions,
        "adds": r.adds,
        "removes": r.removes,
        "skipped": r.skipped.iter().map(|(u, s)| json!({"unit": u, "seq": s})).collect::<Vec<_>>(),
        "version": r.version,
        "seq": r.seq,
    })
}

/// `1 file`, `2 files`.
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The line of a publish report for people (in-process and through a server).
pub(crate) fn publish_line(
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
pub(crate) fn nothing_yet(store: &Path, table: &str, prefix: &str) -> String {
    let (store, example) = (store.display(), format!("{prefix}date=2026-11-29"));
    format!(
        "table {table}: nothing to publish — no units under its prefix {prefix:?} yet; a table \
         publishes the Parquet files put under its prefix (`oncelake put {store} {example} 1 \
         part.parquet`), then `oncelake table publish {store} {table}` again"
    )
}

fn publish(a: PublishArgs, wait: Duration) -> Result<u8, CliError> {
    let store = open_store(&a.store, wait, false)?;
    let reports = match &a.name {
        Some(n) => vec![store.publish_table(n)?],
        None => store.publish_tables()?,
    };
    if reports.is_empty() && !a.json {
        errln!("no tables; create one with `oncelake table create STORE NAME --prefix P`");
    }
    for r in &reports {
        if r.version.is_none() {
            let prefix = store.table(&r.table)?.prefix;
            errln!("{}", nothing_yet(&a.store, &r.table, &prefix));
        }
        if a.json {
            print_json(&report_json(r));
        } else {
            outln!(
                "{}",
                publish_line(&r.table, r.versions, r.adds, r.removes, r.version, r.seq)
            );
            for (unit, seq) in &r.skipped {
                outln!("  left out unit {unit:?} seq {seq}: unpublishable and superseded");
            }
        }
    }
    Ok(0)
}
