//! Running a pipeline's cells through the server (SPEC R13, R20): recording the definition,
//! listing ready cells, claiming one, completing or failing it, and reading a cell's input. Each
//! is one call of the engine's `Pipeline` on the server's store, so every rule (leases, fencing,
//! attempts, exactly-once completion) is the engine's. As for status and explain, the definition
//! travels with each call and the server keeps no pipeline state of its own.

use crate::http::{blocking, json, read_body, read_json, ApiError, ApiResult, App};
use crate::wire::UnitOutcomeW;
use crate::wire_cells::{AttemptW, ClaimCellW, FailOutcomeW, ReadyCellW};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use oncelake::pipeline::{Attempt, Pipeline, PipelineDef};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

fn pipeline_of(text: &str) -> ApiResult<Pipeline> {
    PipelineDef::parse(text)
        .map(Pipeline::new)
        .map_err(|e| ApiError::bad(format!("the pipeline definition: {e}")))
}

#[derive(Deserialize)]
pub(crate) struct DefReq {
    pipeline: String,
}

/// `POST /v1/pipeline/define`: records the definition in the log if it changed (what binding a
/// pipeline to a store does in-process); the record's seq, or null when it was already current.
pub(crate) async fn define(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: DefReq = read_json(&app, body).await?;
    let p = pipeline_of(&r.pipeline)?;
    let app2 = app.clone();
    let seq = blocking(move || p.record_definition(&app2.store)).await?;
    app.note_seq(seq);
    Ok(json(&serde_json::json!({ "recorded_seq": seq })))
}

#[derive(Deserialize)]
pub(crate) struct ReadyReq {
    pipeline: String,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    100
}

/// `POST /v1/pipeline/ready`: up to `limit` ready cells, with their inputs' entries.
pub(crate) async fn ready(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: ReadyReq = read_json(&app, body).await?;
    let p = pipeline_of(&r.pipeline)?;
    let app2 = app.clone();
    let cells = blocking(move || p.ready(&app2.store, r.limit)).await?;
    let cells: Vec<ReadyCellW> = cells.iter().map(ReadyCellW::from).collect();
    Ok(json(&serde_json::json!({ "cells": cells })))
}

#[derive(Deserialize)]
pub(crate) struct ClaimReq {
    pipeline: String,
    cell: ReadyCellW,
    worker: String,
    ttl_ms: u64,
}

/// `POST /v1/pipeline/claim`: claims a cell listed by `ready`.
pub(crate) async fn claim(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: ClaimReq = read_json(&app, body).await?;
    let p = pipeline_of(&r.pipeline)?;
    let cell = r.cell.to_engine().map_err(ApiError::bad)?;
    let app2 = app.clone();
    let c = blocking(move || {
        p.claim(
            &app2.store,
            &cell,
            &r.worker,
            Duration::from_millis(r.ttl_ms),
        )
    })
    .await?;
    app.note_seq(app.store.last_seq().ok());
    Ok(json(&ClaimCellW::from(&c)))
}

#[derive(Deserialize)]
pub(crate) struct CompleteHead {
    pipeline: String,
    attempt: AttemptW,
}

/// `POST /v1/pipeline/complete`: the body is one JSON line `{"pipeline", "attempt"}`, then the
/// cell's output bytes (the engine's call takes them whole, so at most the JSON body limit).
pub(crate) async fn complete(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let bytes = read_body(&app, body, |max| {
        format!("a cell's output is larger than {max} bytes; store large outputs as units (put) and complete the cell with their key")
    })
    .await?;
    let nl = bytes.iter().position(|&b| b == b'\n').ok_or_else(|| {
        ApiError::bad("the body starts with a JSON line {\"pipeline\", \"attempt\"} ended by a newline, then the output")
    })?;
    let head: CompleteHead = serde_json::from_slice(&bytes[..nl]).map_err(|e| {
        ApiError::bad(format!(
            "the body's first line is not the expected JSON: {e}"
        ))
    })?;
    let p = pipeline_of(&head.pipeline)?;
    let attempt = Attempt::from(&head.attempt);
    let output = bytes.slice(nl + 1..);
    let app2 = app.clone();
    let u = blocking(move || p.complete(&app2.store, &attempt, &output)).await?;
    if let oncelake::Outcome::Committed { seq, .. } = u.outcome {
        app.note_seq(Some(seq));
    }
    Ok(json(&UnitOutcomeW::from(&u)))
}

#[derive(Deserialize)]
pub(crate) struct FailReq {
    pipeline: String,
    attempt: AttemptW,
    error: String,
}

/// `POST /v1/pipeline/fail`: records a failed run of a cell.
pub(crate) async fn fail(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: FailReq = read_json(&app, body).await?;
    let p = pipeline_of(&r.pipeline)?;
    let attempt = Attempt::from(&r.attempt);
    let app2 = app.clone();
    let f = blocking(move || p.fail(&app2.store, &attempt, &r.error)).await?;
    if let oncelake::pipeline::FailOutcome::Recorded { seq, .. } = f {
        app.note_seq(Some(seq));
    }
    Ok(json(&FailOutcomeW::from(&f)))
}

#[derive(Deserialize)]
pub(crate) struct InputReq {
    cell: ReadyCellW,
    stage: Option<String>,
}

/// `POST /v1/pipeline/input`: the bytes of a ready cell's input (`stage`: null for the unit's
/// source, else an upstream stage), read by the engine's `ReadyCell::read_input` (size and CRC32
/// checked).
pub(crate) async fn input(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: InputReq = read_json(&app, body).await?;
    let cell = r.cell.to_engine().map_err(ApiError::bad)?;
    let app2 = app.clone();
    let bytes = blocking(move || cell.read_input(&app2.store, r.stage.as_deref())).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        bytes,
    )
        .into_response())
}
