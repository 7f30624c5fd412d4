//! The status page (SPEC R25): `GET /` answers one page that a person reads at a glance — the
//! store's counters and rates, the latest commits, GC and verify state and the recorded
//! pipeline's DAG with its cells by state — drawn in the browser from `/v1/stats` and
//! `/v1/overview` ([`overview`]), polled about once a second.
//!
//! The page is three static files compiled into the binary (no CDN, no build step, works
//! offline). They hold no data of the store, so they are the one thing besides the identity
//! question answered without the bearer token on TCP ([`is_public`]): everything the page shows
//! comes from the API's own endpoints, which the page's script calls with
//! `Authorization: Bearer TOKEN` like any client. The token reaches the script through the URL's
//! fragment (`/#token=…`, never sent to a server, not in `Referer`) or a prompt, and is kept in
//! the tab's `sessionStorage`, which only this origin (scheme, host and port) reads.
//! docs/server.md, "The status page".

mod overview;

use crate::app::App;
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// The page's files: (path, content type, text).
const ASSETS: [(&str, &str, &str); 3] = [
    ("/", "text/html; charset=utf-8", include_str!("index.html")),
    (
        "/status-page/app.js",
        "text/javascript; charset=utf-8",
        include_str!("app.js"),
    ),
    (
        "/status-page/style.css",
        "text/css; charset=utf-8",
        include_str!("style.css"),
    ),
];

/// Where the page's files come from and where its script may connect: this server only. No
/// inline script, no other origin, and no page of another origin may frame it (clickjacking).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// The page's routes: its three files and the JSON it draws that `/v1/stats` does not carry.
pub(crate) fn routes() -> Router<Arc<App>> {
    let mut r = Router::new().route("/v1/overview", get(overview::overview));
    for (path, kind, text) in ASSETS {
        r = r.route(path, get(move || async move { asset(kind, text) }));
    }
    r
}

/// Whether a request is for one of the page's static files, which carry no data of the store and
/// so are answered without the bearer token (the data the page shows is not: see the module
/// comment).
pub(crate) fn is_public(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD) && ASSETS.iter().any(|(p, _, _)| *p == path)
}

fn asset(kind: &'static str, text: &'static str) -> Response {
    let mut resp = text.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // A new build's page is picked up on the next load, without a stale cached script.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
