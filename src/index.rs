//! The in-memory dedup index: "is unit@version committed, and with what hash?" answered without a
//! database lookup (SPEC P2).
//!
//! It maps a 64-bit hash of the unit key to the unit's current version, seq and object — 64 bytes
//! a unit, within P6's 100 bytes. Keys are not stored, so two units whose key hashes collide are
//! detected instead: a *new* unit whose hash is already present (or two such units at load time)
//! marks the slot ambiguous, and lookups of an ambiguous slot fall back to redb. The index is
//! therefore exact, never probabilistic. Only the commit leader writes it, after its transaction
//! is durable and before any writer of the group is woken.

use crate::object::ObjectId;
use crate::schema::manifest::EntryValue;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// What the index knows about a unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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

/// Open addressing with linear probing over two parallel arrays: the probe walks `hashes` (eight
/// per cache line), and only a hit touches `slots`. Capacity is not a power of two (the hash is
/// mapped onto it by a multiply), so memory follows the unit count instead of doubling at powers
/// of two: about 56 bytes a unit divided by the load factor.
#[derive(Default)]
pub(crate) struct DedupIndex {
    /// Key hash per position; [`EMPTY`] marks a free one.
    hashes: Vec<u64>,
    slots: Vec<Slot>,
    len: usize,
    /// Key hashes shared by two or more units: their lookups go to redb. Almost always empty.
    ambiguous: HashSet<u64, BuildHasherDefault<PassThrough>>,
}

pub(crate) const EMPTY: u64 = 0;
/// The load factor a freshly loaded index starts at, and the one that makes it grow.
const LOAD_AT_OPEN: f64 = 0.70;
const LOAD_MAX: f64 = 0.80;

impl DedupIndex {
    pub(crate) fn with_capacity(n: usize) -> Self {
        let cap = ((n as f64 / LOAD_AT_OPEN) as usize).max(16);
        DedupIndex {
            hashes: vec![EMPTY; cap],
            slots: vec![Slot::default(); cap],
            len: 0,
            ambiguous: HashSet::default(),
        }
    }

    /// The position where `h` is, or the free one where it would go.
    fn find(&self, h: u64) -> usize {
        let cap = self.hashes.len();
        let mut i = home(h, cap);
        loop {
            let k = self.hashes[i];
            if k == h || k == EMPTY {
                return i;
            }
            i += 1;
            if i == cap {
                i = 0;
            }
        }
    }

    pub(crate) fn get(&self, unit: &str) -> Lookup {
        self.get_by_hash(key_hash(unit))
    }

    /// [`DedupIndex::get`] for a hash computed with [`key_hash`]: reconcile hashes a batch of
    /// changes first and then probes them in a tight loop, so the cache misses overlap.
    pub(crate) fn get_by_hash(&self, hash: u64) -> Lookup {
        let h = nonzero(hash);
        if self.hashes.is_empty() {
            return Lookup::Absent;
        }
        if !self.ambiguous.is_empty() && self.ambiguous.contains(&h) {
            return Lookup::Ambiguous;
        }
        let i = self.find(h);
        if self.hashes[i] == EMPTY {
            Lookup::Absent
        } else {
            Lookup::Present(self.slots[i])
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
        let h = nonzero(key_hash(unit));
        if self.ambiguous.contains(&h) {
            return;
        }
        if (self.len + 1) as f64 > self.hashes.len() as f64 * LOAD_MAX {
            self.grow();
        }
        let i = self.find(h);
        if self.hashes[i] == EMPTY {
            self.hashes[i] = h;
            self.slots[i] = slot;
            self.len += 1;
        } else if new_unit {
            // Another unit already owns this hash: from now on only redb can tell them apart.
            self.ambiguous.insert(h);
        } else {
            self.slots[i] = slot;
        }
    }

    fn grow(&mut self) {
        let cap = (self.hashes.len() * 3 / 2).max(16);
        let old = std::mem::take(self);
        self.hashes = vec![EMPTY; cap];
        self.slots = vec![Slot::default(); cap];
        self.ambiguous = old.ambiguous;
        for (h, s) in old.hashes.into_iter().zip(old.slots) {
            if h != EMPTY {
                let i = self.find(h);
                self.hashes[i] = h;
                self.slots[i] = s;
                self.len += 1;
            }
        }
    }

    /// Units indexed (ambiguous hashes count once).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The raw table, for the persisted snapshot (`index.snap`): key hash per position,
    /// slot per position, and the ambiguous hashes.
    pub(crate) fn raw_parts(&self) -> (&[u64], &[Slot], impl Iterator<Item = u64> + '_) {
        (&self.hashes, &self.slots, self.ambiguous.iter().copied())
    }

    /// Rebuilds an index from [`DedupIndex::raw_parts`]. The caller has checked that the table
    /// has a free position and that every hash sits where [`DedupIndex::find`] looks for it
    /// (see `index_snap::probe_ok`).
    pub(crate) fn from_raw_parts(
        hashes: Vec<u64>,
        slots: Vec<Slot>,
        len: usize,
        ambiguous: impl IntoIterator<Item = u64>,
    ) -> Self {
        DedupIndex {
            hashes,
            slots,
            len,
            ambiguous: ambiguous.into_iter().collect(),
        }
    }

    /// How many key hashes are ambiguous.
    pub(crate) fn ambiguous_len(&self) -> usize {
        self.ambiguous.len()
    }
}

/// The position [`DedupIndex::find`] starts probing at for `h` in a table of `cap` positions.
pub(crate) fn home(h: u64, cap: usize) -> usize {
    ((h as u128 * cap as u128) >> 64) as usize
}

/// A fixed-key 64-bit hash of a unit key (the same in every process, so it is reproducible).
pub(crate) fn key_hash(unit: &str) -> u64 {
    // FNV-1a folded through a final avalanche: fast on short keys, and well mixed for the probe.
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

/// 0 marks a free position, so the one key hash that is 0 is folded onto 1 (which at worst makes
/// two units ambiguous: still exact).
fn nonzero(h: u64) -> u64 {
    if h == EMPTY {
        1
    } else {
        h
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

    #[test]
    fn the_index_agrees_with_a_model_across_growth() {
        let mut idx = DedupIndex::with_capacity(0);
        let mut model = std::collections::BTreeMap::new();
        for round in 0..3u64 {
            for i in 0..5_000u64 {
                let unit = format!("unit/{i}");
                let new_unit = !model.contains_key(&unit);
                let v = ev(round * 10_000 + i);
                idx.upsert(&unit, new_unit, &v);
                model.insert(unit, v);
            }
        }
        assert_eq!(idx.len(), model.len());
        for (unit, v) in &model {
            match idx.get(unit) {
                Lookup::Present(s) => {
                    assert_eq!((s.source_version, s.seq), (v.source_version, v.seq))
                }
                Lookup::Ambiguous => {} // a real 64-bit collision: exact via redb
                Lookup::Absent => panic!("{unit} lost"),
            }
        }
        for i in 5_000..6_000u64 {
            assert!(matches!(idx.get(&format!("unit/{i}")), Lookup::Absent));
        }
        assert!(
            idx.hashes.len() < 2 * model.len(),
            "no power-of-two overshoot"
        );
    }
}
