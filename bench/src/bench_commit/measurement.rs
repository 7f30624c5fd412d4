//! What a run measured: the driver that runs a plan's commits from its threads and times them,
//! and the figures made of those timings.

use super::{Plan, System};
use std::time::Duration;

/// What one configuration measured.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// The system.
    pub system: System,
    /// Writer threads.
    pub threads: usize,
    /// Units committed.
    pub units: u64,
    /// Wall time from the start signal until the last writer finished.
    pub elapsed: Duration,
    /// Median commit latency, microseconds.
    pub p50_us: u64,
    /// 99th percentile commit latency, microseconds.
    pub p99_us: u64,
    /// Largest commit latency, microseconds.
    pub max_us: u64,
    /// Mean units per durable transaction (oncelake: per commit group; baselines: 1).
    pub mean_group: f64,
    /// oncelake only: groups written.
    pub groups: Option<u64>,
    /// Wall time until every acknowledged unit was also applied to the B-trees. oncelake
    /// acknowledges a group once its write-ahead record is synced and applies it to the B-trees
    /// afterwards (its backlog), so this is `elapsed` plus the time to drain what is left; the
    /// baselines apply before they answer.
    pub applied_elapsed: Duration,
    /// The most units acknowledged but not yet applied, sampled every 20 ms over the run
    /// (oncelake; the backlog is bounded, so this stays below its bound).
    pub max_backlog: Option<u64>,
    /// The backlog's size in units at each tenth of the run (oncelake).
    pub backlog_by_tenth: Vec<u64>,
    /// oncelake only: whether the store's own thread applied the backlog (else the writers did).
    pub applier_thread: Option<bool>,
    /// oncelake with [`Plan::read_probe`]: the probe's reads.
    pub reads: Option<Reads>,
    /// Units preloaded before this configuration ran (the preload plus earlier runs' units).
    pub store_units_before: u64,
    /// CPU time of the whole process (user + system) from the writers' start until every unit
    /// was applied (oncelake: the drain included); `None` where /proc is not available.
    pub cpu: Option<Duration>,
    /// The process's peak resident set over the same span (its high-water mark reset at the
    /// start); `None` where /proc is not available.
    pub peak_rss: Option<u64>,
}

impl Measurement {
    /// CPU microseconds per committed unit, all threads together (see [`Measurement::cpu`]).
    pub fn cpu_us_per_unit(&self) -> Option<f64> {
        self.cpu
            .map(|c| c.as_secs_f64() * 1e6 / self.units.max(1) as f64)
    }

    /// Throughput of acknowledged units.
    pub fn units_per_sec(&self) -> f64 {
        self.units as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Throughput counted until everything acknowledged was also applied.
    pub fn sustained_units_per_sec(&self) -> f64 {
        self.units as f64 / self.applied_elapsed.as_secs_f64().max(1e-9)
    }
}

/// The timings of one run of the driver.
pub(super) struct Timings {
    pub(super) units: u64,
    pub(super) elapsed: Duration,
    pub(super) latencies_us: Vec<u32>,
}

/// Runs `threads` writers, each first preparing its own state with `setup(thread)`, then, after
/// a common start signal, making commits of `plan.units_per_commit` units with `commit` until the
/// plan is exhausted.
pub(super) fn drive<S, C, W>(plan: Plan, setup: S, commit: C) -> Result<Timings, String>
where
    S: Fn(usize) -> Result<W, String> + Sync,
    C: Fn(&mut W) -> Result<(), String> + Sync,
{
    let per_commit = plan.units_per_commit.max(1);
    let run = crate::writers::Run {
        threads: plan.threads,
        step: per_commit as u64,
        limit: plan.max_units as u64,
        max_time: plan.max_time,
    };
    let (latencies_us, elapsed) = crate::writers::drive(&run, setup, commit)?;
    Ok(Timings {
        units: (latencies_us.len() * per_commit) as u64,
        elapsed,
        latencies_us,
    })
}

/// The nearest-rank `q` quantile of `sorted` (0 when it is empty): every bench's latency figures.
pub fn quantile<T: Copy + Into<u64>>(sorted: &[T], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[i - 1].into()
}

/// What the read probe ([`Plan::read_probe`]) measured.
#[derive(Clone, Copy, Debug)]
pub struct Reads {
    /// Reads made.
    pub count: usize,
    /// Median read latency, microseconds.
    pub p50_us: u64,
    /// 99th percentile, microseconds.
    pub p99_us: u64,
    /// Largest, microseconds.
    pub max_us: u64,
}

impl Reads {
    pub(super) fn of(sorted_us: &[u64]) -> Reads {
        Reads {
            count: sorted_us.len(),
            p50_us: quantile(sorted_us, 0.50),
            p99_us: quantile(sorted_us, 0.99),
            max_us: quantile(sorted_us, 1.0),
        }
    }
}

pub(super) fn finish(system: System, plan: Plan, mut t: Timings) -> Measurement {
    t.latencies_us.sort_unstable();
    let q = |q: f64| quantile(&t.latencies_us, q);
    Measurement {
        system,
        threads: plan.threads.max(1),
        units: t.units,
        elapsed: t.elapsed,
        p50_us: q(0.50),
        p99_us: q(0.99),
        max_us: q(1.0),
        mean_group: 1.0,
        groups: None,
        applied_elapsed: t.elapsed,
        max_backlog: None,
        backlog_by_tenth: Vec::new(),
        applier_thread: None,
        reads: None,
        store_units_before: 0,
        cpu: None,
        peak_rss: None,
    }
}
