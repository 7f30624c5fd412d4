//! A full pass's memory does not grow with the listing (ignored by default: slow in debug).

use super::{fill, open};
use oncelake::reconcile::{reconcile_full, ListingError, ListingSource, ReconcileOptions, Row};
use std::collections::BTreeMap;

/// A listing generated on the fly: `n` sorted units, no memory of its own.
pub(super) struct Synthetic {
    pub(super) n: u64,
    pub(super) i: u64,
    pub(super) key: String,
}

impl ListingSource for Synthetic {
    fn next_row(&mut self) -> Result<Option<Row<'_>>, ListingError> {
        if self.i >= self.n {
            return Ok(None);
        }
        self.i += 1;
        self.key.clear();
        use std::fmt::Write;
        let _ = write!(self.key, "orders/customer={:09}", self.i);
        Ok(Some(Row {
            unit: &self.key,
            version: 1,
            line: self.i,
        }))
    }
}

fn peak_rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Memory of a full pass does not grow with the listing: peak RSS after a 10,000,000-row pass is
/// within a few MiB of the peak after a 1,000,000-row one. Slow in debug; run alone, in release:
/// `cargo test --release --test maintenance reconcile::memory -- --ignored --test-threads 1`.
#[test]
#[ignore]
fn full_reconcile_memory_is_independent_of_listing_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"));
    let manifest: BTreeMap<String, u64> = (0..100_000u64)
        .map(|i| (format!("orders/customer={:09}", i * 10), 1))
        .collect();
    fill(&store, &manifest);
    let snap = store.snapshot().unwrap();
    let mut peaks = Vec::new();
    for n in [1_000_000u64, 10_000_000] {
        let mut planned = 0u64;
        let s = reconcile_full(
            &snap,
            Synthetic {
                n,
                i: 0,
                key: String::new(),
            },
            ReconcileOptions::default(),
            |_| {
                planned += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(s.listed, n);
        peaks.push(peak_rss_kb());
        eprintln!(
            "listing of {n} rows: {planned} planned, peak RSS {} KiB",
            peak_rss_kb()
        );
    }
    assert!(
        peaks[1] - peaks[0] < 8 * 1024,
        "peak RSS grew from {} KiB to {} KiB",
        peaks[0],
        peaks[1]
    );
}
