//! A fixed set of threads serving one queue of jobs: made when the server starts, never exiting
//! before the set is dropped, so a burst of requests adds no thread. Dropping the set lets its
//! threads finish every job queued by then, then joins them. The committers (`committer.rs`:
//! each takes every job waiting) and the store threads (`pool.rs`: one job at a time) are two.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

struct State<J> {
    /// Jobs not yet taken, oldest first.
    waiting: VecDeque<J>,
    /// Set once, by the set's drop: the threads take what waits, then exit.
    stopping: bool,
}

/// The jobs of a set of [`Workers`].
pub(crate) struct Queue<J> {
    state: Mutex<State<J>>,
    /// Notified when jobs arrive ([`Queue::wake_one`]) or the threads are to stop.
    arrived: Condvar,
}

impl<J> Queue<J> {
    /// Queues `job` and returns how many jobs wait now. Wakes no thread: the caller decides
    /// when ([`Queue::wake_one`]), so that it can queue several first.
    pub(crate) fn push(&self, job: J) -> usize {
        let mut state = self.state.lock();
        state.waiting.push_back(job);
        state.waiting.len()
    }

    /// Wakes one waiting thread, if any.
    pub(crate) fn wake_one(&self) {
        self.arrived.notify_one();
    }

    /// Waits for jobs and takes at most `max` (at least one) of them, oldest first; `None` once
    /// the set is stopping and nothing waits.
    pub(crate) fn take(&self, max: usize) -> Option<Vec<J>> {
        let mut state = self.state.lock();
        loop {
            if !state.waiting.is_empty() {
                let n = state.waiting.len().min(max.max(1));
                return Some(state.waiting.drain(..n).collect());
            }
            if state.stopping {
                return None;
            }
            self.arrived.wait(&mut state);
        }
    }
}

/// The threads, each running `work` on the queue until [`Queue::take`] says stop.
pub(crate) struct Workers<J> {
    queue: Arc<Queue<J>>,
    threads: Vec<JoinHandle<()>>,
}

impl<J: Send + 'static> Workers<J> {
    /// Starts `n` (at least one) threads named `{name}-{i}`, with `stack` bytes of stack when
    /// given. A thread that cannot be started is an error, and the ones started are stopped.
    pub(crate) fn start(
        n: usize,
        name: &str,
        stack: Option<usize>,
        work: impl Fn(&Queue<J>) + Clone + Send + 'static,
    ) -> std::io::Result<Workers<J>> {
        let mut set = Workers {
            queue: Arc::new(Queue {
                state: Mutex::new(State {
                    waiting: VecDeque::new(),
                    stopping: false,
                }),
                arrived: Condvar::new(),
            }),
            threads: Vec::new(),
        };
        for i in 0..n.max(1) {
            let (queue, work) = (set.queue.clone(), work.clone());
            let mut b = std::thread::Builder::new().name(format!("{name}-{i}"));
            if let Some(s) = stack {
                b = b.stack_size(s);
            }
            set.threads.push(b.spawn(move || work(&queue))?);
        }
        Ok(set)
    }
}

impl<J> Workers<J> {
    /// Their queue.
    pub(crate) fn queue(&self) -> &Arc<Queue<J>> {
        &self.queue
    }
}

impl<J> Drop for Workers<J> {
    fn drop(&mut self) {
        self.queue.state.lock().stopping = true;
        self.queue.arrived.notify_all();
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            // A worker holds only the queue, never the set; were one to drop it, joining itself
            // would deadlock.
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}
