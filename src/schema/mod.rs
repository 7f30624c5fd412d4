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
//! through the encoders here, and readers go through `tail::Tables` (typed scans and point
//! reads, with the unapplied groups' rows over them) or [`log::read_range`] (the one reader of
//! the commit log). The encodings are unchanged from format 2; a format-1 store is resealed by
//! the upgrade (`store::open`).

pub(crate) mod claim;
pub(crate) mod codec;
pub(crate) mod extension;
pub(crate) mod index_snap;
pub mod log;
pub(crate) mod manifest;
pub(crate) mod meta;

use redb::TableDefinition;

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
