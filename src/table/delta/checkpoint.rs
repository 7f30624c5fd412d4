//! Delta checkpoints: at every [`CHECKPOINT_INTERVAL`]-th version, the table's state (protocol,
//! metaData, oncelake's txn, the live adds sorted by path, then the unexpired `remove`
//! tombstones sorted by path) as one Parquet file `<version>.checkpoint.parquet`, and
//! `_last_checkpoint` pointing at it, so a reader opens a table of any length from one file plus
//! at most 99 commits.
//!
//! Tombstones are what Delta's VACUUM (delta-rs' default mode) deletes from: a file removed before
//! a checkpoint and missing from it would never be vacuumed once readers start from that
//! checkpoint. A tombstone expires [`TOMBSTONE_RETENTION_MS`] (Delta's default
//! `delta.deletedFileRetentionDuration`, one week) before the checkpoint version's commit time;
//! expiry is applied at every checkpoint version whichever way the state was built (in memory
//! during a publish, or replayed from the previous checkpoint and the commits after it), so the
//! bytes are the same either way, even if commit times went backwards.
//!
//! The rows are the same JSON actions the commit files hold, decoded into the checkpoint's Arrow
//! schema; reading a checkpoint back (to resume) encodes its rows as JSON again.

use super::{DeltaLog, CHECKPOINT_INTERVAL};
use crate::table::position::{commit_file, newest_oncelake_txn};
use crate::table::{io_err, TableResult};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

const LAST_CHECKPOINT: &str = "_last_checkpoint";

/// How long a `remove` stays in checkpoints after its deletion time: Delta's default
/// `delta.deletedFileRetentionDuration` (the table sets no other).
pub(crate) const TOMBSTONE_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

/// The state a checkpoint holds besides its header: the live `add` actions and the unexpired
/// `remove` tombstones, each by (URI) path. A path is in at most one of them.
#[derive(Debug, Default)]
pub(super) struct LiveState {
    adds: BTreeMap<String, Value>,
    tombstones: BTreeMap<String, Value>,
}

impl LiveState {
    /// A version adds `action` (an `add` action's body) at `path`.
    pub(super) fn add(&mut self, path: String, action: Value) {
        self.tombstones.remove(&path);
        self.adds.insert(path, action);
    }

    /// A version removes the file at `path`; `action` is the `remove` action's body.
    pub(super) fn remove(&mut self, path: String, action: Value) {
        self.adds.remove(&path);
        self.tombstones.insert(path, action);
    }

    /// Drops the tombstones expired as of a checkpoint committed at `time_ms`.
    fn expire(&mut self, time_ms: u64) {
        let cutoff = time_ms.saturating_sub(TOMBSTONE_RETENTION_MS);
        self.tombstones.retain(|_, r| {
            r.get("deletionTimestamp")
                .and_then(Value::as_u64)
                .is_some_and(|t| t >= cutoff)
        });
    }

    /// Applies one action line of a commit file or a checkpoint.
    fn apply(&mut self, action: &Value) {
        if let Some(r) = action.get("remove") {
            if let Some(p) = r.get("path").and_then(Value::as_str) {
                self.remove(p.to_string(), r.clone());
            }
        }
        if let Some(add) = action.get("add") {
            if let Some(p) = add.get("path").and_then(Value::as_str) {
                self.add(p.to_string(), add.clone());
            }
        }
    }
}

fn checkpoint_file(version: u64) -> String {
    format!("{version:020}.checkpoint.parquet")
}

/// Writes the checkpoint of `version` (just appended, its txn action `txn`, whose
/// `lastUpdated` is the version's commit time) and points `_last_checkpoint` at it.
pub(super) fn write(log: &mut DeltaLog, version: u64, txn: Value) -> TableResult<()> {
    if log.live.is_none() {
        log.live = Some(load_live(log, version)?);
    }
    let time_ms = txn.get("lastUpdated").and_then(Value::as_u64).unwrap_or(0);
    if let Some(live) = &mut log.live {
        live.expire(time_ms);
    }
    let (protocol, meta) = log.header.clone().ok_or_else(|| {
        log.damaged(
            &log.log_dir,
            "a checkpoint was asked for before version 0 exists",
        )
    })?;
    let mut lines = String::new();
    for v in [
        json!({ "protocol": protocol }),
        json!({ "metaData": meta }),
        json!({ "txn": txn }),
    ] {
        super::push_line(&mut lines, &v);
    }
    let mut rows = 3u64;
    if let Some(live) = &log.live {
        for add in live.adds.values() {
            super::push_line(&mut lines, &json!({ "add": add }));
            rows += 1;
        }
        for remove in live.tombstones.values() {
            super::push_line(&mut lines, &json!({ "remove": remove }));
            rows += 1;
        }
    }
    let bytes = encode(log, lines.as_bytes())?;
    let path = log.log_dir.join(checkpoint_file(version));
    log.create_exclusive(&path, &bytes)?;
    write_last_checkpoint(log, version, rows)
}

/// After a cut-short publish: writes the newest due checkpoint if it is missing and makes
/// `_last_checkpoint` point at it.
pub(super) fn repair(log: &mut DeltaLog) -> TableResult<()> {
    let Some(newest) = log.position.version else {
        return Ok(());
    };
    let due = newest - newest % CHECKPOINT_INTERVAL;
    if due == 0 {
        return Ok(());
    }
    let path = log.log_dir.join(checkpoint_file(due));
    if !path.exists() {
        let txn = txn_of(log, due)?;
        return write(log, due, txn);
    }
    let rows = parquet::file::reader::FileReader::metadata(
        &parquet::file::serialized_reader::SerializedFileReader::new(open(&path)?)
            .map_err(|e| log.damaged(&path, format!("the checkpoint is unreadable: {e}")))?,
    )
    .file_metadata()
    .num_rows() as u64;
    let want = last_checkpoint_text(due, rows);
    let have = std::fs::read(log.log_dir.join(LAST_CHECKPOINT)).unwrap_or_default();
    if have != want.as_bytes() {
        write_last_checkpoint(log, due, rows)?;
    }
    Ok(())
}

fn open(path: &Path) -> TableResult<std::fs::File> {
    std::fs::File::open(path).map_err(|e| io_err(format!("open {}", path.display()), e))
}

/// The txn action (first line) of oncelake's newest version at or before `version` (a version
/// Delta's VACUUM wrote carries none): the table's state as of `version`.
fn txn_of(log: &DeltaLog, version: u64) -> TableResult<Value> {
    let (version, _) = newest_oncelake_txn(&log.name, &log.log_dir, version)?;
    let path = log.log_dir.join(commit_file(version));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| io_err(format!("read {}", path.display()), e))?;
    let first: Value = serde_json::from_str(text.lines().next().unwrap_or_default())
        .map_err(|e| log.damaged(&path, format!("the txn line is not JSON: {e}")))?;
    first
        .get("txn")
        .cloned()
        .ok_or_else(|| log.damaged(&path, "the first line is not oncelake's txn action"))
}

fn last_checkpoint_text(version: u64, rows: u64) -> String {
    format!("{{\"version\":{version},\"size\":{rows}}}")
}

/// `_last_checkpoint` is a hint Delta defines as replaceable: a synced temporary file renamed
/// over it.
fn write_last_checkpoint(log: &DeltaLog, version: u64, rows: u64) -> TableResult<()> {
    let path = log.log_dir.join(LAST_CHECKPOINT);
    let tmp = log.log_dir.join(format!(
        ".oncelake-last-checkpoint-{}.tmp",
        std::process::id()
    ));
    let _ = log.vfs.remove(&tmp);
    crate::table::registry::write_synced(
        log.vfs.as_ref(),
        &tmp,
        last_checkpoint_text(version, rows).as_bytes(),
    )?;
    log.vfs
        .rename(&tmp, &path)
        .map_err(|e| io_err(format!("replace {}", path.display()), e))?;
    log.vfs
        .sync_dir(&log.log_dir)
        .map_err(|e| io_err(format!("sync {}", log.log_dir.display()), e))
}

/// The state as of `version`: the newest checkpoint before it, then the commits after, expiring
/// tombstones at each checkpoint version on the way (as the checkpoints written did).
fn load_live(log: &DeltaLog, version: u64) -> TableResult<LiveState> {
    let mut live = LiveState::default();
    let mut from = 0;
    let mut c = version - version % CHECKPOINT_INTERVAL;
    while c > 0 {
        let path = log.log_dir.join(checkpoint_file(c));
        if path.exists() && c < version {
            read_checkpoint(log, &path, &mut live)?;
            from = c + 1;
            break;
        }
        c -= CHECKPOINT_INTERVAL;
    }
    // The commit time of oncelake's newest version so far (a VACUUM version has none).
    let mut time_ms = None;
    if from > 0 {
        time_ms = txn_of(log, from - 1)?
            .get("lastUpdated")
            .and_then(Value::as_u64);
    }
    for v in from..=version {
        let path = log.log_dir.join(commit_file(v));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| io_err(format!("read {}", path.display()), e))?;
        for line in text.lines() {
            let action: Value = serde_json::from_str(line)
                .map_err(|e| log.damaged(&path, format!("a line is not JSON: {e}")))?;
            if let Some(t) = action
                .get("txn")
                .and_then(|t| t.get("lastUpdated")?.as_u64())
            {
                time_ms = Some(t);
            }
            live.apply(&action);
        }
        if v > 0 && v < version && v.is_multiple_of(CHECKPOINT_INTERVAL) {
            let t = time_ms.ok_or_else(|| log.damaged(&path, "no version up to it has a txn"))?;
            live.expire(t);
        }
    }
    Ok(live)
}

fn read_checkpoint(log: &DeltaLog, path: &Path, live: &mut LiveState) -> TableResult<()> {
    let bad = |e: &dyn std::fmt::Display| log.damaged(path, format!("unreadable checkpoint: {e}"));
    let reader = ParquetRecordBatchReaderBuilder::try_new(open(path)?)
        .map_err(|e| bad(&e))?
        .build()
        .map_err(|e| bad(&e))?;
    for batch in reader {
        let batch = batch.map_err(|e| bad(&e))?;
        let mut w = arrow_json::LineDelimitedWriter::new(Vec::new());
        w.write(&batch).map_err(|e| bad(&e))?;
        w.finish().map_err(|e| bad(&e))?;
        let out = w.into_inner();
        for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let action: Value = serde_json::from_slice(line).map_err(|e| bad(&e))?;
            live.apply(&action);
        }
    }
    Ok(())
}

/// JSON action lines → one Parquet file in the checkpoint schema.
fn encode(log: &DeltaLog, lines: &[u8]) -> TableResult<Vec<u8>> {
    let bad = |e: &dyn std::fmt::Display| {
        log.damaged(&log.log_dir, format!("cannot encode the checkpoint: {e}"))
    };
    let schema = Arc::new(checkpoint_schema());
    let mut decoder = arrow_json::ReaderBuilder::new(schema.clone())
        .with_batch_size(8192)
        .build_decoder()
        .map_err(|e| bad(&e))?;
    let mut writer = ArrowWriter::try_new(Vec::new(), schema, None).map_err(|e| bad(&e))?;
    let mut rest = lines;
    while !rest.is_empty() {
        let used = decoder.decode(rest).map_err(|e| bad(&e))?;
        rest = &rest[used..];
        if let Some(batch) = decoder.flush().map_err(|e| bad(&e))? {
            writer.write(&batch).map_err(|e| bad(&e))?;
        }
    }
    if let Some(batch) = decoder.flush().map_err(|e| bad(&e))? {
        writer.write(&batch).map_err(|e| bad(&e))?;
    }
    writer.into_inner().map_err(|e| bad(&e))
}

fn string_map(name: &str) -> Field {
    let entries = Field::new(
        "key_value",
        DataType::Struct(Fields::from(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Utf8, true),
        ])),
        false,
    );
    Field::new(name, DataType::Map(Arc::new(entries), false), true)
}

fn strct(name: &str, fields: Vec<Field>) -> Field {
    Field::new(name, DataType::Struct(Fields::from(fields)), true)
}

fn checkpoint_schema() -> Schema {
    use DataType::{Boolean, Int32, Int64, Utf8};
    let f = |n: &str, t: DataType| Field::new(n, t, true);
    Schema::new(vec![
        strct(
            "txn",
            vec![
                f("appId", Utf8),
                f("version", Int64),
                f("lastUpdated", Int64),
            ],
        ),
        strct(
            "add",
            vec![
                f("path", Utf8),
                string_map("partitionValues"),
                f("size", Int64),
                f("modificationTime", Int64),
                f("dataChange", Boolean),
                f("stats", Utf8),
            ],
        ),
        strct(
            "remove",
            vec![
                f("path", Utf8),
                f("deletionTimestamp", Int64),
                f("dataChange", Boolean),
                f("extendedFileMetadata", Boolean),
                string_map("partitionValues"),
                f("size", Int64),
            ],
        ),
        strct(
            "metaData",
            vec![
                f("id", Utf8),
                f("name", Utf8),
                f("description", Utf8),
                strct("format", vec![f("provider", Utf8), string_map("options")]),
                f("schemaString", Utf8),
                Field::new(
                    "partitionColumns",
                    DataType::List(Arc::new(Field::new("element", Utf8, true))),
                    true,
                ),
                string_map("configuration"),
                f("createdTime", Int64),
            ],
        ),
        strct(
            "protocol",
            vec![f("minReaderVersion", Int32), f("minWriterVersion", Int32)],
        ),
    ])
}
