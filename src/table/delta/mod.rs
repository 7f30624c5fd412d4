//! The Delta Lake format of a table: one commit file per published store commit, created
//! exclusively (a synced temporary file linked without replacing), and a Parquet checkpoint every
//! [`CHECKPOINT_INTERVAL`] versions.
//!
//! Every byte is a function of the store's log: times are commit times, the table id derives from
//! the table's owner (the store id, or `lake` on a lake node) and the table name, JSON keys come
//! in a fixed order. So a publish cut short and resumed writes byte for byte what an
//! uninterrupted one writes, two lake nodes build the same bytes for the same version, and a
//! version file that already exists with the same bytes (two publishers racing) is accepted, with
//! other bytes it is damage.

mod checkpoint;

use super::position::{commit_file, published, Position, DELTA_LOG};
use super::registry::write_synced;
use super::version::{FileRef, FormatLog, TableCommit, TableSchema};
use super::{io_err, TableDef, TableError, TableResult};
use crate::store::Store;
use crate::vfs::Vfs;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A checkpoint is written at every version that is a multiple of this (delta-rs' default).
pub(crate) const CHECKPOINT_INTERVAL: u64 = 100;

/// A Delta table's log, as far as oncelake writes it.
pub(crate) struct DeltaLog {
    name: String,
    log_dir: PathBuf,
    app_id: String,
    table_id: String,
    vfs: Arc<dyn Vfs>,
    position: Position,
    schema: Option<TableSchema>,
    /// The `protocol` and `metaData` actions of version 0.
    header: Option<(Value, Value)>,
    /// The live files and tombstones, once a checkpoint needed them.
    live: Option<checkpoint::LiveState>,
}

impl DeltaLog {
    /// Opens the log of `def`, repairing what a cut-short publish may have left: a missing
    /// checkpoint of the newest checkpoint version and a stale `_last_checkpoint`.
    pub(crate) fn open(store: &Store, def: &TableDef) -> TableResult<DeltaLog> {
        let dir = store.table_dir(&def.name);
        let log_dir = dir.join(DELTA_LOG);
        let owner = super::owner(store);
        let id_hash = blake3::hash(format!("{owner}:{}", def.name).as_bytes());
        let mut log = DeltaLog {
            name: def.name.clone(),
            app_id: format!("oncelake:{owner}:{}", def.name),
            table_id: uuid_of(id_hash.as_bytes()),
            vfs: store.core().vfs().clone(),
            position: published(&def.name, &dir)?,
            schema: None,
            header: None,
            live: None,
            log_dir,
        };
        log.remove_temporaries()?;
        if log.position.version.is_some() {
            log.read_header()?;
            checkpoint::repair(&mut log)?;
        }
        Ok(log)
    }

    fn remove_temporaries(&self) -> TableResult<()> {
        let rd = match std::fs::read_dir(&self.log_dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(format!("list {}", self.log_dir.display()), e)),
        };
        for ent in rd.flatten() {
            let name = ent.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".oncelake-") && name.ends_with(".tmp") {
                let _ = self.vfs.remove(&ent.path());
            }
        }
        Ok(())
    }

    fn damaged(&self, path: &Path, detail: impl Into<String>) -> TableError {
        TableError::Damaged {
            name: self.name.clone(),
            path: path.to_path_buf(),
            detail: detail.into(),
        }
    }

    /// Reads `protocol` and `metaData` from version 0 and the schema from them.
    fn read_header(&mut self) -> TableResult<()> {
        let path = self.log_dir.join(commit_file(0));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| io_err(format!("read {}", path.display()), e))?;
        let mut protocol = None;
        let mut meta = None;
        for line in text.lines() {
            let v: Value = serde_json::from_str(line)
                .map_err(|e| self.damaged(&path, format!("a line is not JSON: {e}")))?;
            if let Some(p) = v.get("protocol") {
                protocol = Some(p.clone());
            }
            if let Some(m) = v.get("metaData") {
                meta = Some(m.clone());
            }
        }
        let (Some(protocol), Some(meta)) = (protocol, meta) else {
            return Err(self.damaged(&path, "version 0 has no protocol or metaData action"));
        };
        let schema = schema_of_meta(&meta)
            .ok_or_else(|| self.damaged(&path, "the metaData action has no readable schema"))?;
        self.schema = Some(schema);
        self.header = Some((protocol, meta));
        Ok(())
    }

    /// The lines of one version.
    fn render(&self, version: u64, commit: &TableCommit, schema: &TableSchema) -> String {
        let mut out = format!(
            "{{\"txn\":{{\"appId\":\"{}\",\"version\":{},\"lastUpdated\":{}}}}}\n",
            self.app_id, commit.seq, commit.time_ms
        );
        let info = json!({"commitInfo": {
            "timestamp": commit.time_ms,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append"},
            "engineInfo": concat!("oncelake/", env!("CARGO_PKG_VERSION")),
            "oncelakeSeq": commit.seq,
            "isBlindAppend": commit.removes.is_empty(),
        }});
        push_line(&mut out, &info);
        if version == 0 {
            let (protocol, meta) = self.header_for(schema, commit.time_ms);
            push_line(&mut out, &json!({ "protocol": protocol }));
            push_line(&mut out, &json!({ "metaData": meta }));
        }
        out.reserve((commit.removes.len() + commit.adds.len()) * 256);
        for r in &commit.removes {
            push_remove_line(&mut out, r, commit.time_ms);
        }
        for a in &commit.adds {
            push_add_line(&mut out, &a.file, a.num_records, commit.time_ms);
        }
        out
    }

    fn header_for(&self, schema: &TableSchema, time_ms: u64) -> (Value, Value) {
        if let Some(h) = &self.header {
            return h.clone();
        }
        let mut fields = schema.fields.clone();
        for c in &schema.partition_columns {
            fields.push(json!({"name": c, "type": "string", "nullable": true, "metadata": {}}));
        }
        let schema_string = json!({"type": "struct", "fields": fields}).to_string();
        let protocol = json!({"minReaderVersion": 1, "minWriterVersion": 2});
        let meta = json!({
            "id": self.table_id,
            "name": self.name,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema_string,
            "partitionColumns": schema.partition_columns,
            "configuration": {},
            "createdTime": time_ms,
        });
        (protocol, meta)
    }

    /// Creates `path` with `bytes` exclusively; an existing file with the same bytes is fine.
    fn create_exclusive(&self, path: &Path, bytes: &[u8]) -> TableResult<()> {
        let file = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let tmp = self.log_dir.join(format!(
            ".oncelake-{}-{}.tmp",
            file.unwrap_or_default(),
            std::process::id()
        ));
        let _ = self.vfs.remove(&tmp);
        write_synced(self.vfs.as_ref(), &tmp, bytes)?;
        let linked = self.vfs.link_no_replace(&tmp, path);
        let _ = self.vfs.remove(&tmp);
        let linked = linked.map_err(|e| io_err(format!("publish {}", path.display()), e))?;
        self.vfs
            .sync_dir(&self.log_dir)
            .map_err(|e| io_err(format!("sync {}", self.log_dir.display()), e))?;
        if !linked {
            let existing =
                std::fs::read(path).map_err(|e| io_err(format!("read {}", path.display()), e))?;
            if existing != bytes {
                return Err(self.damaged(
                    path,
                    "the file exists with other content: another writer changed this table; \
                     publish under a new table name",
                ));
            }
        }
        Ok(())
    }
}

impl FormatLog for DeltaLog {
    fn position(&self) -> Position {
        self.position
    }

    fn schema(&self) -> Option<&TableSchema> {
        self.schema.as_ref()
    }

    fn append(&mut self, commit: &TableCommit, schema: &TableSchema) -> TableResult<()> {
        let version = self.position.version.map_or(0, |v| v + 1);
        if version == 0 {
            self.vfs
                .create_dir_all(&self.log_dir)
                .map_err(|e| io_err(format!("create {}", self.log_dir.display()), e))?;
        }
        let text = self.render(version, commit, schema);
        self.create_exclusive(&self.log_dir.join(commit_file(version)), text.as_bytes())?;
        if version == 0 {
            self.header = Some(self.header_for(schema, commit.time_ms));
            self.schema = Some(schema.clone());
        }
        if let Some(live) = &mut self.live {
            for r in &commit.removes {
                let remove = remove_action(r, commit.time_ms);
                live.remove(super::layout::uri_path(&r.path), remove);
            }
            for a in &commit.adds {
                let add = add_action(&a.file, a.num_records, commit.time_ms);
                live.add(super::layout::uri_path(&a.file.path), add);
            }
        }
        self.position = Position {
            version: Some(version),
            seq: commit.seq,
        };
        if version > 0 && version.is_multiple_of(CHECKPOINT_INTERVAL) {
            let txn =
                json!({"appId": self.app_id, "version": commit.seq, "lastUpdated": commit.time_ms});
            checkpoint::write(self, version, txn)?;
        }
        Ok(())
    }
}

fn push_line(out: &mut String, v: &Value) {
    out.push_str(&v.to_string());
    out.push('\n');
}

/// `{"add":{...}}` and a newline: the bytes `push_line` writes for [`add_action`], written
/// directly (a version's add and remove lines are most of a publish's encoding work).
fn push_add_line(out: &mut String, f: &FileRef, num_records: i64, time_ms: u64) {
    use std::fmt::Write;
    let _ = write!(
        out,
        "{{\"add\":{{\"dataChange\":true,\"modificationTime\":{time_ms},\"partitionValues\":"
    );
    push_partition_values(out, f);
    out.push_str(",\"path\":");
    push_json_str(out, &super::layout::uri_path(&f.path));
    let _ = writeln!(
        out,
        ",\"size\":{},\"stats\":\"{{\\\"numRecords\\\":{num_records}}}\"}}}}",
        f.size
    );
}

/// `{"remove":{...}}` and a newline: the bytes `push_line` writes for [`remove_action`].
fn push_remove_line(out: &mut String, f: &FileRef, time_ms: u64) {
    use std::fmt::Write;
    let _ = write!(
        out,
        "{{\"remove\":{{\"dataChange\":true,\"deletionTimestamp\":{time_ms},\
         \"extendedFileMetadata\":true,\"partitionValues\":"
    );
    push_partition_values(out, f);
    out.push_str(",\"path\":");
    push_json_str(out, &super::layout::uri_path(&f.path));
    let _ = writeln!(out, ",\"size\":{}}}}}", f.size);
}

/// The partition values as a JSON object with sorted keys (as serde_json writes a map; a
/// repeated column keeps its last value).
fn push_partition_values(out: &mut String, f: &FileRef) {
    // Usually the columns are sorted and distinct already: written as they are, no map built.
    if f.partition.windows(2).all(|w| w[0].0 < w[1].0) {
        push_json_object(
            out,
            f.partition.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        return;
    }
    let sorted: std::collections::BTreeMap<&str, &str> = f
        .partition
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    push_json_object(out, sorted.into_iter());
}

/// A JSON object of string values, with its members in the order given.
fn push_json_object<'a>(out: &mut String, members: impl Iterator<Item = (&'a str, &'a str)>) {
    out.push('{');
    for (i, (k, v)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_str(out, k);
        out.push(':');
        push_json_str(out, v);
    }
    out.push('}');
}

/// A JSON string literal, escaped as serde_json escapes it.
fn push_json_str(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&Value::String(s.to_string()).to_string());
    }
}

fn partition_values(r: &FileRef) -> Value {
    let mut m = Map::new();
    for (k, v) in &r.partition {
        m.insert(k.clone(), Value::String(v.clone()));
    }
    Value::Object(m)
}

fn add_action(f: &FileRef, num_records: i64, time_ms: u64) -> Value {
    json!({
        "path": super::layout::uri_path(&f.path),
        "partitionValues": partition_values(f),
        "size": f.size,
        "modificationTime": time_ms,
        "dataChange": true,
        "stats": json!({"numRecords": num_records}).to_string(),
    })
}

fn remove_action(f: &FileRef, time_ms: u64) -> Value {
    json!({
        "path": super::layout::uri_path(&f.path),
        "deletionTimestamp": time_ms,
        "dataChange": true,
        "extendedFileMetadata": true,
        "partitionValues": partition_values(f),
        "size": f.size,
    })
}

/// The data fields and partition columns a `metaData` action declares.
fn schema_of_meta(meta: &Value) -> Option<TableSchema> {
    let partition_columns: Vec<String> = meta
        .get("partitionColumns")?
        .as_array()?
        .iter()
        .map(|c| c.as_str().map(str::to_string))
        .collect::<Option<_>>()?;
    let schema: Value = serde_json::from_str(meta.get("schemaString")?.as_str()?).ok()?;
    let fields = schema
        .get("fields")?
        .as_array()?
        .iter()
        .filter(|f| {
            f.get("name")
                .and_then(Value::as_str)
                .is_none_or(|n| !partition_columns.iter().any(|c| c == n))
        })
        .cloned()
        .collect();
    Some(TableSchema {
        fields,
        partition_columns,
    })
}

/// A UUID-shaped (version 4 bits set) rendering of 16 bytes of a hash.
fn uuid_of(h: &[u8; 32]) -> String {
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_action_lines_are_the_bytes_serde_json_writes() {
        for partition in [
            vec![],
            vec![("d".to_string(), "2026-11-29".to_string())],
            vec![
                ("r".to_string(), "eu \"west\"\\\n\u{1}é".to_string()),
                ("a b".to_string(), "x/y".to_string()),
            ],
            vec![
                ("k".to_string(), "1".to_string()),
                ("k".to_string(), "2".to_string()),
            ],
            vec![
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "x\"y".to_string()),
            ],
        ] {
            let f = FileRef {
                path: "r=eu west/a b=x%2Fy/00ff-1234.parquet".into(),
                partition,
                size: 1234,
            };
            let mut want = String::new();
            push_line(
                &mut want,
                &json!({"add": add_action(&f, 42, 1_700_000_000_123)}),
            );
            push_line(&mut want, &json!({"remove": remove_action(&f, 7)}));
            let mut got = String::new();
            push_add_line(&mut got, &f, 42, 1_700_000_000_123);
            push_remove_line(&mut got, &f, 7);
            assert_eq!(got, want);
        }
    }
}
