//! Commands through a server (SPEC R20): when a live `oncelake serve` holds the store, a command
//! goes through it with the same output and exit codes as in-process. The commands written over
//! the engine's `UnitStore` (`cli::on_store`) run on the server's client exactly as on the store
//! in this process; `stats`, `reconcile` and `table` are served here, through the same printers.
//! A socket or address file left by a killed server answers nothing: the command then runs
//! in-process.

use super::error::client_error;
use super::pipeline_cmds::PipelineCommand;
use super::sim_cmds::{print_prometheus, print_stats};
use super::store_cmds::print_init;
use super::table_cmds::TableCommand;
use super::{exit, CliError, Command, Output};
use oncelake_server::{Client, ClientError};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// Runs the command through the server of its store, if a server answers and proves it is the
/// server of this store directory (see `Client::for_store_within`), waiting for its first answer
/// no longer than `wait` allows; `None` to run it in-process.
pub(crate) fn route(cmd: &Command, wait: Duration) -> Option<Result<u8, CliError>> {
    let store = store_of(cmd)?;
    let client = match Client::for_store_within(store, super::probe_timeout(wait)) {
        Ok(c) => c,
        Err(ClientError::NotServed { .. }) => return None,
        Err(e) => return Some(Err(client_error(e))),
    };
    // A lake node's commands see the lake as of now (SPEC R23), in-process by the sync of the
    // open; the server holds the node open, so it is asked to sync first.
    if store.join(oncelake::LAKE_FILE).exists() && !matches!(cmd, Command::Init(_)) {
        if let Err(e) = client.sync() {
            return Some(Err(client_error(e)));
        }
    }
    let served = |_: &Path| Ok(client.clone());
    if let Some(done) = super::on_store(cmd, &served, &served) {
        return Some(done);
    }
    Some(match cmd {
        Command::Init(a) => Ok(init(a)),
        Command::Stats(a) => stats(&client, a),
        Command::Reconcile(a) => reconcile(&client, a),
        Command::Table(t) => match &t.command {
            TableCommand::Create(a) => table_create(&client, a),
            TableCommand::Ls(a) => table_ls(&client, a),
            TableCommand::Publish(a) => table_publish(&client, a),
            TableCommand::Bench(_) => not_routed(store, &client),
        },
        _ => not_routed(store, &client),
    })
}

/// `init` of a served store: it is one already, nothing changes (the in-process wording).
fn init(a: &super::store_cmds::InitArgs) -> u8 {
    print_init(&Output::new(a.json), &a.store, false);
    exit::OK
}

fn stats(client: &Client, a: &super::sim_cmds::StatsArgs) -> Result<u8, CliError> {
    let s = client.stats().map_err(client_error)?;
    let fig = super::sim_cmds::StoreFigures {
        units: s.units,
        bytes_stored: s.bytes_stored,
        last_seq: s.seq,
    };
    if a.prometheus {
        print_prometheus(&fig, &s.metrics(), Some(&s.server_prometheus));
    } else {
        let out = Output::new(a.json);
        print_stats(&out, &a.store, &fig, &s.metrics(), Some(&s.server));
    }
    Ok(exit::OK)
}

// `oncelake table ...` through the server: the server answers with the engine's own types, so
// these print through `table_cmds`'s printers (the tests in server/tests/serve/table.rs compare
// both outputs).

const NO_TABLES: &str = "no tables; create one with `oncelake table create STORE NAME --prefix P`";

fn table_create(client: &Client, a: &super::table_cmds::CreateArgs) -> Result<u8, CliError> {
    let t = client
        .table_create(&a.name, &a.prefix, &a.format.to_string())
        .map_err(client_error)?;
    super::table_cmds::print_created(&t, a.json)?;
    Ok(exit::OK)
}

fn table_ls(client: &Client, a: &super::table_cmds::LsArgs) -> Result<u8, CliError> {
    let all = client.table_ls().map_err(client_error)?;
    if all.is_empty() && !a.json {
        errln!("{NO_TABLES}");
    }
    for t in &all {
        super::table_cmds::print_listed(t, a.json)?;
    }
    Ok(exit::OK)
}

fn table_publish(client: &Client, a: &super::table_cmds::PublishArgs) -> Result<u8, CliError> {
    let reports = client
        .table_publish(a.name.as_deref())
        .map_err(client_error)?;
    if reports.is_empty() && !a.json {
        errln!("{NO_TABLES}");
    }
    for r in &reports {
        if r.version.is_none() {
            let prefix = client
                .table_ls()
                .map_err(client_error)?
                .into_iter()
                .find(|t| t.def.name == r.table)
                .map(|t| t.def.prefix)
                .unwrap_or_default();
            errln!(
                "{}",
                super::table_cmds::nothing_yet(&a.store, &r.table, &prefix)
            );
        }
        super::table_cmds::print_report(r, a.json)?;
    }
    Ok(exit::OK)
}

/// Counts the lines of a listing as they are read (the rows the server plans from) and reports
/// them every 4096, as the in-process reconcile reports the rows it reads.
struct LineCounter<'p, R> {
    inner: R,
    rows: u64,
    reported: u64,
    progress: &'p super::Progress,
}

impl<R: std::io::Read> std::io::Read for LineCounter<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.rows += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        if self.rows >= self.reported + 4096 {
            self.reported = self.rows;
            self.progress.update(self.rows);
        }
        Ok(n)
    }
}

/// The store a command works on, for the commands that open one.
fn store_of(cmd: &Command) -> Option<&Path> {
    Some(match cmd {
        Command::Init(a) => &a.store,
        Command::Sync(a) => &a.store,
        Command::Checkpoint(a) => &a.store,
        Command::Put(a) => &a.store,
        Command::Get(a) => &a.store,
        Command::Ls(a) => &a.store,
        Command::Log(a) => &a.store,
        Command::Stats(a) => &a.store,
        Command::Claim(a) => &a.store,
        Command::Release(a) => &a.store,
        Command::Gc(a) => &a.store,
        Command::Verify(a) => &a.store,
        Command::Reconcile(a) => &a.store,
        Command::Table(t) => match &t.command {
            TableCommand::Create(a) => &a.store,
            TableCommand::Ls(a) => &a.store,
            TableCommand::Publish(a) => &a.store,
            // The benchmark makes stores of its own.
            TableCommand::Bench(_) => return None,
        },
        Command::Pipeline(p) => match &p.command {
            PipelineCommand::SetVersion(a) => &a.store,
            PipelineCommand::Status(a) => &a.store,
            PipelineCommand::Ready(a) => &a.store,
            PipelineCommand::Complete(a) => &a.store,
            PipelineCommand::Fail(a) => &a.store,
            PipelineCommand::Explain(a) => &a.store,
        },
        _ => return None,
    })
}

/// A command the server does not offer yet: say so at once instead of waiting for the lock.
fn not_routed(store: &Path, client: &Client) -> Result<u8, CliError> {
    errln!(
        "this command does not go through `oncelake serve` yet, and the server at {} holds the store; \
         stop the server (SIGTERM) and run the command again, or use the HTTP API (docs/server.md)",
        client.address()
    );
    Err(CliError::Engine(oncelake::Error::Locked {
        path: store.to_path_buf(),
    }))
}

/// `reconcile` through the server: the listing file (or standard input) is streamed as the
/// request body; the plan comes back line by line and goes through the in-process printers.
fn reconcile(client: &Client, a: &super::reconcile_cmd::ReconcileArgs) -> Result<u8, CliError> {
    use super::reconcile_cmd::{
        bad_listing_message, needs_sort, open_listing, plan_write_failed, print_plan_item,
        print_plan_summary, print_sort_note,
    };
    use oncelake_server::{PlanEnd, PlanEvent, ReconcileForm};
    let (input, format) = open_listing(a)?;
    let sort = needs_sort(a, format)?;
    // As in-process, rows read: counted as the listing's lines stream to the server.
    let progress = super::Progress::new("reconcile", "rows read", None);
    let mut input = LineCounter {
        inner: input,
        rows: 0,
        reported: 0,
        progress: &progress,
    };
    let dir = a.tmp.clone().unwrap_or_else(std::env::temp_dir);
    let form = ReconcileForm {
        changes_only: a.changes_only,
        format,
        list_up_to_date: a.list_up_to_date,
        // The server resolves a relative path against its own directory.
        sort_in: sort.then(|| std::path::absolute(&dir).unwrap_or_else(|_| dir.clone())),
    };
    let output = Output::new(a.json);
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let (mut sorted_seen, mut write_failed, mut header) = (false, None, true);
    let end = client
        .reconcile(&mut input, &form, |event| match event {
            PlanEvent::Sorted {
                was_sorted,
                rows,
                spilled_runs,
            } => {
                sorted_seen = true;
                if !was_sorted {
                    print_sort_note(&a.source, rows, spilled_runs, &dir);
                }
                true
            }
            PlanEvent::Item(item) => match print_plan_item(&output, &mut out, &mut header, item) {
                Ok(()) => true,
                Err(e) => {
                    write_failed = Some(e);
                    false
                }
            },
        })
        .map_err(client_error);
    progress.finish();
    let end = end?;
    match (end, write_failed) {
        (PlanEnd::Stopped, Some(e)) => plan_write_failed(e),
        (PlanEnd::Stopped, None) => Ok(exit::OK),
        (PlanEnd::BadListing { kind, message }, _) => {
            let _ = out.flush();
            // A listing the sort refused comes before any plan line, as in-process.
            let printed = !sort || sorted_seen;
            Err(bad_listing_message(
                &a.source, format, &kind, &message, printed,
            ))
        }
        (PlanEnd::Complete(summary), _) => {
            if let Err(e) = out.flush() {
                return plan_write_failed(e);
            }
            drop(out);
            print_plan_summary(&output, &summary, a.changes_only, format);
            Ok(exit::OK)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stable kind the server answers with becomes the CLI error of the same failure
    /// in-process: its kind (one docs/cli.md lists), its exit code, its hint.
    #[test]
    fn server_error_kinds_map_to_the_in_process_kind_and_exit_code() {
        use super::super::error::{ERROR_KINDS, VERIFY_HINT};
        let bad = |kind: &str| ClientError::BadRequest {
            kind: kind.into(),
            message: "m".into(),
        };
        let store = |kind: &str| ClientError::Store {
            kind: kind.into(),
            status: 500,
            message: "m".into(),
        };
        let cases = [
            (bad("invalid_key"), "invalid_key", exit::USAGE),
            (bad("invalid_request"), "invalid_request", exit::USAGE),
            (bad("seq_out_of_range"), "seq_out_of_range", exit::USAGE),
            (bad("table"), "table", exit::USAGE),
            (bad("bad_request"), "usage", exit::USAGE),
            (store("corrupt"), "corrupt", exit::FAILURE),
            (store("missing_object"), "missing_object", exit::FAILURE),
            (store("read_only"), "read_only", exit::FAILURE),
            (store("table_damaged"), "table_damaged", exit::FAILURE),
            (store("io"), "io", exit::FAILURE),
            (store("failed"), "io", exit::FAILURE),
            (store("snapshot_gone"), "io", exit::FAILURE),
        ];
        for (e, kind, code) in cases {
            let what = format!("{e:?}");
            let c = client_error(e);
            assert_eq!((c.kind(), c.exit_code()), (kind, code), "{what}");
            assert!(ERROR_KINDS.contains(&c.kind()), "{what}");
        }
        // A damaged object says what to run, as in-process.
        assert!(client_error(store("corrupt"))
            .to_string()
            .ends_with(VERIFY_HINT));
        assert_eq!(
            client_error(store("corrupt")).to_string(),
            format!("m{VERIFY_HINT}")
        );
    }
}
