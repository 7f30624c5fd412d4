//! Coordinator mode (SPEC R9): time-limited leases on units, each with a fencing token that rises
//! on every grant. Tokens come from one counter for the whole store, and the claims table keeps
//! each unit's newest lease (also after it ended), so "this token was issued for this unit, is its
//! newest and its lease has not ended" is one exact comparison against that record (see
//! [`crate::commit::rules`]). Claims are durable (a redb table, changed only by the commit leader).
//! Safety never depends on clocks: whether a token commits never looks at one; clocks only decide
//! when a lease may be taken over and whether a commit without a token is busy.

use crate::commit::rules::{LeaseState, LeaseStatus};
use crate::error::{Error, Result};
use crate::manifest::Entry;
use redb::TableDefinition;

pub(crate) const CLAIMS: TableDefinition<&str, &[u8]> = TableDefinition::new("claims");

/// A granted lease: the right to work on `unit` at `source_version` until `expires_at_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Unit key.
    pub unit: String,
    /// The worker holding it.
    pub worker: String,
    /// The fencing token: pass it to the commit ([`crate::Batch::put_fenced`]).
    pub token: u64,
    /// The source version the worker is producing.
    pub source_version: u64,
    /// When another worker may take the unit over, ms since the Unix epoch.
    pub expires_at_ms: u64,
}

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The lease is yours.
    Granted {
        /// The lease.
        lease: Lease,
        /// Whether it took over another worker's expired lease.
        took_over: bool,
    },
    /// Another worker holds a live lease.
    Held {
        /// Who.
        worker: String,
        /// Until when (ms since the Unix epoch).
        expires_at_ms: u64,
    },
    /// The unit is already committed at or above the asked version.
    AlreadyDone(Entry),
}

/// The answer to a renewal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The lease now runs until the new expiry.
    Renewed(Lease),
    /// The lease was taken over or released; stop working on the unit.
    Lost {
        /// The newest token granted for the unit.
        newest_token: u64,
    },
}

/// The answer to a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The lease ended: its token no longer commits, and the unit may be claimed at once.
    Released,
    /// Refused, nothing changed: the token is the unit's live lease, but another worker holds it.
    NotHolder {
        /// The worker holding the lease.
        holder: String,
    },
    /// Refused, nothing changed: the token is not a lease of the unit that can still end — it was
    /// superseded, already ended (released, or by a commit), or never issued for the unit.
    /// [`crate::FenceReason::of`] on the two tokens says which.
    Lost {
        /// The token of the unit's newest lease (0 if the unit was never claimed).
        newest_token: u64,
    },
}

impl ReleaseOutcome {
    /// Whether the lease was released.
    pub fn is_released(&self) -> bool {
        matches!(self, ReleaseOutcome::Released)
    }
}

/// The stored state of a unit's newest lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClaimRecord {
    pub worker: String,
    pub token: u64,
    pub source_version: u64,
    pub expires_at_ms: u64,
    pub released: bool,
}

impl ClaimRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(29 + self.worker.len());
        v.extend_from_slice(&self.token.to_le_bytes());
        v.extend_from_slice(&self.source_version.to_le_bytes());
        v.extend_from_slice(&self.expires_at_ms.to_le_bytes());
        v.push(self.released as u8);
        v.extend_from_slice(self.worker.as_bytes());
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self> {
        let corrupt = |detail: &str| Error::Corrupt {
            path: "claims".into(),
            detail: detail.to_string(),
        };
        if b.len() < 25 {
            return Err(corrupt("claim record too short"));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(ClaimRecord {
            token: u64_at(0),
            source_version: u64_at(8),
            expires_at_ms: u64_at(16),
            released: match b[24] {
                0 => false,
                1 => true,
                _ => return Err(corrupt("claim released flag is neither 0 nor 1")),
            },
            worker: String::from_utf8(b[25..].to_vec())
                .map_err(|_| corrupt("claim worker is not UTF-8"))?,
        })
    }

    pub(crate) fn is_live(&self, now_ms: u64) -> bool {
        !self.released && now_ms < self.expires_at_ms
    }

    /// The lease as the commit rules see it at `now_ms`.
    pub(crate) fn state(&self, now_ms: u64) -> LeaseState {
        LeaseState {
            token: self.token,
            status: if self.released {
                LeaseStatus::Ended
            } else if self.is_live(now_ms) {
                LeaseStatus::Live
            } else {
                LeaseStatus::Expired
            },
            expires_at_ms: self.expires_at_ms,
        }
    }

    pub(crate) fn lease(&self, unit: &str) -> Lease {
        Lease {
            unit: unit.to_string(),
            worker: self.worker.clone(),
            token: self.token,
            source_version: self.source_version,
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// Checks a worker name: 1..=256 bytes, no control characters.
pub(crate) fn validate_worker(worker: &str) -> Result<()> {
    if worker.is_empty() || worker.len() > 256 || worker.chars().any(char::is_control) {
        return Err(Error::InvalidRequest(format!(
            "worker name {worker:?} must be 1..=256 bytes without control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_records_round_trip() {
        let r = ClaimRecord {
            worker: "w-1".into(),
            token: 9,
            source_version: 3,
            expires_at_ms: 77,
            released: true,
        };
        assert_eq!(ClaimRecord::decode(&r.encode()).unwrap(), r);
        assert!(ClaimRecord::decode(&r.encode()[..20]).is_err());
        assert!(!r.is_live(0), "a released lease is never live");
    }
}
