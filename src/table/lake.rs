//! Lake tables on a lake node (SPEC R21, R23): after a node publishes a table into its own
//! directory, the new versions are copied into `<lake>/tables/<name>/` through the lake's object
//! store, so delta-rs and DuckDB read the table from S3 (or the shared directory) itself.
//!
//! Per version, in order: the data files it adds (named by their object's hash, so an upload is
//! idempotent), then its log file `_delta_log/<v>.json` created with put-if-absent — Delta's own
//! rule for writers, so a reader never sees a version whose files are missing, and two writers
//! can never both write version `v`. A create answered "exists" is read back: the same bytes are
//! this node's own earlier copy (a publish cut short, a lost response); other bytes are another
//! node's table, and the copy stops with [`TableError::LakeTable`] without touching the lake's
//! log. A table in the lake has one publishing node: the versions carry the node's `txn` appId
//! (`oncelake:<store id>:<table>`), so another node's versions differ and are refused. The
//! checkpoints follow their version (plain puts: a reader that misses one reads the JSON), and
//! the node remembers the newest version it copied (`_oncelake_lake_version`, a hint only:
//! without it, versions are copied again and found already there).

use super::position::{commit_file, DELTA_LOG};
use super::{io_err, TableError, TableResult};
use crate::lake::Lake;
use crate::store::Store;
use object_store::path::Path as LakePath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

/// The node's hint of the newest version it copied into the lake, in the table's directory.
const COPIED: &str = "_oncelake_lake_version";
/// The lake's directory of tables.
const LAKE_TABLES: &str = "tables";

/// Copies table `name`'s versions the lake lacks into it; returns how many were copied. Does
/// nothing on a store that is not a lake node.
pub(super) fn copy_to_lake(store: &Store, name: &str) -> TableResult<u64> {
    let Some(lake) = store.core().lake.clone() else {
        return Ok(0);
    };
    let dir = store.table_dir(name);
    let first = std::fs::read_to_string(dir.join(COPIED))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(0, |v| v + 1);
    let mut copied = 0;
    let mut v = first;
    loop {
        let json = match std::fs::read(dir.join(DELTA_LOG).join(commit_file(v))) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(io_err(format!("read version {v} of table {name}"), e)),
        };
        for file in added_files(&json) {
            let bytes = std::fs::read(dir.join(&file))
                .map_err(|e| io_err(format!("read {file} of table {name}"), e))?;
            put(&lake, name, &file, bytes, false)?;
        }
        put(
            &lake,
            name,
            &format!("{DELTA_LOG}/{}", commit_file(v)),
            json,
            true,
        )?;
        let checkpoint = format!("{v:020}.checkpoint.parquet");
        if let Ok(bytes) = std::fs::read(dir.join(DELTA_LOG).join(&checkpoint)) {
            put(
                &lake,
                name,
                &format!("{DELTA_LOG}/{checkpoint}"),
                bytes,
                false,
            )?;
            if let Ok(last) = std::fs::read(dir.join(DELTA_LOG).join("_last_checkpoint")) {
                put(
                    &lake,
                    name,
                    &format!("{DELTA_LOG}/_last_checkpoint"),
                    last,
                    false,
                )?;
            }
        }
        // A hint: lost, the versions are copied again and found identical.
        let _ = std::fs::write(dir.join(COPIED), v.to_string());
        copied += 1;
        v += 1;
    }
    Ok(copied)
}

/// On a lake node, fetches into `objects/` the objects of `commits` this node has not read yet
/// (it applies other nodes' segments without fetching them), so the publisher finds every data
/// file it links. Returns the handles that pin them until the publish ends; an object the lake
/// no longer holds is left for the publisher to report as missing, as on any store.
pub(super) fn fetch_objects(
    store: &Store,
    commits: &[(u64, u64, Vec<crate::log::LogEntry>)],
) -> TableResult<Vec<crate::stage::Staged>> {
    let Some(lake) = store.core().lake.clone() else {
        return Ok(Vec::new());
    };
    let stager = &store.core().stager;
    let mut seen = std::collections::HashSet::new();
    let wanted: Vec<_> = commits
        .iter()
        .flat_map(|(seq, _, es)| es.iter().map(move |e| (e.object, *seq)))
        .filter(|(m, _)| seen.insert(m.id) && !stager.object_path(&m.id).exists())
        .collect();
    Ok(lake.fetch_all_if_present(&wanted, stager)?)
}

/// The relative paths of the data files a version's log adds (`add.path`, percent-decoded).
fn added_files(json: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(json)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|a| a["add"]["path"].as_str().map(percent_decode))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Puts `tables/<name>/<rel>` in the lake; `create`: put-if-absent, an existing object with the
/// same bytes accepted, other bytes refused.
fn put(lake: &Lake, name: &str, rel: &str, bytes: Vec<u8>, create: bool) -> TableResult<()> {
    let path = LakePath::from(format!("{LAKE_TABLES}/{name}/{rel}"));
    let store: &dyn ObjectStore = lake.object_store().as_ref();
    let failed = |detail: String| TableError::LakeTable {
        name: name.to_string(),
        url: lake.url.clone(),
        detail: format!("{rel}: {detail}"),
        todo: "check the lake is reachable and publish again (what is copied stays)",
    };
    let mode = if create {
        PutMode::Create
    } else {
        PutMode::Overwrite
    };
    let opts = PutOptions {
        mode,
        ..PutOptions::default()
    };
    let payload = PutPayload::from(bytes.clone());
    match lake.block_on(store.put_opts(&path, payload, opts)) {
        Ok(_) => Ok(()),
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) if create => {
            let there = lake
                .block_on(async {
                    store
                        .get_opts(&path, Default::default())
                        .await?
                        .bytes()
                        .await
                })
                .map_err(|e| failed(e.to_string()))?;
            if there.as_ref() == bytes.as_slice() {
                return Ok(());
            }
            Err(TableError::LakeTable {
                name: name.to_string(),
                url: lake.url.clone(),
                detail: format!(
                    "{rel} exists in the lake with other bytes: another node publishes this table"
                ),
                todo: "publish a lake table from one node (the one that published its first \
                       version); this node's own copy under its directory is complete",
            })
        }
        Err(e) => Err(failed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_paths_are_percent_decoded_and_other_actions_ignored() {
        let json = b"{\"commitInfo\":{}}\n{\"add\":{\"path\":\"d=a%20b/x.parquet\"}}\n\
                     {\"remove\":{\"path\":\"y.parquet\"}}\n{\"add\":{\"path\":\"z%2\"}}\n";
        assert_eq!(added_files(json), vec!["d=a b/x.parquet", "z%2"]);
    }
}
