//! The pipeline calls served so far (SPEC R13, R20): recording a unit's source version
//! (`PUT /v1/pipeline/source`), the cell counts of a pipeline (`POST /v1/pipeline/status`) and
//! why each cell of a unit is in its state (`POST /v1/pipeline/explain`).
//! The pipeline's definition travels with each call (the CLI reads it from its file), so the
//! server keeps no pipeline state of its own: the cells live in the store.
//!
//! A definition is bounded (`Limits::max_definition`, `413` beyond) and read — the request's
//! JSON and the definition's text — on the blocking pool, not on a connection thread: a large
//! one takes real time, and the connection threads answer every other client's lookups (SPEC
//! R20).

use crate::api_error::{json, ApiError, ApiResult, Q};
use crate::app::App;
use crate::body::{read_body, read_body_max};
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use oncelake::pipeline::{set_source_version, Pipeline, PipelineDef};
use serde::de::DeserializeOwned;
use serde::Deserialize;
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
    Q(q): Q<SourceQ>,
    body: Body,
) -> ApiResult<Response> {
    let input = read_bytes(&app, body).await?;
    let u = app
        .with_store(move |s| set_source_version(s, &q.unit, q.version, &input))
        .await?;
    // A commit like a put's: long-polls waiting on the feed wake for it.
    app.note_seq(app.store.last_seq().ok());
    Ok(json(&u))
}

async fn read_bytes(app: &App, body: Body) -> ApiResult<Vec<u8>> {
    let bytes = read_body(app, body, |max| {
        format!(
            "a pipeline unit's input is larger than {max} bytes; store large inputs as units (put) and pass their key"
        )
    })
    .await?;
    Ok(bytes.to_vec())
}

/// A pipeline call's body: a JSON object with the definition's text under `pipeline` beside the
/// call's own fields (`args`).
#[derive(Deserialize)]
struct DefCall<T> {
    pipeline: String,
    #[serde(flatten)]
    args: T,
}

/// The fields of a call that takes nothing but the definition.
#[derive(Deserialize)]
pub(crate) struct NoArgs {}

/// Room in a pipeline call's body for what comes with the definition (a unit, a cell, a worker,
/// an error message).
const BODY_MARGIN: usize = 64 << 10;

/// Why a definition is refused for its size.
pub(crate) fn definition_too_large(app: &App, len: usize) -> ApiError {
    app.live.too_large();
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!(
            "the pipeline definition is {len} bytes, over this server's limit of {} bytes; split \
             the pipeline, or serve with a larger limit",
            app.limits.max_definition
        ),
    )
}

/// Reads a pipeline call's body and, on the blocking pool, parses it and its definition.
pub(crate) async fn def_call<T: DeserializeOwned + Send + 'static>(
    app: &Arc<App>,
    body: Body,
) -> ApiResult<(T, Pipeline)> {
    let max = app
        .limits
        .max_definition
        .saturating_add(BODY_MARGIN)
        .min(app.limits.max_json);
    let bytes = read_body_max(app, body, max, |max| {
        format!(
            "the request is larger than {max} bytes: its pipeline definition may be at most {} \
             bytes",
            app.limits.max_definition
        )
    })
    .await?;
    let app2 = app.clone();
    let parsed = app.spawn_blocking(move || -> ApiResult<(T, Pipeline)> {
        let r: DefCall<T> = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::bad(format!("the request body is not the expected JSON: {e}"))
        })?;
        let p = parse_definition(&app2, &r.pipeline)?;
        Ok((r.args, p))
    })?;
    crate::api_error::joined(parsed.await)?
}

/// A definition's text, checked against the size limit and parsed (call on the blocking pool).
pub(crate) fn parse_definition(app: &App, text: &str) -> ApiResult<Pipeline> {
    if text.len() > app.limits.max_definition {
        return Err(definition_too_large(app, text.len()));
    }
    PipelineDef::parse(text)
        .map(Pipeline::new)
        .map_err(|e| ApiError::bad(format!("the pipeline definition: {e}")))
}

/// The cell counts of a pipeline.
pub(crate) async fn status(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let (_, p) = def_call::<NoArgs>(&app, body).await?;
    let st = app.with_store(move |s| p.status(s)).await?;
    Ok(json(&st))
}

/// The fields of `POST /v1/pipeline/explain` beside the definition.
#[derive(Deserialize)]
pub(crate) struct ExplainReq {
    unit: String,
}

/// Why each cell of a unit is in its state.
pub(crate) async fn explain(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let (r, p) = def_call::<ExplainReq>(&app, body).await?;
    let e = app.with_store(move |s| p.explain(s, &r.unit)).await?;
    Ok(json(&e))
}
