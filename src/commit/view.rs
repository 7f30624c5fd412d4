//! What the commit leader decides from: the store as it will be once every decided group is
//! applied, read without touching a B-tree on the common path.
//!
//! A unit's current entry comes from the leader's *overlay* (the rows of decided groups not yet
//! applied to the B-trees), else from the dedup index (every acknowledged unit's version, object
//! and seq), else from the applied state; leases and history rows from the overlay, else from the
//! applied state. The overlay holds every row a decided, unapplied group wrote, so for a key it
//! does not hold the applied state *is* the decided state: that is the one invariant the view
//! rests on, and [`View::begin`] keeps it by dropping only rows of applied groups,
//! and only before the read transaction the group reads the applied state through is opened.
//! That transaction is opened on the group's first read of the applied state, not at its start:
//! a group of commits to units the index knows, in a store that holds no lease record, reads
//! none (P1's commits), and opening it later is as safe, since the applied state only grows
//! past what was dropped and the overlay answers for every key it still holds.

use crate::core::Core;
use crate::error::{DbContext, Result};
use crate::index::Lookup;
use crate::object::ObjectId;
use crate::schema::claim::ClaimRecord;
use crate::schema::manifest::EntryValue;
use crate::schema::{CLAIMS, CLAIMS_TABLE, HISTORY, MANIFEST};
use crate::wal::overlay::Overlay;
use redb::ReadOnlyTable;

/// A unit's current entry as the leader sees it: always its version, object and seq; its full
/// value only where the overlay or the applied state was read (the index keeps no more).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Current {
    pub source_version: u64,
    pub object: ObjectId,
    pub seq: u64,
    pub full: Option<EntryValue>,
}

impl Current {
    fn of(v: EntryValue) -> Current {
        Current {
            source_version: v.source_version,
            object: v.object.id,
            seq: v.seq,
            full: Some(v),
        }
    }
}

/// One group's reads: the overlay, then the applied state as of one read transaction.
pub(crate) struct View<'a> {
    pub(crate) overlay: &'a mut Overlay,
    db: &'a dyn redb::ReadableDatabase,
    /// Opened on the first read of the applied state (see the module documentation).
    txn: Option<redb::ReadTransaction>,
    manifest: Option<ReadOnlyTable<&'static str, &'static [u8]>>,
    claims: Option<ReadOnlyTable<&'static str, &'static [u8]>>,
    history: Option<ReadOnlyTable<(&'static str, u64), &'static [u8]>>,
}

impl<'a> View<'a> {
    /// Starts a group's view: drops the overlay rows of the groups applied by now; the applied
    /// state the group reads the rest from is opened later, at its first read, so that every row
    /// dropped is in it.
    pub(crate) fn begin(overlay: &'a mut Overlay, core: &'a Core) -> Result<View<'a>> {
        overlay.drop_applied(core.backlog.applied());
        Ok(View {
            overlay,
            db: &**core.db,
            txn: None,
            manifest: None,
            claims: None,
            history: None,
        })
    }

    /// The group's read transaction of the applied state, begun on first use.
    fn txn(&mut self) -> Result<&redb::ReadTransaction> {
        if self.txn.is_none() {
            self.txn = Some(self.db.begin_read().db("begin a read transaction")?);
        }
        Ok(self
            .txn
            .as_ref()
            .unwrap_or_else(|| unreachable!("invariant: the transaction was begun just above")))
    }

    fn manifest(&mut self) -> Result<&ReadOnlyTable<&'static str, &'static [u8]>> {
        self.txn()?;
        opened(&self.txn, &mut self.manifest, MANIFEST)
    }

    /// The applied history (for rule 6's lookups).
    fn history(&mut self) -> Result<&ReadOnlyTable<(&'static str, u64), &'static [u8]>> {
        self.txn()?;
        opened(&self.txn, &mut self.history, HISTORY)
    }

    /// The applied history and manifest, for a prune: on a drained backlog they are the whole
    /// store but for the rows of the prune's own group (the manifest holds the successors of
    /// the history's newest rows).
    #[allow(clippy::type_complexity)]
    pub(crate) fn history_and_manifest(
        &mut self,
    ) -> Result<(
        &ReadOnlyTable<(&'static str, u64), &'static [u8]>,
        &ReadOnlyTable<&'static str, &'static [u8]>,
    )> {
        self.txn()?;
        opened(&self.txn, &mut self.history, HISTORY)?;
        opened(&self.txn, &mut self.manifest, MANIFEST)?;
        match (&self.history, &self.manifest) {
            (Some(h), Some(m)) => Ok((h, m)),
            _ => unreachable!("invariant: both tables were opened just above"),
        }
    }

    /// The unit's current entry, from the overlay, the index or (for a key hash two units share)
    /// the applied manifest.
    pub(crate) fn current(&mut self, core: &Core, unit: &str) -> Result<Option<Current>> {
        if let Some(v) = self.overlay.manifest(unit) {
            return Ok(Some(Current::of(*v)));
        }
        let slot = match core.index.read().get(unit) {
            Lookup::Absent => return Ok(None),
            Lookup::Present(s) => Some(s),
            Lookup::Ambiguous => None,
        };
        match slot {
            Some(s) => Ok(Some(Current {
                source_version: s.source_version,
                object: s.object,
                seq: s.seq,
                full: None,
            })),
            None => Ok(self.applied_entry(unit)?.map(Current::of)),
        }
    }

    /// The unit's full current entry (its revision, size, time): from the overlay or the applied
    /// manifest, which is current for every key the overlay does not hold.
    pub(crate) fn full(&mut self, unit: &str, cur: &Current) -> Result<EntryValue> {
        if let Some(v) = cur.full {
            return Ok(v);
        }
        match self.applied_entry(unit)? {
            Some(v) => Ok(v),
            None => Err(crate::error::Error::corrupt_record(
                crate::schema::MANIFEST_TABLE,
                unit,
                "the dedup index has an entry the manifest lacks",
            )),
        }
    }

    fn applied_entry(&mut self, unit: &str) -> Result<Option<EntryValue>> {
        let t = self.manifest()?;
        crate::schema::codec::get_sealed(t, "manifest", unit, EntryValue::decode)
    }

    /// The unit's newest lease record.
    pub(crate) fn claim(&mut self, unit: &str) -> Result<Option<ClaimRecord>> {
        if let Some(rec) = self.overlay.claim(unit) {
            return Ok(Some(rec.clone()));
        }
        if !self.overlay.claims_exist() {
            return Ok(None);
        }
        self.txn()?;
        let t = opened(&self.txn, &mut self.claims, CLAIMS)?;
        crate::schema::codec::get_sealed(t, CLAIMS_TABLE, unit, ClaimRecord::decode)
    }

    /// The seq of an older entry of `unit` with this version and object, newest first: the
    /// overlay's rows (newer than any applied one), then the applied current entry (which the
    /// history does not hold, and which is older than the overlay's), then the applied history.
    pub(crate) fn earlier_identical(
        &mut self,
        unit: &str,
        version: u64,
        object: ObjectId,
    ) -> Result<Option<u64>> {
        for (seq, v) in self.overlay.history(unit).rev() {
            if v.source_version < version {
                return Ok(None);
            }
            if v.source_version == version && v.object.id == object {
                return Ok(Some(seq));
            }
        }
        if let Some(v) = self.applied_entry(unit)? {
            if v.source_version < version {
                return Ok(None);
            }
            if v.source_version == version && v.object.id == object {
                return Ok(Some(v.seq));
            }
        }
        let history = self.history()?;
        for row in history
            .range((unit, 0)..=(unit, u64::MAX))
            .db("read the history")?
            .rev()
        {
            let (k, v) = row.db("read the history")?;
            let v = EntryValue::decode_history(unit, k.value().1, v.value())?;
            if v.source_version < version {
                break;
            }
            if v.source_version == version && v.object.id == object {
                return Ok(Some(k.value().1));
            }
        }
        Ok(None)
    }
}

/// The table `def` of `txn` (begun by the caller), opened into `slot` on first use: a group
/// opens only the tables it reads.
fn opened<'s, K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &Option<redb::ReadTransaction>,
    slot: &'s mut Option<ReadOnlyTable<K, V>>,
    def: redb::TableDefinition<K, V>,
) -> Result<&'s ReadOnlyTable<K, V>> {
    if slot.is_none() {
        let txn = txn
            .as_ref()
            .unwrap_or_else(|| unreachable!("invariant: the caller began the transaction"));
        *slot = Some(
            txn.open_table(def)
                .db("open a table of the applied state")?,
        );
    }
    Ok(slot
        .as_ref()
        .unwrap_or_else(|| unreachable!("invariant: the table was opened just above")))
}
