//! The server's committers: every write of a connection — commit, claim, renewal, release — is
//! handed to the engine's submission queue ([`oncelake::Store::submit_then`]), whose threads
//! take every write waiting at the moment they look and commit them as one request, so that
//! writes from many connections share a durable group while no connection thread, and no
//! thread of the server's, waits for one.
//!
//! Why: a commit waits for a group's synced append (a millisecond or more). A connection thread
//! that waited for it itself could serve no other connection meanwhile, so the server needed a
//! thread per connection in flight, and every commit cost three wake-ups on the server (the
//! request waking its thread, the engine parking and waking it, the answer) where an in-process
//! writer costs one (BENCHMARKS.md, "Server"). Here a connection's task queues its write and
//! awaits the answer; a submission thread wakes once for however many writes are waiting, one
//! engine wait carries them all, and each answer wakes its connection's task on the connection
//! thread, which then writes many answers per wake-up.
//!
//! Several submission threads (`--committers`), because one whose group is answered may go on
//! to help apply the backlog to the B-trees before it takes the next writes: meanwhile the
//! others gather and lead.

use oncelake::{Store, Write, Written};

/// Submission threads a server starts unless told otherwise.
pub const DEFAULT_COMMITTERS: usize = 4;

/// The committers of a server: its store's submission queue. Dropping it leaves the writes
/// queued by then to the store, which answers every one of them before it closes.
pub(crate) struct Committers {
    /// Taken only by the drop.
    store: Option<Store>,
}

impl Drop for Committers {
    fn drop(&mut self) {
        // This may be the store's last handle, and closing a store (a lake node's runtime among
        // it) must not happen on an async thread, where the server drops its state: close it
        // on a thread of its own, and wait for that as for any close.
        if let Some(store) = self.store.take() {
            let _ = std::thread::Builder::new()
                .name("oncelake-close".into())
                .spawn(move || drop(store))
                .map(|t| t.join());
        }
    }
}

/// The write was not answered: the store's submission thread went away without answering
/// (whether it reached the disk is not known to the server).
#[derive(Debug)]
pub(crate) struct Unanswered;

impl Committers {
    /// Starts `n` (at least one) submission threads on `store`.
    pub(crate) fn start(store: &Store, n: usize) -> std::io::Result<Committers> {
        store
            .start_submit_threads(n)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Committers {
            store: Some(store.clone()),
        })
    }

    /// Queues `write` for the store's submission threads and waits for its answer.
    pub(crate) async fn write(
        &self,
        write: Write,
    ) -> Result<oncelake::Result<Written>, Unanswered> {
        let Some(store) = &self.store else {
            unreachable!("invariant: only the drop takes the store");
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        let queued = store.submit_then(write, move |a| {
            // A task that went away (its client disconnected) no longer wants it.
            let _ = reply.send(a);
        });
        if let Err(e) = queued {
            return Ok(Err(e));
        }
        answer.await.map_err(|_| Unanswered)
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
