//! The lock-free group-commit queue (SPEC R6), after RocksDB's `WriteThread`.
//!
//! A writer links its request onto a shared stack with one compare-and-swap; it takes no lock to
//! enqueue. The writer that finds the stack empty becomes the *leader*: it takes the oldest pending
//! requests (bounded by a weight limit) as one group, lets the caller decide and persist them in one
//! transaction, hands leadership to the oldest request it did not take, and finally wakes every
//! member of its group with that member's own response.
//!
//! # States
//!
//! Each request lives in a [`Node`] whose [`State`] says who acts next; see the enum for what each
//! state means and who moves a node out of it. The queue as a whole is *idle* when
//! [`WriteQueue::newest`] is null and *busy* otherwise: then exactly one leader is at work (or
//! about to be woken), and every other pending node waits.
//!
//! ```text
//!   submit: push CAS ──▶ Waiting ──(found the stack empty: leads at once, state unchanged)──▶ own response
//!                           │
//!                           ├── hand_over: previous leader ──▶ Leader ──▶ lead a group from itself
//!                           └── answer: its group's leader ──▶ Done   ──▶ take its response
//! ```
//!
//! A node is decided exactly once because it is taken into exactly one group: groups are
//! contiguous runs of the oldest pending nodes, each leader starts its group at itself, and the
//! next leader is always the first node after the group.
//!
//! # The compare-and-swaps on `newest`
//!
//! - **push** (in [`WriteQueue::submit`]): `newest: old → me`, retried until it succeeds. With
//!   `old == null` the queue goes idle → busy and the pusher is its leader; otherwise the pusher
//!   stays `Waiting` behind `old`.
//! - **close** (in [`WriteQueue::hand_over`]): `newest: last → null`, tried once by a leader after
//!   its group is processed. Success: nobody arrived after the group, busy → idle. Failure: newer
//!   nodes exist; the oldest of them goes `Waiting → Leader` and the queue stays busy.
//!
//! # Ownership
//!
//! Every pushed node carries one `Arc` reference owned by the queue (made with `Arc::into_raw`);
//! the leader reclaims it with `Arc::from_raw` when it takes the node into its group, so each
//! reference is reclaimed exactly once and a node outlives every raw pointer to it. Who may touch
//! each field of a node, and when, is written on the field.
//!
//! The items are `pub` only so that the loom build can re-export them (`loom_support`); the module
//! itself is private to the crate.

use crate::sync::{Arc, AtomicBool, AtomicPtr, AtomicU8, Condvar, Mutex, Ordering, UnsafeCell};
use std::ptr;

/// Where a node is in the protocol. Stored in [`Node::state`] as its `u8` discriminant; every
/// change is a Release store by a leader ([`Node::set_state`]), observed by the node's owner with
/// an Acquire load ([`Node::await_change`]). A node changes state at most once.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Pushed and not yet decided: its request is still in it, its response is not. Its owner
    /// waits (spins, yields, then parks) for a leader to move it on — unless the push found the
    /// stack empty, in which case the owner leads at once and its own node stays `Waiting`
    /// (nobody else will ever look at it). Only a leader moves a node out of this state: to
    /// `Leader` (hand-over) or to `Done` (answer).
    Waiting = 0,
    /// The previous leader processed its group without this node and handed leadership to it:
    /// the node is the oldest pending one, its request still in it. Its owner must now lead a
    /// group that starts with this node. Final: the new leader answers its own node by reading
    /// its response directly, without a state change.
    Leader = 1,
    /// Its group's leader wrote the node's response and will not touch the node again except to
    /// notify its waiter. Its owner takes the response and returns. Final.
    Done = 2,
}

impl State {
    fn of(byte: u8) -> State {
        match byte {
            0 => State::Waiting,
            1 => State::Leader,
            2 => State::Done,
            other => unreachable!("invariant: a node's state byte is a State, got {other}"),
        }
    }
}

/// How many times a waiter looks at its state before it yields, and yields before it parks.
/// One yield only: with many more writers than cores (64 on 2), every further yield is a context
/// switch that takes the CPU from the leader and the applier (BENCHMARKS, P1: a third of all
/// samples were context switches with 16 yields; 1 yield gave 1.1–1.5× the units/s). Under loom
/// every look is a scheduling point, so one of each keeps both the spinning and the parking path
/// in the model without multiplying its state space.
#[cfg(not(loom))]
const SPINS: u32 = 64;
#[cfg(not(loom))]
const YIELDS: u32 = 1;
#[cfg(loom)]
const SPINS: u32 = 1;
#[cfg(loom)]
const YIELDS: u32 = 1;

/// What a request weighs against the group bound (units, bytes: whatever the caller counts).
pub trait Weighted {
    /// The request's weight.
    fn weight(&self) -> usize;
}

/// The response every member gets if the leader's processing panicked, and every member of
/// every later group (the queue is poisoned): nobody may wait forever, and nobody is decided
/// from what a panicked leader left behind (SPEC I10).
pub trait LeaderPanicked {
    /// The response for a request whose leader, or an earlier leader, panicked.
    fn leader_panicked() -> Self;
}

/// One writer's request on the queue. Who may read or write each field, and when:
struct Node<Req, Resp> {
    /// The node's [`State`] as a byte. Written only by a leader (Release, in
    /// [`Node::set_state`]): `Waiting → Leader` by the previous leader, `Waiting → Done` by the
    /// leader of the node's group. Read by the owner (Acquire, in [`Node::await_change`]).
    state: AtomicU8,
    /// The request. Written by the owner before the push CAS publishes the node; from then on
    /// read (for its weight) and taken only by the leader that considers the node for its group.
    req: UnsafeCell<Option<Req>>,
    /// The response. Written by the leader of the node's group before it publishes `Done`; read
    /// by the owner after it observed `Done`, or by that leader itself for its own node.
    resp: UnsafeCell<Option<Resp>>,
    /// The next older pending node (null for the oldest). Written by the owner before the push
    /// CAS publishes the node; read by leaders after an Acquire load of `newest` (link_newer).
    older: UnsafeCell<*const Node<Req, Resp>>,
    /// The next newer pending node. Written and read only by the current leader: leadership
    /// passes by `set_state(Leader)`, whose Release/Acquire pair orders one leader's writes before
    /// the next one's reads.
    newer: UnsafeCell<*const Node<Req, Resp>>,
    /// With `wake`: lets a waiter park. Any thread may lock it; a leader locks it to notify.
    park: Mutex<()>,
    /// Notified by a leader after every state change, under `park`.
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
    /// Moves the node out of `Waiting` (leaders only) and wakes its owner.
    fn set_state(&self, state: State) {
        #[cfg(loom)]
        self.publishing.fetch_add(1, Ordering::SeqCst);
        self.state.store(state as u8, Ordering::Release);
        {
            // Taking the mutex orders the store before a parked waiter's re-check, so no wake-up
            // is lost.
            let _guard = self.park.lock();
            self.wake.notify_all();
        }
        #[cfg(loom)]
        self.publishing.fetch_sub(1, Ordering::SeqCst);
    }

    /// The owner's wait for its node to leave `Waiting`: spin, then yield, then park.
    fn await_change(&self) -> State {
        let look = || State::of(self.state.load(Ordering::Acquire));
        for _ in 0..SPINS {
            match look() {
                State::Waiting => crate::sync::spin_hint(),
                s => return s,
            }
        }
        for _ in 0..YIELDS {
            match look() {
                State::Waiting => crate::sync::yield_now(),
                s => return s,
            }
        }
        let mut guard = self.park.lock();
        loop {
            match look() {
                State::Waiting => guard = self.wake.wait(guard),
                s => return s,
            }
        }
    }
}

/// The queue itself: one atomic pointer to the newest pending node.
pub struct WriteQueue<Req, Resp> {
    /// The newest pending node, null when the queue is idle. Changed only by the two CASes of
    /// the module documentation: *push* (any writer, AcqRel) and *close* (the leader, AcqRel);
    /// read with Acquire by the leader to find the nodes pushed since it last looked.
    newest: AtomicPtr<Node<Req, Resp>>,
    /// The group bound; fixed at creation.
    max_weight: usize,
    /// Set (Release) by a leader whose processing panicked, *before* it hands leadership on;
    /// read (Acquire) by every later leader before it processes anything. Leadership passes by
    /// `set_state(Leader)` (Release/Acquire) or by the close and push CASes (AcqRel), so every
    /// later leader sees it. Never cleared: the caller's state behind the queue is unknown
    /// after a panic, so no later group may be decided on it.
    poisoned: AtomicBool,
}

/// The group a leader took: the nodes (their queue references reclaimed, oldest first) and their
/// requests in the same order.
struct Group<Req, Resp> {
    nodes: Vec<Arc<Node<Req, Resp>>>,
    reqs: Vec<Req>,
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
            poisoned: AtomicBool::new(false),
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
            state: AtomicU8::new(State::Waiting as u8),
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

        let older = self.push(&node, me);
        if !older.is_null() && node.await_change() == State::Done {
            return Self::take_response(&node);
        }
        // Either the stack was empty (we are the oldest pending node, still `Waiting`) or the
        // previous leader handed leadership to us (`Leader`).
        self.lead(me, &process);
        Self::take_response(&node)
    }

    /// The *push* CAS: links `node` (raw pointer `me`) in as the newest pending node. Returns the
    /// node it was pushed onto: null means the queue was idle and the caller now leads.
    fn push(&self, node: &Node<Req, Resp>, me: *const Node<Req, Resp>) -> *const Node<Req, Resp> {
        let mut head = self.newest.load(Ordering::Relaxed);
        loop {
            // SAFETY: the node is not yet published, so this thread is its only accessor.
            unsafe { node.older.with_mut(|p| *p = head) };
            // Transition: idle → busy (head null, we lead) or a new `Waiting` node behind head.
            match self.newest.compare_exchange_weak(
                head,
                me as *mut _,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return head,
                Err(actual) => head = actual,
            }
        }
    }

    fn take_response(node: &Node<Req, Resp>) -> Resp {
        // SAFETY: the leader wrote the response before publishing Done (Release), and we observed
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

    /// Leads the group that starts at `me`, the oldest pending node: take the group, process
    /// it, hand leadership on, answer the members. Handing on comes *before* the answers so the
    /// next group starts while this leader is still waking its members.
    fn lead<F>(&self, me: *const Node<Req, Resp>, process: &F)
    where
        F: Fn(Vec<Req>) -> Vec<Resp>,
    {
        let newest = self.link_newer(me);
        let Group { nodes, reqs } = self.take_group(me, newest);
        let last = Arc::as_ptr(
            nodes
                .last()
                .expect("invariant: a group holds at least its leader"),
        );
        let resps = self.process_group(reqs, process);
        self.hand_over(last);
        Self::answer(&nodes, resps, me);
    }

    /// Takes the group: the oldest pending nodes from `me` towards `newest` (linked by
    /// [`Self::link_newer`]), stopping *before* a request that would take it over its bound, so
    /// that the bound holds for every group of two or more requests (a lone heavy one still goes).
    fn take_group(
        &self,
        me: *const Node<Req, Resp>,
        newest: *const Node<Req, Resp>,
    ) -> Group<Req, Resp> {
        let mut group = Group {
            nodes: Vec::new(),
            reqs: Vec::new(),
        };
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
            group.reqs.push(req);
            group.nodes.push(node);
            if p == newest {
                return group;
            }
            // SAFETY: `newer` was set by `link_newer` for every node older than `newest`.
            let next = unsafe { (*p).newer.with_mut(|n| *n) };
            // SAFETY: `next` is pending (alive, its request still in it) and only the leader,
            // which is us, touches a pending node's request.
            let next_weight =
                unsafe { (*next).req.with_mut(|r| (*r).as_ref().map(|r| r.weight())) }
                    .expect("invariant: a pending node still holds its request");
            if weight.saturating_add(next_weight) > self.max_weight {
                return group;
            }
            p = next;
        }
    }

    /// Runs the caller's processing on the group's requests. If it panics, every member gets
    /// [`LeaderPanicked::leader_panicked`] (nobody may wait forever) and the queue is poisoned
    /// before the caller hands leadership on; a poisoned queue answers every later group the
    /// same way without processing it (SPEC I10).
    fn process_group<F>(&self, reqs: Vec<Req>, process: &F) -> Vec<Resp>
    where
        F: Fn(Vec<Req>) -> Vec<Resp>,
    {
        let count = reqs.len();
        let panicked = || (0..count).map(|_| Resp::leader_panicked()).collect();
        if self.poisoned.load(Ordering::Acquire) {
            return panicked();
        }
        let resps = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| process(reqs))) {
            Ok(r) => r,
            Err(_) => {
                self.poisoned.store(true, Ordering::Release);
                panicked()
            }
        };
        assert_eq!(
            resps.len(),
            count,
            "invariant: the group processor returns one response per request"
        );
        resps
    }

    #[cfg(any(test, loom))]
    /// Whether a leader's processing panicked: every later request is answered with
    /// [`LeaderPanicked::leader_panicked`].
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// The *close* CAS, then the hand-over: if `last` (the group's newest node, still owned by
    /// us) is still the newest pending node, the queue goes idle; otherwise the oldest node after
    /// the group goes `Waiting → Leader`.
    fn hand_over(&self, last: *const Node<Req, Resp>) {
        // Transition: busy → idle, when nobody pushed after `last`.
        let closed = self
            .newest
            .compare_exchange(
                last as *mut _,
                ptr::null_mut(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if closed {
            return;
        }
        // New nodes arrived after `last` (or the bound cut the group short): link them and pick
        // the oldest one.
        self.link_newer(last);
        // SAFETY: `last` is still owned by us (in the group), and its `newer` link was just set.
        let next = unsafe { (*last).newer.with_mut(|n| *n) };
        if next.is_null() {
            return;
        }
        // Hold a reference of our own while we publish Leader and notify: once `next` sees
        // Leader it may lead, reclaim the queue's reference and return, dropping the node while
        // we are still inside `set_state` (taking its park mutex). A bare pointer here would be
        // a use-after-free.
        // SAFETY: `next` is pending, so the queue's reference keeps it alive until it sees
        // Leader, which happens only in the `set_state` below, after the increment.
        let next = unsafe {
            Arc::increment_strong_count(next);
            Arc::from_raw(next)
        };
        // Transition: Waiting → Leader.
        next.set_state(State::Leader);
    }

    /// Gives every member its response; every member but the leader (`me`, which reads its own
    /// directly) goes `Waiting → Done`.
    fn answer(nodes: &[Arc<Node<Req, Resp>>], resps: Vec<Resp>, me: *const Node<Req, Resp>) {
        for (node, resp) in nodes.iter().zip(resps) {
            // SAFETY: the owner reads `resp` only after it observes Done, which we publish after
            // this write (Release in `set_state`).
            unsafe { node.resp.with_mut(|r| *r = Some(resp)) };
            if !ptr::eq(Arc::as_ptr(node), me) {
                // Transition: Waiting → Done.
                node.set_state(State::Done);
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
    fn a_panicking_leader_answers_every_member_and_poisons_the_queue() {
        let q = WriteQueue::<Req, Resp>::new(8);
        let done = |reqs: Vec<Req>| -> Vec<Resp> {
            reqs.into_iter()
                .map(|r| Resp::Done { req: r.0, group: 0 })
                .collect()
        };
        assert_eq!(q.submit(Req(0), done), Resp::Done { req: 0, group: 0 });
        assert!(!q.is_poisoned());
        let r = q.submit(Req(1), |_| panic!("boom"));
        assert_eq!(r, Resp::Panicked);
        assert!(q.is_poisoned());
        // No later group is processed: its leader would decide from what the panic left.
        let processed = AtomicUsize::new(0);
        let r = q.submit(Req(2), |reqs| {
            processed.fetch_add(1, Ordering::SeqCst);
            done(reqs)
        });
        assert_eq!(r, Resp::Panicked);
        assert_eq!(processed.load(Ordering::SeqCst), 0);
    }

    /// Many writers, one leader panics: every request answered before the panic was processed
    /// by a group that began before it, and every group that began after it was answered
    /// without being processed, whatever the interleaving.
    #[test]
    fn no_group_is_processed_after_a_panicked_one() {
        for round in 0..20 {
            let q = std::sync::Arc::new(WriteQueue::<Req, Resp>::new(4));
            // Group numbers in processing order; `usize::MAX` marks the panicked one.
            let order = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let (q, order) = (q.clone(), order.clone());
                    std::thread::spawn(move || {
                        let mut answers = Vec::new();
                        for i in 0..50 {
                            let id = t * 1000 + i;
                            let resp = q.submit(Req(id), |reqs| {
                                let mut o = order.lock();
                                if o.len() == 20 + round {
                                    o.push(usize::MAX);
                                    drop(o);
                                    panic!("planned");
                                }
                                let g = o.len();
                                o.push(g);
                                reqs.into_iter()
                                    .map(|r| Resp::Done { req: r.0, group: g })
                                    .collect()
                            });
                            answers.push(resp);
                        }
                        answers
                    })
                })
                .collect();
            let answers: Vec<Resp> = handles
                .into_iter()
                .flat_map(|h| h.join().expect("a writer thread"))
                .collect();
            let order = order.lock().clone();
            let at = order.iter().position(|&g| g == usize::MAX);
            let at = at.expect("the planned panic happened");
            assert_eq!(order.len(), at + 1, "a group was processed after the panic");
            for a in answers {
                if let Resp::Done { group, .. } = a {
                    assert!(group < at);
                }
            }
        }
    }
}
