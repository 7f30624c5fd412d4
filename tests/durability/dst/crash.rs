//! Power cuts: reopening, deciding what the operation in flight did (I3), clean restarts.

use super::model::InFlight;
use super::sim::{Sim, WriterState};
use oncelake::fault::PowerLoss;
use oncelake::log::RecordBody;
use oncelake::verify::VerifyOptions;

impl Sim {
    /// Drops the process (power cut), reopens, and decides what the operation in flight did.
    pub(super) fn recover(&mut self, inflight: InFlight) {
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

    pub(super) fn shutdown_and_reopen_cleanly(&mut self) {
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
}
