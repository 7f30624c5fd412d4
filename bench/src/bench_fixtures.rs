//! Workloads shared by `oncelake-bench dedup|reconcile` and the criterion benches
//! (`benches/dedup.rs`, `benches/reconcile.rs`), so both measure the same thing. Only the library
//! and redb are used here: no CLI crates.

use oncelake::{Batch, Durability, Options, Store};
use redb::{ReadableDatabase, TableDefinition};
use std::path::Path;
use std::time::Duration;

/// Units per commit while filling a bench store: large batches make a 1M-unit store in seconds.
pub const FILL_BATCH: u64 = 10_000;
/// The plain-redb baseline's table: the same keys as the store, 72-byte values (an entry's size).
pub const BASELINE: TableDefinition<&str, &[u8]> = TableDefinition::new("baseline");
pub const VALUE_LEN: usize = 72;

/// The key of unit `i`: zero-padded, so key order is numeric order.
pub fn unit_key(i: u64) -> String {
    format!("orders/customer={i:08}/date=2026-11-29")
}

/// A unit the source has and the manifest lacks, sorting right after `unit_key(i)`.
pub fn new_unit_key(i: u64) -> String {
    format!("orders/customer={i:08}/date=2026-11-30")
}

/// The committed version of unit `i`.
pub fn version_of(i: u64) -> u64 {
    1 + i % 5
}

/// Opens (creating) a store tuned for bulk setup: relaxed durability, large groups.
pub fn open_bench_store(dir: &Path) -> oncelake::Result<Store> {
    open_bench_store_with_cache(dir, None)
}

/// [`open_bench_store`] with redb's page cache set to `cache_bytes` (default: the engine's).
pub fn open_bench_store_with_cache(
    dir: &Path,
    cache_bytes: Option<usize>,
) -> oncelake::Result<Store> {
    let defaults = Options::default();
    Store::open_with(
        dir,
        Options {
            durability: Durability::Relaxed {
                max_delay: Duration::from_secs(5),
            },
            max_group_units: FILL_BATCH as usize,
            cache_bytes: cache_bytes.unwrap_or(defaults.cache_bytes),
            ..defaults
        },
    )
}

/// Commits units `0..n` at [`version_of`], [`FILL_BATCH`] units a commit, all sharing one small
/// object (the dedup and reconcile paths never read objects), then flushes.
pub fn fill_store(store: &Store, n: u64) -> oncelake::Result<()> {
    let staged = store.stage_bytes(b"bench output")?;
    let mut i = 0;
    while i < n {
        let end = (i + FILL_BATCH).min(n);
        let mut batch = Batch::new();
        for u in i..end {
            batch = batch.put(unit_key(u), version_of(u), &staged);
        }
        let r = store.commit(batch)?;
        if !r.applied() {
            return Err(oncelake::Error::InvalidRequest(format!(
                "bench setup: batch at unit {i} was not applied (is {} a fresh directory?)",
                store.path().display()
            )));
        }
        i = end;
    }
    store.flush()
}

/// Builds the plain-redb baseline: keys `0..n` → 72-byte values, one write transaction.
pub fn build_baseline(path: &Path, n: u64) -> Result<redb::Database, redb::Error> {
    let db = redb::Database::create(path)?;
    let txn = db.begin_write()?;
    {
        let mut t = txn.open_table(BASELINE)?;
        let mut value = [0u8; VALUE_LEN];
        for i in 0..n {
            value[..8].copy_from_slice(&version_of(i).to_le_bytes());
            t.insert(unit_key(i).as_str(), value.as_slice())?;
        }
    }
    txn.commit()?;
    Ok(db)
}

/// A small deterministic generator (xorshift64*), so runs are repeatable without a crate.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// `q` dedup queries: random committed units with the version a retry would carry.
pub fn dedup_queries(n: u64, q: usize, seed: u64) -> Vec<(String, u64)> {
    let mut rng = Rng::new(seed);
    (0..q)
        .map(|_| {
            let i = rng.below(n);
            (unit_key(i), version_of(i))
        })
        .collect()
}

/// The dedup decision through the store's in-memory index: is `unit@version` committed (at that
/// version or newer), and with what object. Returns how many queries were already done.
pub fn run_lookups(store: &Store, queries: &[(String, u64)]) -> oncelake::Result<u64> {
    let mut done = 0u64;
    for (unit, version) in queries {
        if let Some(c) = store.lookup(unit)? {
            if c.source_version >= *version {
                std::hint::black_box(&c.object); // a caller uses the hash
                done += 1;
            }
        }
    }
    Ok(done)
}

/// The same decision through [`Store::lookup_many`], 256 queries a call.
pub fn run_lookup_many(store: &Store, queries: &[(String, u64)]) -> oncelake::Result<u64> {
    let mut done = 0u64;
    let mut units: Vec<&str> = Vec::with_capacity(256);
    let mut out = Vec::with_capacity(256);
    for chunk in queries.chunks(256) {
        units.clear();
        units.extend(chunk.iter().map(|(u, _)| u.as_str()));
        store.lookup_many(&units, &mut out)?;
        for (c, (_, version)) in out.iter().zip(chunk) {
            if let Some(c) = c {
                if c.source_version >= *version {
                    std::hint::black_box(&c.object);
                    done += 1;
                }
            }
        }
    }
    Ok(done)
}

/// The same decision through a plain redb point lookup in one read transaction.
pub fn run_redb_gets(db: &redb::Database, queries: &[(String, u64)]) -> Result<u64, redb::Error> {
    let txn = db.begin_read()?;
    let t = txn.open_table(BASELINE)?;
    let mut done = 0u64;
    for (unit, version) in queries {
        if let Some(v) = t.get(unit.as_str())? {
            let v = v.value();
            let mut b = [0u8; 8];
            b.copy_from_slice(&v[..8]);
            if u64::from_le_bytes(b) >= *version {
                done += 1;
            }
        }
    }
    Ok(done)
}

/// The same decision through the store's own redb (a snapshot `get` per query).
pub fn run_snapshot_gets(store: &Store, queries: &[(String, u64)]) -> oncelake::Result<u64> {
    let snap = store.snapshot()?;
    let mut done = 0u64;
    for (unit, version) in queries {
        if let Some(e) = snap.get(unit)? {
            if e.source_version >= *version {
                done += 1;
            }
        }
    }
    Ok(done)
}

/// A reconcile workload over a store holding units `0..n` at [`version_of`]:
/// - 1% of units changed at the source: 0.8% with a newer version (behind), 0.2% new (missing);
/// - 0.1% of units dropped by the source (unknown in the full form);
/// - the rest unchanged.
pub struct ReconcileWorkload {
    /// The full listing, sorted by unit.
    pub listing: Vec<(String, u64)>,
    /// The same listing as CSV text.
    pub csv: Vec<u8>,
    /// The changed units only (behind + missing), shuffled.
    pub changes: Vec<(String, u64)>,
    pub behind: u64,
    pub missing: u64,
    pub unknown: u64,
}

pub fn reconcile_workload(n: u64) -> ReconcileWorkload {
    let mut listing = Vec::with_capacity(n as usize + n as usize / 100);
    let mut changes = Vec::new();
    let (mut behind, mut missing, mut unknown) = (0, 0, 0);
    for i in 0..n {
        let key = unit_key(i);
        match i % 1000 {
            // 8 of every 1000 units: the source has a newer version.
            0 | 125 | 250 | 375 | 500 | 625 | 750 | 875 => {
                let v = version_of(i) + 1;
                changes.push((key.clone(), v));
                listing.push((key, v));
                behind += 1;
            }
            // 1 of every 1000: dropped by the source.
            999 => unknown += 1,
            r => {
                listing.push((key, version_of(i)));
                // 2 of every 1000: a new unit next to this one.
                if r == 100 || r == 600 {
                    let k = new_unit_key(i);
                    changes.push((k.clone(), 1));
                    listing.push((k, 1));
                    missing += 1;
                }
            }
        }
    }
    let mut csv = Vec::with_capacity(listing.len() * 48);
    csv.extend_from_slice(b"unit,version\n");
    for (u, v) in &listing {
        csv.extend_from_slice(u.as_bytes());
        csv.push(b',');
        csv.extend_from_slice(v.to_string().as_bytes());
        csv.push(b'\n');
    }
    let mut rng = Rng::new(n ^ 0x5eed);
    for i in (1..changes.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        changes.swap(i, j);
    }
    // Allocate the shuffled keys afresh, in their new order, as a caller that just received the
    // changes would hold them (otherwise every key read is a cache miss the bench put there).
    let changes = changes.iter().map(|(u, v)| (u.clone(), *v)).collect();
    ReconcileWorkload {
        listing,
        csv,
        changes,
        behind,
        missing,
        unknown,
    }
}

/// The resident set size of this process, from /proc (Linux); `None` elsewhere.
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The CPU time this process has used so far, user + system, all its threads (including ones
/// that ended), from /proc/self/stat (Linux); `None` elsewhere. Its resolution is one clock tick
/// (`USER_HZ`, 100 per second on Linux): a figure of a few seconds is exact to well under 1%.
/// CPU time, unlike wall time, barely moves when other processes load the machine, so a ratio of
/// two builds' CPU per unit is a steadier figure on a shared machine than their throughputs.
pub fn cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces): state is
    // field 3, utime 14, stime 15.
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The peak resident set size of this process (VmHWM), from /proc (Linux); `None` elsewhere.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Resets this process's peak resident set (VmHWM) to its current one, so that
/// [`peak_rss_bytes`] tells the peak of what follows (Linux' `clear_refs`); `false` where that
/// is not possible.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Pushes the CPU caches' contents out by writing one byte per cache line of `buf` (make it larger
/// than the last-level cache), so the next measurement starts cold.
pub fn evict_caches(buf: &mut [u8]) {
    for i in (0..buf.len()).step_by(64) {
        buf[i] = buf[i].wrapping_add(1);
    }
    std::hint::black_box(buf);
}
