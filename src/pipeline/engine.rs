//! The pipeline handle: a validated definition bound to the engine, and the keys of its cells.
//! What it does is in its sibling files: [`super::evaluate`] judges cells, [`super::status`]
//! reports them, [`super::record`] records source versions and definitions, and
//! [`super::attempt`] runs a cell.

use super::cell::CellKey;
use super::def::{PipelineDef, StageDef};
use crate::error::{Error, Result};

/// A pipeline definition bound to the engine: the operations on its cells.
#[derive(Clone, Debug)]
pub struct Pipeline {
    pub(super) def: PipelineDef,
    /// Early cutoff (SPEC R24) on; off only to measure what it saves.
    pub(super) cutoff: bool,
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

    /// The stage named `stage`, or an error listing the stages there are.
    pub(super) fn stage(&self, stage: &str) -> Result<&StageDef> {
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
}
