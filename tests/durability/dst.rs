//! A deterministic simulation of the whole engine.
//!
//! One seed drives everything: which simulated writer acts next and what it does (put, correct,
//! claim, renew, release, commit under its lease, retry old outputs long after a correction,
//! abandon staged work), when GC runs and with which retention, when snapshots are taken, held
//! and read again (current and as of older seqs), how far the `ManualClock` jumps (leases
//! expire), when hostile callers strike (forged, foreign-unit and released tokens, wrong-worker
//! releases, `Staged` handles of another store, oversized batches), and when the process
//! crashes. A crash is a power cut through `FaultPlan`'s seeded model: unsynced database writes
//! lost or kept in part with a torn last write, unsynced file bytes cut, unsynced directory
//! entries (creates, links, renames, removes, new directories) undone.
//!
//! After every step the store is checked against a model (a `BTreeMap` of what must be visible,
//! with its own R3/R9 rules) and the invariants: I1 (one entry per unit, every acknowledged unit
//! there), I2 (every entry's object exists with its size and CRC: read back), I4/I5 (exact
//! manifest equality after every acknowledged step, as-of views equal the model's state at that
//! seq), I6 (fenced commits never apply: outcomes are predicted), I7 (`oncelake::replay`), I8
//! (after every GC every object an open snapshot can see is read back, and every staged
//! object a writer holds still exists). After every crash the store is reopened: every
//! acknowledged commit is there, the one in flight is wholly present or wholly absent (I3),
//! `verify --deep` is intact.
//!
//! Running it:
//! * `cargo test --test dst`: fixed seeds for about `CI_BUDGET` (prints seeds and counts);
//! * `ONCELAKE_DST_SEED=0x1234 cargo test --test dst`: exactly that seed (what a failure prints);
//! * `ONCELAKE_DST_SEEDS=500 cargo test --test dst -- --nocapture`: 500 seeds from a random base;
//! * `ONCELAKE_DST_STEPS=2000`: longer histories per seed.
//!
//! The scheduling is single-threaded, so a seed replays exactly (see
//! `a_seed_replays_exactly`).

use crate::common;

use common::{scratch, PanickyClock, SplitMix64 as Rng};
use oncelake::fault::{FaultPlan, FaultyVfs, PowerLoss};
use oncelake::gc::GcOptions;
use oncelake::log::RecordBody;
use oncelake::verify::VerifyOptions;
use oncelake::vfs::RealVfs;
use oncelake::{
    Atomicity, Batch, ClaimOutcome, CommitReport, Intent, Lease, ManualClock, Options,
    RenewOutcome, Snapshot, Staged, Store,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const T0: u64 = 1_700_000_000_000;
const UNITS: usize = 10;
const WRITERS: usize = 5;
const DEFAULT_STEPS: usize = 250;
/// How long the default run (CI) keeps starting new seeds.
const CI_BUDGET: Duration = Duration::from_secs(20);
const FIXED_BASE: u64 = 0xD57_0000;

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Clone, Debug, PartialEq, Eq)]
struct Want {
    version: u64,
    revision: u32,
    content: Vec<u8>,
    seq: u64,
}

/// One history row: an entry that was current from `seq` until its successor.
#[derive(Clone, Debug)]
struct Row {
    unit: String,
    want: Want,
    /// When the successor was committed (the row may be pruned once that is before a cutoff).
    superseded_at: Option<u64>,
}

#[derive(Clone, Debug)]
struct ClaimState {
    worker: String,
    token: u64,
    version: u64,
    expires: u64,
    released: bool,
}

impl ClaimState {
    fn live(&self, now: u64) -> bool {
        !self.released && now < self.expires
    }
}

#[derive(Default, Debug)]
struct Model {
    current: BTreeMap<String, Want>,
    rows: Vec<Row>,
    claims: BTreeMap<String, ClaimState>,
    /// Every token granted, and its unit.
    issued: BTreeMap<u64, String>,
    next_token: u64,
    last_seq: u64,
    /// The highest GC cutoff ever attempted: a row superseded before it may have been pruned.
    max_cutoff: u64,
}

/// What the model expects of one unit of a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Exp {
    /// Acceptable by itself, with this revision ("committed", or "aborted" in an aborted batch).
    Accept(u32),
    /// Not written; one of these outcomes.
    Not(BTreeSet<&'static str>),
}

fn not(names: &[&'static str]) -> Exp {
    Exp::Not(names.iter().copied().collect())
}

enum Fence {
    Pass,
    Fenced,
    Busy,
}

impl Model {
    fn state_at(&self, seq: u64) -> BTreeMap<String, Want> {
        let mut s = BTreeMap::new();
        for r in self.rows.iter().filter(|r| r.want.seq <= seq) {
            s.insert(r.unit.clone(), r.want.clone());
        }
        s
    }

    fn fence(&self, unit: &str, token: Option<u64>, now: u64) -> Fence {
        // SPEC R3/R9: a token passes only if issued for the unit, its newest and not ended; a
        // token-less commit is busy while a lease is live.
        match (token, self.claims.get(unit)) {
            (Some(t), Some(c)) if c.token == t && !c.released => Fence::Pass,
            (Some(_), _) => Fence::Fenced,
            (None, Some(c)) if c.live(now) => Fence::Busy,
            (None, _) => Fence::Pass,
        }
    }

    /// R3 alone.
    fn r3(&self, unit: &str, version: u64, content: &[u8], intent: Intent) -> Exp {
        let Some(cur) = self.current.get(unit) else {
            return Exp::Accept(0);
        };
        if version > cur.version {
            return Exp::Accept(0);
        }
        if version < cur.version {
            return not(&["stale"]);
        }
        if content == cur.content.as_slice() {
            return not(&["duplicate"]);
        }
        if intent == Intent::Correct {
            return Exp::Accept(cur.revision + 1);
        }
        if cur.revision == 0 {
            return not(&["conflict"]);
        }
        // A late retry of output a correction replaced: a duplicate of the history row, unless
        // GC pruned that row (then a conflict with the correction).
        let earlier: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| r.unit == unit && r.want.version == version && r.want.content == content)
            .collect();
        if earlier.is_empty() {
            not(&["conflict"])
        } else if earlier
            .iter()
            .any(|r| r.superseded_at.is_none_or(|t| t >= self.max_cutoff))
        {
            not(&["duplicate"])
        } else {
            not(&["duplicate", "conflict"])
        }
    }

    fn expect(&self, item: &Item, now: u64) -> Exp {
        let r3 = self.r3(&item.unit, item.version, &item.content, item.intent);
        let (name, lenient) = match self.fence(&item.unit, item.token, now) {
            Fence::Pass => return r3,
            Fence::Fenced => ("fenced", true),
            Fence::Busy => ("busy", true),
        };
        match r3 {
            Exp::Accept(_) => not(&[name]),
            // Whether a rejected or duplicate retry is reported as such or as fenced/busy is
            // not the safety question (nothing is written either way).
            Exp::Not(mut set) if lenient => {
                set.insert(name);
                Exp::Not(set)
            }
            Exp::Not(_) => not(&[name]),
        }
    }

    /// Applies the accepted items of a commit at `seq`.
    fn apply_commit(&mut self, items: &[Item], exps: &[Exp], seq: u64, now: u64) {
        for (it, e) in items.iter().zip(exps) {
            let Exp::Accept(revision) = *e else { continue };
            let want = Want {
                version: it.version,
                revision,
                content: it.content.clone(),
                seq,
            };
            if let Some(prev) = self
                .rows
                .iter_mut()
                .rev()
                .find(|r| r.unit == it.unit && r.superseded_at.is_none())
            {
                prev.superseded_at = Some(now);
            }
            self.rows.push(Row {
                unit: it.unit.clone(),
                want: want.clone(),
                superseded_at: None,
            });
            self.current.insert(it.unit.clone(), want);
            if let Some(c) = self.claims.get_mut(&it.unit) {
                match it.token {
                    Some(t) if c.token == t => c.released = true,
                    None => c.released = true,
                    _ => {}
                }
            }
        }
        self.last_seq = seq;
    }
}

/// One unit of a commit, as the simulation built it.
#[derive(Clone, Debug)]
struct Item {
    unit: String,
    version: u64,
    content: Vec<u8>,
    token: Option<u64>,
    intent: Intent,
}

/// What the model expects of a claim.
#[derive(Clone, Debug)]
enum ClaimExp {
    Done,
    Held(String),
    /// Granted with this token (a new one, or the holder's own extended).
    Granted {
        token: u64,
        new: bool,
    },
}

/// An operation whose answer the crash swallowed.
#[derive(Debug)]
enum InFlight {
    Commit(Vec<Item>, Vec<Exp>),
    Claim(String, u64, String, u64, ClaimExp),
    Renew(Lease, u64),
    Release(Lease),
    /// Writes no log record: nothing to decide.
    Other,
}

// ---------------------------------------------------------------------------------------------
// The simulation.

#[derive(Debug)]
enum WriterState {
    Idle,
    Claimed(Lease),
    Staged { item: Item, staged: Staged },
}

struct Writer {
    name: String,
    state: WriterState,
}

/// A snapshot held across later steps, with the seq it must show.
struct Held {
    snap: Snapshot,
    seq: u64,
}

#[derive(Default, Debug, Clone)]
struct Counts {
    steps: u64,
    commits: u64,
    committed_units: u64,
    rejections: u64,
    claims: u64,
    gcs: u64,
    snapshots: u64,
    hostile: u64,
    crashes: u64,
    /// Panics injected (at a file operation or a clock reading) that came.
    panics: u64,
    in_flight_applied: u64,
    /// Reopens that loaded the dedup index from `index.snap`.
    index_snap_loads: u64,
    db_torn: u64,
    files_torn: u64,
    entries_undone: u64,
    ops: u64,
}

struct Sim {
    seed: u64,
    rng: Rng,
    _dir: tempfile::TempDir,
    path: PathBuf,
    clock: ManualClock,
    /// The store's clock: `clock`'s time, armed now and then to panic at a reading (I10).
    panicky: Arc<PanickyClock>,
    plan: Arc<FaultPlan>,
    store: Option<Store>,
    model: Model,
    writers: Vec<Writer>,
    held: Vec<Held>,
    /// Leases that were once valid (released, committed, superseded): hostile reuse.
    old_leases: Vec<Lease>,
    /// Outputs committed (or tried) earlier, for late retries: (unit, version, content).
    past: Vec<(String, u64, Vec<u8>)>,
    /// Another store, for foreign `Staged` handles.
    other: Option<(tempfile::TempDir, Store)>,
    step: usize,
    counts: Counts,
    /// A digest of everything observable, to show that a seed replays exactly.
    trace: u64,
    log: Vec<String>,
}

fn unit_name(i: u64) -> String {
    format!("t/u{i:02}")
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let dir = scratch("oncelake-dst");
        let path = dir.path().join("lake");
        let clock = ManualClock::new(T0);
        let mut sim = Sim {
            seed,
            rng: Rng(seed),
            _dir: dir,
            path,
            clock: clock.clone(),
            panicky: PanickyClock::new(&clock),
            plan: FaultPlan::new(),
            store: None,
            model: Model {
                next_token: 1,
                ..Model::default()
            },
            writers: (0..WRITERS)
                .map(|i| Writer {
                    name: format!("w{i}"),
                    state: WriterState::Idle,
                })
                .collect(),
            held: Vec::new(),
            old_leases: Vec::new(),
            past: Vec::new(),
            other: None,
            step: 0,
            counts: Counts::default(),
            trace: 0xcbf2_9ce4_8422_2325,
            log: Vec::new(),
        };
        sim.open(false);
        sim
    }

    fn note(&mut self, what: String) {
        // Paths name the scratch directory and this opening's staging files: not part of what
        // a seed determines.
        let what = what.replace(&*self.path.to_string_lossy(), "<lake>");
        let digest = match what.split_once(": ") {
            Some((head, _)) if head.starts_with("fault") => head,
            _ => what.as_str(),
        };
        for b in digest.bytes() {
            self.trace = (self.trace ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        self.log.push(format!("step {}: {what}", self.step));
        if self.log.len() > 40 {
            self.log.remove(0);
        }
    }

    fn now(&self) -> u64 {
        use oncelake::Clock;
        self.clock.now_ms()
    }

    fn store(&self) -> &Store {
        self.store
            .as_ref()
            .expect("the store is open between steps")
    }

    /// Opens the store with a fresh fault plan; with `may_crash`, the open itself (redb's
    /// repair, the index load) may be cut by a power loss, and is then retried on what it left.
    fn open(&mut self, may_crash: bool) {
        loop {
            self.counts.ops += self.plan.ops();
            self.plan = FaultPlan::new();
            self.plan.lose_unsynced_writes(true);
            if may_crash && self.rng.chance(25) {
                self.plan.crash_at(1 + self.rng.below(12));
            }
            // Reads through the seam failing while opening: the index snapshot is then not
            // used (a full scan instead), or the open fails cleanly and is retried.
            let failing_reads = may_crash && self.rng.chance(10);
            self.plan.fail_reads(failing_reads);
            let options = Options {
                vfs: Arc::new(FaultyVfs::new(Arc::new(RealVfs), self.plan.clone())),
                faults: Some(self.plan.clone()),
                clock: self.panicky.clone(),
                // Every batch applied on the simulation's one thread: the same file operations
                // in the same order for a seed, so its crash points replay exactly.
                background_apply: false,
                ..Options::default()
            };
            let opened = Store::open_with(&self.path, options);
            self.plan.fail_reads(false);
            match opened {
                Ok(store) if !self.plan.crashed() => {
                    if failing_reads {
                        let report = store.open_report();
                        assert!(!report.index_from_snapshot, "{report:?}");
                    }
                    self.store = Some(store);
                    return;
                }
                Err(e) if failing_reads && !self.plan.crashed() => {
                    assert!(e.to_string().contains("injected"), "{e}");
                    self.note(format!("open refused while reads fail: {e}"));
                    continue;
                }
                Ok(store) => drop(store),
                Err(e) if self.plan.crashed() => self.note(format!("open cut: {e}")),
                Err(e) => panic!("reopening after a crash failed: {e}"),
            }
            self.counts.crashes += 1;
            let loss = self
                .plan
                .apply_power_loss_seeded(&self.path.join(oncelake::DB_FILE), self.rng.next())
                .unwrap_or_else(|e| panic!("applying the power loss: {e}"));
            self.note(format!("power cut while opening: {loss:?}"));
        }
    }

    /// A restart: a clean close (which writes `index.snap` through the seam, possibly cut by a
    /// crash), a power cut, and a reopen that loads the index snapshot if it checks out.
    fn restart(&mut self) {
        self.held.clear();
        for w in &mut self.writers {
            if let WriterState::Claimed(l) = std::mem::replace(&mut w.state, WriterState::Idle) {
                self.old_leases.push(l);
            }
        }
        if self.rng.chance(30) {
            self.plan.crash_at(self.plan.ops() + 1 + self.rng.below(10));
        }
        self.store = None;
        let loss = self
            .plan
            .apply_power_loss_seeded(&self.path.join(oncelake::DB_FILE), self.rng.next())
            .unwrap_or_else(|e| panic!("applying the power loss: {e}"));
        self.open(true);
        let report = self.store().open_report();
        self.counts.index_snap_loads += report.index_from_snapshot as u64;
        self.note(format!("restart: {loss:?}; {report:?}"));
    }

    fn run(&mut self, steps: usize) {
        self.check();
        for step in 1..=steps {
            self.step = step;
            self.counts.steps += 1;
            self.one_step();
            if self.plan.crashed() || self.store().failure().is_some() {
                self.recover(InFlight::Other);
            }
            self.check();
        }
        if self.seed.is_multiple_of(8) {
            self.step += 1;
            self.oversized_batch();
        }
        self.shutdown_and_reopen_cleanly();
        self.counts.ops += self.plan.ops();
    }

    fn one_step(&mut self) {
        self.clock.advance_ms(self.rng.below(1500));
        let roll = self.rng.below(100);
        match roll {
            0..=52 => self.writer_step(),
            53..=54 => self.restart(),
            55..=61 => self.gc(),
            62..=69 => self.take_snapshot(),
            70..=74 => self.reread_held(),
            75..=76 => {
                if !self.held.is_empty() {
                    let i = self.rng.below(self.held.len() as u64) as usize;
                    self.held.remove(i);
                }
            }
            77..=80 => {
                // Leases expire.
                let jump = 1_000 + self.rng.below(8_000);
                self.clock.advance_ms(jump);
                self.note(format!("clock +{jump} ms"));
            }
            81..=88 => self.hostile(),
            89..=93 => self.multi_commit(),
            94..=96 => {
                // A crash somewhere in the next few operations.
                let at = self.plan.ops() + 1 + self.rng.below(30);
                self.plan.crash_at(at);
                self.note(format!("crash armed at op {at}"));
            }
            97 => {
                self.note("power cut now".into());
                self.plan.crash_now();
            }
            _ => {
                // A transient error at one of the next operations.
                let at = self.plan.ops() + 1 + self.rng.below(20);
                self.plan.fail_at(at);
                self.note(format!("transient failure armed at op {at}"));
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Writers.

    fn writer_step(&mut self) {
        let w = self.rng.below(WRITERS as u64) as usize;
        let state = std::mem::replace(&mut self.writers[w].state, WriterState::Idle);
        let next = match state {
            WriterState::Idle => self.start_work(w),
            WriterState::Claimed(lease) => self.work_under_lease(w, lease),
            WriterState::Staged { item, staged } => {
                if self.rng.chance(85) {
                    self.commit(vec![(item, staged)], Atomicity::AllOrNothing);
                } else {
                    self.note(format!("{} abandons {}", self.writers[w].name, item.unit));
                }
                WriterState::Idle
            }
        };
        self.writers[w].state = next;
    }

    fn content(&mut self, unit: &str, version: u64) -> Vec<u8> {
        // Three possible outputs per (unit, version): duplicates and conflicts both happen.
        let variant = self.rng.below(3);
        format!("{unit}@{version}#{variant}").into_bytes()
    }

    fn pick_unit(&mut self) -> String {
        unit_name(self.rng.below(UNITS as u64))
    }

    fn version_for(&mut self, unit: &str) -> u64 {
        let cur = self.model.current.get(unit).map_or(0, |w| w.version);
        (cur + self.rng.below(3))
            .saturating_sub(self.rng.below(2))
            .max(1)
    }

    fn start_work(&mut self, w: usize) -> WriterState {
        let unit = self.pick_unit();
        match self.rng.below(10) {
            0..=3 => {
                let version = self.version_for(&unit);
                let content = self.content(&unit, version);
                self.stage_without_token(unit, version, content, Intent::Put)
            }
            4..=6 => {
                let version = self.version_for(&unit) + 1;
                let ttl = 1_000 + self.rng.below(5_000);
                let worker = self.writers[w].name.clone();
                match self.claim(&unit, version, &worker, ttl) {
                    Some(ClaimOutcome::Granted { lease, .. }) => WriterState::Claimed(lease),
                    _ => WriterState::Idle,
                }
            }
            7 => {
                let Some(cur) = self.model.current.get(&unit).cloned() else {
                    return WriterState::Idle;
                };
                let fix = self.rng.below(4);
                let content = format!("{unit}@{}#fix{fix}", cur.version).into_bytes();
                self.stage_without_token(unit, cur.version, content, Intent::Correct)
            }
            _ => {
                // A retry of an output produced long ago (maybe corrected or superseded since).
                let Some((unit, version, content)) = self.rng.pick(&self.past).cloned() else {
                    return WriterState::Idle;
                };
                self.stage_without_token(unit, version, content, Intent::Put)
            }
        }
    }

    fn work_under_lease(&mut self, w: usize, lease: Lease) -> WriterState {
        match self.rng.below(10) {
            0..=2 => {
                let ttl = 1_000 + self.rng.below(5_000);
                match self.renew(&lease, ttl) {
                    Some(RenewOutcome::Renewed(l)) => WriterState::Claimed(l),
                    _ => {
                        self.old_leases.push(lease);
                        WriterState::Idle
                    }
                }
            }
            3 => {
                self.release(&lease);
                self.old_leases.push(lease);
                WriterState::Idle
            }
            _ => {
                let content = self.content(&lease.unit, lease.source_version);
                let _ = w;
                let st = self.stage_item(Item {
                    unit: lease.unit.clone(),
                    version: lease.source_version,
                    content,
                    token: Some(lease.token),
                    intent: Intent::Put,
                });
                self.old_leases.push(lease);
                st
            }
        }
    }

    fn stage(&mut self, content: &[u8]) -> Option<Staged> {
        match self.store().stage_bytes(content) {
            Ok(s) => Some(s),
            Err(e) => {
                self.expect_fault(&format!("staging: {e}"));
                None
            }
        }
    }

    /// Stages `content` for a token-less write of `unit` at `version`.
    fn stage_without_token(
        &mut self,
        unit: String,
        version: u64,
        content: Vec<u8>,
        intent: Intent,
    ) -> WriterState {
        self.stage_item(Item {
            unit,
            version,
            content,
            token: None,
            intent,
        })
    }

    fn stage_item(&mut self, item: Item) -> WriterState {
        match self.stage(&item.content) {
            Some(staged) => {
                self.past
                    .push((item.unit.clone(), item.version, item.content.clone()));
                WriterState::Staged { item, staged }
            }
            None => WriterState::Idle,
        }
    }

    /// An error is acceptable only as the effect of an injected fault.
    /// Runs `op` on the store with a panic possibly armed, and disarms it after. An engine
    /// operation answers (it never unwinds into the caller for a panic of the leader's or the
    /// applier's), and a panic that came has failed the store before anything else was decided
    /// (I10): its writes are refused from then on.
    fn unwinding<T>(
        &mut self,
        what: &str,
        op: impl FnOnce(&Store) -> oncelake::Result<T>,
    ) -> oncelake::Result<T> {
        let ops_before = self.plan.ops();
        let store = self
            .store
            .as_ref()
            .expect("the store is open between steps");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(store)))
            .unwrap_or_else(|p| {
                panic!(
                    "I10: {what} unwound into its caller: {:?}",
                    p.downcast_ref::<String>()
                )
            });
        let clock_panicked = self.panicky.disarm();
        let file_panicked = self.plan.disarm_panic();
        if clock_panicked || file_panicked {
            self.counts.panics += 1;
            self.note(format!("{what}: a panic came (clock {clock_panicked}, file op {file_panicked}) after op {ops_before}"));
            assert!(
                self.store().failure().is_some(),
                "I10: the panic in {what} did not fail the store"
            );
            let again = self.store().put("t/after-panic", 1, b"x");
            assert!(
                matches!(again, Err(oncelake::Error::Failed { .. })),
                "I10: a write after the panic: {again:?}"
            );
        }
        r
    }

    fn expect_fault(&mut self, what: &str) {
        assert!(
            what.contains("injected") || self.plan.crashed() || self.store().failure().is_some(),
            "an operation failed without an injected fault: {what}"
        );
        self.note(format!("fault: {what}"));
    }

    // -----------------------------------------------------------------------------------------
    // Commits.

    fn commit(&mut self, items: Vec<(Item, Staged)>, atomicity: Atomicity) {
        let now_before = self.now();
        let mut batch = Batch::new();
        if atomicity == Atomicity::Partial {
            batch = batch.partial();
        }
        let mut plain = Vec::new();
        for (it, staged) in &items {
            batch = batch.item(it.unit.clone(), it.version, staged, it.token, it.intent);
            plain.push(it.clone());
        }
        // The leader reads the clock when it decides; nothing moves it in between.
        let exps: Vec<Exp> = plain
            .iter()
            .map(|i| self.model.expect(i, now_before))
            .collect();
        match self.rng.below(100) {
            // Crash inside this commit: at one of its writes or its sync ...
            0..=4 => self.plan.crash_at(self.plan.ops() + 1 + self.rng.below(8)),
            // ... or exactly at its sync, when all its writes are in the page cache.
            5..=9 => self.plan.crash_at_db_sync(1 + self.rng.below(2)),
            // ... or a panic (I10): at one of its file operations (the write-ahead append, the
            // apply, a checkpoint), or at one of the leader's or the applier's clock readings.
            10..=12 => self.plan.panic_at(self.plan.ops() + 1 + self.rng.below(8)),
            13..=14 => self.panicky.panic_in(1 + self.rng.below(3)),
            _ => {}
        }
        let r = self.unwinding("commit", |store| store.commit(batch));
        drop(items);
        match r {
            Ok(report) => self.settle_commit(&plain, &exps, atomicity, report, now_before),
            Err(e) => {
                self.expect_fault(&format!("commit: {e}"));
                self.recover(InFlight::Commit(plain, exps));
            }
        }
    }

    fn settle_commit(
        &mut self,
        items: &[Item],
        exps: &[Exp],
        atomicity: Atomicity,
        report: CommitReport,
        now: u64,
    ) {
        let ctx = format!("commit {items:?} expected {exps:?} got {report:?}");
        assert_eq!(report.units.len(), items.len(), "{ctx}");
        let names: Vec<&str> = report.units.iter().map(|u| u.outcome.name()).collect();
        for (n, e) in names.iter().zip(exps) {
            match e {
                Exp::Accept(_) => assert!(
                    *n == "committed" || *n == "aborted",
                    "{ctx}: an acceptable unit was {n}"
                ),
                Exp::Not(set) => assert!(set.contains(n), "{ctx}: {n} is not one of {set:?}"),
            }
        }
        let rejected = names
            .iter()
            .any(|n| !matches!(*n, "committed" | "duplicate" | "aborted"));
        let any_accept = exps.iter().any(|e| matches!(e, Exp::Accept(_)));
        let applies = any_accept && !(rejected && atomicity == Atomicity::AllOrNothing);
        for (n, e) in names.iter().zip(exps) {
            if let Exp::Accept(_) = e {
                let want = if applies { "committed" } else { "aborted" };
                assert_eq!(*n, want, "{ctx}");
            }
        }
        for (u, e) in report.units.iter().zip(exps) {
            if let (oncelake::Outcome::Committed { revision, seq, .. }, Exp::Accept(rev)) =
                (u.outcome, e)
            {
                assert_eq!(revision, *rev, "{ctx}: revision");
                assert_eq!(Some(seq), report.seq, "{ctx}: seq");
            }
        }
        if applies {
            let seq = report.seq.unwrap_or_else(|| panic!("{ctx}: no seq"));
            assert_eq!(seq, self.model.last_seq + 1, "{ctx}: seqs rise by one");
            self.model.apply_commit(items, exps, seq, now);
            self.counts.commits += 1;
            self.counts.committed_units +=
                names.iter().filter(|n| **n == "committed").count() as u64;
        } else {
            assert_eq!(report.seq, None, "{ctx}");
            self.counts.rejections += 1;
        }
        self.note(format!(
            "commit {:?} -> {names:?} seq {:?}",
            items.iter().map(|i| &i.unit).collect::<Vec<_>>(),
            report.seq
        ));
    }

    fn multi_commit(&mut self) {
        let n = 2 + self.rng.below(3);
        let mut units = BTreeSet::new();
        while units.len() < n as usize {
            units.insert(self.pick_unit());
        }
        let mut items = Vec::new();
        for unit in units {
            let version = self.version_for(&unit);
            let content = self.content(&unit, version);
            let Some(staged) = self.stage(&content) else {
                return;
            };
            self.past.push((unit.clone(), version, content.clone()));
            items.push((
                Item {
                    unit,
                    version,
                    content,
                    token: None,
                    intent: Intent::Put,
                },
                staged,
            ));
        }
        let atomicity = if self.rng.chance(30) {
            Atomicity::Partial
        } else {
            Atomicity::AllOrNothing
        };
        self.commit(items, atomicity);
    }

    // -----------------------------------------------------------------------------------------
    // Claims.

    fn claim_exp(&self, unit: &str, version: u64, worker: &str, now: u64) -> ClaimExp {
        if self
            .model
            .current
            .get(unit)
            .is_some_and(|w| w.version >= version)
        {
            return ClaimExp::Done;
        }
        match self.model.claims.get(unit) {
            Some(c) if c.live(now) && c.worker != worker => ClaimExp::Held(c.worker.clone()),
            Some(c) if c.live(now) && c.version == version => ClaimExp::Granted {
                token: c.token,
                new: false,
            },
            _ => ClaimExp::Granted {
                token: self.model.next_token,
                new: true,
            },
        }
    }

    fn apply_claim(&mut self, unit: &str, version: u64, worker: &str, expires: u64, e: &ClaimExp) {
        if let ClaimExp::Granted { token, new } = *e {
            if new {
                self.model.next_token += 1;
                self.model.issued.insert(token, unit.to_string());
            }
            self.model.claims.insert(
                unit.to_string(),
                ClaimState {
                    worker: worker.to_string(),
                    token,
                    version,
                    expires,
                    released: false,
                },
            );
            self.model.last_seq += 1;
        }
    }

    fn claim(&mut self, unit: &str, version: u64, worker: &str, ttl: u64) -> Option<ClaimOutcome> {
        let now = self.now();
        let exp = self.claim_exp(unit, version, worker, now);
        if self.rng.chance(3) {
            self.panicky.panic_in(1);
        }
        let r = self.unwinding("claim", |s| {
            s.claim(unit, version, worker, Duration::from_millis(ttl))
        });
        self.counts.claims += 1;
        let got = match r {
            Ok(got) => got,
            Err(e) => {
                self.expect_fault(&format!("claim: {e}"));
                let inflight = InFlight::Claim(unit.into(), version, worker.into(), now + ttl, exp);
                self.recover(inflight);
                return None;
            }
        };
        let ctx = format!("claim {unit}@{version} by {worker}: expected {exp:?}, got {got:?}");
        match (&exp, &got) {
            (ClaimExp::Done, ClaimOutcome::AlreadyDone(_)) => {}
            (ClaimExp::Held(h), ClaimOutcome::Held { worker, .. }) => {
                assert_eq!(h, worker, "{ctx}")
            }
            (ClaimExp::Granted { token, .. }, ClaimOutcome::Granted { lease, .. }) => {
                assert_eq!(lease.token, *token, "{ctx}");
                assert_eq!(lease.expires_at_ms, now + ttl, "{ctx}");
            }
            _ => panic!("{ctx}"),
        }
        self.apply_claim(unit, version, worker, now + ttl, &exp);
        self.note(format!("claim {unit}@{version} {worker} -> {exp:?}"));
        Some(got)
    }

    fn renew_exp(&self, lease: &Lease) -> bool {
        self.model
            .claims
            .get(&lease.unit)
            .is_some_and(|c| c.token == lease.token && !c.released)
    }

    fn renew(&mut self, lease: &Lease, ttl: u64) -> Option<RenewOutcome> {
        let now = self.now();
        let exp = self.renew_exp(lease);
        match self.store().renew(lease, Duration::from_millis(ttl)) {
            Ok(got) => {
                assert_eq!(
                    matches!(got, RenewOutcome::Renewed(_)),
                    exp,
                    "renew {lease:?}: {got:?}"
                );
                if exp {
                    self.apply_renew(lease, now + ttl);
                }
                self.note(format!("renew {} {} -> {exp}", lease.unit, lease.token));
                Some(got)
            }
            Err(e) => {
                self.expect_fault(&format!("renew: {e}"));
                self.recover(InFlight::Renew(lease.clone(), now + ttl));
                None
            }
        }
    }

    fn apply_renew(&mut self, lease: &Lease, expires: u64) {
        if let Some(c) = self.model.claims.get_mut(&lease.unit) {
            c.expires = expires;
        }
        self.model.last_seq += 1;
    }

    fn release_exp(&self, lease: &Lease) -> bool {
        self.model
            .claims
            .get(&lease.unit)
            .is_some_and(|c| c.token == lease.token && !c.released && c.worker == lease.worker)
    }

    fn release(&mut self, lease: &Lease) {
        let exp = self.release_exp(lease);
        match self.store().release(lease) {
            Ok(got) => {
                assert_eq!(was_released(&got), exp, "release {lease:?}: {got:?}");
                if exp {
                    self.apply_release(lease);
                }
                self.note(format!("release {} {} -> {got:?}", lease.unit, lease.token));
            }
            Err(e) => {
                self.expect_fault(&format!("release: {e}"));
                self.recover(InFlight::Release(lease.clone()));
            }
        }
    }

    fn apply_release(&mut self, lease: &Lease) {
        if let Some(c) = self.model.claims.get_mut(&lease.unit) {
            c.released = true;
        }
        self.model.last_seq += 1;
    }

    // -----------------------------------------------------------------------------------------
    // Hostile callers.

    fn hostile(&mut self) {
        self.counts.hostile += 1;
        let unit = self.pick_unit();
        let kind = self.rng.below(5);
        let token = match kind {
            // Never issued.
            0 => Some(self.model.next_token + 1_000 + self.rng.below(1_000_000)),
            // Issued, for another unit.
            1 => {
                let foreign: Vec<u64> = self
                    .model
                    .issued
                    .iter()
                    .filter(|(_, u)| **u != unit)
                    .map(|(t, _)| *t)
                    .collect();
                match self.rng.pick(&foreign) {
                    Some(&t) => Some(t),
                    None => return,
                }
            }
            // Once valid for this unit: released, used, superseded.
            2 => {
                let mine: Vec<u64> = self
                    .old_leases
                    .iter()
                    .filter(|l| l.unit == unit)
                    .map(|l| l.token)
                    .collect();
                match self.rng.pick(&mine) {
                    Some(&t) => Some(t),
                    None => return,
                }
            }
            3 => return self.wrong_worker_release(),
            _ => return self.foreign_handle(),
        };
        let version = self.version_for(&unit);
        let content = self.content(&unit, version);
        let Some(staged) = self.stage(&content) else {
            return;
        };
        self.note(format!("hostile token {token:?} on {unit}"));
        let item = Item {
            unit,
            version,
            content,
            token,
            intent: Intent::Put,
        };
        self.commit(vec![(item, staged)], Atomicity::AllOrNothing);
    }

    fn wrong_worker_release(&mut self) {
        let Some((unit, c)) = self
            .model
            .claims
            .iter()
            .find(|(_, c)| !c.released)
            .map(|(u, c)| (u.clone(), c.clone()))
        else {
            return;
        };
        let lease = Lease {
            unit,
            worker: format!("{}-impostor", c.worker),
            token: c.token,
            source_version: c.version,
            expires_at_ms: c.expires,
        };
        self.note(format!(
            "hostile release of {} as {}",
            lease.unit, lease.worker
        ));
        self.release(&lease);
    }

    fn foreign_handle(&mut self) {
        if self.other.is_none() {
            let d = scratch("oncelake-dst");
            let s = Store::open(d.path().join("other")).expect("open a second store");
            self.other = Some((d, s));
        }
        let unit = self.pick_unit();
        let version = self.version_for(&unit);
        let content = self.content(&unit, version);
        let staged = match &self.other {
            Some((_, other)) => other
                .stage_bytes(&content)
                .expect("stage in the other store"),
            None => return,
        };
        let r = self
            .store()
            .commit(Batch::new().put(unit.clone(), version, &staged));
        self.note(format!(
            "foreign handle on {unit} -> {:?}",
            r.as_ref().map(|r| r.seq)
        ));
        match r {
            Err(e) if self.plan.crashed() || self.store().failure().is_some() => {
                self.expect_fault(&e.to_string());
                self.recover(InFlight::Other);
            }
            Err(_) => {}
            Ok(report) => panic!("a handle of another store was committed: {report:?}"),
        }
    }

    fn oversized_batch(&mut self) {
        // 66,000 units with 1 KiB keys: a log record over the 64 MiB limit.
        let Some(staged) = self.stage(b"one object for many units") else {
            return;
        };
        let mut batch = Batch::new();
        let pad = "x".repeat(1000);
        for i in 0..66_000 {
            batch = batch.put(format!("big/{pad}/{i:06}"), 1, &staged);
        }
        match self.store().commit(batch) {
            Err(e) => {
                assert!(!self.plan.crashed(), "{e}");
                self.note(format!("oversized batch refused: {e}"));
            }
            Ok(report) => {
                assert!(report.applied(), "{report:?}");
                let snap = self.store().snapshot().unwrap();
                for r in snap.changes_since(0).unwrap() {
                    r.unwrap_or_else(|e| {
                        panic!("an accepted oversized batch does not read back: {e}")
                    });
                }
                let rep = oncelake::replay(&snap).unwrap();
                assert!(rep.is_clean(), "{:?}", rep.problems.first());
                // The model does not follow 66,000 units: compare only what it knows from here.
                let last = snap.seq();
                drop(snap);
                for i in 0..66_000 {
                    let unit = format!("big/{pad}/{i:06}");
                    let w = Want {
                        version: 1,
                        revision: 0,
                        content: b"one object for many units".to_vec(),
                        seq: last,
                    };
                    self.model.rows.push(Row {
                        unit: unit.clone(),
                        want: w.clone(),
                        superseded_at: None,
                    });
                    self.model.current.insert(unit, w);
                }
                self.model.last_seq = last;
                self.note("oversized batch committed (split)".into());
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // GC and snapshots.

    fn gc(&mut self) {
        let retain_ms = *self
            .rng
            .pick(&[0u64, 1_000, 60_000, 7 * 86_400_000])
            .unwrap();
        let dry_run = self.rng.chance(10);
        let cutoff = self.now().saturating_sub(retain_ms);
        if !dry_run {
            self.model.max_cutoff = self.model.max_cutoff.max(cutoff);
        }
        let options = GcOptions {
            dry_run,
            grace: Duration::ZERO,
            retain: Duration::from_millis(retain_ms),
        };
        self.counts.gcs += 1;
        if !dry_run && self.rng.chance(10) {
            // A panic inside the collection: in its prune (a group of its own), its deletions.
            self.plan.panic_at(self.plan.ops() + 1 + self.rng.below(12));
        }
        let gc =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.store().gc(options)));
        if self.plan.disarm_panic() {
            // In its prune's group the leader answers it (an error); in the deletions, which run
            // in the caller's thread, it unwinds into the caller. Either way the store is failed.
            assert!(
                !matches!(gc, Ok(Ok(_))),
                "a panic came inside gc, which reported success"
            );
            self.counts.panics += 1;
            assert!(
                self.store().failure().is_some(),
                "I10: a panic inside gc did not fail the store"
            );
            self.note("gc: a panic came".into());
            self.recover(InFlight::Other);
            return;
        }
        let gc = gc.unwrap_or_else(|p| {
            panic!(
                "gc unwound without an injected panic: {:?}",
                p.downcast_ref::<String>()
            )
        });
        match gc {
            Ok(r) => self.note(format!(
                "gc retain {retain_ms} dry {dry_run}: {} objects, {} rows, from {}",
                r.objects, r.history_rows_pruned, r.history_from
            )),
            Err(e) => {
                self.expect_fault(&format!("gc: {e}"));
                if self.plan.crashed() || self.store().failure().is_some() {
                    self.recover(InFlight::Other);
                }
                return;
            }
        }
        self.check_i8();
    }

    /// I8: every object an open snapshot can see is still there, and so is every object a writer
    /// holds staged for a commit.
    fn check_i8(&self) {
        for h in &self.held {
            let want = self.model.state_at(h.seq);
            check_view(
                &h.snap,
                &want,
                &format!("held snapshot at {} after GC", h.seq),
            );
        }
        for w in &self.writers {
            if let WriterState::Staged { staged, item } = &w.state {
                let p = self.store().object_path(&staged.id());
                assert!(p.exists(), "GC removed the staged object of {item:?} (I8)");
            }
        }
    }

    fn take_snapshot(&mut self) {
        self.counts.snapshots += 1;
        let last = self.model.last_seq;
        let as_of = self.rng.chance(50) && last > 0;
        let r = if as_of {
            let seq = self.rng.below(last + 1);
            self.store().snapshot_at(seq).map(|s| (s, seq))
        } else {
            self.store().snapshot().map(|s| (s, last))
        };
        match r {
            Ok((snap, seq)) => {
                assert_eq!(snap.seq(), seq);
                check_view(
                    &snap,
                    &self.model.state_at(seq),
                    &format!("snapshot at {seq}"),
                );
                if self.held.len() < 3 {
                    self.held.push(Held { snap, seq });
                }
                self.note(format!("snapshot at {seq}"));
            }
            Err(oncelake::Error::SeqOutOfRange { asked, oldest, .. }) => {
                assert!(
                    asked < oldest,
                    "seq {asked} refused though the horizon is {oldest}"
                );
                assert!(self.model.max_cutoff > 0, "a horizon without a GC");
                self.note(format!("snapshot at {asked} below the horizon {oldest}"));
            }
            Err(e) => panic!("snapshot: {e}"),
        }
    }

    fn reread_held(&mut self) {
        for h in &self.held {
            check_view(
                &h.snap,
                &self.model.state_at(h.seq),
                &format!("held snapshot at {}", h.seq),
            );
        }
    }

    // -----------------------------------------------------------------------------------------
    // Crashes.

    /// Drops the process (power cut), reopens, and decides what the operation in flight did.
    fn recover(&mut self, inflight: InFlight) {
        if self.store.is_none() {
            return;
        }
        self.counts.crashes += 1;
        self.plan.crash_now();
        for w in &mut self.writers {
            if let WriterState::Claimed(l) = std::mem::replace(&mut w.state, WriterState::Idle) {
                self.old_leases.push(l);
            }
        }
        self.held.clear();
        self.store = None;
        let cut_seed = self.rng.next();
        let loss: PowerLoss = self
            .plan
            .apply_power_loss_seeded(&self.path.join(oncelake::DB_FILE), cut_seed)
            .unwrap_or_else(|e| panic!("applying the power loss: {e}"));
        self.counts.db_torn += loss.db_torn as u64;
        self.counts.files_torn += loss.files_torn as u64;
        self.counts.entries_undone += loss.entries_undone as u64;
        self.note(format!("power cut {loss:?}; in flight {inflight:?}"));
        self.open(true);
        let seq = self
            .store()
            .last_seq()
            .expect("read the seq after a reopen");
        let acked = self.model.last_seq;
        assert!(
            seq >= acked,
            "I3: acknowledged seq {acked} lost, the store ends at {seq}"
        );
        let applied = match seq - acked {
            0 => false,
            1 => true,
            n => panic!("I3: {n} records appeared after seq {acked} from one operation in flight ({inflight:?})"),
        };
        if applied {
            self.counts.in_flight_applied += 1;
            self.apply_in_flight(inflight, seq);
        }
        let v = self.store().verify(VerifyOptions { deep: true }).unwrap();
        assert!(v.is_intact(), "verify after a crash: {v:?}");
    }

    fn apply_in_flight(&mut self, inflight: InFlight, seq: u64) {
        let record = {
            let snap = self.store().snapshot().unwrap();
            let r = snap.changes_since(seq - 1).unwrap().next();
            r.expect("the record at the new seq").expect("it decodes")
        };
        match (inflight, &record.body) {
            (InFlight::Commit(items, exps), RecordBody::Commit { .. }) => {
                self.model.apply_commit(&items, &exps, seq, record.time_ms);
            }
            (InFlight::Claim(unit, version, worker, expires, e), RecordBody::ClaimGranted(_)) => {
                self.apply_claim(&unit, version, &worker, expires, &e)
            }
            (InFlight::Renew(lease, expires), RecordBody::ClaimGranted(_)) => {
                self.apply_renew(&lease, expires)
            }
            (InFlight::Release(lease), RecordBody::ClaimReleased(_)) => self.apply_release(&lease),
            (i, _) => panic!("a record {record:?} appeared for {i:?}"),
        }
    }

    fn shutdown_and_reopen_cleanly(&mut self) {
        // A clean close (index.snap written through the seam), then a reopen that uses it.
        self.held.clear();
        for w in &mut self.writers {
            w.state = WriterState::Idle;
        }
        if self.plan.crashed() {
            self.recover(InFlight::Other);
        }
        self.store = None;
        self.plan
            .apply_power_loss_seeded(&self.path.join(oncelake::DB_FILE), self.seed)
            .unwrap();
        self.open(false);
        let report = self.store().open_report();
        self.counts.index_snap_loads += report.index_from_snapshot as u64;
        self.note(format!("clean reopen: {report:?}"));
        self.check();
    }

    // -----------------------------------------------------------------------------------------
    // The per-step check.

    fn check(&mut self) {
        // A read applies whatever waits in the backlog first (writers leave up to
        // `Options::apply_min_bytes` for later), so a fault armed for the database can strike
        // here, outside any step: recover from it as from one within a step, then check.
        if let Err(e) = self.store().wait_applied() {
            assert!(
                self.plan.crashed() || self.store().failure().is_some(),
                "applying the backlog failed with no fault: {e}"
            );
            self.note(format!("fault while applying the backlog: {e}"));
            self.recover(InFlight::Other);
        }
        let pick = self.rng.next();
        let store = self.store();
        let snap = store.snapshot().unwrap();
        assert_eq!(snap.seq(), self.model.last_seq, "the store's seq");
        check_view(&snap, &self.model.current, "the current view");
        for i in 0..UNITS as u64 {
            let unit = unit_name(i);
            let got = store.lookup(&unit).unwrap();
            let want = self.model.current.get(&unit);
            assert_eq!(
                got.map(|c| (c.source_version, c.seq)),
                want.map(|w| (w.version, w.seq)),
                "the dedup index for {unit}"
            );
        }
        // I1, I5, I6, I7, I9 and the log rules, as the engine states them.
        oncelake::invariants::assert_holds(&store.check_invariants().unwrap());
        // One as-of view within the kept history.
        let from = snap.history_from();
        drop(snap);
        let last = self.model.last_seq;
        if last > from {
            let s = from + pick % (last - from + 1);
            let view = store.snapshot_at(s).unwrap();
            check_view(&view, &self.model.state_at(s), &format!("as of {s}"));
        }
    }
}

/// Whether `release` released (rather than refusing: `NotHolder`, `Lost`).
fn was_released(got: &oncelake::ReleaseOutcome) -> bool {
    matches!(got, oncelake::ReleaseOutcome::Released)
}

/// The view holds exactly `want` (I1, I4, I5), and every object reads back with the model's
/// bytes and the recorded size and CRC (I2, I8).
fn check_view(snap: &Snapshot, want: &BTreeMap<String, Want>, what: &str) {
    let mut seen = 0;
    for e in snap.iter().unwrap() {
        let e = e.unwrap();
        let w = want
            .get(&e.unit)
            .unwrap_or_else(|| panic!("{what}: unexpected unit {e:?}"));
        assert_eq!(
            (e.source_version, e.revision, e.seq),
            (w.version, w.revision, w.seq),
            "{what}: {}",
            e.unit
        );
        let bytes = snap
            .read_object(&e)
            .unwrap_or_else(|err| panic!("{what}: object of {} (I2/I8): {err}", e.unit));
        assert_eq!(bytes, w.content, "{what}: content of {}", e.unit);
        seen += 1;
    }
    assert_eq!(seen, want.len(), "{what}: units missing (I1)");
}

// ---------------------------------------------------------------------------------------------
// Drivers.

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

/// Runs one seed; on failure prints the seed, the step and the last actions, then fails.
fn run_seed(seed: u64, steps: usize) -> (Counts, u64) {
    let mut sim = Sim::new(seed);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run(steps)));
    match r {
        Ok(()) => (sim.counts.clone(), sim.trace),
        Err(p) => {
            eprintln!(
                "DST FAILED: seed {seed:#x} at step {} — rerun with ONCELAKE_DST_SEED={seed:#x} cargo test --test dst\nlast actions:\n  {}",
                sim.step,
                sim.log.join("\n  ")
            );
            std::panic::resume_unwind(p)
        }
    }
}

fn summary(total: &mut Counts, c: &Counts) {
    total.steps += c.steps;
    total.commits += c.commits;
    total.committed_units += c.committed_units;
    total.rejections += c.rejections;
    total.claims += c.claims;
    total.gcs += c.gcs;
    total.snapshots += c.snapshots;
    total.hostile += c.hostile;
    total.crashes += c.crashes;
    total.panics += c.panics;
    total.in_flight_applied += c.in_flight_applied;
    total.index_snap_loads += c.index_snap_loads;
    total.db_torn += c.db_torn;
    total.files_torn += c.files_torn;
    total.entries_undone += c.entries_undone;
    total.ops += c.ops;
}

#[test]
fn simulate_the_engine_from_seeds() {
    let steps = env_u64("ONCELAKE_DST_STEPS").map_or(DEFAULT_STEPS, |s| s as usize);
    let (base, count, budget) = if let Some(seed) = env_u64("ONCELAKE_DST_SEED") {
        (seed, 1, None)
    } else if let Some(n) = env_u64("ONCELAKE_DST_SEEDS") {
        let base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            << 16;
        (base, n, None)
    } else {
        (FIXED_BASE, u64::MAX, Some(CI_BUDGET))
    };
    eprintln!("dst: seeds from {base:#x}, {steps} steps each");
    let start = Instant::now();
    let mut total = Counts::default();
    let mut seeds = 0u64;
    for i in 0..count {
        if budget.is_some_and(|b| start.elapsed() >= b) {
            break;
        }
        let seed = base.wrapping_add(i);
        let (c, _) = run_seed(seed, steps);
        eprintln!(
            "dst: seed {seed:#x}: {} steps, {} commits, {} claims, {} gcs, {} crashes ({} in flight applied), {} panics, {} file ops",
            c.steps, c.commits, c.claims, c.gcs, c.crashes, c.in_flight_applied, c.panics, c.ops
        );
        summary(&mut total, &c);
        seeds += 1;
    }
    eprintln!("dst: {seeds} seeds in {:.1?}: {total:?}", start.elapsed());
    assert!(seeds >= 1);
    assert!(
        total.commits > 0 && total.crashes > 0 && total.gcs > 0 && total.panics > 0,
        "{total:?}"
    );
}

#[test]
fn a_seed_replays_exactly() {
    let seed = env_u64("ONCELAKE_DST_SEED").unwrap_or(FIXED_BASE + 1_000);
    let run = || {
        let (c, trace) = run_seed(seed, 120);
        (trace, c.steps, c.commits, c.crashes, c.ops)
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b, "seed {seed:#x} did not replay exactly");
}

/// `index.snap` goes through the seam: a clean close counts its operations, a crash armed at the
/// close's first operation leaves no snapshot (the old `std::fs` path wrote one anyway), and the
/// file stays writable for its owner (tools and tests rewrite it in place).
#[test]
fn the_index_snapshot_is_written_through_the_seam() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("oncelake-dst");
    let path = dir.path().join("lake");
    let open = |plan: &Arc<FaultPlan>| {
        let options = Options {
            vfs: Arc::new(FaultyVfs::new(Arc::new(RealVfs), plan.clone())),
            faults: Some(plan.clone()),
            ..Options::default()
        };
        Store::open_with(&path, options).unwrap()
    };
    let snap = path.join("index.snap");

    let plan = FaultPlan::new();
    let store = open(&plan);
    store.put("a", 1, b"a1").unwrap();
    plan.crash_at(plan.ops() + 1);
    drop(store);
    assert!(
        !snap.exists(),
        "a crash at the close's first operation wrote a snapshot"
    );

    let plan = FaultPlan::new();
    let store = open(&plan);
    store.put("b", 1, b"b1").unwrap();
    let before = plan.ops();
    drop(store);
    assert!(
        plan.ops() >= before + 5,
        "remove, create, write, fsync, rename, directory sync: {} operations",
        plan.ops() - before
    );
    let mode = std::fs::metadata(&snap).unwrap().permissions().mode();
    assert_ne!(mode & 0o200, 0, "index.snap is read-only: {mode:o}");

    let plan2 = FaultPlan::new();
    plan2.fail_reads(true);
    let store = open(&plan2);
    let r = store.open_report();
    assert!(
        !r.index_from_snapshot,
        "a failing read still used the snapshot: {r:?}"
    );
    assert!(store.get("a").unwrap().is_some() && store.get("b").unwrap().is_some());
    drop(store);
    let store = open(&FaultPlan::new());
    assert!(
        store.open_report().index_from_snapshot,
        "{:?}",
        store.open_report()
    );
}
