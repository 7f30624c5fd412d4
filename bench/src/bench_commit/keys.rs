//! The units a run commits: the keys ([`Keys`]), the preload, and each thread's next unit and
//! version.

use super::{Keys, Workload};
use crate::bench_fixtures::Rng;
use std::sync::atomic::{AtomicU64, Ordering};

/// A bijection of `u64` (splitmix64's finaliser): spreads unit numbers over the key space.
pub(super) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key of unit number `i` under `keys`.
pub fn unit_key(keys: Keys, i: u64) -> String {
    match keys {
        Keys::Random => format!("bench/orders/customer={:016x}/date=2026-11-29", mix(i)),
        Keys::Sequential => format!("bench/orders/customer={i:016}/date=2026-11-29"),
    }
}

/// Version of every preloaded unit.
pub(super) const PRELOAD_VERSION: u64 = 1;

/// The keys and versions of the timed commits, shared by the threads of one system's runs
/// (public for `oncelake-bench commit --via-server`, whose clients commit the same keys).
pub struct KeySource {
    workload: Workload,
    /// The next new unit's number (starts after the preload).
    pub(super) next_new: AtomicU64,
    /// The next version of an update: rises across all runs, so a unit's versions only rise.
    next_version: AtomicU64,
}

/// One commit to make.
pub struct Next {
    /// The unit.
    pub key: String,
    /// Its source version.
    pub version: u64,
}

/// A writer thread's key generator.
pub struct Writer {
    thread: u64,
    threads: u64,
    rng: Rng,
}

impl KeySource {
    /// The keys of `workload`'s timed commits on a store that holds its preload.
    pub fn new(workload: Workload) -> Self {
        KeySource {
            workload,
            next_new: AtomicU64::new(workload.preload),
            next_version: AtomicU64::new(PRELOAD_VERSION + 1),
        }
    }

    /// The workload the keys are of.
    pub fn workload(&self) -> Workload {
        self.workload
    }

    /// Writer `thread` of `threads`: each updates only its own share of the preloaded units.
    pub fn writer(&self, thread: usize, threads: usize) -> Writer {
        Writer {
            thread: thread as u64,
            threads: threads.max(1) as u64,
            rng: Rng::new(
                0x5eed ^ ((thread as u64 + 1) << 20) ^ self.next_new.load(Ordering::Relaxed),
            ),
        }
    }

    /// Writer `w`'s next `n` units, distinct (a commit names each unit once).
    pub fn next_units(&self, w: &mut Writer, n: usize) -> Vec<Next> {
        let mut units: Vec<Next> = Vec::with_capacity(n);
        while units.len() < n {
            let next = self.next(w);
            if units.iter().all(|u| u.key != next.key) {
                units.push(next);
            }
        }
        units
    }

    /// Writer `w`'s next unit.
    pub fn next(&self, w: &mut Writer) -> Next {
        let keys = self.workload.keys;
        let n = self.workload.preload;
        // Preloaded units this thread owns: numbers t, t + threads, ... below the preload.
        let owned = if n > w.thread {
            (n - w.thread).div_ceil(w.threads)
        } else {
            0
        };
        if keys == Keys::Random && owned > 0 && w.rng.next_u64() & 1 == 1 {
            let i = w.thread + w.rng.below(owned) * w.threads;
            return Next {
                key: unit_key(keys, i),
                version: self.next_version.fetch_add(1, Ordering::Relaxed),
            };
        }
        let i = self.next_new.fetch_add(1, Ordering::Relaxed);
        Next {
            key: unit_key(keys, i),
            version: PRELOAD_VERSION,
        }
    }
}

/// Units per transaction while preloading.
const PRELOAD_BATCH: u64 = 20_000;

/// The preloaded keys, in chunks of [`PRELOAD_BATCH`], each chunk sorted (B-trees fill fastest
/// in key order).
pub(super) fn preload_chunks(w: Workload) -> impl Iterator<Item = Vec<String>> {
    (0..w.preload.div_ceil(PRELOAD_BATCH)).map(move |c| {
        let end = ((c + 1) * PRELOAD_BATCH).min(w.preload);
        let mut keys: Vec<String> = (c * PRELOAD_BATCH..end)
            .map(|i| unit_key(w.keys, i))
            .collect();
        keys.sort_unstable();
        keys
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashSet};

    /// The random mix: about half updates of preloaded units (each owned by one thread, versions
    /// rising per unit), the rest new units never seen before.
    #[test]
    fn random_keys_mix_new_units_and_rising_versions_of_preloaded_ones() {
        let w = Workload {
            preload: 1000,
            ..Workload::P1
        };
        let preloaded: HashSet<String> = preload_chunks(w).flatten().collect();
        assert_eq!(preloaded.len(), 1000, "preloaded keys are distinct");
        let src = KeySource::new(w);
        let mut versions: BTreeMap<String, u64> = preloaded
            .iter()
            .map(|k| (k.clone(), PRELOAD_VERSION))
            .collect();
        let mut owner: BTreeMap<String, u64> = BTreeMap::new();
        let (mut updates, mut new) = (0, 0);
        for threads in [1usize, 4] {
            let mut writers: Vec<Writer> = (0..threads).map(|t| src.writer(t, threads)).collect();
            for n in 0..4000 {
                let t = n % threads;
                let next = src.next(&mut writers[t]);
                let previous = versions.insert(next.key.clone(), next.version);
                match previous {
                    Some(v) => {
                        assert!(
                            preloaded.contains(&next.key),
                            "only preloaded units are updated"
                        );
                        assert!(
                            next.version > v,
                            "{}: version {} after {v}",
                            next.key,
                            next.version
                        );
                        if threads == 4 {
                            let o = *owner.entry(next.key.clone()).or_insert(t as u64);
                            assert_eq!(o, t as u64, "one thread owns each updated unit");
                        }
                        updates += 1;
                    }
                    None => new += 1,
                }
            }
        }
        assert!((3000..5000).contains(&updates), "{updates} updates of 8000");
        assert_eq!(updates + new, 8000);
    }

    #[test]
    fn sequential_keys_are_new_units_in_key_order() {
        let w = Workload {
            preload: 10,
            keys: Keys::Sequential,
            ..Workload::P1
        };
        let src = KeySource::new(w);
        let mut wr = src.writer(0, 1);
        let mut last = unit_key(Keys::Sequential, 9);
        for _ in 0..100 {
            let next = src.next(&mut wr);
            assert!(next.key > last, "{} after {last}", next.key);
            assert_eq!(next.version, PRELOAD_VERSION);
            last = next.key;
        }
    }
}
