//! Many independent writes from one thread as one request of the group-commit queue
//! ([`Store::write_each`]): for a caller that gathers writes from many sources on one thread —
//! a server taking many requests per wake-up — so that one wait carries them all, where the
//! one-write calls would need a thread per write in flight for them to share a group.

use super::Store;
use crate::claim::{ClaimOutcome, Lease, ReleaseOutcome, RenewOutcome};
use crate::commit::apply::{Done, Op};
use crate::commit::queue::Weighted;
use crate::commit::{Batch, CommitReport};
use crate::error::Result;
use crate::key::validate_user_key;
use std::time::Duration;

/// One write of [`Store::write_each`]: the arguments of the one-write call of the same name.
#[derive(Debug)]
pub enum Write {
    /// [`Store::commit`].
    Commit(Batch),
    /// [`Store::claim`].
    Claim {
        /// The unit to claim.
        unit: String,
        /// Its source version.
        source_version: u64,
        /// Who claims it.
        worker: String,
        /// For how long.
        ttl: Duration,
    },
    /// [`Store::renew`].
    Renew {
        /// The lease to extend.
        lease: Lease,
        /// Its new time to live.
        ttl: Duration,
    },
    /// [`Store::release`].
    Release {
        /// The lease to give back.
        lease: Lease,
    },
}

/// The answer to one [`Write`]: what the one-write call of the same name returns.
#[derive(Debug)]
pub enum Written {
    /// [`Store::commit`]'s report.
    Commit(CommitReport),
    /// [`Store::claim`]'s outcome.
    Claim(ClaimOutcome),
    /// [`Store::renew`]'s outcome.
    Renew(RenewOutcome),
    /// [`Store::release`]'s outcome.
    Release(ReleaseOutcome),
}

impl Store {
    /// Makes independent writes from one thread as if each came from a thread of its own: they
    /// join the group-commit queue as one request, so they share durable groups (one, up to
    /// [`crate::Options::max_group_units`] units), are decided in the order given (two writes of
    /// the same unit are decided as if made one after the other), and each gets its own answer
    /// — a bad request or a rejection of one touches none of the others, and each batch stays
    /// all-or-nothing (or partial) as it says. Each write is checked as its one-write call
    /// checks it.
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// use oncelake::{Batch, Write, Written};
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = oncelake::Store::open(dir.path().join("lake"))?;
    /// let a = store.stage_bytes(b"rows of a")?;
    /// let answers = store.write_each(vec![
    ///     Write::Commit(Batch::new().put("orders/a", 1, &a)),
    ///     Write::Commit(Batch::new().put("orders/a", 1, &a)), // a retry: decided after the first
    ///     Write::Claim {
    ///         unit: "orders/b".into(),
    ///         source_version: 1,
    ///         worker: "w1".into(),
    ///         ttl: Duration::from_secs(30),
    ///     },
    /// ]);
    /// let names: Vec<&str> = answers
    ///     .iter()
    ///     .map(|a| match a {
    ///         Ok(Written::Commit(r)) => r.units[0].outcome.name(),
    ///         Ok(Written::Claim(oncelake::ClaimOutcome::Granted { .. })) => "granted",
    ///         _ => "other",
    ///     })
    ///     .collect();
    /// assert_eq!(names, ["committed", "duplicate", "granted"]);
    /// # Ok(()) }
    /// ```
    pub fn write_each(&self, writes: Vec<Write>) -> Vec<Result<Written>> {
        let mut out = Vec::new();
        self.write_each_then(writes, |r| out = r);
        out
    }

    /// [`Store::write_each`], handing the answers to `answer` as soon as they are durable —
    /// before this thread goes on to help apply acknowledged groups to the B-trees, which
    /// [`Store::write_each`] (like every write) does before it returns.
    pub fn write_each_then(&self, writes: Vec<Write>, answer: impl FnOnce(Vec<Result<Written>>)) {
        let n = writes.len();
        let mut answers: Vec<Option<Result<Written>>> = (0..n).map(|_| None).collect();
        // The writes that passed their checks, cut into runs that each fit one group.
        let bound = self.inner.core.options.max_group_units.max(1);
        let mut runs: Vec<(Vec<usize>, Vec<Op>)> = Vec::new();
        let mut weight = 0;
        for (i, write) in writes.into_iter().enumerate() {
            let op = match self.op_of(write) {
                Ok(op) => op,
                Err(e) => {
                    answers[i] = Some(Err(e));
                    continue;
                }
            };
            if runs.is_empty() || weight + op.weight() > bound {
                runs.push((Vec::new(), Vec::new()));
                weight = 0;
            }
            weight += op.weight();
            let run = runs.last_mut().expect("invariant: a run was just pushed");
            run.0.push(i);
            run.1.push(op);
        }
        let last = runs.len();
        let mut answer = Some(answer);
        for (k, (at, ops)) in runs.into_iter().enumerate() {
            self.submit_many(ops, |dones| {
                for (i, done) in at.into_iter().zip(dones) {
                    answers[i] = Some(done.map(written));
                }
                // The last run's answers complete the set: hand it over before helping.
                if k + 1 == last {
                    if let Some(f) = answer.take() {
                        f(take_all(&mut answers));
                    }
                }
            });
        }
        if let Some(f) = answer.take() {
            f(take_all(&mut answers));
        }
    }

    /// The operation of `write`, checked as its one-write call checks it.
    fn op_of(&self, write: Write) -> Result<Op> {
        let op = match write {
            Write::Commit(batch) => {
                self.check_batch(&batch)?;
                Op::Commit(batch)
            }
            Write::Claim {
                unit,
                source_version,
                worker,
                ttl,
            } => {
                validate_user_key(&unit)?;
                super::claim_op(unit, source_version, worker, ttl)?
            }
            Write::Renew { lease, ttl } => Op::Renew {
                lease,
                ttl_ms: ttl.as_millis() as u64,
            },
            Write::Release { lease } => super::release_op(lease)?,
        };
        op.check_record_size()?;
        Ok(op)
    }
}

fn written(done: Done) -> Written {
    match done {
        Done::Commit(r) => Written::Commit(r),
        Done::Claim(c) => Written::Claim(c),
        Done::Renew(r) => Written::Renew(r),
        Done::Release(r) => Written::Release(r),
        other => unreachable!("invariant: write_each submits only commits, claims, renewals and releases, got {other:?}"),
    }
}

/// The answers of [`Store::write_each_then`], every slot filled.
fn take_all(answers: &mut [Option<Result<Written>>]) -> Vec<Result<Written>> {
    answers
        .iter_mut()
        .map(|a| {
            a.take()
                .expect("invariant: write_each answers every write, by a check or by its group")
        })
        .collect()
}
