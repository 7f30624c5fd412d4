//! What the engine records besides a run: units' source versions and the definition, through
//! the store's commit path and its log extensions.

use super::cell::{
    source_key, validate_pipeline_unit, DefinitionRecord, DEFINITION_KEY, TAG_DEFINITION,
};
use super::def::PipelineDef;
use super::engine::Pipeline;
use crate::commit::apply::{Done, ExtensionOutcome, Fence, Op};
use crate::commit::{Batch, CommitReport, Outcome, UnitOutcome};
use crate::error::Result;
use crate::stage::Staged;
use crate::store::Store;
use std::collections::HashMap;

/// Submits a log extension record `tag` under `key`, fenced like a commit of `fence`'s unit.
pub(super) fn submit_extension(
    store: &Store,
    tag: u16,
    key: String,
    data: Vec<u8>,
    fence: Option<Fence>,
) -> Result<ExtensionOutcome> {
    match store.submit_op(Op::Extension {
        tag,
        key,
        data,
        fence,
    })? {
        Done::Extension(o) => Ok(o),
        other => unreachable!(
            "invariant: an extension op is answered by an extension outcome, got {other:?}"
        ),
    }
}

/// Records `unit`'s current source version (and its input bytes, readable by the stages without
/// upstream stages) as the manifest entry `.pipeline/source/<unit>`. A newer version invalidates
/// every cell of the unit. The commit rules apply: an older version is stale, the same version
/// with other bytes a conflict, the same bytes a duplicate.
pub fn set_source_version(
    store: &Store,
    unit: &str,
    source_version: u64,
    input: &[u8],
) -> Result<UnitOutcome> {
    Ok(commit_source(store, unit, source_version, input, false)?.0)
}

/// [`set_source_version`]; with `compare` it also says whether the new source has the bytes of
/// the unit's previous, older one (what triggers the cut-off count: a read before the commit,
/// never a decision).
fn commit_source(
    store: &Store,
    unit: &str,
    source_version: u64,
    input: &[u8],
    compare: bool,
) -> Result<(UnitOutcome, bool)> {
    validate_pipeline_unit(unit)?;
    let key = source_key(unit);
    let before = if compare {
        store.core().tables()?.entry(&key)?
    } else {
        None
    };
    let staged = store.stage_bytes(input)?;
    let mut r = store.commit(Batch::new().internal().put(key, source_version, &staged))?;
    let same_bytes =
        before.is_some_and(|b| b.object.id == staged.id() && b.source_version < source_version);
    Ok((r.units.remove(0), same_bytes))
}

/// Records many units' source versions in one commit (per-unit outcomes, as
/// [`crate::Batch::partial`]): the bulk form of [`set_source_version`], e.g. for a source
/// listing. Identical inputs are staged once.
pub fn set_source_versions(store: &Store, units: &[(&str, u64, &[u8])]) -> Result<CommitReport> {
    commit_rows(store, units, |unit| Ok(source_key(unit)))
}

/// Commits units' rows (unit, version, bytes) under the internal keys `key` makes of them, in one
/// partial commit, staging identical bytes once: the bulk forms of a source version and of a
/// completion.
pub(super) fn commit_rows(
    store: &Store,
    rows: &[(&str, u64, &[u8])],
    key: impl Fn(&str) -> Result<String>,
) -> Result<CommitReport> {
    let mut staged: HashMap<&[u8], Staged> = HashMap::new();
    let mut batch = Batch::new().internal().partial();
    for &(unit, version, bytes) in rows {
        validate_pipeline_unit(unit)?;
        if !staged.contains_key(bytes) {
            staged.insert(bytes, store.stage_bytes(bytes)?);
        }
        batch = batch.put(key(unit)?, version, &staged[bytes]);
    }
    store.commit(batch)
}

impl Pipeline {
    /// Records `unit`'s current source version; see [`set_source_version`].
    pub fn set_source_version(
        &self,
        store: &Store,
        unit: &str,
        source_version: u64,
        input: &[u8],
    ) -> Result<UnitOutcome> {
        let (out, same_bytes) = commit_source(store, unit, source_version, input, self.cutoff)?;
        if let (true, Outcome::Committed { seq, .. }) = (same_bytes, &out.outcome) {
            self.count_cut_off(store, unit, *seq, true)?;
        }
        Ok(out)
    }

    /// Records the definition in the log if it differs from the last one recorded, with the
    /// stages it invalidates as the reason. Returns the record's seq if it wrote one.
    pub fn record_definition(&self, store: &Store) -> Result<Option<u64>> {
        let text = self.def.to_text();
        let old = match store.core().tables()?.extension(DEFINITION_KEY)? {
            Some((_, data)) => Some(DefinitionRecord::decode(&data)?.text),
            None => None,
        };
        if old.as_deref() == Some(text.as_str()) {
            return Ok(None);
        }
        let reason = match old.as_deref().map(PipelineDef::parse) {
            None => "first definition".to_string(),
            Some(Err(_)) => "the previous definition no longer parses".to_string(),
            Some(Ok(prev)) => self.changes_since(&prev),
        };
        let data = DefinitionRecord { text, reason }.encode();
        match submit_extension(store, TAG_DEFINITION, DEFINITION_KEY.into(), data, None)? {
            ExtensionOutcome::Written { seq } => Ok(Some(seq)),
            ExtensionOutcome::Fenced { .. } | ExtensionOutcome::Busy { .. } => {
                unreachable!("invariant: an extension without a fence is never fenced or busy")
            }
        }
    }

    /// Describes how this definition differs from `prev`: changed code versions and the stages
    /// they invalidate.
    fn changes_since(&self, prev: &PipelineDef) -> String {
        let mut parts = Vec::new();
        let mut invalid = Vec::new();
        for s in self.def.topo_order() {
            match prev.stage(&s.name) {
                None => parts.push(format!("stage {} added", s.name)),
                Some(p) if p.code_version != s.code_version => parts.push(format!(
                    "code version of {} {} -> {}",
                    s.name, p.code_version, s.code_version
                )),
                Some(p) if p.upstream != s.upstream => {
                    parts.push(format!("upstream of {} changed", s.name))
                }
                _ => {}
            }
            if prev.lineage(&s.name) != self.def.lineage(&s.name) {
                invalid.push(s.name.as_str());
            }
        }
        for p in prev.stages() {
            if self.def.stage(&p.name).is_none() {
                parts.push(format!("stage {} removed", p.name));
            }
        }
        if parts.is_empty() {
            parts.push("settings changed".into());
        }
        if !invalid.is_empty() {
            parts.push(format!("invalidates {}", invalid.join(", ")));
        }
        parts.join("; ")
    }
}
