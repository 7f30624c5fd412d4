//! The per-unit commit rules of SPEC R3 as a pure function, so that the commit leader, the model
//! tests and the fuzzers all use the very same decision.

use crate::object::ObjectId;

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
    /// Identical to what is committed: nothing changes; the original seq is returned.
    Duplicate {
        /// The seq of the commit that made the identical entry visible.
        seq: u64,
    },
    /// Same version, different bytes: the first committed entry wins.
    Conflict {
        /// The seq of the winning entry.
        winner_seq: u64,
        /// The winning object.
        winner: ObjectId,
    },
    /// Older than what is committed.
    Stale {
        /// The version that is committed.
        current_version: u64,
    },
    /// The writer's fencing token is older than the newest one granted for the unit.
    Fenced {
        /// The token the writer carried.
        token: u64,
        /// The newest token granted.
        newest_token: u64,
    },
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

/// Decides one unit. `newest_token` is the newest fencing token ever granted for the unit;
/// `earlier_identical` looks up, only when needed, the seq of an older entry of this unit with the
/// same version and hash (a late retry of output that a correction has since replaced).
pub fn decide(
    current: Option<&Current>,
    newest_token: Option<u64>,
    incoming: &Incoming,
    earlier_identical: impl FnOnce() -> Option<u64>,
) -> Decision {
    if let (Some(token), Some(newest)) = (incoming.token, newest_token) {
        if token < newest {
            return Decision::Fenced {
                token,
                newest_token: newest,
            };
        }
    }
    let Some(cur) = current else {
        return Decision::Accept { revision: 0 };
    };
    use std::cmp::Ordering::*;
    match incoming.source_version.cmp(&cur.source_version) {
        Greater => Decision::Accept { revision: 0 },
        Less => Decision::Stale {
            current_version: cur.source_version,
        },
        Equal if incoming.object == cur.object => Decision::Duplicate { seq: cur.seq },
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
                match earlier {
                    Some(seq) => Decision::Duplicate { seq },
                    None => Decision::Conflict {
                        winner_seq: cur.seq,
                        winner: cur.object,
                    },
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let none = || None;
        assert_eq!(
            decide(None, None, &inc(1, b"a", None, Intent::Put), none),
            Decision::Accept { revision: 0 }
        );
        let c = cur(5, b"a", 0, 10);
        assert_eq!(
            decide(Some(&c), None, &inc(6, b"b", None, Intent::Put), none),
            Decision::Accept { revision: 0 }
        );
        assert_eq!(
            decide(Some(&c), None, &inc(5, b"a", None, Intent::Put), none),
            Decision::Duplicate { seq: 10 }
        );
        assert_eq!(
            decide(Some(&c), None, &inc(5, b"z", None, Intent::Put), none),
            Decision::Conflict {
                winner_seq: 10,
                winner: ObjectId::of(b"a")
            }
        );
        assert_eq!(
            decide(Some(&c), None, &inc(4, b"a", None, Intent::Put), none),
            Decision::Stale { current_version: 5 }
        );
        assert_eq!(
            decide(Some(&c), Some(8), &inc(6, b"a", Some(7), Intent::Put), none),
            Decision::Fenced {
                token: 7,
                newest_token: 8
            }
        );
        // The newest token itself passes.
        assert_eq!(
            decide(Some(&c), Some(8), &inc(6, b"a", Some(8), Intent::Put), none),
            Decision::Accept { revision: 0 }
        );
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
            Decision::Duplicate { seq: 10 }
        );
        assert_eq!(
            decide(
                Some(&corrected),
                None,
                &inc(5, b"other", None, Intent::Put),
                || None
            ),
            Decision::Conflict {
                winner_seq: 11,
                winner: ObjectId::of(b"fixed")
            }
        );
        assert_eq!(
            decide(
                Some(&corrected),
                None,
                &inc(4, b"x", None, Intent::Correct),
                || None
            ),
            Decision::Stale { current_version: 5 }
        );
    }
}
