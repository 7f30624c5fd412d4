//! How each cell's state is evaluated: what the tables say about the pipeline, read in one
//! transaction, and every cell of a unit judged against it (done, cut off, running, blocked,
//! failed or ready, and why it is stale).

use super::cell::{
    source_key, CellKey, CellState, CellView, Failure, StaleReason, Wave, CELL_PREFIX,
    SOURCE_PREFIX,
};
use super::def::StageDef;
use super::engine::Pipeline;
use crate::error::Result;
use crate::schema::claim::ClaimRecord;
use crate::schema::manifest::{Entry, EntryValue};
use crate::store::Store;
use crate::wal::tail::Tables;
use std::collections::{BTreeMap, HashMap};

/// What the tables say about the pipeline, read in one transaction; `tables` stays open for the
/// older entries early cutoff compares with, so those come from the same read.
pub(super) struct Loaded {
    pub(super) tables: Tables,
    pub(super) now_ms: u64,
    pub(super) sources: BTreeMap<String, EntryValue>,
    /// (stage, unit) → every completion of the cell, under any lineage.
    pub(super) cells: HashMap<(String, String), Vec<(CellKey, EntryValue)>>,
    pub(super) failures: HashMap<String, Failure>,
    pub(super) claims: HashMap<String, ClaimRecord>,
}

/// Why a cell that is not done at the current source version is stale: its completion under the
/// current lineage is for an older source, or (without one) its newest completion under any
/// lineage was computed by other code or from a re-run upstream. `None` when the cell is done or
/// was never completed.
fn stale_reason(
    s: &StageDef,
    completions: Option<&Vec<(CellKey, EntryValue)>>,
    current: Option<EntryValue>,
    done: bool,
    version: u64,
) -> Option<StaleReason> {
    match (current, done) {
        (_, true) => None,
        (Some(v), false) => Some(StaleReason::NewerSource {
            completed: v.source_version,
            current: version,
        }),
        (None, false) => completions
            .and_then(|c| c.iter().max_by_key(|(_, v)| v.seq))
            .map(|(ck, _)| {
                if ck.code_version != s.code_version {
                    StaleReason::CodeChanged {
                        from: ck.code_version,
                        to: s.code_version,
                    }
                } else {
                    StaleReason::UpstreamRerun
                }
            }),
    }
}

/// A cell's state, first match wins: done at the current source version, claimed by a live
/// lease, blocked by an upstream cell that is not done, failed (attempts used up), else ready.
fn cell_state(
    s: &StageDef,
    done: Option<EntryValue>,
    claim: Option<&ClaimRecord>,
    blocked: Option<(String, &'static str)>,
    failure: Option<&Failure>,
) -> CellState {
    if let Some(v) = done {
        CellState::Done {
            source_version: v.source_version,
            code_version: s.code_version,
            seq: v.seq,
            object: v.object.id,
        }
    } else if let Some(c) = claim {
        CellState::Running {
            worker: c.worker.clone(),
            token: c.token,
            source_version: c.source_version,
            expires_at_ms: c.expires_at_ms,
        }
    } else if let Some((upstream, upstream_state)) = blocked {
        CellState::Blocked {
            upstream,
            upstream_state,
        }
    } else {
        match failure {
            Some(f) if f.attempts >= s.max_attempts => CellState::Failed {
                attempts: f.attempts,
                last_error: f.error.clone(),
            },
            Some(f) => CellState::Ready {
                attempts: f.attempts,
                last_error: Some(f.error.clone()),
            },
            None => CellState::Ready {
                attempts: 0,
                last_error: None,
            },
        }
    }
}

/// One stage's evaluated cell of a unit, with its done entry (for a cut-off cell its completion
/// for an older source version, which downstream cells read as their input).
pub(super) struct Evaluated {
    pub(super) view: CellView,
    pub(super) done: Option<Entry>,
}

impl Pipeline {
    /// Reads what the tables say, for every unit or for one. Callers run it, and the evaluation
    /// that reads on from the same tables, inside `contain` (a redb panic on a damaged page is
    /// reported as `Corrupt`).
    pub(super) fn load_uncontained(&self, store: &Store, unit: Option<&str>) -> Result<Loaded> {
        let now_ms = store.core().now_ms();
        let tables = store.core().tables()?;
        let mut sources = BTreeMap::new();
        let mut cells: HashMap<(String, String), Vec<(CellKey, EntryValue)>> = HashMap::new();
        let mut failures = HashMap::new();
        let mut claims = HashMap::new();
        let source_prefix = match unit {
            Some(u) => source_key(u),
            None => SOURCE_PREFIX.to_string(),
        };
        tables.entries_with_prefix(&source_prefix, |k, v| {
            let u = &k[SOURCE_PREFIX.len()..];
            if unit.is_none_or(|want| want == u) {
                sources.insert(u.to_string(), v);
            }
            Ok(())
        })?;
        let cell_prefixes: Vec<String> = match unit {
            None => vec![CELL_PREFIX.to_string()],
            Some(u) => self
                .def
                .stages()
                .iter()
                .map(|s| format!("{CELL_PREFIX}{}/{u}/", s.name))
                .collect(),
        };
        let wanted = |ck: &CellKey| unit.is_none_or(|u| u == ck.unit);
        for prefix in &cell_prefixes {
            tables.entries_with_prefix(prefix, |k, value| {
                if let Some(ck) = CellKey::parse(k).filter(&wanted) {
                    cells
                        .entry((ck.stage.clone(), ck.unit.clone()))
                        .or_default()
                        .push((ck, value));
                }
                Ok(())
            })?;
            tables.claims_with_prefix(prefix, |k, c| {
                if CellKey::parse(k).filter(&wanted).is_some() {
                    claims.insert(k.to_string(), c);
                }
                Ok(())
            })?;
            tables.extensions_with_prefix(prefix, |k, _, data| {
                if CellKey::parse(k).filter(&wanted).is_some() {
                    failures.insert(k.to_string(), Failure::decode(data)?);
                }
                Ok(())
            })?;
        }
        Ok(Loaded {
            tables,
            now_ms,
            sources,
            cells,
            failures,
            claims,
        })
    }

    /// Evaluates every cell of `unit` (upstream first) against its current source version.
    pub(super) fn evaluate(
        &self,
        l: &Loaded,
        unit: &str,
        source: &EntryValue,
        detail: bool,
    ) -> Result<Vec<Evaluated>> {
        let version = source.source_version;
        let mut out: Vec<Evaluated> = Vec::with_capacity(self.def.stages().len());
        let mut index: HashMap<&str, usize> = HashMap::new();
        for s in self.def.topo_order() {
            let lineage = self.def.lineage(&s.name).unwrap_or_default();
            let key = CellKey {
                stage: s.name.clone(),
                unit: unit.to_string(),
                code_version: s.code_version,
                lineage: lineage.to_string(),
            }
            .encode();
            let completions = l.cells.get(&(s.name.clone(), unit.to_string()));
            let current = completions
                .and_then(|c| c.iter().find(|(ck, _)| ck.lineage == lineage))
                .map(|(_, v)| *v);
            // invariant: topological order evaluates every upstream stage before this one.
            let upstream: Vec<&Evaluated> =
                s.upstream.iter().map(|u| &out[index[u.as_str()]]).collect();
            let mut wave = None;
            let mut done = current.filter(|v| v.source_version >= version);
            match (done, current) {
                (None, Some(c)) if self.cutoff => {
                    wave = self.cut_off(l, unit, source, s, &upstream, c)?;
                    if wave.is_some() {
                        done = Some(c);
                    }
                }
                (Some(c), _) if detail => wave = self.reran(l, &key, c)?,
                _ => {}
            }
            let stale = stale_reason(s, completions, current, done.is_some(), version);
            let claim = l.claims.get(&key).filter(|c| c.is_live(l.now_ms));
            let blocked =
                s.upstream.iter().zip(&upstream).find_map(|(u, e)| {
                    (e.done.is_none()).then(|| (u.clone(), e.view.state.name()))
                });
            let failure = l.failures.get(&key).filter(|f| f.source_version == version);
            let state = cell_state(s, done, claim, blocked, failure);
            index.insert(s.name.as_str(), out.len());
            out.push(Evaluated {
                done: done.map(|v| v.into_entry(&key)),
                view: CellView {
                    stage: s.name.clone(),
                    key,
                    state,
                    stale,
                    wave,
                },
            });
        }
        Ok(out)
    }

    /// Early cutoff (SPEC R24): whether the cell of stage `s`, whose completion under its current
    /// lineage `completion` is for an older source version than the unit's current one, still
    /// counts as done. It does when every input is there now (each upstream cell done, re-run or
    /// itself cut off) and is the input the completion was computed from: the output an upstream
    /// cell (or the source) has now is the one it had then — its newest entry committed before
    /// the completion and for a source version no newer than the completion's. Every entry
    /// compared comes from the one read in `l`; one whose history GC pruned is not found, and the
    /// cell re-runs.
    fn cut_off(
        &self,
        l: &Loaded,
        unit: &str,
        source: &EntryValue,
        s: &StageDef,
        upstream: &[&Evaluated],
        completion: EntryValue,
    ) -> Result<Option<Wave>> {
        let mut inputs: Vec<(Option<String>, String, EntryValue)> = Vec::new();
        if s.upstream.is_empty() {
            inputs.push((None, source_key(unit), *source));
        }
        for (name, e) in s.upstream.iter().zip(upstream) {
            let Some(entry) = &e.done else {
                return Ok(None);
            };
            inputs.push((Some(name.clone()), e.view.key.clone(), entry.value()));
        }
        let mut unchanged = Vec::with_capacity(inputs.len());
        for (stage, key, now) in inputs {
            let read_then =
                if now.seq < completion.seq && now.source_version <= completion.source_version {
                    Some(now)
                } else {
                    l.tables
                        .entry_before(&key, completion.seq, completion.source_version)?
                };
            match read_then {
                Some(then) if then.object.id == now.object.id => {
                    unchanged.push((stage, now.object.id))
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(Wave::CutOff {
            completed: completion.source_version,
            current: source.source_version,
            unchanged,
        }))
    }

    /// For a cell done at the current source version: its previous completion under the same key,
    /// if it had one (and its history is kept), i.e. whether it re-ran and with what output.
    fn reran(&self, l: &Loaded, key: &str, done: EntryValue) -> Result<Option<Wave>> {
        let Some(max) = done.source_version.checked_sub(1) else {
            return Ok(None);
        };
        Ok(l.tables
            .entry_before(key, done.seq, max)?
            .map(|p| Wave::Reran {
                previous_version: p.source_version,
                previous_object: p.object.id,
                object: done.object.id,
            }))
    }
}
