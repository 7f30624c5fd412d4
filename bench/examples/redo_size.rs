//! How many bytes of write-ahead record a commit adds (what a group's durable append
//! carries): one-unit commits with P1's keys, new units and then new versions of them, made as
//! groups of 1 and of 32 (`Store::write_each`), with the backlog kept from being applied so that
//! its size is the redo written.
//!
//! `cargo run --release -p oncelake-bench --example redo_size -- [UNITS]` prints redo bytes per
//! unit for each case.

use oncelake::{Batch, Options, Store, Write};
use oncelake_bench::bench_commit::{unit_key, Keys};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let units: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(3_200);
    let dir = tempfile::tempdir()?;
    // Nothing is applied before the bound or the batch is reached: the backlog holds every record.
    let store = Store::open_with(
        dir.path().join("lake"),
        Options {
            apply_min_bytes: 1 << 30,
            apply_batch_bytes: 1 << 30,
            backlog_bytes: 1 << 30,
            ..Options::default()
        },
    )?;
    let staged = store.stage_bytes(b"bench output")?;
    let mut first = 0u64;
    for group in [1u64, 32] {
        for (what, version) in [("new units", 1u64), ("new versions", 2)] {
            let before = store.backlog();
            let mut i = 0;
            while i < units {
                let writes = (i..(i + group).min(units))
                    .map(|k| {
                        let key = unit_key(Keys::Random, first + k);
                        Write::Commit(Batch::new().put(key, version, &staged))
                    })
                    .collect();
                for answer in store.write_each(writes) {
                    answer?;
                }
                i += group;
            }
            let after = store.backlog();
            assert_eq!(
                after.units - before.units,
                units as usize,
                "nothing was applied"
            );
            println!(
                "{group:>2} per group, {what:<12}: {:.0} redo bytes a unit",
                (after.bytes - before.bytes) as f64 / units as f64
            );
        }
        first += units;
    }
    Ok(())
}
