//! The operations of `stats`, `reconcile` and `table` as one interface, [`StoreOps`], over the
//! store open in this process (here) and over the client of the server that holds it
//! (`served_ops`), so that each of those commands is written once, as the commands over the
//! engine's `UnitStore` are.
//!
//! A CLI trait rather than more `UnitStore` methods: the table calls fail with the engine's
//! `TableError` (not the store's error) and publish only with its `tables` feature, which a
//! client-only build does not compile; the plan of a reconcile carries the CLI's progress and
//! sort note; and `stats` of a served store adds the server's own counters.

use super::{CliError, Progress};
use oncelake::reconcile::{
    reconcile_changes, reconcile_full, ListingError, ListingFormat, ListingReader, ListingSource,
    PlanItem, ReconcileError, ReconcileOptions, Row, SortConfig, SortedListing, Summary,
};
use oncelake::table::{PublishReport, TableFormat, TableStatus};
use oncelake::{Store, StoreStats, UnitStore};
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;

/// What `stats` prints: the engine's answer and, for a served store, the serving process's own
/// counters.
pub(crate) struct Stats {
    /// What the store holds and its metrics (`UnitStore::stats`).
    pub store: StoreStats,
    /// The server's own counters: as JSON, and in the Prometheus text format.
    pub server: Option<(Value, String)>,
}

/// How the plan of a reconcile ended, short of an error of the store.
pub(crate) enum Planned {
    /// The plan is complete.
    Complete(Summary),
    /// The listing was refused (the plan lines printed before it are an incomplete plan).
    BadListing {
        /// `ListingError::kind`.
        kind: String,
        /// The engine's message, naming the line.
        message: String,
        /// Plan lines were printed before it.
        printed: bool,
    },
    /// A plan line could not be written.
    WriteFailed(std::io::Error),
}

/// How a reconcile is planned.
pub(crate) struct PlanForm<'a> {
    /// The listing's syntax.
    pub format: ListingFormat,
    /// The listing holds only the changed units (else it is a full listing).
    pub changes_only: bool,
    /// Also pass up-to-date units.
    pub list_up_to_date: bool,
    /// A full listing sorted first, spilling runs to this directory.
    pub sort_in: Option<&'a Path>,
}

/// Where a plan goes: the rows read as progress, its units one by one, and the rows and
/// spilled runs of a listing the sort found out of order.
pub(crate) struct PlanTo<'a> {
    /// Told the rows read.
    pub progress: &'a Progress,
    /// Each planned unit.
    pub item: &'a mut dyn FnMut(PlanItem<'_>) -> std::io::Result<()>,
    /// The listing was not sorted: rows sorted, runs spilled.
    pub unsorted: &'a mut dyn FnMut(u64, u64),
}

/// A listing to plan from, as read from its file or standard input.
pub(crate) type Listing = Box<dyn BufRead>;

/// What a [`StoreOps`] call answers.
pub(crate) type Answer<T> = Result<T, CliError>;

/// The operations of `stats`, `reconcile` and `table` on either store, with the engine's answers.
pub(crate) trait StoreOps {
    /// What the store holds and its metrics, with a server's own counters.
    fn stats(&self) -> Answer<Stats>;
    /// Plans a reconcile of the listing `input` in the `form` asked, to `to`.
    fn plan(&self, form: &PlanForm<'_>, input: Listing, to: PlanTo<'_>) -> Answer<Planned>;
    /// Defines a table; its status.
    fn create_table(&self, name: &str, prefix: &str, format: TableFormat) -> Answer<TableStatus>;
    /// Each table's status, to `each` in name order; how many tables there are.
    fn each_table(&self, each: &mut dyn FnMut(&TableStatus) -> Answer<()>) -> Answer<usize>;
    /// Publishes table `name`, or every table.
    fn publish(&self, name: Option<&str>) -> Answer<Vec<PublishReport>>;
    /// The unit-key prefix of table `name`.
    fn table_prefix(&self, name: &str) -> Answer<String>;
}

/// Counts rows as they stream by and reports them as progress.
struct Counted<'p, L> {
    inner: L,
    rows: u64,
    progress: &'p Progress,
}

impl<L: ListingSource> ListingSource for Counted<'_, L> {
    fn next_row(&mut self) -> Result<Option<Row<'_>>, ListingError> {
        self.rows += 1;
        if self.rows.is_multiple_of(4096) {
            self.progress.update(self.rows);
        }
        self.inner.next_row()
    }
}

/// A refused listing as [`Planned::BadListing`].
fn refused(e: &ListingError, printed: bool) -> Planned {
    Planned::BadListing {
        kind: e.kind().into(),
        message: e.to_string(),
        printed,
    }
}

impl StoreOps for Store {
    fn stats(&self) -> Answer<Stats> {
        Ok(Stats {
            store: UnitStore::stats(self)?,
            server: None,
        })
    }

    fn plan(&self, form: &PlanForm<'_>, input: Listing, to: PlanTo<'_>) -> Answer<Planned> {
        let listing = Counted {
            inner: ListingReader::new(input, form.format),
            rows: 0,
            progress: to.progress,
        };
        let opts = ReconcileOptions {
            list_up_to_date: form.list_up_to_date,
        };
        let result = match form.sort_in {
            _ if form.changes_only => reconcile_changes(self, listing, opts, to.item),
            None => reconcile_full(&self.snapshot()?, listing, opts, to.item),
            Some(dir) => {
                let sorted = match SortedListing::sort(listing, &SortConfig::new(dir)) {
                    Ok(s) => s,
                    Err(e) => return Ok(refused(&e, false)),
                };
                if !sorted.was_sorted() {
                    (to.unsorted)(sorted.rows(), sorted.spilled_runs() as u64);
                }
                reconcile_full(&self.snapshot()?, sorted, opts, to.item)
            }
        };
        match result {
            Ok(s) => Ok(Planned::Complete(s)),
            Err(ReconcileError::Listing(e)) => Ok(refused(&e, true)),
            Err(ReconcileError::Output(e)) => Ok(Planned::WriteFailed(e)),
            Err(ReconcileError::Store(e)) => Err(e.into()),
            Err(e) => Err(CliError::Usage(e.to_string())),
        }
    }

    fn create_table(&self, name: &str, prefix: &str, format: TableFormat) -> Answer<TableStatus> {
        let def = Store::create_table(self, name, prefix, format)?;
        Ok(self.table_status(&def)?)
    }

    fn each_table(&self, each: &mut dyn FnMut(&TableStatus) -> Answer<()>) -> Answer<usize> {
        let defs = self.tables()?;
        for d in &defs {
            each(&self.table_status(d)?)?;
        }
        Ok(defs.len())
    }

    fn publish(&self, name: Option<&str>) -> Answer<Vec<PublishReport>> {
        Ok(match name {
            Some(n) => vec![self.publish_table(n)?],
            None => self.publish_tables()?,
        })
    }

    fn table_prefix(&self, name: &str) -> Answer<String> {
        Ok(self.table(name)?.prefix)
    }
}
