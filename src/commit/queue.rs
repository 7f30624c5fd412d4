//! The lock-free group-commit queue (SPEC R6), after RocksDB's `WriteThread`.
//!
//! A writer links its request onto a shared stack with one compare-and-swap; it takes no lock to
//! enqueue. The writer that finds the stack empty becomes the *leader*: it takes the oldest pending
//! requests (bounded by a weight limit) as one group, lets the caller decide and persist them in one
//! transaction, hands leadership to the oldest request it did not take, and finally wakes every
//! member of its group with that member's own response.
//!
//! States of a node: `WAITING` → `LEADER` (it must now lead a group that starts with itself) or
//! `WAITING` → `DONE` (its response is ready). A node is decided exactly once because it is taken
//! into exactly one group: groups are contiguous runs of the oldest pending nodes, each leader
//! starts its group at itself, and the next leader is always the first node after the group.
//!
//! Ownership: every pushed node carries one `Arc` reference owned by the queue (made with
//! `Arc::into_raw`); the leader reclaims it with `Arc::from_raw` when it takes the node into its
//! group, so each reference is reclaimed exactly once and a node outlives every raw pointer to it.
//!
//! The items are `pub` only so that the loom build can re-export them (`loom_support`); the module
//! itself is private to the crate.

use crate::sync::{Arc, AtomicPtr, AtomicU8, Condvar, Mutex, Ordering, UnsafeCell};
use std::ptr;

const WAITING: u8 = 0;
const LEADER: u8 = 1;
const DONE: u8 = 2;

/// How many times a waiter looks at its state before it yields, and yields before it parks.
/// Under loom every look is a scheduling point, so one of each keeps both the spinning and the
/// parking path in the model without multiplying its state space.
#[cfg(not(loom))]
const SPINS: u32 = 64;
#[cfg(not(loom))]
const YIELDS: u32 = 16;
#[cfg(loom)]
const SPINS: u32 = 1;
#[cfg(loom)]
const YIELDS: u32 = 1;

/// What a request weighs against the group bound (units, bytes: whatever the caller counts).
pub trait Weighted {
    /// The request's weight.
    fn weight(&self) -> usize;
}

/// The response every member gets if the leader's processing panicked: nobody may wait forever.
pub trait LeaderPanicked {
    /// The response for a request whose leader panicked.
    fn leader_panicked() -> Self;
}

struct Node<Req, Resp> {
    state: AtomicU8,
    /// Taken by the leader of the node's group.
    req: UnsafeCell<Option<Req>>,
    /// Written by the leader before it publishes `DONE`.
    resp: UnsafeCell<Option<Resp>>,
    /// The next older node; written by the owner before the node is published by the CAS.
    older: UnsafeCell<*const Node<Req, Resp>>,
    /// The next newer node; written and read only by successive leaders.
    newer: UnsafeCell<*const Node<Req, Resp>>,
    park: Mutex<()>,
    wake: Condvar,
    /// Loom only: how many threads are inside [`Node::set_state`] on this node. Dropping a node
    /// while one is would be a use-after-free; the `Drop` check below lets loom find it.
    #[cfg(loom)]
    publishing: loom::sync::atomic::AtomicUsize,
}

#[cfg(loom)]
impl<Req, Resp> Drop for Node<Req, Resp> {
    fn drop(&mut self) {
        assert_eq!(
            self.publishing.load(Ordering::SeqCst),
            0,
            "use after free: a node was dropped while another thread was still publishing its state"
        );
    }
}

// SAFETY: the raw pointers inside a node are only dereferenced under the protocol described in the
// module documentation; the request and response move between threads, hence the `Send` bounds.
unsafe impl<Req: Send, Resp: Send> Send for Node<Req, Resp> {}
// SAFETY: every `UnsafeCell` field has a single writer at a time, ordered by `state` (Release on
// store, Acquire on load) or by the CAS on `newest`; see each access.
unsafe impl<Req: Send, Resp: Send> Sync for Node<Req, Resp> {}

impl<Req, Resp> Node<Req, Resp> {
    fn set_state(&self, state: u8) {
        #[cfg(loom)]
        self.publishing.fetch_add(1, Ordering::SeqCst);
        self.state.store(state, Ordering::Release);
        {
            // Taking the mutex orders the store before a parked waiter's re-check, so no wake-up
            // is lost.
            let _guard = self.park.lock();
            self.wake.notify_all();
        }
        #[cfg(loom)]
        self.publishing.fetch_sub(1, Ordering::SeqCst);
    }

    fn await_change(&self) -> u8 {
        for _ in 0..SPINS {
            let s = self.state.load(Ordering::Acquire);
            if s != WAITING {
                return s;
            }
            crate::sync::spin_hint();
        }
        for _ in 0..YIELDS {
            let s = self.state.load(Ordering::Acquire);
            if s != WAITING {
                return s;
            }
            crate::sync::yield_now();
        }
        let mut guard = self.park.lock();
        loop {
            let s = self.state.load(Ordering::Acquire);
            if s != WAITING {
                return s;
            }
            guard = self.wake.wait(guard);
        }
    }
}

/// The queue itself: one atomic pointer to the newest pending node.
pub struct WriteQueue<Req, Resp> {
    newest: AtomicPtr<Node<Req, Resp>>,
    max_weight: usize,
}

// SAFETY: the queue only holds pointers to nodes, which are `Send + Sync` for `Send` payloads.
unsafe impl<Req: Send, Resp: Send> Send for WriteQueue<Req, Resp> {}
// SAFETY: as above; all shared state is reached through the atomic `newest`.
unsafe impl<Req: Send, Resp: Send> Sync for WriteQueue<Req, Resp> {}

impl<Req: Weighted + Send, Resp: LeaderPanicked + Send> WriteQueue<Req, Resp> {
    /// A queue whose groups weigh at most `max_weight` (a single heavier request still forms a group).
    pub fn new(max_weight: usize) -> Self {
        WriteQueue {
            newest: AtomicPtr::new(ptr::null_mut()),
            max_weight: max_weight.max(1),
        }
    }

    /// Enqueues `req` and returns its response. `process` is called by whichever thread leads the
    /// group that contains `req`, with the group's requests oldest first, and must return one
    /// response per request in the same order.
    pub fn submit<F>(&self, req: Req, process: F) -> Resp
    where
        F: Fn(Vec<Req>) -> Vec<Resp>,
    {
        let node = Arc::new(Node {
            state: AtomicU8::new(WAITING),
            req: UnsafeCell::new(Some(req)),
            resp: UnsafeCell::new(None),
            older: UnsafeCell::new(ptr::null()),
            newer: UnsafeCell::new(ptr::null()),
            park: Mutex::new(()),
            wake: Condvar::new(),
            #[cfg(loom)]
            publishing: loom::sync::atomic::AtomicUsize::new(0),
        });
        let me = Arc::into_raw(node.clone());

        let mut head = self.newest.load(Ordering::Relaxed);
        loop {
            // SAFETY: the node is not yet published, so this thread is its only accessor.
            unsafe { node.older.with_mut(|p| *p = head) };
            match self.newest.compare_exchange_weak(
                head,
                me as *mut _,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => head = actual,
            }
        }

        if !head.is_null() && node.await_change() == DONE {
            return Self::take_response(&node);
        }
        // Either the stack was empty (we are the oldest pending node) or the previous leader
        // handed leadership to us.
        self.lead(me, &process);
        Self::take_response(&node)
    }

    fn take_response(node: &Node<Req, Resp>) -> Resp {
        // SAFETY: the leader wrote the response before publishing DONE (Release), and we observed
        // that state with Acquire (or we are the leader ourselves); nobody writes it afterwards.
        unsafe { node.resp.with_mut(|r| (*r).take()) }
            .expect("invariant: a decided node always carries a response")
    }

    /// Makes `newer` links from the current newest node back to `stop`, so a leader can walk the
    /// pending nodes oldest first. Returns the newest node seen.
    fn link_newer(&self, stop: *const Node<Req, Resp>) -> *const Node<Req, Resp> {
        let newest = self.newest.load(Ordering::Acquire) as *const Node<Req, Resp>;
        let mut p = newest;
        while p != stop {
            // SAFETY: every node from `newest` back to `stop` is pending (its queue reference is
            // unclaimed), so it is alive; its `older` was written before the CAS that published it,
            // which our Acquire load of `newest` synchronises with. `newer` is only touched by the
            // current leader, which is us.
            unsafe {
                let older = (*p).older.with_mut(|o| *o);
                (*older).newer.with_mut(|n| *n = p);
                p = older;
            }
        }
        newest
    }

    fn lead<F>(&self, me: *const Node<Req, Resp>, process: &F)
    where
        F: Fn(Vec<Req>) -> Vec<Resp>,
    {
        let newest = self.link_newer(me);

        // Take the group: the oldest nodes, starting with ourselves, within the weight bound.
        let mut group: Vec<Arc<Node<Req, Resp>>> = Vec::new();
        let mut reqs = Vec::new();
        let mut weight = 0usize;
        let mut p = me;
        loop {
            // SAFETY: `p` is pending and in the linked run from `me` to `newest`; reclaiming the
            // queue's reference makes us its owner, exactly once, since no later group starts
            // before the next leader, which is after it.
            let node = unsafe { Arc::from_raw(p) };
            // SAFETY: the owner wrote `req` before publishing the node; only the leader takes it.
            let req = unsafe { node.req.with_mut(|r| (*r).take()) }
                .expect("invariant: a pending node still holds its request");
            weight += req.weight();
            reqs.push(req);
            group.push(node);
            if p == newest {
                break;
            }
            // SAFETY: `newer` was set by `link_newer` above for every node older than `newest`.
            let next = unsafe { (*p).newer.with_mut(|n| *n) };
            // Stop *before* a request that would take the group over its bound, so that the
            // bound holds for every group of two or more requests (a lone heavy one still goes).
            // SAFETY: `next` is pending (alive, its request still in it) and only the leader,
            // which is us, touches a pending node's request.
            let next_weight =
                unsafe { (*next).req.with_mut(|r| (*r).as_ref().map(|r| r.weight())) }
                    .expect("invariant: a pending node still holds its request");
            if weight.saturating_add(next_weight) > self.max_weight {
                break;
            }
            p = next;
        }
        let last = p;

        let count = reqs.len();
        let resps = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| process(reqs))) {
            Ok(r) => r,
            Err(_) => (0..count).map(|_| Resp::leader_panicked()).collect(),
        };
        assert_eq!(
            resps.len(),
            count,
            "invariant: the group processor returns one response per request"
        );

        // Hand leadership to the first node after the group, if there is one.
        let next = if self
            .newest
            .compare_exchange(
                last as *mut _,
                ptr::null_mut(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            ptr::null()
        } else {
            // New nodes arrived after `last` (or the bound cut the group short): link them and
            // pick the oldest one.
            self.link_newer(last);
            // SAFETY: `last` is still owned by us (in `group`), and its `newer` link was just set.
            unsafe { (*last).newer.with_mut(|n| *n) }
        };
        if !next.is_null() {
            // Hold a reference of our own while we publish LEADER and notify: once `next` sees
            // LEADER it may lead, reclaim the queue's reference and return, dropping the node
            // while we are still inside `set_state` (taking its park mutex). A bare pointer here
            // would be a use-after-free.
            // SAFETY: `next` is pending, so the queue's reference keeps it alive until it sees
            // LEADER, which happens only in the `set_state` below, after the increment.
            let next = unsafe {
                Arc::increment_strong_count(next);
                Arc::from_raw(next)
            };
            next.set_state(LEADER);
        }

        for (node, resp) in group.iter().zip(resps) {
            // SAFETY: the owner reads `resp` only after it observes DONE, which we publish after
            // this write (Release in `set_state`).
            unsafe { node.resp.with_mut(|r| *r = Some(resp)) };
            if !ptr::eq(Arc::as_ptr(node), me) {
                node.set_state(DONE);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Req(usize);
    impl Weighted for Req {
        fn weight(&self) -> usize {
            1
        }
    }
    #[derive(Debug, PartialEq)]
    enum Resp {
        Done { req: usize, group: usize },
        Panicked,
    }
    impl LeaderPanicked for Resp {
        fn leader_panicked() -> Self {
            Resp::Panicked
        }
    }

    #[test]
    fn every_request_is_answered_once_with_its_own_response() {
        let q = std::sync::Arc::new(WriteQueue::<Req, Resp>::new(8));
        let groups = std::sync::Arc::new(AtomicUsize::new(0));
        let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let handles: Vec<_> = (0..16)
            .map(|t| {
                let (q, groups, seen) = (q.clone(), groups.clone(), seen.clone());
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let id = t * 1000 + i;
                        let resp = q.submit(Req(id), |reqs| {
                            assert!(reqs.len() <= 8, "group exceeds its bound");
                            let g = groups.fetch_add(1, Ordering::SeqCst);
                            seen.lock().extend(reqs.iter().map(|r| r.0));
                            reqs.into_iter()
                                .map(|r| Resp::Done { req: r.0, group: g })
                                .collect()
                        });
                        match resp {
                            Resp::Done { req, .. } => assert_eq!(req, id),
                            Resp::Panicked => panic!("unexpected panic response"),
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let mut seen = seen.lock().clone();
        assert_eq!(seen.len(), 16 * 200);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 16 * 200, "a request was processed twice");
    }

    #[test]
    fn a_panicking_leader_answers_every_member() {
        let q = WriteQueue::<Req, Resp>::new(8);
        let r = q.submit(Req(1), |_| panic!("boom"));
        assert_eq!(r, Resp::Panicked);
        // The queue still works afterwards.
        let r = q.submit(Req(2), |reqs| {
            reqs.into_iter()
                .map(|r| Resp::Done { req: r.0, group: 0 })
                .collect()
        });
        assert_eq!(r, Resp::Done { req: 2, group: 0 });
    }
}
