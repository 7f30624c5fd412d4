//! The arguments of `oncelake simulate` and the run configuration they make, shared by the
//! in-process run (`sim_cmds`), the pipeline mode and the run across node processes (`sim_nodes`).

use oncelake_sim::lake_env::LakeChoice;
use oncelake_sim::{Schedule, SimConfig, SimMode};
use std::path::PathBuf;

/// When the two workers of an overlapped unit work on it.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScheduleArg {
    /// Worst case: both workers of each unit handed out twice try it before either commits.
    Premise,
    /// Real timing decides; the report says what happened.
    Natural,
}

/// Which modes `simulate` runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModeArg {
    /// No claims: duplicates collapse at commit.
    Optimistic,
    /// Claims through run_once: no redundant work.
    Coordinated,
    /// Optimistic, then coordinated, side by side.
    Both,
}

#[derive(clap::Args, Debug)]
pub(crate) struct SimulateArgs {
    /// Worker threads.
    #[arg(long, default_value_t = 10)]
    pub workers: usize,
    /// Logical units (partitions).
    #[arg(long, default_value_t = 100_000)]
    pub units: u64,
    /// Fraction of units handed to two workers at once (rebalancing), e.g. 0.02 for 2%.
    #[arg(long, default_value_t = 0.02)]
    pub overlap: f64,
    /// Optimistic (no claims), coordinated (claims) or both.
    #[arg(long, value_enum, default_value = "both")]
    pub mode: ModeArg,
    /// Probability that an attempt crashes mid-write (0 to <1), e.g. 0.01; a crash loses the
    /// worker's whole chunk.
    #[arg(long, default_value_t = 0.0)]
    pub crash_rate: f64,
    /// Tasks a worker takes at once and runs through one batched engine call (1..=4096).
    #[arg(long, default_value_t = oncelake_sim::DEFAULT_CHUNK)]
    pub chunk: usize,
    /// Random seed choosing the overlapped units and the crashing attempts (the same number
    /// gives the same run).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// When the two workers of a unit handed out twice work on it: `premise` (the worst case,
    /// both try it before either commits) or `natural` (real timing decides).
    #[arg(long, value_enum, default_value = "premise")]
    pub schedule: ScheduleArg,
    /// Keep the stores in this (missing or empty) directory instead of a temporary one that is
    /// removed afterwards (in /dev/shm where available).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// One JSON object per mode.
    #[arg(long)]
    pub json: bool,
    /// Run the pipeline mode instead (SPEC R24): a 3-stage pipeline over --units, a source bump
    /// of --bump of them, cells run with and without early cutoff.
    #[arg(long)]
    pub pipeline: bool,
    /// Pipeline mode: worker threads draining the pipeline (each idle one rescans every cell
    /// while others run, so more workers cost scans here, not cells).
    #[arg(long, default_value_t = 1, requires = "pipeline")]
    pub pipeline_workers: usize,
    /// Pipeline mode: fraction of the units given a new source version.
    #[arg(long, default_value_t = 0.01, requires = "pipeline")]
    pub bump: f64,
    /// Pipeline mode: fraction of the bumped units whose first-stage output changes.
    #[arg(long, default_value_t = 0.5, requires = "pipeline")]
    pub changed: f64,
    /// Run across this many node processes on one shared lake (SPEC R23); --workers are spread
    /// over them.
    #[arg(long, conflicts_with = "pipeline")]
    pub nodes: Option<usize>,
    /// With --nodes: the lake. `auto`: the S3 endpoint of AWS_ENDPOINT_URL if set, else a
    /// temporary SeaweedFS (`weed` from ONCELAKE_WEED or PATH), else a shared directory.
    #[arg(long, value_enum, default_value = "auto", requires = "nodes")]
    pub lake: LakeChoice,
    /// A node process's lake (set by `simulate --nodes` for the processes it starts).
    #[arg(long, hide = true, requires = "node_index")]
    pub node_lake: Option<String>,
    /// A node process's index (set by `simulate --nodes`).
    #[arg(long, hide = true, requires = "node_lake")]
    pub node_index: Option<usize>,
}

impl SimulateArgs {
    /// The modes --mode names, in the order they run.
    pub(crate) fn modes(&self) -> &'static [SimMode] {
        match self.mode {
            ModeArg::Optimistic => &[SimMode::Optimistic],
            ModeArg::Coordinated => &[SimMode::Coordinated],
            ModeArg::Both => &[SimMode::Optimistic, SimMode::Coordinated],
        }
    }

    /// The run of `mode` these arguments ask for, its stores under `dir`.
    pub(crate) fn config(&self, mode: SimMode, dir: PathBuf) -> SimConfig {
        SimConfig {
            workers: self.workers,
            units: self.units,
            overlap: self.overlap,
            mode,
            crash_rate: self.crash_rate,
            seed: self.seed,
            chunk: self.chunk,
            schedule: match self.schedule {
                ScheduleArg::Premise => Schedule::Premise,
                ScheduleArg::Natural => Schedule::Natural,
            },
            ..SimConfig::new(dir)
        }
    }
}
