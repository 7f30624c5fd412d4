//! The API's error answer (one JSON object with a kind and a message for every error) and the
//! small helpers every handler shares: a JSON answer, a query, a blocking call's result.

use crate::wire::ErrorBody;
use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answer.
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    /// Seconds to send in `Retry-After` (a shed request).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error, telling the client to retry after `secs` seconds.
    pub(crate) fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub(crate) fn bad(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.kind.to_string(),
            message: self.message,
        };
        let mut resp = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        resp
    }
}

impl From<oncelake::Error> for ApiError {
    fn from(e: oncelake::Error) -> Self {
        use oncelake::Error as E;
        let (status, kind) = match &e {
            E::InvalidKey { .. } => (StatusCode::BAD_REQUEST, "invalid_key"),
            E::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            E::SeqOutOfRange { .. } => (StatusCode::BAD_REQUEST, "seq_out_of_range"),
            E::ReadOnly { .. } => (StatusCode::CONFLICT, "read_only"),
            E::Failed { .. } => (StatusCode::SERVICE_UNAVAILABLE, "failed"),
            E::MissingObject { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "missing_object"),
            E::Corrupt { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "corrupt"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "io"),
        };
        ApiError::new(status, kind, e.to_string())
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

pub(crate) fn json<T: Serialize>(v: &T) -> Response {
    axum::Json(v).into_response()
}

/// A blocking call's result, or why it did not finish (it panicked).
pub(crate) fn joined<T>(r: Result<T, tokio::task::JoinError>) -> ApiResult<T> {
    r.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the store call did not finish ({e}); nothing is known to have changed"),
        )
    })
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> ApiResult<T> {
    q.map(|Query(v)| v)
        .map_err(|e| ApiError::bad(format!("bad query string: {}", e.body_text())))
}

/// A handler's query string, refused as `bad_request` with axum's reason before the handler
/// runs (one extractor for every handler rather than a check at the top of each).
pub(crate) struct Q<T>(pub T);

impl<T, S> axum::extract::FromRequestParts<S> for Q<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        query(Query::<T>::from_request_parts(parts, state).await).map(Q)
    }
}
