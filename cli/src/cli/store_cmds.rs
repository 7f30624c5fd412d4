//! The store commands of the script contract: init, put, get, ls, log.

use super::{open_input, open_store, print_json, stdout_open, write_out_bytes, CliError};
use oncelake::log::RecordBody;
use oncelake::{Batch, Entry, Outcome, Store};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct InitArgs {
    /// Directory for the new store (missing or empty).
    pub store: PathBuf,
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
    /// Write to this file instead of standard output.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
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
    let store = open_store(&a.store, wait, true)?;
    let created = store.created();
    if a.json {
        print_json(&json!({"store": store.path().display().to_string(), "created": created}));
    } else if created {
        outln!("created oncelake store {}", store.path().display());
    } else {
        outln!(
            "{} is already an oncelake store; nothing was changed",
            store.path().display()
        );
    }
    Ok(0)
}

pub(crate) fn put(a: PutArgs, wait: Duration) -> Result<u8, CliError> {
    oncelake::validate_key(&a.unit)?;
    // Before the store is opened: a refused input leaves the store's files untouched.
    let input = open_input(&a.file)?;
    let store = open_store(&a.store, wait, false)?;
    let staged = match input {
        None => store.stage_reader(std::io::stdin().lock())?,
        Some(file) => store.stage_reader(file)?,
    };
    let intent = if a.correct {
        oncelake::Intent::Correct
    } else {
        oncelake::Intent::Put
    };
    let report =
        store.commit(Batch::new().item(a.unit.clone(), a.version, &staged, a.token, intent))?;
    Ok(print_put(&a, &report.units[0], &staged.meta()))
}

/// Prints a put's outcome (also for a put through a server); returns its exit code.
pub(crate) fn print_put(a: &PutArgs, u: &oncelake::UnitOutcome, meta: &oncelake::ObjectMeta) -> u8 {
    let code = outcome_code(&u.outcome);
    if a.json {
        let mut v = json!({
            "unit": u.unit,
            "source_version": u.source_version,
            "outcome": u.outcome.name(),
            "seq": u.outcome.seq(),
            "object": meta.id.to_hex(),
            "size": meta.size,
            "crc32": format!("{:08x}", meta.crc32),
        });
        add_outcome_detail(&mut v, u);
        print_json(&v);
    } else {
        match u.outcome {
            Outcome::Committed { seq, revision, .. } => outln!(
                "committed {} @ {} (revision {revision}) as seq {seq}: object {} ({} bytes)",
                u.unit, u.source_version, meta.id, meta.size
            ),
            Outcome::Duplicate { seq } => outln!(
                "duplicate: {} @ {} is already committed with identical content at seq {seq}; nothing changed",
                u.unit, u.source_version
            ),
            Outcome::Conflict { winner_seq, winner } => errln!(
                "conflict: {} @ {} was already committed with different content (object {winner}, seq {winner_seq}); the first commit wins. Use --correct to replace it deliberately.",
                u.unit, u.source_version
            ),
            Outcome::Stale { current_version } => errln!(
                "stale: {} is already at version {current_version}, newer than {}; nothing changed",
                u.unit, u.source_version
            ),
            Outcome::Fenced { token, newest_token } => errln!(
                "fenced: token {token} cannot commit {}: {} (the unit's newest lease token is {newest_token}); nothing changed — drop this output, or claim the unit again",
                u.unit,
                oncelake::FenceReason::of(token, newest_token)
            ),
            Outcome::Busy { expires_at_ms } => errln!(
                "busy: {} is claimed by {} until {expires_at_ms} ms since the epoch; nothing changed — commit with that lease's --token, or retry after the lease ends",
                u.unit,
                u.holder.as_deref().unwrap_or("another worker")
            ),
            Outcome::Aborted => errln!("aborted: nothing changed"),
        }
    }
    code
}

/// The exit code of a unit outcome (SPEC R17).
pub(crate) fn outcome_code(o: &Outcome) -> u8 {
    match o {
        Outcome::Committed { .. } | Outcome::Duplicate { .. } => 0,
        Outcome::Conflict { .. } | Outcome::Aborted => 3,
        Outcome::Stale { .. } => 4,
        Outcome::Fenced { .. } => 5,
        Outcome::Busy { .. } => 6,
    }
}

/// The outcome-specific fields of a unit's JSON line.
pub(crate) fn add_outcome_detail(v: &mut serde_json::Value, u: &oncelake::UnitOutcome) {
    let m = v
        .as_object_mut()
        .expect("invariant: outcome details go into a JSON object");
    match u.outcome {
        Outcome::Committed {
            revision,
            superseded,
            ..
        } => {
            m.insert("revision".into(), json!(revision));
            m.insert("superseded_version".into(), json!(superseded));
        }
        Outcome::Conflict { winner_seq, winner } => {
            m.insert("winner_seq".into(), json!(winner_seq));
            m.insert("winner_object".into(), json!(winner.to_hex()));
        }
        Outcome::Stale { current_version } => {
            m.insert("current_version".into(), json!(current_version));
        }
        Outcome::Fenced {
            token,
            newest_token,
        } => {
            m.insert("token".into(), json!(token));
            m.insert("newest_token".into(), json!(newest_token));
            m.insert(
                "reason".into(),
                json!(oncelake::FenceReason::of(token, newest_token).to_string()),
            );
        }
        Outcome::Busy { expires_at_ms } => {
            m.insert("holder".into(), json!(u.holder));
            m.insert("expires_at_ms".into(), json!(expires_at_ms));
        }
        Outcome::Duplicate { .. } | Outcome::Aborted => {}
    }
}

fn snapshot(store: &Store, at: Option<u64>) -> Result<oncelake::Snapshot, CliError> {
    Ok(match at {
        Some(seq) => store.snapshot_at(seq)?,
        None => store.snapshot()?,
    })
}

pub(crate) fn get(a: GetArgs, wait: Duration) -> Result<u8, CliError> {
    oncelake::validate_key(&a.unit)?;
    if let Some(path) = &a.output {
        check_output_path(path)?;
    }
    let store = open_store(&a.store, wait, false)?;
    let snap = snapshot(&store, a.at)?;
    let Some(entry) = snap.get(&a.unit)? else {
        return Err(no_entry(&a));
    };
    let bytes = snap.read_object(&entry)?;
    match &a.output {
        Some(path) => {
            let tmp = path.with_extension("oncelake-tmp");
            std::fs::write(&tmp, &bytes)
                .and_then(|_| std::fs::rename(&tmp, path))
                .map_err(|e| CliError::io(format!("write {}", path.display()), e))?;
        }
        None => {
            // A closed pipe (`| head -c 10`) is not an error; other failures are reported at exit.
            let _ = write_out_bytes(&bytes);
        }
    }
    Ok(0)
}

/// The error of a get whose unit has no entry.
pub(crate) fn no_entry(a: &GetArgs) -> CliError {
    CliError::Usage(format!(
        "unit {:?} has no entry{}; list units with `oncelake ls {}`",
        a.unit,
        a.at.map(|s| format!(" as of seq {s}")).unwrap_or_default(),
        a.store.display()
    ))
}

/// Refuses, before the store is opened, an output path that cannot be written: a directory, or
/// one whose directory is missing.
pub(crate) fn check_output_path(path: &std::path::Path) -> Result<(), CliError> {
    if path.is_dir() {
        return Err(CliError::Usage(format!(
            "{} is a directory; pass a file path to -o",
            path.display()
        )));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        return Err(CliError::Usage(format!(
            "{}: directory {} does not exist; create it first or pass another -o path",
            path.display(),
            parent.display()
        )));
    }
    Ok(())
}

pub(crate) fn entry_json(e: &Entry) -> serde_json::Value {
    json!({
        "unit": e.unit,
        "source_version": e.source_version,
        "revision": e.revision,
        "object": e.object.id.to_hex(),
        "size": e.object.size,
        "crc32": format!("{:08x}", e.object.crc32),
        "seq": e.seq,
        "committed_at_ms": e.committed_at_ms,
    })
}

pub(crate) fn ls(a: LsArgs, wait: Duration) -> Result<u8, CliError> {
    let store = open_store(&a.store, wait, false)?;
    let snap = snapshot(&store, a.at)?;
    let mut n = 0u64;
    for e in snap.prefix(&a.prefix)? {
        n += 1;
        if !print_ls_entry(&a, &e?) {
            return Ok(0); // a closed pipe (`| head`) is not an error
        }
    }
    print_ls_end(&a, n);
    Ok(0)
}

/// Prints one entry of `ls`; `false` once standard output is closed.
pub(crate) fn print_ls_entry(a: &LsArgs, e: &Entry) -> bool {
    let line = if a.json {
        entry_json(e).to_string()
    } else {
        format!(
            "{}\tv{}\tr{}\tseq {}\t{} bytes\t{}",
            e.unit, e.source_version, e.revision, e.seq, e.object.size, e.object.id
        )
    };
    outln!("{line}");
    stdout_open()
}

/// Ends an `ls` of `n` entries.
pub(crate) fn print_ls_end(a: &LsArgs, n: u64) {
    if !a.json && n == 0 {
        errln!(
            "no entries{}",
            if a.prefix.is_empty() {
                String::new()
            } else {
                format!(" with prefix {:?}", a.prefix)
            }
        );
    }
}

pub(crate) fn log(a: LogArgs, wait: Duration) -> Result<u8, CliError> {
    let store = open_store(&a.store, wait, false)?;
    let snap = store.snapshot()?;
    for rec in snap.changes_since(a.since)? {
        if !print_record(&a, &rec?) {
            return Ok(0);
        }
    }
    Ok(0)
}

/// Prints one log record; `false` once standard output is closed.
pub(crate) fn print_record(a: &LogArgs, rec: &oncelake::log::Record) -> bool {
    let line = if a.json {
        record_json(rec).to_string()
    } else {
        record_text(rec)
    };
    outln!("{line}");
    stdout_open()
}

pub(crate) fn record_json(rec: &oncelake::log::Record) -> serde_json::Value {
    let (kind, detail) = match &rec.body {
        RecordBody::Commit { entries } => (
            "commit",
            json!({"entries": entries.iter().map(|e| json!({
                "unit": e.unit,
                "source_version": e.source_version,
                "revision": e.revision,
                "object": e.object.id.to_hex(),
                "size": e.object.size,
                "crc32": format!("{:08x}", e.object.crc32),
                "token": e.token,
            })).collect::<Vec<_>>()}),
        ),
        RecordBody::ClaimGranted(c) | RecordBody::ClaimReleased(c) => (
            if matches!(rec.body, RecordBody::ClaimGranted(_)) {
                "claim_granted"
            } else {
                "claim_released"
            },
            json!({"unit": c.unit, "worker": c.worker, "token": c.token,
                   "source_version": c.source_version, "expires_at_ms": c.expires_at_ms}),
        ),
        RecordBody::Extension { tag, data } => {
            ("extension", json!({"tag": tag, "bytes": data.len()}))
        }
    };
    let mut v = json!({"seq": rec.seq, "time_ms": rec.time_ms, "kind": kind});
    if let (Some(m), Some(d)) = (v.as_object_mut(), detail.as_object()) {
        m.extend(d.clone());
    }
    v
}

fn record_text(rec: &oncelake::log::Record) -> String {
    match &rec.body {
        RecordBody::Commit { entries } => {
            let units: Vec<String> = entries
                .iter()
                .map(|e| {
                    format!(
                        "{}@{}{}",
                        e.unit,
                        e.source_version,
                        if e.revision > 0 {
                            format!(" r{}", e.revision)
                        } else {
                            String::new()
                        }
                    )
                })
                .collect();
            format!(
                "seq {}\tcommit\t{} unit(s)\t{}",
                rec.seq,
                entries.len(),
                units.join(", ")
            )
        }
        RecordBody::ClaimGranted(c) => format!(
            "seq {}\tclaim\t{}@{} by {} (token {}, until {} ms)",
            rec.seq, c.unit, c.source_version, c.worker, c.token, c.expires_at_ms
        ),
        RecordBody::ClaimReleased(c) => format!(
            "seq {}\trelease\t{} by {} (token {})",
            rec.seq, c.unit, c.worker, c.token
        ),
        RecordBody::Extension { tag, data } => {
            format!("seq {}\textension {tag}\t{} bytes", rec.seq, data.len())
        }
    }
}
