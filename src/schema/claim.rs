//! Leases as stored and logged: the claims table's record (a unit's newest lease, kept also
//! after it ended) and the [`Lease`] a grant hands out, which is also what a claim log record
//! carries (`log::ClaimChange`).
//!
//! These are the only two lease shapes. Everything else that needs a lease works from one of
//! them: the commit rules decide from the [`ClaimRecord`] (through [`ClaimRecord::status`]), and
//! the invariant checker's log replay rebuilds a [`ClaimRecord`] from each logged [`Lease`]
//! ([`ClaimRecord::granted`]). The conversions between the two live here and nowhere else.

use super::codec::{put_u64, seal, unseal, Reader, SEAL_LEN};
use super::CLAIMS_TABLE;
use crate::error::{Error, Result};

/// A granted lease: the right to work on `unit` at `source_version` until `expires_at_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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

/// The stored state of a unit's newest lease: a [`Lease`] without its unit (the row's key) and
/// with how it ended. Public (as `commit::rules::ClaimRecord`) because the commit rules decide
/// from it; encoding and decoding stay inside the crate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRecord {
    /// The worker holding (or last holding) it.
    pub worker: String,
    /// Its fencing token: the newest granted for the unit.
    pub token: u64,
    /// The source version the worker is producing.
    pub source_version: u64,
    /// When it expires (or expired), ms since the Unix epoch.
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
        let mut v = Vec::with_capacity(29 + self.worker.len() + SEAL_LEN);
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

    /// Whether it holds off other writers at `now_ms`: not ended and not expired.
    pub fn is_live(&self, now_ms: u64) -> bool {
        !self.released && now_ms < self.expires_at_ms
    }

    /// How the commit rules see it at `now_ms`. The clock only separates live from expired; an
    /// ended lease is ended whatever the time.
    pub fn status(&self, now_ms: u64) -> LeaseStatus {
        match (self.released, self.by_commit) {
            (true, true) => LeaseStatus::Ended,
            (true, false) => LeaseStatus::Released,
            (false, _) if self.is_live(now_ms) => LeaseStatus::Live,
            (false, _) => LeaseStatus::Expired,
        }
    }

    /// A record of worker `w` with `token` whose [`ClaimRecord::status`] at `now_ms` is
    /// `status`; live and ended ones expire at `live_until` (after `now_ms`). For the tests of
    /// the rules and the invariants, which decide from each status in turn.
    #[cfg(test)]
    pub(crate) fn with_status(
        token: u64,
        status: LeaseStatus,
        now_ms: u64,
        live_until: u64,
    ) -> ClaimRecord {
        assert!(
            live_until > now_ms,
            "a live lease must outlast the test's clock"
        );
        let rec = ClaimRecord {
            worker: "w".into(),
            token,
            source_version: 0,
            expires_at_ms: if status == LeaseStatus::Expired {
                now_ms
            } else {
                live_until
            },
            released: matches!(status, LeaseStatus::Ended | LeaseStatus::Released),
            by_commit: status == LeaseStatus::Ended,
        };
        assert_eq!(rec.status(now_ms), status);
        rec
    }
}

impl ClaimRecord {
    /// The record a grant of `lease` writes: live until it expires.
    pub fn granted(lease: &Lease) -> ClaimRecord {
        ClaimRecord {
            worker: lease.worker.clone(),
            token: lease.token,
            source_version: lease.source_version,
            expires_at_ms: lease.expires_at_ms,
            released: false,
            by_commit: false,
        }
    }

    /// The lease this record describes.
    pub(crate) fn lease(&self, unit: &str) -> Lease {
        Lease {
            unit: unit.to_string(),
            worker: self.worker.clone(),
            token: self.token,
            source_version: self.source_version,
            expires_at_ms: self.expires_at_ms,
        }
    }

    /// The lease as the log records it (`log::ClaimChange`): with no expiry (0) once it ended.
    pub(crate) fn logged(&self, unit: &str) -> Lease {
        Lease {
            expires_at_ms: if self.released { 0 } else { self.expires_at_ms },
            ..self.lease(unit)
        }
    }
}

/// Whether the unit's newest lease still holds off other writers: an answer about a
/// [`ClaimRecord`] at some time ([`ClaimRecord::status`]), not a copy of its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Not ended and, by the leader's clock, not expired.
    Live,
    /// Not ended, but expired by the leader's clock: it may be taken over, and a commit without a
    /// token is no longer busy. Its token still commits while it is the newest.
    Expired,
    /// Ended by a commit of the unit: the work is done. Its token changes nothing any more, but
    /// an exact retry of what is committed is answered as the duplicate it is.
    Ended,
    /// Released by its holder, who gave the work up: its token is fenced, whatever it carries.
    Released,
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
        assert_eq!(ended.status(0), LeaseStatus::Ended);
        assert_eq!(r.status(0), LeaseStatus::Released);
        let live = ClaimRecord::granted(&r.lease("u"));
        assert_eq!(live.status(76), LeaseStatus::Live);
        assert_eq!(
            live.status(77),
            LeaseStatus::Expired,
            "expired at its expiry"
        );
        assert_eq!(
            live.lease("u"),
            r.lease("u"),
            "a lease survives the round trip"
        );
    }
}
