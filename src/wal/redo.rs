//! The write-ahead log of the durable commit path: one small record per commit group, appended
//! to its own redb database (`wal.redb`) whose keys only grow, so that a group's durable commit
//! touches the right edge of one tree and syncs once. The big B-trees of the store's own
//! database (manifest, history, log, claims, extensions, meta) are then committed *without* a
//! sync, and made durable in bulk by a checkpoint (a synced commit of the store's database), after
//! which the records it covers are trimmed. See docs/commit.md ("The write-ahead path").
//!
//! A record is the group's *redo*: every row the group put into or removed from the store's
//! tables, with the exact bytes (sealed values, framed log records), so replaying it reproduces
//! the group's transaction byte for byte without deciding anything again. One kind of row is
//! implied rather than carried: a manifest put moves the entry it replaces into the history
//! (format 4), read from the manifest as the put is applied. Its key is the group's
//! number; the store's `meta` row `wal_group` holds the number of the newest group applied to the
//! store's database, in the same transaction as that group's rows, so recovery knows where the
//! database stops: it replays the records after it, in order, in one synced transaction.
//!
//! Frame (little-endian): `magic "OW" | version (1) | group u64 | payload length u32 | payload |
//! crc32` (the CRC covers everything before it). Payload: a sequence of operations
//! `table u8 | kind u8 (0 put, 1 remove) | key | [value length u32 | value]`, the key a
//! length-prefixed string, or for `history` a string and a u64, or for `log` a u64.

use crate::error::{DbContext, Error, Result};
use crate::schema::codec::{put_str, put_u32, put_u64, Reader};
use crate::schema::manifest::EntryValue;
use crate::schema::{meta, CLAIMS, EXTENSIONS, HISTORY, LOG, MANIFEST, META};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The write-ahead log's database file in a store's directory.
pub(crate) const WAL_FILE: &str = "wal.redb";
/// Group number → framed redo record.
const WAL: TableDefinition<u64, &[u8]> = TableDefinition::new("wal");
const MAGIC: [u8; 2] = *b"OW";
const VERSION: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Tbl {
    Manifest = 1,
    History = 2,
    Log = 3,
    Claims = 4,
    Extensions = 5,
    Meta = 6,
}

impl Tbl {
    fn of(b: u8) -> Option<Tbl> {
        Some(match b {
            1 => Tbl::Manifest,
            2 => Tbl::History,
            3 => Tbl::Log,
            4 => Tbl::Claims,
            5 => Tbl::Extensions,
            6 => Tbl::Meta,
            _ => return None,
        })
    }
}

/// The largest redo a group writes to the log; a larger group (a bulk load) is a checkpoint
/// instead: its own synced commit costs about what its pages cost anyway.
pub(crate) const MAX_RECORD: usize = 4 << 20;

/// A group's redo, built by the leader as it writes the group's rows.
#[derive(Debug, Default)]
pub(crate) struct Redo {
    buf: Vec<u8>,
}

impl Redo {
    /// Whether no row was recorded yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    fn head(&mut self, t: Tbl, remove: bool) {
        self.buf.push(t as u8);
        self.buf.push(u8::from(remove));
    }
    fn value(&mut self, v: &[u8]) {
        put_u32(&mut self.buf, v.len() as u32);
        self.buf.extend_from_slice(v);
    }
    pub(crate) fn manifest(&mut self, unit: &str, v: &[u8]) {
        self.put_str_key(Tbl::Manifest, unit, v);
    }
    pub(crate) fn claims(&mut self, unit: &str, v: &[u8]) {
        self.put_str_key(Tbl::Claims, unit, v);
    }
    pub(crate) fn extensions(&mut self, key: &str, v: &[u8]) {
        self.put_str_key(Tbl::Extensions, key, v);
    }
    pub(crate) fn meta(&mut self, key: &str, v: &[u8]) {
        self.put_str_key(Tbl::Meta, key, v);
    }
    fn put_str_key(&mut self, t: Tbl, key: &str, v: &[u8]) {
        self.head(t, false);
        put_str(&mut self.buf, key);
        self.value(v);
    }
    pub(crate) fn history_removed(&mut self, unit: &str, seq: u64) {
        self.head(Tbl::History, true);
        put_str(&mut self.buf, unit);
        put_u64(&mut self.buf, seq);
    }
    pub(crate) fn log(&mut self, seq: u64, v: &[u8]) {
        self.head(Tbl::Log, false);
        put_u64(&mut self.buf, seq);
        self.value(v);
    }
}

fn frame(group: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 20);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    put_u64(&mut out, group);
    put_u32(&mut out, payload.len() as u32);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    put_u32(&mut out, crc);
    out
}

/// A decided group on its way to the B-trees: its number and its redo.
///
/// Cloning shares the redo: the backlog hands the applier clones of the groups it applies and
/// keeps them listed until they are applied, so a snapshot begun meanwhile can still read them
/// ([`GroupRedo::read_rows`]).
#[derive(Debug, Clone)]
pub(crate) struct GroupRedo {
    group: u64,
    units: usize,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    payload: Vec<u8>,
    /// Where the rows a reader needs are, parsed by the first snapshot that reads the group
    /// (most groups are applied before any reader asks, and never parsed for reading).
    read_rows: OnceLock<ReadRows>,
}

/// A byte range of a group's payload.
type Span = std::ops::Range<usize>;

/// The string-keyed tables a reader of an unapplied group looks into (see `tail`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keyed {
    /// Unit → current entry (snapshots, reconcile, the pipelines' sources and completions).
    Manifest,
    /// Unit → newest lease (the pipelines' cell leases).
    Claims,
    /// Key → a higher layer's state (the pipelines' definition and failures).
    Extensions,
}

/// What a reader reads of an unapplied group (see `tail`): its rows of the string-keyed tables
/// and its log records, each in the redo's order, and its `next_seq` and `history_from` rows
/// (every group writes both).
#[derive(Debug, Default)]
struct ReadRows {
    manifest: Vec<(Span, Span)>,
    claims: Vec<(Span, Span)>,
    extensions: Vec<(Span, Span)>,
    log: Vec<(u64, Span)>,
    next_seq: Option<Span>,
    history_from: Option<Span>,
}

impl Keyed {
    /// Every table, in [`Keyed::slot`] order.
    pub(crate) const ALL: [Keyed; 3] = [Keyed::Manifest, Keyed::Claims, Keyed::Extensions];

    /// Its place among the tables (the backlog's key index, `crate::wal::backlog::KEY_TABLES`).
    pub(crate) fn slot(self) -> usize {
        match self {
            Keyed::Manifest => 0,
            Keyed::Claims => 1,
            Keyed::Extensions => 2,
        }
    }
}

impl ReadRows {
    fn keyed(&self, table: Keyed) -> &[(Span, Span)] {
        match table {
            Keyed::Manifest => &self.manifest,
            Keyed::Claims => &self.claims,
            Keyed::Extensions => &self.extensions,
        }
    }
}

impl GroupRedo {
    /// Group `group`'s redo; it commits `units` units.
    pub(crate) fn new(group: u64, redo: Redo, units: usize) -> GroupRedo {
        GroupRedo {
            group,
            units,
            shared: Arc::new(Shared {
                payload: redo.buf,
                read_rows: OnceLock::new(),
            }),
        }
    }
    /// Group `group` from its framed write-ahead record (a lake segment carries one), checked
    /// like a record recovery reads; `path` names where it was read in errors.
    #[cfg(feature = "lake")]
    pub(crate) fn from_frame(path: &Path, group: u64, rec: &[u8]) -> Result<GroupRedo> {
        let payload = unframe(path, group, rec)?.to_vec();
        let g = GroupRedo::new(group, Redo { buf: payload }, 0);
        let units = g.read_rows()?.keyed(Keyed::Manifest).len();
        Ok(GroupRedo { units, ..g })
    }
    /// The units it commits.
    pub(crate) fn units(&self) -> usize {
        self.units
    }
    /// The redo's size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.payload().len()
    }
    /// Its write-ahead record.
    pub(crate) fn frame(&self) -> Vec<u8> {
        frame(self.group, self.payload())
    }
    /// The group's number.
    pub(crate) fn number(&self) -> u64 {
        self.group
    }
    /// How many handles share its redo (tests: who keeps a group alive).
    #[cfg(test)]
    pub(crate) fn holders(&self) -> usize {
        Arc::strong_count(&self.shared)
    }
    fn payload(&self) -> &[u8] {
        &self.shared.payload
    }

    /// The rows a reader needs, parsed once per group. The leader built the redo, so a parse
    /// failure is a bug; it is reported as damage of the in-memory record, not cached.
    fn read_rows(&self) -> Result<&ReadRows> {
        if let Some(r) = self.shared.read_rows.get() {
            return Ok(r);
        }
        let payload = self.payload();
        let mut rows = Vec::new();
        parse(Path::new(IN_MEMORY), self.group, payload, &mut rows)?;
        let span = |b: &[u8]| {
            let start = b.as_ptr() as usize - payload.as_ptr() as usize;
            start..start + b.len()
        };
        let mut out = ReadRows::default();
        for row in &rows {
            let (Some(v), key) = (row.value, row.key) else {
                continue;
            };
            match (row.table, key) {
                (Tbl::Manifest, Key::Str(unit)) => {
                    out.manifest.push((span(unit.as_bytes()), span(v)))
                }
                (Tbl::Claims, Key::Str(unit)) => out.claims.push((span(unit.as_bytes()), span(v))),
                (Tbl::Extensions, Key::Str(key)) => {
                    out.extensions.push((span(key.as_bytes()), span(v)))
                }
                (Tbl::Log, Key::Log(seq)) => out.log.push((seq, span(v))),
                (Tbl::Meta, Key::Str(meta::NEXT_SEQ)) => out.next_seq = Some(span(v)),
                (Tbl::Meta, Key::Str(meta::HISTORY_FROM)) => out.history_from = Some(span(v)),
                _ => {}
            }
        }
        Ok(self.shared.read_rows.get_or_init(|| out))
    }

    /// Its rows of `table`, `(key, sealed value as the table stores it)`, in the redo's order (a
    /// later row of a key replaces an earlier one).
    pub(crate) fn keyed_rows(
        &self,
        table: Keyed,
    ) -> Result<impl DoubleEndedIterator<Item = (&[u8], &[u8])> + '_> {
        let p = self.payload();
        Ok(self
            .read_rows()?
            .keyed(table)
            .iter()
            .map(move |(k, v)| (&p[k.clone()], &p[v.clone()])))
    }

    /// Parses the rows a reader needs now (the leader, before queuing the group: the backlog's
    /// key index needs them, [`GroupRedo::index_keys`]).
    pub(crate) fn parse_for_readers(&self) -> Result<()> {
        self.read_rows().map(|_| ())
    }

    /// Every keyed row as `(table slot, key, place among the table's rows)`, in the redo's order.
    /// Empty if the rows do not parse, which [`GroupRedo::parse_for_readers`] rules out before
    /// the group is queued.
    pub(crate) fn index_keys(&self) -> Vec<(usize, &[u8], u32)> {
        let Ok(rows) = self.read_rows() else {
            return Vec::new();
        };
        let p = self.payload();
        Keyed::ALL
            .iter()
            .flat_map(|&t| {
                rows.keyed(t)
                    .iter()
                    .enumerate()
                    .map(move |(i, (k, _))| (t.slot(), &p[k.clone()], i as u32))
            })
            .collect()
    }

    /// Its `row`-th row of `table` (a place [`GroupRedo::index_keys`] gave), as the table stores
    /// it: `(key, sealed value)`.
    pub(crate) fn keyed_row(&self, table: Keyed, row: u32) -> Result<(&[u8], &[u8])> {
        let p = self.payload();
        match self.read_rows()?.keyed(table).get(row as usize) {
            Some((k, v)) => Ok((&p[k.clone()], &p[v.clone()])),
            None => Err(damaged(
                Path::new(IN_MEMORY),
                format!("group {} has no row {row} of {table:?}", self.group),
            )),
        }
    }

    /// Its log records, `(seq, framed record)`, in seq order.
    pub(crate) fn log_rows(&self) -> Result<impl Iterator<Item = (u64, &[u8])> + '_> {
        let p = self.payload();
        Ok(self
            .read_rows()?
            .log
            .iter()
            .map(move |(seq, v)| (*seq, &p[v.clone()])))
    }

    /// The store's `next_seq` and `history_from` once this group is applied.
    pub(crate) fn seq_rows(&self) -> Result<(u64, u64)> {
        let rows = self.read_rows()?;
        let get = |span: &Option<Span>, key: &str| match span {
            Some(s) => meta::decode(key, &self.payload()[s.clone()]),
            None => Err(damaged(
                Path::new(IN_MEMORY),
                format!("group {} carries no {key} row", self.group),
            )),
        };
        Ok((
            get(&rows.next_seq, meta::NEXT_SEQ)?,
            get(&rows.history_from, meta::HISTORY_FROM)?,
        ))
    }
}

/// How errors name a group's redo held in memory (not read from `wal.redb`).
const IN_MEMORY: &str = "(commit group in memory)";

/// Applies decided groups, in order, to the store's tables in `txn` (the backlog's applier, and
/// the leader's groups applied in place). `path` names the store's database in errors.
pub(crate) fn apply_groups(
    txn: &redb::WriteTransaction,
    path: &Path,
    groups: &[GroupRedo],
) -> Result<()> {
    let mut rows = Vec::new();
    for g in groups {
        parse(path, g.group, g.payload(), &mut rows)?;
    }
    // In key order, table by table: the B-trees' pages are then visited once each, in order,
    // instead of at random. The sort is stable and a later row of a key overwrites an earlier
    // one (or removes it), so the result is that of applying the groups one after the other.
    rows.sort_by_key(|r| (r.table, r.key));
    let mut t = RedoTables::open(txn)?;
    rows.iter().try_for_each(|row| t.write(txn, row))?;
    t.write_superseded()
}

pub(crate) fn damaged(path: &Path, detail: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        detail: format!("its write-ahead log is damaged: {detail}"),
    }
}

/// Checks a framed record of group `group` and returns its payload.
fn unframe<'a>(path: &Path, group: u64, rec: &'a [u8]) -> Result<&'a [u8]> {
    if rec.len() < 19 {
        return Err(damaged(path, format!("record {group} is too short")));
    }
    let (body, crc) = rec.split_at(rec.len() - 4);
    let mut a = [0u8; 4];
    a.copy_from_slice(crc);
    if crc32fast::hash(body) != u32::from_le_bytes(a) {
        return Err(damaged(path, format!("record {group} fails its checksum")));
    }
    if body[..2] != MAGIC || body[2] != VERSION {
        return Err(damaged(
            path,
            format!("record {group} is not a version-{VERSION} record"),
        ));
    }
    let mut r = Reader::new(&body[3..], "write-ahead record");
    let stamped = r.u64()?;
    let len = r.u32()? as usize;
    let payload = r.take(len)?;
    r.finish()?;
    if stamped != group {
        return Err(damaged(
            path,
            format!("record {group} says it is group {stamped}"),
        ));
    }
    Ok(payload)
}

/// The tables a redo writes, opened once for all the records applied in one transaction.
struct RedoTables<'t> {
    manifest: redb::Table<'t, &'static str, &'static [u8]>,
    history: redb::Table<'t, (&'static str, u64), &'static [u8]>,
    log: redb::Table<'t, u64, &'static [u8]>,
    claims: redb::Table<'t, &'static str, &'static [u8]>,
    meta: redb::Table<'t, &'static str, &'static [u8]>,
    /// Opened on the first extension row only, so plain commits pay nothing.
    extensions: Option<redb::Table<'t, &'static str, &'static [u8]>>,
    /// History rows of the entries the manifest rows written so far replaced, not yet written:
    /// (unit, the replaced entry's seq, its sealed history value).
    superseded: Vec<(String, u64, Vec<u8>)>,
}

const APPLY: &str = "apply a commit group's rows";

impl<'t> RedoTables<'t> {
    fn open(txn: &'t redb::WriteTransaction) -> Result<Self> {
        Ok(RedoTables {
            manifest: txn.open_table(MANIFEST).db(APPLY)?,
            history: txn.open_table(HISTORY).db(APPLY)?,
            log: txn.open_table(LOG).db(APPLY)?,
            claims: txn.open_table(CLAIMS).db(APPLY)?,
            meta: txn.open_table(META).db(APPLY)?,
            extensions: None,
            superseded: Vec::new(),
        })
    }

    /// Puts `unit`'s manifest row `v`, keeping the entry it replaces as a history row (format 4:
    /// the history holds superseded entries only; the current one lives in the manifest alone).
    ///
    /// The replaced entry is read from the insert itself, so deciding a group never reads the
    /// manifest for it and the record does not carry it. That is deterministic: records are
    /// applied exactly once, in order, onto the state the previous one left (`wal_group`).
    fn put_manifest(&mut self, unit: &str, v: &[u8]) -> Result<()> {
        let Some(old) = self.manifest.insert(unit, v).db(APPLY)? else {
            return Ok(());
        };
        let old = EntryValue::decode(unit, old.value())?;
        let new = EntryValue::decode(unit, v)?;
        match old.seq.cmp(&new.seq) {
            std::cmp::Ordering::Less => {
                self.superseded
                    .push((unit.to_string(), old.seq, old.encode_history(unit)));
                Ok(())
            }
            // The same entry written again: nothing was replaced.
            std::cmp::Ordering::Equal if old == new => Ok(()),
            _ => Err(Error::corrupt_record(
                crate::schema::MANIFEST_TABLE,
                unit,
                format!(
                    "a commit of seq {} would replace the entry of seq {}",
                    new.seq, old.seq
                ),
            )),
        }
    }

    /// Writes the history rows of the entries replaced since the last call. Called after each
    /// record on replay and after each batch, so that they land before any later record's rows
    /// (a prune's removals come only in a later group: a prune is planned on a drained backlog
    /// and never removes the row of an entry that was current then).
    fn write_superseded(&mut self) -> Result<()> {
        self.superseded
            .sort_unstable_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        for (unit, seq, v) in self.superseded.drain(..) {
            self.history
                .insert((unit.as_str(), seq), v.as_slice())
                .db(APPLY)?;
        }
        Ok(())
    }

    /// Applies one record's operations, in the record's order.
    fn apply(
        &mut self,
        txn: &'t redb::WriteTransaction,
        path: &Path,
        group: u64,
        payload: &[u8],
    ) -> Result<()> {
        let mut rows = Vec::new();
        parse(path, group, payload, &mut rows)?;
        rows.iter().try_for_each(|row| self.write(txn, row))?;
        self.write_superseded()
    }

    /// Writes one row.
    fn write(&mut self, txn: &'t redb::WriteTransaction, row: &Row<'_>) -> Result<()> {
        let ctx = APPLY;
        match (row.key, row.value) {
            (Key::History(unit, seq), None) => {
                self.history.remove((unit, seq)).db(ctx)?;
            }
            (Key::History(unit, seq), Some(v)) => {
                self.history.insert((unit, seq), v).db(ctx)?;
            }
            (Key::Log(seq), Some(v)) => {
                self.log.insert(seq, v).db(ctx)?;
            }
            (Key::Str(key), Some(v)) => {
                match row.table {
                    Tbl::Manifest => {
                        self.put_manifest(key, v)?;
                        None
                    }
                    Tbl::Claims => self.claims.insert(key, v).db(ctx)?,
                    Tbl::Meta => self.meta.insert(key, v).db(ctx)?,
                    _ => {
                        if self.extensions.is_none() {
                            self.extensions = Some(txn.open_table(EXTENSIONS).db(ctx)?);
                        }
                        match self.extensions.as_mut() {
                            Some(e) => e.insert(key, v).db(ctx)?,
                            None => None,
                        }
                    }
                };
            }
            (k, None) => unreachable!("invariant: parse refuses a removal from {k:?}"),
        }
        Ok(())
    }
}

/// A row's key, borrowed from its record; ordered as redb orders the table's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key<'a> {
    /// Manifest, claims, extensions, meta.
    Str(&'a str),
    History(&'a str, u64),
    Log(u64),
}

/// One row of a redo: put `value`, or remove (`None`, history only).
#[derive(Clone, Copy, Debug)]
struct Row<'a> {
    table: Tbl,
    key: Key<'a>,
    value: Option<&'a [u8]>,
}

/// Reads a record's rows into `out`, refusing what no group writes.
fn parse<'a>(path: &Path, group: u64, payload: &'a [u8], out: &mut Vec<Row<'a>>) -> Result<()> {
    let mut r = Reader::new(payload, "write-ahead record");
    while r.remaining() > 0 {
        let table = Tbl::of(r.u8()?)
            .ok_or_else(|| damaged(path, format!("record {group} names an unknown table")))?;
        let remove = match r.u8()? {
            0 => false,
            1 => true,
            k => return Err(damaged(path, format!("record {group}: operation kind {k}"))),
        };
        if remove && table != Tbl::History {
            return Err(damaged(
                path,
                format!("record {group}: a removal from {table:?}, which no group writes"),
            ));
        }
        let key = match table {
            Tbl::History => Key::History(r.str_ref()?, r.u64()?),
            Tbl::Log => Key::Log(r.u64()?),
            _ => Key::Str(r.str_ref()?),
        };
        let value = if remove {
            None
        } else {
            let len = r.u32()? as usize;
            Some(r.take(len)?)
        };
        out.push(Row { table, key, value });
    }
    Ok(())
}

/// The number of the newest group applied to the store's database (0: none yet, or a store from
/// before the write-ahead log).
pub(crate) fn applied_group(
    meta_table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<u64> {
    if meta_table
        .get(meta::WAL_GROUP)
        .db("read the meta table")?
        .is_none()
    {
        return Ok(0);
    }
    meta::get(meta_table, meta::WAL_GROUP)
}

/// The write-ahead log of a store opened read-write.
#[derive(Debug)]
pub(crate) struct Wal {
    db: redb::Database,
    path: PathBuf,
    state: parking_lot::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Records up to this group are covered by a synced commit of the store's database and may
    /// be trimmed (by the checkpoint's applier, [`Wal::trim`]).
    checkpointed: u64,
    /// Records up to this group are trimmed.
    trimmed: u64,
    /// Bytes and records appended since the last checkpoint.
    bytes: u64,
    groups: u64,
    /// When the last checkpoint was taken (the store's clock, ms).
    last_checkpoint_ms: u64,
}

/// A checkpoint is taken once this many ms (of the store's clock) have passed since the last
/// one, provided at least [`CHECKPOINT_MIN_GROUPS`] records were appended since: it writes the
/// pages of every group since then at once, so it is worth its stall only over many groups, and a
/// handful of records costs recovery nothing.
pub(crate) const CHECKPOINT_INTERVAL_MS: u64 = 1_000;
pub(crate) const CHECKPOINT_MIN_GROUPS: u64 = 64;
/// Whatever the time, a checkpoint is taken once this many bytes or records were appended since
/// the last one: it bounds the log, the unsynced pages and the replay after a crash.
pub(crate) const CHECKPOINT_BYTES: u64 = 64 << 20;
pub(crate) const CHECKPOINT_MAX_GROUPS: u64 = 100_000;

impl Wal {
    /// The log in `db` (opened and created by `store::open`, the file at `path`); `now_ms` is
    /// when the checkpoint interval starts.
    pub(crate) fn new(db: redb::Database, path: PathBuf, now_ms: u64) -> Result<Wal> {
        let mut txn = db.begin_write().db("begin the write-ahead log")?;
        txn.set_durability(redb::Durability::Immediate)
            .db("set the durability")?;
        txn.open_table(WAL).db("create the write-ahead log")?;
        txn.commit().db("create the write-ahead log")?;
        Ok(Wal {
            db,
            path,
            state: parking_lot::Mutex::new(State {
                last_checkpoint_ms: now_ms,
                ..State::default()
            }),
        })
    }

    /// Whether the group at `now_ms` should be a checkpoint (a synced commit of the store's
    /// database) rather than a record.
    pub(crate) fn checkpoint_due(&self, now_ms: u64) -> bool {
        let s = self.state.lock();
        let timed = now_ms.saturating_sub(s.last_checkpoint_ms) >= CHECKPOINT_INTERVAL_MS
            || now_ms < s.last_checkpoint_ms;
        s.bytes >= CHECKPOINT_BYTES
            || s.groups >= CHECKPOINT_MAX_GROUPS
            || (timed && s.groups >= CHECKPOINT_MIN_GROUPS)
    }

    /// Notes that the store's database is durable through `group` (at `now_ms`).
    pub(crate) fn checkpointed(&self, group: u64, now_ms: u64) {
        let mut s = self.state.lock();
        s.checkpointed = s.checkpointed.max(group);
        s.bytes = 0;
        s.groups = 0;
        s.last_checkpoint_ms = now_ms;
    }

    /// Appends `record` as group `group` and makes it durable (one synced redb commit; `sync`
    /// is false only for a benchmark's floor). Called by the commit leader only, so appends are
    /// in group order. It trims nothing: the records a checkpoint covers are removed by the
    /// checkpoint's applier ([`Wal::trim`]), off the commit path.
    pub(crate) fn append(&self, group: u64, record: &[u8], sync: bool) -> Result<()> {
        let mut txn = self.db.begin_write().db("begin a write-ahead append")?;
        txn.set_durability(if sync {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        })
        .db("set the durability")?;
        {
            let mut t = txn.open_table(WAL).db("open the write-ahead log")?;
            t.insert(group, record)
                .db("append to the write-ahead log")?;
        }
        txn.commit().db("commit a write-ahead append")?;
        let mut s = self.state.lock();
        s.bytes += record.len() as u64;
        s.groups += 1;
        Ok(())
    }

    /// Removes the records a checkpoint covers ([`Wal::checkpointed`]), if any are left. Called by
    /// whoever took the checkpoint (the applier), not by the leader: the leader's append then
    /// writes one row only. Not synced: a trim lost in a crash leaves records at or below the
    /// database's `wal_group`, which recovery skips; the next synced append makes it durable.
    pub(crate) fn trim(&self) -> Result<()> {
        let (trim_to, trimmed) = {
            let s = self.state.lock();
            (s.checkpointed, s.trimmed)
        };
        if trim_to <= trimmed {
            return Ok(());
        }
        let mut txn = self
            .db
            .begin_write()
            .db("begin trimming the write-ahead log")?;
        txn.set_durability(redb::Durability::None)
            .db("set the durability")?;
        {
            let mut t = txn.open_table(WAL).db("open the write-ahead log")?;
            t.retain_in(..=trim_to, |_, _| false)
                .db("trim the write-ahead log")?;
        }
        txn.commit().db("trim the write-ahead log")?;
        let mut s = self.state.lock();
        s.trimmed = s.trimmed.max(trim_to);
        Ok(())
    }

    /// How many records the log holds (tests: what a checkpoint trimmed, what a group appended).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn records(&self) -> Result<u64> {
        use redb::ReadableTableMetadata;
        let txn = self.db.begin_read().db("read the write-ahead log")?;
        let t = txn.open_table(WAL).db("open the write-ahead log")?;
        t.len().db("count the write-ahead log")
    }

    /// Removes every record (after a checkpoint that covers them all: on close), synced.
    pub(crate) fn trim_all(&self) -> Result<()> {
        let mut txn = self
            .db
            .begin_write()
            .db("begin trimming the write-ahead log")?;
        txn.set_durability(redb::Durability::Immediate)
            .db("set the durability")?;
        {
            let mut t = txn.open_table(WAL).db("open the write-ahead log")?;
            t.retain(|_, _| false).db("trim the write-ahead log")?;
        }
        txn.commit().db("trim the write-ahead log")
    }

    /// Recovery on open: applies to `main` every record after the group it holds, in order, in
    /// one synced transaction, then trims the log. Returns the number of groups replayed.
    ///
    /// The records after the applied group are contiguous: groups are appended one at a time,
    /// in order, each only after the previous one was made durable (or checkpointed), so a gap
    /// means damage, and is refused rather than skipped.
    pub(crate) fn recover(&self, main: &redb::Database) -> Result<u64> {
        let applied = {
            let txn = main.begin_read().db("begin a read transaction")?;
            applied_group(&txn.open_table(META).db("open the meta table")?)?
        };
        let mut replayed = 0u64;
        let mut last = applied;
        {
            let rtxn = self.db.begin_read().db("read the write-ahead log")?;
            let t = rtxn.open_table(WAL).db("open the write-ahead log")?;
            let mut rows = t
                .range(applied.saturating_add(1)..)
                .db("read the write-ahead log")?
                .peekable();
            if rows.peek().is_some() {
                let mut txn = main.begin_write().db("begin the write-ahead replay")?;
                txn.set_durability(redb::Durability::Immediate)
                    .db("set the durability")?;
                let mut tables = RedoTables::open(&txn)?;
                for row in rows {
                    let (k, v) = row.db("read the write-ahead log")?;
                    let group = k.value();
                    if group != last + 1 {
                        return Err(damaged(
                            &self.path,
                            format!(
                                "group {} follows group {last}; the groups in between are missing",
                                group
                            ),
                        ));
                    }
                    tables.apply(
                        &txn,
                        &self.path,
                        group,
                        unframe(&self.path, group, v.value())?,
                    )?;
                    last = group;
                    replayed += 1;
                }
                {
                    // Every record stamps `wal_group` itself; check that the last one did.
                    let stamped = applied_group(&tables.meta)?;
                    if stamped != last {
                        return Err(damaged(
                            &self.path,
                            format!("record {last} leaves the applied group at {stamped}"),
                        ));
                    }
                }
                drop(tables);
                txn.commit().db("commit the write-ahead replay")?;
            }
        }
        self.checkpointed(last, 0);
        self.state.lock().last_checkpoint_ms = 0;
        self.trim_all()?;
        self.state.lock().trimmed = last;
        Ok(replayed)
    }
}

/// For a read-only open: whether `dir`'s write-ahead log holds groups the store's database does
/// not (a store that crashed and was not opened read-write since). Such a store cannot be read
/// as it stands without writing it.
pub(crate) fn has_unapplied(dir: &Path, db: &dyn ReadableDatabase) -> Result<bool> {
    let path = dir.join(WAL_FILE);
    if !path.exists() {
        return Ok(false);
    }
    let applied = {
        let txn = db.begin_read().db("begin a read transaction")?;
        applied_group(&txn.open_table(META).db("open the meta table")?)?
    };
    let wal = match redb::Builder::new().open_read_only(&path) {
        Ok(w) => w,
        // It needs recovery: it may hold groups.
        Err(redb::DatabaseError::RepairAborted) => return Ok(true),
        Err(e) => return Err(damaged(&path, e.to_string())),
    };
    let txn = wal.begin_read().db("read the write-ahead log")?;
    let t = match txn.open_table(WAL) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(false),
        Err(e) => return Err(Error::db("open the write-ahead log", e)),
    };
    let mut rows = t
        .range(applied.saturating_add(1)..)
        .db("read the write-ahead log")?;
    Ok(rows.next().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_record_is_refused() {
        let mut r = Redo::default();
        r.manifest("a", b"v");
        r.log(7, b"rec");
        let mut f = GroupRedo::new(3, r, 1).frame();
        let p = Path::new("wal.redb");
        assert!(unframe(p, 3, &f).is_ok());
        assert!(
            unframe(p, 4, &f).is_err(),
            "a record under another group's key"
        );
        let n = f.len();
        f[n / 2] ^= 1;
        assert!(unframe(p, 3, &f).is_err());
    }

    use crate::schema::manifest::test_entry as entry;

    fn group(number: u64, puts: &[(&str, EntryValue)]) -> GroupRedo {
        let mut r = Redo::default();
        for (unit, v) in puts {
            r.manifest(unit, &v.encode(unit));
        }
        GroupRedo::new(number, r, puts.len())
    }

    /// (unit, seq) → entry of the history, and unit → entry of the manifest, as of `db`.
    type Tables = (
        std::collections::BTreeMap<(String, u64), EntryValue>,
        std::collections::BTreeMap<String, EntryValue>,
    );

    fn tables(db: &redb::Database) -> Tables {
        let txn = db.begin_read().unwrap();
        let h = txn.open_table(HISTORY).unwrap();
        let m = txn.open_table(MANIFEST).unwrap();
        let history = h
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                let (u, s) = k.value();
                let e = EntryValue::decode_history(u, s, v.value()).unwrap();
                ((u.to_string(), s), e)
            })
            .collect();
        let manifest = m
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                let e = EntryValue::decode(k.value(), v.value()).unwrap();
                (k.value().to_string(), e)
            })
            .collect();
        (history, manifest)
    }

    fn applied(batches: &[&[GroupRedo]], replay: bool) -> Result<Tables> {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("t.redb")).unwrap();
        for groups in batches {
            let txn = db.begin_write().unwrap();
            if replay {
                let mut t = RedoTables::open(&txn)?;
                for g in groups.iter() {
                    t.apply(&txn, Path::new("t"), g.group, g.payload())?;
                }
            } else {
                apply_groups(&txn, Path::new("t"), groups)?;
            }
            txn.commit().unwrap();
        }
        Ok(tables(&db))
    }

    #[test]
    fn a_replaced_entry_becomes_a_history_row_and_a_current_one_does_not() {
        let (a1, a2, a3, b1) = (entry(1, 1), entry(2, 2), entry(4, 3), entry(3, 1));
        let want_history: std::collections::BTreeMap<_, _> =
            [(("a".to_string(), 1), a1), (("a".to_string(), 2), a2)].into();
        let want_manifest: std::collections::BTreeMap<_, _> =
            [("a".to_string(), a3), ("b".to_string(), b1)].into();
        // One batch (sorted, two replacements of one unit in it), one batch per group, and the
        // replay's record-by-record path: the same tables.
        let once = applied(&[&[g1_(), g2_(), g3_()]], false).unwrap();
        assert_eq!(once, (want_history, want_manifest));
        let apart = applied(&[&[g1_()], &[g2_()], &[g3_()]], false).unwrap();
        assert_eq!(apart, once);
        let replayed = applied(&[&[g1_(), g2_(), g3_()]], true).unwrap();
        assert_eq!(replayed, once);
        // The same entry written again replaces nothing.
        let again = applied(&[&[g1_()], &[group(2, &[("b", b1)])]], false).unwrap();
        assert!(again.0.is_empty(), "{again:?}");

        // The entries above, as the groups that commit them.
        fn g1_() -> GroupRedo {
            group(1, &[("a", entry(1, 1)), ("b", entry(3, 1))])
        }
        fn g2_() -> GroupRedo {
            group(2, &[("a", entry(2, 2))])
        }
        fn g3_() -> GroupRedo {
            group(3, &[("a", entry(4, 3))])
        }
    }

    #[test]
    fn an_entry_replaced_by_an_older_seq_is_refused_as_damage() {
        let err = applied(
            &[
                &[group(1, &[("a", entry(5, 1))])],
                &[group(2, &[("a", entry(4, 2))])],
            ],
            false,
        )
        .unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains("would replace the entry of seq 5"),
            "{err}"
        );
    }
}
