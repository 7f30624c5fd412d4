//! The commit leader's state between groups: its counters, and the *overlay* of rows that
//! decided groups wrote and the B-trees do not hold yet (they are in the backlog). See
//! `commit::view` for how the leader reads through it, and `backlog` for how the rows reach the
//! B-trees. Only the leader touches it (it sits behind an uncontended mutex in the core).

use crate::error::{DbContext, Result};
use crate::schema::claim::ClaimRecord;
use crate::schema::manifest::EntryValue;
use crate::schema::meta::{self, HISTORY_FROM, NEXT_SEQ, NEXT_TOKEN, WAL_GROUP};
use crate::schema::META;
use redb::ReadableDatabase;
use std::collections::{HashMap, VecDeque};

/// The leader's counters and overlay; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct LeaderState {
    /// The seq the next log record gets.
    pub next_seq: u64,
    /// The token the next granted lease gets.
    pub next_token: u64,
    /// The history horizon (only rises).
    pub history_from: u64,
    /// The persisted store-scope counters as of the last decided group.
    pub counters: Vec<(String, u64)>,
    /// The number of the last decided group.
    pub group: u64,
    pub(crate) overlay: Overlay,
}

/// Rows of decided groups not yet applied, each tagged with its group's number.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    manifest: HashMap<String, (u64, EntryValue)>,
    claims: HashMap<String, (u64, ClaimRecord)>,
    /// Per unit, its unapplied history rows `(seq, group, value)`, oldest first.
    history: HashMap<String, Vec<(u64, u64, EntryValue)>>,
    /// Per group, oldest first, the keys it wrote (to drop them once it is applied).
    touched: VecDeque<(u64, Vec<Touched>)>,
}

#[derive(Debug)]
enum Touched {
    Manifest(String),
    Claims(String),
    History(String),
}

impl Overlay {
    fn note(&mut self, group: u64, t: Touched) {
        match self.touched.back_mut() {
            Some((g, keys)) if *g == group => keys.push(t),
            _ => self.touched.push_back((group, vec![t])),
        }
    }

    pub(crate) fn put_manifest(&mut self, group: u64, unit: &str, v: EntryValue) {
        self.manifest.insert(unit.to_string(), (group, v));
        self.note(group, Touched::Manifest(unit.to_string()));
    }

    pub(crate) fn put_claim(&mut self, group: u64, unit: &str, rec: ClaimRecord) {
        self.claims.insert(unit.to_string(), (group, rec));
        self.note(group, Touched::Claims(unit.to_string()));
    }

    pub(crate) fn put_history(&mut self, group: u64, unit: &str, seq: u64, v: EntryValue) {
        self.history
            .entry(unit.to_string())
            .or_default()
            .push((seq, group, v));
        self.note(group, Touched::History(unit.to_string()));
    }

    /// The unit's unapplied current entry.
    pub(crate) fn manifest(&self, unit: &str) -> Option<&EntryValue> {
        self.manifest.get(unit).map(|(_, v)| v)
    }

    /// The unit's unapplied lease record.
    pub(crate) fn claim(&self, unit: &str) -> Option<&ClaimRecord> {
        self.claims.get(unit).map(|(_, r)| r)
    }

    /// The unit's unapplied history rows `(seq, value)`, oldest first.
    pub(crate) fn history(
        &self,
        unit: &str,
    ) -> impl DoubleEndedIterator<Item = (u64, &EntryValue)> {
        self.history
            .get(unit)
            .into_iter()
            .flatten()
            .map(|(seq, _, v)| (*seq, v))
    }

    /// Drops the rows of every group up to `applied`: the applied state holds them now.
    pub(crate) fn drop_applied(&mut self, applied: u64) {
        while self.touched.front().is_some_and(|(g, _)| *g <= applied) {
            let Some((_, keys)) = self.touched.pop_front() else {
                unreachable!("invariant: the front was just seen");
            };
            for t in keys {
                match t {
                    Touched::Manifest(k) => {
                        if self.manifest.get(&k).is_some_and(|(g, _)| *g <= applied) {
                            self.manifest.remove(&k);
                        }
                    }
                    Touched::Claims(k) => {
                        if self.claims.get(&k).is_some_and(|(g, _)| *g <= applied) {
                            self.claims.remove(&k);
                        }
                    }
                    Touched::History(k) => {
                        if let Some(rows) = self.history.get_mut(&k) {
                            rows.retain(|(_, g, _)| *g > applied);
                            if rows.is_empty() {
                                self.history.remove(&k);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Whether no unapplied row is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.touched.is_empty()
    }
}

impl LeaderState {
    /// The leader's state of a database opened (and recovered) read-write: nothing is unapplied.
    pub(crate) fn load(db: &dyn ReadableDatabase) -> Result<LeaderState> {
        let txn = db.begin_read().db("begin a read transaction")?;
        let m = txn.open_table(META).db("open the meta table")?;
        Ok(LeaderState {
            next_seq: meta::get(&m, NEXT_SEQ)?,
            next_token: meta::get(&m, NEXT_TOKEN)?,
            history_from: meta::get(&m, HISTORY_FROM)?,
            counters: meta::read_counters(&m)?,
            group: match m.get(WAL_GROUP).db("read the meta table")? {
                Some(_) => meta::get(&m, WAL_GROUP)?,
                None => 0,
            },
            overlay: Overlay::default(),
        })
    }
}
