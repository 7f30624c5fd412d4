//! Commits in flight from one thread ([`Store::submit`]): the call queues the batch and returns a
//! [`CommitHandle`] at once; the store's submission threads hand whatever batches wait to the
//! group-commit queue as one request ([`Store::write_each_then`]) and fill each handle with its
//! report once its group is durable.
//!
//! Why: a blocking [`Store::commit`] holds its thread until the group's sync, so keeping many
//! commits in one group needs as many parked threads (P1 runs 64), and each costs a wake-up
//! round trip. Here one thread keeps any number of commits in flight, and one wait of a
//! submission thread carries all of those that wait when it looks.
//!
//! What holds whatever the caller does with its handles:
//! - a queued batch owns a clone of the store, so the store stays open until its commit is
//!   answered, and dropping the handle (or every handle and the store) neither loses nor cuts
//!   the commit: it is decided and made durable (or refused) as a whole, as if it were waited for;
//! - every handle is answered: by its group's report, by the error that refused it, or, when a
//!   leader panicked, with [`Error::LeaderPanicked`] (the queue answers every member so, SPEC
//!   I10); a panic of the submission thread itself outside the queue answers the handles of its
//!   round the same way.
//!
//! Two threads, started at the first submission (or more, [`Store::start_submit_threads`]):
//! while one waits for its group's sync, the other gathers the next batches and leads the next
//! group.
//!
//! [`Store::submit_then`] queues any write (a claim, a renewal, a release as well as a commit)
//! with a function that takes its answer on the submission thread instead of a handle: the
//! server's committers hand the writes of many connections to the store this way, so that no
//! thread of theirs waits for a sync.

use super::{Store, Write, Written};
use crate::commit::{Batch, CommitReport};
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

/// Submission threads a store starts at its first [`Store::submit`].
const THREADS: usize = 2;

/// The answer to one [`Store::submit`], to wait for or look at.
#[derive(Debug)]
#[must_use = "a dropped handle does not cancel its commit; keep it to learn the outcome"]
pub struct CommitHandle {
    slot: Arc<Slot>,
}

/// Where a submission thread puts one commit's answer.
#[derive(Debug, Default)]
struct Slot {
    answer: Mutex<Option<Result<CommitReport>>>,
    ready: Condvar,
}

impl Slot {
    /// Puts the answer unless one is there already (the first answer stands).
    fn fill(&self, answer: Result<CommitReport>) {
        let mut a = self.answer.lock();
        if a.is_none() {
            *a = Some(answer);
            self.ready.notify_all();
        }
    }
}

impl CommitHandle {
    /// Waits until the commit is decided and durable (or refused), and returns what
    /// [`Store::commit`] would have returned for the batch.
    pub fn wait(self) -> Result<CommitReport> {
        let mut a = self.slot.answer.lock();
        loop {
            if let Some(r) = a.take() {
                return r;
            }
            self.slot.ready.wait(&mut a);
        }
    }

    /// Waits at most `timeout`: the answer, or the handle back if the commit is still in flight.
    pub fn wait_timeout(
        self,
        timeout: Duration,
    ) -> std::result::Result<Result<CommitReport>, Self> {
        {
            let mut a = self.slot.answer.lock();
            if a.is_none() {
                let _ = self.slot.ready.wait_for(&mut a, timeout);
            }
            if let Some(r) = a.take() {
                return Ok(r);
            }
        }
        Err(self)
    }

    /// Whether the answer is there (then [`CommitHandle::wait`] returns without waiting).
    pub fn is_done(&self) -> bool {
        self.slot.answer.lock().is_some()
    }
}

/// What [`Store::submit_then`] calls with a write's answer.
type Then = Box<dyn FnOnce(Result<Written>) + Send>;

/// Where a queued write's answer goes.
enum Answer {
    /// A [`CommitHandle`]'s slot ([`Store::submit`]).
    Handle(Arc<Slot>),
    /// The caller's function ([`Store::submit_then`]).
    Then(Then),
}

impl Answer {
    /// Hands `answer` over (a handle keeps the first answer it gets).
    fn give(self, answer: Result<Written>) {
        match self {
            Answer::Handle(slot) => slot.fill(answer.map(|w| match w {
                Written::Commit(r) => r,
                other => {
                    unreachable!("invariant: a commit is answered by a report, got {other:?}")
                }
            })),
            Answer::Then(then) => then(answer),
        }
    }
}

/// One queued write: the store it goes to (kept open by it) and where its answer goes.
struct Job {
    store: Store,
    write: Write,
    answer: Answer,
}

#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    stop: bool,
}

/// A store's submission queue and threads (one per store, in its shared state).
#[derive(Default)]
pub(crate) struct Submissions {
    queue: Arc<(Mutex<Queue>, Condvar)>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Submissions {
    fn push(&self, job: Job) -> Result<()> {
        self.start(THREADS)?;
        let (q, wake) = &*self.queue;
        q.lock().jobs.push(job);
        wake.notify_one();
        Ok(())
    }

    /// Starts threads until at least `n` run.
    fn start(&self, n: usize) -> Result<()> {
        let mut threads = self.threads.lock();
        while threads.len() < n {
            let queue = self.queue.clone();
            let t = std::thread::Builder::new()
                .name("oncelake-submit".into())
                .spawn(move || run(&queue))
                .map_err(|e| Error::io("start the store's submission thread", e))?;
            threads.push(t);
        }
        Ok(())
    }

    /// Stops the threads (the store's last handle is gone, so no job is queued: each holds one)
    /// and joins them, except the calling thread when it is one of them (it drops the last job's
    /// store and returns to its loop, which ends).
    pub(crate) fn stop(&self) {
        let (q, wake) = &*self.queue;
        q.lock().stop = true;
        wake.notify_all();
        let me: ThreadId = std::thread::current().id();
        for t in self.threads.lock().drain(..) {
            if t.thread().id() != me {
                // A panic of the thread was answered to its handles already (`run_round`).
                let _ = t.join();
            }
        }
    }

    /// Forgets the threads without stopping them (a forked child's copy of the store).
    pub(crate) fn forget(&self) {
        self.threads.lock().clear();
    }
}

/// A submission thread: rounds until the store's last handle is gone.
fn run(queue: &(Mutex<Queue>, Condvar)) {
    let (q, wake) = queue;
    loop {
        let jobs = {
            let mut g = q.lock();
            while g.jobs.is_empty() && !g.stop {
                wake.wait(&mut g);
            }
            if g.jobs.is_empty() {
                return;
            }
            take_round(&mut g.jobs)
        };
        run_round(jobs);
    }
}

/// The oldest jobs that fit one group (at least one), so that the other thread can lead the
/// next group while this one's waits for its sync.
fn take_round(jobs: &mut Vec<Job>) -> Vec<Job> {
    let bound = jobs[0].store.inner.core.options.max_group_units.max(1);
    let mut units = 0;
    let mut n = 0;
    for j in jobs.iter() {
        units += match &j.write {
            Write::Commit(batch) => batch.items.len().max(1),
            _ => 1,
        };
        if n > 0 && units > bound {
            break;
        }
        n += 1;
    }
    jobs.drain(..n).collect()
}

/// Hands one round's writes to the queue as one request and hands each its answer.
fn run_round(jobs: Vec<Job>) {
    let store = jobs[0].store.clone();
    let mut answers = Vec::with_capacity(jobs.len());
    let mut writes = Vec::with_capacity(jobs.len());
    for job in jobs {
        answers.push(Some(job.answer));
        writes.push(job.write);
        // `job.store` drops here; `store` keeps it open until the round is answered.
    }
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.write_each_then(writes, |results| {
            for (to, result) in answers.iter_mut().zip(results) {
                if let Some(to) = to.take() {
                    to.give(result);
                }
            }
        })
    }));
    if answered.is_err() {
        // Whether the round reached the disk is unknown: the writes not answered yet learn it as
        // a leader's panic would tell them (those answered keep their answers).
        for to in answers.into_iter().flatten() {
            // A caller's function that panics again is not asked a second time.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                to.give(Err(Error::LeaderPanicked))
            }));
        }
    }
    // The last handle of the store may drop here, closing it on this thread (`Submissions::stop`).
    drop(store);
}

impl Store {
    /// Queues `batch` for commit and returns at once with a handle to its answer: one thread can
    /// keep many commits in flight, and those waiting together share a durable group, where
    /// [`Store::commit`] needs a thread per commit in flight for that.
    ///
    /// The batch is checked as [`Store::commit`] checks it, here (a bad batch is refused before
    /// anything is queued). Once queued it is decided and made durable as a whole whatever
    /// happens to the handle: dropping the handle, or the store, neither cancels nor cuts it (the
    /// store stays open until it is answered). Commits in flight together are decided in no
    /// promised order (two submission threads lead alternately): to commit two versions of one
    /// unit in order, wait for the first's handle before submitting the second.
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = oncelake::Store::open(dir.path().join("lake"))?;
    /// let a = store.stage_bytes(b"rows")?;
    /// let handles: Vec<_> = (0..10)
    ///     .map(|i| store.submit(oncelake::Batch::new().put(&format!("orders/{i}"), 1, &a)))
    ///     .collect::<oncelake::Result<_>>()?;
    /// for h in handles {
    ///     assert!(h.wait()?.applied());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn submit(&self, batch: Batch) -> Result<CommitHandle> {
        self.check_writable()?;
        self.check_batch(&batch)?;
        let slot = Arc::new(Slot::default());
        self.inner.submissions.push(Job {
            store: self.clone(),
            write: Write::Commit(batch),
            answer: Answer::Handle(slot.clone()),
        })?;
        Ok(CommitHandle { slot })
    }

    /// Queues `write` and returns at once; `then` gets its answer — what [`Store::write_each`]
    /// answers for it — on a submission thread once it is durable (or refused). For callers that
    /// wait in their own way (an async task, another thread's queue): many writes in flight share
    /// durable groups, as with [`Store::submit`], and no thread of the caller's waits for a sync.
    ///
    /// `then` runs on the store's submission thread, so it should only hand the answer over (its
    /// time delays the next group of that thread). It is called exactly once, unless this returns
    /// an error (then the write was not queued and `then` is dropped uncalled): with
    /// [`Error::LeaderPanicked`] if the round's leader panicked, even when `then` itself
    /// panicked on the answer before (it is not called again then). The write is checked where
    /// it is decided, and a bad one is answered with its error.
    pub fn submit_then(
        &self,
        write: Write,
        then: impl FnOnce(Result<Written>) + Send + 'static,
    ) -> Result<()> {
        self.check_writable()?;
        self.inner.submissions.push(Job {
            store: self.clone(),
            write,
            answer: Answer::Then(Box::new(then)),
        })
    }

    /// Starts the store's submission threads now, at least `threads` of them (a store starts two
    /// at its first submission otherwise): more threads gather and lead groups while others wait
    /// for their syncs or help apply the backlog.
    pub fn start_submit_threads(&self, threads: usize) -> Result<()> {
        self.inner.submissions.start(threads.max(1))
    }
}
