//! Manifest entries and their fixed-size encoding, plus the redb tables that hold them.
//!
//! The current entry of a unit lives in `MANIFEST` (unit → entry). Every entry ever committed also
//! lives in `HISTORY` under (unit, seq), which serves reads as of an older seq (SPEC R7) and tells
//! garbage collection what the retention window still references.

use crate::error::{Error, Result};
use crate::object::{ObjectId, ObjectMeta};
use redb::TableDefinition;

pub(crate) const MANIFEST: TableDefinition<&str, &[u8]> = TableDefinition::new("manifest");
pub(crate) const HISTORY: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("history");

/// One committed output of a unit: what it was derived from and which object holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The unit key.
    pub unit: String,
    /// The source version the output was derived from.
    pub source_version: u64,
    /// 0 for the first output of this source version; +1 for every deliberate correction.
    pub revision: u32,
    /// The object (content hash), size and CRC32.
    pub object: ObjectMeta,
    /// The sequence number of the commit that made this entry visible.
    pub seq: u64,
    /// Wall-clock time of that commit, in milliseconds since the Unix epoch (informational; safety
    /// never depends on it).
    pub committed_at_ms: u64,
}

pub(crate) const ENTRY_LEN: usize = 8 + 4 + 32 + 8 + 4 + 8 + 8;

/// The part of an entry stored as a manifest value (the unit is the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryValue {
    pub source_version: u64,
    pub revision: u32,
    pub object: ObjectMeta,
    pub seq: u64,
    pub committed_at_ms: u64,
}

impl EntryValue {
    pub(crate) fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[0..8].copy_from_slice(&self.source_version.to_le_bytes());
        b[8..12].copy_from_slice(&self.revision.to_le_bytes());
        b[12..44].copy_from_slice(&self.object.id.0);
        b[44..52].copy_from_slice(&self.object.size.to_le_bytes());
        b[52..56].copy_from_slice(&self.object.crc32.to_le_bytes());
        b[56..64].copy_from_slice(&self.seq.to_le_bytes());
        b[64..72].copy_from_slice(&self.committed_at_ms.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self> {
        if b.len() != ENTRY_LEN {
            return Err(Error::Corrupt {
                path: "manifest".into(),
                detail: format!("manifest value has {} bytes, expected {ENTRY_LEN}", b.len()),
            });
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(EntryValue {
            source_version: u64_at(0),
            revision: u32_at(8),
            object: ObjectMeta {
                id: ObjectId(b[12..44].try_into().expect("32 bytes")),
                size: u64_at(44),
                crc32: u32_at(52),
            },
            seq: u64_at(56),
            committed_at_ms: u64_at(64),
        })
    }

    pub(crate) fn into_entry(self, unit: &str) -> Entry {
        Entry {
            unit: unit.to_string(),
            source_version: self.source_version,
            revision: self.revision,
            object: self.object,
            seq: self.seq,
            committed_at_ms: self.committed_at_ms,
        }
    }
}

impl Entry {
    pub(crate) fn value(&self) -> EntryValue {
        EntryValue {
            source_version: self.source_version,
            revision: self.revision,
            object: self.object,
            seq: self.seq,
            committed_at_ms: self.committed_at_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_value_round_trips() {
        let v = EntryValue {
            source_version: u64::MAX - 3,
            revision: 7,
            object: ObjectMeta {
                id: ObjectId::of(b"x"),
                size: 12345,
                crc32: 0xdead_beef,
            },
            seq: 99,
            committed_at_ms: 1_700_000_000_000,
        };
        assert_eq!(EntryValue::decode(&v.encode()).unwrap(), v);
        assert!(EntryValue::decode(&v.encode()[..10]).is_err());
    }
}
