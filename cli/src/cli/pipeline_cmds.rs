//! `oncelake pipeline ...`: drive and inspect a pipeline by hand or from scripts.
//!
//! The units a pipeline runs over are those given a source version with `pipeline set-version`
//! (stored as `.pipeline/source/<unit>` entries); the definition comes from `--pipeline FILE`.

use super::output::held_by_another;
use super::store_cmds::{outcome_code, outcome_json, refusal_text};
use super::{exit, open_input, parse_duration, print_json, rfc3339, CliError, Open, Output};
use oncelake::pipeline::cell::validate_pipeline_unit;
use oncelake::pipeline::{
    Attempt, CellState, CellView, Claim, Explain, FailOutcome, Pipeline, PipelineDef, ReadyCell,
    Status, Wave,
};
use oncelake::{FenceReason, Lease, Outcome, UnitOutcome, UnitStore};
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Runs as written when pasted in order after `oncelake init ./lake` (tests/cli_examples.rs).
const EXAMPLES: &str = "\
Examples:
  printf '[stage.ingest]\\ncode_version = 1\\n' > etl.toml
  printf '[stage.transform]\\ncode_version = 3\\nupstream = [\"ingest\"]\\n' >> etl.toml
  echo 'a,b' > input.csv
  oncelake pipeline set-version ./lake orders/day=1 7 input.csv
  oncelake pipeline status ./lake --pipeline etl.toml
  oncelake pipeline status ./lake --pipeline etl.toml --dot > etl.dot  # Graphviz
  oncelake pipeline ready ./lake --pipeline etl.toml --json
  echo 'ingested' > out.bin
  oncelake pipeline complete ./lake --pipeline etl.toml orders/day=1 ingest out.bin
  oncelake pipeline fail ./lake --pipeline etl.toml orders/day=1 transform --error 'timeout'
  oncelake pipeline ready ./lake --pipeline etl.toml --claim --worker w1 --json
  oncelake pipeline explain ./lake --pipeline etl.toml orders/day=1

A cell claimed with --claim is completed (or failed) with the token `ready --claim` printed:
`pipeline complete ... --token T`. The pipeline file:
  [stage.ingest]
  code_version = 1
  [stage.transform]
  code_version = 3
  upstream = [\"ingest\"]
  max_attempts = 5      # optional, default 3";

/// Pipelines: a DAG of stages with exactly-once cells per (unit, stage).
#[derive(clap::Args, Debug)]
#[command(after_help = super::help::join(EXAMPLES, super::help::PIPELINE_CODES))]
pub(crate) struct PipelineArgs {
    #[command(subcommand)]
    pub command: PipelineCommand,
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum PipelineCommand {
    /// Record a unit's current source version (and input bytes); a newer one re-runs its cells.
    SetVersion(SetVersionArgs),
    /// Cell counts per stage, or the DAG in Graphviz dot (--dot).
    Status(StatusArgs),
    /// List ready cells; with --claim, claim them for --worker.
    Ready(ReadyArgs),
    /// Complete a cell with an output file.
    Complete(CompleteArgs),
    /// Record a failed run of a cell.
    Fail(FailArgs),
    /// Say why each cell of a unit is in its state.
    Explain(ExplainArgs),
}

#[derive(clap::Args, Debug)]
pub(crate) struct SetVersionArgs {
    /// The store.
    pub store: PathBuf,
    /// Unit key.
    pub unit: String,
    /// The unit's current source version.
    pub version: u64,
    /// The unit's input (a file or - for standard input); empty if omitted.
    pub file: Option<String>,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct DefArg {
    /// The pipeline definition file.
    #[arg(long = "pipeline", value_name = "FILE")]
    pub pipeline: PathBuf,
}

#[derive(clap::Args, Debug)]
pub(crate) struct StatusArgs {
    /// The store.
    pub store: PathBuf,
    #[command(flatten)]
    pub def: DefArg,
    /// Print the DAG in Graphviz dot, stages labelled and coloured by their cell states.
    #[arg(long, conflicts_with = "json")]
    pub dot: bool,
    /// One JSON object per stage.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ReadyArgs {
    /// The store.
    pub store: PathBuf,
    #[command(flatten)]
    pub def: DefArg,
    /// At most this many cells.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Claim the listed cells (coordinator mode); prints each lease's token.
    #[arg(long, requires = "worker")]
    pub claim: bool,
    /// The claiming worker.
    #[arg(long)]
    pub worker: Option<String>,
    /// Lease length for --claim.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub ttl: Duration,
    /// One JSON object per cell.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct CompleteArgs {
    /// The store.
    pub store: PathBuf,
    #[command(flatten)]
    pub def: DefArg,
    /// Unit key.
    pub unit: String,
    /// Stage name.
    pub stage: String,
    /// The output file, or - for standard input.
    pub file: String,
    /// The source version computed (default: the unit's current one).
    #[arg(long)]
    pub version: Option<u64>,
    /// Fencing token of the claim this run was made under.
    #[arg(long)]
    pub token: Option<u64>,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct FailArgs {
    /// The store.
    pub store: PathBuf,
    #[command(flatten)]
    pub def: DefArg,
    /// Unit key.
    pub unit: String,
    /// Stage name.
    pub stage: String,
    /// What went wrong (kept as the failure's reason).
    #[arg(long)]
    pub error: String,
    /// The source version of the failed run (default: the unit's current one).
    #[arg(long)]
    pub version: Option<u64>,
    /// Fencing token of the claim this run was made under.
    #[arg(long)]
    pub token: Option<u64>,
    /// Who ran it.
    #[arg(long, default_value = "cli")]
    pub worker: String,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ExplainArgs {
    /// The store.
    pub store: PathBuf,
    #[command(flatten)]
    pub def: DefArg,
    /// Unit key.
    pub unit: String,
    /// One JSON object per cell.
    #[arg(long)]
    pub json: bool,
}

/// Runs a pipeline command on the store `open` gives for its directory: the store in this
/// process, or the client of the server that holds it (`remote.rs`). Each command is written
/// once, over the engine's `UnitStore`; what it checks before it opens the store leaves the
/// store untouched when refused.
pub(crate) fn run_on<S>(
    cmd: &PipelineCommand,
    open: &dyn Fn(&Path) -> Result<S, CliError>,
) -> Result<u8, CliError>
where
    S: UnitStore,
    CliError: From<S::Error>,
{
    match cmd {
        PipelineCommand::SetVersion(a) => set_version(a, open),
        PipelineCommand::Status(a) => status(a, open),
        PipelineCommand::Ready(a) => ready(a, open),
        PipelineCommand::Complete(a) => complete(a, open),
        PipelineCommand::Fail(a) => fail(a, open),
        PipelineCommand::Explain(a) => explain(a, open),
    }
}

pub(crate) fn load_def(path: &Path) -> Result<Pipeline, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::Input(format!(
            "cannot read the pipeline file {}: {e}; pass a TOML file of [stage.NAME] tables with --pipeline",
            path.display()
        ))
    })?;
    let def = PipelineDef::parse(&text)
        .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    Ok(Pipeline::new(def))
}

/// Reads an input file argument whole (the pipeline calls take bytes), with the rules of every
/// input file (`open_input`): a regular file, a pipe, or `-` for standard input.
pub(crate) fn read_input(file: &str) -> Result<Vec<u8>, CliError> {
    let mut buf = Vec::new();
    match open_input(file)? {
        None => std::io::stdin()
            .lock()
            .read_to_end(&mut buf)
            .map_err(|e| CliError::io("read standard input", e))?,
        Some(mut f) => f
            .read_to_end(&mut buf)
            .map_err(|e| CliError::io(format!("read {file}"), e))?,
    };
    Ok(buf)
}

fn set_version<S: UnitStore>(a: &SetVersionArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    // Before the store is opened: a refused unit leaves the store's files untouched.
    validate_pipeline_unit(&a.unit)?;
    let input = match &a.file {
        Some(f) => read_input(f)?,
        None => Vec::new(),
    };
    let u = open(&a.store)?.set_source_version(&a.unit, a.version, &input)?;
    print_set_version(&Output::new(a.json), &a.unit, &u);
    Ok(outcome_code(&u.outcome))
}

/// Prints the outcome of `pipeline set-version`; under --json the fields of a put's outcome, with
/// `unit` the unit and `cell` the internal unit that holds its source version.
pub(crate) fn print_set_version(out: &Output, unit: &str, u: &UnitOutcome) {
    if out.json {
        let mut v = outcome_json(u, None);
        v.insert("cell".into(), json!(u.unit));
        v.insert("unit".into(), json!(unit));
        print_json(&Value::Object(v));
        return;
    }
    match u.outcome {
        Outcome::Committed { seq, .. } => {
            outln!(
                "{unit} is at source version {} (seq {seq})",
                u.source_version
            )
        }
        Outcome::Duplicate { .. } => {
            outln!("{unit} is already at source version {}", u.source_version)
        }
        Outcome::Stale { current_version } => errln!(
            "stale: {unit} is already at source version {current_version}; versions never go back"
        ),
        Outcome::Conflict { .. } => errln!(
            "conflict: {unit} @ {} was recorded with a different input; bump the version",
            u.source_version
        ),
        _ => errln!("{}", refusal_text(u)),
    }
}

fn status<S: UnitStore>(a: &StatusArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    let p = load_def(&a.def.pipeline)?;
    let st = open(&a.store)?.pipeline_status(&p)?;
    let out = Output::new(a.json);
    if a.dot {
        out!("{}", p.to_dot(&st));
    } else {
        print_status(&out, &st);
    }
    Ok(exit::OK)
}

/// Prints `pipeline status`: cell counts per stage.
pub(crate) fn print_status(out: &Output, st: &Status) {
    if out.json {
        for s in &st.stages {
            print_json(&json!({
                "stage": s.stage, "code_version": s.code_version, "done": s.done,
                "ready": s.ready, "running": s.running, "blocked": s.blocked,
                "failed": s.failed, "stale": s.stale, "cut_off": s.cut_off,
            }));
        }
        return;
    }
    outln!("{} units", st.units);
    outln!(
        "{:<24} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "stage",
        "code",
        "done",
        "ready",
        "running",
        "blocked",
        "failed",
        "stale",
        "cut off"
    );
    for s in &st.stages {
        outln!(
            "{:<24} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            s.stage,
            s.code_version,
            s.done,
            s.ready,
            s.running,
            s.blocked,
            s.failed,
            s.stale,
            s.cut_off
        );
    }
}

fn ready<S: UnitStore>(a: &ReadyArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    let p = load_def(&a.def.pipeline)?;
    let store = open(&a.store)?;
    let cells = store.ready_cells(&p, a.limit)?;
    let out = Output::new(a.json);
    for c in cells {
        if !a.claim {
            print_ready(&out, &c, None);
            continue;
        }
        let worker = a.worker.as_deref().unwrap_or_default();
        match store.claim_cell(&p, &c, worker, a.ttl)? {
            // The count as of the grant: another worker may have failed it since.
            Claim::Granted { lease, cell } => print_ready(&out, &cell, Some(&lease)),
            // Someone else got there between the listing and the claim.
            _ => continue,
        }
    }
    Ok(exit::OK)
}

/// Prints one ready cell of `pipeline ready`, with its lease when it was claimed: `unit, stage,
/// source_version, attempts, cell, stale_reason, worker, token, expires_at_ms`.
pub(crate) fn print_ready(out: &Output, c: &ReadyCell, lease: Option<&Lease>) {
    if out.json {
        print_json(&json!({
            "unit": c.unit, "stage": c.stage, "source_version": c.source_version,
            "attempts": c.attempts, "cell": c.key,
            "stale_reason": c.stale.as_ref().map(|s| s.to_string()),
            "worker": lease.map(|l| &l.worker),
            "token": lease.map(|l| l.token),
            "expires_at_ms": lease.map(|l| l.expires_at_ms),
        }));
        return;
    }
    let retry = if c.attempts > 0 {
        format!(" (retry after {} failure(s))", c.attempts)
    } else {
        String::new()
    };
    let stale = c
        .stale
        .as_ref()
        .map(|s| format!(" (stale: {s})"))
        .unwrap_or_default();
    let note = lease
        .map(|l| {
            format!(
                " claimed, token {} until {}",
                l.token,
                rfc3339(l.expires_at_ms)
            )
        })
        .unwrap_or_default();
    outln!(
        "{} {} @ {}{retry}{stale}{note}",
        c.unit,
        c.stage,
        c.source_version
    );
}

/// The unit's explanation, refusing a unit without a source version.
fn explained<S: UnitStore>(p: &Pipeline, store: &S, unit: &str) -> Result<Explain, CliError>
where
    CliError: From<S::Error>,
{
    with_source_version(store.explain(p, unit)?, unit)
}

/// The explanation, or the error for a unit without a source version.
fn with_source_version(e: Explain, unit: &str) -> Result<Explain, CliError> {
    if e.source_version.is_none() {
        return Err(CliError::Usage(format!(
            "unit {unit:?} has no source version; record one with `oncelake pipeline set-version STORE {unit} VERSION`"
        )));
    }
    Ok(e)
}

fn cell_of<'e>(e: &'e Explain, stage: &str) -> Result<&'e CellView, CliError> {
    e.cells.iter().find(|c| c.stage == stage).ok_or_else(|| {
        CliError::Usage(format!(
            "the pipeline has no stage {stage:?}; its stages are {}",
            e.cells
                .iter()
                .map(|c| c.stage.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// A blocked cell cannot have run (its inputs are not there): neither its completion nor its
/// failure can be recorded.
fn refuse_blocked(cell: &CellView, unit: &str, what: &str) -> Result<(), CliError> {
    match &cell.state {
        CellState::Blocked { upstream, .. } => Err(CliError::Usage(format!(
            "cell {unit} {} is blocked on {upstream}, so it cannot be {what}; complete {upstream} for this unit first",
            cell.stage
        ))),
        _ => Ok(()),
    }
}

fn complete<S: UnitStore>(a: &CompleteArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    validate_pipeline_unit(&a.unit)?;
    let p = load_def(&a.def.pipeline)?;
    let output = read_input(&a.file)?;
    let store = open(&a.store)?;
    store.define(&p)?;
    let e = explained(&p, &store, &a.unit)?;
    refuse_blocked(cell_of(&e, &a.stage)?, &a.unit, "completed")?;
    let attempt = Attempt {
        unit: a.unit.clone(),
        stage: a.stage.clone(),
        source_version: a.version.or(e.source_version).unwrap_or_default(),
        worker: "cli".into(),
        token: a.token,
    };
    let u = store.complete_cell(&p, &attempt, &output)?;
    print_complete(&Output::new(a.json), &attempt, &u);
    Ok(outcome_code(&u.outcome))
}

/// Prints the outcome of `pipeline complete`: the fields of a put's outcome, with `unit` the unit,
/// `stage`, and `cell` the internal unit of the cell.
pub(crate) fn print_complete(out: &Output, attempt: &Attempt, u: &UnitOutcome) {
    if out.json {
        let mut v = outcome_json(u, attempt.token);
        v.insert("unit".into(), json!(attempt.unit));
        v.insert("stage".into(), json!(attempt.stage));
        v.insert("cell".into(), json!(u.unit));
        print_json(&Value::Object(v));
        return;
    }
    let line = format!(
        "{} {} @ {}: {}",
        attempt.unit,
        attempt.stage,
        attempt.source_version,
        u.outcome.name()
    );
    match u.outcome {
        o if o.is_success() => outln!("{line}"),
        Outcome::Fenced {
            token,
            newest_token,
        } => errln!(
            "{line}: token {token} {}; nothing changed",
            FenceReason::of(token, newest_token)
        ),
        Outcome::Busy { expires_at_ms } => errln!(
            "{line}: the cell is claimed by {} until {}; pass that lease's --token or retry after it ends. Nothing changed",
            u.holder.as_deref().unwrap_or("another worker"),
            rfc3339(expires_at_ms)
        ),
        _ => errln!("{line}; nothing changed"),
    }
}

fn fail<S: UnitStore>(a: &FailArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    validate_pipeline_unit(&a.unit)?;
    let p = load_def(&a.def.pipeline)?;
    let store = open(&a.store)?;
    store.define(&p)?;
    let e = explained(&p, &store, &a.unit)?;
    let cell = cell_of(&e, &a.stage)?;
    refuse_blocked(cell, &a.unit, "failed")?;
    let attempt = Attempt {
        unit: a.unit.clone(),
        stage: a.stage.clone(),
        source_version: a.version.or(e.source_version).unwrap_or_default(),
        worker: a.worker.clone(),
        token: a.token,
    };
    let outcome = store.fail_cell(&p, &attempt, &a.error)?;
    Ok(print_fail(
        &Output::new(a.json),
        &attempt,
        &cell.key,
        &outcome,
    ))
}

/// Prints the outcome of `pipeline fail` and returns its exit code. Under --json the same fields
/// whatever the outcome: `unit, stage, cell, source_version, outcome, seq, attempts, gave_up,
/// token, newest_token, reason, holder, expires_at_ms` (`cell` and `source_version` as in
/// `pipeline complete`).
pub(crate) fn print_fail(out: &Output, a: &Attempt, cell: &str, outcome: &FailOutcome) -> u8 {
    let mut v = json!({
        "unit": a.unit, "stage": a.stage, "cell": cell, "source_version": a.source_version,
        "outcome": Value::Null, "seq": Value::Null,
        "attempts": Value::Null, "gave_up": Value::Null, "token": a.token,
        "newest_token": Value::Null, "reason": Value::Null, "holder": Value::Null,
        "expires_at_ms": Value::Null,
    });
    let code = match *outcome {
        FailOutcome::Recorded {
            seq,
            attempts,
            gave_up,
        } => {
            (v["outcome"], v["seq"]) = (json!("recorded"), json!(seq));
            (v["attempts"], v["gave_up"]) = (json!(attempts), json!(gave_up));
            if !out.json {
                outln!(
                    "{} {}: failure {attempts} recorded at seq {seq}{}",
                    a.unit,
                    a.stage,
                    if gave_up {
                        "; no attempts left, the cell stays failed until its source or code version changes"
                    } else {
                        "; it will be retried"
                    }
                );
            }
            exit::OK
        }
        FailOutcome::Fenced {
            token,
            newest_token,
        } => {
            let reason = FenceReason::of(token, newest_token);
            (v["outcome"], v["token"]) = (json!("fenced"), json!(token));
            v["newest_token"] = json!(newest_token);
            v["reason"] = json!(reason.to_string());
            if !out.json {
                errln!(
                    "fenced: token {token} cannot record a failure of {} {}: {reason} (the cell's newest lease token is {newest_token}); nothing changed",
                    a.unit,
                    a.stage,
                );
            }
            exit::FENCED
        }
        FailOutcome::Busy {
            ref worker,
            expires_at_ms,
        } => {
            held_by_another(
                out,
                &mut v,
                "busy",
                (worker, expires_at_ms),
                format_args!(
                    "busy: {} {} is claimed by {worker} until {}; pass that lease's --token or retry after it ends. Nothing changed",
                    a.unit,
                    a.stage,
                    rfc3339(expires_at_ms)
                ),
            );
            exit::BUSY
        }
    };
    if out.json {
        print_json(&v);
    }
    code
}

/// A cell's JSON object under `pipeline explain`, the same fields whatever its state (`null`
/// where one does not apply). `source_version` is the version the cell is about, as in `pipeline
/// ready`: the one it was completed at (done), its lease's (running), else the unit's current one.
/// The early-cutoff fields (SPEC R24): `wave` (`reran`: completed again for the current source
/// version; `cut_off`: done without re-running because no input changed; else null), `reran`,
/// `output_unchanged` and `previous_object` (a re-run's output against its previous one), and
/// `unchanged_inputs` (a cut-off cell's inputs, `{"upstream", "object"}`, `upstream` null for the
/// source).
fn cell_json(e: &Explain, c: &CellView) -> Value {
    let mut v = json!({
        "unit": e.unit, "stage": c.stage, "state": c.state.name(), "cell": c.key,
        "stale_reason": c.stale.as_ref().map(|s| s.to_string()),
        "why": cell_text(c),
        "source_version": e.source_version, "code_version": Value::Null, "seq": Value::Null,
        "object": Value::Null, "worker": Value::Null, "token": Value::Null,
        "expires_at_ms": Value::Null, "attempts": Value::Null, "last_error": Value::Null,
        "blocked_on": Value::Null,
        "wave": c.wave.as_ref().map(|w| if w.is_cut_off() { "cut_off" } else { "reran" }),
        "reran": matches!(c.wave, Some(Wave::Reran { .. })),
        "output_unchanged": Value::Null, "previous_object": Value::Null,
        "unchanged_inputs": Value::Null,
    });
    match &c.wave {
        Some(Wave::Reran {
            previous_object,
            object,
            ..
        }) => {
            v["output_unchanged"] = json!(previous_object == object);
            v["previous_object"] = json!(previous_object.to_hex());
        }
        Some(Wave::CutOff { unchanged, .. }) => {
            v["unchanged_inputs"] = unchanged
                .iter()
                .map(|(stage, id)| json!({"upstream": stage, "object": id.to_hex()}))
                .collect();
        }
        None => {}
    }
    // The state's own fields, as the engine's type spells them on the wire; a blocked cell's
    // upstream is `blocked_on` here, beside `state`.
    if let Ok(Value::Object(facts)) = serde_json::to_value(&c.state) {
        for (name, value) in facts {
            match name.as_str() {
                "state" | "upstream_state" => {}
                "upstream" => v["blocked_on"] = value,
                _ => v[name.as_str()] = value,
            }
        }
    }
    v
}

fn explain<S: UnitStore>(a: &ExplainArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    validate_pipeline_unit(&a.unit)?;
    let p = load_def(&a.def.pipeline)?;
    let e = explained(&p, &open(&a.store)?, &a.unit)?;
    print_explain(&Output::new(a.json), &e);
    Ok(exit::OK)
}

/// Prints `pipeline explain`: why each cell of a unit is in its state.
pub(crate) fn print_explain(out: &Output, e: &Explain) {
    if out.json {
        for c in &e.cells {
            print_json(&cell_json(e, c));
        }
        return;
    }
    outln!(
        "{} at source version {}",
        e.unit,
        e.source_version.unwrap_or_default()
    );
    for c in &e.cells {
        outln!("  {}", cell_text(c));
    }
}

/// A cell's state for people: the engine's wording, with a running cell's lease end as a date.
fn cell_text(c: &CellView) -> String {
    match &c.state {
        CellState::Running {
            worker,
            token,
            expires_at_ms,
            source_version,
        } => format!(
            "{}: running by {worker} (token {token}, source version {source_version}) until {}{}",
            c.stage,
            rfc3339(*expires_at_ms),
            c.stale
                .as_ref()
                .map(|s| format!("; stale: {s}"))
                .unwrap_or_default()
        ),
        _ => c.to_string(),
    }
}
