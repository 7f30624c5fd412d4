//! The worked example's pipeline mode (SPEC R24): a 3-stage pipeline (extract → transform →
//! load) over the units, every cell completed for source version 1; then a source bump of a
//! fraction of the units (1% by default) whose first-stage re-runs change the output of half of
//! them (the other half change only bytes the first stage drops). The engine's own worker loop
//! ([`Pipeline::work_with`]) drains the pipeline in two stores built the same way, side by side:
//! one with early cutoff, one without ([`Pipeline::with_cutoff`]). The cells run are counted where
//! they run (the stage closures), never computed from a formula; at the end every cell's output
//! must be the same in both stores (the cutoff skipped only work whose result it already had).
//!
//! Each round of the worker loop scans every cell (docs/pipelines.md, "Limits"), and a drain takes
//! one round per stage plus one: at 100,000 units that scan, not the cells run, is most of the
//! time.
//!
//! The initial completions are committed in bulk (the setup, not measured): the same bytes the
//! stage functions give, under the same cell keys `Pipeline::complete` uses.

use oncelake::pipeline::{
    set_source_versions, CellState, Pipeline, PipelineDef, Wave, WorkOptions,
};
use oncelake::{CommitReport, Durability, Error, ObjectId, Options, Outcome, Result, Store};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The stages, upstream first.
const STAGES: [&str; 3] = ["extract", "transform", "load"];
/// Distinct payloads: sources (and so outputs) repeat across units, so the setup stages few
/// objects.
const PAYLOADS: u64 = 64;
/// Units committed per setup batch.
const SETUP_BATCH: usize = 10_000;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct PipelineSimConfig {
    /// Units, each with one cell per stage.
    pub units: u64,
    /// Worker threads draining the pipeline.
    pub workers: usize,
    /// Fraction of the units given a new source version (0..=1).
    pub bump: f64,
    /// Fraction of the bumped units whose first-stage output changes (0..=1).
    pub changed: f64,
    /// Seeds which units are bumped.
    pub seed: u64,
    /// A missing or empty directory; the two stores go in `cutoff/` and `no-cutoff/` under it.
    pub store_dir: PathBuf,
}

impl PipelineSimConfig {
    /// The worked example's units (100,000), 1 worker, a 1% bump changing half of the outputs.
    pub fn new(store_dir: impl Into<PathBuf>) -> Self {
        PipelineSimConfig {
            units: 100_000,
            workers: 1,
            bump: 0.01,
            changed: 0.5,
            seed: 1,
            store_dir: store_dir.into(),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidRequest(m));
        if self.units == 0 || self.units > u32::MAX as u64 {
            return bad(format!("units is {}; use 1..=4294967295", self.units));
        }
        if self.workers == 0 || self.workers > 256 {
            return bad(format!("workers is {}; use 1..=256", self.workers));
        }
        for (name, v) in [("bump", self.bump), ("changed", self.changed)] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("{name} is {v}; use a fraction from 0 to 1"));
            }
        }
        Ok(())
    }
}

/// One drain after the bump, as measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipelineRun {
    /// Stage closures run, per stage (upstream first).
    pub runs: Vec<u64>,
    /// Cells cut off at the end, per stage (`pipeline status`).
    pub cut_off: Vec<u64>,
    /// The engine's counter `pipeline_cells_cut_off` in this run.
    pub cut_off_counted: u64,
    /// Cells done at the end, all stages.
    pub done: u64,
}

impl PipelineRun {
    /// Stage closures run, all stages.
    pub fn total_runs(&self) -> u64 {
        self.runs.iter().sum()
    }
}

/// What the pipeline mode measured.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineSimReport {
    /// Units.
    pub units: u64,
    /// The stages, upstream first.
    pub stages: Vec<String>,
    /// Units given a new source version.
    pub bumped: u64,
    /// Of those, the ones whose source change reaches the first stage's output.
    pub changed: u64,
    /// The drain with early cutoff.
    pub with_cutoff: PipelineRun,
    /// The same drain without it.
    pub without_cutoff: PipelineRun,
    /// Whether every cell's output is the same in both stores at the end.
    pub outputs_equal: bool,
    /// Wall time, both stores.
    pub elapsed: Duration,
}

/// The unit's key.
fn unit_key(i: u64) -> String {
    format!("orders/customer={i:06}/date=2026-11-29")
}

/// The source bytes: a payload the first stage keeps and noise it drops.
fn source(payload: u64, noise: u64) -> Vec<u8> {
    format!("payload={payload};noise={noise}").into_bytes()
}

/// The stage functions: extract keeps the payload, the others wrap their input.
fn run_stage(stage: &str, input: &[u8]) -> Vec<u8> {
    if stage == STAGES[0] {
        let text = String::from_utf8_lossy(input);
        let payload = text.split(';').next().unwrap_or_default();
        format!("extract({payload})").into_bytes()
    } else {
        let mut out = format!("{stage}(").into_bytes();
        out.extend_from_slice(input);
        out.push(b')');
        out
    }
}

fn definition(cutoff: bool) -> Result<Pipeline> {
    let def = PipelineDef::builder()
        .stage(STAGES[0], 1, &[])
        .stage(STAGES[1], 1, &[STAGES[0]])
        .stage(STAGES[2], 1, &[STAGES[1]])
        .build()
        .map_err(|e| Error::InvalidRequest(e.to_string()))?;
    Ok(Pipeline::new(def).with_cutoff(cutoff))
}

/// The units to bump, chosen by the seed (the first `n` of a seeded order), and for each whether
/// its payload changes.
fn bumps(cfg: &PipelineSimConfig) -> Vec<(u64, bool)> {
    let n = ((cfg.bump * cfg.units as f64).round() as u64).min(cfg.units);
    let changed = (cfg.changed * n as f64).round() as u64;
    let mut order: Vec<(u64, [u8; 32])> = (0..cfg.units)
        .map(|i| {
            let mut h = blake3::Hasher::new();
            h.update(&cfg.seed.to_le_bytes());
            h.update(&i.to_le_bytes());
            (i, *h.finalize().as_bytes())
        })
        .collect();
    order.sort_by_key(|a| a.1);
    order
        .into_iter()
        .take(n as usize)
        .enumerate()
        .map(|(rank, (i, _))| (i, (rank as u64) < changed))
        .collect()
}

/// Runs the pipeline mode into two new stores under `cfg.store_dir`.
pub fn simulate_pipeline(cfg: &PipelineSimConfig) -> Result<PipelineSimReport> {
    cfg.validate()?;
    let start = Instant::now();
    let bumps = bumps(cfg);
    // The two stores are independent: built and drained side by side.
    let (with, without) = std::thread::scope(|s| {
        let without = s.spawn(|| run_store(cfg, &bumps, false));
        let with = run_store(cfg, &bumps, true);
        let without = without
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (with, without)
    });
    let (with, without) = (with?, without?);
    let outputs_equal = with.1 == without.1;
    Ok(PipelineSimReport {
        units: cfg.units,
        stages: STAGES.iter().map(|s| s.to_string()).collect(),
        bumped: bumps.len() as u64,
        changed: bumps.iter().filter(|b| b.1).count() as u64,
        with_cutoff: with.0,
        without_cutoff: without.0,
        outputs_equal,
        elapsed: start.elapsed(),
    })
}

/// Every cell's output object, by (unit, stage), as the pipeline reads them.
type Outputs = Vec<(String, Vec<Option<ObjectId>>)>;

/// Builds one store (every cell done for version 1), bumps the sources, drains it and measures.
fn run_store(
    cfg: &PipelineSimConfig,
    bumps: &[(u64, bool)],
    cutoff: bool,
) -> Result<(PipelineRun, Outputs)> {
    let dir = cfg
        .store_dir
        .join(if cutoff { "cutoff" } else { "no-cutoff" });
    let store = Store::open_with(
        &dir,
        Options {
            // Nothing here measures durability (see the worked example's "The store").
            durability: Durability::Relaxed {
                max_delay: Duration::from_millis(50),
            },
            ..Options::default()
        },
    )?;
    let p = definition(cutoff)?;
    setup(&store, &p, cfg.units)?;
    let list: Vec<(String, u64, Vec<u8>)> = bumps
        .iter()
        .map(|&(i, changed)| {
            let payload = (i % PAYLOADS + changed as u64) % PAYLOADS;
            (unit_key(i), 2, source(payload, 1))
        })
        .collect();
    for (unit, version, bytes) in &list {
        p.set_source_version(&store, unit, *version, bytes)?;
    }
    let runs: Vec<AtomicU64> = STAGES.iter().map(|_| AtomicU64::new(0)).collect();
    let before = store.metrics().pipeline_cells_cut_off;
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..cfg.workers)
            .map(|w| {
                let (store, p, runs) = (&store, &p, &runs);
                s.spawn(move || {
                    let opts = WorkOptions {
                        wait_for_running: true,
                        ..WorkOptions::default()
                    };
                    p.work_with(store, &format!("sim-{w}"), &opts, |cell| {
                        let i = STAGES.iter().position(|s| *s == cell.stage).unwrap_or(0);
                        runs[i].fetch_add(1, Ordering::Relaxed);
                        let stage = cell.inputs.first().map(|input| input.stage.as_deref());
                        let input = cell
                            .read_input(store, stage.flatten())
                            .map_err(|e| e.to_string())?;
                        Ok(run_stage(&cell.stage, &input))
                    })
                })
            })
            .collect();
        for h in handles {
            h.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        }
        Ok(())
    })?;
    // One scan for the outputs and the counts `status` gives (the same evaluation).
    let mut outputs = Vec::with_capacity(cfg.units as usize);
    let mut cut_off = vec![0; STAGES.len()];
    let mut done = 0;
    for e in p.cells(&store)? {
        let mut objects = Vec::with_capacity(STAGES.len());
        for (i, c) in e.cells.iter().enumerate() {
            cut_off[i] += c.wave.as_ref().is_some_and(Wave::is_cut_off) as u64;
            objects.push(match c.state {
                CellState::Done { object, .. } => {
                    done += 1;
                    Some(object)
                }
                _ => None,
            });
        }
        outputs.push((e.unit, objects));
    }
    let run = PipelineRun {
        runs: runs.iter().map(|r| r.load(Ordering::Relaxed)).collect(),
        cut_off,
        cut_off_counted: store.metrics().pipeline_cells_cut_off - before,
        done,
    };
    drop(store);
    Ok((run, outputs))
}

/// Every unit at source version 1 with every cell completed from it, in bulk commits: per chunk
/// of units one commit for the sources and then one per stage, so each completion comes after
/// the inputs it was computed from (as when a worker ran it).
fn setup(store: &Store, p: &Pipeline, units: u64) -> Result<()> {
    let mut i = 0;
    while i < units {
        let end = (i + SETUP_BATCH as u64).min(units);
        let keys: Vec<String> = (i..end).map(unit_key).collect();
        let mut bytes: Vec<Vec<u8>> = (i..end).map(|u| source(u % PAYLOADS, 0)).collect();
        all_committed(set_source_versions(store, &rows(&keys, &bytes))?)?;
        for s in STAGES {
            for b in bytes.iter_mut() {
                *b = run_stage(s, b);
            }
            all_committed(p.complete_cells(store, s, &rows(&keys, &bytes))?)?;
        }
        i = end;
    }
    Ok(())
}

/// Each unit at source version 1 with its bytes, as the bulk calls take them.
fn rows<'a>(keys: &'a [String], bytes: &'a [Vec<u8>]) -> Vec<(&'a str, u64, &'a [u8])> {
    keys.iter()
        .zip(bytes)
        .map(|(k, b)| (k.as_str(), 1, b.as_slice()))
        .collect()
}

fn all_committed(report: CommitReport) -> Result<()> {
    if report
        .units
        .iter()
        .all(|u| matches!(u.outcome, Outcome::Committed { .. }))
    {
        Ok(())
    } else {
        Err(Error::InvalidRequest(
            "the simulation's setup commit was refused".into(),
        ))
    }
}
