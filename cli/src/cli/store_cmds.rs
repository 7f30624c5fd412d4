//! The store commands of the script contract: init, put, get, ls, log.

use super::output_file::{check_output_path, OutputFile};
use super::progress::CountingReader;
use super::{
    exit, open_input, open_node, open_store, print_json, rfc3339, stdout_open, write_out_bytes,
    CliError, Open, Output, Progress,
};
use oncelake::log::{Record, RecordBody};
use oncelake::{Entry, ObjectMeta, Outcome, UnitOutcome, UnitStore};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How many entries a listing prints per call of its printer (a closed pipe stops it within one).
const CHUNK: usize = 1024;

/// How many log records `log` asks for at a time (one round trip through a server).
const LOG_PAGE: usize = 10_000;

#[derive(clap::Args, Debug)]
pub(crate) struct InitArgs {
    /// Directory for the new store (missing or empty).
    pub store: PathBuf,
    /// Make the store a node of this shared lake: s3://BUCKET/PREFIX (endpoint, region and
    /// credentials from the AWS_* environment variables), file:///PATH or memory://NAME.
    #[arg(long, value_name = "URL")]
    pub lake: Option<String>,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct PutArgs {
    /// The store.
    pub store: PathBuf,
    /// Unit key, e.g. orders/customer=42/date=2026-11-29.
    pub unit: String,
    /// Source version the output was derived from (unsigned integer; larger is newer).
    pub version: u64,
    /// The output file, or - for standard input.
    pub file: String,
    /// Fencing token of the claim this write was made under.
    #[arg(long)]
    pub token: Option<u64>,
    /// Commit as a deliberate correction of the same version (revision + 1).
    #[arg(long)]
    pub correct: bool,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct GetArgs {
    /// The store.
    pub store: PathBuf,
    /// Unit key.
    pub unit: String,
    /// Read as of this seq instead of the newest.
    #[arg(long)]
    pub at: Option<u64>,
    /// Write to this file instead of standard output: replaced whole once the object is read and
    /// checked (a pipe or terminal is written in place; other special files are refused).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// An error as one JSON object on standard error, as every command under --json (the
    /// object's bytes are written as they are).
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct LsArgs {
    /// The store.
    pub store: PathBuf,
    /// Only units whose key starts with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// List as of this seq instead of the newest.
    #[arg(long)]
    pub at: Option<u64>,
    /// Also list the engine's internal units (`.pipeline/...`), hidden otherwise unless --prefix
    /// names them.
    #[arg(long)]
    pub all: bool,
    /// One JSON object per entry.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct LogArgs {
    /// The store.
    pub store: PathBuf,
    /// Only records after this seq.
    #[arg(long, default_value_t = 0)]
    pub since: u64,
    /// One JSON object per record.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn init(a: InitArgs, wait: Duration) -> Result<u8, CliError> {
    // Idempotent: creates the store, completes an interrupted creation, or finds it there.
    let store = match &a.lake {
        None => open_store(&a.store, wait, true)?,
        // A node of a shared lake (SPEC R23): bound once, caught up with the lake on open.
        Some(url) => open_node(&a.store, wait, url)?,
    };
    print_init(&Output::new(a.json), store.path(), store.created());
    Ok(exit::OK)
}

/// Arguments of `oncelake sync` and `oncelake checkpoint`.
#[derive(clap::Args, Debug)]
pub(crate) struct NodeArgs {
    /// The lake node.
    pub store: PathBuf,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

/// `oncelake sync NODE`: applies every group other nodes committed to the lake (every command
/// on a node does this first); prints the newest seq the node now reads.
pub(crate) fn sync<S: UnitStore>(a: &NodeArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    let (seq, lake) = open(&a.store)?.sync()?;
    let store = a.store.display();
    if a.json {
        print_json(&json!({"store": store.to_string(), "lake": lake, "seq": seq}));
    } else {
        match lake {
            Some(url) => outln!("{store} is in sync with {url} at seq {seq}"),
            None => {
                outln!("{store} is a local store (not a lake node): nothing to sync, seq {seq}")
            }
        }
    }
    Ok(exit::OK)
}

/// `oncelake checkpoint NODE`: writes a checkpoint of the node's replica into its lake (or
/// checks the node against the one there), so new nodes start from it.
pub(crate) fn checkpoint<S: UnitStore>(a: &NodeArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    let oncelake::CheckpointReport {
        segment,
        bytes,
        written,
    } = open(&a.store)?.checkpoint()?;
    if a.json {
        print_json(
            &json!({"store": a.store.display().to_string(), "segment": segment,
            "bytes": bytes, "written": written}),
        );
    } else if segment == 0 {
        outln!("the lake has no segment yet: nothing to checkpoint");
    } else if written {
        outln!("checkpoint of segment {segment} written ({bytes} bytes)");
    } else {
        outln!(
            "the lake holds the checkpoint of segment {segment} already; this node agrees with it"
        );
    }
    Ok(exit::OK)
}

/// Prints the result of `init`.
pub(crate) fn print_init(out: &Output, path: &Path, created: bool) {
    if out.json {
        print_json(&json!({"store": path.display().to_string(), "created": created}));
    } else if created {
        outln!("created oncelake store {}", path.display());
    } else {
        outln!(
            "{} is already an oncelake store; nothing was changed",
            path.display()
        );
    }
}

pub(crate) fn put<S: UnitStore>(a: &PutArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    oncelake::validate_user_key(&a.unit)?;
    // Before the store is opened: a refused input leaves the store's files untouched.
    let input = open_input(&a.file)?;
    let store = open(&a.store)?;
    let total = input
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len());
    let progress = Progress::new("put", "bytes read", total);
    let mut counted = CountingReader {
        inner: match input {
            None => Box::new(std::io::stdin().lock()) as Box<dyn std::io::Read>,
            Some(file) => Box::new(file),
        },
        read: 0,
        progress: &progress,
    };
    let to = oncelake::PutTo {
        unit: &a.unit,
        source_version: a.version,
        token: a.token,
        correct: a.correct,
    };
    let sent = store.put_stream(to, &mut counted);
    progress.finish();
    let (u, meta) = sent?;
    print_put(&Output::new(a.json), &u, &meta, a.token);
    Ok(outcome_code(&u.outcome))
}

/// Prints the outcome of a `put`: on standard output when it committed (or was a duplicate), on
/// standard error when it was refused; under --json always one line on standard output.
pub(crate) fn print_put(out: &Output, u: &UnitOutcome, meta: &ObjectMeta, token: Option<u64>) {
    if out.json {
        let mut v = outcome_json(u, token);
        v.insert("size".into(), json!(meta.size));
        v.insert("crc32".into(), json!(format!("{:08x}", meta.crc32)));
        print_json(&Value::Object(v));
        return;
    }
    match u.outcome {
        Outcome::Committed { seq, revision, .. } => outln!(
            "committed {} @ {} (revision {revision}) as seq {seq}: object {} ({} bytes)",
            u.unit,
            u.source_version,
            meta.id,
            meta.size
        ),
        Outcome::Duplicate { seq } => outln!(
            "duplicate: {} @ {} is already committed with identical content at seq {seq}; nothing changed",
            u.unit, u.source_version
        ),
        _ => errln!("{}", refusal_text(u)),
    }
}

/// Why a commit of a unit was refused, and what to do (for people).
pub(crate) fn refusal_text(u: &UnitOutcome) -> String {
    match u.outcome {
        Outcome::Conflict { winner_seq, winner } => format!(
            "conflict: {} @ {} was already committed with different content (object {winner}, seq {winner_seq}); the first commit wins. Use --correct to replace it deliberately.",
            u.unit, u.source_version
        ),
        Outcome::Stale { current_version } => format!(
            "stale: {} is already at version {current_version}, newer than {}; nothing changed",
            u.unit, u.source_version
        ),
        Outcome::Fenced { token, newest_token } => format!(
            "fenced: token {token} cannot commit {}: {} (the unit's newest lease token is {newest_token}); nothing changed — drop this output, or claim the unit again",
            u.unit,
            oncelake::FenceReason::of(token, newest_token)
        ),
        Outcome::Busy { expires_at_ms } => format!(
            "busy: {} is claimed by {} until {}; nothing changed — commit with that lease's --token, or retry after the lease ends",
            u.unit,
            u.holder.as_deref().unwrap_or("another worker"),
            rfc3339(expires_at_ms)
        ),
        Outcome::Aborted => "aborted: another unit of the batch was refused; nothing changed".into(),
        Outcome::Committed { .. } | Outcome::Duplicate { .. } => {
            format!("{} @ {}: {}", u.unit, u.source_version, u.outcome.name())
        }
    }
}

/// The exit code of a unit outcome (SPEC R17).
pub(crate) fn outcome_code(o: &Outcome) -> u8 {
    match o {
        Outcome::Committed { .. } | Outcome::Duplicate { .. } => exit::OK,
        Outcome::Conflict { .. } | Outcome::Aborted => exit::CONFLICT,
        Outcome::Stale { .. } => exit::STALE,
        Outcome::Fenced { .. } => exit::FENCED,
        Outcome::Busy { .. } => exit::BUSY,
    }
}

/// The fields of a unit's commit outcome, the same whatever the outcome (`null` where one does
/// not apply): `unit, source_version, outcome, seq, object, revision, superseded_version,
/// winner_seq, winner_object, current_version, token, newest_token, reason, holder,
/// expires_at_ms`. `token` is the token the commit carried.
pub(crate) fn outcome_json(u: &UnitOutcome, token: Option<u64>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("unit".into(), json!(u.unit));
    m.insert("source_version".into(), json!(u.source_version));
    m.insert("outcome".into(), json!(u.outcome.name()));
    m.insert("seq".into(), json!(u.outcome.seq()));
    m.insert("object".into(), json!(u.object.to_hex()));
    for k in [
        "revision",
        "superseded_version",
        "winner_seq",
        "winner_object",
        "current_version",
        "newest_token",
        "reason",
        "holder",
        "expires_at_ms",
    ] {
        m.insert(k.into(), Value::Null);
    }
    m.insert("token".into(), json!(token));
    let facts = match u.outcome {
        Outcome::Committed {
            revision,
            superseded,
            ..
        } => json!({"revision": revision, "superseded_version": superseded}),
        Outcome::Conflict { winner_seq, winner } => {
            json!({"winner_seq": winner_seq, "winner_object": winner.to_hex()})
        }
        Outcome::Stale { current_version } => json!({"current_version": current_version}),
        Outcome::Fenced {
            token,
            newest_token,
        } => json!({"token": token, "newest_token": newest_token,
            "reason": oncelake::FenceReason::of(token, newest_token).to_string()}),
        Outcome::Busy { expires_at_ms } => {
            json!({"holder": u.holder, "expires_at_ms": expires_at_ms})
        }
        Outcome::Duplicate { .. } | Outcome::Aborted => json!({}),
    };
    if let Value::Object(facts) = facts {
        m.extend(facts);
    }
    m
}

pub(crate) fn get<S: UnitStore>(a: &GetArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    oncelake::validate_key(&a.unit)?;
    if let Some(path) = &a.output {
        check_output_path(path)?;
    }
    let store = open(&a.store)?;
    let Some(path) = &a.output else {
        // Held whole until its size and CRC32 are checked: a damaged object writes nothing to
        // standard output.
        let mut bytes = Vec::new();
        store
            .read_into(&a.unit, a.at, &mut bytes)?
            .ok_or_else(|| no_entry(a))?;
        // A closed pipe (`| head -c 10`) is not an error; other failures are reported at exit.
        let _ = write_out_bytes(&bytes);
        return Ok(exit::OK);
    };
    let mut out = OutputFile::create(path)?;
    let entry = if out.in_place() {
        // A pipe's reader sees every byte at once: only a checked object goes in.
        let mut bytes = Vec::new();
        let entry = store.read_into(&a.unit, a.at, &mut bytes)?;
        if entry.is_some() {
            out.write_all(&bytes)?;
        }
        entry
    } else {
        // Into the temporary file, which is removed unless the object arrived whole.
        store.read_into(&a.unit, a.at, out.file())?
    };
    let entry = entry.ok_or_else(|| no_entry(a))?;
    out.finish()?;
    print_wrote(a, &entry, path);
    Ok(exit::OK)
}

/// What `get -o` wrote, on standard error (standard output may be the file itself), for people:
/// not under --json (whose standard error is for an error object) nor --quiet.
pub(crate) fn print_wrote(a: &GetArgs, e: &Entry, path: &Path) {
    if !a.json && !super::progress::quiet() {
        errln!(
            "wrote {} bytes of {}@{} (seq {}) to {}",
            e.object.size,
            e.unit,
            e.source_version,
            e.seq,
            path.display()
        );
    }
}

/// The error of a `get` whose unit has no entry (in-process or through a server).
pub(crate) fn no_entry(a: &GetArgs) -> CliError {
    CliError::NotFound(format!(
        "unit {:?} has no entry{}; list units with `oncelake ls {}`",
        a.unit,
        a.at.map(|s| format!(" as of seq {s}")).unwrap_or_default(),
        a.store.display()
    ))
}

/// An entry's JSON object: `unit, source_version, revision, object, size, crc32, seq,
/// committed_at_ms`.
pub(crate) fn entry_json(e: &Entry) -> Map<String, Value> {
    let mut m = unit_json(&e.unit, e.source_version, e.revision, &e.object);
    m.insert("seq".into(), json!(e.seq));
    m.insert("committed_at_ms".into(), json!(e.committed_at_ms));
    m
}

/// What an entry and a log record's entry say of their unit: `unit, source_version, revision,
/// object, size, crc32`.
fn unit_json(unit: &str, source_version: u64, revision: u32, o: &ObjectMeta) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("unit".into(), json!(unit));
    m.insert("source_version".into(), json!(source_version));
    m.insert("revision".into(), json!(revision));
    m.insert("object".into(), json!(o.id.to_hex()));
    m.insert("size".into(), json!(o.size));
    m.insert("crc32".into(), json!(format!("{:08x}", o.crc32)));
    m
}

pub(crate) fn ls<S: UnitStore>(a: &LsArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    let store = open(&a.store)?;
    let out = Output::new(a.json);
    let show_internal = ls_shows_internal(a);
    let (mut n, mut hidden, mut open) = (0u64, 0u64, true);
    let mut chunk = Vec::with_capacity(CHUNK);
    store.ls_at(&a.prefix, a.at, &mut |e| {
        if !show_internal && oncelake::is_internal_key(&e.unit) {
            hidden += 1;
            return true;
        }
        n += 1;
        chunk.push(e);
        if chunk.len() == CHUNK {
            // A closed pipe (`| head`) stops the listing; it is not an error.
            open = print_ls(&out, &chunk);
            chunk.clear();
        }
        open
    })?;
    if open && print_ls(&out, &chunk) {
        print_ls_end(&out, &a.prefix, n, hidden);
    }
    Ok(exit::OK)
}

/// Whether `ls` lists internal units: internal units are the engine's, so a listing for people
/// shows them only when asked (`--all`, or a prefix that names them).
pub(crate) fn ls_shows_internal(a: &LsArgs) -> bool {
    a.all || oncelake::is_internal_key(&a.prefix)
}

/// Ends `ls`: says so on standard error when nothing was listed (and how many internal units
/// were hidden).
pub(crate) fn print_ls_end(out: &Output, prefix: &str, n: u64, hidden: u64) {
    if out.json || n > 0 {
        return;
    }
    errln!(
        "no entries{}{}",
        if prefix.is_empty() {
            String::new()
        } else {
            format!(" with prefix {prefix:?}")
        },
        if hidden > 0 {
            format!(" ({hidden} internal units hidden; --all lists them)")
        } else {
            String::new()
        }
    );
}

/// Prints entries of `ls`, one per line; false once standard output is closed.
pub(crate) fn print_ls(out: &Output, entries: &[Entry]) -> bool {
    for e in entries {
        if out.json {
            print_json(&Value::Object(entry_json(e)));
        } else {
            outln!(
                "{}\tv{}\tr{}\tseq {}\t{}\t{} bytes\t{}",
                e.unit,
                e.source_version,
                e.revision,
                e.seq,
                rfc3339(e.committed_at_ms),
                e.object.size,
                e.object.id
            );
        }
        if !stdout_open() {
            return false;
        }
    }
    stdout_open()
}

pub(crate) fn log<S: UnitStore>(a: &LogArgs, open: Open<S>) -> Result<u8, CliError>
where
    CliError: From<S::Error>,
{
    let store = open(&a.store)?;
    let out = Output::new(a.json);
    let mut since = a.since;
    loop {
        let records = store.changes(since, LOG_PAGE)?;
        let Some(last) = records.last().map(|r| r.seq) else {
            return Ok(exit::OK);
        };
        if !print_log(&out, &records) {
            return Ok(exit::OK);
        }
        since = last;
    }
}

/// Prints commit-log records, one per line; false once standard output is closed.
pub(crate) fn print_log(out: &Output, records: &[Record]) -> bool {
    for rec in records {
        if out.json {
            print_json(&record_json(rec));
        } else {
            outln!("{}", record_text(rec));
        }
        if !stdout_open() {
            return false;
        }
    }
    stdout_open()
}

/// A log record's JSON object, the same fields for every kind (`null` where one does not apply):
/// `seq, committed_at_ms, kind, entries` (commit), `unit, worker, token, source_version`
/// (claim_granted, claim_released), `expires_at_ms` (claim_granted), `tag, bytes` (extension).
pub(crate) fn record_json(rec: &Record) -> Value {
    let mut v = json!({
        "seq": rec.seq, "committed_at_ms": rec.time_ms, "kind": Value::Null,
        "entries": Value::Null, "unit": Value::Null, "worker": Value::Null, "token": Value::Null,
        "source_version": Value::Null, "expires_at_ms": Value::Null, "tag": Value::Null,
        "bytes": Value::Null,
    });
    match &rec.body {
        RecordBody::Commit { entries } => {
            v["kind"] = json!("commit");
            v["entries"] = entries
                .iter()
                .map(|e| {
                    let mut m = unit_json(&e.unit, e.source_version, e.revision, &e.object);
                    m.insert("token".into(), json!(e.token));
                    Value::Object(m)
                })
                .collect();
        }
        RecordBody::ClaimGranted(c) | RecordBody::ClaimReleased(c) => {
            v["kind"] = json!(if matches!(rec.body, RecordBody::ClaimGranted(_)) {
                "claim_granted"
            } else {
                "claim_released"
            });
            v["unit"] = json!(c.unit);
            v["worker"] = json!(c.worker);
            v["token"] = json!(c.token);
            v["source_version"] = json!(c.source_version);
            // A release ends the lease; its record holds no end time (0), which is no date.
            if matches!(rec.body, RecordBody::ClaimGranted(_)) {
                v["expires_at_ms"] = json!(c.expires_at_ms);
            }
        }
        RecordBody::Extension { tag, data } => {
            v["kind"] = json!("extension");
            v["tag"] = json!(tag);
            v["bytes"] = json!(data.len());
        }
    }
    v
}

fn record_text(rec: &Record) -> String {
    let at = rfc3339(rec.time_ms);
    match &rec.body {
        RecordBody::Commit { entries } => {
            let units: Vec<String> = entries
                .iter()
                .map(|e| {
                    let revision = (e.revision > 0).then(|| format!(" r{}", e.revision));
                    format!(
                        "{}@{}{}",
                        e.unit,
                        e.source_version,
                        revision.unwrap_or_default()
                    )
                })
                .collect();
            format!(
                "seq {}\t{at}\tcommit\t{} unit(s)\t{}",
                rec.seq,
                entries.len(),
                units.join(", ")
            )
        }
        RecordBody::ClaimGranted(c) => format!(
            "seq {}\t{at}\tclaim\t{}@{} by {} (token {}, until {})",
            rec.seq,
            c.unit,
            c.source_version,
            c.worker,
            c.token,
            rfc3339(c.expires_at_ms)
        ),
        RecordBody::ClaimReleased(c) => format!(
            "seq {}\t{at}\trelease\t{} by {} (token {})",
            rec.seq, c.unit, c.worker, c.token
        ),
        RecordBody::Extension { tag, data } => {
            format!(
                "seq {}\t{at}\textension {tag}\t{} bytes",
                rec.seq,
                data.len()
            )
        }
    }
}
