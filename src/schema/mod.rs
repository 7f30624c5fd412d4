//! The storage schema, in one place: every redb table the engine keeps, the meta keys, and the
//! encoding of every record stored in them, all on one codec ([`codec`]).
//!
//! | table          | key              | value (sealed, format 2)                      | module       |
//! |----------------|------------------|-----------------------------------------------|--------------|
//! | `store_meta`   | meta key         | u64                                           | [`meta`]     |
//! | `manifest`     | unit             | entry ([`manifest::EntryValue`])              | [`manifest`] |
//! | `history`      | (unit, seq)      | entry of that seq                             | [`manifest`] |
//! | `log`          | seq              | CRC-framed log record ([`log::Record`])       | [`log`]      |
//! | `claims`       | unit             | the unit's newest lease ([`claim::ClaimRecord`]) | [`claim`] |
//! | `extensions`   | key              | `seq ++ data` of a higher layer               | [`extension`] |
//!
//! The `index.snap` file (the persisted dedup index) is not a table, but its records are encoded
//! here too, on the same codec ([`index_snap`]).
//!
//! Nothing above this module names a table or decodes a stored value by hand: the leader writes
//! through the encoders here, and readers go through [`Tables`] (typed scans and point reads) or
//! [`log::read_range`] (the one reader of the commit log). The encodings are unchanged from
//! format 2; a format-1 store is resealed by the upgrade (`store::open`).

pub(crate) mod claim;
pub(crate) mod codec;
pub(crate) mod extension;
pub(crate) mod index_snap;
pub mod log;
pub(crate) mod manifest;
pub(crate) mod meta;
pub(crate) mod wal;

use crate::error::{DbContext, Error, Result};
use claim::ClaimRecord;
use manifest::EntryValue;
use redb::{ReadOnlyTable, TableDefinition};

/// Name of the manifest table (as its seals cover it).
pub(crate) const MANIFEST_TABLE: &str = "manifest";
/// Name of the history table (as its seals cover it).
pub(crate) const HISTORY_TABLE: &str = "history";
/// Name of the claims table (as its seals cover it).
pub(crate) const CLAIMS_TABLE: &str = "claims";
/// Name of the extensions table (as its seals cover it).
pub(crate) const EXTENSIONS_TABLE: &str = "extensions";
/// Name the meta values' seals cover (the format-1 table's name, kept by the upgrade).
pub(crate) const META_TABLE: &str = "meta";

/// Unit → current entry.
pub(crate) const MANIFEST: TableDefinition<&str, &[u8]> = TableDefinition::new(MANIFEST_TABLE);
/// (unit, seq) → every entry ever committed, for reads as of an older seq (SPEC R7) and GC.
pub(crate) const HISTORY: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new(HISTORY_TABLE);
/// seq → framed log record (SPEC R8).
pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// Unit → its newest lease (SPEC R9).
pub(crate) const CLAIMS: TableDefinition<&str, &[u8]> = TableDefinition::new(CLAIMS_TABLE);
/// Key → a higher layer's state (`seq ++ data`); written only by the leader's extension op.
pub(crate) const EXTENSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new(EXTENSIONS_TABLE);
/// The store's counters and stamps, each value a sealed u64 (format 2).
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("store_meta");
/// Format 1's meta table (plain u64 values); only read by the upgrade, which deletes it.
pub(crate) const META_V1: TableDefinition<&str, u64> = TableDefinition::new(META_TABLE);

type StrTable = ReadOnlyTable<&'static str, &'static [u8]>;

/// Typed reads of the unit-keyed tables as of one read transaction: the internal API higher
/// layers (pipelines, reconcile, verify) use instead of opening tables and decoding values.
pub(crate) struct Tables {
    manifest: StrTable,
    claims: StrTable,
    /// `None` in a store that never wrote an extension.
    extensions: Option<StrTable>,
}

impl Tables {
    /// Opens the tables as of `txn`.
    pub(crate) fn open(txn: &redb::ReadTransaction) -> Result<Tables> {
        let extensions = match txn.open_table(EXTENSIONS) {
            Ok(t) => Some(t),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(Error::db("open the extensions table", e)),
        };
        Ok(Tables {
            manifest: txn.open_table(MANIFEST).db("open the manifest")?,
            claims: txn.open_table(CLAIMS).db("open the claims")?,
            extensions,
        })
    }

    /// `unit`'s current entry (checked as `codec::get_sealed` checks).
    pub(crate) fn entry(&self, unit: &str) -> Result<Option<EntryValue>> {
        codec::get_sealed(&self.manifest, MANIFEST_TABLE, unit, EntryValue::decode)
    }

    /// `unit`'s newest lease.
    pub(crate) fn claim(&self, unit: &str) -> Result<Option<ClaimRecord>> {
        codec::get_sealed(&self.claims, CLAIMS_TABLE, unit, ClaimRecord::decode)
    }

    /// `key`'s extension record: the seq that wrote it and its data.
    pub(crate) fn extension(&self, key: &str) -> Result<Option<(u64, Vec<u8>)>> {
        let Some(t) = &self.extensions else {
            return Ok(None);
        };
        let split = |k: &str, v: &[u8]| extension::decode(k, v).map(|(s, d)| (s, d.to_vec()));
        codec::get_sealed(t, EXTENSIONS_TABLE, key, split)
    }

    /// Calls `f` on every manifest entry whose unit starts with `prefix`, in key order.
    pub(crate) fn entries_with_prefix(
        &self,
        prefix: &str,
        mut f: impl FnMut(&str, EntryValue) -> Result<()>,
    ) -> Result<()> {
        scan_prefix(&self.manifest, prefix, |k, v| {
            f(k, EntryValue::decode(k, v)?)
        })
    }

    /// Calls `f` on every lease whose unit starts with `prefix`, in key order.
    pub(crate) fn claims_with_prefix(
        &self,
        prefix: &str,
        mut f: impl FnMut(&str, ClaimRecord) -> Result<()>,
    ) -> Result<()> {
        scan_prefix(&self.claims, prefix, |k, v| {
            f(k, ClaimRecord::decode(k, v)?)
        })
    }

    /// Calls `f` on every extension record (key, seq, data) whose key starts with `prefix`.
    pub(crate) fn extensions_with_prefix(
        &self,
        prefix: &str,
        mut f: impl FnMut(&str, u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let Some(t) = &self.extensions else {
            return Ok(());
        };
        scan_prefix(t, prefix, |k, v| {
            let (seq, data) = extension::decode(k, v)?;
            f(k, seq, data)
        })
    }
}

fn scan_prefix(
    table: &StrTable,
    prefix: &str,
    mut f: impl FnMut(&str, &[u8]) -> Result<()>,
) -> Result<()> {
    for row in table.range::<&str>(prefix..).db("scan a table")? {
        let (k, v) = row.db("scan a table")?;
        let k = k.value();
        if !k.starts_with(prefix) {
            break;
        }
        f(k, v.value())?;
    }
    Ok(())
}
