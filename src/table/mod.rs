//! Lake tables (SPEC R21): a unit prefix published as a Delta Lake table under
//! `STORE/tables/NAME/`, so query engines (delta-rs, DuckDB, Spark) read what oncelake committed.
//!
//! The engine's core knows tables without any Parquet code: their definitions ([`registry`]),
//! how unit keys map to partitions and data files ([`layout`]), where a table's own log says it
//! was published to ([`position`]) and how `verify` checks its links ([`check`]). The publisher
//! that reads Parquet footers and writes Delta versions and checkpoints is behind the `tables`
//! cargo feature (off by default; the `oncelake` binary in `cli/` turns it on), so the default library
//! tree carries no arrow-rs crates.

pub mod check;
mod def;
pub mod layout;
pub mod position;
pub mod registry;
mod report;

#[cfg(feature = "tables")]
mod auto;
#[cfg(feature = "tables")]
mod delta;
#[cfg(feature = "tables")]
mod footer;
#[cfg(all(feature = "tables", feature = "lake"))]
mod lake;
#[cfg(feature = "lake")]
mod lake_defs;
#[cfg(feature = "tables")]
mod plan;
#[cfg(feature = "tables")]
mod publish;
#[cfg(feature = "tables")]
mod stages;
#[cfg(feature = "tables")]
mod version;

#[cfg(feature = "tables")]
pub use auto::AutoPublisher;

pub use check::{LinkProblem, TableCheck};
pub use registry::{TableDef, TableFormat};
pub use report::{PublishReport, Skipped, TableStatus};

use std::path::PathBuf;

/// The directory of a store that holds its tables.
pub const TABLES_DIR: &str = "tables";

/// Everything the table API can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The store failed underneath.
    #[error(transparent)]
    Store(#[from] crate::Error),
    /// A table name broke the naming rules.
    #[error("invalid table name {name:?}: {reason} (a table name is 1..=128 ASCII letters, digits, '_' or '-', starting with a letter or digit)")]
    InvalidName {
        /// The name given.
        name: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// A table prefix broke the key rules.
    #[error("invalid table prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The prefix given.
        prefix: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// The table exists with another definition.
    #[error("table {name:?} already exists with prefix {existing:?} and format {format}; pick another name")]
    Exists {
        /// The table.
        name: String,
        /// Its prefix.
        existing: String,
        /// Its format.
        format: TableFormat,
    },
    /// No table of that name.
    #[error("no table {name:?} in this store; create it with `table create` (existing: {known})")]
    NotFound {
        /// The name asked for.
        name: String,
        /// The tables that exist, comma-separated.
        known: String,
    },
    /// A table's files are damaged or were written by someone else.
    #[error("table {name:?} is damaged at {path}: {detail}; nothing more was published")]
    Damaged {
        /// The table.
        name: String,
        /// The damaged file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A committed unit cannot be published: its key, its object or its schema does not fit.
    #[error("table {table:?} cannot publish unit {unit:?} (seq {seq}): {reason}; versions before seq {seq} are published, nothing of it — commit a correction of the unit to continue")]
    BadUnit {
        /// The table.
        table: String,
        /// The unit.
        unit: String,
        /// The commit that made its entry visible.
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// A unit key under the table's prefix has no (or other) Hive-style partition segments.
    #[error("table {table:?} cannot publish unit {unit:?} (seq {seq}): its partition segments are ({found}) but the table's partition columns are ({expected}); commit units under the table's prefix as {}", key_shape(expected))]
    BadPartitions {
        /// The table.
        table: String,
        /// The unit.
        unit: String,
        /// The commit that made its entry visible.
        seq: u64,
        /// Its partition columns, comma-separated.
        found: String,
        /// The table's partition columns, comma-separated.
        expected: String,
    },
    /// Copying a table's versions into the shared lake (SPEC R21, R23) failed or was refused;
    /// the node's own copy under its directory is complete.
    #[error("table {name:?}: publishing into the lake {url} failed: {detail}; {todo}")]
    LakeTable {
        /// The table.
        name: String,
        /// The lake.
        url: String,
        /// What failed.
        detail: String,
        /// What to do.
        todo: &'static str,
    },
}

/// `d, r` → `d=.../r=.../NAME`; no columns → `NAME` (no k=v segments).
fn key_shape(columns: &str) -> String {
    if columns.is_empty() {
        return "NAME without k=v segments".into();
    }
    let segs: Vec<String> = columns.split(", ").map(|c| format!("{c}=...")).collect();
    format!("{}/NAME", segs.join("/"))
}

/// The table API's result type.
pub type TableResult<T> = std::result::Result<T, TableError>;

/// Whose versions a table's Delta log says they are: the `<owner>` in the `txn` appId
/// `oncelake:<owner>:<table>` and the seed of the table id. A local store's tables are its own
/// (its store id); on a lake node (SPEC R23) a table is the lake's (`lake`), so every node builds
/// the same bytes for the same version and any node may publish the next one.
#[cfg(feature = "tables")]
pub(crate) fn owner(store: &crate::store::Store) -> String {
    #[cfg(feature = "lake")]
    if store.core().lake.is_some() {
        return "lake".into();
    }
    store.core().store_id.to_string()
}

pub(crate) fn io_err(context: impl Into<String>, e: std::io::Error) -> TableError {
    TableError::Store(crate::Error::io(context, e))
}
