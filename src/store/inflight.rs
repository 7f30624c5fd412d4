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
//! Two threads, started at the first submission: while one waits for its group's sync, the other
//! gathers the next batches and leads the next group.

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

/// One queued batch: the store it goes to (kept open by it) and its handle's slot.
struct Job {
    store: Store,
    batch: Batch,
    slot: Arc<Slot>,
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
        self.start()?;
        let (q, wake) = &*self.queue;
        q.lock().jobs.push(job);
        wake.notify_one();
        Ok(())
    }

    fn start(&self) -> Result<()> {
        let mut threads = self.threads.lock();
        while threads.len() < THREADS {
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
        units += j.batch.items.len().max(1);
        if n > 0 && units > bound {
            break;
        }
        n += 1;
    }
    jobs.drain(..n).collect()
}

/// Hands one round's batches to the queue as one request and answers their handles.
fn run_round(jobs: Vec<Job>) {
    let store = jobs[0].store.clone();
    let mut slots = Vec::with_capacity(jobs.len());
    let mut writes = Vec::with_capacity(jobs.len());
    for job in jobs {
        slots.push(job.slot);
        writes.push(Write::Commit(job.batch));
        // `job.store` drops here; `store` keeps it open until the round is answered.
    }
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.write_each_then(writes, |answers| {
            for (slot, answer) in slots.iter().zip(answers) {
                slot.fill(answer.map(|w| match w {
                    Written::Commit(r) => r,
                    other => {
                        unreachable!("invariant: a commit is answered by a report, got {other:?}")
                    }
                }));
            }
        })
    }));
    if answered.is_err() {
        // Whether the round reached the disk is unknown: its handles learn it as a leader's
        // panic would tell them (the first answer stands, so answered handles keep theirs).
        for slot in &slots {
            slot.fill(Err(Error::LeaderPanicked));
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
            batch,
            slot: slot.clone(),
        })?;
        Ok(CommitHandle { slot })
    }
}
