//! The groups that are durable (their write-ahead record is synced, so they are acknowledged) but
//! not yet applied to the store's B-trees, and the hand-off to whoever applies them.
//!
//! The commit leader decides a group from memory, appends its record to the write-ahead log, and
//! then [`Backlog::push`]es the group here instead of writing the B-trees itself: applying a group
//! to a million-unit manifest touches random leaves and is the slow half of a commit, and it needs
//! no decision any more. The backlog is applied many groups to one write transaction, by the
//! store's applier thread once enough redo waits (`Options::apply_min_bytes`), and by whoever
//! needs the groups applied before then: a reader, a flush or a close, or the leader itself when
//! the backlog is full. With `Options::background_apply` off the store runs no thread: the writer
//! whose commit finds enough redo waiting applies a batch after its answer, and a single-threaded
//! caller (the deterministic simulation) applies every group on its own thread, in the same order
//! every run. Either way the applier of the moment is whichever thread set `applying`; the
//! protocol below does not know threads apart.
//!
//! # States of the backlog
//!
//! - **idle**: nothing pending, nobody applying; `applied == acked`.
//! - **pending**: groups are queued and nobody applies them. Once enough redo waits (the
//!   *start*), a batch is due: the push that reaches the start wakes the applier thread
//!   ([`Backlog::next_batch_due`]), or, without one, every writer looks after its commit returns
//!   ([`Backlog::help_from`]). Below the start the groups wait, durable in the write-ahead log,
//!   for more commits, for a reader of the tables that needs them (GC, verify: every wait
//!   applies whatever is pending), for a flush or a close (which drain), or for back-pressure.
//!   So a pending group is either below the start or has a thread on its way to apply it, and no
//!   reader ever misses it: a snapshot reads it from the queue without waiting (`tail`).
//! - **applying**: one thread (the *applier*) has taken a prefix of the queue (`taken` groups,
//!   clones of which it applies outside the lock); more groups may be pushed meanwhile. The
//!   prefix stays queued, so a snapshot begun meanwhile still finds it ([`Backlog::unapplied`]).
//!   Only the applier removes it and clears `applying`, after it advanced `applied`, in one
//!   critical section, and then wakes every waiter (the applier thread among them, which takes
//!   the next batch if one is due).
//! - **failed**: an apply failed. The groups are still in the write-ahead log (they were
//!   acknowledged), but the B-trees no longer follow it: every later write and every wait is
//!   refused until the store is reopened, which replays the log.
//! - **stopping** (with any of the above): the store is closing; the applier thread's wait
//!   returns and the thread ends. Everything else goes on, so the close drains what is left.
//!
//! Groups are applied in push order, each exactly once: they are taken only from the front of the
//! queue, only by the one thread that set `applying`.
//!
//! Every group acknowledged and not applied is in `pending`, from `applied + 1` to `acked`
//! without a gap, at every moment the lock is free: a group enters at its push and leaves in the
//! same critical section that advances `applied` past it. So a reader that lists them, then
//! begins a read transaction of the B-trees, finds every group that transaction lacks in its
//! list: the B-trees are at or past the `applied` it saw (that is the snapshot's *tail*, `tail`).

use crate::sync::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;

/// The default bound (`Options::backlog_bytes`): the redo bytes of durable, unapplied groups
/// above which the leader waits for the B-trees to catch up (back-pressure). It bounds the
/// backlog's memory, a snapshot's tail, and how long a reader of the tables may wait for the
/// groups acknowledged before it (about 70,000 one-unit commits).
pub(crate) const DEFAULT_BOUND_BYTES: usize = 32 << 20;
/// The default batch (`Options::apply_batch_bytes`): the redo bytes one applier transaction
/// takes at most.
pub(crate) const DEFAULT_BATCH_BYTES: usize = 4 << 20;
/// The default start (`Options::apply_min_bytes`): the redo bytes that wait before a batch is
/// applied (about 500 one-unit commits, a few milliseconds of applying).
pub(crate) const DEFAULT_MIN_BYTES: usize = 256 << 10;

impl Group for crate::wal::redo::GroupRedo {
    fn number(&self) -> u64 {
        crate::wal::redo::GroupRedo::number(self)
    }
    fn weight(&self) -> usize {
        self.len()
    }
    fn units(&self) -> usize {
        crate::wal::redo::GroupRedo::units(self)
    }
    fn keys(&self) -> Vec<(usize, &[u8], u32)> {
        crate::wal::redo::GroupRedo::index_keys(self)
    }
}

/// What the backlog needs to know of a group.
pub trait Group {
    /// The group's number: pushed in rising order, one after the other.
    fn number(&self) -> u64;
    /// What it weighs against the bound (bytes).
    fn weight(&self) -> usize;
    /// The units it commits (for the figures only).
    fn units(&self) -> usize;
    /// The rows a reader looks up one key at a time ([`Backlog::rows_of`]): per row its
    /// table (below [`KEY_TABLES`]), its key and its place among the group's rows of that table,
    /// in the group's order. None by default.
    fn keys(&self) -> Vec<(usize, &[u8], u32)> {
        Vec::new()
    }
}

/// How many tables [`Group::keys`] names rows of.
pub const KEY_TABLES: usize = 3;

/// Per table, per key: the groups of the queue holding a row of it, oldest first, each with the
/// row's place in its group — a point read's way into the queue without scanning it. Entries of
/// groups already applied may linger a little (the applier removes them after its batch, a
/// chunk at a time); no reader looks at them (see [`Backlog::rows_of`]).
type KeyIndex = [std::collections::HashMap<Box<[u8]>, Vec<(u64, u32)>, foldhash::fast::RandomState>;
    KEY_TABLES];

/// Why the backlog cannot answer a read of groups `after + 1 ..= upto`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlisted {
    /// Some of them are applied and left the queue: the B-trees hold them now (a reader reads
    /// them from a newer read transaction).
    Applied,
    /// An apply failed: the B-trees no longer follow the log.
    Stopped(String),
}

/// The keys removed from the index under one lock: a batch's removal must not hold the leader's
/// next push (or a reader) for long.
const FORGET_CHUNK: usize = 512;

/// The shared state, under [`Backlog::state`]. Every field is read and written under the lock.
#[derive(Debug)]
struct State<G> {
    /// Durable groups not yet applied, oldest first: the first `taken` of them are being
    /// applied.
    pending: VecDeque<G>,
    /// How many groups at the front of `pending` the applier took (0 unless `applying`).
    taken: usize,
    /// Whether a thread is applying the first `taken` groups of `pending`.
    applying: bool,
    /// The newest group pushed (acknowledged); 0 before any.
    acked: u64,
    /// The newest group applied to the B-trees.
    applied: u64,
    /// Weight of the groups pushed and not yet applied (pending plus being applied).
    weight: usize,
    /// Units of the groups pushed and not yet applied, and the most there were at once.
    units: usize,
    max_units: usize,
    /// Why the backlog stopped applying (an apply failed), once it did. A store failed for any
    /// other reason goes on applying its acknowledged groups (`Core::fail`).
    failed: Option<String>,
    /// Set once, when the store closes: the applier thread returns from
    /// [`Backlog::next_batch_due`] and ends. Readers, flushes and the close go on applying.
    stopping: bool,
    /// The rows of `pending` by key (see [`KeyIndex`]).
    keys: KeyIndex,
}

/// Durable groups waiting to be applied; see the module documentation for the protocol.
#[derive(Debug)]
pub struct Backlog<G> {
    state: Mutex<State<G>>,
    /// Notified whenever `applied`, `applying` or `failed` changes.
    changed: Condvar,
    /// The weight above which [`Backlog::make_room`] holds the leader back.
    bound: usize,
    /// The most weight one applier takes out at once (one write transaction).
    batch: usize,
    /// The weight from which a batch is due for the applier thread ([`Backlog::next_batch_due`]);
    /// a push that reaches it wakes the thread.
    start: usize,
}

/// How much of the backlog is waiting (see `Backlog::size`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BacklogSize {
    /// Redo bytes acknowledged and not yet applied.
    pub bytes: usize,
    /// Units they commit.
    pub units: usize,
    /// The most units that were waiting at once since the store was opened.
    pub max_units: usize,
}

/// Why a wait ended without the groups being applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped(pub String);

impl<G: Group + Clone> Backlog<G> {
    /// An empty backlog whose newest applied (and acknowledged) group is `applied`; the leader is
    /// held back above `bound`, an applier takes at most `batch` at once.
    #[cfg(any(test, loom))]
    pub fn new(applied: u64, bound: usize, batch: usize) -> Self {
        Self::with_start(applied, bound, batch, 0)
    }

    /// [`Backlog::new`] whose applier thread takes a batch once `start` bytes of redo wait.
    pub fn with_start(applied: u64, bound: usize, batch: usize, start: usize) -> Self {
        assert!(
            bound > 0 && batch > 0,
            "invariant: backlog limits are positive"
        );
        Backlog {
            state: Mutex::new(State {
                pending: VecDeque::new(),
                taken: 0,
                applying: false,
                acked: applied,
                applied,
                weight: 0,
                units: 0,
                max_units: 0,
                failed: None,
                stopping: false,
                keys: Default::default(),
            }),
            changed: Condvar::new(),
            bound,
            batch,
            start: start.min(batch),
        }
    }

    /// Queues a durable group. Called by the commit leader only, in group order, before it
    /// answers the group's writers: from here on readers wait for it.
    pub fn push(&self, group: G) {
        let mut s = self.state.lock();
        assert_eq!(
            group.number(),
            s.acked + 1,
            "invariant: groups are pushed one after the other, in order"
        );
        s.acked = group.number();
        let before = s.weight;
        s.weight += group.weight();
        s.units += group.units();
        s.max_units = s.max_units.max(s.units);
        for (table, key, row) in group.keys() {
            s.keys[table]
                .entry(key.into())
                .or_default()
                .push((group.number(), row));
        }
        s.pending.push_back(group);
        // The applier thread waits for the start to be reached (or for an apply to end, which
        // notifies anyway): wake it when this push reaches it.
        let due = before < self.start.max(1) && s.weight >= self.start;
        drop(s);
        if due {
            self.changed.notify_all();
        }
    }

    /// The applier thread's wait: returns `true` once a batch is due — at least the start
    /// waits, nobody applies and nothing failed — and `false` once the store closes
    /// ([`Backlog::stop`]). The thread then applies with [`Backlog::help_from`], which may
    /// still find a reader applying first; it simply asks again.
    pub fn next_batch_due(&self) -> bool {
        let mut s = self.state.lock();
        loop {
            if s.stopping {
                return false;
            }
            if !s.applying && s.failed.is_none() && !s.pending.is_empty() && s.weight >= self.start
            {
                return true;
            }
            s = self.changed.wait(s);
        }
    }

    /// Ends the applier thread's waits (the store closes). What is pending stays, for the
    /// close's drain.
    pub fn stop(&self) {
        self.state.lock().stopping = true;
        self.changed.notify_all();
    }

    /// Notes a group that was applied in place by the leader (a checkpoint), after every pending
    /// group was applied: it is acknowledged and applied at once.
    pub fn applied_in_place(&self, number: u64) {
        let mut s = self.state.lock();
        assert!(
            s.pending.is_empty() && !s.applying && s.applied == s.acked,
            "invariant: a group is applied in place only on an empty backlog"
        );
        assert_eq!(
            number,
            s.acked + 1,
            "invariant: groups are numbered in order"
        );
        s.acked = number;
        s.applied = number;
        drop(s);
        self.changed.notify_all();
    }

    /// Applies one batch of pending groups if nobody else is applying; returns at once when
    /// another thread is, or nothing is pending. `apply` gets a batch of groups in order and
    /// applies them in one transaction. One batch only: a writer that helps must not be kept
    /// applying for as long as others keep committing (whoever waits loops on it).
    pub fn help<E: ToString>(&self, apply: impl FnMut(&[G]) -> Result<(), E>) {
        self.help_from(0, apply);
    }

    /// [`Backlog::help_from`] at the backlog's own start (the applier thread's batch, or a writer's
    /// after its commit with `Options::background_apply` off).
    pub fn help_if_due<E: ToString>(&self, apply: impl FnMut(&[G]) -> Result<(), E>) {
        self.help_from(self.start, apply);
    }

    /// [`Backlog::help`] once at least `min` bytes of redo wait (a writer after its commit): the
    /// B-trees are then written a batch at a time instead of a group at a time, which costs less
    /// per unit; a reader or a flush that needs the groups still applies whatever waits.
    pub fn help_from<E: ToString>(&self, min: usize, mut apply: impl FnMut(&[G]) -> Result<(), E>) {
        let mut s = self.state.lock();
        if s.applying || s.pending.is_empty() || s.failed.is_some() || s.weight < min {
            return;
        }
        let batch = self.take_batch(&mut s);
        drop(s);
        // Whatever `apply` does, `applying` must be cleared and its waiters woken below: a panic
        // that left it set would hang every later flush, GC, verify and close. A panic is a
        // failed apply (the B-trees no longer follow the log), which stops the backlog.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| apply(&batch)))
            .map_err(|p| {
                format!(
                    "applying a batch of commit groups panicked: {}",
                    crate::text::panic_text(&*p)
                )
            })
            .and_then(|r| r.map_err(|e| e.to_string()));
        let mut s = self.state.lock();
        s.applying = false;
        let taken = std::mem::take(&mut s.taken);
        assert_eq!(
            taken,
            batch.len(),
            "invariant: only the applier changes what it took"
        );
        s.pending.drain(..taken);
        match result {
            Ok(()) => {
                let last = batch.last().map_or(s.applied, Group::number);
                s.applied = last;
                s.weight -= batch.iter().map(Group::weight).sum::<usize>();
                s.units -= batch.iter().map(Group::units).sum::<usize>();
            }
            Err(e) => s.failed = Some(e),
        }
        let through = s.applied;
        drop(s);
        self.changed.notify_all();
        self.forget(&batch, through);
    }

    /// Removes from the key index the entries of `batch`'s groups up to group `through` (applied),
    /// a chunk at a time.
    fn forget(&self, batch: &[G], through: u64) {
        let keys: Vec<_> = batch.iter().flat_map(G::keys).collect();
        for chunk in keys.chunks(FORGET_CHUNK) {
            let mut s = self.state.lock();
            for (table, key, _) in chunk {
                let index = &mut s.keys[*table];
                let Some(groups) = index.get_mut(*key) else {
                    continue;
                };
                let gone = groups.partition_point(|&(g, _)| g <= through);
                groups.drain(..gone);
                if groups.is_empty() {
                    index.remove(*key);
                }
            }
        }
    }

    /// Takes the oldest pending groups, up to the batch weight (at least one), and marks the
    /// backlog as being applied. They stay queued (for [`Backlog::unapplied`]) until applied.
    fn take_batch(&self, s: &mut MutexGuard<'_, State<G>>) -> Vec<G> {
        assert_eq!(s.taken, 0, "invariant: one applier at a time");
        s.applying = true;
        let mut out = Vec::new();
        let mut w = 0;
        for g in &s.pending {
            if !out.is_empty() && w + g.weight() > self.batch {
                break;
            }
            w += g.weight();
            out.push(g.clone());
        }
        s.taken = out.len();
        out
    }

    /// The newest group applied, and every group acknowledged after it, oldest first (those
    /// being applied included) — what a snapshot reads without waiting for the applier. A read
    /// transaction begun after this call holds the B-trees at or past the group returned, so
    /// the list holds every acknowledged group it lacks (module documentation). Refused once an
    /// apply failed: the B-trees no longer follow the log.
    pub fn unapplied(&self) -> Result<(u64, Vec<G>), Stopped> {
        let s = self.state.lock();
        if let Some(why) = &s.failed {
            return Err(Stopped(why.clone()));
        }
        assert!(
            s.pending.len() as u64 == s.acked - s.applied
                && s.pending
                    .front()
                    .is_none_or(|g| g.number() == s.applied + 1),
            "invariant: the queue holds every group after the applied one, without a gap"
        );
        Ok((s.applied, s.pending.iter().cloned().collect()))
    }

    /// The newest group applied, the newest acknowledged, and a handle on the latter (if it is
    /// not applied): what a snapshot begins with, in constant time. A read transaction begun
    /// after this call holds the B-trees at or past the applied group, and the groups after it
    /// up to the acknowledged one can be read from the queue ([`Backlog::rows_of`],
    /// [`Backlog::between`]) for as long as they are not applied.
    pub fn listing(&self) -> Result<(u64, u64, Option<G>), Stopped> {
        let s = self.state.lock();
        if let Some(why) = &s.failed {
            return Err(Stopped(why.clone()));
        }
        Ok((s.applied, s.acked, s.pending.back().cloned()))
    }

    /// Among the groups `after + 1 ..= upto`, those holding a row of `key` in `table`, newest
    /// first, each with the row's place in it ([`Group::keys`]); usually one or none. Constant
    /// time in the queue's length: one hash probe, a binary search among the key's groups.
    pub fn rows_of(
        &self,
        table: usize,
        key: &[u8],
        after: u64,
        upto: u64,
    ) -> Result<Vec<(G, u32)>, Unlisted> {
        let s = self.state.lock();
        Self::check_listed(&s, after)?;
        let Some(groups) = s.keys[table].get(key) else {
            return Ok(Vec::new());
        };
        let newer = groups.partition_point(|&(g, _)| g <= upto);
        Ok(groups[..newer]
            .iter()
            .rev()
            // Above `after`, hence above `applied`: in the queue (older entries may linger).
            .take_while(|&&(g, _)| g > after)
            .map(|&(g, row)| {
                let at = usize::try_from(g - s.applied - 1)
                    .expect("invariant: a queued group's offset fits in memory");
                (s.pending[at].clone(), row)
            })
            .collect())
    }

    /// The groups `after + 1 ..= upto`, oldest first (a range scan of a snapshot's tail).
    pub fn between(&self, after: u64, upto: u64) -> Result<Vec<G>, Unlisted> {
        let s = self.state.lock();
        Self::check_listed(&s, after)?;
        let from = usize::try_from(after - s.applied)
            .expect("invariant: a queued group's offset fits in memory");
        let to = usize::try_from(upto.saturating_sub(s.applied))
            .expect("invariant: a queued group's offset fits in memory");
        Ok(s.pending.range(from..to.max(from)).cloned().collect())
    }

    /// Whether the groups after `after` are all still queued.
    fn check_listed(s: &State<G>, after: u64) -> Result<(), Unlisted> {
        if let Some(why) = &s.failed {
            return Err(Unlisted::Stopped(why.clone()));
        }
        if s.applied > after {
            return Err(Unlisted::Applied);
        }
        Ok(())
    }

    /// Waits until every group acknowledged when it was called is applied, applying them itself
    /// when nobody else does; returns the newest of those groups.
    pub fn wait_applied<E: ToString>(
        &self,
        apply: impl FnMut(&[G]) -> Result<(), E>,
    ) -> Result<u64, Stopped> {
        let target = self.state.lock().acked;
        self.wait_for(target, apply).map(|()| target)
    }

    /// Waits until the backlog is empty (for a checkpoint in place, and on close).
    pub fn drain<E: ToString>(
        &self,
        apply: impl FnMut(&[G]) -> Result<(), E>,
    ) -> Result<(), Stopped> {
        self.wait_applied(apply).map(|_| ())
    }

    /// Holds the leader back while the backlog weighs more than its bound (back-pressure), applying
    /// when nobody else does.
    pub fn make_room<E: ToString>(
        &self,
        mut apply: impl FnMut(&[G]) -> Result<(), E>,
    ) -> Result<(), Stopped> {
        loop {
            let s = self.state.lock();
            if let Some(why) = &s.failed {
                return Err(Stopped(why.clone()));
            }
            if s.weight <= self.bound {
                return Ok(());
            }
            if s.applying {
                drop(self.changed.wait(s));
                continue;
            }
            drop(s);
            self.help(&mut apply);
        }
    }

    fn wait_for<E: ToString>(
        &self,
        target: u64,
        mut apply: impl FnMut(&[G]) -> Result<(), E>,
    ) -> Result<(), Stopped> {
        loop {
            let s = self.state.lock();
            if s.applied >= target {
                return Ok(());
            }
            if let Some(why) = &s.failed {
                return Err(Stopped(why.clone()));
            }
            if s.applying {
                drop(self.changed.wait(s));
                continue;
            }
            drop(s);
            self.help(&mut apply);
        }
    }

    /// The newest group applied to the B-trees.
    pub fn applied(&self) -> u64 {
        self.state.lock().applied
    }

    /// What is pushed and not yet applied now: (bytes, units), and the most units there were.
    pub fn size(&self) -> BacklogSize {
        let s = self.state.lock();
        BacklogSize {
            bytes: s.weight,
            units: s.units,
            max_units: s.max_units,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Debug, Clone)]
    struct G(u64);
    impl Group for G {
        fn number(&self) -> u64 {
            self.0
        }
        fn weight(&self) -> usize {
            100
        }
        fn units(&self) -> usize {
            1
        }
    }

    #[test]
    fn a_writer_applies_only_from_the_start_and_a_waiter_applies_whatever_is_pending() {
        let b = Backlog::new(0, 10_000, 1_000);
        let applied = std::cell::RefCell::new(Vec::new());
        let apply = |gs: &[G]| -> Result<(), String> {
            applied
                .borrow_mut()
                .push(gs.iter().map(|g| g.0).collect::<Vec<_>>());
            Ok(())
        };
        b.push(G(1));
        b.push(G(2));
        b.help_from(250, apply);
        assert!(
            applied.borrow().is_empty(),
            "200 bytes wait, below the start"
        );
        assert_eq!(b.size().units, 2);
        b.push(G(3));
        b.help_from(250, apply);
        assert_eq!(
            *applied.borrow(),
            vec![vec![1, 2, 3]],
            "one batch from the start"
        );
        assert_eq!((b.applied(), b.size().units), (3, 0));
        b.push(G(4));
        b.help_from(250, apply);
        assert_eq!(applied.borrow().len(), 1);
        // A reader (or a flush) needs group 4: it is applied whatever the start.
        b.drain(apply).unwrap();
        assert_eq!(applied.borrow().last(), Some(&vec![4]));
        assert_eq!((b.applied(), b.size().units), (4, 0));
    }

    /// A group writing one row under each of its keys (table 0).
    #[derive(Debug, Clone)]
    struct K(u64, Vec<&'static str>);
    impl Group for K {
        fn number(&self) -> u64 {
            self.0
        }
        fn weight(&self) -> usize {
            100
        }
        fn units(&self) -> usize {
            self.1.len()
        }
        fn keys(&self) -> Vec<(usize, &[u8], u32)> {
            (self.1.iter().enumerate())
                .map(|(i, k)| (0, k.as_bytes(), i as u32))
                .collect()
        }
    }

    impl<G: Group + Clone> Backlog<G> {
        fn indexed_keys(&self) -> usize {
            self.state.lock().keys.iter().map(|t| t.len()).sum()
        }
    }

    /// A key's rows are found among many groups by the key alone — only the groups holding it
    /// come back, newest first, within the range asked — and the index forgets every group once
    /// applied; a range whose groups were applied is refused as such.
    #[test]
    fn the_key_index_finds_only_the_groups_holding_the_key_and_forgets_applied_ones() {
        let b = Backlog::new(0, 1 << 30, 1 << 30);
        for n in 1..=1000 {
            let keys = if n % 100 == 0 {
                vec!["hot", "k"]
            } else {
                vec!["k"]
            };
            b.push(K(n, keys));
        }
        let found = |after, upto| -> Vec<(u64, u32)> {
            b.rows_of(0, b"hot", after, upto)
                .unwrap()
                .iter()
                .map(|(g, row)| (g.0, *row))
                .collect()
        };
        let model = |after: u64, upto: u64| -> Vec<(u64, u32)> {
            (after + 1..=upto)
                .rev()
                .filter(|n| n % 100 == 0)
                .map(|n| (n, 0))
                .collect()
        };
        for (after, upto) in [
            (0, 1000),
            (0, 999),
            (250, 1000),
            (300, 300),
            (299, 300),
            (0, 50),
        ] {
            assert_eq!(found(after, upto), model(after, upto), "({after}, {upto}]");
        }
        assert!(b.rows_of(0, b"cold", 0, 1000).unwrap().is_empty());
        assert_eq!(b.between(997, 1000).unwrap().len(), 3);
        assert_eq!(b.indexed_keys(), 2);
        b.drain(|_: &[K]| -> Result<(), String> { Ok(()) }).unwrap();
        assert_eq!(b.indexed_keys(), 0, "every entry forgotten once applied");
        assert_eq!(
            b.rows_of(0, b"hot", 0, 1000).unwrap_err(),
            Unlisted::Applied
        );
        assert_eq!(b.between(10, 1000).unwrap_err(), Unlisted::Applied);
        assert!(b.rows_of(0, b"hot", 1000, 1000).unwrap().is_empty());
    }
}
