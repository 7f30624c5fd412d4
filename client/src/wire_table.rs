//! Wire forms of the lake-table calls (`oncelake table ...` through a server): a table with how
//! far it is published, and a publish report. Client-only builds have them too.

use serde::{Deserialize, Serialize};

/// A table and how far it is published.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TableW {
    /// The table's name.
    pub table: String,
    /// Its format (`delta`).
    pub format: String,
    /// The unit-key prefix it publishes.
    pub prefix: String,
    /// Its directory (on the server's machine).
    pub path: String,
    /// Its newest version, if anything is published.
    pub version: Option<u64>,
    /// The last store seq published.
    pub seq: u64,
}

/// An entry a publish left out: unpublishable and superseded.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SkippedW {
    /// The unit.
    pub unit: String,
    /// The commit that made the left-out entry visible.
    pub seq: u64,
}

/// What a publish of one table did (the fields of `oncelake::table::PublishReport`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PublishW {
    /// The table.
    pub table: String,
    /// The `txn` appId of its versions.
    pub app_id: String,
    /// Versions written by this publish.
    pub versions: u64,
    /// Data files added.
    pub adds: u64,
    /// Data files removed.
    pub removes: u64,
    /// Entries left out.
    pub skipped: Vec<SkippedW>,
    /// The newest version after the publish.
    pub version: Option<u64>,
    /// The last store seq it includes.
    pub seq: u64,
}

/// `POST /v1/table/create`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CreateReqW {
    /// The table's name.
    pub name: String,
    /// The unit-key prefix.
    pub prefix: String,
    /// The format (`delta`).
    #[serde(default = "delta")]
    pub format: String,
}

fn delta() -> String {
    "delta".into()
}

/// `POST /v1/table/publish`: one table, or every table when `name` is absent.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PublishReqW {
    /// The table (default: every table).
    pub name: Option<String>,
}
