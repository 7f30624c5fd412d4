//! Where a benchmark puts its scratch stores, and the probe of that disk's fdatasync the commit
//! and stage benchmarks take before and after their runs.

use super::{print_json, BenchError};
use oncelake_bench::bench_commit::fsync_probe;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// A probe of the scratch disk: when it was taken (`before`, `after`) and its fdatasync(4 KiB)
/// p50.
pub(crate) type Probe = (String, Duration);

/// Probes the fdatasync(4 KiB) p50 of the disk under `scratch`, labelled `when`.
pub(crate) fn probe(scratch: &Path, when: &str) -> Result<Probe, BenchError> {
    fsync_probe(scratch, 50)
        .map_err(|e| BenchError::Usage(format!("{e} (pass --dir to bench on another disk)")))
        .map(|d| (when.to_string(), d))
}

/// The probes as JSON lines of the benchmark `bench`.
pub(crate) fn print_probes(bench: &str, probes: &[Probe]) {
    for (when, d) in probes {
        print_json(&json!({
            "bench": bench,
            "probe": "fdatasync_4k",
            "when": when,
            "p50_us": d.as_micros() as u64,
        }));
    }
}

/// The probes for a table's heading: `120 µs before, 118 µs after`.
pub(crate) fn probes_text(probes: &[Probe]) -> String {
    let probes: Vec<String> = probes
        .iter()
        .map(|(when, d)| format!("{} µs {when}", d.as_micros()))
        .collect();
    probes.join(", ")
}

/// The directory a bench puts its scratch stores in: `--dir`, created if it is missing, or the
/// system's temporary directory.
pub(crate) fn scratch_dir(
    dir: Option<std::path::PathBuf>,
) -> Result<std::path::PathBuf, BenchError> {
    let Some(dir) = dir else {
        return Ok(std::env::temp_dir());
    };
    if dir.exists() && !dir.is_dir() {
        return Err(BenchError::Usage(format!(
            "--dir {} is not a directory; pass a directory for the scratch stores",
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir).map_err(|e| {
        BenchError::Usage(format!(
            "cannot create --dir {}: {e}; pass a directory you can write to",
            dir.display()
        ))
    })?;
    Ok(dir)
}
