//! The simulation's state and its step loop: the store under a fault plan, the writers, the held
//! snapshots, opening and restarting, and the step that picks what happens next.

use crate::common;

use super::model::{InFlight, Item, Model};
use super::{Counts, T0, WRITERS};
use common::{scratch, PanickyClock, SplitMix64 as Rng};
use oncelake::fault::{FaultPlan, FaultyVfs};
use oncelake::vfs::RealVfs;
use oncelake::{Lease, ManualClock, Options, Snapshot, Staged, Store};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug)]
pub(super) enum WriterState {
    Idle,
    Claimed(Lease),
    Staged { item: Item, staged: Staged },
}

pub(super) struct Writer {
    pub(super) name: String,
    pub(super) state: WriterState,
}

/// A snapshot held across later steps, with the seq it must show.
pub(super) struct Held {
    pub(super) snap: Snapshot,
    pub(super) seq: u64,
}

pub(super) struct Sim {
    pub(super) seed: u64,
    pub(super) rng: Rng,
    pub(super) _dir: tempfile::TempDir,
    pub(super) path: PathBuf,
    pub(super) clock: ManualClock,
    /// The store's clock: `clock`'s time, armed now and then to panic at a reading (I10).
    pub(super) panicky: Arc<PanickyClock>,
    pub(super) plan: Arc<FaultPlan>,
    pub(super) store: Option<Store>,
    pub(super) model: Model,
    pub(super) writers: Vec<Writer>,
    pub(super) held: Vec<Held>,
    /// Leases that were once valid (released, committed, superseded): hostile reuse.
    pub(super) old_leases: Vec<Lease>,
    /// Outputs committed (or tried) earlier, for late retries: (unit, version, content).
    pub(super) past: Vec<(String, u64, Vec<u8>)>,
    /// Another store, for foreign `Staged` handles.
    pub(super) other: Option<(tempfile::TempDir, Store)>,
    pub(super) step: usize,
    pub(super) counts: Counts,
    /// A digest of everything observable, to show that a seed replays exactly.
    pub(super) trace: u64,
    pub(super) log: Vec<String>,
}

pub(super) fn unit_name(i: u64) -> String {
    format!("t/u{i:02}")
}

impl Sim {
    pub(super) fn new(seed: u64) -> Sim {
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

    pub(super) fn note(&mut self, what: String) {
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

    pub(super) fn now(&self) -> u64 {
        use oncelake::Clock;
        self.clock.now_ms()
    }

    pub(super) fn store(&self) -> &Store {
        self.store
            .as_ref()
            .expect("the store is open between steps")
    }

    /// Opens the store with a fresh fault plan; with `may_crash`, the open itself (redb's
    /// repair, the index load) may be cut by a power loss, and is then retried on what it left.
    pub(super) fn open(&mut self, may_crash: bool) {
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

    pub(super) fn run(&mut self, steps: usize) {
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

    /// Runs `op` on the store with a panic possibly armed, and disarms it after. An engine
    /// operation answers (it never unwinds into the caller for a panic of the leader's or the
    /// applier's), and a panic that came has failed the store before anything else was decided
    /// (I10): its writes are refused from then on.
    pub(super) fn unwinding<T>(
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

    /// An error is acceptable only as the effect of an injected fault.
    pub(super) fn expect_fault(&mut self, what: &str) {
        assert!(
            what.contains("injected") || self.plan.crashed() || self.store().failure().is_some(),
            "an operation failed without an injected fault: {what}"
        );
        self.note(format!("fault: {what}"));
    }
}
