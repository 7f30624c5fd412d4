//! RocksDB beside oncelake in `commit` (SPEC P1): the peer program `bench/peers/rocks_p1.cc`,
//! built against the distribution's librocksdb (`.ci/run` builds it into `target/rocks_p1`), run
//! as a child process after the in-process systems, on the same scratch disk with the same threads,
//! time, preload and units a call: a `TransactionDB` (`GetForUpdate`, version check, `Put`,
//! `Commit`) and plain `Put`/`WriteBatch`, both `sync=true`. Its keys are spread by its own hash.

use super::BenchError;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The two ways the peer writes.
pub(crate) const MODES: [&str; 2] = ["txn", "put"];

/// What one run of the peer measured.
#[derive(Clone, Debug)]
pub(crate) struct RocksRun {
    /// `rocksdb_txn` or `rocksdb_put`.
    pub system: String,
    /// Writer threads.
    pub threads: usize,
    /// Units a durable call.
    pub units_per_commit: usize,
    /// Units written per second.
    pub units_per_s: f64,
    /// Median call latency, µs.
    pub p50_us: u64,
    /// 99th percentile call latency, µs.
    pub p99_us: u64,
}

/// The peer's databases under one scratch directory, one per mode, preloaded by their first run
/// and kept for every thread count, removed when dropped.
pub(crate) struct RocksPeer {
    program: PathBuf,
    dir: PathBuf,
}

impl RocksPeer {
    /// Checks that `program` is a file; its databases go under `scratch`.
    pub(crate) fn new(program: &Path, scratch: &Path) -> Result<Self, BenchError> {
        if !program.is_file() {
            return Err(BenchError::Usage(format!(
                "--rocksdb {} is no file; build the peer with `g++ -O2 -std=c++17 \
                 bench/peers/rocks_p1.cc -lrocksdb -lpthread -o target/rocks_p1` (needs \
                 librocksdb-dev) and pass its path",
                program.display()
            )));
        }
        let dir = scratch.join(format!("rocksdb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| BenchError::io(format!("create {}", dir.display()), e))?;
        Ok(RocksPeer {
            program: program.to_path_buf(),
            dir,
        })
    }

    /// One run of `mode` at `threads` threads for `seconds` on a store of `preload` units.
    pub(crate) fn run(
        &self,
        mode: &str,
        threads: usize,
        seconds: Duration,
        preload: u64,
        units_per_commit: usize,
    ) -> Result<RocksRun, BenchError> {
        let out = Command::new(&self.program)
            .arg(self.dir.join(mode))
            .arg(mode)
            .arg(threads.to_string())
            .arg(format!("{}", seconds.as_secs_f64()))
            .arg(preload.to_string())
            .arg(units_per_commit.to_string())
            .output()
            .map_err(|e| BenchError::io(format!("run {}", self.program.display()), e))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().unwrap_or_default();
        let v: serde_json::Value = match (out.status.success(), serde_json::from_str(line)) {
            (true, Ok(v)) => v,
            _ => {
                return Err(BenchError::Usage(format!(
                    "the RocksDB peer {} {mode} failed ({}): {}{}",
                    self.program.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim(),
                    text.trim()
                )))
            }
        };
        let num = |k: &str| v[k].as_f64().unwrap_or(0.0);
        Ok(RocksRun {
            system: format!("rocksdb_{mode}"),
            threads,
            units_per_commit,
            units_per_s: num("units_per_s"),
            p50_us: num("p50_us") as u64,
            p99_us: num("p99_us") as u64,
        })
    }
}

impl Drop for RocksPeer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
