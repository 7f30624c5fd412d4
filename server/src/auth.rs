//! The per-connection service: the bearer-token check (TCP only) in front of the router, so a
//! request without the right token is answered 401 before any handler runs and changes nothing.
//! Answered without the token are the identity question ([`crate::identity`]), which a client
//! asks precisely so as not to send its token to a stranger, and `GET` of the status page's
//! static files ([`crate::status_page::is_public`]), which carry no data of the store: the
//! page's script sends the token for everything it shows.

use crate::api_error::ApiError;
use crate::app::App;
use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tower_service::Service;

/// A connection's byte stream (Unix or TCP).
pub(crate) trait Stream:
    tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin
{
}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

type BoxFut = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

/// The hyper service of one connection.
pub(crate) fn service(
    router: Router,
    app: Arc<App>,
    token: Option<Arc<str>>,
    identity: Arc<crate::identity::Identity>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response,
    Error = Infallible,
    Future = BoxFut,
> + Clone {
    hyper::service::service_fn(move |req: Request<Incoming>| {
        let mut router = router.clone();
        let app = app.clone();
        let token = token.clone();
        let identity = identity.clone();
        let fut: BoxFut = Box::pin(async move {
            app.live.request();
            if req.uri().path() == crate::identity::PATH {
                return Ok(match identity.answer(req.uri().query()) {
                    Ok(a) => axum::Json(a).into_response(),
                    Err(message) => {
                        app.live.bad_request();
                        ApiError::bad(message).into_response()
                    }
                });
            }
            if let Some(t) = &token {
                if !authorized(&req, t)
                    && !crate::status_page::is_public(req.method(), req.uri().path())
                {
                    app.live.unauthorized();
                    return Ok(ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        "missing or wrong bearer token: send `Authorization: Bearer TOKEN` with \
                         the token from the store's serve.json (readable only by its owner)",
                    )
                    .into_response());
                }
            }
            let resp = router.call(req.map(Body::new)).await;
            let resp = resp.unwrap_or_else(|e| match e {});
            if resp.status() == StatusCode::BAD_REQUEST {
                app.live.bad_request();
            }
            Ok(resp)
        });
        fut
    })
}

/// Compares the presented token with ours in time independent of where they differ.
fn authorized(req: &Request<Incoming>, token: &str) -> bool {
    let Some(v) = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(given) = v.strip_prefix("Bearer ") else {
        return false;
    };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
