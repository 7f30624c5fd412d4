//! Writing a lake node's checkpoint (SPEC R23; docs/lake.md): on demand (`Store::checkpoint`)
//! and, in the background, after the node wins a segment whose number is a multiple of
//! `Options::lake_checkpoint_every`.
//!
//! The replica is read in one redb read transaction taken while the node holds its head, so it
//! is exactly the state after segment `N`; the copy and the upload run without the head (a
//! background one while the node goes on committing). If the lake holds a checkpoint at `N`
//! already, this node's digests are compared with it: a difference means this replica diverged
//! from the lake, and the store fails naming the tables that differ.

use crate::commit::CheckpointReport;
use crate::core::Core;
use crate::error::{Error, IoContext, Result};
use crate::lake::checkpoint::{self, Checkpoint, Put, TableDigest};
use crate::lake::{Head, Lake};
use redb::ReadTransaction;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Writes (or checks) the checkpoint of this node's replica at its head (the caller syncs
/// first).
pub(crate) fn checkpoint(inner: &Core, lake: &Lake) -> Result<CheckpointReport> {
    let head = lake.head();
    let txn = inner
        .db
        .begin_read()
        .map_err(|e| Error::db("read the replica", e))?;
    let at = *head;
    drop(head);
    let r = write(lake, txn, at);
    if let Err(e @ Error::Corrupt { .. }) = &r {
        inner.fail(&e.to_string());
    }
    r
}

/// Starts a background checkpoint of the replica as it is now, after segment `head.applied`
/// (the caller holds the head), unless one runs already. A failure only leaves the lake with
/// an older checkpoint (a longer tail for a new node), except a divergence, which the node's
/// next commit or sync reports.
pub(crate) fn spawn(inner: &Core, head: Head) {
    let Some(lake) = inner.lake.clone() else {
        return;
    };
    if lake.checkpointing.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(txn) = inner.db.begin_read() else {
        lake.checkpointing.store(false, Ordering::Release);
        return;
    };
    let started = std::thread::Builder::new()
        .name("oncelake-checkpoint".into())
        .spawn({
            let lake = lake.clone();
            move || run(&lake, txn, head)
        });
    if started.is_err() {
        lake.checkpointing.store(false, Ordering::Release);
    }
}

fn run(lake: &Arc<Lake>, txn: ReadTransaction, head: Head) {
    if let Err(e @ Error::Corrupt { .. }) = write(lake, txn, head) {
        *lake.diverged.lock() = Some(e);
    }
    lake.checkpointing.store(false, Ordering::Release);
}

/// Writes the checkpoint of the replica read by `txn` (at `head`), or checks it against the
/// one the lake holds at that segment.
fn write(lake: &Lake, txn: ReadTransaction, head: Head) -> Result<CheckpointReport> {
    let n = head.applied;
    if n == 0 {
        return Ok(CheckpointReport {
            segment: 0,
            bytes: 0,
            written: false,
        });
    }
    if let Some(found) = lake.read_checkpoint(n)? {
        let theirs = Checkpoint::decode(n, &found).map_err(|d| lake.corrupt_ckpt(n, d))?;
        let ours = checkpoint::digest(&txn)?;
        check_same(lake, n, &ours, &theirs.digests)?;
        return Ok(CheckpointReport {
            segment: n,
            bytes: found.len() as u64,
            written: false,
        });
    }
    let tmp = tempfile::tempdir().ctx(|| "create a temporary directory for a checkpoint")?;
    let file = tmp.path().join("replica.redb");
    let digests = checkpoint::dump(&txn, &file)?;
    drop(txn);
    let db = std::fs::read(&file).ctx(|| format!("read {}", file.display()))?;
    let bytes = Checkpoint {
        n,
        seg_hash: head.hash,
        time_ms: head.time_ms,
        digests: digests.clone(),
        db,
    }
    .encode();
    let written = match lake.put_checkpoint(n, &bytes)? {
        Put::Written => true,
        Put::Existing(theirs) => {
            check_same(lake, n, &digests, &theirs)?;
            false
        }
    };
    Ok(CheckpointReport {
        segment: n,
        bytes: bytes.len() as u64,
        written,
    })
}

fn check_same(lake: &Lake, n: u64, ours: &[TableDigest], theirs: &[TableDigest]) -> Result<()> {
    let differ = checkpoint::differences(ours, theirs);
    if differ.is_empty() {
        return Ok(());
    }
    Err(lake.corrupt_ckpt(
        n,
        format!(
            "this node's replica diverged from the lake at segment {n}: its {} differ from the \
             lake's checkpoint — initialise a new node directory and let it start from the lake",
            differ.join(", ")
        ),
    ))
}
