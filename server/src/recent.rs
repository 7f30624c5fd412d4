//! The outcome of this server's latest GC and verify, for the status page: the store keeps no
//! record of either (GC writes no log record, verify writes nothing), so the server remembers
//! what its own `/v1/gc` and `/v1/verify` answered. Written once per GC or verify, read by the
//! page: nothing on the commit path.

use oncelake::{GcReport, VerifyReport};
use serde::Serialize;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The latest GC and verify run through this server.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    gc: Mutex<Option<GcSeen>>,
    verify: Mutex<Option<VerifySeen>>,
}

/// A GC run as the page shows it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct GcSeen {
    /// When it finished, ms since the Unix epoch.
    at_ms: u64,
    dry_run: bool,
    objects: u64,
    object_bytes: u64,
    staging_files: u64,
    history_rows_pruned: u64,
    objects_referenced: u64,
}

/// A verify run as the page shows it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct VerifySeen {
    /// When it finished, ms since the Unix epoch.
    at_ms: u64,
    ok: bool,
    deep: bool,
    seq: u64,
    entries_checked: u64,
    objects_checked: u64,
    /// Missing and corrupt objects, history and replay problems, broken invariants.
    problems: usize,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Recent {
    /// Remembers a GC's report.
    pub(crate) fn note_gc(&self, r: &GcReport) {
        let seen = GcSeen {
            at_ms: now_ms(),
            dry_run: r.dry_run,
            objects: r.objects,
            object_bytes: r.object_bytes,
            staging_files: r.staging_files,
            history_rows_pruned: r.history_rows_pruned,
            objects_referenced: r.objects_referenced,
        };
        *lock(&self.gc) = Some(seen);
    }

    /// Remembers a verify's report.
    pub(crate) fn note_verify(&self, r: &VerifyReport) {
        let seen = VerifySeen {
            at_ms: now_ms(),
            ok: r.is_ok(),
            deep: r.deep,
            seq: r.seq,
            entries_checked: r.entries_checked,
            objects_checked: r.objects_checked,
            problems: r.missing.len()
                + r.corrupt.len()
                + r.history_problems.len()
                + r.replay.problems.len()
                + r.invariants.len(),
        };
        *lock(&self.verify) = Some(seen);
    }

    /// The latest GC and verify, if any ran through this server.
    pub(crate) fn seen(&self) -> (Option<GcSeen>, Option<VerifySeen>) {
        (lock(&self.gc).clone(), lock(&self.verify).clone())
    }
}

/// A poisoned lock still holds a whole value (each write is one assignment), so it is read on.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
