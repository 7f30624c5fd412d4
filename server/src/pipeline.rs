//! The pipeline calls served so far (SPEC R13, R20): recording a unit's source version
//! (`PUT /v1/pipeline/source`), the cell counts of a pipeline (`POST /v1/pipeline/status`) and
//! why each cell of a unit is in its state (`POST /v1/pipeline/explain`).
//! The pipeline's definition travels with each call (the CLI reads it from its file), so the
//! server keeps no pipeline state of its own: the cells live in the store.

use crate::http::{blocking, json, query, read_json, ApiError, ApiResult, App};
use crate::wire::UnitOutcomeW;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use http_body_util::BodyExt;
use oncelake::pipeline::{
    set_source_version, CellState, CellView, Explain, Pipeline, PipelineDef, StageStatus,
    StaleReason, Status,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The query of `PUT /v1/pipeline/source`.
#[derive(Deserialize)]
pub(crate) struct SourceQ {
    unit: String,
    version: u64,
}

/// Records `unit`'s source version with the body as its input (held in memory, as the engine's
/// call takes it; at most the JSON body limit).
pub(crate) async fn set_source(
    State(app): State<Arc<App>>,
    q: Result<Query<SourceQ>, QueryRejection>,
    body: Body,
) -> ApiResult<Response> {
    let q = query(q)?;
    let input = read_bytes(&app, body).await?;
    let app2 = app.clone();
    let u = blocking(move || set_source_version(&app2.store, &q.unit, q.version, &input)).await?;
    Ok(json(&UnitOutcomeW::from(&u)))
}

async fn read_bytes(app: &App, body: Body) -> ApiResult<Vec<u8>> {
    let limited = http_body_util::Limited::new(body, app.limits.max_json);
    let collected = tokio::time::timeout(app.limits.body_idle, limited.collect())
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "the request body did not arrive in time; send it at once",
            )
        })?;
    let bytes = collected.map_err(|e| {
        if e.is::<http_body_util::LengthLimitError>() {
            app.live.too_large();
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "a pipeline unit's input is larger than {} bytes; store large inputs as units (put) and pass their key",
                    app.limits.max_json
                ),
            )
        } else {
            ApiError::bad(format!("could not read the request body: {e}"))
        }
    })?;
    Ok(bytes.to_bytes().to_vec())
}

/// A pipeline definition as the body of a call.
#[derive(Deserialize)]
pub(crate) struct DefReq {
    /// The definition's text (the TOML of `oncelake pipeline --pipeline FILE`).
    pipeline: String,
}

fn pipeline_of(text: &str) -> ApiResult<Pipeline> {
    PipelineDef::parse(text)
        .map(Pipeline::new)
        .map_err(|e| ApiError::bad(format!("the pipeline definition: {e}")))
}

/// The cell counts of a pipeline.
pub(crate) async fn status(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: DefReq = read_json(&app, body).await?;
    let p = pipeline_of(&r.pipeline)?;
    let app2 = app.clone();
    let st = blocking(move || p.status(&app2.store)).await?;
    Ok(json(&StatusW::from(&st)))
}

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
                })
                .collect(),
        }
    }
}

/// The body of `POST /v1/pipeline/explain`.
#[derive(Deserialize)]
pub(crate) struct ExplainReq {
    pipeline: String,
    unit: String,
}

/// Why each cell of a unit is in its state.
pub(crate) async fn explain(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: ExplainReq = read_json(&app, body).await?;
    let p = pipeline_of(&r.pipeline)?;
    let app2 = app.clone();
    let e = blocking(move || p.explain(&app2.store, &r.unit)).await?;
    Ok(json(&ExplainW::from(&e)))
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
        })
    }
}
