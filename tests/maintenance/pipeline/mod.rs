//! Pipelines (SPEC R13): exactly-once cells, retries of only what failed, transitive
//! invalidation, explanations, concurrency, log replay, definition errors and the dot output.

mod cli;
mod definitions;
mod dot;
mod drains;
mod lifecycle;
mod records;

use crate::hooked_vfs::{Hook, Hooked};
use oncelake::log::RecordBody;
use oncelake::pipeline::{self, cell, Claim, Pipeline, PipelineDef};
use oncelake::vfs::VfsFile;
use oncelake::{Durability, Options, Store};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The real file system without fsyncs: these tests are about cell logic, not durability, and
/// the disk here is shared with other builds.
#[derive(Debug)]
struct NoSyncVfs;

struct NoSyncFile(Box<dyn VfsFile>);

impl std::io::Write for NoSyncFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl VfsFile for NoSyncFile {
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Hook for NoSyncVfs {
    fn sync_dir(&self, _: &Path) -> Option<std::io::Result<()>> {
        Some(Ok(()))
    }
    fn creates_read_only(&self) -> Option<bool> {
        Some(false) // objects made read-only by a call of their own, as before
    }
    fn file(&self, file: Box<dyn VfsFile>) -> Box<dyn VfsFile> {
        Box::new(NoSyncFile(file))
    }
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open_with(
        dir.path().join("lake"),
        Options {
            durability: Durability::Relaxed {
                max_delay: Duration::from_secs(3600),
            },
            vfs: Arc::new(Hooked::real(NoSyncVfs)),
            ..Options::default()
        },
    )
    .unwrap()
}

/// The seed 002 pipeline: ingest -> transform -> {store_b, store_c}.
fn seed_def() -> PipelineDef {
    PipelineDef::builder()
        .stage("ingest", 1, &[])
        .stage("transform", 1, &["ingest"])
        .stage("store_b", 1, &["transform"])
        .stage("store_c", 1, &["transform"])
        .build()
        .unwrap()
}

fn diamond(b_code: u64) -> PipelineDef {
    PipelineDef::builder()
        .stage("a", 1, &[])
        .stage("b", b_code, &["a"])
        .stage("c", 1, &["a"])
        .stage("d", 1, &["b", "c"])
        .build()
        .unwrap()
}

/// Stage runs that returned an output, per (unit, stage, source version).
type OkRuns = HashMap<(String, String, u64), u32>;

/// Runs counted per (unit, stage).
type Runs = BTreeMap<(String, String), u32>;

/// A stage function that records its runs; output depends on unit, stage and source version
/// (deterministic), and on the inputs, so a wrong input shows as a different object.
fn output_of(store: &Store, c: &pipeline::ReadyCell) -> Vec<u8> {
    let mut out = format!("{}|{}|{}|", c.unit, c.stage, c.source_version).into_bytes();
    for i in &c.inputs {
        out.extend_from_slice(&c.read_input(store, i.stage.as_deref()).unwrap());
    }
    out.truncate(4096);
    out
}

/// The first ready cell, claimed for ten seconds by `worker` (the claim must be granted): the
/// cell and the lease.
fn first_ready_claimed(
    p: &Pipeline,
    store: &Store,
    worker: &str,
) -> (pipeline::ReadyCell, oncelake::Lease) {
    let cell = p.ready(store, 1).unwrap().remove(0);
    match p
        .claim(store, &cell, worker, Duration::from_secs(10))
        .unwrap()
    {
        Claim::Granted { lease, .. } => (cell, lease),
        other => panic!("{worker}'s claim of {cell:?}: {other:?}"),
    }
}

/// The number of completion commits per cell key, from the log.
fn completions_in_log(store: &Store) -> BTreeMap<(String, u64), u32> {
    let mut n = BTreeMap::new();
    for rec in store.snapshot().unwrap().changes_since(0).unwrap() {
        if let RecordBody::Commit { entries } = rec.unwrap().body {
            for e in entries {
                if e.unit.starts_with(cell::CELL_PREFIX) {
                    *n.entry((e.unit, e.source_version)).or_insert(0) += 1;
                }
            }
        }
    }
    n
}

fn failure_cells_in_log(store: &Store) -> Vec<String> {
    let mut v = Vec::new();
    for rec in store.snapshot().unwrap().changes_since(0).unwrap() {
        if let RecordBody::Extension { tag, data } = rec.unwrap().body {
            if tag == cell::TAG_CELL_FAILED {
                v.push(pipeline::Failure::decode(&data).unwrap().cell);
            }
        }
    }
    v
}

fn assert_replays(store: &Store) {
    // The engine's own replay (I7) still reproduces the manifest, cells included.
    let report = oncelake::replay(&store.snapshot().unwrap()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    let stored = pipeline::recorded_state(store).unwrap();
    let replayed = pipeline::replay_state(&store.snapshot().unwrap()).unwrap();
    assert_eq!(
        stored, replayed,
        "the log must replay to the stored cell states"
    );
}
