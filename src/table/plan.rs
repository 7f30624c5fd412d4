//! The table's data file of each unit a publish touches, as of the published position: what a
//! new entry of the unit must remove.
//!
//! A unit's file as of seq S is the file of its newest entry at or before S, if that entry was
//! published: its link exists. (An entry left out because its object was unpublishable never got
//! a link; a link is made only with the add that names it, and Delta's VACUUM never removes a
//! live file.) The newest entry comes from the history when it still reaches back to S, else from
//! one scan of the commit log, which the engine keeps whole.

use super::layout::{data_file, partition_of};
use super::position::Position;
use super::version::FileRef;
use super::{TableDef, TableResult};
use crate::schema::log::RecordBody;
use crate::snapshot::Snapshot;
use crate::store::Store;
use crate::ObjectMeta;
use std::collections::{BTreeSet, HashMap};

/// Unit → its live data file in the table (`None`: no file).
pub(crate) type PriorFiles = HashMap<String, Option<FileRef>>;

/// The live data file of every unit in `touched`, as of `pos`.
pub(crate) fn resolve_priors(
    store: &Store,
    snap: &Snapshot,
    def: &TableDef,
    pos: Position,
    touched: &BTreeSet<&str>,
) -> TableResult<PriorFiles> {
    let mut newest: HashMap<String, ObjectMeta> = HashMap::new();
    if pos.version.is_some() && pos.seq > 0 {
        if pos.seq >= snap.history_from() && pos.seq <= snap.seq() {
            let at = store.snapshot_at(pos.seq)?;
            for unit in touched {
                if let Some(e) = at.get(unit)? {
                    newest.insert(e.unit, e.object);
                }
            }
        } else {
            for rec in store.snapshot()?.changes_since(0)? {
                let rec = rec?;
                if rec.seq > pos.seq {
                    break;
                }
                if let RecordBody::Commit { entries } = rec.body {
                    for e in entries {
                        if touched.contains(e.unit.as_str()) {
                            newest.insert(e.unit, e.object);
                        }
                    }
                }
            }
        }
    }
    let root = store.table_dir(&def.name);
    let mut out = PriorFiles::new();
    for unit in touched {
        let file = newest.get(*unit).and_then(|object| {
            let part = partition_of(&def.prefix, unit)?;
            let path = data_file(&part, unit, &object.id);
            let linked = root.join(&path).exists();
            linked.then_some(FileRef {
                path,
                partition: part.values,
                size: object.size,
            })
        });
        out.insert(unit.to_string(), file);
    }
    Ok(out)
}
