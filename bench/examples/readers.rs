//! What a reader pays for GC and for the backlog (docs/commit.md "Readers", docs/gc-verify-faults.md
//! "Reader pins"), two figures with their baselines in the same run:
//!
//! 1. `Store::get` latency, from a thread reading in a loop, while `gc` runs (its prune's group
//!    drains a backlog of GROUPS one-unit groups and syncs), against the same reads while a dry
//!    run of `gc` applies a backlog of the same size (it drains it too, but prunes nothing).
//! 2. What a snapshot and a `get` through it cost with that backlog queued, against an empty
//!    backlog, on the same store.
//!
//! `cargo run --release -p oncelake-bench --example readers -- [DIR] [UNITS] [GROUPS]` (defaults: a
//! temporary directory, 50,000 units, 20,000 groups) prints both as a table.

use oncelake::gc::GcOptions;
use oncelake::{Batch, Intent, Options, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn key(i: u64) -> String {
    format!("unit/{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Puts `units` units at `version`, 1,000 a commit.
fn load(store: &Store, units: u64, version: u64) -> Result<(), Box<dyn std::error::Error>> {
    for chunk in (0..units).collect::<Vec<_>>().chunks(1_000) {
        let staged: Vec<_> = chunk
            .iter()
            .map(|&i| store.stage_bytes(format!("{i}@{}", version.min(2)).as_bytes()))
            .collect::<Result<_, _>>()?;
        let mut batch = Batch::new();
        for (&i, s) in chunk.iter().zip(&staged) {
            batch = batch.item(key(i), version, s, None, Intent::Put);
        }
        store.commit(batch)?;
    }
    Ok(())
}

/// Queues `groups` one-unit commits (new versions of the first units, with the bytes of their
/// version 2: the history they leave references objects still current, so GC's pass over the
/// objects deletes nothing and the prune is most of its time), applied by nobody.
fn queue(store: &Store, groups: u64, version: u64) -> Result<(), Box<dyn std::error::Error>> {
    for i in 0..groups {
        store.put(&key(i), version, format!("{i}@2").as_bytes())?;
    }
    Ok(())
}

struct Lat {
    samples: Vec<u64>,
}

impl Lat {
    fn pct(&self, p: f64) -> u64 {
        let mut s = self.samples.clone();
        s.sort_unstable();
        s.get(((s.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    }
    fn row(&self, what: &str, took: Duration) {
        println!(
            "| {what} | {:.0} | {} | {} | {} | {} | {} | {} |",
            took.as_secs_f64() * 1e3,
            self.samples.len(),
            self.pct(0.5),
            self.pct(0.99),
            self.pct(0.999),
            self.samples.iter().filter(|&&us| us >= 1_000).count(),
            self.samples.iter().max().copied().unwrap_or(0)
        );
    }
}

/// Runs `work` while a thread reads random units with `get`; the reads' latencies (µs).
fn reads_during(
    store: &Store,
    units: u64,
    work: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(Lat, Duration), Box<dyn std::error::Error>> {
    let stop = Arc::new(AtomicBool::new(false));
    let (s, st) = (store.clone(), stop.clone());
    let reader = std::thread::spawn(move || {
        let mut samples = Vec::new();
        let mut x = 1u64;
        while !st.load(Ordering::Relaxed) {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let t = Instant::now();
            let got = s.get(&key((x >> 33) % units));
            samples.push(t.elapsed().as_micros() as u64);
            assert!(got.is_ok());
        }
        samples
    });
    // Let the reader start.
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    work()?;
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let samples = reader.join().map_err(|_| "the reader panicked")?;
    Ok((Lat { samples }, took))
}

fn per_call(n: u32, mut f: impl FnMut() -> oncelake::Result<()>) -> oncelake::Result<f64> {
    let t = Instant::now();
    for _ in 0..n {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / f64::from(n))
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let tmp = tempfile::tempdir()?;
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf())
        .join("readers-bench");
    let units: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(50_000);
    let groups: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open_with(
        &dir,
        Options {
            // Nobody applies the queued groups but the reads of the tables, flushes and GC.
            background_apply: false,
            apply_min_bytes: 256 << 20,
            apply_batch_bytes: 256 << 20,
            backlog_bytes: 256 << 20,
            ..Options::default()
        },
    )?;
    // History to prune: every unit twice.
    load(&store, units, 1)?;
    load(&store, units, 2)?;
    store.flush()?;
    let mut version = 3;
    gc_table(&store, units, groups, &mut version)?;
    println!();
    snapshot_table(&store, units, groups, &mut version)
}

/// Figure 1: `get` latency while a dry-run `gc` applies a backlog, and while a real one prunes
/// and drains a backlog of the same size.
fn gc_table(store: &Store, units: u64, groups: u64, version: &mut u64) -> Res<()> {
    println!(
        "| during | took ms | gets | get p50 µs | get p99 µs | get p99.9 µs | gets ≥ 1 ms | get max µs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for round in 1..=2 {
        for (dry_run, what) in [
            (true, "dry-run gc applying"),
            (false, "gc pruning, draining"),
        ] {
            queue(store, groups, *version)?;
            *version += 1;
            let queued = store.backlog();
            let options = GcOptions {
                retain: Duration::ZERO,
                grace: Duration::ZERO,
                dry_run,
            };
            let (lat, took) = reads_during(store, units, || {
                store.gc(options)?;
                Ok(())
            })?;
            let kib = queued.bytes >> 10;
            lat.row(
                &format!("{what} {groups} groups ({kib} KiB), round {round}"),
                took,
            );
        }
    }
    Ok(())
}

/// Figure 2: a snapshot, a `get` through a new one, and a `get` on one snapshot, with a backlog
/// queued and with none.
fn snapshot_table(store: &Store, units: u64, groups: u64, version: &mut u64) -> Res<()> {
    println!("| backlog | snapshot µs | snapshot + get µs | get on one snapshot µs |");
    println!("|---|---:|---:|---:|");
    for round in 1..=2 {
        for full in [true, false] {
            if full {
                queue(store, groups, *version)?;
                *version += 1;
            } else {
                store.flush()?;
            }
            let waiting = store.backlog();
            let n = 2_000;
            let snap = per_call(n, || store.snapshot().map(drop))?;
            let mut x = 7u64;
            let mut next = || {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                key((x >> 33) % units)
            };
            let snap_get = per_call(n, || store.get(&next()).map(drop))?;
            let one = store.snapshot()?;
            let get = per_call(n * 10, || one.get(&next()).map(drop))?;
            drop(one);
            println!(
                "| {} groups ({} KiB), round {round} | {snap:.1} | {snap_get:.1} | {get:.1} |",
                if full { groups } else { 0 },
                waiting.bytes >> 10,
            );
        }
    }
    Ok(())
}
