//! The wire forms of the pipeline calls' answers (`POST /v1/pipeline/status`, `.../explain`):
//! the engine's [`Status`] and [`Explain`] field for field, shared by the server and the
//! [`crate::Client`] (so a client-only build has them without the server's dependencies).

use oncelake::pipeline::{CellState, CellView, Explain, StageStatus, StaleReason, Status, Wave};
use serde::{Deserialize, Serialize};

/// The engine's [`Status`], field for field.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusW {
    /// Units with a source version.
    pub units: u64,
    /// Per stage, upstream stages first.
    pub stages: Vec<StageStatusW>,
}

/// The engine's [`StageStatus`], field for field.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct StageStatusW {
    pub stage: String,
    pub code_version: u64,
    pub done: u64,
    pub ready: u64,
    pub running: u64,
    pub blocked: u64,
    pub failed: u64,
    pub stale: u64,
    #[serde(default)]
    pub cut_off: u64,
}

impl From<&Status> for StatusW {
    fn from(s: &Status) -> Self {
        StatusW {
            units: s.units,
            stages: s
                .stages
                .iter()
                .map(|s| StageStatusW {
                    stage: s.stage.clone(),
                    code_version: s.code_version,
                    done: s.done,
                    ready: s.ready,
                    running: s.running,
                    blocked: s.blocked,
                    failed: s.failed,
                    stale: s.stale,
                    cut_off: s.cut_off,
                })
                .collect(),
        }
    }
}

impl From<&StatusW> for Status {
    fn from(s: &StatusW) -> Self {
        Status {
            units: s.units,
            stages: s
                .stages
                .iter()
                .map(|s| StageStatus {
                    stage: s.stage.clone(),
                    code_version: s.code_version,
                    done: s.done,
                    ready: s.ready,
                    running: s.running,
                    blocked: s.blocked,
                    failed: s.failed,
                    stale: s.stale,
                    cut_off: s.cut_off,
                })
                .collect(),
        }
    }
}

/// The engine's [`Explain`], field for field.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExplainW {
    /// The unit.
    pub unit: String,
    /// Its current source version, if one was set.
    pub source_version: Option<u64>,
    /// One per stage, upstream stages first.
    pub cells: Vec<CellViewW>,
}

/// The engine's [`CellView`]: `state` is the state's word, with the fields of that state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CellViewW {
    /// The stage.
    pub stage: String,
    /// The cell's internal unit key.
    pub key: String,
    /// `done`, `running`, `ready`, `blocked` or `failed`, with its fields.
    pub state: CellStateW,
    /// Why an earlier completion no longer counts.
    pub stale: Option<StaleW>,
    /// Whether a done cell re-ran or was cut off (SPEC R24).
    #[serde(default)]
    pub wave: Option<WaveW>,
}

/// The engine's [`Wave`], hashes in hex.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "wave", rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum WaveW {
    Reran {
        previous_version: u64,
        previous_object: String,
        object: String,
    },
    CutOff {
        completed: u64,
        current: u64,
        /// (upstream stage, or `null` for the source; output hash).
        unchanged: Vec<(Option<String>, String)>,
    },
}

impl From<&Wave> for WaveW {
    fn from(w: &Wave) -> Self {
        match w {
            Wave::Reran {
                previous_version,
                previous_object,
                object,
            } => WaveW::Reran {
                previous_version: *previous_version,
                previous_object: previous_object.to_hex(),
                object: object.to_hex(),
            },
            Wave::CutOff {
                completed,
                current,
                unchanged,
            } => WaveW::CutOff {
                completed: *completed,
                current: *current,
                unchanged: unchanged
                    .iter()
                    .map(|(s, id)| (s.clone(), id.to_hex()))
                    .collect(),
            },
        }
    }
}

impl WaveW {
    fn to_engine(&self) -> Result<Wave, String> {
        use crate::wire::parse_id;
        Ok(match self {
            WaveW::Reran {
                previous_version,
                previous_object,
                object,
            } => Wave::Reran {
                previous_version: *previous_version,
                previous_object: parse_id(previous_object)?,
                object: parse_id(object)?,
            },
            WaveW::CutOff {
                completed,
                current,
                unchanged,
            } => Wave::CutOff {
                completed: *completed,
                current: *current,
                unchanged: unchanged
                    .iter()
                    .map(|(s, id)| Ok((s.clone(), parse_id(id)?)))
                    .collect::<Result<_, String>>()?,
            },
        })
    }
}

/// The engine's [`CellState`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum CellStateW {
    Done {
        source_version: u64,
        code_version: u64,
        seq: u64,
        object: String,
    },
    Running {
        worker: String,
        token: u64,
        source_version: u64,
        expires_at_ms: u64,
    },
    Ready {
        attempts: u32,
        last_error: Option<String>,
    },
    Blocked {
        upstream: String,
        upstream_state: String,
    },
    Failed {
        attempts: u32,
        last_error: String,
    },
}

/// The engine's [`StaleReason`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum StaleW {
    NewerSource { completed: u64, current: u64 },
    CodeChanged { from: u64, to: u64 },
    UpstreamRerun,
}

impl From<&Explain> for ExplainW {
    fn from(e: &Explain) -> Self {
        ExplainW {
            unit: e.unit.clone(),
            source_version: e.source_version,
            cells: e.cells.iter().map(CellViewW::from).collect(),
        }
    }
}

impl From<&CellView> for CellViewW {
    fn from(c: &CellView) -> Self {
        let state = match &c.state {
            CellState::Done {
                source_version,
                code_version,
                seq,
                object,
            } => CellStateW::Done {
                source_version: *source_version,
                code_version: *code_version,
                seq: *seq,
                object: object.to_hex(),
            },
            CellState::Running {
                worker,
                token,
                source_version,
                expires_at_ms,
            } => CellStateW::Running {
                worker: worker.clone(),
                token: *token,
                source_version: *source_version,
                expires_at_ms: *expires_at_ms,
            },
            CellState::Ready {
                attempts,
                last_error,
            } => CellStateW::Ready {
                attempts: *attempts,
                last_error: last_error.clone(),
            },
            CellState::Blocked {
                upstream,
                upstream_state,
            } => CellStateW::Blocked {
                upstream: upstream.clone(),
                upstream_state: upstream_state.to_string(),
            },
            CellState::Failed {
                attempts,
                last_error,
            } => CellStateW::Failed {
                attempts: *attempts,
                last_error: last_error.clone(),
            },
        };
        let stale = c.stale.as_ref().map(|s| match s {
            StaleReason::NewerSource { completed, current } => StaleW::NewerSource {
                completed: *completed,
                current: *current,
            },
            StaleReason::CodeChanged { from, to } => StaleW::CodeChanged {
                from: *from,
                to: *to,
            },
            StaleReason::UpstreamRerun => StaleW::UpstreamRerun,
        });
        CellViewW {
            stage: c.stage.clone(),
            key: c.key.clone(),
            state,
            stale,
            wave: c.wave.as_ref().map(WaveW::from),
        }
    }
}

impl ExplainW {
    /// Back to the engine's type; an unknown state word or object id is an error.
    pub fn to_engine(&self) -> Result<Explain, String> {
        Ok(Explain {
            unit: self.unit.clone(),
            source_version: self.source_version,
            cells: self
                .cells
                .iter()
                .map(CellViewW::to_engine)
                .collect::<Result<_, _>>()?,
        })
    }
}

/// The words `CellState::name` gives, as the `&'static str` a blocked cell names.
const STATE_WORDS: [&str; 5] = ["done", "running", "ready", "blocked", "failed"];

impl CellViewW {
    fn to_engine(&self) -> Result<CellView, String> {
        let state = match &self.state {
            CellStateW::Done {
                source_version,
                code_version,
                seq,
                object,
            } => CellState::Done {
                source_version: *source_version,
                code_version: *code_version,
                seq: *seq,
                object: crate::wire::parse_id(object)?,
            },
            CellStateW::Running {
                worker,
                token,
                source_version,
                expires_at_ms,
            } => CellState::Running {
                worker: worker.clone(),
                token: *token,
                source_version: *source_version,
                expires_at_ms: *expires_at_ms,
            },
            CellStateW::Ready {
                attempts,
                last_error,
            } => CellState::Ready {
                attempts: *attempts,
                last_error: last_error.clone(),
            },
            CellStateW::Blocked {
                upstream,
                upstream_state,
            } => CellState::Blocked {
                upstream: upstream.clone(),
                upstream_state: STATE_WORDS
                    .into_iter()
                    .find(|w| w == upstream_state)
                    .ok_or_else(|| format!("unknown cell state {upstream_state:?}"))?,
            },
            CellStateW::Failed {
                attempts,
                last_error,
            } => CellState::Failed {
                attempts: *attempts,
                last_error: last_error.clone(),
            },
        };
        let stale = self.stale.as_ref().map(|s| match s {
            StaleW::NewerSource { completed, current } => StaleReason::NewerSource {
                completed: *completed,
                current: *current,
            },
            StaleW::CodeChanged { from, to } => StaleReason::CodeChanged {
                from: *from,
                to: *to,
            },
            StaleW::UpstreamRerun => StaleReason::UpstreamRerun,
        });
        Ok(CellView {
            stage: self.stage.clone(),
            key: self.key.clone(),
            state,
            stale,
            wave: self.wave.as_ref().map(WaveW::to_engine).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncelake::ObjectId;

    /// A served explain says what a local one says about early cutoff (SPEC R24): both waves
    /// survive the wire, the source named as `null`.
    #[test]
    fn waves_round_trip_through_the_wire() {
        let done = CellState::Done {
            source_version: 1,
            code_version: 1,
            seq: 4,
            object: ObjectId::of(b"x"),
        };
        let e = Explain {
            unit: "u".into(),
            source_version: Some(3),
            cells: vec![
                CellView {
                    stage: "a".into(),
                    key: "ka".into(),
                    state: done.clone(),
                    stale: None,
                    wave: Some(Wave::CutOff {
                        completed: 1,
                        current: 3,
                        unchanged: vec![(None, ObjectId::of(b"s"))],
                    }),
                },
                CellView {
                    stage: "b".into(),
                    key: "kb".into(),
                    state: done,
                    stale: None,
                    wave: Some(Wave::Reran {
                        previous_version: 2,
                        previous_object: ObjectId::of(b"p"),
                        object: ObjectId::of(b"x"),
                    }),
                },
            ],
        };
        let text = serde_json::to_string(&ExplainW::from(&e)).unwrap();
        let back: ExplainW = serde_json::from_str(&text).unwrap();
        assert_eq!(back.to_engine().unwrap(), e);
        // A peer without the field (an older server) reads as no wave.
        let old = text.replace(",\"wave\":", ",\"old_wave\":");
        let back: ExplainW = serde_json::from_str(&old).unwrap();
        assert!(back
            .to_engine()
            .unwrap()
            .cells
            .iter()
            .all(|c| c.wave.is_none()));
    }
}
