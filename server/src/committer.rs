//! The server's committers: a few threads that take every write waiting at the moment they look
//! — commits, claims, renewals, releases — and hand them to the engine as one request
//! ([`oncelake::Store::write_each_then`]), so that writes from many connections share a durable
//! group while no connection thread ever waits for one.
//!
//! Why: a commit waits for a group's synced append (a millisecond or more). A connection thread
//! that waited for it itself could serve no other connection meanwhile, so the server needed a
//! thread per connection in flight, and every commit cost three wake-ups on the server (the
//! request waking its thread, the engine parking and waking it, the answer) where an in-process
//! writer costs one (BENCHMARKS.md, "Server"). Here a connection's task queues its batch and
//! awaits the answer; a committer wakes once for however many batches are waiting, one engine
//! wait carries them all, and each answer wakes its connection's task on the connection thread,
//! which then writes many answers per wake-up.
//!
//! Several committers, because a committer whose group is answered goes on to help apply the
//! backlog to the B-trees (as every writer does) before it takes the next batches: meanwhile
//! the others gather and lead.

use crate::workers::{Queue, Workers};
use oncelake::{Store, Write, Written};
use std::sync::Arc;

/// Committer threads a server starts unless told otherwise.
pub const DEFAULT_COMMITTERS: usize = 4;

/// One write waiting for a committer.
struct Job {
    write: Write,
    reply: tokio::sync::oneshot::Sender<oncelake::Result<Written>>,
}

/// The committer threads of a server. Dropping it lets them finish every write queued by then
/// and joins them.
pub(crate) struct Committers {
    workers: Workers<Job>,
}

/// The write was not answered: its committer panicked (whether it reached the disk is not
/// known to the server).
#[derive(Debug)]
pub(crate) struct Unanswered;

impl Committers {
    /// Starts `n` (at least one) committers on `store`.
    pub(crate) fn start(store: &Store, n: usize) -> std::io::Result<Committers> {
        let store = store.clone();
        let workers = Workers::start(n, "oncelake-commit", None, move |q: &Queue<Job>| {
            run(q, &store)
        })?;
        Ok(Committers { workers })
    }

    /// Queues `write` for the next committer that looks and waits for its answer.
    pub(crate) async fn write(
        &self,
        write: Write,
    ) -> Result<oncelake::Result<Written>, Unanswered> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let queue = self.workers.queue();
        let queued = queue.push(Job { write, reply });
        // On a connection thread, more requests of the same burst may be about to queue
        // writes: the committer is woken by a task spawned behind them (it runs once the
        // thread has polled every task ready now), or at once when a group's worth is waiting.
        // Elsewhere at once.
        let deferred = queued < WAKE_AT
            && crate::conns::on_connection_thread()
            && DEFERRED.with(|d| {
                let mut d = d.borrow_mut();
                match &*d {
                    Some(q) => Arc::ptr_eq(q, queue),
                    None => {
                        *d = Some(queue.clone());
                        tokio::spawn(async { wake_for_queued() });
                        true
                    }
                }
            });
        if !deferred {
            queue.wake_one();
        }
        answer.await.map_err(|_| Unanswered)
    }
}

/// Writes waiting at which a committer is woken even while a connection thread still reads
/// requests: about what one group of the P1/P7 load holds.
const WAKE_AT: usize = 32;

thread_local! {
    /// On a connection thread: the committers it queued writes for without waking one.
    static DEFERRED: std::cell::RefCell<Option<Arc<Queue<Job>>>> = const { std::cell::RefCell::new(None) };
}

/// Wakes a committer for the writes this thread queued without waking one.
fn wake_for_queued() {
    if let Some(queue) = DEFERRED.with(|d| d.borrow_mut().take()) {
        queue.wake_one();
    }
}

/// A committer: take everything waiting, commit it as one request, answer, repeat; exit once
/// stopping and nothing waits.
fn run(queue: &Queue<Job>, store: &Store) {
    while let Some(jobs) = queue.take(usize::MAX) {
        let (writes, replies): (Vec<Write>, Vec<_>) =
            jobs.into_iter().map(|j| (j.write, j.reply)).unzip();
        // A panic drops the replies unanswered (their tasks answer "did not finish"); the
        // committer lives on, as the engine's queue does after a leader's panic.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.write_each_then(writes, move |answers| {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    // A task that went away (its client disconnected) no longer wants it.
                    let _ = reply.send(answer);
                }
            })
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncelake::{Batch, CommitReport};

    async fn commit(
        c: &Committers,
        batch: Batch,
    ) -> Result<oncelake::Result<CommitReport>, Unanswered> {
        Ok(c.write(Write::Commit(batch)).await?.map(|w| match w {
            Written::Commit(r) => r,
            other => panic!("a commit answered {other:?}"),
        }))
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a test runtime")
    }

    #[test]
    fn every_commit_gets_its_own_answer_and_concurrent_ones_share_groups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path().join("lake")).expect("open");
        let staged = store.stage_bytes(b"rows").expect("stage");
        let c = Committers::start(&store, 2).expect("start");
        let groups_before = store.metrics().groups;
        let rt = runtime();
        let answers = rt.block_on(async {
            let calls = (0..64u64).map(|i| {
                // Unit i%32: each of the first 32 is committed once, then sent again.
                let batch = Batch::new().put(format!("u/{}", i % 32), 1, &staged);
                commit(&c, batch)
            });
            futures_util::future::join_all(calls).await
        });
        let mut committed = std::collections::BTreeMap::new();
        for (i, a) in answers.into_iter().enumerate() {
            let report = a.expect("answered").expect("committed or rejected");
            assert_eq!(report.units.len(), 1);
            assert_eq!(report.units[0].unit, format!("u/{}", i % 32));
            *committed.entry(report.units[0].outcome.name()).or_insert(0) += 1;
        }
        // Exactly one of each unit's two sends is committed, the other is a duplicate.
        assert_eq!(committed.get("committed"), Some(&32), "{committed:?}");
        assert_eq!(committed.get("duplicate"), Some(&32), "{committed:?}");
        let groups = store.metrics().groups - groups_before;
        assert!(
            groups < 64,
            "64 commits queued at once took {groups} groups: they did not share"
        );
        drop(c);
        for u in 0..32 {
            assert!(store.lookup(&format!("u/{u}")).expect("lookup").is_some());
        }
    }

    #[test]
    fn a_bad_batch_is_refused_alone_and_dropping_answers_what_was_queued() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path().join("lake")).expect("open");
        let other = Store::open(dir.path().join("other")).expect("open");
        let ours = store.stage_bytes(b"ours").expect("stage");
        let theirs = other.stage_bytes(b"theirs").expect("stage");
        let c = Committers::start(&store, 1).expect("start");
        let rt = runtime();
        let (good, bad) = rt.block_on(async {
            futures_util::future::join(
                commit(&c, Batch::new().put("a", 1, &ours)),
                commit(&c, Batch::new().put("b", 1, &theirs)),
            )
            .await
        });
        assert_eq!(
            good.expect("answered").expect("ok").units[0].outcome.name(),
            "committed"
        );
        assert!(bad.expect("answered").is_err(), "another store's handle");
        assert!(store.lookup("b").expect("lookup").is_none());
        drop(c);
    }
}
