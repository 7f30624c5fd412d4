//! Model checks of the group-commit queue (SPEC R6) under loom.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target-loom cargo test --no-default-features --test loom`
//!
//! Loom runs every interleaving of the threads (up to the preemption bound) on the queue's real
//! code, which takes its atomics, mutexes and condition variables from `src/sync.rs`. The leader's
//! processing writes to a `loom::cell::UnsafeCell`, so loom also proves that no two leaders ever
//! process at once and that each leader sees everything the previous one did (happens-before via
//! the hand-off). A writer that waits forever is reported by loom as a deadlock; a node whose
//! queue reference is reclaimed twice or never is a double free or a leak, which loom reports too.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use oncelake::commit::rules::{decide, Current, Decision, Incoming, Intent};
use oncelake::loom_support::{Backlog, Group, LeaderPanicked, Unlisted, Weighted, WriteQueue};
use oncelake::{ObjectId, Outcome};

/// A request of weight `weight`, named by `id`.
struct Req {
    id: usize,
    weight: usize,
}

impl Weighted for Req {
    fn weight(&self) -> usize {
        self.weight
    }
}

/// The answer: which request it was decided for and in which group (index into the ledger).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Resp {
    Decided { id: usize, group: usize },
    Panicked,
}

impl LeaderPanicked for Resp {
    fn leader_panicked() -> Self {
        Resp::Panicked
    }
}

/// What the leaders did, group by group. Only a leader touches it, inside `process`.
struct Ledger(UnsafeCell<Vec<Vec<(usize, usize)>>>);

// SAFETY: loom checks every access to the inner cell for races; that is the point of the model.
unsafe impl Sync for Ledger {}

type Queue = WriteQueue<Req, Resp>;

/// A queue of the model's requests and the ledger its leaders record their groups in, shared.
fn queue_and_ledger() -> (Arc<Queue>, Arc<Ledger>) {
    (
        Arc::new(WriteQueue::new(MAX_WEIGHT)),
        Arc::new(Ledger(UnsafeCell::new(Vec::new()))),
    )
}
// SAFETY: as above.
unsafe impl Send for Ledger {}

const MAX_WEIGHT: usize = 2;

/// A writer thread that submits `reqs` in turn, each group recorded in `ledger`: its answers, each
/// with its request's id.
fn writer(
    queue: &Arc<Queue>,
    ledger: &Arc<Ledger>,
    reqs: Vec<Req>,
) -> thread::JoinHandle<Vec<(usize, Resp)>> {
    let (queue, ledger) = (queue.clone(), ledger.clone());
    thread::spawn(move || {
        reqs.into_iter()
            .map(|req| {
                let id = req.id;
                (id, queue.submit(req, |reqs| record(&ledger, reqs)))
            })
            .collect()
    })
}

/// The leader's processing in model (a): record the group, answer each request with its own id.
fn record(ledger: &Ledger, reqs: Vec<Req>) -> Vec<Resp> {
    ledger.0.with_mut(|groups| {
        // SAFETY: loom verifies that this access does not race with any other.
        let groups = unsafe { &mut *groups };
        let weight: usize = reqs.iter().map(|r| r.weight).sum();
        assert!(
            reqs.len() == 1 || weight <= MAX_WEIGHT,
            "a group of {} requests weighs {weight} > {MAX_WEIGHT}",
            reqs.len()
        );
        let g = groups.len();
        groups.push(reqs.iter().map(|r| (r.id, r.weight)).collect());
        reqs.iter()
            .map(|r| Resp::Decided { id: r.id, group: g })
            .collect()
    })
}

/// Checks what every model (a) run must satisfy once all writers returned.
fn check_ledger(ledger: &Ledger, answers: &[(usize, Resp)], n: usize) {
    ledger.0.with(|groups| {
        // SAFETY: all writers have been joined; loom checks the join ordered their writes.
        let groups = unsafe { &*groups };
        let mut decided: Vec<usize> = groups.iter().flatten().map(|&(id, _)| id).collect();
        decided.sort_unstable();
        assert_eq!(
            decided,
            (0..n).collect::<Vec<_>>(),
            "every request must be decided exactly once (groups: {groups:?})"
        );
        for &(id, resp) in answers {
            match resp {
                Resp::Decided { id: got, group } => {
                    assert_eq!(got, id, "writer {id} got another writer's response");
                    assert!(
                        groups[group].iter().any(|&(r, _)| r == id),
                        "writer {id} was told group {group}, which does not hold it: {groups:?}"
                    );
                }
                Resp::Panicked => panic!("writer {id} got a panic response; no leader panicked"),
            }
        }
    });
}

/// (a) Three writers enqueue at once through a queue whose groups weigh at most 2, so a leader
/// must sometimes leave a request behind and hand leadership on. Every request is decided exactly
/// once, by exactly one group, each writer gets its own response, and nobody waits forever.
#[test]
fn three_writers_bounded_groups_every_request_decided_once() {
    loom::model(|| {
        let (queue, ledger) = queue_and_ledger();
        let spawn = |id: usize| writer(&queue, &ledger, vec![Req { id, weight: 1 }]);
        let handles = [spawn(1), spawn(2)];
        let mine = queue.submit(Req { id: 0, weight: 1 }, |reqs| record(&ledger, reqs));
        let mut answers = vec![(0, mine)];
        answers.extend(handles.into_iter().flat_map(|h| h.join().unwrap()));
        check_ledger(&ledger, &answers, 3);
    });
}

/// (a') A heavy request (weight 2, the whole bound) among light ones: it forms a group by itself
/// and the requests around it are handed on. Two writers each submit twice, so a writer that has
/// just led (or been answered) enqueues again while the other is still in the protocol.
#[test]
fn two_writers_resubmitting_with_a_heavy_request() {
    loom::model(|| {
        let (queue, ledger) = queue_and_ledger();
        let other = writer(
            &queue,
            &ledger,
            vec![Req { id: 2, weight: 2 }, Req { id: 3, weight: 1 }],
        );
        let a = queue.submit(Req { id: 0, weight: 1 }, |reqs| record(&ledger, reqs));
        let b = queue.submit(Req { id: 1, weight: 1 }, |reqs| record(&ledger, reqs));
        let mut answers = vec![(0, a), (1, b)];
        answers.extend(other.join().unwrap());
        check_ledger(&ledger, &answers, 4);
    });
}

/// The R3 model state of one unit, kept by the leaders.
struct UnitModel(UnsafeCell<(Option<Current>, u64)>);

// SAFETY: loom checks every access to the inner cell for races.
unsafe impl Sync for UnitModel {}
// SAFETY: as above.
unsafe impl Send for UnitModel {}

/// A commit of the single unit of model (b).
struct Commit {
    writer: usize,
    version: u64,
    object: ObjectId,
}

impl Weighted for Commit {
    fn weight(&self) -> usize {
        1
    }
}

/// What a writer of model (b) hears back: the R3 decision and, when accepted, its seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    Decided(Decision, Option<u64>),
    Panicked,
}

impl LeaderPanicked for Heard {
    fn leader_panicked() -> Self {
        Heard::Panicked
    }
}

/// The leader's processing in model (b): the R3 rules, in log order, against the shared state.
fn apply_rules(model: &UnitModel, reqs: Vec<Commit>) -> Vec<Heard> {
    model.0.with_mut(|state| {
        // SAFETY: loom verifies that this access does not race with any other.
        let (current, next_seq) = unsafe { &mut *state };
        reqs.iter()
            .map(|c| {
                let inc = Incoming {
                    source_version: c.version,
                    object: c.object,
                    token: None,
                    intent: Intent::Put,
                };
                let d = decide(current.as_ref(), None, 0, &inc, || None);
                let seq = match d {
                    Decision::Accept { revision } => {
                        let seq = *next_seq;
                        *next_seq += 1;
                        *current = Some(Current {
                            source_version: c.version,
                            revision,
                            object: c.object,
                            seq,
                        });
                        Some(seq)
                    }
                    _ => None,
                };
                Heard::Decided(d, seq)
            })
            .collect()
    })
}

/// Runs writers `commits` (the first one on the model's main thread) through one queue applying
/// the R3 rules and returns what each heard, plus the final unit state.
fn run_commits(commits: &[(u64, &'static [u8])]) -> (Vec<(u64, ObjectId, Heard)>, Option<Current>) {
    let queue = Arc::new(WriteQueue::<Commit, Heard>::new(MAX_WEIGHT));
    let model = Arc::new(UnitModel(UnsafeCell::new((None, 1))));
    let submit = |queue: &WriteQueue<Commit, Heard>, model: &UnitModel, writer, (v, o)| {
        let object = ObjectId::of(o);
        let heard = queue.submit(
            Commit {
                writer,
                version: v,
                object,
            },
            |reqs| {
                for r in &reqs {
                    assert!(r.writer < 3, "a request from nowhere");
                }
                apply_rules(model, reqs)
            },
        );
        (v, object, heard)
    };
    let handles: Vec<_> = commits[1..]
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let (queue, model) = (queue.clone(), model.clone());
            thread::spawn(move || submit(&queue, &model, i + 1, c))
        })
        .collect();
    let mut heard = vec![submit(&queue, &model, 0, commits[0])];
    heard.extend(handles.into_iter().map(|h| h.join().unwrap()));
    // SAFETY: every writer has been joined.
    let state = model.0.with(|s| unsafe { (*s).0 });
    (heard, state)
}

/// (b) Three writers commit the same unit at the same version, two with identical content and one
/// with different content: exactly one is committed, the identical one is a duplicate that names
/// the winner's seq, the different one a conflict that names the winner, in every interleaving.
#[test]
fn same_unit_same_version_exactly_one_wins() {
    loom::model(|| {
        let (heard, state) = run_commits(&[(7, b"a"), (7, b"a"), (7, b"b")]);
        let winners: Vec<_> = heard
            .iter()
            .filter(|(_, _, h)| matches!(h, Heard::Decided(Decision::Accept { .. }, _)))
            .collect();
        assert_eq!(winners.len(), 1, "exactly one writer must win: {heard:?}");
        let &(_, winner_obj, Heard::Decided(_, Some(winner_seq))) = winners[0] else {
            panic!("an accepted commit carries its seq: {heard:?}");
        };
        let cur = state.expect("the winner's entry is current");
        assert_eq!(
            (cur.object, cur.seq, cur.source_version),
            (winner_obj, winner_seq, 7)
        );
        for &(_, obj, h) in &heard {
            match h {
                Heard::Decided(Decision::Accept { revision: 0 }, Some(_)) => {}
                Heard::Decided(Decision::Unchanged(Outcome::Duplicate { seq }), None) => {
                    assert_eq!(obj, winner_obj, "a duplicate must carry the winner's bytes");
                    assert_eq!(seq, winner_seq, "a duplicate names the winner's seq");
                }
                Heard::Decided(
                    Decision::Unchanged(Outcome::Conflict {
                        winner_seq: s,
                        winner,
                    }),
                    None,
                ) => {
                    assert_ne!(obj, winner_obj, "a conflict must carry other bytes");
                    assert_eq!(
                        (s, winner),
                        (winner_seq, winner_obj),
                        "a conflict names the winner"
                    );
                }
                other => panic!("unexpected outcome {other:?} in {heard:?}"),
            }
        }
    });
}

/// (b') Two writers of the same unit with different versions: whatever the order, the newer
/// version ends current (I5); the older one either committed first (with the smaller seq) or was
/// rejected as stale, naming the newer version.
#[test]
fn same_unit_different_versions_never_go_backwards() {
    loom::model(|| {
        let (heard, state) = run_commits(&[(2, b"new"), (1, b"old")]);
        let cur = state.expect("something is committed");
        assert_eq!(
            cur.source_version, 2,
            "the newer version must end current: {heard:?}"
        );
        let new_seq = match heard[0].2 {
            Heard::Decided(Decision::Accept { .. }, Some(seq)) => seq,
            other => panic!("the newer version is always accepted, got {other:?}"),
        };
        assert_eq!(cur.seq, new_seq);
        match heard[1].2 {
            Heard::Decided(Decision::Accept { .. }, Some(seq)) => {
                assert!(
                    seq < new_seq,
                    "the old version was committed after the new one"
                )
            }
            Heard::Decided(Decision::Unchanged(Outcome::Stale { current_version: 2 }), None) => {}
            other => panic!("unexpected outcome for the old version: {other:?}"),
        }
    });
}

/// (a'') The largest model: three writers, one of which submits twice, with a heavy request, so
/// that bounded groups, hand-off to a waiting writer, and a fresh leader after the stack drains
/// all meet in one run.
#[test]
fn three_writers_four_requests_mixed_weights() {
    loom::model(|| {
        let (queue, ledger) = queue_and_ledger();
        let spawn = |id: usize, weight: usize| writer(&queue, &ledger, vec![Req { id, weight }]);
        let handles = [spawn(2, 2), spawn(3, 1)];
        let a = queue.submit(Req { id: 0, weight: 1 }, |reqs| record(&ledger, reqs));
        let b = queue.submit(Req { id: 1, weight: 1 }, |reqs| record(&ledger, reqs));
        let mut answers = vec![(0, a), (1, b)];
        for h in handles {
            answers.extend(h.join().unwrap());
        }
        check_ledger(&ledger, &answers, 4);
    });
}

const PLANNED_PANIC: &str = "leader processing fails on purpose";

/// (a''') A leader whose processing panics: every member of its group is answered with the
/// panic response, nobody waits forever, and the queue is poisoned before leadership passes on:
/// no group is processed after the panicked one (SPEC I10), whichever writer leads next and
/// however the hand-off interleaves.
#[test]
fn a_panicking_leader_poisons_the_queue_before_the_hand_off() {
    // Keep the planned panics (one per explored interleaving) out of the output; report others.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&PLANNED_PANIC) {
            default_hook(info);
        }
    }));
    loom::model(|| {
        let (queue, ledger) = queue_and_ledger();
        let other = writer(&queue, &ledger, vec![Req { id: 1, weight: 1 }]);
        let mine = queue.submit(Req { id: 0, weight: 1 }, |_| -> Vec<Resp> {
            // The panicked group, as an empty one in the ledger: what came after it is checked.
            ledger.0.with_mut(|groups| {
                // SAFETY: loom verifies that this access does not race with any other.
                unsafe { (*groups).push(Vec::new()) }
            });
            std::panic::panic_any(PLANNED_PANIC)
        });
        let theirs = other.join().unwrap().remove(0);
        let after = queue.submit(Req { id: 2, weight: 1 }, |reqs| record(&ledger, reqs));
        let answers = [(0, mine), theirs, (2, after)];
        ledger.0.with(|groups| {
            // SAFETY: the other writer has been joined; this thread led or was answered last.
            let groups = unsafe { &*groups };
            let panicked_at = groups.iter().position(Vec::is_empty);
            let recorded: Vec<usize> = groups.iter().flatten().map(|&(id, _)| id).collect();
            if let Some(p) = panicked_at {
                assert_eq!(
                    groups.len(),
                    p + 1,
                    "a group was processed after the panic: {groups:?}"
                );
                assert_eq!(
                    answers[2].1,
                    Resp::Panicked,
                    "a poisoned queue decided a new request"
                );
            }
            for (id, resp) in answers {
                match resp {
                    Resp::Decided { id: got, group } => {
                        assert_eq!(got, id, "writer {id} got another writer's response");
                        assert!(groups[group].iter().any(|&(r, _)| r == id));
                        assert!(panicked_at.is_none_or(|p| group < p));
                        assert_eq!(recorded.iter().filter(|&&r| r == id).count(), 1);
                    }
                    Resp::Panicked => assert!(
                        !recorded.contains(&id),
                        "request {id} was both processed and answered with a panic"
                    ),
                }
            }
            assert_eq!(queue.is_poisoned(), panicked_at.is_some());
        });
        if answers[0].1 == Resp::Panicked {
            PANICKED_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(
        PANICKED_RUNS.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no explored interleaving had the panicking writer lead; the model proves nothing"
    );
}

/// Interleavings (across the whole model run, outside loom) in which the planned panic happened.
static PANICKED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// ---------------------------------------------------------------------------------------------
// The backlog (src/wal/backlog.rs): durable groups handed from the leader to whoever applies them.

/// A group of the models below: its number, one unit, weight 1.
#[derive(Debug, Clone)]
struct G(u64);

impl Group for G {
    fn number(&self) -> u64 {
        self.0
    }
    fn weight(&self) -> usize {
        1
    }
    fn units(&self) -> usize {
        1
    }
}

/// The "B-trees" of the models: the groups applied, in order. Written only inside `apply`, which
/// the backlog runs on one thread at a time: `inside` proves that (a second applier would see it
/// at 1). Readers read it while a later group may be being applied, as redb's readers do, so it
/// sits behind a mutex rather than in a bare cell.
struct Applied {
    groups: loom::sync::Mutex<Vec<u64>>,
    inside: loom::sync::atomic::AtomicUsize,
}

impl Applied {
    fn new() -> Self {
        Applied {
            groups: loom::sync::Mutex::new(Vec::new()),
            inside: loom::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn apply(&self, batch: &[G]) -> Result<(), String> {
        use loom::sync::atomic::Ordering::SeqCst;
        assert_eq!(self.inside.fetch_add(1, SeqCst), 0, "two appliers at once");
        self.groups
            .lock()
            .unwrap()
            .extend(batch.iter().map(|g| g.0));
        self.inside.fetch_sub(1, SeqCst);
        Ok(())
    }

    /// The groups applied so far.
    fn snapshot(&self) -> Vec<u64> {
        self.groups.lock().unwrap().clone()
    }
}

/// The reader's side of (f) and (f2): waits for what was acknowledged when it asked and checks
/// that it is applied; then joins the other threads, drains, and checks that groups 1 and 2 were
/// each applied once, in order.
fn read_then_drain<const N: usize>(
    backlog: &Backlog<G>,
    applied: &Applied,
    others: [thread::JoinHandle<()>; N],
) {
    let target = backlog
        .wait_applied(|g: &[G]| applied.apply(g))
        .expect("nothing fails in this model");
    let seen = applied.snapshot();
    assert!(
        (1..=target).all(|n| seen.contains(&n)),
        "the reader returned before group {target} was applied: {seen:?}"
    );
    join_then_drain(backlog, applied, others, 2);
}

/// A backlog of the model and the record of the groups applied from it, each shared.
fn shared(backlog: Backlog<G>) -> (Arc<Backlog<G>>, Arc<Applied>) {
    (Arc::new(backlog), Arc::new(Applied::new()))
}

/// A thread running `f` on its own handles of `backlog` and `applied`.
fn spawn_on(
    backlog: &Arc<Backlog<G>>,
    applied: &Arc<Applied>,
    f: impl FnOnce(&Backlog<G>, &Applied) + Send + 'static,
) -> thread::JoinHandle<()> {
    let (b, a) = (backlog.clone(), applied.clone());
    thread::spawn(move || f(&b, &a))
}

/// Joins `threads`, drains what is left, and checks that the groups `1..=n` were each applied
/// once, in order.
fn join_then_drain<const N: usize>(
    backlog: &Backlog<G>,
    applied: &Applied,
    threads: [thread::JoinHandle<()>; N],
    n: u64,
) {
    for t in threads {
        t.join().unwrap();
    }
    backlog.drain(|g: &[G]| applied.apply(g)).unwrap();
    assert_eq!(
        applied.snapshot(),
        (1..=n).collect::<Vec<_>>(),
        "each group once, in order"
    );
}

/// Groups 1 and 2 pushed (acknowledged) before the reader begins; then an applier applies them,
/// one a batch, while the leader pushes group 3: the applier and the leader.
fn two_pushed_then_applied_while_a_third_comes(
    backlog: &Arc<Backlog<G>>,
    applied: &Arc<Applied>,
) -> [thread::JoinHandle<()>; 2] {
    backlog.push(G(1));
    backlog.push(G(2));
    let applier = spawn_on(backlog, applied, |b, a| {
        b.help(|g: &[G]| a.apply(g));
        b.help(|g: &[G]| a.apply(g));
    });
    let b = backlog.clone();
    let leader = thread::spawn(move || b.push(G(3)));
    [applier, leader]
}

/// (f) The leader pushes two groups and helps; a writer helps; a reader waits for what was
/// acknowledged when it asked. Every group is applied exactly once, in order, by one thread at a
/// time; the reader returns only after the groups it waited for are applied; nobody waits
/// forever (loom reports a deadlock otherwise).
#[test]
fn backlog_every_group_applied_once_in_order_and_readers_wait_for_theirs() {
    loom::model(|| {
        let (backlog, applied) = shared(Backlog::new(0, 100, 1));
        let leader = spawn_on(&backlog, &applied, |b, a| {
            b.push(G(1));
            b.push(G(2));
            b.help(|g: &[G]| a.apply(g));
        });
        let writer = spawn_on(&backlog, &applied, |b, a| b.help(|g: &[G]| a.apply(g)));
        read_then_drain(&backlog, &applied, [leader, writer]);
        assert_eq!(backlog.applied(), 2);
    });
}

/// (f2) Writers apply only from a start (`Options::apply_min_bytes`): here two groups' weight.
/// The leader pushes a group, helps (below the start: nothing), pushes a second and helps; a
/// writer helps meanwhile; a reader waits for what was acknowledged when it asked. Whatever the
/// start leaves pending, the reader applies it itself: it returns only once its groups are
/// applied, nobody waits forever, and every group is applied once, in order.
#[test]
fn backlog_below_the_start_a_reader_applies_what_writers_left() {
    loom::model(|| {
        const START: usize = 2;
        let (backlog, applied) = shared(Backlog::new(0, 100, 1));
        let leader = spawn_on(&backlog, &applied, |b, a| {
            b.push(G(1));
            b.help_from(START, |g: &[G]| a.apply(g));
            b.push(G(2));
            b.help_from(START, |g: &[G]| a.apply(g));
        });
        let writer = spawn_on(&backlog, &applied, |b, a| {
            b.help_from(START, |g: &[G]| a.apply(g))
        });
        read_then_drain(&backlog, &applied, [leader, writer]);
    });
}

/// (f3) The store's applier thread (`Options::background_apply`): it waits until two groups'
/// weight is pending (the start) and applies a batch, until the store closes. The leader pushes
/// two groups and nobody else applies: the thread must apply them (a push that reaches the start
/// while the thread waits must wake it); then the store closes: `stop` ends the thread's wait
/// wherever it is (loom reports a deadlock if the stop can be missed), and the close drains
/// nothing more. Every group is applied once, in order, by one thread at a time.
#[test]
fn backlog_the_applier_thread_applies_from_the_start_and_stops_on_close() {
    loom::model(|| {
        const START: usize = 2;
        let (backlog, applied) = shared(Backlog::with_start(0, 100, 2, START));
        let applier = spawn_on(&backlog, &applied, |b, a| {
            while b.next_batch_due() {
                b.help_if_due(|g: &[G]| a.apply(g));
            }
        });
        let b = backlog.clone();
        let leader = thread::spawn(move || {
            b.push(G(1));
            b.push(G(2));
        });
        leader.join().unwrap();
        // Nobody else applies: the thread must, woken by the push that reached the start (a
        // missed wake-up spins here until loom gives up on the model).
        while backlog.applied() < 2 {
            thread::yield_now();
        }
        assert_eq!(
            applied.snapshot(),
            vec![1, 2],
            "one batch of both, in order"
        );
        backlog.stop();
        join_then_drain(&backlog, &applied, [applier], 2);
    });
}

/// (g) Back-pressure: with a bound of one group, the leader's `make_room` before its second push
/// waits for (or does) the first apply; a helper races it. The backlog never holds more than the
/// bound plus the group being pushed, and both groups end applied once, in order.
#[test]
fn backlog_back_pressure_bounds_what_waits() {
    loom::model(|| {
        let (backlog, applied) = shared(Backlog::new(0, 1, 1));
        let helper = spawn_on(&backlog, &applied, |b, a| b.help(|g: &[G]| a.apply(g)));
        backlog.push(G(1));
        backlog.make_room(|g: &[G]| applied.apply(g)).unwrap();
        assert!(backlog.size().units <= 1);
        backlog.push(G(2));
        assert!(backlog.size().max_units <= 2);
        join_then_drain(&backlog, &applied, [helper], 2);
    });
}

/// (h) The leader's overlay (src/wal/overlay.rs, read through src/commit/view.rs): rows of decided
/// groups stay in memory until their group is applied, and a group reads a key from the overlay,
/// else from the applied state. Modelled here on the production backlog with one key: the
/// leader decides group g after reading the key (it must see group g-1's value, never an older
/// one), while another thread applies. The overlay drops only rows of groups applied before it
/// reads the applied state, as `View::begin` does; dropping them after that read (the bug this
/// guards against) lets the leader read a value older than the one it decided last.
#[test]
fn overlay_the_leader_always_reads_what_it_decided_last() {
    loom::model(|| {
        let backlog = Arc::new(Backlog::<G>::new(0, 100, 1));
        // The applied state of the one key: the number of the last group applied to it.
        let db = Arc::new(loom::sync::Mutex::new(0u64));
        let apply = {
            let db = db.clone();
            move |batch: &[G]| -> Result<(), String> {
                let mut v = db.lock().unwrap();
                for g in batch {
                    assert_eq!(g.0, *v + 1, "applied in order");
                    *v = g.0;
                }
                Ok(())
            }
        };
        let (b, ap) = (backlog.clone(), apply.clone());
        let applier = thread::spawn(move || {
            b.help(ap.clone());
            b.help(ap);
        });
        // The overlay: (group, value) of the key, if an unapplied group wrote it.
        let mut overlay: Option<u64> = None;
        for g in 1..=3u64 {
            let applied = backlog.applied();
            if overlay.is_some_and(|o| o <= applied) {
                overlay = None;
            }
            let read = overlay.unwrap_or_else(|| *db.lock().unwrap());
            assert_eq!(read, g - 1, "group {g} read the key as of group {read}");
            overlay = Some(g);
            backlog.push(G(g));
        }
        applier.join().unwrap();
        backlog.drain(apply).unwrap();
        assert_eq!(*db.lock().unwrap(), 3);
    });
}

/// (i) A snapshot's tail (src/wal/tail.rs, `Core::begin_read_with_tail`): a reader lists the
/// acknowledged, unapplied groups (`Backlog::unapplied`), then reads the applied state (its read
/// transaction), while an applier applies groups 1 and 2, one a batch, and the leader pushes
/// group 3. Whatever the interleaving, the applied state holds a prefix of the groups, the list
/// holds every later one it lacks without a gap, and together they reach at least group 2 (both
/// were acknowledged before the reader began). Taking a batch out of the queue before it is
/// applied (as the backlog did before snapshots read the tail) lets the reader miss that batch.
#[test]
fn tail_a_reader_finds_every_acknowledged_group_applied_or_listed() {
    loom::model(|| {
        let (backlog, applied) = shared(Backlog::new(0, 100, 1));
        let threads = two_pushed_then_applied_while_a_third_comes(&backlog, &applied);

        let (from, listed) = backlog.unapplied().expect("nothing fails in this model");
        let state = applied.snapshot();
        let newest = state.last().copied().unwrap_or(0);
        assert_eq!(
            state,
            (1..=newest).collect::<Vec<_>>(),
            "a prefix, in order"
        );
        assert!(
            newest >= from,
            "the state is behind what the backlog said applied"
        );
        let tail: Vec<u64> = listed.iter().map(|g| g.0).filter(|&n| n > newest).collect();
        assert_eq!(
            tail,
            (newest + 1..=newest + tail.len() as u64).collect::<Vec<_>>(),
            "the list continues the state without a gap (state {state:?}, listed {listed:?})"
        );
        let seen = tail.last().copied().unwrap_or(newest);
        assert!(
            seen >= 2,
            "groups 1 and 2 were acknowledged, the reader sees up to {seen}"
        );

        join_then_drain(&backlog, &applied, threads, 3);
    });
}

/// (j) A snapshot's live tail (src/wal/tail.rs `LiveTail`, `Core::begin_read_live`): a reader takes
/// the backlog's numbers (`Backlog::listing`), then reads the applied state (its read
/// transaction), then asks the queue for the groups after that state up to the listed one
/// (`Backlog::between`, as a scan or the change feed does at each read), while an applier applies
/// groups 1 and 2, one a batch, and the leader pushes group 3. Whatever the interleaving, the
/// queue hands over every group after the state up to the listed one, without a gap, or says
/// they were applied — and then the applied state is past the reader's, so the newer read
/// transaction the snapshot begins holds them.
#[test]
fn live_tail_a_reader_gets_every_group_after_its_state_or_is_told_they_were_applied() {
    loom::model(|| {
        let (backlog, applied) = shared(Backlog::new(0, 100, 1));
        let threads = two_pushed_then_applied_while_a_third_comes(&backlog, &applied);

        let (from, acked, _) = backlog.listing().expect("nothing fails in this model");
        assert!(
            acked >= 2,
            "groups 1 and 2 were acknowledged before the reader began"
        );
        let state = applied.snapshot();
        let newest = state.last().copied().unwrap_or(0);
        assert!(
            newest >= from,
            "the state is behind what the backlog said applied"
        );
        let upto = acked.max(newest);
        match backlog.between(newest, upto) {
            Ok(groups) => assert_eq!(
                groups.iter().map(|g| g.0).collect::<Vec<_>>(),
                (newest + 1..=upto).collect::<Vec<_>>(),
                "the queue continues the state without a gap up to the listed group"
            ),
            Err(Unlisted::Applied) => assert!(
                applied.snapshot().len() as u64 > newest,
                "told applied, yet the state is not past the reader's"
            ),
            Err(other) => panic!("nothing fails in this model: {other:?}"),
        }

        join_then_drain(&backlog, &applied, threads, 3);
    });
}
