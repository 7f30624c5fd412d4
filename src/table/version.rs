//! What a table version is, whatever the format: the data files it adds and removes, its
//! schema, and [`FormatLog`], the log a format keeps them in. The publisher, its stages and
//! each format's log all use these; none of them uses another's internals for them.

use super::position::Position;
use super::TableResult;
use serde_json::Value;

/// A data file of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileRef {
    /// Relative to the table root, as on disk.
    pub path: String,
    /// Partition values.
    pub partition: Vec<(String, String)>,
    /// Bytes.
    pub size: u64,
}

/// A data file a version adds.
#[derive(Clone, Debug)]
pub(crate) struct FileAdd {
    pub file: FileRef,
    pub object: crate::ObjectId,
    pub num_records: i64,
}

/// One table version: the net change of one store commit.
#[derive(Clone, Debug)]
pub(crate) struct TableCommit {
    /// The store commit (the last seq the version includes).
    pub seq: u64,
    /// Its commit time, ms since the epoch: every time the version records.
    pub time_ms: u64,
    pub removes: Vec<FileRef>,
    pub adds: Vec<FileAdd>,
}

/// A table's data columns (Delta struct fields) and partition columns.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TableSchema {
    pub fields: Vec<Value>,
    pub partition_columns: Vec<String>,
}

/// A table format's log, as a publisher needs it.
pub(crate) trait FormatLog: Send {
    /// Where the log says the table is published to.
    fn position(&self) -> Position;
    /// The schema the table was published with (`None` before its first version).
    fn schema(&self) -> Option<&TableSchema>;
    /// Appends the next version, created exclusively and durable on return.
    fn append(&mut self, commit: &TableCommit, schema: &TableSchema) -> TableResult<()>;
}
