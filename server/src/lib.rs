//! `oncelake serve`: one process owns an oncelake store and serves it to the other processes of
//! the node over HTTP/1.1 — on a Unix socket inside the store directory (owner-only, so access is
//! exactly access to the store's files) or on loopback TCP with a bearer token. The blocking
//! [`Client`] that the CLI and programs use to reach it is the `oncelake-client` crate's
//! (re-exported here). The API is in `docs/server.md`.
//!
//! The engine crate stays free of tokio, hyper and axum: they are this crate's dependencies only.

mod api_error;
mod app;
mod auth;
mod body;
mod bounds;
mod committer;
mod conns;
mod http;
mod live;
mod maint;
mod pipeline;
mod pipeline_cells;
mod pool;
mod reads;
mod recent;
mod reconcile;
mod run;
mod snapshot;
mod snapshot_leases;
mod staging;
mod stall;
mod stats;
mod status_page;
mod table;
mod units;
mod workers;

// The client, the wire shapes, the discovery file and the identity proof are the
// `oncelake-client` crate's (std-only, shared with the CLI and the Python binding); re-exported so
// `oncelake_server::Client` and `oncelake_server::wire` keep working.
pub use app::Limits;
pub use committer::DEFAULT_COMMITTERS;
pub use conns::DEFAULT_CONNECTION_THREADS;
pub use oncelake_client as client;
pub use oncelake_client::{
    discovery, identity, object_check, wire, wire_reconcile, wire_stats, wire_table,
};
pub use oncelake_client::{Client, ClientError, PlanEnd, PlanEvent, ReconcileForm, SnapshotLease};
pub use pool::DEFAULT_STORE_THREADS;
pub use run::{serve, serve_until, ServeError, ServeOptions, BLOCKING_KEEP_ALIVE, MALLOC_ARENAS};
