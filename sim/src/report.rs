//! What a simulation measured: the report `simulate` returns.

use crate::{Schedule, SimMode};
use std::time::Duration;

/// What a simulation measured, read back from the engine's metrics and store.
#[derive(Clone, Debug, PartialEq)]
pub struct SimReport {
    /// The mode simulated.
    pub mode: SimMode,
    /// The schedule of the overlapped units.
    pub schedule: Schedule,
    /// Worker threads.
    pub workers: usize,
    /// Tasks per chunk (one batched engine call each).
    pub chunk: usize,
    /// Logical units.
    pub units: u64,
    /// Units the scheduler handed to two workers.
    pub overlapped: u64,
    /// Work closures run (engine counter `computations`), crashed attempts included.
    pub computations: u64,
    /// Of those, the ones whose output did not become the entry (engine counter
    /// `redundant_computations`).
    pub redundant: u64,
    /// Crashes the simulation injected (its own count): each killed a worker in the middle of one
    /// unit's work and lost its whole chunk.
    pub crashes: u64,
    /// Attempts lost to those crashes (its own count): every work that ran in a crashed chunk, the
    /// one that crashed included. Each is a computation that produced nothing.
    pub crashed_attempts: u64,
    /// Runs that found the unit already done and did not compute (engine counter
    /// `runs_already_done`).
    pub already_done: u64,
    /// Runs that found the unit held by another worker and did not compute (engine counter
    /// `runs_busy`).
    pub busy: u64,
    /// Entries in the manifest at the end.
    pub entries: u64,
    /// Units committed (engine counter `units_committed`): one per unit when every unit was
    /// written once; a unit written twice (a second output, a new revision) counts again.
    pub units_committed: u64,
    /// Wasted share of all work: (redundant + crashed) / computations.
    pub wasted_fraction: f64,
    /// Commits collapsed as duplicates (engine counter).
    pub duplicates_collapsed: u64,
    /// Claims granted (engine counter).
    pub claims_granted: u64,
    /// Claims answered "held by another worker" (engine counter).
    pub claims_held: u64,
    /// Claims answered "already done" (engine counter).
    pub claims_already_done: u64,
    /// Expired leases taken over (engine counter).
    pub claims_taken_over: u64,
    /// Commits rejected because of an outdated fencing token (engine counter).
    pub fenced_rejections: u64,
    /// Commit groups (one redb write transaction each) the engine wrote.
    pub commit_groups: u64,
    /// Mean operations (commits, claims) per commit group.
    pub mean_group_ops: f64,
    /// Rounds the scheduler needed (1 without crashes).
    pub rounds: u32,
    /// Abandoned staging files and unreferenced objects removed at the end by the garbage
    /// collector ([`Store::gc`]).
    pub orphans_collected: u64,
    /// Orphans a dry-run garbage collection still finds after the cleanup (must be 0).
    pub orphans_left: u64,
    /// Whether replaying the commit log reproduced the manifest (invariant I7).
    pub replay_clean: bool,
    /// Wall time of the whole simulation, store creation to final checks.
    pub elapsed: Duration,
}

impl SimReport {
    /// Units whose output was committed more than once: commits of units beyond one per entry.
    pub fn written_twice(&self) -> u64 {
        self.units_committed.saturating_sub(self.entries)
    }

    /// Whether exactly-once held: one entry per unit, each written once, no orphan left, and
    /// the log replays to the manifest.
    pub fn exactly_once(&self) -> bool {
        self.entries == self.units
            && self.units_committed == self.units
            && self.orphans_left == 0
            && self.replay_clean
    }
}
