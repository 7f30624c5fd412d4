//! What one applier transaction costs redb per unit on a 1,000,000-row manifest (the
//! "B-trees written in bulk"): P1's rows — half new units, half new versions whose replaced entry
//! becomes a history row — plus one log row each, applied in transactions of N units
//! (`Durability::None`, as the backlog's applier between checkpoints), keys in arrival order or
//! sorted, at a given page cache.
//!
//! `cargo run --release -p oncelake-bench --example redb_apply -- DB CACHE_MIB random|sorted N[,N...]`
//! preloads DB once (1,000,000 rows; kept for later runs: copy it to compare settings on the same
//! file) and prints µs per unit and units/s for each N.

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::time::Instant;

const MANIFEST: TableDefinition<&str, &[u8]> = TableDefinition::new("manifest");
const HISTORY: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("history");
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const PRELOAD: u64 = 1_000_000;
/// About the size of a sealed manifest entry and of a one-unit commit record.
const VALUE: [u8; 110] = [7; 110];

/// The key of unit number `i`: P1's random keys, as `oncelake-bench commit` makes them.
fn key(i: u64) -> String {
    oncelake_bench::bench_commit::unit_key(oncelake_bench::bench_commit::Keys::Random, i)
}

fn preload(db: &Database) -> Result<(), redb::Error> {
    for chunk in 0..PRELOAD / 20_000 {
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::None)?;
        {
            let mut m = txn.open_table(MANIFEST)?;
            let mut l = txn.open_table(LOG)?;
            for i in chunk * 20_000..(chunk + 1) * 20_000 {
                m.insert(key(i).as_str(), VALUE.as_slice())?;
                l.insert(i, VALUE.as_slice())?;
            }
        }
        txn.commit()?;
    }
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    txn.open_table(HISTORY)?;
    txn.commit()?;
    Ok(())
}

/// Applies `units` units in transactions of `batch`; returns the seconds it took.
fn apply(
    db: &Database,
    next: &mut Next,
    units: usize,
    batch: usize,
    sorted: bool,
) -> Result<f64, redb::Error> {
    let start = Instant::now();
    let mut done = 0;
    while done < units {
        let mut rows: Vec<(String, u64)> = (0..batch).map(|j| next.row(j)).collect();
        if sorted {
            rows.sort();
        }
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::None)?;
        {
            let mut m = txn.open_table(MANIFEST)?;
            let mut h = txn.open_table(HISTORY)?;
            let mut l = txn.open_table(LOG)?;
            let mut replaced = Vec::new();
            for (k, seq) in &rows {
                if m.insert(k.as_str(), VALUE.as_slice())?.is_some() {
                    replaced.push((k.clone(), *seq - 1));
                }
                l.insert(*seq, VALUE.as_slice())?;
            }
            if sorted {
                replaced.sort();
            }
            for (k, seq) in &replaced {
                h.insert((k.as_str(), *seq), VALUE.as_slice())?;
            }
        }
        txn.commit()?;
        done += batch;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// The next row: even ones a new unit, odd ones a new version of a preloaded unit.
struct Next {
    seq: u64,
    new_unit: u64,
    updated: u64,
}

impl Next {
    fn row(&mut self, j: usize) -> (String, u64) {
        let seq = self.seq;
        self.seq += 1;
        if j.is_multiple_of(2) {
            self.new_unit += 1;
            (key(self.new_unit), seq)
        } else {
            self.updated = (self.updated + 7919) % PRELOAD;
            (key(self.updated), seq)
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: redb_apply DB CACHE_MIB random|sorted N[,N...]";
    let (Some(path), Some(cache), Some(order), Some(batches)) =
        (args.get(1), args.get(2), args.get(3), args.get(4))
    else {
        return Err(usage.into());
    };
    let cache: usize = cache.parse::<usize>()? << 20;
    let sorted = match order.as_str() {
        "sorted" => true,
        "random" => false,
        _ => return Err(usage.into()),
    };
    let batches: Vec<usize> = batches
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let fresh = !std::path::Path::new(path).exists();
    let db = Database::builder().set_cache_size(cache).create(path)?;
    if fresh {
        let t = Instant::now();
        preload(&db)?;
        eprintln!(
            "preloaded {PRELOAD} rows in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let last = {
        let r = db.begin_read()?;
        let l = r.open_table(LOG)?;
        let last = l.last()?.map(|(k, _)| k.value());
        last.ok_or("the log table is empty: remove DB and run again")?
    };
    let mut next = Next {
        seq: last + 1,
        new_unit: last,
        updated: 0,
    };
    for &batch in &batches {
        if batch == 0 {
            return Err("N must be at least 1".into());
        }
        let units = 60_000usize.max(batch * 3).div_ceil(batch) * batch;
        let secs = apply(&db, &mut next, units, batch, sorted)?;
        println!(
            "batch {batch:6} {order} cache {} MiB: {:.2} us/unit ({:.0} units/s)",
            cache >> 20,
            secs * 1e6 / units as f64,
            units as f64 / secs
        );
    }
    Ok(())
}
