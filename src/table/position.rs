//! How far a table is published, read from the table's own Delta log: the newest version file
//! `_delta_log/<20 digits>.json` and the `txn` action oncelake writes as its first line
//! (`{"txn":{"appId":"oncelake:<store id>:<table>","version":<last seq>,...}}`).
//!
//! The log is the truth readers see, so the position is never kept anywhere else: a publish cut
//! short at any point resumes from exactly what was made visible. This reads only lines oncelake
//! writes itself, so the core needs no JSON library.
//!
//! Delta's own VACUUM (delta-rs) appends versions that hold nothing but a `commitInfo` action
//! (`VACUUM START`, `VACUUM END`): they change no data, so the position skips back over them to
//! oncelake's newest version for the seq, and the next version goes after them. Any other
//! version without oncelake's txn means another writer changed the table's data: damage.

use super::{io_err, TableError, TableResult};
use std::path::{Path, PathBuf};

/// The log directory of a Delta table.
pub const DELTA_LOG: &str = "_delta_log";

/// A table's published position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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
    let (_, seq) = newest_oncelake_txn(name, &log_dir, version)?;
    Ok(Position {
        version: Some(version),
        seq,
    })
}

/// The newest version at or before `version` that carries oncelake's txn, and that txn's seq,
/// stepping back over versions that hold only `commitInfo` (Delta's VACUUM writes those).
pub fn newest_oncelake_txn(name: &str, log_dir: &Path, version: u64) -> TableResult<(u64, u64)> {
    let mut v = version;
    loop {
        let path = log_dir.join(commit_file(v));
        match read_commit(&path)? {
            CommitKind::Oncelake(seq) => return Ok((v, seq)),
            CommitKind::InfoOnly if v > 0 => v -= 1,
            _ => return Err(damaged(name, path)),
        }
    }
}

/// The `txn` version (store seq) of one commit file written by oncelake.
pub fn txn_seq_of(name: &str, path: &Path) -> TableResult<u64> {
    match read_commit(path)? {
        CommitKind::Oncelake(seq) => Ok(seq),
        _ => Err(damaged(name, path.to_path_buf())),
    }
}

/// What a commit file is, as far as the position cares.
enum CommitKind {
    /// oncelake's: its txn version.
    Oncelake(u64),
    /// Only `commitInfo` lines: no data changed (Delta's VACUUM START / END).
    InfoOnly,
    /// Anything else.
    Foreign,
}

fn read_commit(path: &Path) -> TableResult<CommitKind> {
    let text = std::fs::read(path).map_err(|e| io_err(format!("read {}", path.display()), e))?;
    let mut lines = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .peekable();
    if let Some(seq) = lines.peek().and_then(|first| parse_txn_version(first)) {
        return Ok(CommitKind::Oncelake(seq));
    }
    // Delta writes one action per line, so a line starting with this key is a commitInfo action.
    let mut info_only = lines.peek().is_some();
    for line in lines {
        info_only &= line.starts_with(b"{\"commitInfo\":");
    }
    Ok(if info_only {
        CommitKind::InfoOnly
    } else {
        CommitKind::Foreign
    })
}

fn damaged(name: &str, path: PathBuf) -> TableError {
    TableError::Damaged {
        name: name.to_string(),
        path,
        detail: "the log file neither starts with oncelake's txn action nor holds only \
                 commitInfo (as Delta's VACUUM writes); another writer changed the table's data — \
                 publish it under a new table name"
            .into(),
    }
}

/// The `txn` version (store seq) of a commit file's bytes, if oncelake wrote it (its first
/// line is oncelake's txn action).
pub fn txn_seq_in(bytes: &[u8]) -> Option<u64> {
    bytes
        .split(|&b| b == b'\n')
        .find(|l| !l.is_empty())
        .and_then(parse_txn_version)
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

    #[test]
    fn the_position_steps_back_over_vacuum_versions_only() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join(DELTA_LOG);
        std::fs::create_dir_all(&log).unwrap();
        let write = |v: u64, text: &str| std::fs::write(log.join(commit_file(v)), text).unwrap();
        write(0, "{\"txn\":{\"appId\":\"oncelake:1:t\",\"version\":7,\"lastUpdated\":1}}\n{\"add\":{}}\n");
        write(1, "{\"commitInfo\":{\"operation\":\"VACUUM START\"}}\n");
        write(2, "{\"commitInfo\":{\"operation\":\"VACUUM END\"}}\n");
        let pos = published("t", dir.path()).unwrap();
        assert_eq!((pos.version, pos.seq), (Some(2), 7));
        // A version that changes data without oncelake's txn is another writer's: damage.
        write(3, "{\"commitInfo\":{}}\n{\"add\":{\"path\":\"x\"}}\n");
        assert!(matches!(
            published("t", dir.path()),
            Err(TableError::Damaged { .. })
        ));
        write(3, "");
        assert!(matches!(
            published("t", dir.path()),
            Err(TableError::Damaged { .. })
        ));
    }
}
