//! What survives a crash, a power loss or a fault: the write-ahead log and its backlog, group
//! commit, the index snapshot, the tail, corruption, and the seeded simulation (dst). One test
//! binary, one module per subject.

#[path = "../bin/mod.rs"]
mod bin;
#[path = "../common/mod.rs"]
mod common;

mod backlog;
mod corruption;
mod crash;
mod dst;
mod faults;
mod group_commit;
mod index_snapshot;
mod tail;
mod wal;
