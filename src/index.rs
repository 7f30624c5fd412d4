//! The in-memory dedup index: "is unit@version committed, and with what hash?" answered without a
//! database lookup (SPEC P2).
//!
//! It maps a 64-bit hash of the unit key to the unit's current version, seq and object — 64 bytes
//! a unit, within P6's 100 bytes. Keys are not stored, so two units whose key hashes collide are
//! detected instead: a *new* unit whose hash is already present (or two such units at load time)
//! marks the slot ambiguous, and lookups of an ambiguous slot fall back to redb. The index is
//! therefore exact, never probabilistic. Only the commit leader writes it, after its transaction
//! is durable and before any writer of the group is woken.

use crate::error::{DbContext, Error, Result};
use crate::object::ObjectId;
use crate::schema::manifest::EntryValue;
use crate::schema::MANIFEST;
use redb::{ReadTransaction, ReadableTable};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};

/// What the index knows about a unit.
///
/// `repr(C)`, 48 bytes without padding, fields in the order of `index.snap`'s slot record
/// (`schema::index_snap::SlotRecord`): the snapshot loader reads the file's slot region straight
/// into a `[Slot]` (see `index_snap::read_pod`).
#[repr(C)]
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
            hashes: table_array(cap),
            slots: table_array(cap),
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
        self.place(nonzero(key_hash(unit)), slot, new_unit);
    }

    fn grow(&mut self) {
        let cap = (self.hashes.len() * 3 / 2).max(16);
        let old = std::mem::take(self);
        self.hashes = table_array(cap);
        self.slots = table_array(cap);
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

/// Plain-old-data: every byte pattern is a valid value and there is no padding, so an array of
/// them may be allocated zeroed and filled as bytes (the snapshot loader reads `index.snap`'s
/// regions straight into the table, `index_snap::read_pod`).
///
/// # Safety
/// Implement only for primitive integers and `repr(C)` types without padding whose every field
/// is such a type (or an array of one).
pub(crate) unsafe trait Pod: Copy {}
// SAFETY: a primitive integer: no padding, every bit pattern valid.
unsafe impl Pod for u64 {}
// SAFETY: `Slot` is repr(C) with fields u64, u64, [u8; 32] in that order: 48 bytes, no padding
// (checked below), every bit pattern of each field valid.
unsafe impl Pod for Slot {}
const _: () = assert!(std::mem::size_of::<Slot>() == 48);

/// A table array of `n` zero (free) positions: see [`zeroed_vec`]. Panics only where `vec!`
/// would (a capacity overflow).
fn table_array<T: Pod>(n: usize) -> Vec<T> {
    zeroed_vec(n, true).unwrap_or_else(|e| panic!("invariant: a table of {n} positions fits ({e})"))
}

/// A vector of `n` all-zero `T`s from zeroed memory: the allocator's calloc, whose large blocks
/// are fresh pages from the kernel, untouched until written (no memset). With `huge`, blocks of
/// 4 MiB or more are marked for transparent huge pages first (Linux, where `madvise` mode is
/// common): a table that is built and probed at random positions (the manifest scan, commits)
/// then takes far fewer TLB misses and page faults. The snapshot loader, which fills its arrays
/// front to back, does without: there the huge-page faults (2 MiB zeroed, sometimes compacted,
/// at once) measured no faster, and varied more.
pub(crate) fn zeroed_vec<T: Pod>(n: usize, huge: bool) -> std::result::Result<Vec<T>, String> {
    let layout = std::alloc::Layout::array::<T>(n).map_err(|e| e.to_string())?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    if huge {
        advise_huge_pages(ptr as *mut u8, layout.size());
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `[T; n]`, so
    // length and capacity `n` describe it exactly, and all-zero bytes are a valid `T` (Pod).
    Ok(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

/// Asks the kernel to back the whole pages of `len` bytes at `ptr` (one allocation) with huge
/// pages, if it is large enough to matter; a refusal changes nothing.
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    if len >= 4 << 20 {
        const PAGE: usize = 4096;
        let start = (ptr as usize).next_multiple_of(PAGE);
        let end = (ptr as usize + len) / PAGE * PAGE;
        if end > start {
            // SAFETY: the range is whole pages inside one live allocation of ours; MADV_HUGEPAGE
            // only changes how the kernel backs them (contents preserved, nothing unmapped). An
            // error (THP disabled, another page size) leaves the mapping as it was.
            let _ = unsafe {
                rustix::mm::madvise(
                    start as *mut std::ffi::c_void,
                    end - start,
                    rustix::mm::Advice::LinuxHugepage,
                )
            };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

/// Below this many units the manifest scan runs on the calling thread: a second thread would
/// cost more than it saves.
pub(crate) const PARALLEL_SCAN_MIN: u64 = 1 << 16;

/// Rows a scanning thread claims at a time (see [`DedupIndex::from_manifest`]): few enough that
/// the two threads end within a block of each other, many enough that the shared counter is
/// touched once per block, not once per row.
const TICKET_BLOCK: u64 = 1024;
/// Units handed to the other thread at a time, and how many such batches may wait.
const HANDOFF_BATCH: usize = 4096;
const HANDOFF_DEPTH: usize = 16;
/// Units between the prefetch of a unit's table positions and its insert: the inserts' cache
/// misses (one in the hashes, one in the slots, random over the whole table) then overlap
/// instead of each stalling the scan.
const PREFETCH_AHEAD: usize = 16;

impl DedupIndex {
    /// Builds the index from the manifest of `txn`, which holds `n` units (its `len()` in the
    /// same transaction) — the open when there is no usable `index.snap`.
    ///
    /// The table is sized for `n` up front (no growth), each value is decoded in place from
    /// redb's page (its seal checked, nothing allocated), and from [`PARALLEL_SCAN_MIN`] units
    /// on the work is split over two threads (see [`DedupIndex::from_manifest_with`]).
    pub(crate) fn from_manifest(txn: &ReadTransaction, n: u64) -> Result<Self> {
        let threads = if n >= PARALLEL_SCAN_MIN { 2 } else { 1 };
        Self::from_manifest_with(txn, n, threads)
    }

    /// [`DedupIndex::from_manifest`] on `threads` (1 or 2) threads.
    ///
    /// Two threads split both halves of the work without a sample of the keys:
    /// - *the scan*: one thread walks the manifest forward from its first key, the other backward
    ///   from its last, and each takes its next row only after claiming a ticket from a shared
    ///   counter that hands out exactly `n` (in blocks). So the forward thread reads rows
    ///   `0..a`, the backward one `n-b..n`, with `a + b = n`: disjoint and together the whole
    ///   table. Afterwards each thread's next key (the one it stopped before) must be the other's
    ///   last, which proves the two parts meet exactly (a manifest whose `len()` is wrong is
    ///   `Corrupt`, never a missed or doubled range);
    /// - *the inserts*: a hash's home position decides which half of the table it falls in, and
    ///   each thread writes only its own half (two disjoint `&mut` slices), handing the other
    ///   thread's units over in batches. A probe that would run past the end of its half is
    ///   kept aside and inserted once both threads are done (linear probing does not care in
    ///   which order the units went in).
    pub(crate) fn from_manifest_with(
        txn: &ReadTransaction,
        n: u64,
        threads: usize,
    ) -> Result<Self> {
        let n_usize = usize::try_from(n).map_err(|_| Error::Corrupt {
            path: crate::layout::DB_FILE.into(),
            detail: format!("the manifest claims {n} units"),
        })?;
        let mut index = DedupIndex::with_capacity(n_usize);
        let cap = index.hashes.len();
        let mut parts: Vec<Part> = if threads < 2 {
            let table = txn.open_table(MANIFEST).db("open the manifest")?;
            let rows = table.iter().db("scan the manifest")?;
            let region = Region::new(0, &mut index.hashes, &mut index.slots, cap);
            let tickets = AtomicU64::new(0);
            let part = scan_part(rows, &tickets, n, region, None)?;
            if let Some(next) = &part.next_key {
                return Err(Error::Corrupt {
                    path: crate::layout::DB_FILE.into(),
                    detail: format!(
                        "the manifest holds more units than the {n} it claims (next: {next:?})"
                    ),
                });
            }
            vec![part]
        } else {
            let mid = cap / 2;
            let (h0, h1) = index.hashes.split_at_mut(mid);
            let (s0, s1) = index.slots.split_at_mut(mid);
            let tickets = AtomicU64::new(0);
            let (tx0, rx1) = std::sync::mpsc::sync_channel(HANDOFF_DEPTH);
            let (tx1, rx0) = std::sync::mpsc::sync_channel(HANDOFF_DEPTH);
            let tickets = &tickets;
            let (a, b) = std::thread::scope(|s| {
                let back = s.spawn(move || -> Result<Part> {
                    let table = txn.open_table(MANIFEST).db("open the manifest")?;
                    let rows = table.iter().db("scan the manifest")?.rev();
                    let region = Region::new(mid, h1, s1, cap);
                    scan_part(rows, tickets, n, region, Some((tx1, rx1, mid)))
                });
                let table = txn.open_table(MANIFEST).db("open the manifest");
                let fwd = table.and_then(|table| {
                    let rows = table.iter().db("scan the manifest")?;
                    let region = Region::new(0, h0, s0, cap);
                    scan_part(rows, tickets, n, region, Some((tx0, rx0, mid)))
                });
                let back = back.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                (fwd, back)
            });
            let (a, b) = (a?, b?);
            if a.next_key != b.last_key || b.next_key != a.last_key {
                return Err(Error::Corrupt {
                    path: crate::layout::DB_FILE.into(),
                    detail: format!(
                        "the manifest's two halves do not meet (forward stopped before {:?} after {:?}, backward before {:?} after {:?}): its unit count {n} is wrong",
                        a.next_key, a.last_key, b.next_key, b.last_key
                    ),
                });
            }
            vec![a, b]
        };
        for part in &mut parts {
            index.len += part.len;
            index.ambiguous.extend(part.ambiguous.drain(..));
        }
        for part in parts {
            for (h, slot) in part.spill {
                index.insert_new(h, slot);
            }
        }
        Ok(index)
    }

    /// Inserts a unit the table is known not to hold: `upsert(unit, true, ..)` for a hash.
    fn insert_new(&mut self, h: u64, slot: Slot) {
        self.place(h, slot, true);
    }

    /// Puts `slot` under key hash `h`. A hash another unit already owns (`new_unit`) becomes
    /// ambiguous: from then on only redb can tell the two apart.
    fn place(&mut self, h: u64, slot: Slot, new_unit: bool) {
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
            self.ambiguous.insert(h);
        } else {
            self.slots[i] = slot;
        }
    }
}

/// Positions `lo..lo + hashes.len()` of a table of `cap` positions, which one scanning thread
/// alone writes.
struct Region<'a> {
    lo: usize,
    cap: usize,
    hashes: &'a mut [u64],
    slots: &'a mut [Slot],
}

impl<'a> Region<'a> {
    fn new(lo: usize, hashes: &'a mut [u64], slots: &'a mut [Slot], cap: usize) -> Self {
        Region {
            lo,
            cap,
            hashes,
            slots,
        }
    }
}

/// What one scanning thread did: units it placed, hashes it found twice, units whose probe ran
/// out of its region, and where its part of the manifest ended.
#[derive(Default)]
struct Part {
    len: usize,
    ambiguous: Vec<u64>,
    spill: Vec<(u64, Slot)>,
    /// The last key it read, and the next one it would have read (the other part's last).
    last_key: Option<String>,
    next_key: Option<String>,
}

impl Part {
    /// Places a new unit's hash in `r` (whose range holds `h`'s home), as [`DedupIndex::upsert`]
    /// would with `new_unit`: a hash already there is a collision.
    fn insert(&mut self, r: &mut Region<'_>, h: u64, slot: Slot) {
        let mut j = home(h, r.cap) - r.lo;
        loop {
            let Some(&k) = r.hashes.get(j) else {
                self.spill.push((h, slot));
                return;
            };
            if k == EMPTY {
                r.hashes[j] = h;
                r.slots[j] = slot;
                self.len += 1;
                return;
            }
            if k == h {
                self.ambiguous.push(h);
                return;
            }
            j += 1;
        }
    }

    fn insert_all(&mut self, r: &mut Region<'_>, batch: Vec<(u64, Slot)>) {
        for (i, &(h, slot)) in batch.iter().enumerate() {
            if let Some(&(ahead, _)) = batch.get(i + PREFETCH_AHEAD) {
                r.prefetch(ahead);
            }
            self.insert(r, h, slot);
        }
    }
}

impl Region<'_> {
    /// Asks the CPU to start loading the positions where `h` (whose home is in this region) will
    /// be probed, so that the insert a few units later finds them in cache.
    #[inline(always)]
    fn prefetch(&self, h: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let j = home(h, self.cap) - self.lo;
            let hp = self.hashes.as_ptr().wrapping_add(j) as *const i8;
            let sp = self.slots.as_ptr().wrapping_add(j) as *const i8;
            // SAFETY: a prefetch is only a hint to the cache: it never faults and has no
            // architectural effect whatever the address (both are inside, or one past, the
            // region's slices anyway, and `wrapping_add` never overflows).
            unsafe {
                _mm_prefetch(hp, _MM_HINT_T0);
                _mm_prefetch(sp, _MM_HINT_T0);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = h;
    }
}

/// The other scanning thread: where to send its units, where its units for us arrive, and the
/// first position of the upper region (whose units are the backward thread's).
type Peer = (
    SyncSender<Vec<(u64, Slot)>>,
    Receiver<Vec<(u64, Slot)>>,
    usize,
);

/// A manifest row as redb's range yields it.
type Row<'t> = std::result::Result<
    (
        redb::AccessGuard<'t, &'static str>,
        redb::AccessGuard<'t, &'static [u8]>,
    ),
    redb::StorageError,
>;

/// One thread's part of [`DedupIndex::from_manifest_with`]: reads rows of `rows` while the shared
/// counter grants tickets (of `n` in all), placing the units whose home is in `region` and
/// handing the others to `peer` (without a peer, `region` is the whole table).
fn scan_part<'t>(
    mut rows: impl Iterator<Item = Row<'t>>,
    tickets: &AtomicU64,
    n: u64,
    mut region: Region<'_>,
    peer: Option<Peer>,
) -> Result<Part> {
    let mut part = Part::default();
    let lower = region.lo == 0;
    let mut outgoing: Vec<(u64, Slot)> = Vec::new();
    // This thread's own units between their prefetch and their insert.
    let mut ahead: std::collections::VecDeque<(u64, Slot)> =
        std::collections::VecDeque::with_capacity(PREFETCH_AHEAD + 1);
    let mut last_key = String::new();
    let mut read_any = false;
    let (mut granted, mut end) = (0u64, 0u64);
    loop {
        if granted == end {
            let from = tickets.fetch_add(TICKET_BLOCK, Ordering::Relaxed);
            if from >= n {
                break;
            }
            (granted, end) = (from, (from + TICKET_BLOCK).min(n));
        }
        granted += 1;
        let Some(row) = rows.next() else {
            return Err(Error::Corrupt {
                path: crate::layout::DB_FILE.into(),
                detail: format!("the manifest holds fewer units than the {n} it claims"),
            });
        };
        let (k, v) = row.db("scan the manifest")?;
        let unit = k.value();
        let value = EntryValue::decode(unit, v.value())?;
        let h = nonzero(key_hash(unit));
        let slot = Slot {
            source_version: value.source_version,
            seq: value.seq,
            object: value.object.id,
        };
        last_key.clear();
        last_key.push_str(unit);
        read_any = true;
        match &peer {
            Some((tx, rx, mid)) if (home(h, region.cap) < *mid) != lower => {
                if outgoing.capacity() == 0 {
                    outgoing.reserve_exact(HANDOFF_BATCH);
                }
                outgoing.push((h, slot));
                if outgoing.len() == HANDOFF_BATCH {
                    let batch = std::mem::take(&mut outgoing);
                    hand_over(tx, rx, batch, &mut part, &mut region)?;
                }
            }
            _ => {
                region.prefetch(h);
                ahead.push_back((h, slot));
                if ahead.len() > PREFETCH_AHEAD {
                    if let Some((h, slot)) = ahead.pop_front() {
                        part.insert(&mut region, h, slot);
                    }
                }
            }
        }
    }
    for (h, slot) in ahead {
        part.insert(&mut region, h, slot);
    }
    part.next_key = match rows.next() {
        Some(row) => Some(row.db("scan the manifest")?.0.value().to_string()),
        None => None,
    };
    part.last_key = read_any.then_some(last_key);
    if let Some((tx, rx, _)) = peer {
        if !outgoing.is_empty() {
            hand_over(&tx, &rx, outgoing, &mut part, &mut region)?;
        }
        // The other thread's units for us, until it is done (drops its sender).
        drop(tx);
        for batch in rx {
            part.insert_all(&mut region, batch);
        }
    }
    // Probes that wrapped past the table's end belong to the lower region's start: also spilled.
    Ok(part)
}

/// Sends `batch` to the other thread, taking in what it sent meanwhile whenever its queue is
/// full (so neither thread can wait on the other forever).
fn hand_over(
    tx: &SyncSender<Vec<(u64, Slot)>>,
    rx: &Receiver<Vec<(u64, Slot)>>,
    mut batch: Vec<(u64, Slot)>,
    part: &mut Part,
    region: &mut Region<'_>,
) -> Result<()> {
    let gone = || Error::Corrupt {
        path: crate::layout::DB_FILE.into(),
        detail: "the other half of the manifest scan stopped".into(),
    };
    loop {
        match tx.try_send(batch) {
            Ok(()) => break,
            Err(TrySendError::Full(b)) => {
                batch = b;
                let mut took = false;
                loop {
                    match rx.try_recv() {
                        Ok(other) => {
                            part.insert_all(region, other);
                            took = true;
                        }
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => break,
                    }
                }
                if !took {
                    // The other thread is behind (descheduled on a busy machine): wait a
                    // little rather than spin.
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            }
            Err(TrySendError::Disconnected(_)) => return Err(gone()),
        }
    }
    // Keep the other thread's queue short: take what is waiting.
    while let Ok(other) = rx.try_recv() {
        part.insert_all(region, other);
    }
    Ok(())
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
    use redb::ReadableDatabase;

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

    /// A database whose manifest holds `units` (each with its own entry).
    fn manifest_db(units: &[String]) -> (tempfile::TempDir, redb::Database) {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("db")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(MANIFEST).unwrap();
            for (i, unit) in units.iter().enumerate() {
                t.insert(unit.as_str(), ev(i as u64 + 1).encode(unit).as_slice())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
        (dir, db)
    }

    /// The index the scan builds holds exactly the manifest: every unit with its own slot, once
    /// (a row read by both threads would make its hash ambiguous; a row read by neither would
    /// be absent), nothing else.
    fn assert_scan_exact(idx: &DedupIndex, model: &std::collections::BTreeMap<String, u64>) {
        assert_eq!(idx.ambiguous_len(), 0, "a unit was read twice");
        assert_eq!(idx.len(), model.len());
        for (unit, &v) in model {
            match idx.get(unit) {
                Lookup::Present(s) => assert_eq!(s.source_version, v, "{unit}"),
                Lookup::Ambiguous => panic!("{unit} read twice"),
                Lookup::Absent => panic!("{unit} missed"),
            }
        }
        assert!(matches!(idx.get("not/a/unit"), Lookup::Absent));
    }

    /// The two-thread scan meets exactly, whatever the size: around the ticket blocks (where
    /// the threads stop), around the hand-over batches, and for tables of 0..3 units, where one
    /// thread gets everything.
    #[test]
    fn the_parallel_scan_reads_every_row_once_at_every_boundary() {
        let sizes = [
            0, 1, 2, 3, 1023, 1024, 1025, 2047, 2048, 2049, 3071, 4095, 4096, 4097, 8193, 20_000,
        ];
        for n in sizes {
            // Keys of several lengths, so the meeting point falls on short and long ones.
            let units: Vec<String> = (0..n)
                .map(|i| format!("u/{}/{}", i % 7, "x".repeat(i % 13)) + &i.to_string())
                .collect();
            let (_dir, db) = manifest_db(&units);
            let model: std::collections::BTreeMap<String, u64> = units
                .iter()
                .enumerate()
                .map(|(i, u)| (u.clone(), i as u64 + 1))
                .collect();
            let txn = db.begin_read().unwrap();
            for threads in [1, 2] {
                let idx = DedupIndex::from_manifest_with(&txn, n as u64, threads).unwrap();
                assert_scan_exact(&idx, &model);
                // The table is sized once, for the manifest (no growth).
                assert_eq!(idx.hashes.len(), DedupIndex::with_capacity(n).hashes.len());
            }
        }
    }

    /// A unit count that does not match the rows is damage, never a partial or doubled index.
    #[test]
    fn a_wrong_unit_count_is_corrupt() {
        let units: Vec<String> = (0..5000).map(|i| format!("u/{i}")).collect();
        let (_dir, db) = manifest_db(&units);
        let txn = db.begin_read().unwrap();
        for threads in [1, 2] {
            for n in [4999, 5001, 3000, 9000] {
                let r = DedupIndex::from_manifest_with(&txn, n, threads);
                assert!(
                    matches!(r, Err(Error::Corrupt { .. })),
                    "{threads} threads, claimed {n}"
                );
            }
        }
    }

    /// Real 64-bit collisions cannot be made with test keys, so the parallel scan's collision
    /// handling is checked on hashes directly: the same hash twice, in one region, across the
    /// spill, is ambiguous, exactly as the one-by-one upsert marks it.
    #[test]
    fn a_hash_seen_twice_by_the_scan_is_ambiguous() {
        let cap = 64;
        let mut hashes = vec![EMPTY; cap];
        let mut slots = vec![Slot::default(); cap];
        let mut part = Part::default();
        // Hashes whose home is the region's last position: the second one spills.
        let last = u64::MAX - 1;
        assert_eq!(home(last, cap), cap - 1);
        let mut r = Region::new(0, &mut hashes, &mut slots, cap);
        part.insert(&mut r, 7, Slot::default());
        part.insert(&mut r, 7, Slot::default());
        part.insert(&mut r, last, Slot::default());
        part.insert(&mut r, last ^ 1, Slot::default());
        assert_eq!(part.len, 2);
        assert_eq!(part.ambiguous, vec![7]);
        assert_eq!(part.spill.len(), 1, "the probe past the end is kept aside");
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
