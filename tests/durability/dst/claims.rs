//! Claims, renewals and releases, each checked against the model's prediction.

use super::checks::was_released;
use super::model::{ClaimExp, InFlight};
use super::sim::Sim;
use super::ClaimState;
use oncelake::{ClaimOutcome, Lease, RenewOutcome};
use std::time::Duration;

impl Sim {
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

    pub(super) fn apply_claim(
        &mut self,
        unit: &str,
        version: u64,
        worker: &str,
        expires: u64,
        e: &ClaimExp,
    ) {
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

    pub(super) fn claim(
        &mut self,
        unit: &str,
        version: u64,
        worker: &str,
        ttl: u64,
    ) -> Option<ClaimOutcome> {
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

    pub(super) fn renew(&mut self, lease: &Lease, ttl: u64) -> Option<RenewOutcome> {
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

    pub(super) fn apply_renew(&mut self, lease: &Lease, expires: u64) {
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

    pub(super) fn release(&mut self, lease: &Lease) {
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

    pub(super) fn apply_release(&mut self, lease: &Lease) {
        if let Some(c) = self.model.claims.get_mut(&lease.unit) {
            c.released = true;
        }
        self.model.last_seq += 1;
    }
}
