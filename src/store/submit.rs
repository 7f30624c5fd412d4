//! A store's way into the group-commit queue: what one caller puts on it (one operation, or many
//! independent ones from a caller that gathers them, [`Store::write_each`]), how the leader
//! turns the group's requests into one list of operations for `commit::apply` and its answers
//! back, and what every writer does once answered (the latency metric, helping the backlog).

use super::Store;
use crate::commit::apply::{Done, Op};
use crate::commit::queue::{LeaderPanicked, Weighted};
use crate::core::Core;
use crate::error::{Error, Result};
use crate::layout::DB_FILE;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// One queue node's request.
#[derive(Debug)]
pub(crate) enum Request {
    /// One caller's one operation (every write of the public API but `write_each`).
    One(Op),
    /// Independent operations one caller gathered (never empty): decided in this order, each
    /// exactly as if it had come on its own node, each answered on its own.
    Many(Vec<Op>),
}

/// One queue node's answer, in the shape of its [`Request`] — except when the leader panicked:
/// then it is `One(Err(LeaderPanicked))` whatever the request was ([`LeaderPanicked`] cannot
/// know the shape), and the submitter spreads it over its operations.
#[derive(Debug)]
pub(crate) enum Answer {
    One(Result<Done>),
    Many(Vec<Result<Done>>),
}

impl Weighted for Request {
    fn weight(&self) -> usize {
        match self {
            Request::One(op) => op.weight(),
            Request::Many(ops) => ops.iter().map(Weighted::weight).sum(),
        }
    }
}

impl LeaderPanicked for Answer {
    fn leader_panicked() -> Self {
        Answer::One(Err(Error::LeaderPanicked))
    }
}

impl Store {
    /// Submits one operation and waits for its answer; then helps apply the backlog.
    pub(crate) fn submit_op(&self, op: Op) -> Result<Done> {
        self.check_writable()?;
        op.check_record_size()?;
        let start = Instant::now();
        let answer = self.enqueue(Request::One(op));
        self.record_latency(start, 1);
        let r = match answer {
            Answer::One(r) => r,
            Answer::Many(_) => unreachable!("invariant: a one-op request gets a one-op answer"),
        };
        self.after_answer(r.as_ref().err());
        self.inner.core.help_apply();
        r
    }

    /// Submits independent operations as one queue node (so one wait carries them all) and
    /// hands their answers, in their order, to `answer` as soon as they are durable; then helps
    /// apply the backlog. The operations must weigh at most the group bound together, so that
    /// the leader's group keeps to it.
    pub(crate) fn submit_many(&self, ops: Vec<Op>, answer: impl FnOnce(Vec<Result<Done>>)) {
        let n = ops.len();
        if n == 0 {
            answer(Vec::new());
            return;
        }
        debug_assert!(
            ops.iter().map(Weighted::weight).sum::<usize>()
                <= self.inner.core.options.max_group_units.max(1)
                || n == 1,
            "submit_many's callers split their operations at the group bound"
        );
        if let Err(e) = self.check_writable() {
            answer(spread(e, n));
            return;
        }
        let start = Instant::now();
        let answers = match self.enqueue(Request::Many(ops)) {
            Answer::Many(rs) => rs,
            Answer::One(Err(e)) => {
                self.after_answer(Some(&e));
                spread(e, n)
            }
            Answer::One(Ok(done)) => {
                unreachable!("invariant: a many-op request gets a many-op answer, got {done:?}")
            }
        };
        self.record_latency(start, n);
        answer(answers);
        self.inner.core.help_apply();
    }

    fn enqueue(&self, req: Request) -> Answer {
        let inner = &*self.inner.core;
        self.inner.queue.submit(req, |reqs| lead(inner, reqs))
    }

    /// A leader that panicked left the durable state unknown: fail the store.
    fn after_answer(&self, err: Option<&Error>) {
        if matches!(err, Some(Error::LeaderPanicked)) {
            let inner = &*self.inner.core;
            inner.index_suspect.store(true, Ordering::SeqCst);
            inner.fail("a commit leader panicked");
        }
    }

    /// The latency is the writer's: its answer came before the help with the backlog.
    fn record_latency(&self, start: Instant, ops: usize) {
        let us = start.elapsed().as_micros() as u64;
        for _ in 0..ops {
            self.inner.core.metrics.commit_latency_us.record(us);
        }
    }
}

/// `e` for each of `n` operations (the first gets `e` itself, the others its message, as the
/// engine's errors are not `Clone`).
fn spread(e: Error, n: usize) -> Vec<Result<Done>> {
    let mut out = Vec::with_capacity(n);
    let again = |e: &Error| match e {
        Error::Failed { cause } => Error::Failed {
            cause: cause.clone(),
        },
        Error::ReadOnly { path, why } => Error::ReadOnly {
            path: path.clone(),
            why: why.clone(),
        },
        Error::LeaderPanicked => Error::LeaderPanicked,
        other => Error::Failed {
            cause: other.to_string(),
        },
    };
    for _ in 1..n {
        out.push(Err(again(&e)));
    }
    out.insert(0, Err(e));
    out
}

/// The leader's processing of a group: its requests flattened into one list of operations,
/// decided and made durable together, the answers cut back into the requests' shapes.
fn lead(inner: &Core, reqs: Vec<Request>) -> Vec<Answer> {
    let mut shape = Vec::with_capacity(reqs.len());
    let mut ops = Vec::with_capacity(reqs.len());
    for req in reqs {
        match req {
            Request::One(op) => {
                shape.push(None);
                ops.push(op);
            }
            Request::Many(many) => {
                shape.push(Some(many.len()));
                ops.extend(many);
            }
        }
    }
    let mut dones = decide(inner, ops).into_iter();
    let mut next = || {
        dones
            .next()
            .expect("invariant: apply_group answers every operation of its group")
    };
    shape
        .into_iter()
        .map(|s| match s {
            None => Answer::One(next()),
            Some(k) => Answer::Many((0..k).map(|_| next()).collect()),
        })
        .collect()
}

fn decide(inner: &Core, ops: Vec<Op>) -> Vec<Result<Done>> {
    let n = ops.len();
    match crate::error::contain(|| Ok(crate::commit::group::apply_group(inner, ops))) {
        Ok(dones) => dones,
        // redb panicked on a damaged page. Whether the group's transaction reached the disk is
        // unknown if it panicked while committing: fail the store (writes are refused until a
        // reopen, which reads what is durable) and persist no index.
        Err(e) => {
            let detail = e.to_string();
            inner.index_suspect.store(true, Ordering::SeqCst);
            inner.fail(&detail);
            (0..n)
                .map(|_| {
                    Err(Error::Corrupt {
                        path: inner.dir.join(DB_FILE),
                        detail: detail.clone(),
                    })
                })
                .collect()
        }
    }
}
