//! Tables that keep up by themselves: a background thread that publishes every table when the
//! store's newest seq has moved, at most once per interval. Commits in between coalesce into one
//! publish run (still one table version per store commit), so a table is at most about one
//! interval (plus the publish itself) behind, and an idle store costs one read per interval.

use super::{PublishReport, TableResult};
use crate::store::Store;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Default)]
struct State {
    stop: bool,
    /// Every table is published up to this seq.
    published: u64,
    /// Rounds finished (wakes waiters even when a round fails).
    rounds: u64,
    last_error: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// Publishes a store's tables in the background (see the module docs). Dropping it stops the
/// thread after its current round.
pub struct AutoPublisher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// A forked child's copy neither stops nor joins a thread that only its parent has.
    owner: crate::owner::Owner,
}

impl std::fmt::Debug for AutoPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoPublisher").finish_non_exhaustive()
    }
}

impl AutoPublisher {
    /// Starts publishing `store`'s tables whenever its newest seq moved, checking every
    /// `interval`.
    pub fn start(store: Store, interval: Duration) -> AutoPublisher {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("oncelake-tables".into())
            .spawn(move || run(store, interval, &s))
            .ok();
        AutoPublisher {
            shared,
            thread,
            owner: crate::owner::Owner::this_process(),
        }
    }

    /// Waits until every table is published at least up to `seq`, or `timeout` passes; returns
    /// whether it got there. A failing round ends the wait early with its error.
    pub fn wait_published(&self, seq: u64, timeout: Duration) -> Result<bool, String> {
        let deadline = std::time::Instant::now() + timeout;
        let mut st = self.shared.state.lock();
        loop {
            if st.published >= seq {
                return Ok(true);
            }
            if let Some(e) = &st.last_error {
                return Err(e.clone());
            }
            if self
                .shared
                .changed
                .wait_until(&mut st, deadline)
                .timed_out()
            {
                return Ok(st.published >= seq);
            }
        }
    }

    /// The error of the newest round, if it failed (the next rounds retry).
    pub fn last_error(&self) -> Option<String> {
        self.shared.state.lock().last_error.clone()
    }
}

impl Drop for AutoPublisher {
    fn drop(&mut self) {
        if !self.owner.is_current() {
            // The thread is the parent's: this process does not have it, and std's join of it
            // panics (`owner`).
            std::mem::forget(self.thread.take());
            return;
        }
        self.shared.state.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(store: Store, interval: Duration, shared: &Shared) {
    loop {
        let outcome = round(&store, shared.state.lock().published);
        let mut st = shared.state.lock();
        match outcome {
            Ok(Some(seq)) => {
                st.published = seq;
                st.last_error = None;
            }
            Ok(None) => {}
            Err(e) => st.last_error = Some(e.to_string()),
        }
        st.rounds += 1;
        shared.changed.notify_all();
        if st.stop {
            return;
        }
        shared.changed.wait_for(&mut st, interval);
        if st.stop {
            return;
        }
    }
}

/// One round: publishes when the store moved past `published`; the seq it got to.
fn round(store: &Store, published: u64) -> TableResult<Option<u64>> {
    let newest = store.last_seq()?;
    if newest <= published && published > 0 {
        return Ok(None);
    }
    let _reports: Vec<PublishReport> = store.publish_tables()?;
    Ok(Some(newest))
}
