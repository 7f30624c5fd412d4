//! The commit leader's work: decide every operation of a group in log order from the leader's
//! view (`commit::view`: the overlay of decided, unapplied rows, the dedup index, the applied
//! B-trees), record every row it writes as the group's redo, make the group durable with one sync
//! — in the durable mode the synced append of its write-ahead record ([`crate::wal::redo`]) —
//! queue it on the backlog ([`crate::wal::backlog`]) for the B-trees; only then does
//! [`crate::commit::group`] publish the results (dedup index, metrics) and answer the writers. Groups the log does not carry (a flush, a
//! prune, a bulk load, the relaxed mode) are applied in place on a drained backlog instead.
//! [`apply_groups`] is the applier's transaction for both.
//!
//! Every row a group writes goes into the view at once, so an operation sees the effects of the
//! ones before it in the same group: two writers of the same unit in one group are decided exactly
//! as if they had committed one after the other. The order of the commit log is the tie-breaker.

use crate::claim::{ClaimOutcome, Lease, ReleaseOutcome, RenewOutcome};
use crate::commit::queue::{LeaderPanicked, Weighted};
use crate::commit::rules::{self, Decision, Incoming, LeaseCheck, LeaseStatus};
use crate::commit::view::{Current, View};
use crate::commit::{Atomicity, Batch, BatchItem, CommitReport, Outcome, UnitOutcome};
use crate::core::{Core, Durability};
use crate::error::{DbContext, Error, Result};
use crate::metrics::add;
use crate::schema::claim::ClaimRecord;
use crate::schema::extension;
use crate::schema::log::{LogEntry, Record, RecordBody};
use crate::schema::manifest::EntryValue;
use crate::schema::meta::{self, COUNTERS, HISTORY_FROM, NEXT_SEQ, NEXT_TOKEN, WAL_GROUP};
use crate::wal::overlay::LeaderState;
use crate::wal::redo::{GroupRedo as Pending, Redo, MAX_RECORD};
use std::sync::atomic::Ordering;

/// One request in the write queue. Cloned by a lake node, which may decide a group again.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Commit(Batch),
    Claim {
        unit: String,
        source_version: u64,
        worker: String,
        ttl_ms: u64,
    },
    /// Claims for many units by one worker, decided one after the other in one transaction
    /// exactly as that many [`Op::Claim`]s in a row would be.
    ClaimMany {
        units: Vec<(String, u64)>,
        worker: String,
        ttl_ms: u64,
    },
    Renew {
        lease: Lease,
        ttl_ms: u64,
    },
    Release {
        lease: Lease,
    },
    /// A synced, empty transaction: makes relaxed-mode commits durable.
    Flush,
    /// Garbage collection's history pruning (SPEC R14): delete the HISTORY rows superseded before
    /// `cutoff_ms` and advance the `history_from` horizon past them. Runs in the leader so it
    /// serialises with commits, and is always synced: GC deletes objects on the strength of it, so
    /// it must not be lost in a crash while the deletions survive. Rows an open snapshot reads,
    /// or a snapshot begun while the prune is written may read, are kept (`ReaderPins`).
    Prune {
        cutoff_ms: u64,
    },
    /// A higher layer's state change (pipelines): one `RecordBody::Extension` log record plus
    /// `EXTENSIONS[key] = seq ++ data`, in the same transaction. With a [`Fence`] it obeys the
    /// lease rules of a commit of `fence.unit` (fenced, busy) and, when written, ends that unit's
    /// lease as a commit does.
    Extension {
        tag: u16,
        key: String,
        data: Vec<u8>,
        fence: Option<Fence>,
    },
}

/// The unit whose lease an [`Op::Extension`] is written under, and the token it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fence {
    pub unit: String,
    pub token: Option<u64>,
}

/// The answer to an [`Op::Extension`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExtensionOutcome {
    /// Logged and stored at this seq.
    Written { seq: u64 },
    /// The fence's token is not valid for its unit; nothing was written.
    Fenced { token: u64, newest_token: u64 },
    /// The fence carries no token and `worker` holds a live lease on its unit; nothing was written.
    Busy { worker: String, expires_at_ms: u64 },
}

/// The answer to one [`Op`].
#[derive(Debug)]
pub(crate) enum Done {
    Commit(CommitReport),
    Claim(ClaimOutcome),
    /// One outcome per unit of an [`Op::ClaimMany`], in its order.
    ClaimMany(Vec<ClaimOutcome>),
    Renew(RenewOutcome),
    Release(ReleaseOutcome),
    Flushed,
    /// History rows removed by a prune.
    Pruned {
        rows: u64,
    },
    Extension(ExtensionOutcome),
}

impl Op {
    /// Refuses, before it reaches the queue, an extension whose log record would exceed
    /// [`crate::schema::log::MAX_RECORD_PAYLOAD`] (commits are checked by `Batch::validate`).
    pub(crate) fn check_record_size(&self) -> Result<()> {
        match self {
            Op::Extension { data, .. }
                if crate::schema::log::extension_payload_len(data.len())
                    > crate::schema::log::MAX_RECORD_PAYLOAD =>
            {
                Err(Error::InvalidRequest(format!(
                    "an extension record of {} bytes is over the log's limit of {} bytes",
                    data.len(),
                    crate::schema::log::MAX_RECORD_PAYLOAD
                )))
            }
            _ => Ok(()),
        }
    }
}

impl Weighted for Op {
    fn weight(&self) -> usize {
        match self {
            Op::Commit(b) => b.len(),
            // A batched claim writes one claim record (and log record) per unit.
            Op::ClaimMany { units, .. } => units.len().max(1),
            _ => 1,
        }
    }
}

impl LeaderPanicked for Result<Done> {
    fn leader_panicked() -> Self {
        Err(Error::LeaderPanicked)
    }
}

/// One group being decided: the leader's view of the store (overlay, index, applied state), the
/// counters the group advances, and the rows it writes, recorded as its redo.
struct Writer<'v> {
    view: View<'v>,
    core: &'v Core,
    /// The group's number.
    group: u64,
    next_seq: u64,
    next_token: u64,
    now_ms: u64,
    /// The history horizon a prune in this group moved to, if any.
    history_from: Option<u64>,
    /// Index updates to publish once the group is durable: (unit, was new, value).
    index: Vec<(String, bool, EntryValue)>,
    /// Leases found expired (not released) when their unit was claimed again, by anyone.
    expired_leases: u64,
    /// Every row the group writes, with its exact bytes: what the write-ahead log records and
    /// what is applied to the B-trees.
    redo: Redo,
    /// A prune's decision (the seq it keeps views from), held until the group is durable.
    prune_guard: Option<(u64, crate::core::PruneGuard)>,
}

/// One item of a batch, decided.
struct Decided {
    decision: Decision,
    current: Option<Current>,
    claim: Option<ClaimRecord>,
}

/// The group's answers, its index updates, and its counts (persisted with it).
pub(super) type GroupResult = (
    Vec<Done>,
    Vec<(String, bool, EntryValue)>,
    crate::metrics::Counters,
);

/// How a group reaches the B-trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Path {
    /// Durable by its write-ahead record; applied later, from the backlog.
    Logged,
    /// Applied by the leader itself, after the backlog is drained, in a transaction that is
    /// synced (`true`: a checkpoint) or not (relaxed mode between its syncs).
    InPlace(bool),
}

/// Decides and writes a group on a store of its own (not a lake node): durable by its
/// write-ahead record, or applied in place ([`Path`]).
pub(super) fn write_group(inner: &Core, ops: Vec<Op>) -> Result<GroupResult> {
    let now_ms = inner.options.clock.now_ms();
    let flush_or_prune = ops
        .iter()
        .any(|o| matches!(o, Op::Flush | Op::Prune { .. }));
    // A flush or a prune must be durable in the database itself (GC deletes objects on the
    // strength of a prune), and relaxed mode writes no log: those groups are applied in place.
    let path = match (inner.options.durability, &inner.wal) {
        (Durability::Durable, Some(_)) if !flush_or_prune => Path::Logged,
        (Durability::Durable, _) => Path::InPlace(true),
        (Durability::Relaxed { max_delay }, _) => {
            let last = inner.last_durable_ms.load(Ordering::Relaxed);
            Path::InPlace(
                flush_or_prune
                    || now_ms.saturating_sub(last) >= max_delay.as_millis() as u64
                    || now_ms < last,
            )
        }
    };
    match path {
        // A prune plans from the applied history, and a checkpoint covers everything before it.
        Path::InPlace(_) => inner.drain()?,
        Path::Logged => inner.make_room()?,
    }
    let decided = decide_group(inner, ops, now_ms, path)?;
    let Some(pending) = decided.pending else {
        return Ok(decided.result);
    };
    match (path, inner.wal.as_ref()) {
        // Durable before anyone can see it: readers see a group only once it is in the backlog
        // (their snapshots read its redo there, `tail`), and it is pushed there only after this
        // append synced (I3).
        (Path::Logged, Some(wal)) if pending.len() <= MAX_RECORD => {
            // Readers look the group's keys up in the backlog's index from its push on.
            pending.parse_for_readers()?;
            wal.append(pending.number(), &pending.frame(), wal_sync(inner))?;
            inner.backlog.push(pending);
        }
        // A group this large (a bulk load) gains nothing from the log: it is a checkpoint.
        (Path::Logged, _) => {
            inner.drain()?;
            inner.apply_in_place(&pending, true)?;
        }
        (Path::InPlace(synced), _) => inner.apply_in_place(&pending, synced)?,
    }
    // A read begun from now on sees the group: a snapshot may pin its newest seq.
    inner.readers.publish(decided.newest);
    drop(decided.prune_guard);
    Ok(decided.result)
}

/// A group decided on the leader's state, not yet durable.
pub(super) struct DecidedGroup {
    /// What the caller answers once the group is durable (at once when it writes nothing).
    pub(super) result: GroupResult,
    /// Its redo, or `None` when it writes nothing (every answer is a duplicate or a refusal
    /// decided from durable rows, or a flush).
    pub(super) pending: Option<Pending>,
    /// The newest seq once it is applied.
    pub(super) newest: u64,
    /// A prune's decision, held until the group is durable.
    pub(super) prune_guard: Option<(u64, crate::core::PruneGuard)>,
}

/// Decides `ops`, oldest first, on the leader's state at `now_ms`, advancing the state (overlay,
/// counters, group number) as if the group were then made durable: a caller that cannot make it
/// durable must reload the state (a lake node that lost the race, `commit::lake`).
pub(super) fn decide_group(
    inner: &Core,
    ops: Vec<Op>,
    now_ms: u64,
    path: Path,
) -> Result<DecidedGroup> {
    let mut st = inner.leader.lock();
    let LeaderState {
        next_seq,
        next_token,
        history_from,
        counters,
        group: last_group,
        overlay,
    } = &mut *st;
    let group = *last_group + 1;
    let seq_before = next_seq.saturating_sub(1);
    let view = View::begin(overlay, inner)?;
    assert!(
        path == Path::Logged || view.overlay.is_empty(),
        "invariant: a group applied in place starts on a drained backlog"
    );
    let mut w = Writer {
        view,
        core: inner,
        group,
        next_seq: *next_seq,
        next_token: *next_token,
        now_ms,
        history_from: None,
        index: Vec::new(),
        expired_leases: 0,
        redo: Redo::default(),
        prune_guard: None,
    };
    let mut dones = Vec::with_capacity(ops.len());
    for op in ops {
        dones.push(w.apply(op)?);
    }
    // The group's counts go into its own rows (SPEC R16: never lost, never ahead).
    let counts = crate::metrics::Counters::default();
    record_metrics(&counts, &dones, w.index.len());
    add(&counts.claims_expired, w.expired_leases);
    *next_seq = w.next_seq;
    *next_token = w.next_token;
    let pruned = w.history_from.is_some();
    if let Some(h) = w.history_from {
        // The horizon only rises: a prune never makes readable again what was refused.
        *history_from = (*history_from).max(h);
    }
    meta::add_to_counters(counters, &counts, seq_before);
    let Writer {
        mut redo,
        index,
        prune_guard,
        ..
    } = w;
    let newest = next_seq.saturating_sub(1);
    // The group changes no row: every answer is a duplicate or a refusal, decided from rows that
    // are durable already (earlier groups' records synced before this group began). It writes no
    // record and takes no group number; its counts stay in the leader's counters and are written
    // with the next group that changes a row, or by the close (docs/commit.md, "A group that
    // changes nothing"). In place, only a lake node skips it (its flush has nothing to sync: the
    // lake is durable); a local store's in-place group is a sync.
    let lake = path == Path::InPlace(false) && lake_node(inner);
    let pending = if redo.is_empty() && !pruned && (path == Path::Logged || lake) {
        None
    } else {
        redo.meta(NEXT_SEQ, &meta::sealed_u64(NEXT_SEQ, *next_seq));
        redo.meta(NEXT_TOKEN, &meta::sealed_u64(NEXT_TOKEN, *next_token));
        redo.meta(HISTORY_FROM, &meta::sealed_u64(HISTORY_FROM, *history_from));
        if !counters.is_empty() {
            redo.meta(COUNTERS, &meta::sealed_counters(counters));
        }
        redo.meta(WAL_GROUP, &meta::sealed_u64(WAL_GROUP, group));
        *last_group = group;
        drop(st);
        let pending = Pending::new(group, redo, index.len());
        #[cfg(debug_assertions)]
        crate::commit::invariants::assert_objects_published(inner, &pending)?;
        Some(pending)
    };
    Ok(DecidedGroup {
        result: (dones, index, counts),
        pending,
        newest,
        prune_guard,
    })
}

/// Whether the store is a node of a shared lake.
fn lake_node(inner: &Core) -> bool {
    #[cfg(feature = "lake")]
    return inner.lake.is_some();
    #[cfg(not(feature = "lake"))]
    {
        let _ = inner;
        false
    }
}

/// Whether the write-ahead append syncs: always, but for a benchmark's floor (`Options::floor`).
fn wal_sync(inner: &Core) -> bool {
    #[cfg(feature = "testing")]
    return !inner.options.floor.skip_wal_sync;
    #[cfg(not(feature = "testing"))]
    {
        let _ = inner;
        true
    }
}

/// The core's [`crate::core::ApplyGroups`]: [`apply_groups`].
pub(crate) struct GroupWriter;

impl crate::core::ApplyGroups for GroupWriter {
    fn apply(&self, core: &Core, groups: &[Pending], synced: bool) -> Result<()> {
        // A benchmark's floor: the groups leave the backlog as if applied, the B-trees unwritten.
        #[cfg(feature = "testing")]
        if core.options.floor.skip_apply {
            return Ok(());
        }
        apply_groups(core, groups, synced)
    }
}

/// Writes decided groups to the B-trees in one transaction, synced when `synced` (a checkpoint).
/// In debug builds the group checks of `commit::invariants` run on the transaction before it
/// commits.
pub(crate) fn apply_groups(core: &Core, groups: &[Pending], synced: bool) -> Result<()> {
    // Every caller checked already; the B-trees must not be written from a forked child.
    core.owner.check(&core.dir)?;
    let mut txn = core.db.begin_write()?;
    txn.set_durability(if synced {
        redb::Durability::Immediate
    } else {
        redb::Durability::None
    })
    .db("set the durability")?;
    #[cfg(debug_assertions)]
    let before = crate::commit::invariants::Counters::read(
        &txn.open_table(crate::schema::META)
            .db("open the meta table")?,
    )?;
    crate::wal::redo::apply_groups(&txn, &core.dir.join(crate::layout::DB_FILE), groups)?;
    #[cfg(debug_assertions)]
    crate::commit::invariants::assert_group(
        &txn.open_table(crate::schema::LOG).db("open the log")?,
        before,
        &txn.open_table(crate::schema::META)
            .db("open the meta table")?,
    )?;
    txn.commit().db("commit the group")
}

/// Units (and claims) answered by a group.
/// Counts a group's answers into `c` (a fresh set, persisted with the group).
fn record_metrics(c: &crate::metrics::Counters, dones: &[Done], units: usize) {
    add(&c.groups, 1);
    add(&c.units_committed, units as u64);
    for d in dones {
        match d {
            Done::Commit(r) => {
                if r.seq.is_some() {
                    add(&c.commits, 1);
                }
                let mut aborted = false;
                for u in &r.units {
                    match u.outcome {
                        Outcome::Duplicate { .. } => add(&c.duplicates_collapsed, 1),
                        Outcome::Conflict { .. } => add(&c.conflicts, 1),
                        Outcome::Stale { .. } => add(&c.stale_rejections, 1),
                        Outcome::Fenced { .. } => add(&c.fenced_rejections, 1),
                        Outcome::Busy { .. } => add(&c.busy_rejections, 1),
                        Outcome::Aborted => aborted = true,
                        Outcome::Committed { .. } => {}
                    }
                }
                if aborted {
                    add(&c.commits_aborted, 1);
                }
            }
            Done::Claim(outcome) => record_claim(c, outcome),
            Done::ClaimMany(outcomes) => outcomes.iter().for_each(|o| record_claim(c, o)),
            Done::Renew(RenewOutcome::Renewed(_)) => add(&c.claims_renewed, 1),
            Done::Release(ReleaseOutcome::Released) => add(&c.claims_released, 1),
            Done::Extension(ExtensionOutcome::Fenced { .. }) => add(&c.fenced_rejections, 1),
            Done::Extension(ExtensionOutcome::Busy { .. }) => add(&c.busy_rejections, 1),
            _ => {}
        }
    }
}

/// The counters of one claim's outcome; a batched claim counts each of its units this way.
fn record_claim(c: &crate::metrics::Counters, outcome: &ClaimOutcome) {
    match outcome {
        ClaimOutcome::Granted { took_over, .. } => {
            add(&c.claims_granted, 1);
            if *took_over {
                add(&c.claims_taken_over, 1);
            }
        }
        ClaimOutcome::Held { .. } => add(&c.claims_held, 1),
        ClaimOutcome::AlreadyDone(_) => add(&c.claims_already_done, 1),
    }
}

impl Writer<'_> {
    fn apply(&mut self, op: Op) -> Result<Done> {
        Ok(match op {
            Op::Commit(batch) => Done::Commit(self.commit(batch)?),
            Op::Claim {
                unit,
                source_version,
                worker,
                ttl_ms,
            } => Done::Claim(self.claim(unit, source_version, worker, ttl_ms)?),
            Op::ClaimMany {
                units,
                worker,
                ttl_ms,
            } => {
                let mut outcomes = Vec::with_capacity(units.len());
                for (unit, source_version) in units {
                    outcomes.push(self.claim(unit, source_version, worker.clone(), ttl_ms)?);
                }
                Done::ClaimMany(outcomes)
            }
            Op::Renew { lease, ttl_ms } => Done::Renew(self.renew(lease, ttl_ms)?),
            Op::Release { lease } => Done::Release(self.release(lease)?),
            Op::Flush => Done::Flushed,
            Op::Prune { cutoff_ms } => self.prune(cutoff_ms)?,
            Op::Extension {
                tag,
                key,
                data,
                fence,
            } => Done::Extension(self.extension(tag, &key, data, fence)?),
        })
    }

    fn extension(
        &mut self,
        tag: u16,
        key: &str,
        data: Vec<u8>,
        fence: Option<Fence>,
    ) -> Result<ExtensionOutcome> {
        if let Some(fence) = &fence {
            let claim = self.view.claim(&fence.unit)?;
            // The lease rules of a commit; an extension has no version to be a duplicate of, so
            // an ended lease's token is simply fenced.
            match rules::lease_check(claim.as_ref(), self.now_ms, fence.token) {
                LeaseCheck::Pass => {}
                LeaseCheck::Reject(Outcome::Busy { expires_at_ms }) => {
                    return Ok(ExtensionOutcome::Busy {
                        worker: claim.map(|r| r.worker).unwrap_or_default(),
                        expires_at_ms,
                    })
                }
                LeaseCheck::Reject(Outcome::Fenced {
                    token,
                    newest_token,
                }) => {
                    return Ok(ExtensionOutcome::Fenced {
                        token,
                        newest_token,
                    })
                }
                LeaseCheck::Reject(other) => unreachable!(
                    "invariant: the lease check rejects only as fenced or busy, got {other:?}"
                ),
                LeaseCheck::RetryOnly { token } => {
                    return Ok(ExtensionOutcome::Fenced {
                        token,
                        newest_token: token,
                    })
                }
            }
            self.end_lease(&fence.unit, claim)?;
        }
        let value = extension::encode(key, self.next_seq, &data);
        self.redo.extensions(key, &value);
        let seq = self.append(RecordBody::Extension { tag, data })?;
        Ok(ExtensionOutcome::Written { seq })
    }

    fn append(&mut self, body: RecordBody) -> Result<u64> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let rec = Record {
            seq,
            time_ms: self.now_ms,
            body,
        };
        self.redo.log(seq, &rec.encode());
        Ok(seq)
    }

    /// Decides one item of a batch against the leader's view: its decision, the unit's current
    /// entry and its newest lease record (read for every commit: with a token it must be that
    /// lease's, without one the lease must not be live).
    fn decide_item(&mut self, item: &BatchItem) -> Result<Decided> {
        let mut current = self.view.current(self.core, &item.unit)?;
        let claim = self.view.claim(&item.unit)?;
        let inc = Incoming {
            source_version: item.source_version,
            object: item.staged.id(),
            token: item.token,
            intent: item.intent,
        };
        // The revision decides only between two objects of the same version; the index does not
        // keep it, so only then is the full entry read.
        if let Some(c) = current.as_mut() {
            if c.full.is_none() && c.source_version == inc.source_version && c.object != inc.object
            {
                c.full = Some(self.view.full(&item.unit, c)?);
            }
        }
        let cur = current.map(|c| rules::Current {
            source_version: c.source_version,
            revision: c.full.map_or(0, |f| f.revision),
            object: c.object,
            seq: c.seq,
        });
        let mut lookup_err = None;
        let view = &mut self.view;
        let decision = rules::decide(cur.as_ref(), claim.as_ref(), self.now_ms, &inc, || {
            view.earlier_identical(&item.unit, inc.source_version, inc.object)
                .unwrap_or_else(|e| {
                    lookup_err = Some(e);
                    None
                })
        });
        match lookup_err {
            Some(e) => Err(e),
            None => Ok(Decided {
                decision,
                current,
                claim,
            }),
        }
    }

    fn commit(&mut self, batch: Batch) -> Result<CommitReport> {
        let mut decided = Vec::with_capacity(batch.items.len());
        for item in &batch.items {
            decided.push(self.decide_item(item)?);
        }
        let rejected = decided.iter().any(|d| !d.decision.is_acceptable());
        let applies = !(rejected && batch.atomicity == Atomicity::AllOrNothing);
        let any_accept = decided
            .iter()
            .any(|d| matches!(d.decision, Decision::Accept { .. }));
        let seq = (applies && any_accept).then_some(self.next_seq);

        let mut units = Vec::with_capacity(decided.len());
        let mut logged = Vec::new();
        for (item, d) in batch.items.iter().zip(decided) {
            let holder = match d.decision {
                Decision::Unchanged(Outcome::Busy { .. }) => {
                    d.claim.as_ref().map(|r| r.worker.clone())
                }
                _ => None,
            };
            if let (Decision::Accept { revision }, Some(seq)) = (d.decision, seq) {
                #[cfg(debug_assertions)]
                crate::commit::invariants::assert_accept(
                    &item.unit,
                    item.token,
                    d.claim.as_ref(),
                    self.now_ms,
                    d.current
                        .map(|c| (c.source_version, c.full.map_or(0, |f| f.revision))),
                    (item.source_version, revision),
                );
                logged.push(self.write_entry(item, revision, seq, d.current.is_none())?);
                // Accepted means the token was the newest lease's, or there was no token and no
                // live lease: either way that lease is over, and no earlier token commits after.
                self.end_lease(&item.unit, d.claim)?;
            }
            units.push(UnitOutcome {
                unit: item.unit.clone(),
                source_version: item.source_version,
                object: item.staged.id(),
                outcome: d.decision.outcome(seq, d.current.map(|c| c.source_version)),
                holder,
            });
        }
        if let Some(seq) = seq {
            let written = self.append(RecordBody::Commit { entries: logged })?;
            debug_assert_eq!(
                written, seq,
                "the commit's seq is the seq of its log record"
            );
        }
        Ok(CommitReport { seq, units })
    }

    /// Writes an accepted item's manifest row at `seq`; returns its log entry.
    fn write_entry(
        &mut self,
        item: &BatchItem,
        revision: u32,
        seq: u64,
        new_unit: bool,
    ) -> Result<LogEntry> {
        let meta = item.staged.meta();
        let value = EntryValue {
            source_version: item.source_version,
            revision,
            object: meta,
            seq,
            committed_at_ms: self.now_ms,
        };
        // No history row: the entry this one replaces becomes one when the group is applied
        // (`wal::redo`), and this entry when it is replaced in turn.
        self.redo.manifest(&item.unit, &value.encode(&item.unit));
        self.view.overlay.put_entry(self.group, &item.unit, value);
        self.index.push((item.unit.clone(), new_unit, value));
        Ok(LogEntry {
            unit: item.unit.clone(),
            source_version: item.source_version,
            revision,
            object: meta,
            token: item.token,
        })
    }

    /// Deletes the history rows superseded before `cutoff_ms` (see [`crate::schema::manifest::plan_prune`]) and
    /// moves the horizon so that no read as of a seq whose view lost a row is served.
    fn prune(&mut self, cutoff_ms: u64) -> Result<Done> {
        // Decided here, on the drained backlog, and held until the group is durable: a snapshot
        // registered from now on reads as of `keep_for_seq` or later (`ReaderPins`).
        // A second prune in the same group (two GCs at once) keeps what the first decided.
        let keep_for_seq = match &self.prune_guard {
            Some((keep, _)) => *keep,
            None => {
                let (keep, guard) = self.core.readers.begin_prune();
                self.prune_guard = Some((keep, guard));
                keep
            }
        };
        let keep_for_seq = Some(keep_for_seq);
        // A prune's group is applied in place on a drained backlog, so the applied history is
        // the whole history (but for rows this very group added, which it keeps: pruning less
        // is always safe).
        let (history, manifest) = self.view.history_and_manifest()?;
        let plan = crate::schema::manifest::plan_prune(history, manifest, cutoff_ms, keep_for_seq)?;
        for (unit, seq) in &plan.rows {
            self.redo.history_removed(unit, *seq);
        }
        // write_group stores the highest horizon of the group, never lowering the stored one.
        self.history_from = Some(plan.horizon.max(self.history_from.unwrap_or(0)));
        Ok(Done::Pruned {
            rows: plan.rows.len() as u64,
        })
    }

    /// An applied commit (or fenced extension) of `unit` ends the unit's newest lease, `claim` as
    /// read for the decision: the work is done, and no earlier token may commit after it. The
    /// record stays, marked ended, so that its token keeps being recognised and fenced.
    fn end_lease(&mut self, unit: &str, claim: Option<ClaimRecord>) -> Result<()> {
        let Some(mut rec) = claim.filter(|r| !r.released) else {
            return Ok(());
        };
        if rec.status(self.now_ms) == LeaseStatus::Expired {
            self.expired_leases += 1;
        }
        rec.released = true;
        rec.by_commit = true;
        self.redo.claims(unit, &rec.encode(unit));
        self.view.overlay.put_claim(self.group, unit, rec);
        Ok(())
    }

    fn claim(
        &mut self,
        unit: String,
        source_version: u64,
        worker: String,
        ttl_ms: u64,
    ) -> Result<ClaimOutcome> {
        if let Some(cur) = self.view.current(self.core, &unit)? {
            if cur.source_version >= source_version {
                let full = self.view.full(&unit, &cur)?;
                return Ok(ClaimOutcome::AlreadyDone(full.into_entry(&unit)));
            }
        }
        let existing = self.view.claim(&unit)?;
        let mut took_over = false;
        if let Some(rec) = &existing {
            if rec.is_live(self.now_ms) {
                if rec.worker != worker {
                    return Ok(ClaimOutcome::Held {
                        worker: rec.worker.clone(),
                        expires_at_ms: rec.expires_at_ms,
                    });
                }
                if rec.source_version == source_version {
                    // The holder asks again for the same work: extend, keep the token.
                    let rec = ClaimRecord {
                        expires_at_ms: self.now_ms.saturating_add(ttl_ms),
                        ..rec.clone()
                    };
                    self.write_claim(&unit, &rec, true)?;
                    return Ok(ClaimOutcome::Granted {
                        lease: rec.lease(&unit),
                        took_over: false,
                    });
                }
                // The holder moved on to another version: a fresh grant supersedes its own lease.
            } else if !rec.released {
                self.expired_leases += 1;
                took_over = rec.worker != worker;
            }
        }
        let token = self.next_token;
        // Tokens rise on every grant (I5); a stored one at or above the next to grant can only
        // come from damage (the claims row or meta's counter), so it is refused, not granted (I9).
        if let Some(r) = existing.as_ref().filter(|r| r.token >= token) {
            return Err(Error::corrupt_record(
                "claims",
                &unit,
                format!(
                    "its fencing token {} is not below the next token to grant ({token})",
                    r.token
                ),
            ));
        }
        self.next_token += 1;
        let rec = ClaimRecord {
            worker,
            token,
            source_version,
            expires_at_ms: self.now_ms.saturating_add(ttl_ms),
            released: false,
            by_commit: false,
        };
        self.write_claim(&unit, &rec, true)?;
        Ok(ClaimOutcome::Granted {
            lease: rec.lease(&unit),
            took_over,
        })
    }

    fn write_claim(&mut self, unit: &str, rec: &ClaimRecord, granted: bool) -> Result<()> {
        self.redo.claims(unit, &rec.encode(unit));
        self.view.overlay.put_claim(self.group, unit, rec.clone());
        let change = rec.logged(unit);
        self.append(if granted {
            RecordBody::ClaimGranted(change)
        } else {
            RecordBody::ClaimReleased(change)
        })?;
        Ok(())
    }

    /// Only the holder extends its lease: the token must be the unit's newest and not ended, and
    /// the worker its holder's (anyone else is told the lease is not theirs: `Lost`).
    fn renew(&mut self, lease: Lease, ttl_ms: u64) -> Result<RenewOutcome> {
        match self.view.claim(&lease.unit)? {
            Some(rec)
                if rec.token == lease.token && !rec.released && rec.worker == lease.worker =>
            {
                let rec = ClaimRecord {
                    expires_at_ms: self.now_ms.saturating_add(ttl_ms),
                    ..rec
                };
                self.write_claim(&lease.unit, &rec, true)?;
                Ok(RenewOutcome::Renewed(rec.lease(&lease.unit)))
            }
            Some(rec) => Ok(RenewOutcome::Lost {
                newest_token: rec.token,
            }),
            None => Ok(RenewOutcome::Lost { newest_token: 0 }),
        }
    }

    /// Only the holder ends its lease: the token must be the unit's newest and not ended, and the
    /// worker its holder's.
    fn release(&mut self, lease: Lease) -> Result<ReleaseOutcome> {
        match self.view.claim(&lease.unit)? {
            Some(rec) if rec.token == lease.token && !rec.released => {
                if rec.worker != lease.worker {
                    return Ok(ReleaseOutcome::NotHolder { holder: rec.worker });
                }
                let rec = ClaimRecord {
                    released: true,
                    by_commit: false,
                    ..rec
                };
                self.write_claim(&lease.unit, &rec, false)?;
                Ok(ReleaseOutcome::Released)
            }
            Some(rec) => Ok(ReleaseOutcome::Lost {
                newest_token: rec.token,
            }),
            None => Ok(ReleaseOutcome::Lost { newest_token: 0 }),
        }
    }
}
