//! # oncelake
//!
//! An embedded storage engine that gives data-lake and ETL writers **exactly-once results per
//! logical unit of work**. Worker threads stage immutable objects into a local directory and commit
//! them through an atomic manifest kept, with a write-ahead commit log, in redb. Whatever crashes,
//! retries and rebalancing do, each unit ends with exactly one complete, correct output, and no
//! reader sees partial or duplicate work.
//!
//! ```
//! # fn main() -> oncelake::Result<()> {
//! use oncelake::{Batch, Outcome, Store};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().join("lake"))?;
//!
//! // Stage the output, then commit it for (unit, source version).
//! let out = store.stage_bytes(b"parquet bytes")?;
//! let report = store.commit(Batch::new().put("orders/date=2026-11-29", 3, &out))?;
//! assert!(matches!(report.units[0].outcome, Outcome::Committed { .. }));
//!
//! // A retry of the same work collapses into a duplicate; a reader sees one entry.
//! let again = store.put("orders/date=2026-11-29", 3, b"parquet bytes")?;
//! assert!(matches!(again.outcome, Outcome::Duplicate { .. }));
//! let snap = store.snapshot()?;
//! let entry = snap.get("orders/date=2026-11-29")?.unwrap();
//! assert_eq!(snap.read_object(&entry)?, b"parquet bytes");
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod api;
pub mod claim;
pub mod clock;
pub mod commit;
mod core;
mod dedup;
mod error;
// Fault injection and the file-operation seam it wraps: public to tests and test tools only.
#[cfg(feature = "testing")]
pub mod fault;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)]
mod fault;
mod feed;
pub mod gc;
mod index;
mod index_snap;
mod key;
#[cfg(feature = "lake")]
mod lake;
mod layout;
pub use commit::invariants;
pub use schema::log;
pub mod metrics;
mod object;
mod options;
mod owner;
pub mod pipeline;
pub mod reconcile;
mod replay;
mod run;
mod schema;
mod snapshot;
mod stage;
mod store;
pub(crate) mod sync;
pub mod table;
mod text;
pub mod verify;
#[cfg(feature = "testing")]
pub mod vfs;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)]
mod vfs;
mod wal;

pub use api::{Put, PutAnswer, PutTo, StoreStats, UnitStore};
pub use claim::{ClaimOutcome, Lease, ReleaseOutcome, RenewOutcome};
pub use clock::{Clock, ManualClock, SystemClock};
pub use commit::{
    Atomicity, Batch, CheckpointReport, CommitReport, FenceReason, Intent, Outcome, UnitOutcome,
};
pub use error::{Error, Result};
pub use gc::{GcOptions, GcReport};
#[doc(hidden)]
pub use index_snap::OpenReport;
pub use key::{is_internal_key, validate_key, validate_user_key, INTERNAL_PREFIXES, MAX_KEY_LEN};
/// Fault injection for a shared lake's object store (tests, the simulation).
#[cfg(all(feature = "lake", feature = "testing"))]
#[doc(hidden)]
pub use lake::faults::{FaultCounts, FaultRates, Hold, LakeFault, LakeFaults};
/// What the lake's object store allows with the protocol switched off (the P10 bench's floor).
#[cfg(feature = "lake")]
#[doc(hidden)]
pub use lake::floor::{lake_floor, FloorFigures, FloorSpec};
/// The file that binds a node directory to its shared lake (SPEC R23).
#[cfg(feature = "lake")]
pub use lake::node::LAKE_FILE;
/// Where lake nodes' group time goes (the P10 bench's breakdown).
#[cfg(feature = "lake")]
pub use lake::timings::{lake_timings, LakeTimings};
pub use metrics::MetricsSnapshot;
pub use object::{ObjectId, ObjectMeta};
#[cfg(feature = "testing")]
pub use options::Floor;
pub use replay::{replay, ReplayReport};
pub use run::{Begin, Reader, Run, RunAnswers, RunError, RunOutcome, WorkOutput};
/// The seal every stored value carries, for tests that write a store's tables by hand.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use schema::codec::seal;
pub use schema::manifest::Entry;
pub use snapshot::{check_object, Entries, Snapshot};
pub use stage::Staged;
pub use store::{
    lock_holder, CommitHandle, Committed, Durability, LockHolder, LockWaitStop, Options, Store,
    Write, Written, DB_FILE, FORMAT_VERSION, MARKER_FILE,
};
pub use verify::{VerifyOptions, VerifyReport};
pub use wal::backlog::BacklogSize;

#[cfg(loom)]
#[doc(hidden)]
pub mod loom_support {
    //! The commit queue, exposed to the loom models in `tests/loom.rs`.
    pub use crate::commit::queue::{LeaderPanicked, Weighted, WriteQueue};
    pub use crate::wal::backlog::{Backlog, Group, Stopped, Unlisted};
}

/// The README's examples, compiled and run as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
