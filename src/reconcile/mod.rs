//! Reconcile (SPEC R12): compare the manifest with the source's current versions and plan only
//! what must be (re)processed.
//!
//! | action | meaning |
//! |---|---|
//! | [`Action::Missing`] | the source has the unit, the manifest has no entry |
//! | [`Action::Behind`] | the source version is newer than the manifest's |
//! | [`Action::UpToDate`] | the manifest has the source version or a newer one (counted; listed only if asked) |
//! | [`Action::Unknown`] | the manifest has the unit, the source does not (full form only) |
//!
//! Two forms:
//! - **incremental** ([`reconcile_changes`]): the input is the units that changed at the source; each
//!   is looked up in the in-memory dedup index ([`Store::lookup`]), so the cost is proportional to
//!   the changes, not to the manifest. It cannot say which units the source no longer has.
//! - **full** ([`reconcile_full`]): the input is the complete listing, sorted by unit in byte order;
//!   one merge pass walks it beside the manifest (which redb keeps in the same order), streaming both
//!   sides: memory does not grow with either. A listing out of order is refused at the first line
//!   out of order ([`ListingError::Unsorted`]), never mis-merged. [`reconcile_full_unsorted`] takes
//!   a listing in any order: it sorts it first by an external merge sort ([`SortedListing`]:
//!   bounded memory, runs spilled to temporary files) and then merges. [`check_sorted_listing`]
//!   checks a listing without touching the store.
//!
//! A unit listed twice with two versions is an error naming both lines; a unit listed twice with
//! the same version is counted in [`Summary::duplicate_lines`] and planned once. Reconcile only
//! reads: it never modifies the store. The plan streams out through a callback, one
//! [`PlanItem`] at a time, in listing order (full form: key order); [`Plan`] collects it.
//! [`reconcile_listing`] is the whole operation of `UnitStore::reconcile`: a listing read in its
//! syntax, planned in the [`ReconcileForm`] asked, streamed as [`PlanEvent`]s to a [`PlanEnd`].

mod listing;
mod request;
mod sort;

pub use listing::{
    parse_line, parse_listing_line, ListingError, ListingFormat, ListingReader, ListingSource,
    Pairs, Row,
};
pub use request::{reconcile_listing, PlanEnd, PlanEvent, ReconcileForm};
pub use sort::{SortConfig, SortedListing};

use crate::error::{DbContext, Error};
use crate::index::{key_hash, PassThrough};
use crate::schema::manifest::EntryValue;
use crate::snapshot::Snapshot;
use crate::store::Store;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// What must happen to a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Action {
    /// In the source, not in the manifest: process it.
    Missing,
    /// The source version is newer than the manifest's: process it again.
    Behind,
    /// The manifest has the source version (or a newer one): nothing to do.
    UpToDate,
    /// In the manifest, not in the source (full form only): the source dropped it.
    Unknown,
}

impl Action {
    /// `missing`, `behind`, `up_to_date` or `unknown`, as in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Action::Missing => "missing",
            Action::Behind => "behind",
            Action::UpToDate => "up_to_date",
            Action::Unknown => "unknown",
        }
    }
}

/// One planned unit, borrowed from the reconcile pass. On the wire (and in the CLI's `--json`
/// plan lines) the manifest's version is `current_version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PlanItem<'a> {
    /// The unit key.
    pub unit: &'a str,
    /// What must happen.
    pub action: Action,
    /// The source's version (`None` for [`Action::Unknown`]).
    pub source_version: Option<u64>,
    /// The manifest's version (`None` for [`Action::Missing`]).
    #[cfg_attr(feature = "serde", serde(rename = "current_version"))]
    pub manifest_version: Option<u64>,
}

/// An owned [`PlanItem`], with the same JSON shape.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PlannedUnit {
    /// The unit key.
    pub unit: String,
    /// What must happen.
    pub action: Action,
    /// The source's version (`None` for [`Action::Unknown`]).
    pub source_version: Option<u64>,
    /// The manifest's version (`None` for [`Action::Missing`]).
    #[cfg_attr(feature = "serde", serde(rename = "current_version"))]
    pub manifest_version: Option<u64>,
}

impl PlannedUnit {
    /// The unit as the borrowed item a reconcile pass hands out.
    pub fn item(&self) -> PlanItem<'_> {
        PlanItem {
            unit: &self.unit,
            action: self.action,
            source_version: self.source_version,
            manifest_version: self.manifest_version,
        }
    }
}

impl From<PlanItem<'_>> for PlannedUnit {
    fn from(p: PlanItem<'_>) -> Self {
        PlannedUnit {
            unit: p.unit.to_string(),
            action: p.action,
            source_version: p.source_version,
            manifest_version: p.manifest_version,
        }
    }
}

/// Counts of a reconcile pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Summary {
    /// Listing rows read (duplicates included).
    pub listed: u64,
    /// Units to process for the first time.
    pub missing: u64,
    /// Units to process again.
    pub behind: u64,
    /// Units with nothing to do.
    pub up_to_date: u64,
    /// Of those, units whose manifest version is *newer* than the source's (the source went back).
    pub manifest_ahead: u64,
    /// Units in the manifest the source does not list (full form only).
    pub unknown: u64,
    /// Rows that repeated an earlier row exactly (same unit, same version), planned once.
    pub duplicate_lines: u64,
    /// Manifest entries walked (full form) or looked up (incremental form).
    pub manifest_units: u64,
}

impl Summary {
    /// Units that need work: missing + behind.
    pub fn to_process(&self) -> u64 {
        self.missing + self.behind
    }
}

/// How to plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReconcileOptions {
    /// Also pass up-to-date units to the callback (they are always counted).
    pub list_up_to_date: bool,
}

/// Why a reconcile stopped. The store is unchanged in every case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconcileError {
    /// The listing was refused; the error names the line.
    #[error("bad listing: {0}")]
    Listing(#[from] ListingError),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] Error),
    /// The plan could not be written out (the callback failed).
    #[error("writing the plan: {0}")]
    Output(#[source] std::io::Error),
}

/// A collected plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The planned units, in the order the pass produced them.
    pub units: Vec<PlannedUnit>,
    /// The counts.
    pub summary: Summary,
}

/// One pass's output: its counts, and the callback given the items the options ask for.
struct Pass<F> {
    summary: Summary,
    opts: ReconcileOptions,
    sink: F,
}

impl<F> Pass<F>
where
    F: FnMut(PlanItem<'_>) -> std::io::Result<()>,
{
    fn new(opts: ReconcileOptions, sink: F) -> Self {
        Pass {
            summary: Summary::default(),
            opts,
            sink,
        }
    }

    /// Counts a listing row read; `admitted` is false for an exact repeat of an earlier row
    /// (planned once). Returns `admitted`.
    fn row(&mut self, admitted: bool) -> bool {
        self.summary.listed += 1;
        if !admitted {
            self.summary.duplicate_lines += 1;
        }
        admitted
    }

    /// Classifies a listed unit against its manifest version, counts it and passes it on.
    fn listed(
        &mut self,
        unit: &str,
        source: u64,
        manifest: Option<u64>,
    ) -> Result<(), ReconcileError> {
        let summary = &mut self.summary;
        let action = match manifest {
            None => {
                summary.missing += 1;
                Action::Missing
            }
            Some(m) if source > m => {
                summary.behind += 1;
                Action::Behind
            }
            Some(m) => {
                summary.up_to_date += 1;
                if m > source {
                    summary.manifest_ahead += 1;
                }
                Action::UpToDate
            }
        };
        self.emit(PlanItem {
            unit,
            action,
            source_version: Some(source),
            manifest_version: manifest,
        })
    }

    /// Counts a manifest unit the source does not list and passes it on.
    fn unknown(&mut self, unit: &str, manifest: u64) -> Result<(), ReconcileError> {
        self.summary.manifest_units += 1;
        self.summary.unknown += 1;
        self.emit(PlanItem {
            unit,
            action: Action::Unknown,
            source_version: None,
            manifest_version: Some(manifest),
        })
    }

    fn emit(&mut self, item: PlanItem<'_>) -> Result<(), ReconcileError> {
        if item.action == Action::UpToDate && !self.opts.list_up_to_date {
            return Ok(());
        }
        (self.sink)(item).map_err(ReconcileError::Output)
    }
}

/// Incremental reconcile: plans the units in `changes` (in any order) by looking each one up in
/// the store's in-memory dedup index (in batches, under one lock acquisition each). Cost is
/// proportional to the number of changes; memory holds one entry per distinct changed unit (to
/// detect a unit listed twice). Units the source dropped cannot be seen this way; use
/// [`reconcile_full`] for them.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use oncelake::reconcile::{reconcile_changes, Action, Pairs, ReconcileOptions};
/// let dir = tempfile::tempdir()?;
/// let store = oncelake::Store::open(dir.path().join("lake"))?;
/// store.put("a", 1, b"x")?;
/// let mut plan = Vec::new();
/// let summary = reconcile_changes(
///     &store,
///     Pairs::new([("a", 2), ("b", 1)]),
///     ReconcileOptions::default(),
///     |item| Ok(plan.push((item.unit.to_string(), item.action))),
/// )?;
/// assert_eq!(plan, [("a".into(), Action::Behind), ("b".into(), Action::Missing)]);
/// assert_eq!(summary.to_process(), 2);
/// # Ok(()) }
/// ```
pub fn reconcile_changes<L, F>(
    store: &Store,
    mut changes: L,
    opts: ReconcileOptions,
    sink: F,
) -> Result<Summary, ReconcileError>
where
    L: ListingSource,
    F: FnMut(PlanItem<'_>) -> std::io::Result<()>,
{
    let mut pass = Pass::new(opts, sink);
    let mut seen = Seen::default();
    let mut batch = ChangeBatch::default();
    loop {
        // Fill a batch, refusing a unit listed with a second version as it arrives.
        batch.clear();
        let mut done = false;
        while batch.len() < LOOKUP_BATCH {
            let Some(row) = changes.next_row()? else {
                done = true;
                break;
            };
            let hash = key_hash(row.unit);
            if !pass.row(seen.admit(hash, &row)?) {
                continue;
            }
            batch.push(row.unit, row.version, hash);
        }
        store.lookup_versions(&mut batch)?;
        for i in 0..batch.len() {
            let (unit, version, manifest) = batch.get(i);
            pass.summary.manifest_units += 1;
            pass.listed(unit, version, manifest)?;
        }
        if done {
            return Ok(pass.summary);
        }
    }
}

/// Changes looked up under one acquisition of the dedup index's lock, with their key hashes
/// computed beforehand. Taking the lock once per change costs an atomic read-modify-write each
/// time, which also stops the CPU from overlapping the cache misses of neighbouring lookups; a
/// tight probe loop over precomputed hashes lets many misses be in flight at once.
const LOOKUP_BATCH: usize = 128;

/// A batch of changes: units packed in one reused buffer, and their manifest versions once
/// looked up.
#[derive(Default)]
struct ChangeBatch {
    units: String,
    /// (end of the unit in `units`, source version, key hash).
    rows: Vec<(usize, u64, u64)>,
    /// The manifest's version of each row (`None`: no entry).
    manifest: Vec<Option<u64>>,
}

impl ChangeBatch {
    fn clear(&mut self) {
        self.units.clear();
        self.rows.clear();
        self.manifest.clear();
    }

    fn len(&self) -> usize {
        self.rows.len()
    }

    fn push(&mut self, unit: &str, version: u64, hash: u64) {
        self.units.push_str(unit);
        self.rows.push((self.units.len(), version, hash));
    }

    fn unit(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.rows[i - 1].0 };
        &self.units[start..self.rows[i].0]
    }

    fn get(&self, i: usize) -> (&str, u64, Option<u64>) {
        (self.unit(i), self.rows[i].1, self.manifest[i])
    }
}

impl Store {
    /// Fills `batch.manifest` from the dedup index (`Core::probe_many`: units whose key hash is
    /// shared with another unit are read from the manifest afterwards).
    fn lookup_versions(&self, batch: &mut ChangeBatch) -> Result<(), Error> {
        let mut probed = Vec::new();
        self.core().probe_many(
            batch.rows.len(),
            |i| batch.rows[i].2,
            |i| batch.unit(i),
            &mut probed,
        )?;
        batch
            .manifest
            .extend(probed.iter().map(|c| c.map(|c| c.source_version)));
        Ok(())
    }
}

/// The changed units seen so far, to refuse a unit listed with two versions. Keyed by the 64-bit
/// key hash with the units packed in one buffer, so remembering a change allocates nothing of its
/// own; units whose hashes collide are kept exactly in `overflow`.
#[derive(Default)]
struct Seen {
    /// key hash -> (version, line, end of the unit in `units`, its length).
    by_hash: HashMap<u64, (u64, u64, usize, usize), BuildHasherDefault<PassThrough>>,
    units: String,
    overflow: HashMap<String, (u64, u64)>,
}

impl Seen {
    /// `Ok(true)` for a unit not seen before, `Ok(false)` for an exact repeat.
    fn admit(&mut self, hash: u64, row: &Row<'_>) -> Result<bool, ListingError> {
        let first = match self.by_hash.entry(hash) {
            MapEntry::Vacant(v) => {
                self.units.push_str(row.unit);
                v.insert((row.version, row.line, self.units.len(), row.unit.len()));
                return Ok(true);
            }
            MapEntry::Occupied(o) => {
                let (version, line, end, len) = *o.get();
                if &self.units[end - len..end] == row.unit {
                    (version, line)
                } else {
                    // A different unit with the same key hash.
                    match self.overflow.entry(row.unit.to_string()) {
                        MapEntry::Vacant(v) => {
                            v.insert((row.version, row.line));
                            return Ok(true);
                        }
                        MapEntry::Occupied(o) => *o.get(),
                    }
                }
            }
        };
        let (first_version, first_line) = first;
        if first_version == row.version {
            return Ok(false);
        }
        Err(ListingError::Duplicate {
            unit: row.unit.to_string(),
            first_line,
            first_version,
            line: row.line,
            version: row.version,
        })
    }
}

/// Walks manifest entries in key order with as little work per row as possible: the current
/// manifest is read straight from its redb table, copying each key into one reused buffer and
/// taking only the version, merged with the snapshot's tail (the acknowledged entries the table
/// does not hold yet, which replace its rows of the same unit); a snapshot of an older seq goes
/// through the history.
#[allow(clippy::large_enum_variant)] // one cursor per pass, on the stack: boxing buys nothing
enum ManifestCursor {
    /// The table alone (an empty tail): no merge step per row.
    Table(redb::Range<'static, &'static str, &'static [u8]>),
    TableOverTail {
        rows: std::iter::Peekable<redb::Range<'static, &'static str, &'static [u8]>>,
        tail: std::iter::Peekable<std::collections::btree_map::IntoIter<String, EntryValue>>,
    },
    Entries(crate::snapshot::Entries),
}

impl ManifestCursor {
    fn open(snap: &Snapshot) -> Result<Self, Error> {
        crate::error::contain(|| Self::open_uncontained(snap))
    }

    fn open_uncontained(snap: &Snapshot) -> Result<Self, Error> {
        Ok(match snap.current_manifest()? {
            Some((rows, tail)) => {
                if tail.is_empty() {
                    ManifestCursor::Table(rows)
                } else {
                    ManifestCursor::TableOverTail {
                        rows: rows.peekable(),
                        tail: tail.into_iter().peekable(),
                    }
                }
            }
            None => ManifestCursor::Entries(snap.iter()?),
        })
    }

    /// Loads the next user unit's key into `key` and returns its version; `None` at the end.
    /// Internal units (`.pipeline/...`) are the engine's, not the source's: a listing cannot
    /// name them (see `listing::check_key`), so they would all come out "unknown".
    fn next(&mut self, key: &mut String) -> Result<Option<u64>, Error> {
        loop {
            let version = self.next_any(key)?;
            if version.is_none() || !crate::key::is_internal_key(key) {
                return Ok(version);
            }
        }
    }

    fn next_any(&mut self, key: &mut String) -> Result<Option<u64>, Error> {
        match self {
            // Every step under `contain`: a damaged page is `Corrupt`, not a panic (SPEC I9).
            ManifestCursor::Table(rows) => crate::error::contain(|| match rows.next() {
                None => Ok(None),
                Some(row) => {
                    let (k, v) = row.db("scan the manifest for reconcile")?;
                    // The full decode checks the record's seal (SPEC I9).
                    let version = EntryValue::decode(k.value(), v.value())?.source_version;
                    key.clear();
                    key.push_str(k.value());
                    Ok(Some(version))
                }
            }),
            ManifestCursor::TableOverTail { rows, tail } => {
                crate::error::contain(|| next_over_tail(rows, tail, key))
            }
            ManifestCursor::Entries(entries) => match entries.next() {
                None => Ok(None),
                Some(e) => {
                    let e = e?;
                    key.clear();
                    key.push_str(&e.unit);
                    Ok(Some(e.source_version))
                }
            },
        }
    }
}

/// The next unit of the manifest table merged with the tail (whose entry replaces the table's
/// row of the same unit): its key into `key`, and its version.
fn next_over_tail(
    rows: &mut std::iter::Peekable<redb::Range<'static, &'static str, &'static [u8]>>,
    tail: &mut std::iter::Peekable<std::collections::btree_map::IntoIter<String, EntryValue>>,
    key: &mut String,
) -> Result<Option<u64>, Error> {
    use std::cmp::Ordering::{Greater, Less};
    let table = rows
        .peek()
        .map(|r| r.as_ref().map(|(k, _)| k.value()).map_err(|_| ()));
    let Some(order) = crate::wal::tail::merge_step(table, tail.peek().map(|(u, _)| u.as_str()))
    else {
        return Ok(None);
    };
    if order != Greater {
        let (k, v) = match rows.next() {
            Some(row) => row.db("scan the manifest for reconcile")?,
            None => unreachable!("invariant: a row was just peeked"),
        };
        // The full decode checks the record's seal (SPEC I9), also of a row the tail replaces.
        let version = EntryValue::decode(k.value(), v.value())?.source_version;
        if order == Less {
            key.clear();
            key.push_str(k.value());
            return Ok(Some(version));
        }
    }
    Ok(tail.next().map(|(unit, v)| {
        key.clear();
        key.push_str(&unit);
        v.source_version
    }))
}

/// Full reconcile: merges a complete `listing`, sorted by unit in byte order, with the manifest as
/// of `snap`, in one pass and constant memory. Produces missing, behind, up-to-date (if asked) and
/// unknown units in key order.
///
/// An out-of-order row stops the pass with [`ListingError::Unsorted`] naming the line. The plan
/// items already passed to `sink` must then be discarded: the listed units among them were
/// classified correctly, but a unit reported [`Action::Unknown`] may appear later in the listing.
/// Run [`check_sorted_listing`] first when the listing can be read twice and plan lines cannot be
/// taken back, or use [`reconcile_full_unsorted`] for a listing in any order. A unit listed twice
/// is adjacent in a sorted listing: with two versions it is
/// [`ListingError::Duplicate`], with the same version it is counted and planned once.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use oncelake::reconcile::{reconcile_full, Action, ListingFormat, ListingReader, ReconcileOptions};
/// let dir = tempfile::tempdir()?;
/// let store = oncelake::Store::open(dir.path().join("lake"))?;
/// store.put("a", 1, b"x")?;
/// store.put("z", 1, b"x")?;
/// let listing = "unit,version\na,2\nb,1\n";
/// let mut plan = Vec::new();
/// reconcile_full(
///     &store.snapshot()?,
///     ListingReader::new(listing.as_bytes(), ListingFormat::Csv),
///     ReconcileOptions::default(),
///     |item| Ok(plan.push((item.unit.to_string(), item.action))),
/// )?;
/// assert_eq!(
///     plan,
///     [("a".into(), Action::Behind), ("b".into(), Action::Missing), ("z".into(), Action::Unknown)]
/// );
/// # Ok(()) }
/// ```
pub fn reconcile_full<L, F>(
    snap: &Snapshot,
    mut listing: L,
    opts: ReconcileOptions,
    sink: F,
) -> Result<Summary, ReconcileError>
where
    L: ListingSource,
    F: FnMut(PlanItem<'_>) -> std::io::Result<()>,
{
    let mut pass = Pass::new(opts, sink);
    let mut manifest = ManifestWalk::open(snap)?;
    let mut order = OrderCheck::default();
    while let Some(row) = listing.next_row()? {
        if pass.row(order.admit(&row)?) {
            let version = manifest.catch_up(Some(row.unit), &mut pass)?;
            pass.listed(row.unit, row.version, version)?;
        }
    }
    manifest.catch_up(None, &mut pass)?;
    Ok(pass.summary)
}

/// The full form's walk of the manifest beside a sorted listing: the manifest's current head,
/// its key in `head` and its version in `version` (`None` past the end).
struct ManifestWalk {
    cursor: ManifestCursor,
    head: String,
    version: Option<u64>,
}

impl ManifestWalk {
    fn open(snap: &Snapshot) -> Result<Self, ReconcileError> {
        let mut cursor = ManifestCursor::open(snap)?;
        let mut head = String::with_capacity(256);
        let version = cursor.next(&mut head)?;
        Ok(ManifestWalk {
            cursor,
            head,
            version,
        })
    }

    /// Walks up to the listed `unit` (`None`: to the end): manifest units before it are unknown to
    /// the source and planned so; returns `unit`'s own manifest version, if it has one.
    fn catch_up<F>(
        &mut self,
        unit: Option<&str>,
        pass: &mut Pass<F>,
    ) -> Result<Option<u64>, ReconcileError>
    where
        F: FnMut(PlanItem<'_>) -> std::io::Result<()>,
    {
        while let Some(v) = self.version {
            let order = unit.map_or(std::cmp::Ordering::Less, |u| self.head.as_str().cmp(u));
            match order {
                std::cmp::Ordering::Less => pass.unknown(&self.head, v)?,
                std::cmp::Ordering::Equal => {
                    pass.summary.manifest_units += 1;
                    self.version = self.cursor.next(&mut self.head)?;
                    return Ok(Some(v));
                }
                std::cmp::Ordering::Greater => break,
            }
            self.version = self.cursor.next(&mut self.head)?;
        }
        Ok(None)
    }
}

/// Full reconcile of a complete listing in any order: sorts it with [`SortedListing`] (runs of
/// `sort.run_rows` rows in memory, spilled to anonymous temporary files in `sort.dir`, merged
/// k-way), then runs [`reconcile_full`]. Errors of the listing's lines come out before any plan
/// item; a unit listed with two versions is [`ListingError::Duplicate`] naming both original
/// lines (before any plan item if the listing fit in one run). Use [`reconcile_full`] directly
/// for a listing known to be sorted: it needs no sort and constant memory.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use oncelake::reconcile::{reconcile_full_unsorted, Action, Pairs, ReconcileOptions, SortConfig};
/// let dir = tempfile::tempdir()?;
/// let store = oncelake::Store::open(dir.path().join("lake"))?;
/// store.put("a", 1, b"x")?;
/// let mut plan = Vec::new();
/// reconcile_full_unsorted(
///     &store.snapshot()?,
///     Pairs::new([("b", 1), ("a", 2)]),
///     ReconcileOptions::default(),
///     &SortConfig::new(std::env::temp_dir()),
///     |item| Ok(plan.push((item.unit.to_string(), item.action))),
/// )?;
/// assert_eq!(plan, [("a".into(), Action::Behind), ("b".into(), Action::Missing)]);
/// # Ok(()) }
/// ```
pub fn reconcile_full_unsorted<L, F>(
    snap: &Snapshot,
    listing: L,
    opts: ReconcileOptions,
    sort: &SortConfig,
    sink: F,
) -> Result<Summary, ReconcileError>
where
    L: ListingSource,
    F: FnMut(PlanItem<'_>) -> std::io::Result<()>,
{
    let sorted = SortedListing::sort(listing, sort)?;
    reconcile_full(snap, sorted, opts, sink)
}

/// Checks that a full listing is in key order and that no unit is listed with two versions,
/// remembering only the previous row.
#[derive(Default)]
struct OrderCheck {
    prev: String,
    prev_version: u64,
    prev_line: u64,
}

impl OrderCheck {
    /// `Ok(true)` for a new unit in order, `Ok(false)` for an exact repeat of the previous row.
    fn admit(&mut self, row: &Row<'_>) -> Result<bool, ListingError> {
        if self.prev_line > 0 {
            match row.unit.cmp(self.prev.as_str()) {
                std::cmp::Ordering::Less => {
                    return Err(ListingError::Unsorted {
                        line: row.line,
                        unit: row.unit.to_string(),
                        previous_line: self.prev_line,
                        previous: self.prev.clone(),
                    })
                }
                std::cmp::Ordering::Equal if row.version == self.prev_version => return Ok(false),
                std::cmp::Ordering::Equal => {
                    return Err(ListingError::Duplicate {
                        unit: row.unit.to_string(),
                        first_line: self.prev_line,
                        first_version: self.prev_version,
                        line: row.line,
                        version: row.version,
                    })
                }
                std::cmp::Ordering::Greater => {}
            }
        }
        self.prev.clear();
        self.prev.push_str(row.unit);
        self.prev_version = row.version;
        self.prev_line = row.line;
        Ok(true)
    }
}

/// Checks a full listing without reading the store: every line parses, units are in key order,
/// and no unit has two versions. Returns the number of rows. Callers that cannot take back plan
/// lines already written (the CLI reading a file) run this first, so that a bad listing produces
/// no plan at all.
pub fn check_sorted_listing(mut listing: impl ListingSource) -> Result<u64, ListingError> {
    let mut order = OrderCheck::default();
    let mut rows = 0;
    while let Some(row) = listing.next_row()? {
        order.admit(&row)?;
        rows += 1;
    }
    Ok(rows)
}

impl Plan {
    /// Runs [`reconcile_full`] and collects the plan.
    pub fn full(
        snap: &Snapshot,
        listing: impl ListingSource,
        opts: ReconcileOptions,
    ) -> Result<Plan, ReconcileError> {
        Plan::collect(|sink| reconcile_full(snap, listing, opts, sink))
    }

    /// Runs [`reconcile_changes`] and collects the plan.
    pub fn changes(
        store: &Store,
        changes: impl ListingSource,
        opts: ReconcileOptions,
    ) -> Result<Plan, ReconcileError> {
        Plan::collect(|sink| reconcile_changes(store, changes, opts, sink))
    }

    /// Runs `pass` with a sink that keeps every item it plans.
    fn collect(
        pass: impl FnOnce(
            &mut dyn FnMut(PlanItem<'_>) -> std::io::Result<()>,
        ) -> Result<Summary, ReconcileError>,
    ) -> Result<Plan, ReconcileError> {
        let mut units = Vec::new();
        let summary = pass(&mut |i| {
            units.push(i.into());
            Ok(())
        })?;
        Ok(Plan { units, summary })
    }

    /// The units with `action`.
    pub fn with_action(&self, action: Action) -> impl Iterator<Item = &PlannedUnit> {
        self.units.iter().filter(move |u| u.action == action)
    }
}
