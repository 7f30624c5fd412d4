//! Committing: the batch a writer submits, the outcome it gets back, and the path in between —
//! the lock-free group-commit queue (`queue`), the pure commit rules ([`rules`]) and the leader
//! that applies a group in one redb transaction (`apply`).

pub(crate) mod apply;
pub(crate) mod group;
pub mod invariants;
#[cfg(feature = "lake")]
pub(crate) mod lake;
#[cfg(feature = "lake")]
pub(crate) mod lake_checkpoint;
mod outcome;
pub(crate) mod queue;
pub mod rules;
pub(crate) mod view;

use crate::error::{Error, Result};
use crate::key::{validate_key, validate_user_key};
use crate::stage::Staged;
pub use outcome::{CommitReport, Outcome, UnitOutcome};
pub use rules::{Decision, FenceReason, Intent};

use std::collections::HashSet;

/// What [`crate::Store::checkpoint`] (a lake node's) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointReport {
    /// The segment the checkpoint is of (0: the lake has no segment yet, nothing was written).
    pub segment: u64,
    /// Its size in the lake.
    pub bytes: u64,
    /// `true`: this call wrote it; `false`: the lake held it already (and this node's replica
    /// was found equal to it).
    pub written: bool,
}

/// How a multi-unit commit treats rejected units (SPEC R4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Atomicity {
    /// All or nothing: any conflict, stale, fenced or busy unit aborts the whole commit. The
    /// default.
    #[default]
    AllOrNothing,
    /// Apply every acceptable unit and report the others.
    Partial,
}

/// One unit of a batch.
#[derive(Clone, Debug)]
pub struct BatchItem {
    /// Unit key.
    pub unit: String,
    /// Source version the output was derived from.
    pub source_version: u64,
    /// The staged object.
    pub staged: Staged,
    /// Fencing token from a claim, if the writer holds one.
    pub token: Option<u64>,
    /// Put or deliberate correction.
    pub intent: Intent,
}

/// A set of entries to make visible atomically.
///
/// ```no_run
/// # fn main() -> oncelake::Result<()> {
/// let store = oncelake::Store::open("/tmp/lake")?;
/// let a = store.stage_bytes(b"output for a")?;
/// let b = store.stage_bytes(b"output for b")?;
/// let report = store.commit(oncelake::Batch::new().put("a", 1, &a).put("b", 1, &b))?;
/// assert!(report.applied());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub(crate) items: Vec<BatchItem>,
    pub(crate) atomicity: Atomicity,
    /// Built by the engine itself (the pipeline engine): may write internal units.
    pub(crate) internal: bool,
}

impl Batch {
    /// An empty all-or-nothing batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an ordinary output of `unit` at `source_version`.
    pub fn put(self, unit: impl Into<String>, source_version: u64, staged: &Staged) -> Self {
        self.item(unit.into(), source_version, staged, None, Intent::Put)
    }

    /// Adds an output carrying the fencing token of the writer's claim.
    pub fn put_fenced(
        self,
        unit: impl Into<String>,
        source_version: u64,
        staged: &Staged,
        token: u64,
    ) -> Self {
        self.item(
            unit.into(),
            source_version,
            staged,
            Some(token),
            Intent::Put,
        )
    }

    /// Adds a deliberate correction: a new object for the *same* source version, committed as
    /// revision + 1. Nothing is overwritten; the old entry stays in the history.
    pub fn correct(self, unit: impl Into<String>, source_version: u64, staged: &Staged) -> Self {
        self.item(unit.into(), source_version, staged, None, Intent::Correct)
    }

    /// Adds a fully specified item.
    pub fn item(
        mut self,
        unit: String,
        source_version: u64,
        staged: &Staged,
        token: Option<u64>,
        intent: Intent,
    ) -> Self {
        self.items.push(BatchItem {
            unit,
            source_version,
            staged: staged.clone(),
            token,
            intent,
        });
        self
    }

    /// Marks a batch the engine builds for its own internal units (`.pipeline/...`): the only
    /// batches that may write them (see [`crate::validate_user_key`]).
    pub(crate) fn internal(mut self) -> Self {
        self.internal = true;
        self
    }

    /// Switches to "apply what is acceptable" (SPEC R4 opt-in).
    pub fn partial(mut self) -> Self {
        self.atomicity = Atomicity::Partial;
        self
    }

    /// The units in the batch.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the batch has no units.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Checks what can be checked before the commit: keys, emptiness, a unit listed twice.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.items.is_empty() {
            return Err(Error::InvalidRequest(
                "a commit needs at least one unit".into(),
            ));
        }
        let mut seen = HashSet::with_capacity(self.items.len());
        for it in &self.items {
            if self.internal {
                validate_key(&it.unit)?;
            } else {
                validate_user_key(&it.unit)?;
            }
            if !seen.insert(it.unit.as_str()) {
                return Err(Error::InvalidRequest(format!(
                    "unit {:?} appears twice in one commit; commit one entry per unit",
                    it.unit
                )));
            }
        }
        self.check_record_size()
    }

    /// Refuses a batch whose commit-log record would exceed [`crate::schema::log::MAX_RECORD_PAYLOAD`]:
    /// such a record could be written but never read back (by `changes_since`, replay or verify).
    fn check_record_size(&self) -> Result<()> {
        let entries = self
            .items
            .iter()
            .map(|i| (i.unit.as_str(), i.token.is_some()));
        let len = crate::schema::log::commit_payload_len(entries);
        if len <= crate::schema::log::MAX_RECORD_PAYLOAD {
            return Ok(());
        }
        let per_unit = len / self.items.len();
        let fits = crate::schema::log::MAX_RECORD_PAYLOAD / per_unit.max(1);
        Err(Error::InvalidRequest(format!(
            "a commit of {} units needs a {len}-byte log record, over the limit of {} bytes; \
             split it into commits of at most about {fits} units of this key length",
            self.items.len(),
            crate::schema::log::MAX_RECORD_PAYLOAD
        )))
    }
}
