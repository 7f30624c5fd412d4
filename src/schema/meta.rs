//! The store's counters and stamps in `META`: each a sealed u64 under its key.

use super::codec::{seal, unseal, Reader};
use super::{META, META_TABLE};
use crate::error::{DbContext, Error, Result};
use redb::ReadableTable;

/// The store format (see `store::FORMAT_VERSION`).
pub(crate) const FORMAT: &str = "format";
/// The seq the next log record gets: always the last log key + 1.
pub(crate) const NEXT_SEQ: &str = "next_seq";
/// The token the next granted lease gets.
pub(crate) const NEXT_TOKEN: &str = "next_token";
/// The oldest seq still readable (the history horizon; only rises).
pub(crate) const HISTORY_FROM: &str = "history_from";
/// The number of the newest commit group applied to this database (format 3): the write-ahead
/// log's records after it are replayed on open (`commit::wal`). Missing means 0.
pub(crate) const WAL_GROUP: &str = "wal_group";
/// A random identity stamped at creation (or on the first open by a build that knows it), so a
/// persisted index snapshot from another store is never used.
pub(crate) const STORE_ID: &str = "store_id";

/// Reads the meta value `key`; every one is stamped at creation, so a missing one means the
/// table is damaged (a damaged key no longer finds its row), never a default.
pub(crate) fn get(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<u64> {
    let guard = meta
        .get(key)
        .db("read the meta table")?
        .ok_or_else(|| Error::corrupt_record(META_TABLE, key, "it is missing"))?;
    decode(key, guard.value())
}

/// Decodes the sealed meta value of `key` (a row of the table, or of a group's redo).
pub(crate) fn decode(key: &str, sealed: &[u8]) -> Result<u64> {
    let payload = unseal(META_TABLE, key.as_bytes(), key, sealed)?;
    let mut r = Reader::new(payload, "meta value");
    let v = r.u64().and_then(|v| r.finish().map(|()| v));
    v.map_err(|e| Error::corrupt_record(META_TABLE, key, e.to_string()))
}

/// Writes the meta value `key`, sealed.
pub(crate) fn put(meta: &mut redb::Table<&str, &[u8]>, key: &str, value: u64) -> Result<()> {
    meta.insert(key, sealed_u64(key, value).as_slice())
        .db("write the meta table")?;
    Ok(())
}

/// The newest committed seq (0 for an empty log) and the oldest seq still readable
/// (`history_from`), as of `txn`.
pub(crate) fn seq_and_horizon(txn: &redb::ReadTransaction) -> Result<(u64, u64)> {
    let meta = txn.open_table(META).db("open the meta table")?;
    let next = get(&meta, NEXT_SEQ)?;
    let from = get(&meta, HISTORY_FROM)?;
    Ok((next.saturating_sub(1), from))
}

/// The persisted store-scope counters (SPEC R16; see `crate::metrics`): a sealed list of
/// (name, u64). Missing in a store no build that persists counters has committed to yet.
pub(crate) const COUNTERS: &str = "counters";

/// Reads the persisted counters; empty when the row is missing.
pub(crate) fn read_counters(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Vec<(String, u64)>> {
    let Some(guard) = meta.get(COUNTERS).db("read the meta table")? else {
        return Ok(Vec::new());
    };
    let payload = unseal(META_TABLE, COUNTERS.as_bytes(), COUNTERS, guard.value())?;
    crate::metrics::decode_counters(payload)
        .ok_or_else(|| Error::corrupt_record(META_TABLE, COUNTERS, "not a list of counters"))
}

/// Reads the persisted counters of a database (for opening a store); for a store without them
/// yet, only where counting will begin (its newest seq).
pub(crate) fn stored_counters(db: &dyn redb::ReadableDatabase) -> Result<Vec<(String, u64)>> {
    let txn = db.begin_read().db("begin a read transaction")?;
    let rows = read_counters(&txn.open_table(META).db("open the meta table")?)?;
    if !rows.is_empty() {
        return Ok(rows);
    }
    let (seq, _) = seq_and_horizon(&txn)?;
    Ok(vec![(crate::metrics::SINCE_SEQ.to_string(), seq)])
}

/// The sealed value of the meta row `key` holding `value`.
pub(crate) fn sealed_u64(key: &str, value: u64) -> Vec<u8> {
    seal(META_TABLE, key.as_bytes(), value.to_le_bytes().to_vec())
}

/// Adds a commit group's store-scope counts to `rows` (the persisted counters as the leader keeps
/// them). `seq_before` is the newest seq before the group: where counting begins if the row is new.
pub(crate) fn add_to_counters(
    rows: &mut Vec<(String, u64)>,
    delta: &crate::metrics::Counters,
    seq_before: u64,
) {
    let deltas = delta.store_deltas();
    if deltas.is_empty() {
        return;
    }
    if rows.is_empty() {
        rows.push((crate::metrics::SINCE_SEQ.to_string(), seq_before));
    }
    for (name, d) in deltas {
        match rows.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = v.saturating_add(d),
            None => rows.push((name.to_string(), d)),
        }
    }
}

/// The sealed value of the `counters` row holding `rows`.
pub(crate) fn sealed_counters(rows: &[(String, u64)]) -> Vec<u8> {
    seal(
        META_TABLE,
        COUNTERS.as_bytes(),
        crate::metrics::encode_counters(rows),
    )
}
