//! The per-unit commit rules of SPEC R3 as a pure function, so that the commit leader, the model
//! tests and the fuzzers all use the very same decision.
//!
//! Two checks run in order. First the **lease check** (SPEC R3's fenced and busy rows, R9): a
//! commit carrying a fencing token passes only if the token is the unit's newest and its lease has
//! not ended; a commit without a token passes only if no lease on the unit is live. Then the
//! **version rows** of R3 decide between accept, duplicate, conflict and stale. The lease check
//! looks at the clock only through [`LeaseStatus::Live`] versus [`LeaseStatus::Expired`], and that
//! difference matters only to a commit *without* a token: whether a token passes never depends on
//! a clock.

use super::outcome::Outcome;
use crate::object::ObjectId;
/// The rules decide from the stored record of the unit's newest lease: the claims table keeps
/// exactly that per unit (also after it ended), so there is no second shape to convert to. The
/// record's status at the leader's clock ([`ClaimRecord::status`]) is what the lease check reads.
pub use crate::schema::claim::{ClaimRecord, LeaseStatus};

/// Whether an incoming entry is an ordinary output or a deliberate correction of the same version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    /// An ordinary output for a source version.
    Put,
    /// A correction: replaces the output of the *same* source version with revision + 1.
    Correct,
}

/// What the rules decide for one unit, before the commit is known to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Apply it with this revision.
    Accept {
        /// The revision the new entry gets.
        revision: u32,
    },
    /// Write nothing for it: the unit's outcome is this, whatever the rest of the commit does
    /// ([`Outcome::Duplicate`], [`Outcome::Conflict`], [`Outcome::Stale`], [`Outcome::Fenced`] or
    /// [`Outcome::Busy`]).
    Unchanged(Outcome),
}

impl Decision {
    /// A duplicate or an acceptable unit: one that does not stop an all-or-nothing commit.
    pub fn is_acceptable(&self) -> bool {
        matches!(
            self,
            Decision::Accept { .. } | Decision::Unchanged(Outcome::Duplicate { .. })
        )
    }

    /// What the unit reports: `applied` is the seq of the commit when it applies and `None`
    /// when it writes nothing (then an acceptable unit was [`Outcome::Aborted`]); `superseded`
    /// is the version the unit had before.
    pub fn outcome(self, applied: Option<u64>, superseded: Option<u64>) -> Outcome {
        match (self, applied) {
            (Decision::Accept { revision }, Some(seq)) => Outcome::Committed {
                seq,
                revision,
                superseded,
            },
            (Decision::Accept { .. }, None) => Outcome::Aborted,
            (Decision::Unchanged(outcome), _) => outcome,
        }
    }
}

/// Why a token was fenced, derived from the token and the unit's newest one. Tokens come from one
/// counter for the whole store, so a token above the unit's newest was never issued for the unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceReason {
    /// Older than the unit's newest lease: a later grant (a takeover, or a new claim after this
    /// lease ended) superseded it — or it belongs to another unit.
    Superseded,
    /// The unit's newest token, but its lease ended: released by its holder, or ended by a commit
    /// of the unit (its own, or one without a token after it expired).
    Ended,
    /// Newer than the unit's newest lease (or the unit was never claimed): never issued for this
    /// unit — another unit's token, or one never issued at all.
    NotIssued,
}

impl FenceReason {
    /// The reason for fencing `token` on a unit whose newest lease has `newest_token`.
    pub fn of(token: u64, newest_token: u64) -> FenceReason {
        use std::cmp::Ordering::*;
        match token.cmp(&newest_token) {
            Less => FenceReason::Superseded,
            Equal => FenceReason::Ended,
            Greater => FenceReason::NotIssued,
        }
    }
}

impl std::fmt::Display for FenceReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FenceReason::Superseded => {
                "it is older than the unit's newest lease (the lease was taken over or claimed again, or the token belongs to another unit)"
            }
            FenceReason::Ended => {
                "its lease has ended (released, or ended by a commit of the unit)"
            }
            FenceReason::NotIssued => "it was never issued for this unit",
        })
    }
}

/// The committed side of a decision: the unit's current entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Current {
    /// Committed source version.
    pub source_version: u64,
    /// Its revision.
    pub revision: u32,
    /// Its object.
    pub object: ObjectId,
    /// The seq that made it visible.
    pub seq: u64,
}

/// The incoming side of a decision.
#[derive(Clone, Copy, Debug)]
pub struct Incoming {
    /// Source version.
    pub source_version: u64,
    /// Content hash.
    pub object: ObjectId,
    /// Fencing token carried, if any.
    pub token: Option<u64>,
    /// Put or correction.
    pub intent: Intent,
}

/// What the lease check lets through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseCheck {
    /// Decide by the version rows.
    Pass,
    /// Rejected by the lease check: [`Outcome::Fenced`] or [`Outcome::Busy`].
    Reject(Outcome),
    /// The newest token of an ended lease: it may not change anything, but an exact retry of
    /// what is committed is answered as the duplicate it is (it changes nothing).
    RetryOnly {
        /// The token carried (the unit's newest).
        token: u64,
    },
}

/// The lease check (SPEC R3's fenced and busy rows, R9). Tokens are unique across the store and
/// `lease` is the unit's newest lease, so "issued for this unit and its newest" is exactly
/// `token == lease.token`. `now_ms` is the leader's clock, which only tells a live lease from an
/// expired one. [`decide`] runs it first; pipeline records that are not commits use it alone.
pub fn lease_check(lease: Option<&ClaimRecord>, now_ms: u64, token: Option<u64>) -> LeaseCheck {
    match (token, lease) {
        (Some(t), Some(l)) if t == l.token => match l.status(now_ms) {
            LeaseStatus::Live | LeaseStatus::Expired => LeaseCheck::Pass,
            LeaseStatus::Ended => LeaseCheck::RetryOnly { token: t },
            LeaseStatus::Released => LeaseCheck::Reject(Outcome::Fenced {
                token: t,
                newest_token: t,
            }),
        },
        (Some(t), l) => LeaseCheck::Reject(Outcome::Fenced {
            token: t,
            newest_token: l.map_or(0, |l| l.token),
        }),
        (None, Some(l)) if l.is_live(now_ms) => LeaseCheck::Reject(Outcome::Busy {
            expires_at_ms: l.expires_at_ms,
        }),
        (None, _) => LeaseCheck::Pass,
    }
}

/// Decides one unit. `lease` is the unit's newest lease, if it was ever claimed, seen at `now_ms`;
/// `earlier_identical` looks up, only when needed, the seq of an older entry of this unit with the
/// same version and hash (a late retry of output that a correction has since replaced).
///
/// A commit that this accepts and that applies ends the unit's lease (the caller records that):
/// after it, no earlier token commits.
pub fn decide(
    current: Option<&Current>,
    lease: Option<&ClaimRecord>,
    now_ms: u64,
    incoming: &Incoming,
    earlier_identical: impl FnOnce() -> Option<u64>,
) -> Decision {
    match lease_check(lease, now_ms, incoming.token) {
        LeaseCheck::Pass => versions(current, incoming, earlier_identical),
        LeaseCheck::Reject(outcome) => Decision::Unchanged(outcome),
        LeaseCheck::RetryOnly { token } => match versions(current, incoming, earlier_identical) {
            d @ Decision::Unchanged(Outcome::Duplicate { .. }) => d,
            _ => Decision::Unchanged(Outcome::Fenced {
                token,
                newest_token: token,
            }),
        },
    }
}

/// The version rows of R3.
fn versions(
    current: Option<&Current>,
    incoming: &Incoming,
    earlier_identical: impl FnOnce() -> Option<u64>,
) -> Decision {
    let Some(cur) = current else {
        return Decision::Accept { revision: 0 };
    };
    use std::cmp::Ordering::*;
    match incoming.source_version.cmp(&cur.source_version) {
        Greater => Decision::Accept { revision: 0 },
        Less => Decision::Unchanged(Outcome::Stale {
            current_version: cur.source_version,
        }),
        Equal if incoming.object == cur.object => {
            Decision::Unchanged(Outcome::Duplicate { seq: cur.seq })
        }
        Equal => match incoming.intent {
            Intent::Correct => Decision::Accept {
                revision: cur.revision + 1,
            },
            Intent::Put => {
                let earlier = if cur.revision > 0 {
                    earlier_identical()
                } else {
                    None
                };
                Decision::Unchanged(match earlier {
                    Some(seq) => Outcome::Duplicate { seq },
                    None => Outcome::Conflict {
                        winner_seq: cur.seq,
                        winner: cur.object,
                    },
                })
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{ClaimRecord, Current, Decision, FenceReason, Incoming, Intent, LeaseStatus};
    use crate::commit::outcome::Outcome;
    use crate::object::ObjectId;

    /// The leader's clock in these tests: [`lease`] builds each status relative to it.
    const NOW: u64 = 50;

    /// [`super::decide`] at [`NOW`]: the clock only matters through the lease's status, which
    /// [`lease`] fixes.
    fn decide(
        current: Option<&Current>,
        lease: Option<&ClaimRecord>,
        incoming: &Incoming,
        earlier_identical: impl FnOnce() -> Option<u64>,
    ) -> Decision {
        super::decide(current, lease, NOW, incoming, earlier_identical)
    }

    /// The stored record of a lease with `token` that has `status` at [`NOW`]; a lease that has
    /// not expired expires at 100.
    fn lease(token: u64, status: LeaseStatus) -> ClaimRecord {
        ClaimRecord::with_status(token, status, NOW, 100)
    }

    fn cur(version: u64, content: &[u8], revision: u32, seq: u64) -> Current {
        Current {
            source_version: version,
            revision,
            object: ObjectId::of(content),
            seq,
        }
    }

    fn inc(version: u64, content: &[u8], token: Option<u64>, intent: Intent) -> Incoming {
        Incoming {
            source_version: version,
            object: ObjectId::of(content),
            token,
            intent,
        }
    }

    #[test]
    fn the_six_rows_of_r3() {
        use Decision::{Accept, Unchanged};
        use Intent::Put;
        let c = cur(5, b"a", 0, 10);
        let l8 = lease(8, LeaseStatus::Live);
        let accept = Accept { revision: 0 };
        let rows = [
            ("first", None, None, inc(1, b"a", None, Put), accept),
            ("newer", Some(&c), None, inc(6, b"b", None, Put), accept),
            (
                "same bytes",
                Some(&c),
                None,
                inc(5, b"a", None, Put),
                Unchanged(Outcome::Duplicate { seq: 10 }),
            ),
            (
                "other bytes",
                Some(&c),
                None,
                inc(5, b"z", None, Put),
                Unchanged(Outcome::Conflict {
                    winner_seq: 10,
                    winner: ObjectId::of(b"a"),
                }),
            ),
            (
                "older",
                Some(&c),
                None,
                inc(4, b"a", None, Put),
                Unchanged(Outcome::Stale { current_version: 5 }),
            ),
            (
                "an older token",
                Some(&c),
                Some(&l8),
                inc(6, b"a", Some(7), Put),
                Unchanged(Outcome::Fenced {
                    token: 7,
                    newest_token: 8,
                }),
            ),
            (
                "the newest token",
                Some(&c),
                Some(&l8),
                inc(6, b"a", Some(8), Put),
                accept,
            ),
            (
                "no token under a live lease",
                Some(&c),
                Some(&l8),
                inc(6, b"a", None, Put),
                Unchanged(Outcome::Busy { expires_at_ms: 100 }),
            ),
        ];
        for (what, current, lease, incoming, want) in rows {
            assert_eq!(decide(current, lease, &incoming, || None), want, "{what}");
        }
    }

    /// Only the newest token of a lease that has not ended passes, whatever the numbers and
    /// whatever the clock says about the lease.
    #[test]
    fn tokens_pass_only_when_issued_for_the_unit_newest_and_not_ended() {
        let none = || None;
        let put = |token| inc(6, b"a", token, Intent::Put);
        for status in [
            LeaseStatus::Live,
            LeaseStatus::Expired,
            LeaseStatus::Ended,
            LeaseStatus::Released,
        ] {
            let l = lease(8, status);
            for forged in [0, 1, 7, 9, 12_345, u64::MAX] {
                assert_eq!(
                    decide(None, Some(&l), &put(Some(forged)), none),
                    Decision::Unchanged(Outcome::Fenced {
                        token: forged,
                        newest_token: 8
                    }),
                    "token {forged} against {l:?}"
                );
            }
        }
        // A unit never claimed accepts no token at all.
        assert_eq!(
            decide(None, None, &put(Some(1)), none),
            Decision::Unchanged(Outcome::Fenced {
                token: 1,
                newest_token: 0
            })
        );
        // An expired lease whose token is still the newest commits: clocks never decide safety.
        assert_eq!(
            decide(
                None,
                Some(&lease(8, LeaseStatus::Expired)),
                &put(Some(8)),
                none
            ),
            Decision::Accept { revision: 0 }
        );
        // An ended lease's token changes nothing...
        let ended = lease(8, LeaseStatus::Ended);
        assert_eq!(
            decide(None, Some(&ended), &put(Some(8)), none),
            Decision::Unchanged(Outcome::Fenced {
                token: 8,
                newest_token: 8
            })
        );
        // ...but an exact retry of what is committed is the duplicate it is.
        let c = cur(6, b"a", 0, 10);
        assert_eq!(
            decide(Some(&c), Some(&ended), &put(Some(8)), none),
            Decision::Unchanged(Outcome::Duplicate { seq: 10 })
        );
        assert_eq!(
            decide(
                Some(&c),
                Some(&ended),
                &inc(6, b"a", Some(8), Intent::Correct),
                none
            ),
            Decision::Unchanged(Outcome::Duplicate { seq: 10 })
        );
        assert_eq!(
            decide(
                Some(&c),
                Some(&ended),
                &inc(6, b"b", Some(8), Intent::Correct),
                none
            ),
            Decision::Unchanged(Outcome::Fenced {
                token: 8,
                newest_token: 8
            })
        );
    }

    /// A released token is fenced even for an exact retry of what is committed: its holder gave
    /// the work up, and R3 fences released tokens whatever they carry.
    #[test]
    fn a_released_token_is_fenced_even_for_an_exact_retry() {
        let c = cur(6, b"a", 0, 10);
        let released = lease(8, LeaseStatus::Released);
        assert_eq!(
            decide(
                Some(&c),
                Some(&released),
                &inc(6, b"a", Some(8), Intent::Put),
                || None
            ),
            Decision::Unchanged(Outcome::Fenced {
                token: 8,
                newest_token: 8
            })
        );
    }

    #[test]
    fn a_commit_without_a_token_waits_only_for_a_live_lease() {
        let none = || None;
        let put = inc(1, b"a", None, Intent::Put);
        assert_eq!(
            decide(None, Some(&lease(3, LeaseStatus::Live)), &put, none),
            Decision::Unchanged(Outcome::Busy { expires_at_ms: 100 })
        );
        for status in [
            LeaseStatus::Expired,
            LeaseStatus::Ended,
            LeaseStatus::Released,
        ] {
            assert_eq!(
                decide(None, Some(&lease(3, status)), &put, none),
                Decision::Accept { revision: 0 }
            );
        }
    }

    #[test]
    fn fence_reasons_follow_from_the_numbers() {
        assert_eq!(FenceReason::of(3, 8), FenceReason::Superseded);
        assert_eq!(FenceReason::of(8, 8), FenceReason::Ended);
        assert_eq!(FenceReason::of(9, 8), FenceReason::NotIssued);
        assert_eq!(FenceReason::of(1, 0), FenceReason::NotIssued);
    }

    #[test]
    fn corrections_add_a_revision_and_late_retries_stay_duplicates() {
        let c = cur(5, b"a", 0, 10);
        assert_eq!(
            decide(
                Some(&c),
                None,
                &inc(5, b"fixed", None, Intent::Correct),
                || None
            ),
            Decision::Accept { revision: 1 }
        );
        let corrected = cur(5, b"fixed", 1, 11);
        assert_eq!(
            decide(
                Some(&corrected),
                None,
                &inc(5, b"a", None, Intent::Put),
                || Some(10)
            ),
            Decision::Unchanged(Outcome::Duplicate { seq: 10 })
        );
        assert_eq!(
            decide(
                Some(&corrected),
                None,
                &inc(5, b"other", None, Intent::Put),
                || None
            ),
            Decision::Unchanged(Outcome::Conflict {
                winner_seq: 11,
                winner: ObjectId::of(b"fixed")
            })
        );
        assert_eq!(
            decide(
                Some(&corrected),
                None,
                &inc(4, b"x", None, Intent::Correct),
                || None
            ),
            Decision::Unchanged(Outcome::Stale { current_version: 5 })
        );
    }
}
