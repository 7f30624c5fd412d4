//! The pipeline calls served so far (SPEC R13, R20): recording a unit's source version
//! (`PUT /v1/pipeline/source`), the cell counts of a pipeline (`POST /v1/pipeline/status`) and
//! why each cell of a unit is in its state (`POST /v1/pipeline/explain`).
//! The pipeline's definition travels with each call (the CLI reads it from its file), so the
//! server keeps no pipeline state of its own: the cells live in the store.

use crate::http::{blocking, json, query, read_body, read_json, ApiError, ApiResult, App};
use crate::wire::UnitOutcomeW;
use crate::wire_pipeline::{ExplainW, StatusW};
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::Response;
use oncelake::pipeline::{set_source_version, Pipeline, PipelineDef};
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
    q: Result<Query<SourceQ>, QueryRejection>,
    body: Body,
) -> ApiResult<Response> {
    let q = query(q)?;
    let input = read_bytes(&app, body).await?;
    let app2 = app.clone();
    let u = blocking(move || set_source_version(&app2.store, &q.unit, q.version, &input)).await?;
    // A commit like a put's: long-polls waiting on the feed wake for it.
    app.note_seq(app.store.last_seq().ok());
    Ok(json(&UnitOutcomeW::from(&u)))
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
