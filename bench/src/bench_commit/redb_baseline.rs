//! Baseline b1: one plain redb write transaction per commit.

use super::keys::{preload_chunks, KeySource, PRELOAD_VERSION};
use super::measurement::{drive, Timings};
use super::{Plan, Workload};
use redb::ReadableTable;
use std::path::Path;

const REDB_UNITS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("units");

/// The same 64-byte value an oncelake manifest entry carries, roughly: version, hash, size, crc, seq.
fn redb_value(version: u64) -> [u8; 64] {
    let mut v = [7u8; 64];
    v[..8].copy_from_slice(&version.to_le_bytes());
    v
}

pub(super) fn redb_preload(dir: &Path, w: Workload) -> Result<redb::Database, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let db = redb::Database::create(dir.join("b1.redb")).map_err(|e| err(&e))?;
    let value = redb_value(PRELOAD_VERSION);
    let txn = db.begin_write().map_err(|e| err(&e))?;
    {
        let mut t = txn.open_table(REDB_UNITS).map_err(|e| err(&e))?;
        for chunk in preload_chunks(w) {
            for k in chunk {
                t.insert(k.as_str(), value.as_slice())
                    .map_err(|e| err(&e))?;
            }
        }
    }
    txn.commit().map_err(|e| err(&e))?;
    Ok(db)
}

pub(super) fn redb_commits(
    db: &redb::Database,
    keys: &KeySource,
    plan: Plan,
) -> Result<Timings, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    drive(
        plan,
        |t| Ok(keys.writer(t, plan.threads)),
        |w| {
            let units = keys.next_units(w, plan.units_per_commit.max(1));
            let mut txn = db.begin_write().map_err(|e| err(&e))?;
            txn.set_durability(redb::Durability::Immediate)
                .map_err(|e| err(&e))?;
            {
                let mut t = txn.open_table(REDB_UNITS).map_err(|e| err(&e))?;
                for next in &units {
                    let current = t
                        .get(next.key.as_str())
                        .map_err(|e| err(&e))?
                        .map(|v| u64::from_le_bytes(v.value()[..8].try_into().unwrap_or([0; 8])));
                    if current.is_none_or(|v| v < next.version) {
                        t.insert(next.key.as_str(), redb_value(next.version).as_slice())
                            .map_err(|e| err(&e))?;
                    }
                }
            }
            txn.commit().map_err(|e| err(&e))
        },
    )
}
