//! The persisted dedup index (`index.snap`, like Bitcask's hint files): opening a large store
//! loads the index with one sequential read instead of scanning the whole manifest (SPEC P6).
//!
//! A clean close writes the index as it stands, with the seq it reflects. Opening uses it only if
//! everything about it checks out, and then catches up by replaying the commit log records after
//! that seq; anything off falls back to the full manifest scan. The snapshot is never deleted: it
//! stays a valid base after a crash (the replay catches up), and is rewritten on the next clean
//! close.
//!
//! The file's layout and the encoding of its records are the schema's
//! (`crate::schema::index_snap`).
//!
//! Invariants the loader holds (an index entry that disagrees with the manifest is a correctness
//! bug, since commits and reconcile trust the index):
//! - the file is whole (length, CRC), of this store (store id), and of this database history:
//!   its seq is at most the store's last seq and the log record at that seq still has the
//!   recorded CRC (a restored or replaced database fails this);
//! - the table is well formed: a free position exists (probes end) and every hash sits in the
//!   probe run that starts at its home position (lookups find it);
//! - after the catch-up, an index with no ambiguous hash holds exactly as many units as the
//!   manifest.

use crate::error::{Error, IoContext, Result};
use crate::index::{home, zeroed_vec, DedupIndex, Lookup, Pod, Slot, EMPTY};
#[cfg(test)]
use crate::object::{ObjectId, ObjectMeta};
use crate::schema::index_snap::{
    decode_hash, decode_trailer, put_hash, put_trailer, SlotRecord, SnapHeader, HASH_LEN,
    HEADER_LEN, SLOT_LEN, TRAILER_LEN,
};
use crate::schema::log::{LogTable, RecordBody};
use crate::schema::manifest::EntryValue;
use crate::vfs::{Vfs, VfsFile};
use redb::ReadTransaction;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::Path;

/// The snapshot's file name in the store directory.
pub(crate) const SNAP_FILE: &str = "index.snap";
const TMP_FILE: &str = "index.snap.tmp";
/// Bytes read (and CRC'd) at a time: large enough to be sequential, small enough not to matter
/// to P6's memory budget.
const CHUNK: usize = 1 << 20;

/// How opening built the dedup index (diagnostics and tests).
#[doc(hidden)]
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Whether the index came from `index.snap` (else from a full manifest scan).
    pub index_from_snapshot: bool,
    /// The seq the snapshot reflected, when it was used.
    pub snapshot_seq: Option<u64>,
    /// Log records replayed on top of the snapshot.
    pub replayed_records: u64,
    /// Why the snapshot was not used, when it was not.
    pub fallback: Option<String>,
    /// Key hashes the index marks ambiguous (shared by two units, or so it believes): 0 unless
    /// real 64-bit key-hash collisions exist. A replay that mistook an update for a new unit
    /// would show up here, while lookups stay exact.
    pub ambiguous: u64,
    /// Microseconds spent building the index (loading the snapshot and catching up, or the
    /// scan), out of the whole open: the rest is redb's open (and recovery after a crash) and
    /// the write-ahead log's replay.
    pub index_micros: u64,
}

/// Every field but the timing: a report prints the same for the same store state, so that the
/// deterministic simulation (`tests/durability/dst/`), which traces the reports, replays exactly.
impl std::fmt::Debug for OpenReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenReport")
            .field("index_from_snapshot", &self.index_from_snapshot)
            .field("snapshot_seq", &self.snapshot_seq)
            .field("replayed_records", &self.replayed_records)
            .field("fallback", &self.fallback)
            .field("ambiguous", &self.ambiguous)
            .finish_non_exhaustive()
    }
}

/// The CRC32 of the log record at `seq` (0 for seq 0, which has no record), or `None` if the
/// log has no record there.
pub(crate) fn record_crc(txn: &ReadTransaction, seq: u64) -> Result<Option<u32>> {
    if seq == 0 {
        return Ok(Some(0));
    }
    LogTable::open(txn)?.record_crc(seq)
}

/// Writes `index` (reflecting `seq`, whose log record has CRC `record_crc`) as the store's
/// snapshot: temp file, fsync, rename, fsync the directory — every step through the seam, so the
/// power-loss model sees (and may tear or drop) each of them.
pub(crate) fn write(
    vfs: &dyn Vfs,
    dir: &Path,
    store_id: u64,
    seq: u64,
    record_crc: u32,
    index: &DedupIndex,
) -> Result<()> {
    let (hashes, slots, ambiguous) = index.raw_parts();
    let ambiguous: Vec<u64> = ambiguous.collect();
    let header = SnapHeader {
        store_id,
        seq,
        record_crc,
        cap: hashes.len() as u64,
        len: index.len() as u64,
        ambiguous: ambiguous.len() as u64,
    };
    let tmp = dir.join(TMP_FILE);
    // A crash during an earlier write may have left the temp file behind; the seam only creates
    // new files.
    match vfs.remove(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io(format!("remove {}", tmp.display()), e))
        }
        _ => {}
    }
    let file = vfs
        .create_new_writable(&tmp)
        .ctx(|| format!("create {}", tmp.display()))?;
    let mut w = CrcWriter {
        file,
        buf: Vec::with_capacity(CHUNK + 64),
        crc: crc32fast::Hasher::new(),
    };
    let io = |e| Error::io(format!("write {}", tmp.display()), e);
    w.put(|b| b.extend_from_slice(&header.encode()))
        .map_err(io)?;
    for &h in hashes {
        w.put(|b| put_hash(b, h)).map_err(io)?;
    }
    for s in slots {
        let record = SlotRecord {
            source_version: s.source_version,
            seq: s.seq,
            object: s.object,
        };
        w.put(|b| record.encode(b)).map_err(io)?;
    }
    for &h in &ambiguous {
        w.put(|b| put_hash(b, h)).map_err(io)?;
    }
    w.drain().map_err(io)?;
    let mut trailer = Vec::with_capacity(TRAILER_LEN);
    put_trailer(&mut trailer, w.crc.finalize());
    let mut file = w.file;
    file.write_all(&trailer).map_err(io)?;
    file.flush().map_err(io)?;
    file.sync().ctx(|| format!("fsync {}", tmp.display()))?;
    drop(file);
    let path = dir.join(SNAP_FILE);
    vfs.rename(&tmp, &path)
        .ctx(|| format!("rename to {}", path.display()))?;
    vfs.sync_dir(dir).ctx(|| format!("fsync {}", dir.display()))
}

/// Buffers whole chunks, so the CRC and the write each see large slices.
struct CrcWriter {
    file: Box<dyn VfsFile>,
    buf: Vec<u8>,
    crc: crc32fast::Hasher,
}

impl CrcWriter {
    /// Appends what `encode` writes, draining whole chunks.
    fn put(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> std::io::Result<()> {
        encode(&mut self.buf);
        if self.buf.len() >= CHUNK {
            self.drain()?;
        }
        Ok(())
    }

    fn drain(&mut self) -> std::io::Result<()> {
        self.crc.update(&self.buf);
        self.file.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

/// An index loaded from the snapshot and caught up with the log.
pub(crate) struct Loaded {
    pub(crate) index: DedupIndex,
    pub(crate) snapshot_seq: u64,
    pub(crate) replayed_records: u64,
}

/// Why the snapshot was not used (the caller falls back to the full scan).
pub(crate) type Fallback = String;

/// Loads the snapshot in `dir` if it belongs to this store and database history, and catches it
/// up to `last_seq` (as of `txn`, whose manifest holds `units` units).
pub(crate) fn load(
    vfs: &dyn Vfs,
    dir: &Path,
    txn: &ReadTransaction,
    store_id: u64,
    last_seq: u64,
    units: u64,
) -> std::result::Result<Loaded, Fallback> {
    let path = dir.join(SNAP_FILE);
    let actual_len = match vfs.metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("no snapshot".into()),
        Err(e) => return Err(format!("stat {}: {e}", path.display())),
    };
    // Streamed, not read whole: a 10M-unit snapshot is most of a gigabyte (P6's memory budget).
    // A file replaced between the stat and the open fails the length or CRC check below.
    let mut file = match vfs.open_read(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("no snapshot".into()),
        Err(e) => return Err(format!("open {}: {e}", path.display())),
    };
    let mut hb = [0u8; HEADER_LEN];
    file.read_exact(&mut hb)
        .map_err(|_| "shorter than its header".to_string())?;
    let header = SnapHeader::decode(&hb)?;
    check_header(&header, txn, store_id, last_seq, actual_len, units)?;
    let index = read_body(&mut *file, &hb, &header)?;
    let mut loaded = Loaded {
        index,
        snapshot_seq: header.seq,
        replayed_records: 0,
    };
    if last_seq > header.seq {
        let budget = catch_up_budget(units);
        loaded.replayed_records =
            catch_up(txn, &mut loaded.index, header.seq, last_seq, budget)
                .map_err(|e| format!("catching up with the log: {e}"))?
                .ok_or_else(|| {
                    format!(
                        "the log since it lists more than {budget} entries (a crash long after the last clean close): the manifest scan is cheaper"
                    )
                })?;
    }
    let len = loaded.index.len() as u64;
    let exact = if loaded.index.ambiguous_len() == 0 {
        len == units
    } else {
        len <= units
    };
    if !exact {
        return Err(format!(
            "after catching up it holds {len} units, the manifest {units}"
        ));
    }
    Ok(loaded)
}

/// Whether the snapshot's header fits this store and database history (see the module docs):
/// its store, a seq the log still holds with the recorded record CRC, the file's length, and a
/// table with a free position and no more units than the manifest.
fn check_header(
    header: &SnapHeader,
    txn: &ReadTransaction,
    store_id: u64,
    last_seq: u64,
    actual_len: u64,
    units: u64,
) -> std::result::Result<(), Fallback> {
    if header.store_id != store_id {
        return Err("it belongs to another store".into());
    }
    if header.seq > last_seq {
        return Err(format!(
            "it reflects seq {} but the store ends at {last_seq} (database restored?)",
            header.seq
        ));
    }
    match record_crc(txn, header.seq) {
        Ok(Some(crc)) if crc == header.record_crc => {}
        Ok(_) => {
            return Err(format!(
                "the log record at seq {} differs from the one it reflects (database replaced?)",
                header.seq
            ))
        }
        Err(e) => return Err(e.to_string()),
    }
    if header.file_len() != Some(actual_len) {
        return Err(format!(
            "{actual_len} bytes, its header implies {:?} (truncated?)",
            header.file_len()
        ));
    }
    if header.cap == 0 || header.len >= header.cap || header.len > units {
        return Err("its table is malformed".into());
    }
    Ok(())
}

/// Reads the arrays sequentially, in large chunks, straight into the index's own memory (one
/// copy, by the kernel; each chunk CRC'd while it is in cache), then checks the CRC and the
/// table's shape.
fn read_body(
    file: &mut dyn Read,
    header_bytes: &[u8; HEADER_LEN],
    h: &SnapHeader,
) -> std::result::Result<DedupIndex, Fallback> {
    let cap = usize::try_from(h.cap).map_err(|_| "its table is malformed".to_string())?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(header_bytes);
    let malformed = |_| "its table is malformed".to_string();
    let mut hashes: Vec<u64> = zeroed_vec(cap, false).map_err(malformed)?;
    read_pod(file, &mut hashes, &mut crc)?;
    let mut slots: Vec<Slot> = zeroed_vec(cap, false).map_err(malformed)?;
    read_pod(file, &mut slots, &mut crc)?;
    #[cfg(target_endian = "big")]
    {
        for x in &mut hashes {
            *x = u64::from_le(*x);
        }
        for s in &mut slots {
            s.source_version = u64::from_le(s.source_version);
            s.seq = u64::from_le(s.seq);
        }
    }
    let mut ambiguous = Vec::new();
    let mut buf = vec![0u8; CHUNK.min(h.ambiguous as usize * HASH_LEN).max(HASH_LEN)];
    read_region(
        file,
        &mut buf,
        &mut crc,
        h.ambiguous as usize,
        HASH_LEN,
        |r| {
            ambiguous.push(decode_hash(r)?);
            Ok(())
        },
    )?;
    let mut stored = [0u8; TRAILER_LEN];
    file.read_exact(&mut stored)
        .map_err(|_| "truncated".to_string())?;
    let stored = decode_trailer(&stored).map_err(|e| e.to_string())?;
    if crc.finalize() != stored {
        return Err("checksum mismatch (corrupt)".into());
    }
    let occupied = hashes.iter().filter(|&&x| x != EMPTY).count();
    if occupied as u64 != h.len || !probe_ok(&hashes) || ambiguous.contains(&EMPTY) {
        return Err("its table is malformed".into());
    }
    Ok(DedupIndex::from_raw_parts(
        hashes, slots, occupied, ambiguous,
    ))
}

// The file's records are exactly the in-memory ones.
const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_LEN);
const _: () = assert!(std::mem::size_of::<u64>() == HASH_LEN);

/// Fills `out` with the file's next `size_of_val(out)` bytes, read in chunks directly into its
/// memory, each chunk added to `crc` right after it lands.
fn read_pod<T: Pod>(
    file: &mut dyn Read,
    out: &mut [T],
    crc: &mut crc32fast::Hasher,
) -> std::result::Result<(), Fallback> {
    // SAFETY: `T: Pod` has no padding and no invalid bit patterns, so viewing its memory as
    // initialised bytes and writing any bytes into it is sound; the byte slice covers exactly
    // `out`'s memory and borrows `out` mutably for its whole life.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, std::mem::size_of_val(out))
    };
    for chunk in bytes.chunks_mut(CHUNK) {
        file.read_exact(chunk)
            .map_err(|_| "truncated".to_string())?;
        crc.update(chunk);
    }
    Ok(())
}

/// Reads `count` records of `rec_len` bytes, whole chunks at a time, adding them to `crc` and
/// handing each record to `each` (whose error, a record that does not decode, ends the read).
fn read_region(
    file: &mut dyn Read,
    buf: &mut [u8],
    crc: &mut crc32fast::Hasher,
    count: usize,
    rec_len: usize,
    mut each: impl FnMut(&[u8]) -> Result<()>,
) -> std::result::Result<(), Fallback> {
    let per_chunk = buf.len() / rec_len;
    let mut left = count;
    while left > 0 {
        let n = left.min(per_chunk);
        let chunk = &mut buf[..n * rec_len];
        file.read_exact(chunk)
            .map_err(|_| "truncated".to_string())?;
        crc.update(chunk);
        for r in chunk.chunks_exact(rec_len) {
            each(r).map_err(|e| e.to_string())?;
        }
        left -= n;
    }
    Ok(())
}

/// Whether every hash sits in the run of occupied positions that starts at its home, i.e. where
/// a lookup probes for it (the table must have a free position).
fn probe_ok(hashes: &[u64]) -> bool {
    let cap = hashes.len();
    let Some(free) = hashes.iter().position(|&x| x == EMPTY) else {
        return false;
    };
    // Walk the positions after `free` once round, in "unrolled" coordinates free+1 ..= free+cap.
    let mut run_start = free + 1;
    for p in free + 1..=free + cap {
        let x = hashes[p % cap];
        if x == EMPTY {
            run_start = p + 1;
            continue;
        }
        let hm = home(x, cap);
        let hm = if hm > free { hm } else { hm + cap };
        if hm < run_start || hm > p {
            return false;
        }
    }
    true
}

/// The most log entries a catch-up replays before it gives up for the manifest scan, for a
/// manifest of `units`: an entry costs more than a scanned unit (its record is decoded, and its
/// unit key is kept until the end to tell new units from updates, ~100 bytes), so past an eighth
/// of the units the scan is both faster and within P6's memory budget. A crash long after the
/// last clean close is where this matters: the tail then has no bound.
pub(crate) fn catch_up_budget(units: u64) -> u64 {
    units / 8 + 4096
}

/// Replays the commit records after `from` (through `to`) into `index`, exactly as the commit
/// leader would have applied them, and returns how many records it read; `None` (the index is
/// then half caught up, to be dropped) once the records list more than `budget` entries.
///
/// The leader tells the index whether a unit is *new* (had no manifest entry before), which is
/// what tells a key-hash collision from an update. The log does not say so, so it is derived:
/// units are never removed from the manifest, so unit U is new at seq s iff it was not in the
/// manifest as of `from` and no replayed record before s lists it. (HISTORY cannot answer this:
/// GC prunes superseded rows.) "Not in the manifest as of `from`" is read off the index itself,
/// which is exact as of `from`:
/// - U listed by an earlier replayed record: not new;
/// - hash absent: no unit with U's hash existed, so U is new;
/// - hash ambiguous: redb answers for it anyway, nothing to decide;
/// - present with a slot written by the replay (seq > `from`): that slot belongs to another unit
///   V of the replay (had U existed with that hash, V's arrival would have made it ambiguous),
///   so U is new and now collides;
/// - present with a slot from the snapshot (seq q ≤ `from`): the slot is the current entry of the
///   one unit W with that hash, so the log record at q lists W. U is W (not new) iff that record
///   lists U; if it does not, U did not exist (else U and W would have collided), so U is new.
fn catch_up(
    txn: &ReadTransaction,
    index: &mut DedupIndex,
    from: u64,
    to: u64,
    budget: u64,
) -> Result<Option<u64>> {
    let log = LogTable::open(txn)?;
    let mut seen: HashSet<String> = HashSet::new();
    // Units listed by the snapshot-era records consulted so far, by seq.
    let mut listed: HashMap<u64, HashSet<String>> = HashMap::new();
    let mut records = 0u64;
    let mut replayed_entries = 0u64;
    let mut expect = from + 1;
    for row in log.range(from + 1..=to)? {
        let (key, rec) = row?;
        let rec = rec?;
        if key != expect || rec.seq != expect {
            return Err(Error::Corrupt {
                path: "commit log".into(),
                detail: format!("expected log record {expect}, found {key}"),
            });
        }
        expect += 1;
        records += 1;
        let RecordBody::Commit { entries } = rec.body else {
            continue;
        };
        replayed_entries += entries.len() as u64;
        if replayed_entries > budget {
            return Ok(None);
        }
        for e in entries {
            let new_unit = if seen.contains(&e.unit) {
                false
            } else {
                match index.get(&e.unit) {
                    Lookup::Absent | Lookup::Ambiguous => true,
                    Lookup::Present(slot) if slot.seq > from => true,
                    Lookup::Present(slot) => {
                        let units = match listed.entry(slot.seq) {
                            Entry::Occupied(o) => o.into_mut(),
                            Entry::Vacant(v) => v.insert(units_of(&log, slot.seq)?),
                        };
                        !units.contains(&e.unit)
                    }
                }
            };
            let value = EntryValue {
                source_version: e.source_version,
                revision: e.revision,
                object: e.object,
                seq: rec.seq,
                committed_at_ms: rec.time_ms,
            };
            index.upsert(&e.unit, new_unit, &value);
            seen.insert(e.unit);
        }
    }
    if expect != to + 1 {
        return Err(Error::Corrupt {
            path: "commit log".into(),
            detail: format!("the log ends at {} before the store's seq {to}", expect - 1),
        });
    }
    Ok(Some(records))
}

/// The units a commit record lists.
fn units_of(log: &LogTable, seq: u64) -> Result<HashSet<String>> {
    let rec = log.get(seq)?.ok_or_else(|| Error::Corrupt {
        path: "commit log".into(),
        detail: format!("the index names seq {seq}, which the log lacks"),
    })?;
    match rec.body {
        RecordBody::Commit { entries } => Ok(entries.into_iter().map(|e| e.unit).collect()),
        _ => Err(Error::Corrupt {
            path: "commit log".into(),
            detail: format!("the index names seq {seq}, which is not a commit"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `index.snap` as written for the table in the test below, field by field.
    const GOLDEN: &str = concat!(
        // magic, version 1
        "4f4c494458534e5001000000",
        // store id 7, seq 9, record crc
        "07000000000000000900000000000000efbeadde",
        // capacity 2, units 1, ambiguous 1
        "020000000000000001000000000000000100000000000000",
        // key hashes
        "44443333222211110000000000000000",
        // slot 0: source version, seq
        "08070605040302012a00000000000000",
        // slot 0: object
        "abababababababababababababababababababababababababababababababab",
        // slot 1: empty
        "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
        // ambiguous hash, file crc
        "8888777766665555793ea60b",
    );

    #[test]
    fn probe_check_accepts_a_real_table_and_rejects_a_misplaced_hash() {
        let mut idx = DedupIndex::with_capacity(100);
        for i in 0..60u64 {
            let v = EntryValue {
                source_version: i,
                revision: 0,
                object: ObjectMeta {
                    id: ObjectId::of(&i.to_le_bytes()),
                    size: 1,
                    crc32: 0,
                },
                seq: i,
                committed_at_ms: 0,
            };
            idx.upsert(&format!("u{i}"), true, &v);
        }
        let (hashes, _, _) = idx.raw_parts();
        let mut hashes = hashes.to_vec();
        assert!(probe_ok(&hashes));
        // Move an occupied hash to a free position far from its home.
        let i = hashes.iter().position(|&x| x != EMPTY).unwrap();
        let x = hashes[i];
        let cap = hashes.len();
        let j = (0..cap)
            .map(|d| (home(x, cap) + cap / 2 + d) % cap)
            .find(|&j| hashes[j] == EMPTY)
            .unwrap();
        hashes[i] = EMPTY;
        hashes[j] = x;
        assert!(!probe_ok(&hashes));
    }

    /// The loader reads the hash and slot regions straight into the index's memory (`read_pod`):
    /// what it gets must be exactly what the field-by-field decoders read from the same bytes,
    /// and a flipped byte anywhere must fail the CRC.
    #[test]
    fn the_direct_read_matches_the_record_decoders() {
        let mut idx = DedupIndex::with_capacity(300);
        for i in 0..200u64 {
            let v = EntryValue {
                source_version: i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                revision: 0,
                object: ObjectMeta {
                    id: ObjectId::of(&i.to_le_bytes()),
                    size: 1,
                    crc32: 0,
                },
                seq: u64::MAX - i,
                committed_at_ms: 0,
            };
            idx.upsert(&format!("u{i}"), true, &v);
        }
        let dir = tempfile::tempdir().unwrap();
        write(&crate::vfs::RealVfs, dir.path(), 1, 2, 3, &idx).unwrap();
        let bytes = std::fs::read(dir.path().join(SNAP_FILE)).unwrap();
        let hb: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        let header = SnapHeader::decode(&hb).unwrap();
        let cap = header.cap as usize;
        let loaded = read_body(&mut &bytes[HEADER_LEN..], &hb, &header).unwrap();
        let (hashes, slots, _) = loaded.raw_parts();
        let hash_region = &bytes[HEADER_LEN..HEADER_LEN + cap * HASH_LEN];
        let slot_region = &bytes[HEADER_LEN + cap * HASH_LEN..][..cap * SLOT_LEN];
        for (i, r) in hash_region.chunks_exact(HASH_LEN).enumerate() {
            assert_eq!(hashes[i], decode_hash(r).unwrap());
        }
        for (i, r) in slot_region.chunks_exact(SLOT_LEN).enumerate() {
            let s = SlotRecord::decode(r).unwrap();
            let want = Slot {
                source_version: s.source_version,
                seq: s.seq,
                object: s.object,
            };
            assert_eq!(slots[i], want, "slot {i}");
        }
        let (want_h, want_s, _) = idx.raw_parts();
        assert_eq!((hashes, slots), (want_h, want_s));
        assert_eq!(loaded.len(), idx.len());
        for at in [
            HEADER_LEN + 3,
            HEADER_LEN + cap * HASH_LEN + 17,
            bytes.len() - 5,
        ] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(
                read_body(&mut &bad[HEADER_LEN..], &hb, &header).is_err(),
                "byte {at}"
            );
        }
    }

    /// The file `write` produces for a fixed two-position table with one ambiguous hash, byte
    /// for byte: the format every existing `index.snap` is in (captured from the encoder that
    /// wrote each field at a hand-written offset).
    #[test]
    fn the_file_format_is_byte_for_byte_the_established_one() {
        let slot = Slot {
            source_version: 0x0102_0304_0506_0708,
            seq: 42,
            object: ObjectId([0xab; 32]),
        };
        let index = DedupIndex::from_raw_parts(
            vec![0x1111_2222_3333_4444, EMPTY],
            vec![slot, Slot::default()],
            1,
            [0x5555_6666_7777_8888],
        );
        let dir = tempfile::tempdir().unwrap();
        write(&crate::vfs::RealVfs, dir.path(), 7, 9, 0xdead_beef, &index).unwrap();
        let bytes = std::fs::read(dir.path().join(SNAP_FILE)).unwrap();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, GOLDEN);
    }
}
