//! A table's definition: its name, the unit prefix it publishes and its format, and how the
//! definition file `_oncelake_table` spells them. The registry (a store's own tables) and a
//! lake's definitions both store this one record.

use super::{TableError, TableResult};
use std::fmt;

/// The definition file inside a table's directory.
pub const DEF_FILE: &str = "_oncelake_table";
const DEF_HEADER: &str = "oncelake-table 1";

/// The open table format a table is published in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum TableFormat {
    /// Delta Lake (protocol reader 1, writer 2).
    #[default]
    Delta,
}

impl fmt::Display for TableFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TableFormat::Delta => "delta",
        })
    }
}

impl std::str::FromStr for TableFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "delta" => Ok(TableFormat::Delta),
            other => Err(format!(
                "unknown table format {other:?}; the supported format is delta"
            )),
        }
    }
}

/// A table: which units it publishes, and how. With the `serde` feature: `table`, `format`,
/// `prefix` (the order of the HTTP API's JSON).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TableDef {
    /// Its name (the directory under `tables/`).
    #[cfg_attr(feature = "serde", serde(rename = "table"))]
    pub name: String,
    /// Its format.
    pub format: TableFormat,
    /// The unit-key prefix it publishes: empty (every unit) or ending in `/`.
    pub prefix: String,
}

impl TableDef {
    /// Whether a unit belongs to the table.
    pub fn contains(&self, unit: &str) -> bool {
        unit.starts_with(&self.prefix)
    }

    pub(crate) fn encode(&self) -> String {
        format!(
            "{DEF_HEADER}\nformat {}\nprefix {}\n",
            self.format, self.prefix
        )
    }

    pub(crate) fn decode(name: &str, text: &str) -> Option<TableDef> {
        let mut lines = text.strip_suffix('\n')?.split('\n');
        if lines.next()? != DEF_HEADER {
            return None;
        }
        let format = lines.next()?.strip_prefix("format ")?.parse().ok()?;
        let prefix = lines.next()?.strip_prefix("prefix ")?.to_string();
        if lines.next().is_some() {
            return None;
        }
        Some(TableDef {
            name: name.to_string(),
            prefix,
            format,
        })
    }
}

/// Checks a table name: it becomes a directory name and part of the Delta `txn` appId.
pub fn validate_name(name: &str) -> TableResult<()> {
    let bad = |reason| TableError::InvalidName {
        name: name.chars().take(140).collect(),
        reason,
    };
    if name.is_empty() || name.len() > 128 {
        return Err(bad("it must be 1..=128 characters"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(bad("it must start with a letter or digit"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(bad("it may only hold ASCII letters, digits, '_' and '-'"));
    }
    Ok(())
}

/// Normalises a prefix: empty stays empty (every unit); otherwise it must be a valid key start
/// and is made to end in `/`, so `sales` does not also publish `salesforce/...`.
pub fn normalize_prefix(prefix: &str) -> TableResult<String> {
    let bad = |reason| TableError::InvalidPrefix {
        prefix: prefix.chars().take(140).collect(),
        reason,
    };
    if prefix.chars().any(char::is_control) {
        return Err(bad("it may not hold control characters"));
    }
    if prefix.len() > crate::MAX_KEY_LEN {
        return Err(bad("it is longer than a unit key may be"));
    }
    if prefix.is_empty() || prefix.ends_with('/') {
        Ok(prefix.to_string())
    } else {
        Ok(format!("{prefix}/"))
    }
}
