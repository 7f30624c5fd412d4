//! The process an open store belongs to.
//!
//! A store is opened by one process at a time (its `LOCK`). A child `fork()`ed from that process
//! gets a copy of the open store — the database handles, the lock's descriptor, the backlog in
//! memory — but none of the threads that run it (the applier thread, a leader in the middle of a
//! group). Used from the child, that copy would write the parent's files behind its back:
//! applying the backlog a second time, redb's close writing its shutdown header (which tells the
//! next open that no recovery is needed while the parent still writes), and unlocking the `flock`
//! both processes share (it belongs to the open file description), which would let a third
//! process open the store beside the parent.
//!
//! So every read and write of the store checks the process first and refuses in a child
//! ([`crate::Error::Forked`]); a child dropping its copy leaks it instead of closing it (the
//! parent's close is the only one). The in-memory dedup answers (`lookup`, `is_done`) touch no
//! file and stay as the fork left them. The check is one `getpid` a call, next to a commit's
//! sync or a read transaction.

use crate::error::{Error, Result};
use std::path::Path;

/// The process that opened a store.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Owner {
    pid: u32,
}

impl Owner {
    /// The calling process, at open.
    pub(crate) fn this_process() -> Owner {
        Owner {
            pid: std::process::id(),
        }
    }

    /// Whether the calling process is the one that opened the store (false in a forked child).
    pub(crate) fn is_current(&self) -> bool {
        std::process::id() == self.pid
    }

    /// Refuses the call in a process other than the one that opened the store at `dir`.
    pub(crate) fn check(&self, dir: &Path) -> Result<()> {
        let this = std::process::id();
        if this == self.pid {
            return Ok(());
        }
        Err(Error::Forked {
            path: dir.to_path_buf(),
            opened_by: self.pid,
            this,
        })
    }
}
