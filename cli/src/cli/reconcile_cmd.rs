//! `oncelake reconcile`: plan what must be (re)processed from a source listing (SPEC R12, R17).

use super::{exit, is_stream_input, open_input, print_json, CliError, Open, Output, Progress};
use oncelake::reconcile::{
    check_sorted_listing, ListingError, ListingFormat, ListingReader, PlanEnd, PlanEvent, PlanItem,
    ReconcileForm, Summary,
};
use oncelake::UnitStore;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;

pub(crate) const EXAMPLES: &str = "\
Examples:
  printf 'orders/date=2026-11-29,7\\n' > listing.csv
  # Full listing: also reports units the source no longer has. Sorted by unit (byte order) it
  # is merged in one pass; otherwise it is sorted first (external sort, temporary files in --tmp)
  oncelake reconcile ./lake --source listing.csv
  cat listing.csv | oncelake reconcile ./lake --source - --tmp /tmp
  # Only what changed at the source (any order)
  echo '{\"unit\": \"orders/date=2026-11-29\", \"version\": 8}' > changes.jsonl
  oncelake reconcile ./lake --source changes.jsonl --changes-only --json

Listing formats: CSV lines `unit,version` (optional header `unit,version`), or JSON lines
{\"unit\": \"...\", \"version\": N}. Chosen by --format, else by extension (.csv, .jsonl, .ndjson,
.json), else by the first line. Output: one line per unit to process (missing, behind, unknown;
up_to_date with --list-up-to-date), then a summary line. Exit 0 when the plan is complete (even
with work to do), 2 for a bad listing (the error names the line). The store is never modified.";

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum FormatArg {
    /// `unit,version` lines.
    Csv,
    /// `{"unit": "...", "version": N}` lines.
    Jsonl,
}

#[derive(clap::Args, Debug)]
#[command(after_help = super::help::join(EXAMPLES, super::help::RECONCILE_CODES))]
pub(crate) struct ReconcileArgs {
    /// The store.
    pub store: PathBuf,
    /// The source's listing of (unit, version): a file, a pipe, or - for standard input.
    #[arg(long)]
    pub source: PathBuf,
    /// The listing holds only the units that changed (any order): look each one up instead of
    /// merging a full, sorted listing. Units unknown to the source are not reported.
    #[arg(long)]
    pub changes_only: bool,
    /// The listing's format (default: by extension, else by its first line).
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Also list units that are up to date (they are always counted).
    #[arg(long)]
    pub list_up_to_date: bool,
    /// One JSON object per line: `unit, action, source_version, current_version`, then
    /// `{"summary": {...}}`.
    #[arg(long)]
    pub json: bool,
    /// Where a full listing that is not sorted (or comes from standard input) is sorted, in
    /// temporary files removed afterwards (default: the system's temporary directory).
    #[arg(long, value_name = "DIR")]
    pub tmp: Option<PathBuf>,
}

/// `oncelake reconcile`, on the store in this process or through its server
/// (`UnitStore::reconcile`).
pub(crate) fn reconcile<S: UnitStore>(a: &ReconcileArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    let (input, format) = open_listing(a)?;
    let sort = needs_sort(a, format)?;
    let store = open(&a.store)?;

    let progress = Progress::new("reconcile", "rows read", None);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let output = Output::new(a.json);
    let mut header = true;
    let dir = a.tmp.clone().unwrap_or_else(std::env::temp_dir);
    let form = ReconcileForm {
        format,
        changes_only: a.changes_only,
        list_up_to_date: a.list_up_to_date,
        sort_in: sort.then(|| dir.clone()),
    };
    let mut input = LineCounter {
        inner: input,
        rows: 0,
        reported: 0,
        progress: &progress,
    };
    let (mut sorted_seen, mut write_failed) = (false, None);
    let planned = store.reconcile(&mut input, &form, &mut |event| match event {
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
    });
    progress.finish();
    let summary = match planned? {
        PlanEnd::Complete(s) => s,
        PlanEnd::BadListing { kind, message } => {
            let _ = out.flush();
            // A listing the sort refused comes before any plan line.
            let printed = !sort || sorted_seen;
            return Err(bad_listing_message(
                &a.source, format, &kind, &message, printed,
            ));
        }
        // Only a failed write stops the plan early; without one, it ended as a closed pipe does
        // (nothing more to write, not an error).
        PlanEnd::Stopped => {
            return plan_write_failed(
                write_failed.unwrap_or_else(|| std::io::ErrorKind::BrokenPipe.into()),
            )
        }
    };
    if let Err(e) = out.flush() {
        return plan_write_failed(e);
    }
    drop(out);
    print_plan_summary(&output, &summary, a.changes_only, format);
    Ok(exit::OK)
}

/// Counts the lines of a listing as they are read (the rows planned from) and reports them
/// every 4096 as progress.
struct LineCounter<'p, R> {
    inner: R,
    rows: u64,
    reported: u64,
    progress: &'p Progress,
}

impl<R: Read> Read for LineCounter<'_, R> {
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

/// The result of a plan whose output could not be written: a closed pipe (`| head`) is not an
/// error, any other failure (a full disk behind `> plan.txt`) is, so that a script never takes
/// a truncated plan for a complete one.
fn plan_write_failed(e: std::io::Error) -> Result<u8, CliError> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(exit::OK)
    } else {
        Err(CliError::io("write the plan", e))
    }
}

/// Prints the summary line that ends a complete plan.
fn print_plan_summary(out: &Output, summary: &Summary, changes_only: bool, format: ListingFormat) {
    if out.json {
        print_json(&json!({ "summary": summary_json(summary, changes_only, format) }));
    } else {
        outln!("{}", summary_text(summary, changes_only));
    }
}

/// The listing's reader (standard input for `-`) and its format: the flag, else the file's
/// extension, else its first line.
fn open_listing(a: &ReconcileArgs) -> Result<(Box<dyn BufRead>, ListingFormat), CliError> {
    // The same rules as every input file (a directory or a device is bad input, exit 2).
    let mut input: Box<dyn BufRead> = match open_input(&a.source)? {
        None => Box::new(BufReader::with_capacity(1 << 16, std::io::stdin())),
        Some(f) => Box::new(BufReader::with_capacity(1 << 16, f)),
    };
    let format = match a.format {
        Some(FormatArg::Csv) => ListingFormat::Csv,
        Some(FormatArg::Jsonl) => ListingFormat::JsonLines,
        None => match ListingFormat::from_path(&a.source) {
            Some(f) => f,
            None => {
                let head = input
                    .fill_buf()
                    .map_err(|e| CliError::io(format!("read {}", a.source.display()), e))?;
                ListingFormat::sniff(head)
            }
        },
    };
    Ok((input, format))
}

/// Whether a full listing goes through the external sort. A listing file can be read twice:
/// check it fully before planning, so that a bad listing prints no plan lines at all. A full
/// listing out of order, and a stream (standard input or a pipe, which cannot be read twice:
/// a second reader would take rows from the first), go through the external sort, which reads
/// the whole listing before the merge prints anything.
fn needs_sort(a: &ReconcileArgs, format: ListingFormat) -> Result<bool, CliError> {
    let streamed = is_stream_input(&a.source);
    if a.changes_only || streamed {
        return Ok(!a.changes_only && streamed);
    }
    let f = std::fs::File::open(&a.source)
        .map_err(|e| CliError::io(format!("read {}", a.source.display()), e))?;
    match check_sorted_listing(ListingReader::new(
        BufReader::with_capacity(1 << 16, f),
        format,
    )) {
        Ok(_) => Ok(false),
        Err(ListingError::Unsorted { .. }) => Ok(true),
        Err(e) => Err(bad_listing(&a.source, format, &e, false)),
    }
}

/// Says that a full listing was sorted before the merge (on stderr).
fn print_sort_note(source: &std::path::Path, rows: u64, spilled: u64, dir: &std::path::Path) {
    errln!(
        "note: the listing {} is not sorted by unit; sorted it first ({} rows, {}) before the merge",
        source.display(),
        rows,
        match spilled {
            0 => "in memory".to_string(),
            1 => format!("1 run spilled to {}", dir.display()),
            n => format!("{n} runs spilled to {}", dir.display()),
        }
    );
}

fn bad_listing(
    source: &std::path::Path,
    format: ListingFormat,
    e: &ListingError,
    printed: bool,
) -> CliError {
    bad_listing_message(source, format, e.kind(), &e.to_string(), printed)
}

/// The error of a refused listing: `kind` is the listing error's kind (`io`, `unsorted`, ...)
/// and `message` the engine's text (also as answered by a server).
fn bad_listing_message(
    source: &std::path::Path,
    format: ListingFormat,
    kind: &str,
    message: &str,
    printed: bool,
) -> CliError {
    // The engine speaks library terms; name the flags that do the same from here.
    let hint = match kind {
        "io" if message.contains("temporary files") => " (choose the directory with --tmp)",
        "unsorted" => " (with the CLI: --changes-only)",
        _ => "",
    };
    CliError::Usage(format!(
        "bad listing {} ({} format): {message}{hint}{}",
        source.display(),
        format.name(),
        if printed {
            ". Discard the plan lines printed above: the plan is incomplete (no summary line)"
        } else {
            ". No plan was made"
        }
    ))
}

/// Prints one unit of the plan: `unit, action, source_version, current_version` (the version the
/// store holds).
/// The header of the plan's rows for people, printed before the first row (`header` is then
/// set false): no row, no header.
const PLAN_HEADER: &str = "action\tunit\tsource_version\tcurrent_version";

fn print_plan_item(
    output: &Output,
    out: &mut impl Write,
    header: &mut bool,
    item: PlanItem<'_>,
) -> std::io::Result<()> {
    if !output.json && std::mem::take(header) {
        writeln!(out, "{PLAN_HEADER}")?;
    }
    if output.json {
        let v = json!({
            "unit": item.unit,
            "action": item.action.name(),
            "source_version": item.source_version,
            "current_version": item.manifest_version,
        });
        writeln!(out, "{v}")
    } else {
        let v = |x: Option<u64>| x.map_or_else(|| "-".to_string(), |v| v.to_string());
        writeln!(
            out,
            "{}\t{}\t{}\t{}",
            item.action.name(),
            item.unit,
            v(item.source_version),
            v(item.manifest_version)
        )
    }
}

fn summary_json(s: &Summary, changes_only: bool, format: ListingFormat) -> serde_json::Value {
    json!({
        "form": if changes_only { "incremental" } else { "full" },
        "format": format.name(),
        "listed": s.listed,
        "missing": s.missing,
        "behind": s.behind,
        "up_to_date": s.up_to_date,
        "manifest_ahead": s.manifest_ahead,
        // The incremental form cannot see units the source dropped: say "not checked", not 0.
        "unknown": if changes_only { None } else { Some(s.unknown) },
        "duplicate_lines": s.duplicate_lines,
        "to_process": s.to_process(),
    })
}

fn summary_text(s: &Summary, changes_only: bool) -> String {
    let unknown = if changes_only {
        "unknown not checked (--changes-only)".to_string()
    } else {
        format!("{} unknown to the source", s.unknown)
    };
    let ahead = (s.manifest_ahead > 0).then(|| {
        let n = s.manifest_ahead;
        format!(" (of which {n} newer in the manifest than in the source)")
    });
    let repeated =
        (s.duplicate_lines > 0).then(|| format!(", {} repeated lines ignored", s.duplicate_lines));
    format!(
        "summary: {} to process ({} missing, {} behind), {} up to date{}, {unknown}; {} rows listed{}",
        s.to_process(),
        s.missing,
        s.behind,
        s.up_to_date,
        ahead.unwrap_or_default(),
        s.listed,
        repeated.unwrap_or_default()
    )
}
