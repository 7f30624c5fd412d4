//! What redb can carry as an append-only write-ahead log (the question asked before
//! building one): durable appends of one group's record each to a table whose keys only grow, in a
//! database of its own, from one thread and from two threads on two databases (the overlapped
//! sync: one group's append syncs while the next one's is written).
//!
//! `cargo run --release -p oncelake-bench --example wal_probe -- DIR [SECONDS] [RECORD_BYTES]`
//! prints appends/s, the median µs per append, and units/s for a 32-unit group per append.

use redb::{Durability, TableDefinition};
use std::path::Path;
use std::time::Instant;

const WAL: TableDefinition<u64, &[u8]> = TableDefinition::new("wal");

fn appends(path: &Path, secs: f64, record: usize, durable: bool) -> Result<Vec<u32>, redb::Error> {
    let _ = std::fs::remove_file(path);
    let db = redb::Database::create(path)?;
    let payload = vec![0x5au8; record];
    let mut lat = Vec::new();
    let start = Instant::now();
    let mut seq = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        let t0 = Instant::now();
        let mut txn = db.begin_write()?;
        txn.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })?;
        {
            let mut t = txn.open_table(WAL)?;
            t.insert(seq, payload.as_slice())?;
            // Trim behind a checkpoint every 1000 appends, as the checkpointer would.
            if seq % 1000 == 999 {
                t.retain_in(..seq - 500, |_, _| false)?;
            }
        }
        txn.commit()?;
        seq += 1;
        lat.push(t0.elapsed().as_micros() as u32);
    }
    let _ = std::fs::remove_file(path);
    Ok(lat)
}

fn report(what: &str, secs: f64, mut lat: Vec<u32>) {
    lat.sort_unstable();
    let n = lat.len();
    let p50 = lat.get(n / 2).copied().unwrap_or(0);
    let p99 = lat.get(n * 99 / 100).copied().unwrap_or(0);
    println!(
        "{what:<40} {:>9.0} appends/s  p50 {p50:>6} µs  p99 {p99:>6} µs  = {:>9.0} units/s at 32 units/append",
        n as f64 / secs,
        32.0 * n as f64 / secs
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).map(String::as_str).unwrap_or("."));
    let secs: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let record: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(32 * 120);
    std::fs::create_dir_all(&dir)?;
    println!("record {record} bytes, {secs} s each, in {}", dir.display());
    report(
        "one db, durable",
        secs,
        appends(&dir.join("wal-a.redb"), secs, record, true)?,
    );
    report(
        "one db, no sync (CPU cost)",
        secs,
        appends(&dir.join("wal-a.redb"), secs, record, false)?,
    );
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| appends(&dir.join("wal-a.redb"), secs, record, true));
        let b = s.spawn(|| appends(&dir.join("wal-b.redb"), secs, record, true));
        (a.join(), b.join())
    });
    let mut both = a.map_err(|_| "panic")??;
    both.extend(b.map_err(|_| "panic")??);
    report("two dbs, durable, two threads (overlap)", secs, both);
    Ok(())
}
