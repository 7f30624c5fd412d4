//! What the cells are: a unit's cells explained, the counts per stage, the cells ready to run
//! (with their inputs), and the pipeline drawn as a graph.

use super::cell::{source_key, validate_pipeline_unit, CellState, CellView, StaleReason, Wave};
use super::engine::Pipeline;
use super::evaluate::{Evaluated, Loaded};
use crate::error::{Error, Result};
use crate::schema::manifest::{Entry, EntryValue};
use crate::store::Store;

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

impl Pipeline {
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

    /// The ready cell `cells[i]` of `unit`, with its attempts so far and its inputs.
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
