//! A reconcile as one store operation ([`crate::UnitStore::reconcile`]): a listing read in the
//! syntax asked, planned in the form asked, its events streamed to the caller. The store in this
//! process plans with [`reconcile_listing`]; a server answers `/v1/reconcile` with the same call,
//! so a plan reads the same whichever store made it.

use super::{
    reconcile_changes, reconcile_full, ListingError, ListingFormat, ListingReader, PlanItem,
    ReconcileError, ReconcileOptions, SortConfig, SortedListing, Summary,
};
use crate::error::Error;
use crate::store::Store;
use std::io::{BufReader, Read};
use std::path::PathBuf;

/// How a reconcile is planned.
#[derive(Clone, Debug)]
pub struct ReconcileForm {
    /// The listing holds only the changed units (incremental form); else it is a full listing.
    pub changes_only: bool,
    /// The listing's syntax.
    pub format: ListingFormat,
    /// Also pass up-to-date units.
    pub list_up_to_date: bool,
    /// A full listing not sorted by unit: it is sorted first, spilling runs to this directory
    /// (for a served store, a path the server can write). Ignored for the incremental form.
    pub sort_in: Option<PathBuf>,
}

/// What a reconcile passes on before its end.
#[derive(Debug)]
pub enum PlanEvent<'a> {
    /// The listing was sorted before the merge (only when [`ReconcileForm::sort_in`] is set,
    /// before any planned unit).
    Sorted {
        /// It was in order already.
        was_sorted: bool,
        /// Rows sorted.
        rows: u64,
        /// Runs spilled to temporary files.
        spilled_runs: u64,
    },
    /// A planned unit.
    Item(PlanItem<'a>),
}

/// How a reconcile ended, short of an error of the store.
#[derive(Debug)]
pub enum PlanEnd {
    /// The plan is complete.
    Complete(Summary),
    /// The listing was refused: `kind` names the listing error ([`ListingError::kind`]:
    /// `malformed`, `bad_version`, `invalid_key`, `duplicate`, `unsorted`, `io`), `message` says
    /// which line and why. The units passed before it are an incomplete plan.
    BadListing {
        /// The listing error's kind.
        kind: String,
        /// The engine's message.
        message: String,
    },
    /// The caller's sink returned `false`.
    Stopped,
}

impl PlanEnd {
    /// A refused listing.
    fn refused(e: &ListingError) -> Self {
        PlanEnd::BadListing {
            kind: e.kind().into(),
            message: e.to_string(),
        }
    }
}

/// Plans a reconcile of `listing` (in `form.format`) against `store`, passing each event to
/// `sink` until it returns `false`. The store is never modified.
pub fn reconcile_listing(
    store: &Store,
    listing: &mut dyn Read,
    form: &ReconcileForm,
    sink: &mut dyn FnMut(PlanEvent<'_>) -> bool,
) -> Result<PlanEnd, Error> {
    let listing = ListingReader::new(BufReader::with_capacity(1 << 16, listing), form.format);
    let opts = ReconcileOptions {
        list_up_to_date: form.list_up_to_date,
    };
    let sorted = match &form.sort_in {
        Some(dir) if !form.changes_only => {
            match SortedListing::sort(listing, &SortConfig::new(dir)) {
                Ok(s) => Ok(s),
                Err(e) => return Ok(PlanEnd::refused(&e)),
            }
        }
        _ => Err(listing),
    };
    if let Ok(s) = &sorted {
        let note = PlanEvent::Sorted {
            was_sorted: s.was_sorted(),
            rows: s.rows(),
            spilled_runs: s.spilled_runs() as u64,
        };
        if !sink(note) {
            return Ok(PlanEnd::Stopped);
        }
    }
    // The sink's `false` travels through the pass as an output error, and back as `Stopped`.
    let items = |item: PlanItem<'_>| match sink(PlanEvent::Item(item)) {
        true => Ok(()),
        false => Err(std::io::ErrorKind::Interrupted.into()),
    };
    let result = match sorted {
        Ok(sorted) => reconcile_full(&store.snapshot()?, sorted, opts, items),
        Err(listing) if form.changes_only => reconcile_changes(store, listing, opts, items),
        Err(listing) => reconcile_full(&store.snapshot()?, listing, opts, items),
    };
    match result {
        Ok(summary) => Ok(PlanEnd::Complete(summary)),
        Err(ReconcileError::Listing(e)) => Ok(PlanEnd::refused(&e)),
        Err(ReconcileError::Output(_)) => Ok(PlanEnd::Stopped),
        Err(ReconcileError::Store(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Batch, UnitStore};

    /// A listing, changes only, where it is sorted, the events taken before a stop, the trace.
    type Case<'a> = (&'a str, bool, Option<PathBuf>, usize, &'a [&'a str]);

    /// Each form plans through the one entry point: the sort note before any unit, a refused
    /// listing without events, and a sink's `false` as `Stopped` at once.
    #[test]
    fn each_form_streams_its_events_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lake")).unwrap();
        let staged = store.stage_bytes(b"out").unwrap();
        let batch = Batch::new().put("a", 3, &staged).put("c", 3, &staged);
        assert!(store.commit(batch).unwrap().applied());
        let tmp = Some(dir.path().to_path_buf());
        let cases: [Case; 7] = [
            (
                "a,3\nb,1\n",
                false,
                None,
                9,
                &["b missing", "c unknown", "complete 1"],
            ),
            (
                "b,1\na,3\n",
                false,
                tmp.clone(),
                9,
                &["sorted false 2", "b missing", "c unknown", "complete 1"],
            ),
            ("a,3\na,4\n", false, tmp.clone(), 9, &["bad duplicate"]),
            (
                "b,1\na,4\n",
                true,
                tmp.clone(),
                9,
                &["b missing", "a behind", "complete 2"],
            ),
            ("a,x\n", true, None, 9, &["bad bad_version"]),
            (
                "b,1\n",
                false,
                tmp.clone(),
                0,
                &["sorted true 1", "stopped"],
            ),
            ("b,1\n", false, None, 0, &["a unknown", "stopped"]),
        ];
        for (listing, changes_only, sort_in, take, want) in cases {
            let form = ReconcileForm {
                changes_only,
                format: ListingFormat::Csv,
                list_up_to_date: false,
                sort_in,
            };
            let mut trace = Vec::new();
            let end = store
                .reconcile(&mut listing.as_bytes(), &form, &mut |event| {
                    trace.push(match event {
                        PlanEvent::Sorted {
                            was_sorted, rows, ..
                        } => format!("sorted {was_sorted} {rows}"),
                        PlanEvent::Item(i) => format!("{} {}", i.unit, i.action.name()),
                    });
                    trace.len() <= take
                })
                .unwrap();
            trace.push(match end {
                PlanEnd::Complete(s) => format!("complete {}", s.to_process()),
                PlanEnd::BadListing { kind, .. } => format!("bad {kind}"),
                PlanEnd::Stopped => "stopped".into(),
            });
            assert_eq!(trace, want, "{listing:?} changes_only={changes_only}");
        }
    }
}
