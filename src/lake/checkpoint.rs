//! Checkpoints in the lake (SPEC R23, P10): a node's replica as of segment `N`, written once
//! with put-if-absent at `checkpoints/<N:020>.ckpt`, so that a new or wiped node starts from
//! the newest one and the segments after it instead of replaying the log from segment 1.
//!
//! ```text
//! "OLCKPT" | version u8 | N u64 | BLAKE3 of segment N [32] | time_ms u64
//!          | tables u8 | per table: name length u8, name, row count u64, BLAKE3 of its rows [32]
//!          | database length u64 | a redb database holding the replica's tables
//!          | BLAKE3 of all before [32]
//! ```
//!
//! The body is a redb database file, so a node loads it by writing the file (bulk I/O, no work
//! per row). The per-table digests are over the rows in key order (key and value, each
//! length-prefixed) and leave out the node's own identity and counters, so every replica at `N` has the same
//! ones whichever node wrote the file and however redb laid its pages out: a node whose replica
//! has other digests at `N` diverged from the lake, and the tables that differ are named. The
//! trailing BLAKE3 covers everything, so a damaged checkpoint is never loaded.

use super::log::Published;
use super::{Lake, Retry};
use crate::error::{DbContext, Error, Result};
use crate::schema::{self, meta};
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use redb::{ReadTransaction, ReadableTable, TableDefinition, TableError, TableHandle};

const MAGIC: &[u8; 6] = b"OLCKPT";
const VERSION: u8 = 1;
/// The folder checkpoints are listed under.
pub(crate) const DIR: &str = "checkpoints";

/// One replicated table's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableDigest {
    /// The table's name.
    pub name: String,
    /// Its rows.
    pub rows: u64,
    /// BLAKE3 over its rows in key order.
    pub hash: [u8; 32],
}

/// A decoded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    /// The segment the replica had applied.
    pub n: u64,
    /// BLAKE3 of segment `n`: what segment `n + 1` names.
    pub seg_hash: [u8; 32],
    /// Segment `n`'s log time.
    pub time_ms: u64,
    /// The replicated state's digests, one per table.
    pub digests: Vec<TableDigest>,
    /// The redb database file.
    pub db: Vec<u8>,
}

/// The object path of the checkpoint at segment `n`: zero-padded, so names sort in log order.
pub(crate) fn path(n: u64) -> String {
    format!("{DIR}/{n:020}.ckpt")
}

/// The segment a checkpoint's object name is for, if it is one.
fn number_of(name: &str) -> Option<u64> {
    let file = name.strip_prefix(DIR)?.strip_prefix('/')?;
    let digits = file.strip_suffix(".ckpt")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

impl Checkpoint {
    /// Its bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.db.len() + 256);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.n.to_le_bytes());
        out.extend_from_slice(&self.seg_hash);
        out.extend_from_slice(&self.time_ms.to_le_bytes());
        out.push(self.digests.len() as u8);
        for d in &self.digests {
            out.push(d.name.len() as u8);
            out.extend_from_slice(d.name.as_bytes());
            out.extend_from_slice(&d.rows.to_le_bytes());
            out.extend_from_slice(&d.hash);
        }
        out.extend_from_slice(&(self.db.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.db);
        let sum = blake3::hash(&out);
        out.extend_from_slice(sum.as_bytes());
        out
    }

    /// Decodes the bytes read at `checkpoints/<n>.ckpt`; the error says what is wrong.
    pub(crate) fn decode(n: u64, b: &[u8]) -> Result<Checkpoint, String> {
        if b.len() < 32 {
            return Err(format!("checkpoint {n} is too short ({} bytes)", b.len()));
        }
        let (body, sum) = b.split_at(b.len() - 32);
        if blake3::hash(body).as_bytes() != sum {
            return Err(format!("checkpoint {n} fails its checksum"));
        }
        let mut r = Cursor { b: body, at: 0, n };
        if r.take(6)? != MAGIC || r.take(1)? != [VERSION] {
            return Err(format!(
                "checkpoint {n} is not a version-{VERSION} checkpoint"
            ));
        }
        let stamped = r.u64()?;
        if stamped != n {
            return Err(format!("checkpoint {n} says it is of segment {stamped}"));
        }
        let seg_hash = r.arr()?;
        let time_ms = r.u64()?;
        let tables = r.take(1)?[0];
        let mut digests = Vec::with_capacity(tables as usize);
        for _ in 0..tables {
            let len = r.take(1)?[0] as usize;
            let name = String::from_utf8(r.take(len)?.to_vec())
                .map_err(|_| format!("checkpoint {n} names a table that is not UTF-8"))?;
            digests.push(TableDigest {
                name,
                rows: r.u64()?,
                hash: r.arr()?,
            });
        }
        let len = r.u64()? as usize;
        let db = r.take(len)?.to_vec();
        if r.at != body.len() {
            return Err(format!("checkpoint {n} has bytes after its database"));
        }
        Ok(Checkpoint {
            n,
            seg_hash,
            time_ms,
            digests,
            db,
        })
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    n: u64,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| format!("checkpoint {} is truncated", self.n))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u64(&mut self) -> Result<u64, String> {
        self.arr().map(u64::from_le_bytes)
    }
}

/// The tables that differ between two sets of digests, by name (with their row counts).
pub(crate) fn differences(ours: &[TableDigest], theirs: &[TableDigest]) -> Vec<String> {
    let mut names: Vec<&str> = ours.iter().chain(theirs).map(|d| d.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let find = |set: &[TableDigest], name: &str| set.iter().find(|d| d.name == name).cloned();
    names
        .into_iter()
        .filter_map(|name| {
            let (a, b) = (find(ours, name), find(theirs, name));
            (a != b).then(|| {
                let rows = |d: &Option<TableDigest>| d.as_ref().map_or(0, |d| d.rows);
                format!(
                    "{name} (this node: {} rows, the lake: {} rows)",
                    rows(&a),
                    rows(&b)
                )
            })
        })
        .collect()
}

/// Copies the replica's tables as of `txn` into a new redb database at `to` and returns the
/// state's digests. The writer's own identity (`store_id`) is copied but not digested (a loader
/// stamps its own), and so are the counters (see `replicated_meta`).
pub(crate) fn dump(txn: &ReadTransaction, to: &std::path::Path) -> Result<Vec<TableDigest>> {
    let dst = redb::Database::builder()
        .create(to)
        .db("create a checkpoint's database")?;
    let mut w = dst.begin_write().db("begin the checkpoint's transaction")?;
    w.set_durability(redb::Durability::None)
        .db("set the checkpoint's durability")?;
    let digests = vec![
        copy(txn, &w, schema::META, replicated_meta)?,
        copy(txn, &w, schema::MANIFEST, |_| true)?,
        copy(txn, &w, schema::HISTORY, |_| true)?,
        copy(txn, &w, schema::LOG, |_| true)?,
        copy(txn, &w, schema::CLAIMS, |_| true)?,
        copy(txn, &w, schema::EXTENSIONS, |_| true)?,
    ];
    w.commit().db("write the checkpoint's database")?;
    // A durable commit last, so the file on disk is whole before it is read back.
    let mut w = dst
        .begin_write()
        .db("begin the checkpoint's last transaction")?;
    w.set_durability(redb::Durability::Immediate)
        .db("set the checkpoint's durability")?;
    w.commit().db("write the checkpoint's database")?;
    Ok(digests)
}

/// The replica's digests as of `txn` (the same as [`dump`] returns, without writing).
pub(crate) fn digest(txn: &ReadTransaction) -> Result<Vec<TableDigest>> {
    let none: Option<&redb::WriteTransaction> = None;
    Ok(vec![
        scan(txn, none, schema::META, replicated_meta)?,
        scan(txn, none, schema::MANIFEST, |_| true)?,
        scan(txn, none, schema::HISTORY, |_| true)?,
        scan(txn, none, schema::LOG, |_| true)?,
        scan(txn, none, schema::CLAIMS, |_| true)?,
        scan(txn, none, schema::EXTENSIONS, |_| true)?,
    ])
}

/// Whether a meta row is digested; left out: the node's identity, and the counters, which a node's
/// clean close writes with its own counts of groups that logged nothing (statistics, never
/// read by a decision).
fn replicated_meta(key: &[u8]) -> bool {
    key != meta::STORE_ID.as_bytes() && key != meta::COUNTERS.as_bytes()
}

fn copy<K: redb::Key + 'static>(
    txn: &ReadTransaction,
    w: &redb::WriteTransaction,
    def: TableDefinition<K, &'static [u8]>,
    digested: impl Fn(&[u8]) -> bool,
) -> Result<TableDigest> {
    scan(txn, Some(w), def, digested)
}

/// Reads table `def` in key order into a digest, inserting each row into `into`'s copy of it
/// when given. A table the replica never created digests as empty.
fn scan<K: redb::Key + 'static>(
    txn: &ReadTransaction,
    into: Option<&redb::WriteTransaction>,
    def: TableDefinition<K, &'static [u8]>,
    digested: impl Fn(&[u8]) -> bool,
) -> Result<TableDigest> {
    let name = def.name().to_string();
    let mut h = blake3::Hasher::new();
    let mut rows = 0u64;
    let table = match txn.open_table(def) {
        Ok(t) => Some(t),
        Err(TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(e).db("open a table to checkpoint it"),
    };
    let mut out = match into {
        Some(w) => Some(w.open_table(def).db("create a checkpoint's table")?),
        None => None,
    };
    if let Some(table) = table {
        for row in table.iter().db("read a table to checkpoint it")? {
            let (k, v) = row.db("read a table to checkpoint it")?;
            let kv = k.value();
            let key_bytes = K::as_bytes(&kv);
            let key = key_bytes.as_ref();
            if let Some(out) = out.as_mut() {
                out.insert(k.value(), v.value())
                    .db("write a checkpoint's table")?;
            }
            if !digested(key) {
                continue;
            }
            h.update(&(key.len() as u64).to_le_bytes());
            h.update(key);
            h.update(&(v.value().len() as u64).to_le_bytes());
            h.update(v.value());
            rows += 1;
        }
    }
    Ok(TableDigest {
        name,
        rows,
        hash: *h.finalize().as_bytes(),
    })
}

/// What [`Lake::put_checkpoint`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Put {
    /// Ours is the lake's checkpoint at `n` now.
    Written,
    /// Another node's checkpoint at `n` was there already, with these digests.
    Existing(Vec<TableDigest>),
}

impl Lake {
    /// Creates checkpoint `n` with put-if-absent. Any answer but success is resolved by reading
    /// the slot back, as for a segment: a checkpoint there (ours after a lost response, or
    /// another node's) is returned for its digests; nothing there is tried again.
    pub(crate) fn put_checkpoint(&self, n: u64, bytes: &[u8]) -> Result<Put> {
        let path = ObjectPath::from(path(n));
        match self.create_once(&path, bytes, &format!("checkpoint {n}"))? {
            Published::Won => Ok(Put::Written),
            Published::Lost(found) => {
                let theirs = Checkpoint::decode(n, &found).map_err(|d| self.corrupt_ckpt(n, d))?;
                Ok(Put::Existing(theirs.digests))
            }
        }
    }

    /// Reads checkpoint `n`'s bytes, or `None` if there is none.
    pub(crate) fn read_checkpoint(&self, n: u64) -> Result<Option<Vec<u8>>> {
        self.read_if_present(&ObjectPath::from(path(n)), &format!("checkpoint {n}"))
    }

    /// The segments the lake holds checkpoints of, newest first. A listing may lag behind the
    /// lake: it can only miss the newest ones, which costs a longer tail, never a wrong state
    /// (every checkpoint listed is immutable and whole).
    pub(crate) fn list_checkpoints(&self) -> Result<Vec<u64>> {
        use futures_util::StreamExt;
        let prefix = ObjectPath::from(DIR);
        let mut retry = Retry::new();
        loop {
            let listed: Vec<_> = self.block_on(self.store.list(Some(&prefix)).collect());
            let mut found = Vec::new();
            let mut failed = None;
            for item in listed {
                match item {
                    Ok(meta) => found.extend(number_of(meta.location.as_ref())),
                    Err(e) => failed = Some(e),
                }
            }
            match failed {
                None => {
                    found.sort_unstable_by(|a, b| b.cmp(a));
                    return Ok(found);
                }
                Some(e) => retry.wait_or_fail(self, "list the lake's checkpoints", &e)?,
            }
        }
    }

    /// Damage found in a checkpoint.
    pub(crate) fn corrupt_ckpt(&self, n: u64, detail: String) -> Error {
        Error::Corrupt {
            path: std::path::PathBuf::from(format!("{}/{}", self.url, path(n))),
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ckpt() -> Checkpoint {
        Checkpoint {
            n: 42,
            seg_hash: [7; 32],
            time_ms: 9,
            digests: vec![TableDigest {
                name: "manifest".into(),
                rows: 3,
                hash: [1; 32],
            }],
            db: b"redb bytes".to_vec(),
        }
    }

    #[test]
    fn a_checkpoint_round_trips_and_any_flipped_byte_is_refused() {
        let b = ckpt().encode();
        super::super::segment::assert_decodes_only_undamaged(&ckpt(), &b, 0x10, |b| {
            Checkpoint::decode(42, b)
        });
        assert!(Checkpoint::decode(41, &b)
            .unwrap_err()
            .contains("segment 42"));
    }

    #[test]
    fn names_sort_in_log_order_and_only_checkpoint_names_parse() {
        assert!(path(9) < path(10));
        assert_eq!(number_of(&path(123)), Some(123));
        assert_eq!(number_of("checkpoints/12.ckpt"), None);
        assert_eq!(number_of("log/00000000000000000001"), None);
    }

    #[test]
    fn differences_name_the_tables_that_differ() {
        let a = ckpt().digests;
        let mut b = a.clone();
        assert!(differences(&a, &b).is_empty());
        b[0].rows = 4;
        let d = differences(&a, &b);
        assert_eq!(d.len(), 1);
        assert!(d[0].starts_with("manifest"), "{d:?}");
    }
}
