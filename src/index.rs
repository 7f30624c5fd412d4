//! The in-memory dedup index: "is unit@version committed, and with what hash?" answered without a
//! database lookup (SPEC P2).
//!
//! It maps a 64-bit hash of the unit key to the unit's current version, seq and object — 64 bytes
//! a unit, well inside P6's 200. Keys are not stored, so two units whose key hashes collide are
//! detected instead: a *new* unit whose hash is already present (or two such units at load time)
//! marks the slot ambiguous, and lookups of an ambiguous slot fall back to redb. The index is
//! therefore exact, never probabilistic. Only the commit leader writes it, after its transaction
//! is durable and before any writer of the group is woken.

use crate::manifest::EntryValue;
use crate::object::ObjectId;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// What the index knows about a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub source_version: u64,
    pub seq: u64,
    pub object: ObjectId,
}

pub(crate) enum Lookup {
    Absent,
    Present(Slot),
    /// Two units share this key hash: ask the database.
    Ambiguous,
}

/// The key hash is already well mixed: use it as the table hash unchanged.
#[derive(Default)]
pub(crate) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("invariant: the dedup index only hashes u64 keys");
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Clone, Copy)]
enum Cell {
    One(Slot),
    Ambiguous,
}

#[derive(Default)]
pub(crate) struct DedupIndex {
    map: HashMap<u64, Cell, BuildHasherDefault<PassThrough>>,
}

/// A fixed-key 64-bit hash of a unit key (the same in every process, so it is reproducible).
pub(crate) fn key_hash(unit: &str) -> u64 {
    // FNV-1a folded through a final avalanche: fast on short keys, and well mixed for hashbrown.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in unit.as_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl DedupIndex {
    pub(crate) fn with_capacity(n: usize) -> Self {
        DedupIndex {
            map: HashMap::with_capacity_and_hasher(n, Default::default()),
        }
    }

    pub(crate) fn get(&self, unit: &str) -> Lookup {
        self.get_by_hash(key_hash(unit))
    }

    /// [`DedupIndex::get`] for a hash computed with [`key_hash`]: reconcile hashes a batch of
    /// changes first and then probes them in a tight loop, so the cache misses overlap.
    pub(crate) fn get_by_hash(&self, hash: u64) -> Lookup {
        match self.map.get(&hash) {
            None => Lookup::Absent,
            Some(Cell::One(s)) => Lookup::Present(*s),
            Some(Cell::Ambiguous) => Lookup::Ambiguous,
        }
    }

    /// Records a unit's new current entry. `new_unit` says whether the unit had no entry before,
    /// which is what tells a key-hash collision from an update.
    pub(crate) fn upsert(&mut self, unit: &str, new_unit: bool, v: &EntryValue) {
        let slot = Slot {
            source_version: v.source_version,
            seq: v.seq,
            object: v.object.id,
        };
        let h = key_hash(unit);
        match self.map.get_mut(&h) {
            None => {
                self.map.insert(h, Cell::One(slot));
            }
            Some(cell @ Cell::One(_)) => {
                *cell = if new_unit {
                    Cell::Ambiguous
                } else {
                    Cell::One(slot)
                };
            }
            Some(Cell::Ambiguous) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectMeta;

    fn ev(v: u64) -> EntryValue {
        EntryValue {
            source_version: v,
            revision: 0,
            object: ObjectMeta {
                id: ObjectId::of(&v.to_le_bytes()),
                size: 8,
                crc32: 0,
            },
            seq: v,
            committed_at_ms: 0,
        }
    }

    #[test]
    fn a_collision_makes_the_slot_ambiguous_not_wrong() {
        let mut idx = DedupIndex::default();
        idx.upsert("a", true, &ev(1));
        assert!(matches!(idx.get("a"), Lookup::Present(s) if s.source_version == 1));
        idx.upsert("a", false, &ev(2));
        assert!(matches!(idx.get("a"), Lookup::Present(s) if s.source_version == 2));
        // Simulate a second unit with the same key hash: insert under "a"'s hash as new.
        idx.upsert("a", true, &ev(3));
        assert!(matches!(idx.get("a"), Lookup::Ambiguous));
        assert!(matches!(idx.get("b"), Lookup::Absent));
    }
}
