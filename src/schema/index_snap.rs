//! The record format of `index.snap`, the persisted dedup index, on the schema's codec. The file
//! is not a redb table, but it is a stored format that must stay readable across versions, so it
//! is encoded here with every other record; reading and writing the file (streaming, the CRC,
//! the checks against the database) is `crate::index_snap`'s.
//!
//! File layout (little-endian):
//!
//! ```text
//! magic "OLIDXSNP" (8) | version u32 | store id u64 | seq u64 | crc32 of the log record at seq u32
//! | capacity u64 | units u64 | ambiguous u64
//! | key hash u64 × capacity | (source version u64, seq u64, object [32]) × capacity
//! | ambiguous hash u64 × ambiguous | crc32 of everything before u32
//! ```

use super::codec::{put_u32, put_u64, Reader};
use crate::error::Result;
use crate::object::ObjectId;

const MAGIC: [u8; 8] = *b"OLIDXSNP";
const VERSION: u32 = 1;
/// Bytes of the header.
pub(crate) const HEADER_LEN: usize = 8 + 4 + 8 + 8 + 4 + 8 + 8 + 8;
/// Bytes of one key hash (of the hash array and of the ambiguous list).
pub(crate) const HASH_LEN: usize = 8;
/// Bytes of one slot.
pub(crate) const SLOT_LEN: usize = 8 + 8 + 32;
/// Bytes of the trailing file CRC.
pub(crate) const TRAILER_LEN: usize = 4;

/// The snapshot's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SnapHeader {
    /// The store the snapshot belongs to.
    pub(crate) store_id: u64,
    /// The seq the index reflects.
    pub(crate) seq: u64,
    /// The CRC32 of the log record at `seq` (0 for seq 0).
    pub(crate) record_crc: u32,
    /// Positions of the hash table.
    pub(crate) cap: u64,
    /// Occupied positions.
    pub(crate) len: u64,
    /// Entries of the ambiguous-hash list.
    pub(crate) ambiguous: u64,
}

impl SnapHeader {
    /// The header's `HEADER_LEN` bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_LEN);
        b.extend_from_slice(&MAGIC);
        put_u32(&mut b, VERSION);
        put_u64(&mut b, self.store_id);
        put_u64(&mut b, self.seq);
        put_u32(&mut b, self.record_crc);
        put_u64(&mut b, self.cap);
        put_u64(&mut b, self.len);
        put_u64(&mut b, self.ambiguous);
        b
    }

    /// Decodes a header; the error says why the file is not a snapshot this code reads.
    pub(crate) fn decode(b: &[u8; HEADER_LEN]) -> std::result::Result<SnapHeader, String> {
        let mut r = Reader::new(b, "index snapshot header");
        let field = |e: crate::error::Error| e.to_string();
        if r.take(MAGIC.len()).map_err(field)? != MAGIC {
            return Err("bad magic".into());
        }
        let version = r.u32().map_err(field)?;
        if version != VERSION {
            return Err(format!("snapshot format {version}, expected {VERSION}"));
        }
        let header = SnapHeader {
            store_id: r.u64().map_err(field)?,
            seq: r.u64().map_err(field)?,
            record_crc: r.u32().map_err(field)?,
            cap: r.u64().map_err(field)?,
            len: r.u64().map_err(field)?,
            ambiguous: r.u64().map_err(field)?,
        };
        r.finish().map_err(field)?;
        Ok(header)
    }

    /// The file length this header implies, or `None` if it overflows.
    pub(crate) fn file_len(&self) -> Option<u64> {
        let per_pos = (HASH_LEN + SLOT_LEN) as u64;
        self.cap
            .checked_mul(per_pos)?
            .checked_add(self.ambiguous.checked_mul(HASH_LEN as u64)?)?
            .checked_add((HEADER_LEN + TRAILER_LEN) as u64)
    }
}

/// Appends one key hash.
pub(crate) fn put_hash(b: &mut Vec<u8>, hash: u64) {
    put_u64(b, hash);
}

/// Decodes one key hash (`HASH_LEN` bytes).
pub(crate) fn decode_hash(b: &[u8]) -> Result<u64> {
    let mut r = Reader::new(b, "index snapshot key hash");
    let hash = r.u64()?;
    r.finish()?;
    Ok(hash)
}

/// One position's slot: the unit's current source version, seq and object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotRecord {
    /// The source version of the unit's current entry.
    pub(crate) source_version: u64,
    /// The seq of that entry.
    pub(crate) seq: u64,
    /// Its object.
    pub(crate) object: ObjectId,
}

impl SlotRecord {
    /// Appends the slot's `SLOT_LEN` bytes.
    pub(crate) fn encode(&self, b: &mut Vec<u8>) {
        put_u64(b, self.source_version);
        put_u64(b, self.seq);
        b.extend_from_slice(&self.object.0);
    }

    /// Decodes one slot (`SLOT_LEN` bytes): the reference decoder. The loader reads the slot
    /// region straight into memory (`index_snap::read_pod`); its test checks that against this.
    #[cfg(test)]
    pub(crate) fn decode(b: &[u8]) -> Result<SlotRecord> {
        let mut r = Reader::new(b, "index snapshot slot");
        let source_version = r.u64()?;
        let seq = r.u64()?;
        let mut object = [0u8; 32];
        object.copy_from_slice(r.take(32)?);
        r.finish()?;
        Ok(SlotRecord {
            source_version,
            seq,
            object: ObjectId(object),
        })
    }
}

/// Appends the trailing CRC of everything before it.
pub(crate) fn put_trailer(b: &mut Vec<u8>, crc: u32) {
    put_u32(b, crc);
}

/// Decodes the trailing CRC (`TRAILER_LEN` bytes).
pub(crate) fn decode_trailer(b: &[u8; TRAILER_LEN]) -> Result<u32> {
    let mut r = Reader::new(b, "index snapshot trailer");
    let crc = r.u32()?;
    r.finish()?;
    Ok(crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_slot_round_trip_at_their_declared_lengths() {
        let h = SnapHeader {
            store_id: 7,
            seq: 9,
            record_crc: 0xdead_beef,
            cap: 2,
            len: 1,
            ambiguous: 1,
        };
        let b = h.encode();
        assert_eq!(b.len(), HEADER_LEN);
        let arr: [u8; HEADER_LEN] = b.as_slice().try_into().unwrap();
        assert_eq!(SnapHeader::decode(&arr), Ok(h));
        let mut bad = arr;
        bad[0] ^= 1;
        assert_eq!(SnapHeader::decode(&bad), Err("bad magic".to_string()));
        let mut newer = arr;
        newer[8] = 2;
        assert_eq!(
            SnapHeader::decode(&newer),
            Err("snapshot format 2, expected 1".to_string())
        );
        let s = SlotRecord {
            source_version: 3,
            seq: 4,
            object: ObjectId([5; 32]),
        };
        let mut b = Vec::new();
        s.encode(&mut b);
        assert_eq!(b.len(), SLOT_LEN);
        assert_eq!(SlotRecord::decode(&b).unwrap(), s);
        assert!(SlotRecord::decode(&b[1..]).is_err());
    }
}
