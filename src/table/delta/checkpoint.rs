//! Delta checkpoints: at every [`CHECKPOINT_INTERVAL`]-th version, the table's state (protocol,
//! metaData, oncelake's txn, the live adds sorted by path) as one Parquet file
//! `<version>.checkpoint.parquet`, and `_last_checkpoint` pointing at it, so a reader opens a
//! table of any length from one file plus at most 99 commits.
//!
//! The rows are the same JSON actions the commit files hold, decoded into the checkpoint's Arrow
//! schema; reading a checkpoint back (to resume) encodes its rows as JSON again.

use super::{DeltaLog, CHECKPOINT_INTERVAL};
use crate::table::position::commit_file;
use crate::table::{io_err, TableResult};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

const LAST_CHECKPOINT: &str = "_last_checkpoint";

fn checkpoint_file(version: u64) -> String {
    format!("{version:020}.checkpoint.parquet")
}

/// Writes the checkpoint of `version` (just appended, its txn action `txn`) and points
/// `_last_checkpoint` at it.
pub(super) fn write(log: &mut DeltaLog, version: u64, txn: Value) -> TableResult<()> {
    if log.active.is_none() {
        log.active = Some(load_active(log, version)?);
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
    let active = log
        .active
        .as_ref()
        .map(|a| a.values())
        .into_iter()
        .flatten();
    let mut rows = 3u64;
    for add in active {
        super::push_line(&mut lines, &json!({ "add": add }));
        rows += 1;
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

/// The txn action (first line) of a version's commit file.
fn txn_of(log: &DeltaLog, version: u64) -> TableResult<Value> {
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

/// The live adds as of `version`: the newest checkpoint at or before it, then the commits after.
fn load_active(log: &DeltaLog, version: u64) -> TableResult<BTreeMap<String, Value>> {
    let mut active = BTreeMap::new();
    let mut from = 0;
    let mut c = version - version % CHECKPOINT_INTERVAL;
    while c > 0 {
        let path = log.log_dir.join(checkpoint_file(c));
        if path.exists() && c < version {
            read_checkpoint_adds(log, &path, &mut active)?;
            from = c + 1;
            break;
        }
        c -= CHECKPOINT_INTERVAL;
    }
    for v in from..=version {
        let path = log.log_dir.join(commit_file(v));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| io_err(format!("read {}", path.display()), e))?;
        for line in text.lines() {
            let action: Value = serde_json::from_str(line)
                .map_err(|e| log.damaged(&path, format!("a line is not JSON: {e}")))?;
            apply(&mut active, action);
        }
    }
    Ok(active)
}

fn apply(active: &mut BTreeMap<String, Value>, action: Value) {
    if let Some(r) = action.get("remove").and_then(|r| r.get("path")?.as_str()) {
        active.remove(r);
    }
    if let Some(add) = action.get("add") {
        if let Some(p) = add.get("path").and_then(Value::as_str) {
            active.insert(p.to_string(), add.clone());
        }
    }
}

fn read_checkpoint_adds(
    log: &DeltaLog,
    path: &Path,
    active: &mut BTreeMap<String, Value>,
) -> TableResult<()> {
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
            apply(active, action);
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
