//! The commit leader's work: decide every operation of a group in log order against the state in
//! one redb write transaction, write it, make it durable with one sync — in the durable mode the
//! sync of the group's write-ahead record ([`crate::schema::wal`]), after which the transaction
//! is committed unsynced, or now and then a synced commit of the transaction itself (a
//! checkpoint) — and only then publish the results (dedup index, metrics) and answer the writers.
//!
//! Every decision reads the transaction's own view, so an operation sees the effects of the ones
//! before it in the same group: two writers of the same unit in one group are decided exactly as
//! if they had committed one after the other. The order of the commit log is the tie-breaker.

use crate::claim::{ClaimOutcome, Lease, ReleaseOutcome, RenewOutcome};
use crate::commit::queue::{LeaderPanicked, Weighted};
use crate::commit::rules::{self, Decision, Incoming, LeaseCheck, LeaseStatus};
use crate::commit::{Atomicity, Batch, BatchItem, CommitReport, Outcome, UnitOutcome};
use crate::core::{Core, Durability};
use crate::error::{DbContext, Error, Result};
use crate::metrics::add;
use crate::schema::claim::ClaimRecord;
use crate::schema::log::{ClaimChange, LogEntry, Record, RecordBody};
use crate::schema::manifest::EntryValue;
use crate::schema::meta::{self, COUNTERS, HISTORY_FROM, NEXT_SEQ, NEXT_TOKEN, WAL_GROUP};
use crate::schema::wal::{Redo, MAX_RECORD};
use crate::schema::{extension, CLAIMS, CLAIMS_TABLE, EXTENSIONS, HISTORY, LOG, MANIFEST, META};
use crate::stage::Staged;
use redb::{ReadableTable, Table};
use std::sync::atomic::Ordering;

/// One request in the write queue.
#[derive(Debug)]
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
    /// it must not be lost in a crash while the deletions survive. Rows whose successor is newer
    /// than `keep_for_seq` are kept: an open snapshot reads as of that seq.
    Prune {
        cutoff_ms: u64,
        keep_for_seq: Option<u64>,
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

/// The tables of one write transaction, and the counters the group advances.
struct Writer<'t> {
    manifest: Table<'t, &'static str, &'static [u8]>,
    history: Table<'t, (&'static str, u64), &'static [u8]>,
    log: Table<'t, u64, &'static [u8]>,
    claims: Table<'t, &'static str, &'static [u8]>,
    /// Opened on the first [`Op::Extension`] of the group only, so plain commits pay nothing.
    extensions: Option<Table<'t, &'static str, &'static [u8]>>,
    txn: &'t redb::WriteTransaction,
    next_seq: u64,
    next_token: u64,
    now_ms: u64,
    /// The history horizon a prune in this group moved to, if any.
    history_from: Option<u64>,
    /// Index updates to publish once the transaction is durable: (unit, was new, value).
    index: Vec<(String, bool, EntryValue)>,
    /// Leases found expired (not released) when their unit was claimed again, by anyone.
    expired_leases: u64,
    /// The group's redo for the write-ahead log, when the group goes through it.
    redo: Option<Redo>,
}

/// One item of a batch, decided.
struct Decided {
    decision: Decision,
    current: Option<EntryValue>,
    claim: Option<ClaimRecord>,
}

/// Applies a group; called by the queue's leader with the group's operations, oldest first.
pub(crate) fn apply_group(inner: &Core, ops: Vec<Op>) -> Vec<Result<Done>> {
    if let Some(cause) = inner.failed.lock().clone() {
        return ops
            .iter()
            .map(|_| {
                Err(Error::Failed {
                    cause: cause.clone(),
                })
            })
            .collect();
    }
    let n = ops.len();
    #[cfg(debug_assertions)]
    crate::commit::invariants::assert_group_bound(&ops, inner.options.max_group_units);
    // The batches are consumed while the group is decided, before its transaction is visible;
    // their staged objects must stay pinned until it is (or until the failed state is set), or GC
    // could delete an object the commit is about to make visible (I8).
    let pins = pins_of(&ops);
    let result = match write_group(inner, ops) {
        Ok((dones, index, counts)) => {
            {
                let mut idx = inner.index.write();
                for (unit, new_unit, v) in &index {
                    idx.upsert(unit, *new_unit, v);
                }
            }
            inner.metrics.c.absorb(&counts);
            inner.metrics.group_units.record(group_units(&dones));
            dones.into_iter().map(Ok).collect()
        }
        Err(e) => {
            // Nothing of the group may be acknowledged, and nothing later may be written on top of
            // a state we no longer know: fail the store until it is reopened (SPEC R5).
            let cause = e.to_string();
            *inner.failed.lock() = Some(cause.clone());
            add(&inner.metrics.c.sync_failures, 1);
            (0..n)
                .map(|_| {
                    Err(Error::Failed {
                        cause: cause.clone(),
                    })
                })
                .collect()
        }
    };
    drop(pins);
    result
}

/// Clones of the staged handles of every commit in the group (each clone holds its object's pin).
fn pins_of(ops: &[Op]) -> Vec<Staged> {
    ops.iter()
        .filter_map(|o| match o {
            Op::Commit(b) => Some(b.items.iter().map(|i| i.staged.clone())),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The group's answers, its index updates, and its counts (persisted with it).
type GroupResult = (
    Vec<Done>,
    Vec<(String, bool, EntryValue)>,
    crate::metrics::Counters,
);

fn write_group(inner: &Core, ops: Vec<Op>) -> Result<GroupResult> {
    let now_ms = inner.options.clock.now_ms();
    let mut txn = inner.db.begin_write()?;
    // The durable mode makes a group durable by one write-ahead append, and the database by a
    // checkpoint now and then (and for a flush or a prune, which must be durable in the database
    // itself: GC deletes objects on the strength of a prune).
    let wal = match inner.options.durability {
        Durability::Durable => inner.wal.as_ref(),
        Durability::Relaxed { .. } => None,
    };
    let checkpoint = wal.is_none_or(|w| {
        w.checkpoint_due(now_ms)
            || ops
                .iter()
                .any(|o| matches!(o, Op::Flush | Op::Prune { .. }))
    });
    let wal = wal.filter(|_| !checkpoint);
    let durable = match inner.options.durability {
        Durability::Durable => checkpoint,
        Durability::Relaxed { max_delay } => {
            let last = inner.last_durable_ms.load(Ordering::Relaxed);
            ops.iter()
                .any(|o| matches!(o, Op::Flush | Op::Prune { .. }))
                || now_ms.saturating_sub(last) >= max_delay.as_millis() as u64
                || now_ms < last
        }
    };
    txn.set_durability(if durable {
        redb::Durability::Immediate
    } else {
        redb::Durability::None
    })
    .db("set the durability")?;
    let (dones, index, counts, group, redo) = {
        let mut meta = txn.open_table(META).db("open the meta table")?;
        let (next_seq, next_token) = (meta::get(&meta, NEXT_SEQ)?, meta::get(&meta, NEXT_TOKEN)?);
        #[cfg(debug_assertions)]
        let before = crate::commit::invariants::Counters::read(&meta)?;
        let mut w = Writer {
            manifest: txn.open_table(MANIFEST).db("open the manifest")?,
            history: txn.open_table(HISTORY).db("open the history")?,
            log: txn.open_table(LOG).db("open the log")?,
            claims: txn.open_table(CLAIMS).db("open the claims")?,
            extensions: None,
            txn: &txn,
            next_seq,
            next_token,
            now_ms,
            history_from: None,
            index: Vec::new(),
            expired_leases: 0,
            redo: wal.map(|_| Redo::default()),
        };
        let mut dones = Vec::with_capacity(ops.len());
        for op in ops {
            dones.push(w.apply(op)?);
        }
        if w.next_seq != next_seq {
            meta::put(&mut meta, NEXT_SEQ, w.next_seq)?;
        }
        if w.next_token != next_token {
            meta::put(&mut meta, NEXT_TOKEN, w.next_token)?;
        }
        if let Some(h) = w.history_from {
            // The horizon only rises: a prune never makes readable again what was refused.
            let stored = meta::get(&meta, HISTORY_FROM)?;
            if h > stored {
                meta::put(&mut meta, HISTORY_FROM, h)?;
            }
        }
        // The group's counts go into its own transaction (SPEC R16: never lost, never ahead).
        let counts = crate::metrics::Counters::default();
        record_metrics(&counts, &dones, w.index.len());
        add(&counts.claims_expired, w.expired_leases);
        meta::add_counters(&mut meta, &counts, next_seq.saturating_sub(1))?;
        let group = crate::schema::wal::applied_group(&meta)? + 1;
        meta::put(&mut meta, WAL_GROUP, group)?;
        #[cfg(debug_assertions)]
        crate::commit::invariants::assert_group(inner, &w.log, before, &meta)?;
        let index = std::mem::take(&mut w.index);
        let mut redo = w.redo.take();
        if let Some(redo) = redo.as_mut() {
            for key in [NEXT_SEQ, NEXT_TOKEN, HISTORY_FROM, COUNTERS, WAL_GROUP] {
                if let Some(v) = meta.get(key).db("read the meta table")? {
                    redo.meta(key, v.value());
                }
            }
        }
        (dones, index, counts, group, redo)
    };
    let mut durable = durable;
    if let Some(wal) = wal {
        match redo.filter(|r| r.len() <= MAX_RECORD) {
            // Durable before the group's rows become visible (the commit below): a reader never
            // sees a group a crash could take back, and an acknowledged group is in the log.
            Some(redo) => wal.append(group, &redo.frame(group))?,
            // A group this large (a bulk load) gains nothing from the log: it is a checkpoint.
            None => {
                txn.set_durability(redb::Durability::Immediate)
                    .db("set the durability")?;
                durable = true;
            }
        }
    }
    txn.commit().db("commit the group")?;
    if durable {
        inner.last_durable_ms.store(now_ms, Ordering::Relaxed);
        if let Some(wal) = &inner.wal {
            wal.checkpointed(group, now_ms);
        }
    }
    Ok((dones, index, counts))
}

/// Units (and claims) answered by a group.
fn group_units(dones: &[Done]) -> u64 {
    dones
        .iter()
        .map(|d| match d {
            Done::Commit(r) => r.units.len() as u64,
            Done::ClaimMany(c) => c.len() as u64,
            _ => 1,
        })
        .sum()
}

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
            Op::Prune {
                cutoff_ms,
                keep_for_seq,
            } => self.prune(cutoff_ms, keep_for_seq)?,
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
            let claim = self.claim_record(&fence.unit)?;
            let lease = claim.as_ref().map(|r| r.state(self.now_ms));
            // The lease rules of a commit; an extension has no version to be a duplicate of, so
            // an ended lease's token is simply fenced.
            match rules::lease_check(lease.as_ref(), fence.token) {
                LeaseCheck::Pass => {}
                LeaseCheck::Reject(Decision::Busy { expires_at_ms }) => {
                    return Ok(ExtensionOutcome::Busy {
                        worker: claim.map(|r| r.worker).unwrap_or_default(),
                        expires_at_ms,
                    })
                }
                LeaseCheck::Reject(Decision::Fenced {
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
        if self.extensions.is_none() {
            self.extensions = Some(
                self.txn
                    .open_table(EXTENSIONS)
                    .db("open the extensions table")?,
            );
        }
        if let Some(t) = self.extensions.as_mut() {
            t.insert(key, value.as_slice())
                .db("write the extensions table")?;
        }
        if let Some(r) = &mut self.redo {
            r.extensions(key, &value);
        }
        let seq = self.append(RecordBody::Extension { tag, data })?;
        Ok(ExtensionOutcome::Written { seq })
    }

    fn current(&self, unit: &str) -> Result<Option<EntryValue>> {
        crate::schema::codec::get_sealed(&self.manifest, "manifest", unit, EntryValue::decode)
    }

    fn claim_record(&self, unit: &str) -> Result<Option<ClaimRecord>> {
        crate::schema::codec::get_sealed(&self.claims, CLAIMS_TABLE, unit, ClaimRecord::decode)
    }

    fn append(&mut self, body: RecordBody) -> Result<u64> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let rec = Record {
            seq,
            time_ms: self.now_ms,
            body,
        };
        let bytes = rec.encode();
        self.log
            .insert(seq, bytes.as_slice())
            .db("append to the commit log")?;
        if let Some(r) = &mut self.redo {
            r.log(seq, &bytes);
        }
        Ok(seq)
    }

    /// The seq of an older entry of `unit` with this version and object, if the history has one.
    fn earlier_identical(&self, unit: &str, inc: &Incoming) -> Result<Option<u64>> {
        for row in self
            .history
            .range((unit, 0)..=(unit, u64::MAX))
            .db("read the history")?
            .rev()
        {
            let (k, v) = row.db("read the history")?;
            let v = EntryValue::decode_history(unit, k.value().1, v.value())?;
            if v.source_version < inc.source_version {
                break;
            }
            if v.source_version == inc.source_version && v.object.id == inc.object {
                return Ok(Some(k.value().1));
            }
        }
        Ok(None)
    }

    /// Decides one item of a batch against the transaction's state: its decision, the unit's
    /// current entry and its newest lease record (read for every commit: with a token it must be
    /// that lease's, without one the lease must not be live).
    fn decide_item(&self, item: &BatchItem) -> Result<Decided> {
        let current = self.current(&item.unit)?;
        let claim = self.claim_record(&item.unit)?;
        let lease = claim.as_ref().map(|r| r.state(self.now_ms));
        let inc = Incoming {
            source_version: item.source_version,
            object: item.staged.id(),
            token: item.token,
            intent: item.intent,
        };
        let mut lookup_err = None;
        let cur = current.map(|c| rules::Current {
            source_version: c.source_version,
            revision: c.revision,
            object: c.object.id,
            seq: c.seq,
        });
        let decision = rules::decide(cur.as_ref(), lease.as_ref(), &inc, || {
            self.earlier_identical(&item.unit, &inc)
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
        let decided = batch
            .items
            .iter()
            .map(|item| self.decide_item(item))
            .collect::<Result<Vec<_>>>()?;
        let rejected = decided.iter().any(|d| {
            !matches!(
                d.decision,
                Decision::Accept { .. } | Decision::Duplicate { .. }
            )
        });
        let applies = !(rejected && batch.atomicity == Atomicity::AllOrNothing);
        let any_accept = decided
            .iter()
            .any(|d| matches!(d.decision, Decision::Accept { .. }));
        let seq = (applies && any_accept).then_some(self.next_seq);

        let mut units = Vec::with_capacity(decided.len());
        let mut logged = Vec::new();
        for (item, d) in batch.items.iter().zip(decided) {
            let holder = match d.decision {
                Decision::Busy { .. } => d.claim.as_ref().map(|r| r.worker.clone()),
                _ => None,
            };
            if let (Decision::Accept { revision }, Some(seq)) = (d.decision, seq) {
                #[cfg(debug_assertions)]
                crate::commit::invariants::assert_accept(
                    &item.unit,
                    item.token,
                    d.claim.as_ref(),
                    self.now_ms,
                    d.current.as_ref(),
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
                outcome: Outcome::from_decision(
                    d.decision,
                    seq,
                    d.current.map(|c| c.source_version),
                ),
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

    /// Writes an accepted item's manifest and history rows at `seq`; returns its log entry.
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
        let (current, old) = (value.encode(&item.unit), value.encode_history(&item.unit));
        self.manifest
            .insert(item.unit.as_str(), current.as_slice())
            .db("write the manifest")?;
        self.history
            .insert((item.unit.as_str(), seq), old.as_slice())
            .db("write the history")?;
        if let Some(r) = &mut self.redo {
            r.manifest(&item.unit, &current);
            r.history(&item.unit, seq, &old);
        }
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
    fn prune(&mut self, cutoff_ms: u64, keep_for_seq: Option<u64>) -> Result<Done> {
        let plan = crate::schema::manifest::plan_prune(&self.history, cutoff_ms, keep_for_seq)?;
        for (unit, seq) in &plan.rows {
            self.history
                .remove((unit.as_str(), *seq))
                .db("prune the history")?;
            if let Some(r) = &mut self.redo {
                r.history_removed(unit, *seq);
            }
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
        if rec.state(self.now_ms).status == LeaseStatus::Expired {
            self.expired_leases += 1;
        }
        rec.released = true;
        rec.by_commit = true;
        let bytes = rec.encode(unit);
        self.claims
            .insert(unit, bytes.as_slice())
            .db("write the claims")?;
        if let Some(r) = &mut self.redo {
            r.claims(unit, &bytes);
        }
        Ok(())
    }

    fn claim(
        &mut self,
        unit: String,
        source_version: u64,
        worker: String,
        ttl_ms: u64,
    ) -> Result<ClaimOutcome> {
        if let Some(cur) = self.current(&unit)? {
            if cur.source_version >= source_version {
                return Ok(ClaimOutcome::AlreadyDone(cur.into_entry(&unit)));
            }
        }
        let existing = self.claim_record(&unit)?;
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
        self.next_token += 1;
        assert!(
            existing.as_ref().is_none_or(|r| r.token < token),
            "invariant: fencing tokens rise on every grant"
        );
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
        let bytes = rec.encode(unit);
        self.claims
            .insert(unit, bytes.as_slice())
            .db("write the claims")?;
        if let Some(r) = &mut self.redo {
            r.claims(unit, &bytes);
        }
        let change = ClaimChange {
            unit: unit.to_string(),
            worker: rec.worker.clone(),
            token: rec.token,
            source_version: rec.source_version,
            expires_at_ms: if rec.released { 0 } else { rec.expires_at_ms },
        };
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
        match self.claim_record(&lease.unit)? {
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
        match self.claim_record(&lease.unit)? {
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
