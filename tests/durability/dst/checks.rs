//! The check after every step: the store's views and dedup index against the model, and the
//! engine's own invariants.

use super::model::{InFlight, Want};
use super::sim::{unit_name, Sim};
use super::UNITS;
use oncelake::Snapshot;
use std::collections::BTreeMap;

impl Sim {
    pub(super) fn check(&mut self) {
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
pub(super) fn was_released(got: &oncelake::ReleaseOutcome) -> bool {
    matches!(got, oncelake::ReleaseOutcome::Released)
}

/// The view holds exactly `want` (I1, I4, I5), and every object reads back with the model's
/// bytes and the recorded size and CRC (I2, I8).
pub(super) fn check_view(snap: &Snapshot, want: &BTreeMap<String, Want>, what: &str) {
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
