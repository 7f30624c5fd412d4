//! The simulated writers: put, correct, claim and commit under a lease, stage and abandon work,
//! and the commits (single and multi-unit) with the outcomes the model predicts.

use super::model::{Exp, InFlight, Item};
use super::sim::{unit_name, Sim, WriterState};
use super::{UNITS, WRITERS};
use oncelake::{Atomicity, Batch, ClaimOutcome, CommitReport, Intent, Lease, RenewOutcome, Staged};
use std::collections::BTreeSet;

impl Sim {
    pub(super) fn writer_step(&mut self) {
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

    pub(super) fn content(&mut self, unit: &str, version: u64) -> Vec<u8> {
        // Three possible outputs per (unit, version): duplicates and conflicts both happen.
        let variant = self.rng.below(3);
        format!("{unit}@{version}#{variant}").into_bytes()
    }

    pub(super) fn pick_unit(&mut self) -> String {
        unit_name(self.rng.below(UNITS as u64))
    }

    pub(super) fn version_for(&mut self, unit: &str) -> u64 {
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

    pub(super) fn stage(&mut self, content: &[u8]) -> Option<Staged> {
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

    // -----------------------------------------------------------------------------------------
    // Commits.

    pub(super) fn commit(&mut self, items: Vec<(Item, Staged)>, atomicity: Atomicity) {
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

    pub(super) fn multi_commit(&mut self) {
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
}
