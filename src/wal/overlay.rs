//! The commit leader's state between groups: its counters, and the *overlay* of rows that
//! decided groups wrote and the B-trees do not hold yet (they are in the backlog). See
//! `commit::view` for how the leader reads through it, and `backlog` for how the rows reach the
//! B-trees. Only the leader touches it (it sits behind an uncontended mutex in the core).

use crate::error::{DbContext, Result};
use crate::schema::claim::ClaimRecord;
use crate::schema::manifest::EntryValue;
use crate::schema::meta::{self, HISTORY_FROM, NEXT_SEQ, NEXT_TOKEN, WAL_GROUP};
use crate::schema::{CLAIMS, META};
use redb::{ReadableDatabase, ReadableTableMetadata};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

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

/// Rows of decided groups not yet applied, each tagged with its group's number, per unit.
///
/// One map entry per unit (its key allocated once and shared with the per-group list that
/// drops it), hashed with a per-process random seed (foldhash): a unit key comes from callers,
/// so a fixed hash would let one choose colliding keys, and SipHash cost the leader a few per
/// cent of the CPU per unit (BENCHMARKS, P1).
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    units: HashMap<Arc<str>, UnitRows, foldhash::fast::RandomState>,
    /// Per group, oldest first, the units it wrote (to drop their rows once it is applied).
    touched: VecDeque<(u64, Vec<Arc<str>>)>,
    /// Whether any lease record exists, applied or not: while none does, a unit's lease needs no
    /// read of the claims table (every commit asks for one, R3's first rule).
    claims_exist: bool,
}

/// What unapplied groups wrote for one unit.
#[derive(Debug, Default)]
struct UnitRows {
    /// Every entry they committed, `(group, value)`, oldest first: the newest is the unit's
    /// current entry, the older ones its unapplied history (rule 6's late retries read them).
    entries: Vec<(u64, EntryValue)>,
    /// Its newest lease record, with the group that wrote it.
    claim: Option<(u64, ClaimRecord)>,
}

impl UnitRows {
    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.claim.is_none()
    }
}

impl Overlay {
    /// An overlay over an applied state that holds lease records (`claims_exist`) or none.
    pub(crate) fn new(claims_exist: bool) -> Overlay {
        Overlay {
            claims_exist,
            ..Overlay::default()
        }
    }

    /// The unit's rows, created if missing, and the group's note that it wrote them.
    fn rows_for(&mut self, group: u64, unit: &str) -> &mut UnitRows {
        let key = match self.units.get_key_value(unit) {
            Some((k, _)) => k.clone(),
            None => {
                let k: Arc<str> = Arc::from(unit);
                self.units.insert(k.clone(), UnitRows::default());
                k
            }
        };
        match self.touched.back_mut() {
            Some((g, keys)) if *g == group => keys.push(key.clone()),
            _ => self.touched.push_back((group, vec![key.clone()])),
        }
        self.units
            .get_mut(&*key)
            .unwrap_or_else(|| unreachable!("invariant: the unit's rows were just made"))
    }

    /// Records the entry `v` (of seq `v.seq`) that `group` committed for `unit`: its current
    /// entry from now on, and one of its history rows once a later one replaces it.
    pub(crate) fn put_entry(&mut self, group: u64, unit: &str, v: EntryValue) {
        let rows = self.rows_for(group, unit);
        debug_assert!(
            rows.entries
                .last()
                .is_none_or(|(g, e)| e.seq < v.seq && *g <= group),
            "an overlay's entries of one unit rise in seq and group"
        );
        rows.entries.push((group, v));
    }

    pub(crate) fn put_claim(&mut self, group: u64, unit: &str, rec: ClaimRecord) {
        self.claims_exist = true;
        self.rows_for(group, unit).claim = Some((group, rec));
    }

    /// The unit's unapplied current entry.
    pub(crate) fn manifest(&self, unit: &str) -> Option<&EntryValue> {
        self.units
            .get(unit)
            .and_then(|r| r.entries.last())
            .map(|(_, v)| v)
    }

    /// The unit's unapplied lease record.
    pub(crate) fn claim(&self, unit: &str) -> Option<&ClaimRecord> {
        self.units
            .get(unit)
            .and_then(|r| r.claim.as_ref())
            .map(|(_, r)| r)
    }

    /// Whether the applied state may hold a lease record the overlay does not: false only
    /// while no lease was ever recorded in the store.
    pub(crate) fn claims_exist(&self) -> bool {
        self.claims_exist
    }

    /// The unit's unapplied entries `(seq, value)`, oldest first (the newest is its current
    /// entry).
    pub(crate) fn history(
        &self,
        unit: &str,
    ) -> impl DoubleEndedIterator<Item = (u64, &EntryValue)> {
        self.units
            .get(unit)
            .into_iter()
            .flat_map(|r| r.entries.iter())
            .map(|(_, v)| (v.seq, v))
    }

    /// Drops the rows of every group up to `applied`: the applied state holds them now.
    pub(crate) fn drop_applied(&mut self, applied: u64) {
        while self.touched.front().is_some_and(|(g, _)| *g <= applied) {
            let Some((_, keys)) = self.touched.pop_front() else {
                unreachable!("invariant: the front was just seen");
            };
            for k in keys {
                let Some(rows) = self.units.get_mut(&*k) else {
                    // A unit the group wrote twice: its rows went at the first of its notes.
                    continue;
                };
                // Oldest first, so the applied ones are a prefix.
                let dropped = rows.entries.partition_point(|(g, _)| *g <= applied);
                rows.entries.drain(..dropped);
                if rows.claim.as_ref().is_some_and(|(g, _)| *g <= applied) {
                    rows.claim = None;
                }
                if rows.is_empty() {
                    self.units.remove(&*k);
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
        let claims_exist = match txn.open_table(CLAIMS) {
            Ok(t) => !t.is_empty().db("read the claims table")?,
            Err(redb::TableError::TableDoesNotExist(_)) => false,
            Err(e) => return Err(crate::error::Error::db("open the claims table", e)),
        };
        Ok(LeaderState {
            next_seq: meta::get(&m, NEXT_SEQ)?,
            next_token: meta::get(&m, NEXT_TOKEN)?,
            history_from: meta::get(&m, HISTORY_FROM)?,
            counters: meta::read_counters(&m)?,
            group: match m.get(WAL_GROUP).db("read the meta table")? {
                Some(_) => meta::get(&m, WAL_GROUP)?,
                None => 0,
            },
            overlay: Overlay::new(claims_exist),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::schema::manifest::test_entry as entry;

    fn lease(token: u64) -> ClaimRecord {
        ClaimRecord {
            worker: "w".into(),
            token,
            source_version: 1,
            expires_at_ms: 10,
            released: false,
            by_commit: false,
        }
    }

    /// Against a model: per unit, every (group, seq) entry and the newest lease written, with
    /// the rows of groups up to `applied` dropped.
    #[test]
    fn it_answers_what_unapplied_groups_wrote_and_forgets_applied_groups() {
        type Model = std::collections::BTreeMap<String, (Vec<(u64, u64)>, Option<(u64, u64)>)>;
        let mut o = Overlay::new(false);
        let mut model = Model::new();
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let (mut seq, mut applied) = (0u64, 0u64);
        for group in 1..=200u64 {
            for _ in 0..(next() % 6) {
                let unit = format!("u{}", next() % 12);
                seq += 1;
                if next() % 4 == 0 {
                    o.put_claim(group, &unit, lease(seq));
                    model.entry(unit).or_default().1 = Some((group, seq));
                } else {
                    o.put_entry(group, &unit, entry(seq, seq));
                    model.entry(unit).or_default().0.push((group, seq));
                }
            }
            if next() % 3 == 0 {
                applied = group - next() % 3;
                o.drop_applied(applied);
                for (es, c) in model.values_mut() {
                    es.retain(|(g, _)| *g > applied);
                    if c.is_some_and(|(g, _)| g <= applied) {
                        *c = None;
                    }
                }
                model.retain(|_, (es, c)| !es.is_empty() || c.is_some());
            }
            for i in 0..12 {
                let unit = format!("u{i}");
                let (es, c) = model.get(&unit).cloned().unwrap_or_default();
                let seqs: Vec<u64> = o.history(&unit).map(|(s, _)| s).collect();
                assert_eq!(
                    seqs,
                    es.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
                    "{unit}"
                );
                assert_eq!(o.manifest(&unit).map(|v| v.seq), es.last().map(|(_, s)| *s));
                assert_eq!(o.claim(&unit).map(|r| r.token), c.map(|(_, t)| t));
            }
            assert_eq!(o.units.len(), model.len(), "no empty rows are kept");
        }
        o.drop_applied(u64::MAX);
        assert!(o.is_empty() && o.units.is_empty());
        assert!(o.claims_exist(), "a lease was recorded");
        assert!(applied > 0);
    }

    #[test]
    fn a_store_without_leases_needs_no_claims_read_until_one_is_recorded() {
        let mut o = Overlay::new(false);
        assert!(!o.claims_exist());
        o.put_entry(1, "a", entry(1, 1));
        assert!(!o.claims_exist());
        o.put_claim(2, "a", lease(1));
        o.drop_applied(2);
        assert!(o.claims_exist(), "an applied lease is still a lease");
        assert!(Overlay::new(true).claims_exist());
    }
}
