//! The pipeline engine: which cells are ready, claiming and running them, recording completions
//! and failures through the store's commit path, explaining a unit, counting states per stage.

use super::cell::{
    source_key, validate_pipeline_unit, CellKey, CellState, CellView, Failure, StaleReason, Wave,
    CELL_PREFIX, DEFINITION_KEY, MAX_ERROR_LEN, SOURCE_PREFIX, TAG_CELL_FAILED, TAG_DEFINITION,
};
use super::def::{PipelineDef, StageDef};
use crate::claim::{validate_worker, ClaimOutcome, Lease};
use crate::commit::apply::{Done, ExtensionOutcome, Fence, Op};
use crate::commit::{Batch, Outcome, UnitOutcome};
use crate::error::{Error, Result};
use crate::metrics::add;
use crate::schema::claim::ClaimRecord;
use crate::schema::manifest::{Entry, EntryValue};
use crate::store::Store;
use crate::wal::tail::Tables;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// A pipeline definition bound to the engine: the operations on its cells.
#[derive(Clone, Debug)]
pub struct Pipeline {
    def: PipelineDef,
    /// Early cutoff (SPEC R24) on; off only to measure what it saves.
    cutoff: bool,
}

/// An input of a ready cell: the unit's source entry (`stage: None`) or an upstream cell's
/// completed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Input {
    /// The upstream stage, or `None` for the unit's source.
    pub stage: Option<String>,
    /// The entry (its object holds the bytes).
    pub entry: Entry,
}

/// A cell that may run now.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReadyCell {
    /// The unit.
    pub unit: String,
    /// The stage.
    pub stage: String,
    /// The cell key (under the stage's current lineage).
    pub key: String,
    /// The unit's current source version: the version to compute and complete.
    pub source_version: u64,
    /// Earlier failed runs at this source version.
    pub attempts: u32,
    /// The last of their errors.
    pub last_error: Option<String>,
    /// Set when this run redoes an invalidated completion.
    pub stale: Option<StaleReason>,
    /// The source (for a stage without upstream stages) or the upstream cells' outputs.
    pub inputs: Vec<Input>,
}

impl ReadyCell {
    /// Reads the bytes of the input from `stage` (`None`: the unit's source), checking size and
    /// CRC32.
    pub fn read_input(&self, store: &Store, stage: Option<&str>) -> Result<Vec<u8>> {
        let input = self
            .inputs
            .iter()
            .find(|i| i.stage.as_deref() == stage)
            .ok_or_else(|| {
                Error::InvalidRequest(format!(
                    "stage {:?} has no input {:?}; read one of its upstream stages",
                    self.stage, stage
                ))
            })?;
        store.snapshot()?.read_object(&input.entry)
    }
}

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

/// A unit's cells, explained.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Explain {
    /// The unit.
    pub unit: String,
    /// Its current source version; `None` if none was ever set (then no cell can run).
    pub source_version: Option<u64>,
    /// One per stage, upstream stages first.
    pub cells: Vec<CellView>,
}

/// Cell counts of one stage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StageStatus {
    /// The stage.
    pub stage: String,
    /// Its code version.
    pub code_version: u64,
    /// Cells done.
    pub done: u64,
    /// Cells ready.
    pub ready: u64,
    /// Cells running.
    pub running: u64,
    /// Cells blocked on an upstream cell.
    pub blocked: u64,
    /// Cells that used up their attempts.
    pub failed: u64,
    /// Cells (not done) whose earlier completion was invalidated; also counted in their state.
    pub stale: u64,
    /// Done cells that were cut off (SPEC R24): not re-run at the current source version because
    /// none of their inputs changed; also counted in `done`.
    #[cfg_attr(feature = "serde", serde(default))]
    pub cut_off: u64,
}

/// Cell counts of a whole pipeline.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Status {
    /// Units with a source version.
    pub units: u64,
    /// Per stage, upstream stages first.
    pub stages: Vec<StageStatus>,
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

/// What the tables say about the pipeline, read in one transaction; `tables` stays open for the
/// older entries early cutoff compares with, so those come from the same read.
struct Loaded {
    tables: Tables,
    now_ms: u64,
    sources: BTreeMap<String, EntryValue>,
    /// (stage, unit) → every completion of the cell, under any lineage.
    cells: HashMap<(String, String), Vec<(CellKey, EntryValue)>>,
    failures: HashMap<String, Failure>,
    claims: HashMap<String, ClaimRecord>,
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
struct Evaluated {
    view: CellView,
    done: Option<Entry>,
}

fn submit_extension(
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
    validate_pipeline_unit(unit)?;
    let staged = store.stage_bytes(input)?;
    let mut r = store.commit(Batch::new().internal().put(
        source_key(unit),
        source_version,
        &staged,
    ))?;
    Ok(r.units.remove(0))
}

/// Records many units' source versions in one commit (per-unit outcomes, as
/// [`crate::Batch::partial`]): the bulk form of [`set_source_version`], e.g. for a source
/// listing. Identical inputs are staged once.
pub fn set_source_versions(
    store: &Store,
    units: &[(&str, u64, &[u8])],
) -> Result<crate::commit::CommitReport> {
    commit_rows(store, units, |unit| Ok(source_key(unit)))
}

/// Commits units' rows (unit, version, bytes) under the internal keys `key` makes of them, in one
/// partial commit, staging identical bytes once: the bulk forms of a source version and of a
/// completion.
fn commit_rows(
    store: &Store,
    rows: &[(&str, u64, &[u8])],
    key: impl Fn(&str) -> Result<String>,
) -> Result<crate::commit::CommitReport> {
    let mut staged: HashMap<&[u8], crate::stage::Staged> = HashMap::new();
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
    /// Binds a validated definition.
    pub fn new(def: PipelineDef) -> Pipeline {
        Pipeline { def, cutoff: true }
    }

    /// Turns early cutoff (SPEC R24) on (the default) or off. Without it every cell of a unit
    /// re-runs after a newer source version, whatever its inputs: only for measuring what the
    /// cutoff saves (`oncelake simulate --pipeline`).
    pub fn with_cutoff(mut self, on: bool) -> Pipeline {
        self.cutoff = on;
        self
    }

    /// The definition.
    pub fn def(&self) -> &PipelineDef {
        &self.def
    }

    /// The cell key of (`unit`, `stage`) under the stage's current code version and lineage.
    pub fn cell_key(&self, unit: &str, stage: &str) -> Result<String> {
        let s = self.stage(stage)?;
        Ok(CellKey {
            stage: s.name.clone(),
            unit: unit.to_string(),
            code_version: s.code_version,
            lineage: self.def.lineage(stage).unwrap_or_default().to_string(),
        }
        .encode())
    }

    fn stage(&self, stage: &str) -> Result<&super::def::StageDef> {
        self.def.stage(stage).ok_or_else(|| {
            Error::InvalidRequest(format!(
                "the pipeline has no stage {stage:?}; its stages are {}",
                self.def
                    .stages()
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// Records `unit`'s current source version; see [`set_source_version`].
    pub fn set_source_version(
        &self,
        store: &Store,
        unit: &str,
        source_version: u64,
        input: &[u8],
    ) -> Result<UnitOutcome> {
        validate_pipeline_unit(unit)?;
        let before = store.core().tables()?.entry(&source_key(unit))?;
        let out = set_source_version(store, unit, source_version, input)?;
        let same_bytes = before.is_some_and(|b| {
            b.object.id == crate::object::ObjectId::of(input) && b.source_version < source_version
        });
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
            Some((_, data)) => Some(super::cell::DefinitionRecord::decode(&data)?.text),
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
        let data = super::cell::DefinitionRecord { text, reason }.encode();
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

    /// Reads what the tables say, for every unit or for one. Callers run it, and the evaluation
    /// that reads on from the same tables, inside `contain` (a redb panic on a damaged page is
    /// reported as `Corrupt`).
    fn load_uncontained(&self, store: &Store, unit: Option<&str>) -> Result<Loaded> {
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

    /// The explanation of one unit's cells from already loaded state; with `detail` it also says
    /// which done cells re-ran (a history read per done cell).
    fn explain_loaded(
        &self,
        l: &Loaded,
        unit: &str,
        source: &EntryValue,
        detail: bool,
    ) -> Result<Explain> {
        Ok(Explain {
            unit: unit.to_string(),
            source_version: Some(source.source_version),
            cells: self
                .evaluate(l, unit, source, detail)?
                .into_iter()
                .map(|e| e.view)
                .collect(),
        })
    }

    /// Evaluates every cell of `unit` (upstream first) against its current source version.
    fn evaluate(
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

    fn ready_cell(
        &self,
        unit: &str,
        source: &EntryValue,
        cells: &[Evaluated],
        i: usize,
    ) -> ReadyCell {
        let e = &cells[i];
        let (attempts, last_error) = match &e.view.state {
            CellState::Ready {
                attempts,
                last_error,
            } => (*attempts, last_error.clone()),
            _ => (0, None),
        };
        let stage = self.def.stage(&e.view.stage);
        let inputs = match stage {
            Some(s) if !s.upstream.is_empty() => s
                .upstream
                .iter()
                .filter_map(|u| {
                    cells
                        .iter()
                        .find(|c| &c.view.stage == u)
                        .and_then(|c| c.done.clone())
                        .map(|entry| Input {
                            stage: Some(u.clone()),
                            entry,
                        })
                })
                .collect(),
            _ => vec![Input {
                stage: None,
                entry: source.into_entry(&source_key(unit)),
            }],
        };
        ReadyCell {
            unit: unit.to_string(),
            stage: e.view.stage.clone(),
            key: e.view.key.clone(),
            source_version: source.source_version,
            attempts,
            last_error,
            stale: e.view.stale.clone(),
            inputs,
        }
    }

    /// Why each cell of `unit` is in its state.
    pub fn explain(&self, store: &Store, unit: &str) -> Result<Explain> {
        validate_pipeline_unit(unit)?;
        crate::error::contain(|| self.explain_uncontained(store, unit))
    }

    fn explain_uncontained(&self, store: &Store, unit: &str) -> Result<Explain> {
        let l = self.load_uncontained(store, Some(unit))?;
        let Some(source) = l.sources.get(unit) else {
            return Ok(Explain {
                unit: unit.to_string(),
                source_version: None,
                cells: Vec::new(),
            });
        };
        self.explain_loaded(&l, unit, source, true)
    }

    /// Every unit's cells, explained, in unit order.
    pub fn cells(&self, store: &Store) -> Result<Vec<Explain>> {
        crate::error::contain(|| {
            let l = self.load_uncontained(store, None)?;
            l.sources
                .iter()
                .map(|(unit, source)| self.explain_loaded(&l, unit, source, false))
                .collect()
        })
    }

    /// Cell counts per stage.
    pub fn status(&self, store: &Store) -> Result<Status> {
        crate::error::contain(|| self.status_uncontained(store))
    }

    fn status_uncontained(&self, store: &Store) -> Result<Status> {
        let l = self.load_uncontained(store, None)?;
        let mut stages: Vec<StageStatus> = self
            .def
            .topo_order()
            .map(|s| StageStatus {
                stage: s.name.clone(),
                code_version: s.code_version,
                ..StageStatus::default()
            })
            .collect();
        for (unit, source) in &l.sources {
            for (st, e) in stages
                .iter_mut()
                .zip(self.evaluate(&l, unit, source, false)?)
            {
                match e.view.state {
                    CellState::Done { .. } => st.done += 1,
                    CellState::Running { .. } => st.running += 1,
                    CellState::Ready { .. } => st.ready += 1,
                    CellState::Blocked { .. } => st.blocked += 1,
                    CellState::Failed { .. } => st.failed += 1,
                }
                st.stale += e.view.stale.is_some() as u64;
                st.cut_off += e.view.wave.as_ref().is_some_and(Wave::is_cut_off) as u64;
            }
        }
        Ok(Status {
            units: l.sources.len() as u64,
            stages,
        })
    }

    /// Up to `limit` ready cells, in unit order then stage order. Also says how many cells are
    /// running.
    pub fn ready(&self, store: &Store, limit: usize) -> Result<Vec<ReadyCell>> {
        Ok(self.ready_and_running(store, limit)?.0)
    }

    pub(crate) fn ready_and_running(
        &self,
        store: &Store,
        limit: usize,
    ) -> Result<(Vec<ReadyCell>, u64)> {
        crate::error::contain(|| self.ready_and_running_uncontained(store, limit))
    }

    fn ready_and_running_uncontained(
        &self,
        store: &Store,
        limit: usize,
    ) -> Result<(Vec<ReadyCell>, u64)> {
        let l = self.load_uncontained(store, None)?;
        let mut ready = Vec::new();
        let mut running = 0;
        for (unit, source) in &l.sources {
            let cells = self.evaluate(&l, unit, source, false)?;
            for i in 0..cells.len() {
                match cells[i].view.state {
                    CellState::Ready { .. } if ready.len() < limit => {
                        ready.push(self.ready_cell(unit, source, &cells, i))
                    }
                    CellState::Running { .. } => running += 1,
                    _ => {}
                }
            }
        }
        Ok((ready, running))
    }

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
        let lease = match store.claim_any(&cell.key, cell.source_version, worker, ttl)? {
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
    ) -> Result<crate::commit::CommitReport> {
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
    fn count_cut_off(&self, store: &Store, unit: &str, seq: u64, source: bool) -> Result<()> {
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

    /// The pipeline as a Graphviz `dot` digraph, each stage labelled with its cell counts and
    /// coloured by the most urgent state it has (failed, running, ready, blocked, all done).
    pub fn to_dot(&self, status: &Status) -> String {
        let mut out = String::from(
            "digraph pipeline {\n  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\"];\n",
        );
        for st in &status.stages {
            let colour = if st.failed > 0 {
                "salmon"
            } else if st.running > 0 {
                "lightblue"
            } else if st.ready > 0 {
                "khaki"
            } else if st.blocked > 0 {
                "lightgrey"
            } else if st.done > 0 {
                "palegreen"
            } else {
                "white"
            };
            out.push_str(&format!(
                "  \"{}\" [label=\"{} (code v{})\\ndone {} (cut off {}) | ready {} | running {}\\nblocked {} | failed {} | stale {}\", fillcolor=\"{colour}\"];\n",
                st.stage, st.stage, st.code_version, st.done, st.cut_off, st.ready, st.running,
                st.blocked, st.failed, st.stale
            ));
        }
        for s in self.def.topo_order() {
            for u in &s.upstream {
                out.push_str(&format!("  \"{u}\" -> \"{}\";\n", s.name));
            }
        }
        out.push_str("}\n");
        out
    }
}
