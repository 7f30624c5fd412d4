//! Coordinator mode (SPEC R9): time-limited leases on units, each with a fencing token that rises
//! on every grant. Tokens come from one counter for the whole store, and the claims table keeps
//! each unit's newest lease (also after it ended), so "this token was issued for this unit, is its
//! newest and its lease has not ended" is one exact comparison against that record (see
//! [`crate::commit::rules`]). Claims are durable (a redb table, changed only by the commit leader).
//! Safety never depends on clocks: whether a token commits never looks at one; clocks only decide
//! when a lease may be taken over and whether a commit without a token is busy.

use crate::error::{Error, Result};
pub use crate::schema::claim::Lease;
use crate::schema::manifest::Entry;

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "claim", rename_all = "snake_case"))]
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
    AlreadyDone(#[cfg_attr(feature = "serde", serde(with = "as_field::entry"))] Entry),
}

/// The answer to a renewal.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "renew", rename_all = "snake_case"))]
pub enum RenewOutcome {
    /// The lease now runs until the new expiry.
    Renewed(#[cfg_attr(feature = "serde", serde(with = "as_field::lease"))] Lease),
    /// The lease was taken over or released; stop working on the unit.
    Lost {
        /// The newest token granted for the unit.
        newest_token: u64,
    },
}

/// The answer to a release.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "release", rename_all = "snake_case"))]
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

/// The wire names the value of a one-field variant (`{"claim":"already_done","entry":{..}}`,
/// `{"renew":"renewed","lease":{..}}`), the API's JSON since its first version; the engine's
/// variants stay tuple variants, so this writes the value as a one-field object.
#[cfg(feature = "serde")]
mod as_field {
    macro_rules! field {
        ($name:ident, $ty:ty) => {
            pub(super) mod $name {
                use serde::{Deserialize, Deserializer, Serialize, Serializer};

                #[derive(Serialize)]
                struct Out<'a> {
                    $name: &'a $ty,
                }

                #[derive(Deserialize)]
                struct In {
                    $name: $ty,
                }

                pub(crate) fn serialize<S: Serializer>(v: &$ty, s: S) -> Result<S::Ok, S::Error> {
                    Out { $name: v }.serialize(s)
                }

                pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
                    d: D,
                ) -> Result<$ty, D::Error> {
                    Ok(In::deserialize(d)?.$name)
                }
            }
        };
    }
    field!(entry, crate::schema::manifest::Entry);
    field!(lease, crate::schema::claim::Lease);
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
