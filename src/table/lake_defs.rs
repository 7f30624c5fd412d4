//! Table definitions on a lake node (SPEC R23): a table is the lake's, not a node's. Its
//! definition is `<lake>/tables/NAME/_oncelake_table`, created with put-if-absent (the same
//! bytes as one there already are the same table; other bytes are another table of that name),
//! and every node lists and reads the lake's definitions. A node caches a definition it read in
//! its own `tables/NAME/_oncelake_table`: definitions never change, so the cache cannot go stale.

use super::def::{TableDef, DEF_FILE};
use super::position::{commit_file, txn_seq_in, Position, DELTA_LOG};
use super::{TableError, TableResult, TABLES_DIR};
use crate::lake::log::Published;
use crate::lake::Lake;
use object_store::path::Path as LakePath;
use object_store::ObjectStore;

fn def_path(name: &str) -> LakePath {
    LakePath::from(format!("{TABLES_DIR}/{name}/{DEF_FILE}"))
}

/// Creates `def` in the lake unless a definition of its name is there; returns the lake's
/// definition of the name (`def` itself, or the one that was there first).
pub(super) fn create(lake: &Lake, def: &TableDef) -> TableResult<TableDef> {
    let what = format!("the definition of table {}", def.name);
    match lake.create_once(&def_path(&def.name), def.encode().as_bytes(), &what)? {
        Published::Won => Ok(def.clone()),
        Published::Lost(found) => decode(lake, &def.name, &found),
    }
}

/// The lake's definition of table `name`, if it has one.
pub(super) fn read(lake: &Lake, name: &str) -> TableResult<Option<TableDef>> {
    let what = format!("the definition of table {name}");
    match lake.read_if_present(&def_path(name), &what)? {
        Some(bytes) => decode(lake, name, &bytes).map(Some),
        None => Ok(None),
    }
}

/// The names of the lake's table directories (a directory without a definition, if one
/// exists, is found out when its definition is read).
pub(super) fn names(lake: &Lake) -> TableResult<Vec<String>> {
    let store: &dyn ObjectStore = lake.object_store().as_ref();
    let prefix = LakePath::from(TABLES_DIR);
    let listed = lake
        .block_on(store.list_with_delimiter(Some(&prefix)))
        .map_err(|e| TableError::LakeTable {
            name: String::new(),
            url: lake.url.clone(),
            detail: format!("listing {TABLES_DIR}/: {e}"),
            todo: "check the lake is reachable and run the command again",
        })?;
    Ok(listed
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_string))
        .collect())
}

/// The position of the lake's table `name`, given the node's copy is at `local`: the versions
/// after `local` the lake holds are read one by one (a version Delta's VACUUM wrote, without
/// oncelake's txn, keeps the seq before it).
pub(super) fn lake_position(lake: &Lake, name: &str, local: Position) -> TableResult<Position> {
    let mut pos = local;
    let mut v = local.version.map_or(0, |v| v + 1);
    loop {
        let rel = format!("{DELTA_LOG}/{}", commit_file(v));
        let path = LakePath::from(format!("{TABLES_DIR}/{name}/{rel}"));
        let Some(bytes) = lake.read_if_present(&path, &format!("{rel} of table {name}"))? else {
            return Ok(pos);
        };
        pos = Position {
            version: Some(v),
            seq: txn_seq_in(&bytes).unwrap_or(pos.seq),
        };
        v += 1;
    }
}

fn decode(lake: &Lake, name: &str, bytes: &[u8]) -> TableResult<TableDef> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|t| TableDef::decode(name, t))
        .ok_or_else(|| TableError::LakeTable {
            name: name.to_string(),
            url: lake.url.clone(),
            detail: format!("{TABLES_DIR}/{name}/{DEF_FILE} in the lake is unreadable"),
            todo: "restore the definition in the lake from a node's own copy \
                   (tables/NAME/_oncelake_table in its directory), or use another table name",
        })
}
