//! Coordinator mode (SPEC R9): time-limited leases on units, each with a fencing token that rises
//! on every grant. Tokens come from one counter for the whole store, and the claims table keeps
//! each unit's newest lease (also after it ended), so "this token was issued for this unit, is its
//! newest and its lease has not ended" is one exact comparison against that record (see
//! [`crate::commit::rules`]). Claims are durable (a redb table, changed only by the commit leader).
//! Safety never depends on clocks: whether a token commits never looks at one; clocks only decide
//! when a lease may be taken over and whether a commit without a token is busy.

use crate::codec::{put_u64, seal, unseal, Reader};
use crate::commit::rules::{LeaseState, LeaseStatus};
use crate::error::{Error, Result};
use crate::manifest::Entry;
use redb::TableDefinition;

pub(crate) const CLAIMS: TableDefinition<&str, &[u8]> = TableDefinition::new(CLAIMS_TABLE);
const CLAIMS_TABLE: &str = "claims";

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
    /// The lease ended: released by its holder, or by a commit of the unit (`by_commit`).
    pub released: bool,
    /// With `released`: it ended because the unit was committed (an exact retry under its token
    /// is a duplicate), not because its holder gave it up (its token is then fenced outright).
    pub by_commit: bool,
}

impl ClaimRecord {
    /// The sealed value of `unit`'s row in `CLAIMS`.
    pub(crate) fn encode(&self, unit: &str) -> Vec<u8> {
        let mut v = Vec::with_capacity(29 + self.worker.len() + crate::codec::SEAL_LEN);
        put_u64(&mut v, self.token);
        put_u64(&mut v, self.source_version);
        put_u64(&mut v, self.expires_at_ms);
        // 0 live, 1 released by its holder, 2 ended by a commit.
        v.push(match (self.released, self.by_commit) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        });
        v.extend_from_slice(self.worker.as_bytes());
        seal(CLAIMS_TABLE, unit.as_bytes(), v)
    }

    /// Decodes `unit`'s `CLAIMS` value, checking its seal.
    pub(crate) fn decode(unit: &str, b: &[u8]) -> Result<Self> {
        Self::decode_payload(unit, unseal(CLAIMS_TABLE, unit.as_bytes(), unit, b)?)
    }

    /// Decodes an unsealed payload (a checked seal's content, or a format-1 value).
    pub(crate) fn decode_payload(unit: &str, b: &[u8]) -> Result<Self> {
        let corrupt = |detail: String| Error::corrupt_record(CLAIMS_TABLE, unit, detail);
        let mut r = Reader::new(b, "claim record");
        let mut fixed =
            || -> Result<(u64, u64, u64, u8)> { Ok((r.u64()?, r.u64()?, r.u64()?, r.u8()?)) };
        let (token, source_version, expires_at_ms, released) =
            fixed().map_err(|e| corrupt(e.to_string()))?;
        let worker = r.take(r.remaining()).map_err(|e| corrupt(e.to_string()))?;
        Ok(ClaimRecord {
            token,
            source_version,
            expires_at_ms,
            released: match released {
                0 => false,
                1 | 2 => true,
                _ => return Err(corrupt("the lease state is neither 0, 1 nor 2".into())),
            },
            by_commit: released == 2,
            worker: String::from_utf8(worker.to_vec())
                .map_err(|_| corrupt("the worker is not UTF-8".into()))?,
        })
    }

    pub(crate) fn is_live(&self, now_ms: u64) -> bool {
        !self.released && now_ms < self.expires_at_ms
    }

    /// The lease as the commit rules see it at `now_ms`.
    pub(crate) fn state(&self, now_ms: u64) -> LeaseState {
        LeaseState {
            token: self.token,
            status: if self.released && self.by_commit {
                LeaseStatus::Ended
            } else if self.released {
                LeaseStatus::Released
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
            by_commit: false,
        };
        assert_eq!(ClaimRecord::decode("u", &r.encode("u")).unwrap(), r);
        assert!(ClaimRecord::decode("u", &r.encode("u")[..20]).is_err());
        assert!(
            ClaimRecord::decode("v", &r.encode("u")).is_err(),
            "another key"
        );
        assert!(!r.is_live(0), "a released lease is never live");
        let ended = ClaimRecord {
            by_commit: true,
            ..r.clone()
        };
        assert_eq!(ClaimRecord::decode("u", &ended.encode("u")).unwrap(), ended);
        assert_eq!(ended.state(0).status, LeaseStatus::Ended);
        assert_eq!(r.state(0).status, LeaseStatus::Released);
    }
}
