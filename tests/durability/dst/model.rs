//! The model the simulation checks the store against: what must be visible (with its own R3/R9
//! rules), the leases it granted, and what each operation may answer.

use super::ClaimState;
use oncelake::{Intent, Lease};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Want {
    pub(super) version: u64,
    pub(super) revision: u32,
    pub(super) content: Vec<u8>,
    pub(super) seq: u64,
}

/// One history row: an entry that was current from `seq` until its successor.
#[derive(Clone, Debug)]
pub(super) struct Row {
    pub(super) unit: String,
    pub(super) want: Want,
    /// When the successor was committed (the row may be pruned once that is before a cutoff).
    pub(super) superseded_at: Option<u64>,
}

#[derive(Default, Debug)]
pub(super) struct Model {
    pub(super) current: BTreeMap<String, Want>,
    pub(super) rows: Vec<Row>,
    pub(super) claims: BTreeMap<String, ClaimState>,
    /// Every token granted, and its unit.
    pub(super) issued: BTreeMap<u64, String>,
    pub(super) next_token: u64,
    pub(super) last_seq: u64,
    /// The highest GC cutoff ever attempted: a row superseded before it may have been pruned.
    pub(super) max_cutoff: u64,
}

/// What the model expects of one unit of a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Exp {
    /// Acceptable by itself, with this revision ("committed", or "aborted" in an aborted batch).
    Accept(u32),
    /// Not written; one of these outcomes.
    Not(BTreeSet<&'static str>),
}

pub(super) fn not(names: &[&'static str]) -> Exp {
    Exp::Not(names.iter().copied().collect())
}

pub(super) enum Fence {
    Pass,
    Fenced,
    Busy,
}

impl Model {
    pub(super) fn state_at(&self, seq: u64) -> BTreeMap<String, Want> {
        let mut s = BTreeMap::new();
        for r in self.rows.iter().filter(|r| r.want.seq <= seq) {
            s.insert(r.unit.clone(), r.want.clone());
        }
        s
    }

    fn fence(&self, unit: &str, token: Option<u64>, now: u64) -> Fence {
        // SPEC R3/R9: a token passes only if issued for the unit, its newest and not ended; a
        // token-less commit is busy while a lease is live.
        match (token, self.claims.get(unit)) {
            (Some(t), Some(c)) if c.token == t && !c.released => Fence::Pass,
            (Some(_), _) => Fence::Fenced,
            (None, Some(c)) if c.live(now) => Fence::Busy,
            (None, _) => Fence::Pass,
        }
    }

    /// R3 alone.
    fn r3(&self, unit: &str, version: u64, content: &[u8], intent: Intent) -> Exp {
        let Some(cur) = self.current.get(unit) else {
            return Exp::Accept(0);
        };
        if version > cur.version {
            return Exp::Accept(0);
        }
        if version < cur.version {
            return not(&["stale"]);
        }
        if content == cur.content.as_slice() {
            return not(&["duplicate"]);
        }
        if intent == Intent::Correct {
            return Exp::Accept(cur.revision + 1);
        }
        if cur.revision == 0 {
            return not(&["conflict"]);
        }
        // A late retry of output a correction replaced: a duplicate of the history row, unless
        // GC pruned that row (then a conflict with the correction).
        let earlier: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| r.unit == unit && r.want.version == version && r.want.content == content)
            .collect();
        if earlier.is_empty() {
            not(&["conflict"])
        } else if earlier
            .iter()
            .any(|r| r.superseded_at.is_none_or(|t| t >= self.max_cutoff))
        {
            not(&["duplicate"])
        } else {
            not(&["duplicate", "conflict"])
        }
    }

    pub(super) fn expect(&self, item: &Item, now: u64) -> Exp {
        let r3 = self.r3(&item.unit, item.version, &item.content, item.intent);
        let (name, lenient) = match self.fence(&item.unit, item.token, now) {
            Fence::Pass => return r3,
            Fence::Fenced => ("fenced", true),
            Fence::Busy => ("busy", true),
        };
        match r3 {
            Exp::Accept(_) => not(&[name]),
            // Whether a rejected or duplicate retry is reported as such or as fenced/busy is
            // not the safety question (nothing is written either way).
            Exp::Not(mut set) if lenient => {
                set.insert(name);
                Exp::Not(set)
            }
            Exp::Not(_) => not(&[name]),
        }
    }

    /// Applies the accepted items of a commit at `seq`.
    pub(super) fn apply_commit(&mut self, items: &[Item], exps: &[Exp], seq: u64, now: u64) {
        for (it, e) in items.iter().zip(exps) {
            let Exp::Accept(revision) = *e else { continue };
            let want = Want {
                version: it.version,
                revision,
                content: it.content.clone(),
                seq,
            };
            if let Some(prev) = self
                .rows
                .iter_mut()
                .rev()
                .find(|r| r.unit == it.unit && r.superseded_at.is_none())
            {
                prev.superseded_at = Some(now);
            }
            self.rows.push(Row {
                unit: it.unit.clone(),
                want: want.clone(),
                superseded_at: None,
            });
            self.current.insert(it.unit.clone(), want);
            if let Some(c) = self.claims.get_mut(&it.unit) {
                match it.token {
                    Some(t) if c.token == t => c.released = true,
                    None => c.released = true,
                    _ => {}
                }
            }
        }
        self.last_seq = seq;
    }
}

/// One unit of a commit, as the simulation built it.
#[derive(Clone, Debug)]
pub(super) struct Item {
    pub(super) unit: String,
    pub(super) version: u64,
    pub(super) content: Vec<u8>,
    pub(super) token: Option<u64>,
    pub(super) intent: Intent,
}

/// What the model expects of a claim.
#[derive(Clone, Debug)]
pub(super) enum ClaimExp {
    Done,
    Held(String),
    /// Granted with this token (a new one, or the holder's own extended).
    Granted {
        token: u64,
        new: bool,
    },
}

/// An operation whose answer the crash swallowed.
#[derive(Debug)]
pub(super) enum InFlight {
    Commit(Vec<Item>, Vec<Exp>),
    Claim(String, u64, String, u64, ClaimExp),
    Renew(Lease, u64),
    Release(Lease),
    /// Writes no log record: nothing to decide.
    Other,
}
