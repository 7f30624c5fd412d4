//! The blocking client of `oncelake serve`, std-only: the transport (HTTP/1.1 over the store's
//! Unix socket or loopback TCP with a bearer token, and the identity handshake that proves the
//! server answering is the server of the store directory) and the API's operations, answering
//! with the engine's own types. The API is in `docs/server.md`; the server is the
//! `oncelake-server` member, which shares this crate's wire types, discovery file and identity
//! proof.
//!
//! Layers, lowest first: the wire shapes (`wire*`), `discovery` and `identity` (shared with the
//! server); `error`; the transport (`conn`, `http1`, `pool`, `client`); the operations
//! (`units`, `snapshot`, `maint`, `pipeline`), each an `impl Client` of its own.

mod client;
mod conn;
pub mod discovery;
pub mod duration;
mod error;
mod http1;
pub mod identity;
mod maint;
pub mod object_check;
mod pipeline;
mod pool;
mod snapshot;
mod unit_store;
mod units;
pub mod wire;
pub mod wire_reconcile;
pub mod wire_stats;
pub mod wire_table;

#[cfg(test)]
mod tests;

pub use client::{Client, HEALTH_TIMEOUT};
pub use error::{ClientError, Result};
pub use oncelake::reconcile::{PlanEnd, PlanEvent, ReconcileForm};
pub use pool::POOL_MAX;
pub use snapshot::SnapshotLease;
