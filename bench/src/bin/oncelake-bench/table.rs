//! `oncelake-bench table` (P8): publish rate of N unit changes into a fresh Delta table, and a
//! table grown to many versions (checkpointed every 100) whose open time a reader measures.

use super::{print_json, BenchError};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use oncelake::{Batch, Durability, Options, Store};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `oncelake-bench table DIR`.
#[derive(clap::Args, Debug)]
pub(crate) struct TableBenchArgs {
    /// Directory for the benchmark's stores (created; must be missing or empty).
    pub dir: PathBuf,
    /// Unit changes to publish in one run.
    #[arg(long, default_value_t = 100_000)]
    pub changes: u64,
    /// Units per store commit in the publish run.
    #[arg(long, default_value_t = 1_000)]
    pub per_commit: u64,
    /// Versions of the second table (one unit change per commit).
    #[arg(long, default_value_t = 10_000)]
    pub versions: u64,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

/// A small Parquet file: `rows` rows of (id, unit).
fn parquet_bytes(id: u64, unit: &str, rows: usize) -> Result<Vec<u8>, BenchError> {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..rows as i64).map(|r| id as i64 * 1000 + r),
    ));
    let units: ArrayRef = Arc::new(StringArray::from_iter_values((0..rows).map(|_| unit)));
    let batch = RecordBatch::try_from_iter([("id", ids), ("unit", units)])
        .map_err(|e| BenchError::Usage(format!("building a bench batch: {e}")))?;
    let mut w = parquet::arrow::ArrowWriter::try_new(Vec::new(), batch.schema(), None)
        .map_err(|e| BenchError::Usage(format!("writing a bench file: {e}")))?;
    w.write(&batch)
        .map_err(|e| BenchError::Usage(format!("writing a bench file: {e}")))?;
    w.into_inner()
        .map_err(|e| BenchError::Usage(format!("writing a bench file: {e}")))
}

fn open(dir: &Path) -> Result<Store, BenchError> {
    if dir.exists() {
        return Err(BenchError::Usage(format!(
            "{} exists; give the bench a missing directory",
            dir.display()
        )));
    }
    let options = Options {
        durability: Durability::Relaxed {
            max_delay: Duration::from_millis(50),
        },
        ..Options::default()
    };
    Ok(Store::open_with(dir, options)?)
}

/// Commits `total` changes, `per_commit` units per commit, cycling over `units` unit keys so
/// later changes are new versions (a remove and an add each). Objects are staged on 16 threads
/// (their fsyncs overlap), 1,000 at a time.
fn fill(store: &Store, total: u64, per_commit: u64, units: u64) -> Result<(), BenchError> {
    let unit_of = |j: u64| format!("bench/part={}/u{}", (j % units) % 16, j % units);
    let mut i = 0u64;
    while i < total {
        let ahead = (1000 / per_commit).max(1) * per_commit;
        let end = (i + ahead).min(total);
        let staged: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16u64)
                .map(|t| {
                    s.spawn(move || {
                        (i + t..end)
                            .step_by(16)
                            .map(|j| {
                                Ok((j, store.stage_bytes(&parquet_bytes(j, &unit_of(j), 4)?)?))
                            })
                            .collect::<Result<Vec<_>, BenchError>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(BenchError::Usage("a staging thread panicked".into()))
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })?
        .into_iter()
        .flatten()
        .collect();
        let mut staged: Vec<_> = staged;
        staged.sort_by_key(|(j, _)| *j);
        for part in staged.chunks(per_commit as usize) {
            let mut batch = Batch::new();
            for (j, obj) in part {
                batch = batch.put(unit_of(*j), *j, obj);
            }
            store.commit(batch)?;
        }
        i = end;
    }
    store.flush()?;
    Ok(())
}

pub(crate) fn run(a: TableBenchArgs) -> Result<u8, BenchError> {
    std::fs::create_dir_all(&a.dir).map_err(|e| BenchError::io("create the bench dir", e))?;
    // P8a: N unit changes (half new units, half new versions) published in one run.
    let s1 = open(&a.dir.join("publish"))?;
    let per_commit = a.per_commit.max(1);
    // Half new units, half new versions; never one unit twice in a commit.
    fill(&s1, a.changes, per_commit, (a.changes / 2).max(per_commit))?;
    s1.create_table("bench", "bench/", Default::default())?;
    let t = Instant::now();
    let r1 = s1.publish_table("bench")?;
    let publish_secs = t.elapsed().as_secs_f64();
    // P8b: a table of `versions` versions (one change per commit; checkpoints every 100).
    let s2 = open(&a.dir.join("versions"))?;
    fill(&s2, a.versions, 1, 100)?;
    s2.create_table("long", "bench/", Default::default())?;
    let t = Instant::now();
    let r2 = s2.publish_table("long")?;
    let long_secs = t.elapsed().as_secs_f64();
    let out = json!({
        "changes": a.changes,
        "per_commit": a.per_commit,
        "publish_versions": r1.versions,
        "publish_adds": r1.adds,
        "publish_removes": r1.removes,
        "publish_secs": publish_secs,
        "changes_per_sec": a.changes as f64 / publish_secs,
        "long_versions": r2.version.map_or(0, |v| v + 1),
        "long_publish_secs": long_secs,
        "long_table": s2.table_dir("long").display().to_string(),
    });
    if a.json {
        print_json(&out);
    } else {
        outln!(
            "P8 publish: {} changes in {} versions ({} adds, {} removes) in {:.3} s = {:.0} changes/s",
            a.changes, r1.versions, r1.adds, r1.removes, publish_secs, out["changes_per_sec"].as_f64().unwrap_or(0.0)
        );
        outln!(
            "P8 long table: {} versions published in {:.3} s at {}",
            out["long_versions"],
            long_secs,
            out["long_table"].as_str().unwrap_or("")
        );
        outln!(
            "open it with: python tests/python/bench_open.py {}",
            out["long_table"].as_str().unwrap_or("")
        );
    }
    Ok(0)
}
