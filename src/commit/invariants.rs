//! The engine's invariants as code: one named check per rule of SPEC §4 (I1–I9) that the store's
//! state can show, and per rule of the commit log (L1–L7 below), each returning a typed
//! [`Violation`] — which rule, and what was seen — instead of panicking, so that every caller
//! decides what a violation means for it:
//!
//! - the commit leader runs the per-group checks on every group in debug builds and panics
//!   ([`assert_holds`]): a violation there is an engine bug, caught where it happens;
//! - `verify` runs the whole-store checks (`check_state`) and reports what they find as
//!   problems (`VerifyReport::invariants`);
//! - the fuzz targets' shared checks (`fuzz/checks.rs`) and the model and simulation tests run the
//!   same functions after every step ([`check_version_advance`], [`check_token_admitted`],
//!   [`Store::check_invariants`](crate::Store::check_invariants)).
//!
//! The commit-log rules, which I1–I9 rest on:
//!
//! - **L1** the log's seqs strictly increase, without gaps, and every record carries its own key;
//! - **L2** `next_seq` is the last log key + 1 (1 for an empty log);
//! - **L3** the history horizon (`history_from`) only rises;
//! - **L4** the history horizon never passes `next_seq`;
//! - **L5** a group weighs at most its bound, unless it is one request;
//! - **L6** an entry's object is published (exists, with the recorded size) before its row is;
//! - **L7** every fencing token stored or logged is below `next_token`.
//!
//! I3 (crash atomicity), I4 (no partial reads) and I8 (GC keeps what is or may be referenced) are
//! about histories of operations, not about one state: the crash, DST and GC tests hold the engine
//! to them (`docs/invariants.md` says where).

use super::rules::{ClaimRecord, LeaseStatus};
use crate::error::{DbContext, Result};
use crate::object::ObjectMeta;
use crate::schema::log::{Record, RecordBody};
use crate::schema::manifest::EntryValue;
use redb::ReadableTable;
use std::collections::HashMap;
use std::fmt;

/// A rule of SPEC §4 or of the commit log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// I1: at most one current entry per unit, and it is newer than every history row of the unit.
    OneCurrentEntry,
    /// I5: a unit's source version never goes backwards (a correction raises the revision).
    VersionNeverBack,
    /// I6: no commit with a stale fencing token is applied.
    NoStaleToken,
    /// I7: replaying the commit log reproduces the manifest.
    ReplayReproduces,
    /// I9: every record read back carries its own checksum, and it matches.
    Checksummed,
    /// L1: log seqs strictly increase without gaps, each record at its own key.
    LogSeqIncreasing,
    /// L2: `next_seq` is the last log key + 1.
    NextSeqFollowsLog,
    /// L3: the history horizon only rises.
    HorizonOnlyRises,
    /// L4: the history horizon is at most `next_seq`.
    HorizonWithinLog,
    /// L5: a group of two or more requests weighs at most the bound.
    GroupWithinBound,
    /// L6: an entry's object exists, with its size, before the entry's row is written.
    ObjectBeforeRow,
    /// L7: every fencing token stored or logged is below `next_token`.
    TokenBelowNext,
}

impl Invariant {
    /// The label SPEC or `docs/invariants.md` gives the rule.
    pub fn label(self) -> &'static str {
        match self {
            Invariant::OneCurrentEntry => "I1",
            Invariant::VersionNeverBack => "I5",
            Invariant::NoStaleToken => "I6",
            Invariant::ReplayReproduces => "I7",
            Invariant::Checksummed => "I9",
            Invariant::LogSeqIncreasing => "L1",
            Invariant::NextSeqFollowsLog => "L2",
            Invariant::HorizonOnlyRises => "L3",
            Invariant::HorizonWithinLog => "L4",
            Invariant::GroupWithinBound => "L5",
            Invariant::ObjectBeforeRow => "L6",
            Invariant::TokenBelowNext => "L7",
        }
    }

    /// Every rule, in label order.
    pub const ALL: [Invariant; 12] = [
        Invariant::OneCurrentEntry,
        Invariant::VersionNeverBack,
        Invariant::NoStaleToken,
        Invariant::ReplayReproduces,
        Invariant::Checksummed,
        Invariant::LogSeqIncreasing,
        Invariant::NextSeqFollowsLog,
        Invariant::HorizonOnlyRises,
        Invariant::HorizonWithinLog,
        Invariant::GroupWithinBound,
        Invariant::ObjectBeforeRow,
        Invariant::TokenBelowNext,
    ];

    /// The rule of `label` (see [`Invariant::label`]).
    pub fn from_label(label: &str) -> Option<Invariant> {
        Invariant::ALL.into_iter().find(|i| i.label() == label)
    }
}

/// On the wire a rule is its label (`"I6"`), the name the docs give it.
#[cfg(feature = "serde")]
impl serde::Serialize for Invariant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.label())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Invariant {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let label = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Invariant::from_label(&label).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown invariant {label:?}: expected a label such as \"I1\" or \"L7\""
            ))
        })
    }
}

/// A rule that does not hold, and what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Violation {
    /// The rule.
    pub invariant: Invariant,
    /// What was seen, naming the unit, seq or token concerned.
    pub seen: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}): {}",
            self.invariant.label(),
            self.invariant,
            self.seen
        )
    }
}

/// The outcome of one check.
pub type Check = std::result::Result<(), Violation>;

fn violated(invariant: Invariant, seen: String) -> Check {
    Err(Violation { invariant, seen })
}

/// Panics, naming every violation, if there is one. For the places where a violation can only be
/// an engine bug (the commit leader in debug builds, tests).
pub fn assert_holds(violations: &[Violation]) {
    if !violations.is_empty() {
        let list: Vec<String> = violations.iter().map(|v| v.to_string()).collect();
        panic!("invariant violated: {}", list.join("; "));
    }
}

/// Panics, naming the violation, if `check` found one.
pub fn assert_ok(check: Check) {
    if let Err(v) = check {
        assert_holds(&[v]);
    }
}

// ---------------------------------------------------------------------------------------------
// Per-step checks: pure functions of what one step saw, for the leader and the fuzzers.

/// I5: `unit` moves from `prev` to `next`, each `(source version, revision)`. The version may not
/// go back; at the same version only a correction may replace the entry, and it raises the
/// revision. Why: readers and reconcile take a unit's version as "how far its output got"; a
/// version going back would make processed input look unprocessed, or hide newer output.
pub fn check_version_advance(unit: &str, prev: Option<(u64, u32)>, next: (u64, u32)) -> Check {
    let Some(prev) = prev else {
        return Ok(());
    };
    if next.0 < prev.0 {
        return violated(
            Invariant::VersionNeverBack,
            format!(
                "unit {unit:?} goes back from version {} to {}",
                prev.0, next.0
            ),
        );
    }
    if next.0 == prev.0 && next.1 <= prev.1 {
        return violated(
            Invariant::VersionNeverBack,
            format!(
                "unit {unit:?} is replaced at version {} without a higher revision ({} after {})",
                next.0, next.1, prev.1
            ),
        );
    }
    Ok(())
}

/// I6: a commit of `unit` carrying `token` is applied at `now_ms` while the unit's newest lease is
/// `lease`. With a token, it must be the newest lease's and that lease must not have ended
/// (released, or ended by an earlier commit); without one, no lease may be live at `now_ms`.
/// Why: the fencing token is what makes a worker that lost its lease (paused, partitioned,
/// overtaken) unable to commit, whatever the clocks say (SPEC R9).
pub fn check_token_admitted(
    unit: &str,
    token: Option<u64>,
    lease: Option<&ClaimRecord>,
    now_ms: u64,
) -> Check {
    let status = lease.map(|l| l.status(now_ms));
    match (token, lease) {
        (Some(t), None) => violated(
            Invariant::NoStaleToken,
            format!("unit {unit:?} applied with token {t}, but no lease was ever granted"),
        ),
        (Some(t), Some(l)) if l.token != t => violated(
            Invariant::NoStaleToken,
            format!(
                "unit {unit:?} applied with token {t}, but its newest is {}",
                l.token
            ),
        ),
        (Some(t), Some(_))
            if matches!(status, Some(LeaseStatus::Ended | LeaseStatus::Released)) =>
        {
            violated(
                Invariant::NoStaleToken,
                format!("unit {unit:?} applied with token {t} of a lease that has ended"),
            )
        }
        (None, Some(l)) if status == Some(LeaseStatus::Live) => violated(
            Invariant::NoStaleToken,
            format!(
                "unit {unit:?} applied without a token under the live lease of token {}",
                l.token
            ),
        ),
        _ => Ok(()),
    }
}

/// L5: a group of requests weighing `weights` was taken under the bound `max`. A lone request
/// may weigh more (it must go somewhere), but a group of two or more never does. Why: the bound
/// caps a group's transaction and log record, and so every writer's latency behind it.
pub fn check_group_bound(weights: &[usize], max: usize) -> Check {
    let total = weights.iter().fold(0usize, |a, w| a.saturating_add(*w));
    if weights.len() > 1 && total > max.max(1) {
        return violated(
            Invariant::GroupWithinBound,
            format!(
                "a group of {} requests weighs {total}, over its bound of {max}",
                weights.len()
            ),
        );
    }
    Ok(())
}

/// L6: the object an entry of `unit` references, found on disk with `found_size` (`None`: not
/// found) when the entry's row is written. Why: a row made visible before its object would let a
/// reader (or a crash) see an entry whose bytes do not exist (I2), and GC would not know to keep
/// an object nothing on disk yet is.
pub fn check_object_published(unit: &str, object: &ObjectMeta, found_size: Option<u64>) -> Check {
    match found_size {
        Some(size) if size == object.size => Ok(()),
        Some(size) => violated(
            Invariant::ObjectBeforeRow,
            format!(
                "unit {unit:?} references object {} of {} bytes; the file has {size}",
                object.id, object.size
            ),
        ),
        None => violated(
            Invariant::ObjectBeforeRow,
            format!(
                "unit {unit:?} references object {}, which is not published",
                object.id
            ),
        ),
    }
}

/// L7: a fencing `token` of `unit` against the store's `next_token`. Why: the next grant takes
/// `next_token`; a stored token at or above it would be issued again, and two leases with one
/// token cannot be told apart by the fence.
pub fn check_token_below_next(unit: &str, token: u64, next_token: u64) -> Check {
    if token >= next_token {
        return violated(
            Invariant::TokenBelowNext,
            format!("unit {unit:?} holds token {token}, but next_token is {next_token}"),
        );
    }
    Ok(())
}

/// L2: `next_seq` against the last key of the log. Why: the leader numbers the next record
/// `next_seq`; if it were at or below a key, a record would be overwritten, and if it were above
/// the last key + 1, the log would have a gap that replay and `changes_since` report as damage.
pub fn check_next_seq(next_seq: u64, last_log_key: Option<u64>) -> Check {
    let want = last_log_key.map_or(1, |k| k.saturating_add(1));
    if next_seq != want {
        return violated(
            Invariant::NextSeqFollowsLog,
            format!("next_seq is {next_seq}, the log's last key is {last_log_key:?}"),
        );
    }
    Ok(())
}

/// L1: a log record at `key`, carrying `record_seq`, after the record at `prev_key`. Why: the
/// log's order is the tie-breaker of every decision (SPEC R3); a record under another seq than
/// its own, or a gap, makes the log say something other than what was decided.
pub fn check_log_seq(prev_key: Option<u64>, key: u64, record_seq: u64) -> Check {
    if record_seq != key {
        return violated(
            Invariant::LogSeqIncreasing,
            format!("the log record at key {key} says it is seq {record_seq}"),
        );
    }
    match prev_key {
        Some(p) if key != p.saturating_add(1) => violated(
            Invariant::LogSeqIncreasing,
            format!("log key {key} follows {p}"),
        ),
        None if key == 0 => violated(
            Invariant::LogSeqIncreasing,
            "the log has a record at seq 0 (seqs start at 1)".into(),
        ),
        _ => Ok(()),
    }
}

/// L3: the history horizon moves from `before` to `after` in one group. Why: reads as of a seq
/// below the horizon are refused because their rows may be pruned; lowering it would serve them
/// again from a history that has lost rows.
pub fn check_horizon_rises(before: u64, after: u64) -> Check {
    if after < before {
        return violated(
            Invariant::HorizonOnlyRises,
            format!("the history horizon went down from {before} to {after}"),
        );
    }
    Ok(())
}

/// L4: the history horizon against `next_seq`. Why: a prune only removes rows superseded by a
/// commit that exists, so the horizon is at most the newest seq + 1; beyond it, future reads as of
/// seqs not yet written would be refused.
pub fn check_horizon_within_log(history_from: u64, next_seq: u64) -> Check {
    if history_from > next_seq {
        return violated(
            Invariant::HorizonWithinLog,
            format!("the history horizon {history_from} is past next_seq {next_seq}"),
        );
    }
    Ok(())
}

/// I7: the problems replaying the log against the manifest found (`ReplayReport::problems`), as
/// violations.
pub fn check_replay(problems: &[String]) -> Vec<Violation> {
    problems
        .iter()
        .map(|p| Violation {
            invariant: Invariant::ReplayReproduces,
            seen: p.clone(),
        })
        .collect()
}

/// I6 from the commit log alone, fed one record at a time in log order: replaying the claim
/// records, every commit entry that carries a token carries its unit's newest token of a lease
/// that has not ended, and every entry without one was committed when no lease on its unit was
/// live (by the record's own time). Independent of the claims table, so a leader that decided
/// from a wrong claim row is caught by what it logged.
///
/// A fenced extension record (pipelines) may end a lease without naming its unit in the log: a
/// lease granted before such a record is only held to "the token is the newest" from then on.
#[derive(Debug, Default)]
pub struct FencingLog {
    /// Each unit's newest lease as the log tells it, rebuilt as the record the claims table would
    /// hold (so the replay and the leader judge the same shape), with the number of extension
    /// records seen when it was granted (or renewed).
    leases: HashMap<String, (ClaimRecord, u64)>,
    /// Extension records seen so far.
    extensions: u64,
}

impl FencingLog {
    /// An empty replay (before seq 1).
    pub fn new() -> Self {
        Self::default()
    }

    /// Replays `rec`; returns what it violates.
    pub fn record(&mut self, rec: &Record) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut bad = |seen: String| {
            out.push(Violation {
                invariant: Invariant::NoStaleToken,
                seen,
            })
        };
        match &rec.body {
            RecordBody::ClaimGranted(c) => {
                let lease = (ClaimRecord::granted(c), self.extensions);
                self.leases.insert(c.unit.clone(), lease);
            }
            RecordBody::ClaimReleased(c) => match self.leases.get_mut(&c.unit) {
                None => bad(format!(
                    "seq {}: {:?} releases token {}, never granted",
                    rec.seq, c.unit, c.token
                )),
                Some((l, _)) if l.token != c.token || l.released => bad(format!(
                    "seq {}: {:?} releases token {}; newest {}, ended {}",
                    rec.seq, c.unit, c.token, l.token, l.released
                )),
                Some((l, _)) => l.released = true,
            },
            RecordBody::Commit { entries } => {
                for e in entries {
                    let lease = self.leases.get_mut(&e.unit);
                    let seen = fenced_commit(
                        rec,
                        e,
                        lease.as_deref().map(|(l, x)| (l, *x)),
                        self.extensions,
                    );
                    if let Some(seen) = seen {
                        bad(seen);
                    }
                    // A commit ends the lease (as the leader's `end_lease` does), unless its
                    // holder already released it.
                    if let Some((l, _)) = lease.filter(|(l, _)| !l.released) {
                        l.released = true;
                        l.by_commit = true;
                    }
                }
            }
            RecordBody::Extension { .. } => self.extensions += 1,
        }
        out
    }
}

/// What is wrong with commit entry `e` of `rec` under the logged `lease` (with the extension
/// count at its grant), if anything.
fn fenced_commit(
    rec: &Record,
    e: &crate::schema::log::LogEntry,
    lease: Option<(&ClaimRecord, u64)>,
    extensions: u64,
) -> Option<String> {
    let (seq, unit) = (rec.seq, &e.unit);
    // Whether an extension logged since the grant may have ended the lease.
    let known = lease.is_some_and(|(_, granted_at)| granted_at == extensions);
    match (e.token, lease.map(|(l, _)| l)) {
        (Some(t), Some(l)) if t != l.token => Some(format!(
            "seq {seq} committed {unit:?} with token {t}; its newest is {}",
            l.token
        )),
        (Some(t), Some(l)) if l.released && known => Some(format!(
            "seq {seq} committed {unit:?} with token {t} of a lease that has ended"
        )),
        (Some(t), None) => Some(format!(
            "seq {seq} committed {unit:?} with token {t}, never issued for it"
        )),
        // By the record's own time: what the leader's clock said when it decided.
        (None, Some(l)) if known && l.is_live(rec.time_ms) => Some(format!(
            "seq {seq} committed {unit:?} without a token under the live lease of token {}",
            l.token
        )),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The commit leader's checks, on what its group touched (debug builds).

/// I6 and I5 for one unit the leader is about to apply: `token` against the unit's newest lease
/// as the decision read it at `now_ms`, and the move from its current entry `prev` to `next` (each
/// `(source version, revision)`).
// The leader calls this in debug builds only.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) fn check_accept(
    unit: &str,
    token: Option<u64>,
    lease: Option<&ClaimRecord>,
    now_ms: u64,
    prev: Option<(u64, u32)>,
    next: (u64, u32),
) -> Vec<Violation> {
    [
        check_token_admitted(unit, token, lease, now_ms),
        check_version_advance(unit, prev, next),
    ]
    .into_iter()
    .filter_map(|c| c.err())
    .collect()
}

/// The leader's hook for [`check_accept`], on the rows its decision read: `claim` (the unit's
/// lease record, seen at `now_ms`) and `prev` (its entry's version and revision). Panics on a
/// violation.
// The leader calls this in debug builds only.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) fn assert_accept(
    unit: &str,
    token: Option<u64>,
    claim: Option<&ClaimRecord>,
    now_ms: u64,
    prev: Option<(u64, u32)>,
    next: (u64, u32),
) {
    assert_holds(&check_accept(unit, token, claim, now_ms, prev, next));
}

/// The leader's hook for [`check_group_bound`], on the group it took. Panics on a violation.
// The leader calls this in debug builds only.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) fn assert_group_bound<W: super::queue::Weighted>(group: &[W], max: usize) {
    let weights: Vec<usize> = group.iter().map(W::weight).collect();
    assert_ok(check_group_bound(&weights, max));
}

/// The applier's hook for [`check_group`], in its write transaction before the commit: `before`
/// as read when the transaction began, the counters now in `meta`. Panics on a violation.
///
/// L6 is not checked here but where the group is decided ([`assert_objects_published`]): a
/// group is applied long after its rows became visible (from the backlog, to snapshots), and an
/// object damaged from outside in between is the damage `verify` reports, not an engine bug.
// The applier calls this in debug builds only.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) fn assert_group(
    log: &impl ReadableTable<u64, &'static [u8]>,
    before: Counters,
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<()> {
    let after = Counters::read(meta)?;
    assert_holds(&check_group(log, before, after)?);
    Ok(())
}

/// L6 for every entry a commit record commits, its object found on disk with
/// `object_size(object)` (`None`: not found); nothing for other records.
// The leader calls this in debug builds only.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) fn check_objects_published(
    rec: &Record,
    object_size: &dyn Fn(&ObjectMeta) -> Option<u64>,
) -> Vec<Violation> {
    match &rec.body {
        RecordBody::Commit { entries } => entries
            .iter()
            .filter_map(|e| {
                check_object_published(&e.unit, &e.object, object_size(&e.object)).err()
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The leader's hook for L6 ([`check_object_published`]) on a decided group, before it is made
/// durable and visible: every object its commit records reference is published with its size,
/// looked up through the store's [`Vfs`](crate::vfs::Vfs) (a lookup that fails for another
/// reason than "not found" cannot tell, and passes). Panics on a violation.
// The leader calls this in debug builds only.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) fn assert_objects_published(
    inner: &crate::core::Core,
    group: &crate::wal::redo::GroupRedo,
) -> Result<()> {
    let size = |m: &ObjectMeta| {
        let path = inner.stager.object_path(&m.id);
        match inner.stager.vfs.metadata(&path) {
            Ok(md) => Some(md.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => Some(m.size),
        }
    };
    let mut out = Vec::new();
    for (_, bytes) in group.log_rows()? {
        out.extend(check_objects_published(&Record::decode(bytes)?, &size));
    }
    assert_holds(&out);
    Ok(())
}

/// The counters of the meta table, before or after a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counters {
    pub next_seq: u64,
    pub next_token: u64,
    pub history_from: u64,
}

impl Counters {
    /// Reads them from the meta table.
    pub(crate) fn read(meta: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<Self> {
        use crate::schema::meta::{get, HISTORY_FROM, NEXT_SEQ, NEXT_TOKEN};
        Ok(Counters {
            next_seq: get(meta, NEXT_SEQ)?,
            next_token: get(meta, NEXT_TOKEN)?,
            history_from: get(meta, HISTORY_FROM)?,
        })
    }
}

/// The per-group checks, run by the applier on its write transaction before it commits, reading
/// only what the groups touched: the log records they appended (L1, L2, L7) and the counters
/// they moved (L2, L3, L4, L7). L6 is checked where a group is decided
/// ([`check_objects_published`]).
// The applier calls this in debug builds only.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) fn check_group(
    log: &impl ReadableTable<u64, &'static [u8]>,
    before: Counters,
    after: Counters,
) -> Result<Vec<Violation>> {
    let mut out = Vec::new();
    let mut note = |c: Check| out.extend(c.err());
    let prior = log
        .range(..before.next_seq)
        .db("read the commit log")?
        .next_back()
        .transpose()
        .db("read the commit log")?
        .map(|(k, _)| k.value());
    note(check_next_seq(before.next_seq, prior));
    let mut prev = prior;
    for row in log.range(before.next_seq..).db("read the commit log")? {
        let (k, v) = row.db("read the commit log")?;
        let rec = match Record::decode(v.value()) {
            Ok(rec) => rec,
            Err(e) => {
                note(violated(
                    Invariant::Checksummed,
                    format!("the record the group wrote at {}: {e}", k.value()),
                ));
                continue;
            }
        };
        note(check_log_seq(prev, k.value(), rec.seq));
        prev = Some(k.value());
        for (unit, token) in record_tokens(&rec) {
            note(check_token_below_next(unit, token, after.next_token));
        }
    }
    note(check_next_seq(after.next_seq, prev));
    note(check_horizon_rises(before.history_from, after.history_from));
    note(check_horizon_within_log(after.history_from, after.next_seq));
    if after.next_token < before.next_token {
        note(violated(
            Invariant::TokenBelowNext,
            format!(
                "next_token went down from {} to {}",
                before.next_token, after.next_token
            ),
        ));
    }
    Ok(out)
}

/// The (unit, token) pairs a record carries.
fn record_tokens(rec: &Record) -> Vec<(&str, u64)> {
    match &rec.body {
        RecordBody::ClaimGranted(c) | RecordBody::ClaimReleased(c) => {
            vec![(c.unit.as_str(), c.token)]
        }
        RecordBody::Commit { entries } => entries
            .iter()
            .filter_map(|e| e.token.map(|t| (e.unit.as_str(), t)))
            .collect(),
        RecordBody::Extension { .. } => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Whole-store checks, for verify and the model tests.

/// I1 and I5 for one unit: its current entry `current` (`None`: the manifest has none) against
/// its history rows `rows`, oldest first. The history holds the entries the current one replaced
/// (format 4), so every row is older than the current entry; only a store upgraded from format 3
/// may also hold a copy of the current entry as its newest row, which must then be identical (a
/// row newer than the current entry would be a second current entry). A unit with history has
/// a current entry (there is no delete); along the rows and on to the current entry the version
/// never goes back (pruning only removes rows, so revisions may skip but never fall).
pub(crate) fn check_unit_rows(
    unit: &str,
    current: Option<&EntryValue>,
    rows: &[(u64, EntryValue)],
) -> Vec<Violation> {
    let mut out = Vec::new();
    let one = |seen: String| Violation {
        invariant: Invariant::OneCurrentEntry,
        seen,
    };
    match (current, rows.last()) {
        (Some(c), Some((seq, newest))) if *seq > c.seq || (*seq == c.seq && newest != c) => out
            .push(one(format!(
                "unit {unit:?}: the manifest has seq {}, the newest history row is seq {seq}{}",
                c.seq,
                if *seq == c.seq {
                    " with other values"
                } else {
                    ""
                }
            ))),
        (None, Some((seq, _))) => out.push(one(format!(
            "unit {unit:?} has history up to seq {seq} but no current entry"
        ))),
        _ => {}
    }
    let mut chain: Vec<&EntryValue> = rows.iter().map(|(_, v)| v).collect();
    if let Some(c) = current {
        if rows.last().is_none_or(|(seq, _)| *seq < c.seq) {
            chain.push(c);
        }
    }
    for pair in chain.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        out.extend(
            check_version_advance(
                unit,
                Some((a.source_version, a.revision)),
                (b.source_version, b.revision),
            )
            .err(),
        );
    }
    out
}

/// Every whole-store check that reads the state as of `txn`: L2 and L4 on the counters, L1, L7,
/// I6 and I9 over the log, L7 and I9 over the claims, and I1 and I5 over the manifest and the
/// history. Damage that stops a row from decoding is reported as an I9 violation, not an error:
/// the check goes on with the rest. (I2 is the object pass of `verify`; I7 is [`check_replay`].)
pub(crate) fn check_state(txn: &redb::ReadTransaction) -> Result<Vec<Violation>> {
    let meta = txn
        .open_table(crate::schema::META)
        .db("open the meta table")?;
    let counters = Counters::read(&meta)?;
    let mut out = check_log(txn, counters)?;
    out.extend(check_horizon_within_log(counters.history_from, counters.next_seq).err());
    out.extend(check_claims(txn, counters.next_token)?);
    out.extend(check_entries(txn)?);
    Ok(out)
}

fn damaged(what: String) -> Violation {
    Violation {
        invariant: Invariant::Checksummed,
        seen: what,
    }
}

/// L1, L2, L7, I6 and I9 over the whole log.
fn check_log(txn: &redb::ReadTransaction, counters: Counters) -> Result<Vec<Violation>> {
    let log = txn
        .open_table(crate::schema::LOG)
        .db("open the commit log")?;
    let mut out = Vec::new();
    let mut fencing = FencingLog::new();
    let mut prev = None;
    for row in log.iter().db("scan the commit log")? {
        let (k, v) = row.db("scan the commit log")?;
        let key = k.value();
        match Record::decode(v.value()) {
            Ok(rec) => {
                out.extend(check_log_seq(prev, key, rec.seq).err());
                for (unit, token) in record_tokens(&rec) {
                    out.extend(check_token_below_next(unit, token, counters.next_token).err());
                }
                out.extend(fencing.record(&rec));
            }
            Err(e) => out.push(damaged(format!("log record {key}: {e}"))),
        }
        prev = Some(key);
    }
    out.extend(check_next_seq(counters.next_seq, prev).err());
    Ok(out)
}

/// L7 and I9 over the claims table.
fn check_claims(txn: &redb::ReadTransaction, next_token: u64) -> Result<Vec<Violation>> {
    let claims = txn
        .open_table(crate::schema::CLAIMS)
        .db("open the claims")?;
    let mut out = Vec::new();
    for row in claims.iter().db("scan the claims")? {
        let (k, v) = row.db("scan the claims")?;
        match ClaimRecord::decode(k.value(), v.value()) {
            Ok(rec) => out.extend(check_token_below_next(k.value(), rec.token, next_token).err()),
            Err(e) => out.push(damaged(format!("claim of {:?}: {e}", k.value()))),
        }
    }
    Ok(out)
}

/// I1, I5 and I9 over the manifest and the history: one ordered pass over both side by side,
/// unit by unit, each unit's history rows against its manifest row.
fn check_entries(txn: &redb::ReadTransaction) -> Result<Vec<Violation>> {
    use crate::schema::{HISTORY, MANIFEST};
    let manifest = txn.open_table(MANIFEST).db("open the manifest")?;
    let history = txn.open_table(HISTORY).db("open the history")?;
    let mut out = Vec::new();
    let mut rows = history.iter().db("scan the history")?.peekable();
    // The next unit of the history and its rows that decode (the others are reported).
    let mut next_unit = |out: &mut Vec<Violation>| -> Result<Option<UnitRows>> {
        let unit = match rows.peek() {
            None => return Ok(None),
            Some(Ok((k, _))) => k.value().0.to_string(),
            Some(Err(_)) => String::new(),
        };
        let mut found = Vec::new();
        while let Some(row) = rows.next_if(|r| r.as_ref().is_ok_and(|(k, _)| k.value().0 == unit)) {
            let (k, v) = row.db("scan the history")?;
            let seq = k.value().1;
            match EntryValue::decode_history(&unit, seq, v.value()) {
                Ok(e) => found.push((seq, e)),
                Err(e) => out.push(damaged(format!("history row ({unit:?}, {seq}): {e}"))),
            }
        }
        if let Some(Err(_)) = rows.peek() {
            if let Some(row) = rows.next() {
                row.db("scan the history")?;
            }
        }
        Ok(Some((unit, found)))
    };
    let mut pending = next_unit(&mut out)?;
    for row in manifest.iter().db("scan the manifest")? {
        let (k, v) = row.db("scan the manifest")?;
        let unit = k.value();
        let current = match EntryValue::decode(unit, v.value()) {
            Ok(v) => Some(v),
            Err(e) => {
                out.push(damaged(format!("manifest row of {unit:?}: {e}")));
                None
            }
        };
        // Units of the history before this one have no current entry.
        while let Some((u, r)) = pending.take_if(|(u, _)| u.as_str() < unit) {
            out.extend(check_unit_rows(&u, None, &r));
            pending = next_unit(&mut out)?;
        }
        let mine = match pending.take_if(|(u, _)| u == unit) {
            Some((_, r)) => {
                pending = next_unit(&mut out)?;
                r
            }
            None => Vec::new(),
        };
        out.extend(check_unit_rows(unit, current.as_ref(), &mine));
    }
    while let Some((u, r)) = pending.take() {
        out.extend(check_unit_rows(&u, None, &r));
        pending = next_unit(&mut out)?;
    }
    Ok(out)
}

/// A unit and its history rows `(seq, entry)`, oldest first.
type UnitRows = (String, Vec<(u64, EntryValue)>);

#[cfg(test)]
mod tests;
