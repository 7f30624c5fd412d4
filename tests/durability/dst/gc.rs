//! GC with a random retention, and the snapshots held across it (I8).

use super::checks::check_view;
use super::model::InFlight;
use super::sim::{Held, Sim, WriterState};
use oncelake::gc::GcOptions;
use std::time::Duration;

impl Sim {
    pub(super) fn gc(&mut self) {
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

    pub(super) fn take_snapshot(&mut self) {
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

    pub(super) fn reread_held(&mut self) {
        for h in &self.held {
            check_view(
                &h.snap,
                &self.model.state_at(h.seq),
                &format!("held snapshot at {}", h.seq),
            );
        }
    }
}
