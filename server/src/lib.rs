//! `oncelake serve`: one process owns an oncelake store and serves it to the other processes of
//! the node over HTTP/1.1 — on a Unix socket inside the store directory (owner-only, so access is
//! exactly access to the store's files) or on loopback TCP with a bearer token — and the
//! blocking [`Client`] that the CLI and programs use to reach it. The API is in `docs/server.md`.
//!
//! The engine crate stays free of tokio, hyper and axum: they are this crate's dependencies only.

#[cfg(feature = "server")]
mod auth;
#[cfg(feature = "server")]
mod bounds;
pub mod client;
#[cfg(feature = "server")]
mod committer;
#[cfg(feature = "server")]
mod conns;
pub mod discovery;
#[cfg(feature = "server")]
mod http;
pub mod identity;
#[cfg(feature = "server")]
mod live;
pub mod object_check;
#[cfg(feature = "server")]
mod pipeline;
#[cfg(feature = "server")]
mod pipeline_cells;
#[cfg(feature = "server")]
mod pool;
#[cfg(feature = "server")]
mod reconcile;
#[cfg(feature = "server")]
mod run;
#[cfg(feature = "server")]
mod snapshot;
#[cfg(feature = "server")]
mod staging;
#[cfg(feature = "server")]
mod stall;
#[cfg(feature = "server")]
mod status_page;
#[cfg(feature = "server")]
mod table;
#[cfg(feature = "server")]
mod workers;
// The server-side helpers in `stats` (metrics text, verify JSON) are unused by a client-only build.
#[cfg_attr(not(feature = "server"), allow(dead_code, unused_imports))]
pub mod stats;
pub mod wire;
pub mod wire_cells;
pub mod wire_pipeline;
pub mod wire_reconcile;
pub mod wire_table;
pub mod wire_verify;

pub use client::{Client, ClientError, PlanEnd, PlanEvent, ReconcileForm, SnapshotLease};
#[cfg(feature = "server")]
pub use committer::DEFAULT_COMMITTERS;
#[cfg(feature = "server")]
pub use conns::DEFAULT_CONNECTION_THREADS;
#[cfg(feature = "server")]
pub use http::Limits;
#[cfg(feature = "server")]
pub use pool::DEFAULT_STORE_THREADS;
#[cfg(feature = "server")]
pub use run::{serve, serve_until, ServeError, ServeOptions, BLOCKING_KEEP_ALIVE, MALLOC_ARENAS};
