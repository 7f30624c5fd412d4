//! The table registry: one definition file per table, `tables/NAME/_oncelake_table`.
//!
//! A definition is written once (temporary file, fsync, no-replace link, directory fsync) and
//! never changed, so a crash leaves either no table or a whole one. It holds only what the user
//! chose (name, prefix, format); how far a table is published is read from the table's own log
//! (see [`super::position`]), which is the truth readers see. The leading `_` hides the file
//! from Delta readers and from Delta's VACUUM.

use super::{io_err, TableError, TableResult, TABLES_DIR};
use crate::store::Store;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use super::def::{normalize_prefix, validate_name, TableDef, TableFormat, DEF_FILE};

impl Store {
    /// The directory of table `name` (whether or not it exists).
    pub fn table_dir(&self, name: &str) -> PathBuf {
        self.path().join(TABLES_DIR).join(name)
    }

    /// Defines table `name` publishing the units under `prefix` in `format`. Creating the same
    /// definition again is a no-op that returns it; another definition under the name is
    /// [`TableError::Exists`]. Nothing is published until `Store::publish_table` (or an
    /// `AutoPublisher`) runs. On a lake node the definition is the lake's
    /// (created there with put-if-absent, then cached in the node's directory), so every node
    /// of the lake has the table.
    pub fn create_table(
        &self,
        name: &str,
        prefix: &str,
        format: TableFormat,
    ) -> TableResult<TableDef> {
        validate_name(name)?;
        let def = TableDef {
            name: name.to_string(),
            prefix: normalize_prefix(prefix)?,
            format,
        };
        #[cfg(feature = "lake")]
        if let Some(lake) = &self.core().lake {
            let there = super::lake_defs::create(lake, &def)?;
            if there != def {
                return Err(exists(there));
            }
        }
        if !self.write_definition(&def)? {
            let existing = self.table(name)?;
            if existing != def {
                return Err(exists(existing));
            }
        }
        Ok(def)
    }

    /// Writes `def` into the table's directory unless a definition is there already; `false`
    /// when one was. Atomic and durable: a crash leaves no definition or a whole one.
    fn write_definition(&self, def: &TableDef) -> TableResult<bool> {
        let vfs = &self.core().vfs();
        let dir = self.table_dir(&def.name);
        vfs.create_dir_all(&dir)
            .map_err(|e| io_err(format!("create {}", dir.display()), e))?;
        let tmp = dir.join(format!(".{DEF_FILE}.{}.tmp", std::process::id()));
        let _ = vfs.remove(&tmp);
        write_synced(vfs.as_ref(), &tmp, def.encode().as_bytes())?;
        let linked = vfs.link_no_replace(&tmp, &dir.join(DEF_FILE));
        let _ = vfs.remove(&tmp);
        let linked = linked.map_err(|e| io_err(format!("publish {}", dir.display()), e))?;
        vfs.sync_dir(&dir)
            .map_err(|e| io_err(format!("sync {}", dir.display()), e))?;
        if let Some(parent) = dir.parent() {
            vfs.sync_dir(parent)
                .map_err(|e| io_err(format!("sync {}", parent.display()), e))?;
        }
        Ok(linked)
    }

    /// Every table of the store, by name. Directories under `tables/` without a definition
    /// (a creation cut short before its definition was published) are not tables.
    /// On a lake node, the lake's tables.
    pub fn tables(&self) -> TableResult<Vec<TableDef>> {
        #[cfg(feature = "lake")]
        if let Some(lake) = &self.core().lake {
            let mut out = Vec::new();
            for name in super::lake_defs::names(lake)? {
                if validate_name(&name).is_err() {
                    continue;
                }
                out.extend(self.cached_or_lake(lake, &name)?);
            }
            out.sort_by(|a, b| a.name.cmp(&b.name));
            return Ok(out);
        }
        let root = self.path().join(TABLES_DIR);
        let rd = match std::fs::read_dir(&root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(format!("list {}", root.display()), e)),
        };
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| io_err(format!("list {}", root.display()), e))?;
            let Some(name) = ent.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if validate_name(&name).is_ok() && ent.path().join(DEF_FILE).exists() {
                out.push(self.table(&name)?);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The definition of table `name` (on a lake node, the lake's).
    pub fn table(&self, name: &str) -> TableResult<TableDef> {
        validate_name(name)?;
        let path = self.table_dir(name).join(DEF_FILE);
        let bytes = match self.core().vfs().read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                #[cfg(feature = "lake")]
                if let Some(lake) = &self.core().lake {
                    if let Some(def) = self.cached_or_lake(lake, name)? {
                        return Ok(def);
                    }
                }
                let known = self
                    .tables()?
                    .into_iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>();
                return Err(TableError::NotFound {
                    name: name.to_string(),
                    known: if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    },
                });
            }
            Err(e) => return Err(io_err(format!("read {}", path.display()), e)),
        };
        std::str::from_utf8(&bytes)
            .ok()
            .and_then(|t| TableDef::decode(name, t))
            .ok_or_else(|| TableError::Damaged {
                name: name.to_string(),
                path: path.clone(),
                detail: "the table definition is unreadable".into(),
            })
    }
}

impl Store {
    /// Where table `name` is published to: its own log's newest version and seq; on a lake
    /// node, the lake's table's (which other nodes may have published past this node's copy).
    pub fn table_position(&self, name: &str) -> TableResult<super::position::Position> {
        let local = super::position::published(name, &self.table_dir(name))?;
        #[cfg(feature = "lake")]
        if let Some(lake) = &self.core().lake {
            return super::lake_defs::lake_position(lake, name, local);
        }
        Ok(local)
    }
}

/// `TableError::Exists` for the definition found under a name.
fn exists(found: TableDef) -> TableError {
    TableError::Exists {
        name: found.name,
        existing: found.prefix,
        format: found.format,
    }
}

#[cfg(feature = "lake")]
impl Store {
    /// A lake node's definition of `name`: the node's cached copy, else the lake's (then
    /// cached); `None` when neither has one.
    fn cached_or_lake(
        &self,
        lake: &crate::lake::Lake,
        name: &str,
    ) -> TableResult<Option<TableDef>> {
        if self.table_dir(name).join(DEF_FILE).exists() {
            return self.table(name).map(Some);
        }
        let Some(def) = super::lake_defs::read(lake, name)? else {
            return Ok(None);
        };
        // A cache only (a read-only handle cannot write it): definitions never change, and the
        // lake's is the one returned.
        let _ = self.write_definition(&def);
        Ok(Some(def))
    }
}

/// Writes a new file through the seam and makes it durable.
pub(crate) fn write_synced(
    vfs: &dyn crate::vfs::Vfs,
    path: &Path,
    bytes: &[u8],
) -> TableResult<()> {
    let ctx = || format!("write {}", path.display());
    let mut f = vfs.create_new(path).map_err(|e| io_err(ctx(), e))?;
    f.write_all(bytes).map_err(|e| io_err(ctx(), e))?;
    f.sync().map_err(|e| io_err(ctx(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_round_trip_and_reject_damage() {
        let def = TableDef {
            name: "sales".into(),
            prefix: "sales/ eu/".into(),
            format: TableFormat::Delta,
        };
        assert_eq!(TableDef::decode("sales", &def.encode()), Some(def.clone()));
        assert_eq!(
            TableDef::decode("sales", "oncelake-table 1\nformat delta\n"),
            None
        );
        assert_eq!(
            TableDef::decode("sales", "x\nformat delta\nprefix a/\n"),
            None
        );
        assert_eq!(
            TableDef::decode("sales", "oncelake-table 1\nformat iceberg\nprefix a/\n"),
            None
        );
    }

    #[test]
    fn names_and_prefixes() {
        assert!(validate_name("sales_2026-eu").is_ok());
        for bad in ["", "_x", "-x", "a/b", "a.b", "..", &"x".repeat(129)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(normalize_prefix("sales").unwrap(), "sales/");
        assert_eq!(normalize_prefix("sales/").unwrap(), "sales/");
        assert_eq!(normalize_prefix("").unwrap(), "");
        assert!(normalize_prefix("a\nb").is_err());
    }
}
