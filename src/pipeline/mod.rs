//! Pipelines (SPEC R13): a DAG of named stages, each with a code version; a cell per (unit,
//! stage) that is pending, running, completed or failed; retries of only what failed or was
//! invalidated.
//!
//! Cells ride on the engine's own machinery, so their guarantees are the engine's:
//!
//! - a unit's **source version** is the manifest entry `.pipeline/source/<unit>`
//!   ([`Pipeline::set_source_version`]); it never goes backwards (R3 stale);
//! - a **completion** is a commit of the stage output under the cell key (see [`cell`]) at the
//!   unit's source version — exactly once per (unit, stage, source version, lineage) by the commit
//!   rules, fenced when the worker holds a lease;
//! - **running** is a claim on the cell key (R9: fencing tokens, takeover of expired leases);
//! - a **failure** is an extension record in the log ([`cell::TAG_CELL_FAILED`]) with the error
//!   as its reason, kept per cell with its attempt count;
//! - a changed **definition** is an extension record ([`cell::TAG_DEFINITION`]) naming the code
//!   versions that changed and the stages that invalidates.
//!
//! Invalidation needs no writes: a cell counts as done only if it was completed for the unit's
//! *current* source version under the stage's *current* lineage (a hash of its code version and,
//! transitively, its upstream stages' code versions). A newer source version therefore makes
//! every cell of that unit stale; a changed code version makes that stage and everything
//! downstream stale, for every unit; nothing else re-runs.
//!
//! ```
//! # fn main() -> oncelake::Result<()> {
//! use oncelake::pipeline::{Pipeline, PipelineDef};
//! let dir = tempfile::tempdir().unwrap();
//! let store = oncelake::Store::open(dir.path().join("lake"))?;
//! let def = PipelineDef::builder()
//!     .stage("ingest", 1, &[])
//!     .stage("transform", 1, &["ingest"])
//!     .build()
//!     .unwrap();
//! let p = Pipeline::new(def);
//! p.set_source_version(&store, "orders/day=1", 7, b"raw rows")?;
//! let report = p.work(&store, "worker-1", |cell| Ok(format!("{} done", cell.stage).into_bytes()))?;
//! assert_eq!(report.completed, 2);
//! assert!(p.ready(&store, 10)?.is_empty());
//! # Ok(()) }
//! ```

mod attempt;
pub mod cell;
pub mod def;
mod engine;
mod evaluate;
mod record;
mod status;

pub use attempt::{Attempt, Claim, FailOutcome, WorkOptions, WorkReport};
pub use cell::{CellKey, CellState, CellView, Failure, StaleReason, Wave};
pub use def::{PipelineDef, PipelineDefBuilder, PipelineError, StageDef};
pub use engine::Pipeline;
pub use record::{set_source_version, set_source_versions};
pub use status::{Explain, Input, ReadyCell, StageStatus, Status};

use crate::error::Result;
use crate::object::ObjectId;
use crate::schema::log::RecordBody;
use crate::snapshot::Snapshot;
use crate::store::Store;
use cell::{
    DefinitionRecord, CELL_PREFIX, DEFINITION_KEY, SOURCE_PREFIX, TAG_CELL_FAILED, TAG_DEFINITION,
};
use std::collections::BTreeMap;

/// Everything recorded about a store's pipeline cells, independent of any definition. Built
/// either from the tables ([`recorded_state`]) or from the log alone ([`replay_state`]); the two
/// must agree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedState {
    /// Unit → (source version, object, seq).
    pub sources: BTreeMap<String, (u64, ObjectId, u64)>,
    /// Cell key → (source version, object, seq) of its newest completion.
    pub completions: BTreeMap<String, (u64, ObjectId, u64)>,
    /// Cell key → (seq, failure) of its newest failure.
    pub failures: BTreeMap<String, (u64, Failure)>,
    /// Cell key → its newest lease, as the log records it: its expiry 0 once it ended (released,
    /// or ended by a completion or failure under its token).
    pub claims: BTreeMap<String, crate::Lease>,
    /// (seq, text) of the newest recorded definition.
    pub definition: Option<(u64, String)>,
}

/// The pipeline state as the store's tables hold it now.
pub fn recorded_state(store: &Store) -> Result<RecordedState> {
    crate::error::contain(|| recorded_state_uncontained(store))
}

fn recorded_state_uncontained(store: &Store) -> Result<RecordedState> {
    let tables = store.core().tables()?;
    let mut st = RecordedState::default();
    tables.entries_with_prefix(SOURCE_PREFIX, |k, v| {
        st.sources.insert(
            k[SOURCE_PREFIX.len()..].to_string(),
            (v.source_version, v.object.id, v.seq),
        );
        Ok(())
    })?;
    tables.entries_with_prefix(CELL_PREFIX, |k, v| {
        st.completions
            .insert(k.to_string(), (v.source_version, v.object.id, v.seq));
        Ok(())
    })?;
    tables.claims_with_prefix(CELL_PREFIX, |k, c| {
        st.claims.insert(k.to_string(), c.logged(k));
        Ok(())
    })?;
    tables.extensions_with_prefix(CELL_PREFIX, |k, seq, data| {
        st.failures
            .insert(k.to_string(), (seq, Failure::decode(data)?));
        Ok(())
    })?;
    st.definition = match tables.extension(DEFINITION_KEY)? {
        Some((seq, data)) => Some((seq, DefinitionRecord::decode(&data)?.text)),
        None => None,
    };
    Ok(st)
}

/// Rebuilds the pipeline state from the commit log of `snap` alone (`changes_since(0)`).
///
/// A lease ends, without a record of its own, when a completion or failure carrying its token is
/// recorded — exactly as the commit leader ends it.
pub fn replay_state(snap: &Snapshot) -> Result<RecordedState> {
    let mut st = RecordedState::default();
    let end_lease = |st: &mut RecordedState, key: &str, token: u64| {
        if let Some(c) = st.claims.get_mut(key) {
            if c.token == token {
                c.expires_at_ms = 0;
            }
        }
    };
    for rec in snap.changes_since(0)? {
        let rec = rec?;
        match rec.body {
            RecordBody::Commit { entries } => {
                for e in entries {
                    if let Some(unit) = e.unit.strip_prefix(SOURCE_PREFIX) {
                        st.sources
                            .insert(unit.to_string(), (e.source_version, e.object.id, rec.seq));
                    } else if e.unit.starts_with(CELL_PREFIX) {
                        if let Some(t) = e.token {
                            end_lease(&mut st, &e.unit, t);
                        }
                        st.completions
                            .insert(e.unit, (e.source_version, e.object.id, rec.seq));
                    }
                }
            }
            RecordBody::ClaimGranted(c) | RecordBody::ClaimReleased(c)
                if c.unit.starts_with(CELL_PREFIX) =>
            {
                st.claims.insert(c.unit.clone(), c);
            }
            RecordBody::Extension { tag, data } if tag == TAG_CELL_FAILED => {
                let f = Failure::decode(&data)?;
                if let Some(t) = f.token {
                    end_lease(&mut st, &f.cell, t);
                }
                st.failures.insert(f.cell.clone(), (rec.seq, f));
            }
            RecordBody::Extension { tag, data } if tag == TAG_DEFINITION => {
                st.definition = Some((rec.seq, DefinitionRecord::decode(&data)?.text));
            }
            _ => {}
        }
    }
    Ok(st)
}
