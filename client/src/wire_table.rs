//! The requests of the lake-table calls (`oncelake table ...` through a server). Their answers
//! are the engine's own types, [`oncelake::table::TableStatus`] and
//! [`oncelake::table::PublishReport`] (serialised through its `serde` feature, outside its
//! `tables` feature, so client-only builds carry no Parquet code).

use serde::{Deserialize, Serialize};

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
