//! Baseline b2: the seed 001 `process_batch` pattern on SQLite, one connection per thread or
//! one shared behind a mutex.

use super::keys::{mix, preload_chunks, KeySource, Next, PRELOAD_VERSION};
use super::measurement::{drive, Timings};
use super::{Plan, Workload};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

pub(super) fn sqlite_open(path: &PathBuf) -> Result<rusqlite::Connection, String> {
    let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
    conn.busy_timeout(Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
        .map_err(|e| e.to_string())?;
    Ok(conn)
}

/// The hash seed 001 stores beside the batch id: here a function of the version, so a new
/// version is a new row, as a new output is in the seed.
fn sqlite_hash(version: u64) -> String {
    format!("{:064x}", mix(version))
}

pub(super) fn sqlite_preload(dir: &Path, w: Workload) -> Result<PathBuf, String> {
    let path = dir.join("b2.sqlite");
    let mut conn = sqlite_open(&path)?;
    let e = |e: rusqlite::Error| e.to_string();
    conn.execute_batch(
        "CREATE TABLE checkpoints (batch_id TEXT NOT NULL, hash TEXT NOT NULL, \
         PRIMARY KEY (batch_id, hash));",
    )
    .map_err(e)?;
    let hash = sqlite_hash(PRELOAD_VERSION);
    for chunk in preload_chunks(w) {
        let txn = conn.transaction().map_err(e)?;
        {
            let mut ins = txn
                .prepare_cached("INSERT INTO checkpoints (batch_id, hash) VALUES (?1, ?2)")
                .map_err(e)?;
            for k in chunk {
                ins.execute((k.as_str(), hash.as_str())).map_err(e)?;
            }
        }
        txn.commit().map_err(e)?;
    }
    Ok(path)
}

/// Seed 001's `process_batch` on one connection: check, then insert, in one immediate
/// transaction (for each of the commit's units).
fn sqlite_commit(conn: &rusqlite::Connection, units: &[Next]) -> Result<(), String> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| e.to_string())?;
    let done = (|| -> Result<(), rusqlite::Error> {
        for next in units {
            let hash = sqlite_hash(next.version);
            let exists = {
                let mut check = conn.prepare_cached(
                    "SELECT 1 FROM checkpoints WHERE batch_id = ?1 AND hash = ?2",
                )?;
                check.exists((next.key.as_str(), hash.as_str()))?
            };
            if !exists {
                conn.prepare_cached("INSERT INTO checkpoints (batch_id, hash) VALUES (?1, ?2)")?
                    .execute((next.key.as_str(), hash.as_str()))?;
            }
        }
        conn.execute_batch("COMMIT")
    })();
    if let Err(err) = done {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(err.to_string());
    }
    Ok(())
}

pub(super) fn sqlite_commits(
    path: &PathBuf,
    keys: &KeySource,
    plan: Plan,
) -> Result<Timings, String> {
    drive(
        plan,
        |t| Ok((sqlite_open(path)?, keys.writer(t, plan.threads))),
        |(conn, w)| sqlite_commit(conn, &keys.next_units(w, plan.units_per_commit.max(1))),
    )
}

pub(super) fn sqlite_shared_commits(
    conn: &Mutex<rusqlite::Connection>,
    keys: &KeySource,
    plan: Plan,
) -> Result<Timings, String> {
    drive(
        plan,
        |t| Ok(keys.writer(t, plan.threads)),
        |w| {
            let units = keys.next_units(w, plan.units_per_commit.max(1));
            let conn = conn
                .lock()
                .map_err(|_| "the shared connection's lock is poisoned")?;
            sqlite_commit(&conn, &units)
        },
    )
}
