//! `oncelake serve`: one process owns an oncelake store and serves it to the other processes of
//! the node over HTTP/1.1 — on a Unix socket inside the store directory (owner-only, so access is
//! exactly access to the store's files) or on loopback TCP with a bearer token — and the
//! blocking [`Client`] that the CLI and programs use to reach it. The API is in `docs/server.md`.
//!
//! The engine crate stays free of tokio, hyper and axum: they are this crate's dependencies only.

mod auth;
pub mod bench;
pub mod client;
pub mod discovery;
mod http;
mod live;
pub mod load;
pub mod pipeline;
mod reconcile;
mod run;
pub mod stats;
pub mod wire;
pub mod wire_reconcile;
pub mod wire_verify;

pub use client::{Client, ClientError, PlanEnd, PlanEvent, ReconcileForm};
pub use http::Limits;
pub use run::{serve, ServeError, ServeOptions};
