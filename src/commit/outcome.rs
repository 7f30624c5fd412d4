//! What a commit answers: each unit's [`Outcome`] and the [`CommitReport`] of them all. The
//! commit rules (the `rules` module) answer a unit they do not accept with its outcome directly,
//! so the rejections are spelled here alone.

use crate::object::ObjectId;

/// What happened to one unit of a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "outcome", rename_all = "snake_case")
)]
pub enum Outcome {
    /// The entry is now visible.
    Committed {
        /// The commit's sequence number.
        seq: u64,
        /// The entry's revision (0 unless this was a correction).
        revision: u32,
        /// The source version it superseded, if the unit had an entry.
        superseded: Option<u64>,
    },
    /// Identical to what was already committed; nothing changed (an idempotent retry).
    Duplicate {
        /// The seq of the commit that made the identical entry visible.
        seq: u64,
    },
    /// Same version, different bytes: the first committed entry wins.
    Conflict {
        /// The seq of the winning entry.
        winner_seq: u64,
        /// The winning object.
        winner: ObjectId,
    },
    /// Older than the committed version.
    Stale {
        /// The committed version.
        current_version: u64,
    },
    /// Carried a fencing token that is not valid for the unit: not issued for it, not its newest,
    /// or of a lease that has ended. [`crate::FenceReason::of`] says which.
    Fenced {
        /// The token carried.
        token: u64,
        /// The token of the unit's newest lease (0 if the unit was never claimed).
        newest_token: u64,
    },
    /// Carried no fencing token while a lease on the unit is live: the lease's holder (named in
    /// [`UnitOutcome::holder`]) decides what is committed. Retry after the lease ends, or claim
    /// the unit and commit with the token.
    Busy {
        /// When the live lease may be taken over, ms since the Unix epoch.
        expires_at_ms: u64,
    },
    /// Acceptable by itself, but not applied because another unit of the all-or-nothing commit
    /// was rejected.
    Aborted,
}

impl Outcome {
    /// Committed or duplicate: the unit has the requested output.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Committed { .. } | Outcome::Duplicate { .. })
    }

    /// A short snake_case name, as used in JSON and in metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Committed { .. } => "committed",
            Outcome::Duplicate { .. } => "duplicate",
            Outcome::Conflict { .. } => "conflict",
            Outcome::Stale { .. } => "stale",
            Outcome::Fenced { .. } => "fenced",
            Outcome::Busy { .. } => "busy",
            Outcome::Aborted => "aborted",
        }
    }

    /// The seq that holds the unit's output, for committed and duplicate outcomes.
    pub fn seq(&self) -> Option<u64> {
        match *self {
            Outcome::Committed { seq, .. } | Outcome::Duplicate { seq } => Some(seq),
            _ => None,
        }
    }
}

/// One unit's outcome, named. (`holder` comes before the flattened outcome: the API's JSON
/// order, which docs/server.md shows.)
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct UnitOutcome {
    /// Unit key.
    pub unit: String,
    /// Source version asked for.
    pub source_version: u64,
    /// The object asked for.
    pub object: ObjectId,
    /// For a [`Outcome::Busy`] unit: the worker holding the live lease. `None` otherwise.
    pub holder: Option<String>,
    /// What happened.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub outcome: Outcome,
}

/// The result of a commit: its seq (if anything was written) and every unit's outcome, in the
/// order of the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CommitReport {
    /// The seq of the log record written, `None` when nothing changed (all duplicates, or aborted).
    pub seq: Option<u64>,
    /// Per-unit outcomes.
    pub units: Vec<UnitOutcome>,
}

impl CommitReport {
    /// True when every unit is committed or a duplicate.
    pub fn applied(&self) -> bool {
        self.units.iter().all(|u| u.outcome.is_success())
    }

    /// The units that were rejected, with their reasons.
    pub fn rejected(&self) -> impl Iterator<Item = &UnitOutcome> {
        self.units
            .iter()
            .filter(|u| !u.outcome.is_success() && u.outcome != Outcome::Aborted)
    }
}
