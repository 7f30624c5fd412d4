//! Where a lake node's group time goes, summed over every lake node of the process: what the
//! P10 bench breaks a group down by. A few relaxed adds per group attempt, next to requests
//! that take milliseconds.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// The phases of a group on a lake node.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Phase {
    /// Reading (and applying) the segments newer than the replica before deciding.
    Sync,
    /// Deciding the group on the replica.
    Decide,
    /// Uploading the objects the group references.
    Upload,
    /// Creating the segment (put-if-absent, and any read-back).
    Publish,
    /// Applying the won segment to the replica.
    Apply,
    /// After a lost slot: applying the winner and the backoff.
    Lost,
    /// Fetching other nodes' objects: within sync or after a loss, and on first read.
    Fetch,
}

const PHASES: usize = 7;

static NANOS: [AtomicU64; PHASES] = [const { AtomicU64::new(0) }; PHASES];
static ATTEMPTS: AtomicU64 = AtomicU64::new(0);
static WON: AtomicU64 = AtomicU64::new(0);
static UPLOADS: AtomicU64 = AtomicU64::new(0);

/// Adds the time since `since` to `phase`.
pub(crate) fn add(phase: Phase, since: Instant) {
    let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
    NANOS[phase as usize].fetch_add(ns, Relaxed);
}

/// Counts an attempt to publish a group (won or lost) and the objects it uploaded.
pub(crate) fn attempt(won: bool, uploads: u64) {
    ATTEMPTS.fetch_add(1, Relaxed);
    WON.fetch_add(u64::from(won), Relaxed);
    UPLOADS.fetch_add(uploads, Relaxed);
}

/// Totals since the process started, over every lake node in it (subtract two of them for a
/// run's share).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LakeTimings {
    /// Group attempts that reached the segment's create.
    pub attempts: u64,
    /// Of them, the ones whose segment won its slot.
    pub won: u64,
    /// Objects uploaded (a lost attempt's objects are uploaded again under the new seq).
    pub uploads: u64,
    /// Nanoseconds reading and applying newer segments before deciding.
    pub sync_ns: u64,
    /// Nanoseconds deciding groups on the replica.
    pub decide_ns: u64,
    /// Nanoseconds uploading the groups' objects.
    pub upload_ns: u64,
    /// Nanoseconds creating segments (put-if-absent and any read-back).
    pub publish_ns: u64,
    /// Nanoseconds applying won segments to the replica.
    pub apply_ns: u64,
    /// Nanoseconds after lost slots: applying the winner, and the backoff.
    pub lost_ns: u64,
    /// Nanoseconds fetching other nodes' objects (sync and lost slots; reads on a node started
    /// from a checkpoint).
    pub fetch_ns: u64,
}

/// The process's totals so far.
pub fn lake_timings() -> LakeTimings {
    let ns = |p: Phase| NANOS[p as usize].load(Relaxed);
    LakeTimings {
        attempts: ATTEMPTS.load(Relaxed),
        won: WON.load(Relaxed),
        uploads: UPLOADS.load(Relaxed),
        sync_ns: ns(Phase::Sync),
        decide_ns: ns(Phase::Decide),
        upload_ns: ns(Phase::Upload),
        publish_ns: ns(Phase::Publish),
        apply_ns: ns(Phase::Apply),
        lost_ns: ns(Phase::Lost),
        fetch_ns: ns(Phase::Fetch),
    }
}
