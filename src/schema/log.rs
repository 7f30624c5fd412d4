//! The write-ahead commit log: every state change as a self-contained, CRC32-framed, versioned
//! record, kept in redb under its seq (SPEC R8).
//!
//! Frame (little-endian):
//!
//! ```text
//! magic "OL" (2) | format version (1) | kind (1) | payload length (4) | payload | crc32 (4)
//! ```
//!
//! The CRC covers everything before it. A record decodes without the rest of the store, so the log
//! alone can rebuild the manifest (`verify --deep`) or feed a change stream.
//!
//! `LogTable` is the one reader of the `LOG` table: the change feed, replay, verify, GC, the
//! index catch-up on open and the pipelines all read records through it.

use super::codec::{put_str, put_u32, put_u64, Reader};
use crate::error::DbContext;
use crate::error::{Error, Result};
use crate::object::{ObjectId, ObjectMeta};
use redb::ReadOnlyTable;
use std::collections::HashSet;
use std::ops::RangeBounds;

const MAGIC: [u8; 2] = *b"OL";
/// The newest record format this build writes and reads.
pub const RECORD_FORMAT: u8 = 1;
const HEADER: usize = 8;
/// The largest payload a record may carry. The decoder refuses anything longer (before
/// allocating for it), so the writers refuse, before anything is written, every commit or
/// extension whose record would be longer: every record in the log can be read back.
pub const MAX_RECORD_PAYLOAD: usize = 64 << 20;
const MAX_PAYLOAD: usize = MAX_RECORD_PAYLOAD;
/// seq and time_ms, in front of every body.
const PAYLOAD_PREFIX: usize = 8 + 8;

/// The payload length of the commit record of entries with these keys, each carrying a token or
/// not: exactly what [`Record::encode`] writes for them.
pub(crate) fn commit_payload_len<'a>(entries: impl Iterator<Item = (&'a str, bool)>) -> usize {
    // str (len u32 + bytes) | source_version u64 | revision u32 | blake3 32 | size u64 | crc32 u32
    // | token flag u8 [| token u64]
    const FIXED: usize = 4 + 8 + 4 + 32 + 8 + 4 + 1;
    entries.fold(PAYLOAD_PREFIX + 4, |n, (unit, token)| {
        n + FIXED + unit.len() + if token { 8 } else { 0 }
    })
}

/// The payload length of an extension record carrying `data_len` bytes.
pub(crate) fn extension_payload_len(data_len: usize) -> usize {
    PAYLOAD_PREFIX + 2 + 4 + data_len
}

/// One entry made visible by a commit (on the wire: the object's fields inline, as an
/// [`crate::Entry`]'s).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LogEntry {
    /// Unit key.
    pub unit: String,
    /// Source version.
    pub source_version: u64,
    /// Revision (0, or +1 per correction).
    pub revision: u32,
    /// Object hash, size and CRC32.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub object: ObjectMeta,
    /// The fencing token the writer carried, if any.
    pub token: Option<u64>,
}

/// A claim-state change (coordinator mode): the lease granted or released. In a
/// [`RecordBody::ClaimReleased`] record `expires_at_ms` is 0.
pub type ClaimChange = super::claim::Lease;

/// What a log record says happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordBody {
    /// Entries became visible, atomically.
    Commit {
        /// The entries, in the order the commit listed them.
        entries: Vec<LogEntry>,
    },
    /// A lease was granted (new, renewed or taken over).
    ClaimGranted(ClaimChange),
    /// A lease was given back.
    ClaimReleased(ClaimChange),
    /// An opaque record of a higher layer (pipelines): a tag and bytes.
    Extension {
        /// What kind of extension record.
        tag: u16,
        /// Its payload.
        data: Vec<u8>,
    },
}

impl RecordBody {
    fn kind(&self) -> u8 {
        match self {
            RecordBody::Commit { .. } => 1,
            RecordBody::ClaimGranted(_) => 2,
            RecordBody::ClaimReleased(_) => 3,
            RecordBody::Extension { .. } => 4,
        }
    }
}

/// A decoded log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its sequence number.
    pub seq: u64,
    /// Wall-clock time it was written, ms since the Unix epoch.
    pub time_ms: u64,
    /// What happened.
    pub body: RecordBody,
}

impl Record {
    /// Encodes the record into its framed form.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(64);
        put_u64(&mut p, self.seq);
        put_u64(&mut p, self.time_ms);
        match &self.body {
            RecordBody::Commit { entries } => {
                put_u32(&mut p, entries.len() as u32);
                for e in entries {
                    put_str(&mut p, &e.unit);
                    put_u64(&mut p, e.source_version);
                    put_u32(&mut p, e.revision);
                    p.extend_from_slice(&e.object.id.0);
                    put_u64(&mut p, e.object.size);
                    put_u32(&mut p, e.object.crc32);
                    match e.token {
                        Some(t) => {
                            p.push(1);
                            put_u64(&mut p, t);
                        }
                        None => p.push(0),
                    }
                }
            }
            RecordBody::ClaimGranted(c) | RecordBody::ClaimReleased(c) => {
                put_str(&mut p, &c.unit);
                put_str(&mut p, &c.worker);
                put_u64(&mut p, c.token);
                put_u64(&mut p, c.source_version);
                put_u64(&mut p, c.expires_at_ms);
            }
            RecordBody::Extension { tag, data } => {
                p.extend_from_slice(&tag.to_le_bytes());
                put_u32(&mut p, data.len() as u32);
                p.extend_from_slice(data);
            }
        }
        // The writers refuse oversized commits and extensions up front (`Batch::validate`,
        // `Op::check_record_size`); a record the decoder would refuse must never reach the log.
        assert!(
            p.len() <= MAX_PAYLOAD,
            "invariant: a {}-byte record payload passed the up-front size checks (limit {MAX_PAYLOAD})",
            p.len()
        );
        let mut out = Vec::with_capacity(HEADER + p.len() + 4);
        out.extend_from_slice(&MAGIC);
        out.push(RECORD_FORMAT);
        out.push(self.body.kind());
        put_u32(&mut out, p.len() as u32);
        out.extend_from_slice(&p);
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        out
    }

    /// Checks a record's frame (length, magic, format, CRC) and returns its kind and payload.
    fn unframe(bytes: &[u8]) -> Result<(u8, &[u8])> {
        if bytes.len() < HEADER + 4 {
            return Err(bad(format!(
                "{} bytes is shorter than a frame",
                bytes.len()
            )));
        }
        if bytes[0..2] != MAGIC {
            return Err(bad("bad magic".into()));
        }
        let version = bytes[2];
        if version == 0 || version > RECORD_FORMAT {
            return Err(bad(format!(
                "record format {version} is not supported (this build reads 1..={RECORD_FORMAT})"
            )));
        }
        let kind = bytes[3];
        let len = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
        if len > MAX_PAYLOAD || bytes.len() != HEADER + len + 4 {
            return Err(bad(format!(
                "payload length {len} does not match the frame of {} bytes",
                bytes.len()
            )));
        }
        let crc_at = HEADER + len;
        let stored = u32::from_le_bytes(bytes[crc_at..crc_at + 4].try_into().expect("4 bytes"));
        let actual = crc32fast::hash(&bytes[..crc_at]);
        if stored != actual {
            return Err(bad(format!(
                "crc32 mismatch (stored {stored:08x}, computed {actual:08x})"
            )));
        }
        Ok((kind, &bytes[HEADER..crc_at]))
    }

    /// The entries of a commit record's payload.
    fn decode_entries(r: &mut Reader<'_>) -> Result<Vec<LogEntry>> {
        let n = r.u32()? as usize;
        // Each entry takes at least 59 bytes: bound the allocation by the input.
        if n > r.remaining() / 59 {
            return Err(bad(format!("{n} entries cannot fit the payload")));
        }
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let unit = r.string()?;
            let source_version = r.u64()?;
            let revision = r.u32()?;
            let id = ObjectId(r.take(32)?.try_into().expect("32 bytes"));
            let size = r.u64()?;
            let crc32 = r.u32()?;
            let token = match r.u8()? {
                0 => None,
                1 => Some(r.u64()?),
                t => return Err(bad(format!("token flag {t} is neither 0 nor 1"))),
            };
            entries.push(LogEntry {
                unit,
                source_version,
                revision,
                object: ObjectMeta { id, size, crc32 },
                token,
            });
        }
        Ok(entries)
    }

    /// Decodes one framed record. Every malformed input is an error, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Record> {
        let (kind, payload) = Self::unframe(bytes)?;
        let mut r = Reader::new(payload, "log record");
        let seq = r.u64()?;
        let time_ms = r.u64()?;
        let body = match kind {
            1 => RecordBody::Commit {
                entries: Self::decode_entries(&mut r)?,
            },
            2 | 3 => {
                let c = ClaimChange {
                    unit: r.string()?,
                    worker: r.string()?,
                    token: r.u64()?,
                    source_version: r.u64()?,
                    expires_at_ms: r.u64()?,
                };
                if kind == 2 {
                    RecordBody::ClaimGranted(c)
                } else {
                    RecordBody::ClaimReleased(c)
                }
            }
            4 => {
                let tag = r.u16()?;
                let n = r.u32()? as usize;
                let data = r.take(n)?.to_vec();
                RecordBody::Extension { tag, data }
            }
            k => return Err(bad(format!("unknown record kind {k}"))),
        };
        r.finish()?;
        Ok(Record { seq, time_ms, body })
    }
}

/// The commit log as of one read transaction: the one place that reads and decodes `LOG` rows.
pub(crate) struct LogTable(ReadOnlyTable<u64, &'static [u8]>);

/// One row of a scan: its key, and its record or why it does not decode.
pub(crate) type LogRow = (u64, Result<Record>);

impl LogTable {
    /// Opens the log as of `txn`.
    pub(crate) fn open(txn: &redb::ReadTransaction) -> Result<LogTable> {
        Ok(LogTable(txn.open_table(super::LOG).db("open the log")?))
    }

    /// The rows with keys in `range`, oldest first. A row redb cannot read is an `Err` item; a
    /// row that does not decode is an `Ok` item with the decode error, for callers that report
    /// and go on (verify) as well as those that stop (`?` on it).
    pub(crate) fn range(
        &self,
        range: impl RangeBounds<u64>,
    ) -> Result<impl Iterator<Item = Result<LogRow>>> {
        let rows = self.0.range(range).db("scan the commit log")?;
        Ok(rows.map(|row| {
            let (k, v) = row.db("scan the commit log")?;
            Ok((k.value(), Record::decode(v.value())))
        }))
    }

    /// Every row, oldest first (see [`LogTable::range`]).
    pub(crate) fn iter(&self) -> Result<impl Iterator<Item = Result<LogRow>>> {
        self.range(..)
    }

    /// The record at `seq`, or `None` if the log has no row there.
    pub(crate) fn get(&self, seq: u64) -> Result<Option<Record>> {
        match self.0.get(seq).db("read the log")? {
            Some(g) => Record::decode(g.value()).map(Some),
            None => Ok(None),
        }
    }

    /// The record at `seq` if it is there and decodes (verify's lookups, which report the rest).
    pub(crate) fn get_decodable(&self, seq: u64) -> Result<Option<Record>> {
        Ok(self
            .0
            .get(seq)
            .db("read the commit log")?
            .and_then(|g| Record::decode(g.value()).ok()))
    }

    /// The CRC32 of the record at `seq` (its frame's own trailing CRC), or `None` if the log has
    /// no row there.
    pub(crate) fn record_crc(&self, seq: u64) -> Result<Option<u32>> {
        let crc = self.0.get(seq).db("read the log")?.map(|g| {
            // A CRC over data followed by its CRC is a constant: hash everything but the
            // trailing CRC (which is the record's CRC32).
            let b = g.value();
            crc32fast::hash(&b[..b.len().saturating_sub(4)])
        });
        Ok(crc)
    }

    /// The objects of every commit record with a seq in `range`.
    pub(crate) fn objects_committed(
        &self,
        range: impl RangeBounds<u64>,
    ) -> Result<HashSet<ObjectId>> {
        let mut ids = HashSet::new();
        for row in self.range(range)? {
            if let RecordBody::Commit { entries } = row?.1?.body {
                ids.extend(entries.iter().map(|e| e.object.id));
            }
        }
        Ok(ids)
    }
}

fn bad(detail: String) -> Error {
    Error::BadRecord(detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            seq: 42,
            time_ms: 1_700_000_000_123,
            body: RecordBody::Commit {
                entries: vec![LogEntry {
                    unit: "orders/customer=42".into(),
                    source_version: 7,
                    revision: 1,
                    object: ObjectMeta {
                        id: ObjectId::of(b"hello"),
                        size: 5,
                        crc32: crc32fast::hash(b"hello"),
                    },
                    token: Some(9),
                }],
            },
        }
    }

    #[test]
    fn the_size_checks_compute_exactly_the_encoded_payload() {
        let entry = |unit: &str, token| LogEntry {
            unit: unit.into(),
            source_version: 1,
            revision: 0,
            object: ObjectMeta {
                id: ObjectId::of(b"x"),
                size: 1,
                crc32: 0,
            },
            token,
        };
        let entries = vec![entry("a", None), entry("bb/ccc", Some(7)), entry("", None)];
        let expected =
            commit_payload_len(entries.iter().map(|e| (e.unit.as_str(), e.token.is_some())));
        let rec = Record {
            seq: 1,
            time_ms: 2,
            body: RecordBody::Commit { entries },
        };
        assert_eq!(rec.encode().len(), HEADER + expected + 4);
        let ext = Record {
            seq: 1,
            time_ms: 2,
            body: RecordBody::Extension {
                tag: 3,
                data: vec![0; 1000],
            },
        };
        assert_eq!(ext.encode().len(), HEADER + extension_payload_len(1000) + 4);
    }

    #[test]
    fn records_round_trip() {
        let claim = ClaimChange {
            unit: "u".into(),
            worker: "w1".into(),
            token: 3,
            source_version: 4,
            expires_at_ms: 5,
        };
        for rec in [
            sample(),
            Record {
                seq: 1,
                time_ms: 2,
                body: RecordBody::ClaimGranted(claim.clone()),
            },
            Record {
                seq: 1,
                time_ms: 2,
                body: RecordBody::ClaimReleased(claim),
            },
            Record {
                seq: 9,
                time_ms: 0,
                body: RecordBody::Extension {
                    tag: 7,
                    data: vec![1, 2, 3],
                },
            },
        ] {
            assert_eq!(Record::decode(&rec.encode()).unwrap(), rec);
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(
                    Record::decode(&b).is_err(),
                    "flip at byte {i} bit {bit} passed"
                );
            }
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(Record::decode(&bytes[..n]).is_err());
        }
    }
}
