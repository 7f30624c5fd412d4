//! One run of a cell: claiming it, then completing it (its output committed under the cell key)
//! or failing it (a log record), and counting the cells a completion cut off.

use super::cell::{
    validate_pipeline_unit, CellState, Failure, Wave, MAX_ERROR_LEN, TAG_CELL_FAILED,
};
use super::engine::Pipeline;
use super::record::{commit_rows, submit_extension};
use super::status::ReadyCell;
use crate::claim::{validate_worker, ClaimOutcome, Lease};
use crate::commit::apply::{ExtensionOutcome, Fence};
use crate::commit::{Batch, CommitReport, Outcome, UnitOutcome};
use crate::error::Result;
use crate::metrics::add;
use crate::store::{claim_op, Store};
use std::collections::HashMap;
use std::time::Duration;

/// The answer to [`Pipeline::claim`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "claim", rename_all = "snake_case"))]
pub enum Claim {
    /// The cell is yours: run it, then complete or fail it with the lease's token.
    Granted {
        /// The lease on the cell key.
        lease: Lease,
        /// The cell, with its attempt count as of the grant.
        cell: ReadyCell,
    },
    /// Another worker holds a live lease.
    Held {
        /// Who.
        worker: String,
        /// Until when (ms since the Unix epoch).
        expires_at_ms: u64,
    },
    /// The cell was completed meanwhile.
    AlreadyDone,
    /// The cell used up its attempts meanwhile; the lease was given back.
    GaveUp {
        /// Failed runs.
        attempts: u32,
    },
}

/// One run of a cell, as [`Pipeline::complete`] and [`Pipeline::fail`] record it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Attempt {
    /// The unit.
    pub unit: String,
    /// The stage.
    pub stage: String,
    /// The source version computed.
    pub source_version: u64,
    /// Who ran it.
    pub worker: String,
    /// The fencing token of the worker's lease on the cell, if it claimed it.
    pub token: Option<u64>,
}

/// The answer to [`Pipeline::fail`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "outcome", rename_all = "snake_case"))]
pub enum FailOutcome {
    /// The failure is in the log at `seq`.
    Recorded {
        /// Its seq.
        seq: u64,
        /// Failed runs at this source version so far.
        attempts: u32,
        /// True when that reaches the stage's `max_attempts`: the cell is not retried.
        gave_up: bool,
    },
    /// The attempt's token is not valid for the cell (its lease was taken over or ended, or the
    /// token was never issued for it); nothing was recorded.
    Fenced {
        /// The token carried.
        token: u64,
        /// The token of the cell's newest lease (0 if it was never claimed).
        newest_token: u64,
    },
    /// The attempt carries no token while another run holds a live lease on the cell; nothing was
    /// recorded.
    Busy {
        /// The worker holding the lease.
        worker: String,
        /// When its lease may be taken over, ms since the Unix epoch.
        expires_at_ms: u64,
    },
}
/// How [`Pipeline::work_with`] runs.
#[derive(Clone, Debug)]
pub struct WorkOptions {
    /// Lease length per cell; a run longer than this may be taken over (and then fenced).
    pub ttl: Duration,
    /// When nothing is ready but other workers hold leases, wait for them (polling) instead of
    /// returning, so cells they unblock are picked up. Off by default.
    pub wait_for_running: bool,
    /// How long to sleep between polls while waiting.
    pub poll: Duration,
}

impl Default for WorkOptions {
    fn default() -> Self {
        WorkOptions {
            ttl: Duration::from_secs(60),
            wait_for_running: false,
            poll: Duration::from_millis(5),
        }
    }
}

/// What a [`Pipeline::work`] loop did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkReport {
    /// Stage closures run.
    pub runs: u64,
    /// Runs whose output was committed (exactly once per cell and source version).
    pub completed: u64,
    /// Runs whose output was already committed identically (a collapsed retry).
    pub duplicates: u64,
    /// Runs that failed (the closure returned an error).
    pub failed: u64,
    /// Runs whose result was rejected (fenced, stale or conflict) because the lease was lost or
    /// the source moved on.
    pub rejected: u64,
    /// Runs that retried an earlier failure.
    pub retried: u64,
    /// Runs that redid an invalidated completion.
    pub invalidated: u64,
}

impl Pipeline {
    /// Claims a ready cell for `worker` (a lease on its cell key; SPEC R9 applies unchanged). On
    /// a grant it re-reads the cell's failures — another worker may have failed it since the cell
    /// was listed — and returns the cell with the fresh attempt count, or gives the lease back if
    /// the attempts are used up.
    pub fn claim(
        &self,
        store: &Store,
        cell: &ReadyCell,
        worker: &str,
        ttl: Duration,
    ) -> Result<Claim> {
        let op = claim_op(cell.key.clone(), cell.source_version, worker.into(), ttl)?;
        let lease = match store.submit_claim(op)? {
            ClaimOutcome::Granted { lease, .. } => lease,
            ClaimOutcome::Held {
                worker,
                expires_at_ms,
            } => {
                return Ok(Claim::Held {
                    worker,
                    expires_at_ms,
                })
            }
            ClaimOutcome::AlreadyDone(_) => return Ok(Claim::AlreadyDone),
        };
        let max = self.stage(&cell.stage)?.max_attempts;
        let failure = self
            .failure(store, &cell.key)?
            .filter(|f| f.source_version == cell.source_version);
        let attempts = failure.as_ref().map_or(0, |f| f.attempts);
        if attempts >= max {
            store.release(&lease)?;
            return Ok(Claim::GaveUp { attempts });
        }
        let c = &store.core().metrics.c;
        add(&c.pipeline_cells_ready, 1);
        if attempts > 0 {
            add(&c.pipeline_cells_retried, 1);
        }
        if cell.stale.is_some() {
            add(&c.pipeline_cells_invalidated, 1);
        }
        let cell = ReadyCell {
            attempts,
            last_error: failure.map(|f| f.error),
            ..cell.clone()
        };
        Ok(Claim::Granted { lease, cell })
    }

    /// Completes a cell: stages `output` and commits it under the cell key at the attempt's
    /// source version, under the commit rules' lease check: with a token it must be the cell's
    /// newest lease's (else fenced), without one no lease on the cell may be live (else busy).
    /// Exactly once per (unit, stage, source version, lineage): a repeat with the same bytes is a
    /// duplicate, with other bytes a conflict, for an older version stale.
    pub fn complete(&self, store: &Store, attempt: &Attempt, output: &[u8]) -> Result<UnitOutcome> {
        validate_pipeline_unit(&attempt.unit)?;
        let key = self.cell_key(&attempt.unit, &attempt.stage)?;
        let staged = store.stage_bytes(output)?;
        // Only for the cut-off count below, never for a decision.
        let before = store.core().tables()?.entry(&key)?;
        let batch = match attempt.token {
            Some(t) => Batch::new()
                .internal()
                .put_fenced(key, attempt.source_version, &staged, t),
            None => Batch::new()
                .internal()
                .put(key, attempt.source_version, &staged),
        };
        let mut r = store.commit(batch)?;
        let out = r.units.remove(0);
        if matches!(out.outcome, Outcome::Committed { .. }) {
            add(&store.core().metrics.c.pipeline_cells_completed, 1);
            let unchanged = before.is_some_and(|b| {
                b.object.id == staged.id() && b.source_version < attempt.source_version
            });
            if let (true, Outcome::Committed { seq, .. }) = (unchanged, &out.outcome) {
                self.count_cut_off(store, &attempt.unit, *seq, false)?;
            }
        }
        Ok(out)
    }

    /// Completes many cells of `stage` in one commit (per-unit outcomes, as
    /// [`crate::Batch::partial`]): the bulk form of [`Pipeline::complete`] without a lease, for
    /// outputs computed outside a worker (loading a pipeline's results, the worked example's
    /// setup). `cells` are (unit, source version, output); the commit rules apply to each as to
    /// a completion without a token (a live lease on the cell makes it busy). No cut-off is
    /// counted: the bulk form has no previous run to compare with.
    pub fn complete_cells(
        &self,
        store: &Store,
        stage: &str,
        cells: &[(&str, u64, &[u8])],
    ) -> Result<CommitReport> {
        let report = commit_rows(store, cells, |unit| self.cell_key(unit, stage))?;
        let done = report
            .units
            .iter()
            .filter(|u| matches!(u.outcome, Outcome::Committed { .. }))
            .count();
        add(
            &store.core().metrics.c.pipeline_cells_completed,
            done as u64,
        );
        Ok(report)
    }

    /// Counts (metric `pipeline_cells_cut_off`) the cells of `unit` that the commit of seq
    /// `seq` cut off: a completion whose output equals the cell's previous one, or (`source`) a
    /// new source version with the bytes of the previous one. A cut-off cell is attributed to the
    /// newest commit among the cells above it that re-ran for the current source version (the one
    /// that made it done), or to the source's commit when none re-ran; so each is counted once
    /// however the completions interleave, as long as the source does not move on meanwhile. The
    /// count is informational: what is done is decided from the tables alone.
    pub(super) fn count_cut_off(
        &self,
        store: &Store,
        unit: &str,
        seq: u64,
        source: bool,
    ) -> Result<()> {
        if !self.cutoff {
            return Ok(());
        }
        let e = self.explain(store, unit)?;
        let Some(version) = e.source_version else {
            return Ok(());
        };
        // Per stage: the newest seq of a cell at or above it that re-ran for `version`.
        let mut newest_rerun: HashMap<&str, Option<u64>> = HashMap::new();
        let mut n = 0;
        for (s, c) in self.def.topo_order().zip(&e.cells) {
            let above = s
                .upstream
                .iter()
                .filter_map(|u| newest_rerun.get(u.as_str()).copied().flatten())
                .max();
            let cut_off = c.wave.as_ref().is_some_and(Wave::is_cut_off);
            let own = match c.state {
                CellState::Done {
                    source_version,
                    seq,
                    ..
                } if source_version == version && !cut_off => Some(seq),
                _ => None,
            };
            if cut_off && above.map_or(source, |a| !source && a == seq) {
                n += 1;
            }
            newest_rerun.insert(s.name.as_str(), above.max(own));
        }
        add(&store.core().metrics.c.pipeline_cells_cut_off, n);
        Ok(())
    }

    /// Records a failed run of a cell: a log record with the error as its reason, and the cell's
    /// attempt count (per source version) raised by one. It obeys the lease rules of a commit of
    /// the cell (fenced, busy) and ends the cell's lease so the cell can be retried at once.
    pub fn fail(&self, store: &Store, attempt: &Attempt, error: &str) -> Result<FailOutcome> {
        validate_pipeline_unit(&attempt.unit)?;
        validate_worker(&attempt.worker)?;
        let key = self.cell_key(&attempt.unit, &attempt.stage)?;
        let max = self.stage(&attempt.stage)?.max_attempts;
        // Under a lease only its holder's token records a failure (others are fenced or busy),
        // so this read-then-write cannot lose a count to another worker; without any lease,
        // concurrent token-less failures may count once.
        let prev = self.failure(store, &key)?;
        let attempts = match prev {
            Some(f) if f.source_version == attempt.source_version => f.attempts.saturating_add(1),
            _ => 1,
        };
        let f = Failure {
            cell: key.clone(),
            source_version: attempt.source_version,
            attempts,
            token: attempt.token,
            worker: attempt.worker.clone(),
            error: crate::text::prefix(error, MAX_ERROR_LEN).to_string(),
        };
        let fence = Some(Fence {
            unit: key.clone(),
            token: attempt.token,
        });
        match submit_extension(store, TAG_CELL_FAILED, key, f.encode(), fence)? {
            ExtensionOutcome::Written { seq } => {
                add(&store.core().metrics.c.pipeline_cells_failed, 1);
                Ok(FailOutcome::Recorded {
                    seq,
                    attempts,
                    gave_up: attempts >= max,
                })
            }
            ExtensionOutcome::Fenced {
                token,
                newest_token,
            } => Ok(FailOutcome::Fenced {
                token,
                newest_token,
            }),
            ExtensionOutcome::Busy {
                worker,
                expires_at_ms,
            } => Ok(FailOutcome::Busy {
                worker,
                expires_at_ms,
            }),
        }
    }

    /// Whether another worker holds a live lease on the cell key.
    pub(crate) fn held_by_other(&self, store: &Store, key: &str, worker: &str) -> Result<bool> {
        let now = store.core().now_ms();
        let held = match store.core().tables()?.claim(key)? {
            Some(c) => c.is_live(now) && c.worker != worker,
            None => false,
        };
        Ok(held)
    }

    /// The cell's recorded failure, if any.
    fn failure(&self, store: &Store, key: &str) -> Result<Option<Failure>> {
        match store.core().tables()?.extension(key)? {
            Some((_, data)) => Failure::decode(&data).map(Some),
            None => Ok(None),
        }
    }
}
