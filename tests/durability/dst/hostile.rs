//! Hostile callers: forged, foreign-unit and released tokens, wrong-worker releases, `Staged`
//! handles of another store, oversized batches.

use crate::common;

use super::model::{InFlight, Item, Row, Want};
use super::sim::Sim;
use common::scratch;
use oncelake::{Atomicity, Batch, Intent, Lease, Store};

impl Sim {
    pub(super) fn hostile(&mut self) {
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

    pub(super) fn oversized_batch(&mut self) {
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
}
