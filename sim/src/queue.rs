//! The scheduler's queue: chunks of tasks, the overlapped units paired across adjacent chunks
//! with the `Meeting` where their two sides wait for each other, and the seeded rolls that fix
//! which attempts crash.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a worker takes from the scheduler's queue at once: one batched engine call.
pub(crate) struct Chunk {
    /// The queue position of its first task; with the round, it fixes which attempts crash.
    pub(crate) first_task: usize,
    /// The units, each at most once. Under a pair, the pair's overlapped units come first.
    pub(crate) units: Vec<u32>,
    /// The overlapped units' [`Meeting`] and this chunk's side of it, shared by the two adjacent
    /// chunks of a pair that both hold the pair's overlapped units.
    pub(crate) pair: Option<(Arc<Meeting>, usize)>,
    /// How many of `units` (from the front) are the pair's overlapped units.
    pub(crate) shared: usize,
}

/// Where the two chunks of a pair meet (premise schedule). A side is *decided* once the engine
/// call of its chunk has decided what to run — its dedup checks (optimistic) or its claims
/// (coordinated) are done: at its first work, or when the call returns or unwinds without work.
/// The work of an overlapped unit waits until the other side is decided.
#[derive(Default)]
pub(crate) struct Meeting {
    decided: Mutex<[bool; 2]>,
    changed: Condvar,
}

impl Meeting {
    fn decide(&self, side: usize) {
        self.decided.lock()[side] = true;
        self.changed.notify_all();
    }

    /// Waits until `side` is decided; gives up if the simulation is aborting.
    fn wait_for(&self, side: usize, abort: &AtomicBool) {
        let mut decided = self.decided.lock();
        while !decided[side] && !abort.load(Ordering::Relaxed) {
            self.changed
                .wait_for(&mut decided, Duration::from_millis(20));
        }
    }
}

/// One chunk's engine call, seen from its works: announces the side decided once (at the first
/// work, or on drop, also while unwinding), waits for the other side before an overlapped unit's
/// work, and counts the works started (for the crash accounting).
pub(crate) struct ChunkCall<'a> {
    pair: Option<(&'a Meeting, usize)>,
    abort: &'a AtomicBool,
    decided: Cell<bool>,
    partner_decided: Cell<bool>,
    pub(crate) started: Cell<u64>,
}

impl<'a> ChunkCall<'a> {
    pub(crate) fn new(chunk: &'a Chunk, abort: &'a AtomicBool) -> Self {
        ChunkCall {
            pair: chunk.pair.as_ref().map(|(m, side)| (m.as_ref(), *side)),
            abort,
            decided: Cell::new(false),
            partner_decided: Cell::new(false),
            started: Cell::new(0),
        }
    }

    pub(crate) fn decide(&self) {
        if let Some((m, side)) = self.pair.filter(|_| !self.decided.replace(true)) {
            m.decide(side);
        }
    }

    /// A work starts: this side is decided; an overlapped unit's work waits for the other side.
    pub(crate) fn work_starts(&self, overlapped: bool) {
        self.started.set(self.started.get() + 1);
        self.decide();
        if let Some((m, side)) = self.pair.filter(|_| overlapped) {
            if !self.partner_decided.replace(true) {
                m.wait_for(1 - side, self.abort);
            }
        }
    }
}

impl Drop for ChunkCall<'_> {
    fn drop(&mut self) {
        self.decide();
    }
}

/// The first round's queue, in chunks of at most `chunk` tasks: every unit once, and the
/// `overlapped` units chosen by the seed twice — once in each chunk of a pair of adjacent chunks
/// (sharing a [`Meeting`] when `meet`). The overlapped units are spread evenly over the pairs.
///
/// Why it fits: with `P = ⌈⌈(units + overlapped) / chunk⌉ / 2⌉` pairs, a pair gets at most
/// `⌈overlapped / P⌉ ≤ chunk` overlapped units (as `overlapped ≤ units`), and the pairs have room
/// for `2·chunk·P − 2·overlapped ≥ units − overlapped` single units, which is all of them.
pub(crate) fn first_round(
    units: u64,
    overlapped: u64,
    seed: u64,
    chunk: usize,
    meet: bool,
) -> Vec<Chunk> {
    let mut order: Vec<u32> = (0..units as u32).collect();
    let mut twice = vec![false; units as usize];
    let mut state = seed;
    // A partial Fisher-Yates shuffle picks `overlapped` distinct units.
    for i in 0..overlapped as usize {
        let j = i + (splitmix(&mut state) % (units - i as u64)) as usize;
        order.swap(i, j);
        twice[order[i] as usize] = true;
    }
    let doubled: Vec<u32> = (0..units as u32).filter(|&u| twice[u as usize]).collect();
    let mut singles = (0..units as u32).filter(|&u| !twice[u as usize]);
    let tasks = (units + overlapped) as usize;
    let pairs = tasks.div_ceil(chunk).div_ceil(2).max(1) as u128;
    let mut out = Vec::with_capacity(2 * pairs as usize);
    let mut next_task = 0;
    for j in 0..pairs {
        let share = |k: u128| (overlapped as u128 * k / pairs) as usize;
        let both = &doubled[share(j)..share(j + 1)];
        debug_assert!(
            both.len() <= chunk,
            "invariant: a pair's overlap fits a chunk"
        );
        let meeting = (meet && !both.is_empty()).then(|| Arc::new(Meeting::default()));
        for side in 0..2 {
            let mut us = both.to_vec();
            us.extend(singles.by_ref().take(chunk.saturating_sub(both.len())));
            // Only a pair without overlap can come out empty (at the end): nothing to pair.
            if us.is_empty() {
                continue;
            }
            let len = us.len();
            out.push(Chunk {
                first_task: next_task,
                units: us,
                pair: meeting.clone().map(|m| (m, side)),
                shared: both.len(),
            });
            next_task += len;
        }
    }
    debug_assert!(singles.next().is_none(), "invariant: every unit is queued");
    out
}

/// A retry round's queue: `units` in chunks, no overlap.
pub(crate) fn retry_round(units: Vec<u32>, chunk: usize) -> Vec<Chunk> {
    units
        .chunks(chunk)
        .enumerate()
        .map(|(i, us)| Chunk {
            first_task: i * chunk,
            units: us.to_vec(),
            pair: None,
            shared: 0,
        })
        .collect()
}

pub(crate) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in [0, 1) fixed by (seed, round, task).
pub(crate) fn roll(seed: u64, round: u32, task: usize) -> f64 {
    let mut s = seed ^ ((round as u64) << 40) ^ task as u64;
    let _ = splitmix(&mut s);
    (splitmix(&mut s) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Every unit queued once, the overlapped ones twice: at the front of the two adjacent chunks
    /// of a pair, which share a meeting (only when asked), on sides 0 and 1. No chunk is too big.
    #[test]
    fn first_round_queues_each_overlapped_unit_in_both_chunks_of_a_pair() {
        for (units, overlapped, chunk) in [
            (1000, 37, 64),
            (1000, 0, 64),
            (1000, 1000, 64),
            (5, 5, 1),
            (1, 1, 128),
            (130, 2, 7),
            (2000, 100, 16),
        ] {
            for meet in [true, false] {
                let chunks = first_round(units, overlapped, 7, chunk, meet);
                let mut seen: HashMap<u32, Vec<usize>> = HashMap::new();
                let mut next_task = 0;
                for (c, ch) in chunks.iter().enumerate() {
                    assert!(!ch.units.is_empty() && ch.units.len() <= chunk);
                    assert_eq!(ch.first_task, next_task);
                    next_task += ch.units.len();
                    for &u in &ch.units {
                        seen.entry(u).or_default().push(c);
                    }
                }
                assert_eq!(next_task as u64, units + overlapped);
                assert_eq!(seen.len() as u64, units, "every unit queued");
                let mut doubled = 0;
                for (u, at) in &seen {
                    match at.as_slice() {
                        [c] => {
                            let ch = &chunks[*c];
                            let pos = ch.units.iter().position(|x| x == u).unwrap();
                            assert!(pos >= ch.shared, "unit {u} single but in the shared part");
                        }
                        [a, b] => {
                            doubled += 1;
                            assert_eq!(a + 1, *b, "unit {u}: chunks {a} and {b} not adjacent");
                            let (x, y) = (&chunks[*a], &chunks[*b]);
                            assert_eq!(x.units[..x.shared], y.units[..y.shared]);
                            assert!(x.units[..x.shared].contains(u));
                            match (&x.pair, &y.pair) {
                                (Some((m, 0)), Some((n, 1))) => {
                                    assert!(meet && Arc::ptr_eq(m, n))
                                }
                                (None, None) => assert!(!meet),
                                _ => panic!("unit {u}: the pair's meeting is wrong"),
                            }
                        }
                        more => panic!("unit {u} queued {} times", more.len()),
                    }
                }
                assert_eq!(doubled, overlapped);
            }
        }
    }

    #[test]
    fn retry_rounds_queue_the_missing_units_once() {
        let chunks = retry_round((0..10).collect(), 4);
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c.pair.is_none() && c.shared == 0));
        let all: Vec<u32> = chunks.iter().flat_map(|c| c.units.clone()).collect();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn rolls_are_uniform_enough() {
        let n = 100_000;
        let hits = (0..n).filter(|&i| roll(3, 1, i) < 0.05).count();
        assert!((4_000..6_000).contains(&hits), "{hits}");
    }
}
