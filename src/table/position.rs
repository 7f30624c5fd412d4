//! How far a table is published, read from the table's own Delta log: the newest version file
//! `_delta_log/<20 digits>.json` and the `txn` action oncelake writes as its first line
//! (`{"txn":{"appId":"oncelake:<store id>:<table>","version":<last seq>,...}}`).
//!
//! The log is the truth readers see, so the position is never kept anywhere else: a publish cut
//! short at any point resumes from exactly what was made visible. This reads only lines oncelake
//! writes itself, so the core needs no JSON library.

use super::{io_err, TableError, TableResult};
use std::path::{Path, PathBuf};

/// The log directory of a Delta table.
pub const DELTA_LOG: &str = "_delta_log";

/// A table's published position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// The newest Delta version (`None`: nothing published yet).
    pub version: Option<u64>,
    /// The last store seq the newest version includes (0: nothing published yet).
    pub seq: u64,
}

/// The file name of a Delta commit.
pub fn commit_file(version: u64) -> String {
    format!("{version:020}.json")
}

/// The newest committed version in `log_dir` (`None` when there is none).
pub fn newest_version(log_dir: &Path) -> TableResult<Option<u64>> {
    let rd = match std::fs::read_dir(log_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(format!("list {}", log_dir.display()), e)),
    };
    let mut newest = None;
    for ent in rd {
        let ent = ent.map_err(|e| io_err(format!("list {}", log_dir.display()), e))?;
        let name = ent.file_name();
        let Some(v) = name.to_str().and_then(version_of) else {
            continue;
        };
        newest = newest.max(Some(v));
    }
    Ok(newest)
}

fn version_of(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Where table `name` (directory `table_dir`) is published to.
pub fn published(name: &str, table_dir: &Path) -> TableResult<Position> {
    let log_dir = table_dir.join(DELTA_LOG);
    let Some(version) = newest_version(&log_dir)? else {
        return Ok(Position::default());
    };
    let path = log_dir.join(commit_file(version));
    let seq = txn_seq_of(name, &path)?;
    Ok(Position {
        version: Some(version),
        seq,
    })
}

/// The `txn` version (store seq) of one commit file written by oncelake.
pub fn txn_seq_of(name: &str, path: &Path) -> TableResult<u64> {
    let text = std::fs::read(path).map_err(|e| io_err(format!("read {}", path.display()), e))?;
    let first = text.split(|&b| b == b'\n').next().unwrap_or_default();
    parse_txn_version(first).ok_or_else(|| damaged(name, path.to_path_buf()))
}

fn damaged(name: &str, path: PathBuf) -> TableError {
    TableError::Damaged {
        name: name.to_string(),
        path,
        detail: "the newest log file does not start with oncelake's txn action; another writer \
                 changed the table — publish it under a new table name"
            .into(),
    }
}

/// `{"txn":{"appId":"...","version":N,...}}` → N.
fn parse_txn_version(line: &[u8]) -> Option<u64> {
    let line = std::str::from_utf8(line).ok()?;
    let rest = line.strip_prefix("{\"txn\":{\"appId\":\"oncelake:")?;
    let (_, after) = rest.split_once("\",\"version\":")?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txn_lines_and_version_names() {
        assert_eq!(
            parse_txn_version(br#"{"txn":{"appId":"oncelake:12:t","version":42,"lastUpdated":1}}"#),
            Some(42)
        );
        assert_eq!(parse_txn_version(br#"{"commitInfo":{}}"#), None);
        assert_eq!(version_of("00000000000000000012.json"), Some(12));
        assert_eq!(version_of("00000000000000000012.checkpoint.parquet"), None);
        assert_eq!(version_of("_last_checkpoint"), None);
        assert_eq!(commit_file(7), "00000000000000000007.json");
    }
}
