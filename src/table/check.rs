//! What `verify` checks in the tables: every data file is a link to the object its name says
//! (the same file as the store's object, or, once GC collected that, bytes that hash to the name
//! when checked deeply), every published current entry has its link, and files that are neither
//! data files nor Delta's own (`_delta_log`, names starting with `_` or `.`) are reported as
//! stray.

use super::layout::{data_file, object_of_file_name, partition_of};
use super::position::published;
use super::{io_err, TableError, TableResult};
use crate::store::Store;
use std::path::{Path, PathBuf};

/// A data file that is not what it should be.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LinkProblem {
    /// The table.
    pub table: String,
    /// The data file.
    #[cfg_attr(feature = "serde", serde(with = "crate::text::path_text"))]
    pub path: PathBuf,
    /// What is wrong.
    pub detail: String,
}

/// What the tables check found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TableCheck {
    /// Tables checked.
    pub tables: u64,
    /// Data files checked.
    pub links_checked: u64,
    /// Data files whose store object is gone (collected); their bytes were hashed when deep.
    pub links_sole_copy: u64,
    /// Wrong or missing links: data the tables serve is not what the manifest says.
    pub problems: Vec<LinkProblem>,
    /// Files in a table directory that are neither data files nor Delta's (harmless to the
    /// store; Delta's VACUUM may remove them).
    #[cfg_attr(feature = "serde", serde(with = "crate::text::path_text::list"))]
    pub stray: Vec<PathBuf>,
}

/// Checks every table of `store` for `verify`: a table that cannot be read is one problem of
/// the report, not a failed verify; only the store failing underneath is an error.
pub(crate) fn verify_tables(store: &Store, deep: bool) -> crate::Result<TableCheck> {
    let mut out = TableCheck::default();
    let defs = match store.tables() {
        Ok(d) => d,
        Err(TableError::Store(e)) => return Err(e),
        Err(e) => {
            out.problems.push(LinkProblem {
                table: String::new(),
                path: store.path().join(super::TABLES_DIR),
                detail: e.to_string(),
            });
            return Ok(out);
        }
    };
    for def in defs {
        out.tables += 1;
        let root = store.table_dir(&def.name);
        let checked = walk(store, &def.name, &root, &root, deep, &mut out)
            .and_then(|()| check_current_links(store, &def, &root, &mut out));
        match checked {
            Ok(()) => {}
            Err(TableError::Store(e)) => return Err(e),
            Err(e) => out.problems.push(LinkProblem {
                table: def.name.clone(),
                path: root,
                detail: e.to_string(),
            }),
        }
    }
    Ok(out)
}

fn walk(
    store: &Store,
    table: &str,
    root: &Path,
    dir: &Path,
    deep: bool,
    out: &mut TableCheck,
) -> TableResult<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| io_err(format!("list {}", dir.display()), e))?;
    let mut entries = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| io_err(format!("list {}", dir.display()), e))?;
        entries.push(ent.path());
    }
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if dir == root && (name.starts_with('_') || name.starts_with('.')) {
            continue; // _delta_log, the definition, Delta's and our temporary files
        }
        if path.is_dir() {
            walk(store, table, root, &path, deep, out)?;
            continue;
        }
        match object_of_file_name(name) {
            None => out.stray.push(path),
            Some(id) => {
                out.links_checked += 1;
                check_link(store, table, &path, &id, deep, out)?;
            }
        }
    }
    Ok(())
}

fn check_link(
    store: &Store,
    table: &str,
    path: &Path,
    id: &crate::ObjectId,
    deep: bool,
    out: &mut TableCheck,
) -> TableResult<()> {
    let object = store.object_path(id);
    let same = match (std::fs::metadata(path), std::fs::metadata(&object)) {
        (Ok(a), Ok(b)) => Some(same_file(&a, &b)),
        (Ok(_), Err(_)) => None,
        (Err(e), _) => return Err(io_err(format!("stat {}", path.display()), e)),
    };
    if same == Some(true) && !deep {
        return Ok(());
    }
    if same.is_none() {
        out.links_sole_copy += 1;
        if !deep {
            return Ok(());
        }
    }
    let bytes = std::fs::read(path).map_err(|e| io_err(format!("read {}", path.display()), e))?;
    if crate::ObjectId::of(&bytes) != *id {
        out.problems.push(LinkProblem {
            table: table.to_string(),
            path: path.to_path_buf(),
            detail: format!(
                "its bytes are not object {id} its name says; restore the link from objects/{}",
                id.rel_path()
            ),
        });
    }
    Ok(())
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.len() == b.len()
}

/// Every current entry the table's log says is published has its data file.
fn check_current_links(
    store: &Store,
    def: &super::TableDef,
    root: &Path,
    out: &mut TableCheck,
) -> TableResult<()> {
    let pos = published(&def.name, root)?;
    if pos.version.is_none() {
        return Ok(());
    }
    let snap = store.snapshot()?;
    for entry in snap.prefix(&def.prefix)? {
        let entry = entry?;
        if entry.seq > pos.seq {
            continue;
        }
        let Some(part) = partition_of(&def.prefix, &entry.unit) else {
            continue;
        };
        let path = root.join(data_file(&part, &entry.unit, &entry.object.id));
        if !path.exists() {
            out.problems.push(LinkProblem {
                table: def.name.clone(),
                path,
                detail: format!(
                    "the published data file of unit {:?} (seq {}) is missing; republish the \
                     table under a new name to rebuild it",
                    entry.unit, entry.seq
                ),
            });
        }
    }
    Ok(())
}

/// The objects of entries some table has yet to publish (after its published seq, under its
/// prefix): GC keeps them whatever the retention, so every commit reaches the tables' versions.
/// A table whose position cannot be read keeps everything under its prefix.
pub(crate) fn unpublished_objects(store: &Store) -> crate::Result<Vec<crate::ObjectId>> {
    let defs = match store.tables() {
        Ok(d) => d,
        Err(TableError::Store(e)) => return Err(e),
        // Not knowing what the tables need, collect nothing rather than something they need.
        Err(e) => {
            return Err(crate::Error::Corrupt {
                path: store.path().join(super::TABLES_DIR),
                detail: format!("GC cannot tell what the lake tables need: {e}"),
            })
        }
    };
    let mut out = Vec::new();
    if defs.is_empty() {
        return Ok(out);
    }
    let snap = store.snapshot()?;
    for def in defs {
        let from = match published(&def.name, &store.table_dir(&def.name)) {
            Ok(p) => p.seq,
            Err(TableError::Store(e)) => return Err(e),
            Err(_) => 0,
        };
        for rec in snap.changes_since(from)? {
            if let crate::schema::log::RecordBody::Commit { entries } = rec?.body {
                out.extend(
                    entries
                        .iter()
                        .filter(|e| def.contains(&e.unit))
                        .map(|e| e.object.id),
                );
            }
        }
    }
    Ok(out)
}
