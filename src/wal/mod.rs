//! The write-ahead path, one wing: what happens to a decided commit group between the leader's
//! decision and the B-trees.
//!
//! - `redo`: the group's redo record (its rows), the write-ahead log file `wal.redb` it is
//!   appended to and synced in, recovery, and the applying of records to the tables;
//! - `overlay`: the leader's state (the rows of decided groups it decides the next ones from);
//! - `backlog`: the durable groups not yet applied to the B-trees, and who applies them;
//! - `tail`: what a snapshot reads of those groups, beside its read transaction.
//!
//! The commit leader (`commit`) drives it; the core holds its state.

pub mod backlog;
pub(crate) mod overlay;
pub(crate) mod redo;
pub(crate) mod tail;
