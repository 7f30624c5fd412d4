//! What the table calls answer: a table with how far it is published, and what a publish did.
//! Plain data outside the `tables` feature, so a program that only talks to a server (the client,
//! the Python binding) has the same types without the Parquet publisher. With the `serde` feature
//! they are the JSON of the HTTP API's `/v1/table/*` calls and of `oncelake table ... --json`.

use super::position::Position;
use super::{TableDef, TableResult};
use crate::store::Store;
use std::path::PathBuf;

/// A table and how far it is published (`oncelake table create|ls`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TableStatus {
    /// Its definition: `table`, `format`, `prefix` on the wire.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub def: TableDef,
    /// Its directory (on the machine of the store that holds it).
    #[cfg_attr(feature = "serde", serde(with = "crate::text::path_text"))]
    pub path: PathBuf,
    /// How far it is published: `version` and `seq` on the wire.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub position: Position,
}

/// An entry a publish left out: its object could not be published and a later entry of the unit
/// supersedes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Skipped {
    /// The unit.
    pub unit: String,
    /// The commit that made the left-out entry visible.
    pub seq: u64,
}

/// What one publish did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PublishReport {
    /// The table.
    pub table: String,
    /// The `txn` appId its versions carry (`oncelake:<store id>:<table>`).
    pub app_id: String,
    /// Versions written by this publish.
    pub versions: u64,
    /// Data files added and removed by them.
    pub adds: u64,
    /// Data files removed.
    pub removes: u64,
    /// Entries left out because their object could not be published and a later entry of the
    /// unit supersedes it.
    pub skipped: Vec<Skipped>,
    /// The table's newest version after the publish (`None`: nothing published yet).
    pub version: Option<u64>,
    /// The last store seq it includes.
    pub seq: u64,
}

impl Store {
    /// Table `def` with its directory and where it is published to ([`Store::table_position`]).
    pub fn table_status(&self, def: &TableDef) -> TableResult<TableStatus> {
        Ok(TableStatus {
            def: def.clone(),
            path: self.table_dir(&def.name),
            position: self.table_position(&def.name)?,
        })
    }
}
