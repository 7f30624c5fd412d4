//! Lake tables through the server (`oncelake table create|ls|publish`, SPEC R21): the same
//! engine calls the CLI makes in-process, on the served store. Publishing runs on the blocking
//! pool; the engine makes concurrent publishes safe (what is published is never written again).

use crate::api_error::{json, ApiError, ApiResult};
use crate::app::App;
use crate::body::read_json;
use crate::wire_table::{CreateReqW, PublishReqW};
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use oncelake::table::{TableError, TableResult};
use oncelake::Store;
use std::sync::Arc;

impl From<TableError> for ApiError {
    fn from(e: TableError) -> Self {
        match e {
            TableError::Store(e) => ApiError::from(e),
            // Damaged table files are the server's problem, not the request's (exit 1 in the CLI).
            e @ TableError::Damaged { .. } => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "table_damaged",
                e.to_string(),
            ),
            e => ApiError::new(StatusCode::BAD_REQUEST, "table", e.to_string()),
        }
    }
}

async fn run<T: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&Store) -> TableResult<T> + Send + 'static,
) -> ApiResult<T> {
    let app2 = app.clone();
    match app.spawn_blocking(move || f(&app2.store))?.await {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!(
                "the table call did not finish ({e}); run `oncelake table ls` to see the state"
            ),
        )),
    }
}

pub(crate) async fn create(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: CreateReqW = read_json(&app, body).await?;
    let format: oncelake::table::TableFormat = r.format.parse().map_err(ApiError::bad)?;
    let t = run(&app, move |s| {
        let def = s.create_table(&r.name, &r.prefix, format)?;
        s.table_status(&def)
    })
    .await?;
    Ok(json(&t))
}

pub(crate) async fn ls(State(app): State<Arc<App>>) -> ApiResult<Response> {
    let all = run(&app, |s| {
        s.tables()?
            .iter()
            .map(|d| s.table_status(d))
            .collect::<TableResult<Vec<_>>>()
    })
    .await?;
    Ok(json(&all))
}

pub(crate) async fn publish(State(app): State<Arc<App>>, body: Body) -> ApiResult<Response> {
    let r: PublishReqW = read_json(&app, body).await?;
    let reports = run(&app, move |s| match &r.name {
        Some(n) => Ok(vec![s.publish_table(n)?]),
        None => s.publish_tables(),
    })
    .await?;
    Ok(json(&reports))
}
