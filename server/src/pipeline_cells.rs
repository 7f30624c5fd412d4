//! Running a pipeline's cells through the server (SPEC R13, R20): recording the definition,
//! listing ready cells, claiming one, completing or failing it, and reading a cell's input. Each
//! is one call of the engine's `Pipeline` on the server's store, so every rule (leases, fencing,
//! attempts, exactly-once completion) is the engine's. As for status and explain, the definition
//! travels with each call and the server keeps no pipeline state of its own.

use crate::api_error::{json, ApiError, ApiResult};
use crate::app::App;
use crate::body::{read_body, read_json};
use crate::pipeline::{def_call, parse_definition, NoArgs};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use oncelake::pipeline::{Attempt, ReadyCell};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// `POST /v1/pipeline/define`: records the definition in the log if it changed (what binding a
/// pipeline to a store does in-process); the record's seq, or null when it was already current.
pub(crate) async fn define(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let (_, p) = def_call::<NoArgs>(&app, body).await?;
    let seq = app.with_store(move |s| p.record_definition(s)).await?;
    app.note_seq(seq);
    Ok(json(&serde_json::json!({ "recorded_seq": seq })))
}

#[derive(Deserialize)]
pub(crate) struct ReadyReq {
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    100
}

/// `POST /v1/pipeline/ready`: up to `limit` ready cells, with their inputs' entries.
pub(crate) async fn ready(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let (r, p) = def_call::<ReadyReq>(&app, body).await?;
    let cells = app.with_store(move |s| p.ready(s, r.limit)).await?;
    Ok(json(&serde_json::json!({ "cells": cells })))
}

#[derive(Deserialize)]
pub(crate) struct ClaimReq {
    cell: ReadyCell,
    worker: String,
    ttl_ms: u64,
}

/// `POST /v1/pipeline/claim`: claims a cell listed by `ready`.
pub(crate) async fn claim(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let (r, p) = def_call::<ClaimReq>(&app, body).await?;
    let cell = r.cell;
    let c = app
        .with_store(move |s| p.claim(s, &cell, &r.worker, Duration::from_millis(r.ttl_ms)))
        .await?;
    app.note_seq(app.store.last_seq().ok());
    Ok(json(&c))
}

#[derive(Deserialize)]
pub(crate) struct CompleteHead {
    pipeline: String,
    attempt: Attempt,
}

/// `POST /v1/pipeline/complete`: the body is one JSON line `{"pipeline", "attempt"}`, then the
/// cell's output bytes (the engine's call takes them whole, so at most the JSON body limit).
pub(crate) async fn complete(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let bytes = read_body(&app, body, |max| {
        format!("a cell's output is larger than {max} bytes; store large outputs as units (put) and complete the cell with their key")
    })
    .await?;
    // The head and its definition are read on the blocking pool, as every definition is
    // (`crate::pipeline`).
    let app2 = app.clone();
    let read = app.spawn_blocking(move || -> ApiResult<_> {
        let nl = bytes.iter().position(|&b| b == b'\n').ok_or_else(|| {
            ApiError::bad("the body starts with a JSON line {\"pipeline\", \"attempt\"} ended by a newline, then the output")
        })?;
        let head: CompleteHead = serde_json::from_slice(&bytes[..nl]).map_err(|e| {
            ApiError::bad(format!(
                "the body's first line is not the expected JSON: {e}"
            ))
        })?;
        let p = parse_definition(&app2, &head.pipeline)?;
        Ok((p, head.attempt, bytes.slice(nl + 1..)))
    })?;
    let (p, attempt, output) = crate::api_error::joined(read.await)??;
    let u = app
        .with_store(move |s| p.complete(s, &attempt, &output))
        .await?;
    if let oncelake::Outcome::Committed { seq, .. } = u.outcome {
        app.note_seq(Some(seq));
    }
    Ok(json(&u))
}

#[derive(Deserialize)]
pub(crate) struct FailReq {
    attempt: Attempt,
    error: String,
}

/// `POST /v1/pipeline/fail`: records a failed run of a cell.
pub(crate) async fn fail(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let (r, p) = def_call::<FailReq>(&app, body).await?;
    let attempt = r.attempt;
    let f = app
        .with_store(move |s| p.fail(s, &attempt, &r.error))
        .await?;
    if let oncelake::pipeline::FailOutcome::Recorded { seq, .. } = f {
        app.note_seq(Some(seq));
    }
    Ok(json(&f))
}

#[derive(Deserialize)]
pub(crate) struct InputReq {
    cell: ReadyCell,
    stage: Option<String>,
}

/// `POST /v1/pipeline/input`: the bytes of a ready cell's input (`stage`: null for the unit's
/// source, else an upstream stage), read by the engine's `ReadyCell::read_input` (size and CRC32
/// checked).
pub(crate) async fn input(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: InputReq = read_json(&app, body).await?;
    let cell = r.cell;
    let bytes = app
        .with_store(move |s| cell.read_input(s, r.stage.as_deref()))
        .await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        bytes,
    )
        .into_response())
}
