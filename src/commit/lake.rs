//! The leader's lake path (SPEC R23, I11; docs/lake.md): a lake node makes a group durable by
//! publishing it as the next segment of the lake's log, and learns other nodes' groups by
//! applying their segments to its replica (`sync`).
//!
//! One group: take the head (so no sync runs meanwhile), apply every newer segment, decide the
//! group on the replica with the unchanged rules, upload the objects it references, and create
//! segment `applied + 1` with put-if-absent. Won: apply it to the replica (not synced: the lake
//! is the truth, a crash re-reads it) and answer. Lost: throw away what was decided (the leader
//! state is reloaded from the replica), apply the winner, and decide the same operations again —
//! with a jittered backoff, and no ceiling on the attempts, since every lost round means the lake
//! moved on.

use crate::commit::apply::{decide_group, GroupResult, Op, Path};
use crate::core::Core;
use crate::error::{Error, Result};
use crate::lake::log::Published;
use crate::lake::segment::{self, Segment};
use crate::lake::timings::{self, Phase};
use crate::lake::{Head, Lake};
use crate::schema::manifest::EntryValue;
use crate::wal::overlay::LeaderState;
use crate::wal::redo::{GroupRedo, Keyed};
use std::collections::HashSet;
use std::time::Instant;

/// Decides and publishes one group on a lake node; see the module documentation.
pub(crate) fn write_group(inner: &Core, lake: &Lake, ops: Vec<Op>) -> Result<GroupResult> {
    // Nothing is ever queued on a lake node's backlog; a group applied in place needs it empty.
    inner.drain()?;
    check_diverged(inner, lake)?;
    let mut head = lake.head();
    let mut lost = 0u32;
    loop {
        let t = Instant::now();
        sync_locked(inner, lake, &mut head)?;
        timings::add(Phase::Sync, t);
        let t = Instant::now();
        // Log time never runs backwards, whatever this node's clock says.
        let now_ms = inner.options.clock.now_ms().max(head.time_ms);
        let decided = decide_group(inner, ops.clone(), now_ms, Path::InPlace(false))?;
        timings::add(Phase::Decide, t);
        let Some(pending) = decided.pending else {
            // Counted in the leader's counters already; carried until a segment of ours wins.
            lake.unlogged.lock().absorb(&decided.result.2);
            return Ok(decided.result);
        };
        let n = head.applied + 1;
        assert_eq!(
            pending.number(),
            n,
            "invariant: a lake node's group number is the segment after the one it applied"
        );
        let t = Instant::now();
        let uploads = upload_objects(inner, lake, &pending)?;
        timings::add(Phase::Upload, t);
        let t = Instant::now();
        let bytes = Segment {
            n,
            prev: head.hash,
            node: lake.node,
            nonce: segment::nonce(),
            time_ms: now_ms,
            frame: pending.frame(),
        }
        .encode();
        let published = lake.publish(n, &bytes)?;
        timings::add(Phase::Publish, t);
        timings::attempt(matches!(published, Published::Won), uploads);
        let t = Instant::now();
        match published {
            Published::Won => {
                inner.apply_in_place(&pending, false)?;
                // The segment's counters hold what this node carried.
                *lake.unlogged.lock() = crate::metrics::Counters::default();
                timings::add(Phase::Apply, t);
                *head = Head {
                    applied: n,
                    hash: segment::hash(&bytes),
                    time_ms: now_ms,
                };
                inner.readers.publish(decided.newest);
                drop(decided.prune_guard);
                if lake.checkpoint_every > 0 && n.is_multiple_of(lake.checkpoint_every) {
                    super::lake_checkpoint::spawn(inner, *head);
                }
                return Ok(decided.result);
            }
            Published::Lost(winner) => {
                // What this attempt decided is void: the leader's state is the replica's again.
                drop(decided.prune_guard);
                reload(inner, lake)?;
                apply_segment(inner, lake, &mut head, &winner)?;
                reload(inner, lake)?;
                crate::lake::backoff(lost.min(6));
                lost = lost.saturating_add(1);
                timings::add(Phase::Lost, t);
            }
        }
    }
}

/// Applies every segment the lake holds beyond this node's replica (`Store::sync`).
pub(crate) fn sync(inner: &Core, lake: &Lake) -> Result<()> {
    if let Some(cause) = inner.failed.lock().clone() {
        return Err(Error::Failed { cause });
    }
    inner.drain()?;
    check_diverged(inner, lake)?;
    let mut head = lake.head();
    sync_locked(inner, lake, &mut head)
}

/// Fails the store if a background checkpoint found its replica diverged from the lake.
fn check_diverged(inner: &Core, lake: &Lake) -> Result<()> {
    match lake.diverged.lock().take() {
        Some(e) => {
            inner.fail(&e.to_string());
            Err(e)
        }
        None => Ok(()),
    }
}

/// Applies segments after `head` until the lake has no next one. A failure while applying fails
/// the store: the replica may hold part of what the leader state does not.
fn sync_locked(inner: &Core, lake: &Lake, head: &mut Head) -> Result<()> {
    let mut any = false;
    while let Some(bytes) = lake.read_segment(head.applied + 1)? {
        if let Err(e) = apply_segment(inner, lake, head, &bytes) {
            inner.fail(&e.to_string());
            return Err(e);
        }
        any = true;
    }
    if any {
        reload(inner, lake)?;
    }
    Ok(())
}

/// The leader state of the replica as it is now (nothing is unapplied on a lake node), its
/// counters plus the counts this node has not logged yet.
fn reload(inner: &Core, lake: &Lake) -> Result<()> {
    let mut state = LeaderState::load(&**inner.db)?;
    let since = state.next_seq.saturating_sub(1);
    crate::schema::meta::add_to_counters(&mut state.counters, &lake.unlogged.lock(), since);
    inner.metrics.set_persisted(&state.counters);
    *inner.leader.lock() = state;
    Ok(())
}

/// Applies segment `head.applied + 1`, read as `bytes`, to the replica: checks that it follows
/// the segment applied last (its hash), applies its redo as recovery applies a write-ahead
/// record, and publishes its entries in the dedup index. The objects its entries reference are
/// fetched into this node's `objects/` first, so every entry a reader of the replica meets has
/// its object on disk (I2) and `Store::object_path` names a file, as on a local store.
fn apply_segment(inner: &Core, lake: &Lake, head: &mut Head, bytes: &[u8]) -> Result<()> {
    let n = head.applied + 1;
    let seg = Segment::decode(n, bytes).map_err(|d| lake.corrupt(d))?;
    if seg.prev != head.hash {
        return Err(lake.corrupt(format!(
            "segment {n} does not follow segment {} as this node applied it (the hash it names \
             differs): this node's replica diverged from the lake — initialise a new node \
             directory and let it catch up",
            head.applied
        )));
    }
    let where_ = std::path::PathBuf::from(format!("{}/{}", lake.url, segment::path(n)));
    let group = GroupRedo::from_frame(&where_, n, &seg.frame)?;
    let mut missing = Vec::new();
    let mut missing_ids = HashSet::new();
    let mut updates = Vec::new();
    let mut seen = HashSet::new();
    for (key, value) in group.keyed_rows(Keyed::Manifest)? {
        let unit = std::str::from_utf8(key).map_err(|_| Error::Corrupt {
            path: where_.clone(),
            detail: "a manifest row's unit key is not UTF-8".into(),
        })?;
        let v = EntryValue::decode(unit, value)?;
        // An object the lake no longer holds was deleted by a GC after a later prune dropped
        // every entry of it (a replay of old segments cannot tell): the entry is applied, and a
        // read of it fetches, or reports it missing (verify checks what is still referenced).
        if !inner.stager.object_path(&v.object.id).exists() && missing_ids.insert(v.object.id) {
            missing.push((v.object, v.seq));
        }
        let new_unit = seen.insert(unit.to_string()) && inner.probe(unit)?.is_none();
        updates.push((unit.to_string(), new_unit, v));
    }
    // Fetching on first read instead was measured (BENCHMARKS P10): sync 8x faster, but more
    // lost slots and a p99 6-9x worse, and `object_path` naming absent files; kept eager.
    let pins = lake.fetch_all_if_present(&missing, &inner.stager)?;
    inner.apply_in_place(&group, false)?;
    {
        let mut idx = inner.index.write();
        for (unit, new_unit, v) in &updates {
            idx.upsert(unit, *new_unit, v);
        }
    }
    let (next_seq, _) = group.seq_rows()?;
    inner.readers.publish(next_seq.saturating_sub(1));
    *head = Head {
        applied: n,
        hash: segment::hash(bytes),
        time_ms: seg.time_ms,
    };
    drop(pins);
    Ok(())
}

/// Uploads every object the group's entries reference, before its segment is created: a node
/// that applies the segment finds them (I2 across nodes). Concurrently: the segment is created
/// only after every upload answered success. Returns how many were uploaded.
fn upload_objects(inner: &Core, lake: &Lake, group: &GroupRedo) -> Result<u64> {
    let mut objects = Vec::new();
    for (key, value) in group.keyed_rows(Keyed::Manifest)? {
        let unit = std::str::from_utf8(key).map_err(|_| Error::Corrupt {
            path: std::path::PathBuf::from("commit group"),
            detail: "a manifest row's unit key is not UTF-8".into(),
        })?;
        let v = EntryValue::decode(unit, value)?;
        let local = inner.stager.object_path(&v.object.id);
        objects.push((v.object.id, v.seq, local));
    }
    lake.upload_all(&objects)
}
