//! The HTTP API's router: each endpoint to its handler, and the JSON answers to an unknown path or
//! method. The handlers live by job (`units`, `reads`, `maint`, `snapshot`, `pipeline`,
//! `pipeline_cells`, `reconcile`, `table`) over the shared state of [`crate::app`]; none of them
//! imports this module.

use crate::api_error::ApiError;
use crate::app::App;
use crate::maint::{gc, verify};
use crate::reads::{changes, entry, lookup, ls, object};
use crate::units::{
    claim, commit, healthz, metrics, put_unit, release, renew, stage, stats, unstage,
};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::Router;
use std::sync::Arc;

/// The router of the whole API.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .merge(crate::status_page::routes())
        .route("/metrics", get(metrics))
        .route("/v1/stats", get(stats))
        .route("/v1/put", put(put_unit))
        .route("/v1/stage", post(stage).delete(unstage))
        .route("/v1/commit", post(commit))
        .route("/v1/claim", post(claim))
        .route("/v1/renew", post(renew))
        .route("/v1/release", post(release))
        .route("/v1/lookup", get(lookup))
        .route("/v1/entry", get(entry))
        .route("/v1/object", get(object))
        .route("/v1/ls", get(ls))
        .route("/v1/changes", get(changes))
        .route("/v1/gc", post(gc))
        .route("/v1/verify", post(verify))
        .route("/v1/reconcile", post(crate::reconcile::reconcile))
        .route("/v1/table/create", post(crate::table::create))
        .route("/v1/table/ls", get(crate::table::ls))
        .route("/v1/table/publish", post(crate::table::publish))
        .route("/v1/pipeline/source", put(crate::pipeline::set_source))
        .route("/v1/pipeline/status", post(crate::pipeline::status))
        .route("/v1/pipeline/explain", post(crate::pipeline::explain))
        .route("/v1/pipeline/define", post(crate::pipeline_cells::define))
        .route("/v1/pipeline/ready", post(crate::pipeline_cells::ready))
        .route("/v1/pipeline/claim", post(crate::pipeline_cells::claim))
        .route(
            "/v1/pipeline/complete",
            post(crate::pipeline_cells::complete),
        )
        .route("/v1/pipeline/fail", post(crate::pipeline_cells::fail))
        .route("/v1/pipeline/input", post(crate::pipeline_cells::input))
        .route(
            "/v1/snapshot",
            post(crate::snapshot::open).delete(crate::snapshot::close),
        )
        .route("/v1/snapshot/entry", get(crate::snapshot::entry))
        .route("/v1/snapshot/object", get(crate::snapshot::object))
        .route("/v1/snapshot/ls", get(crate::snapshot::ls))
        .route("/v1/snapshot/changes", get(crate::snapshot::changes))
        .route(
            "/v1/snapshot/object_path",
            get(crate::snapshot::object_path),
        )
        .route("/v1/seq", get(crate::snapshot::last_seq))
        .route("/v1/flush", post(crate::snapshot::flush))
        .route("/v1/sync", post(crate::snapshot::sync))
        .route("/v1/checkpoint", post(crate::snapshot::checkpoint))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

pub(crate) async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no endpoint {} {}; see docs/server.md for the API",
            req.method(),
            req.uri().path()
        ),
    )
}

/// A known path asked with a method it does not take. axum's own answer is an empty body; every
/// error of this API is a JSON object, so a client can always read what went wrong.
pub(crate) async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} does not take {}; see docs/server.md for the method of each endpoint",
            req.uri().path(),
            req.method()
        ),
    )
}
