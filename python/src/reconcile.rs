//! `Store.reconcile`: the engine's `UnitStore::reconcile` on whichever store backs the `Store`,
//! the Python pairs handed over as a JSON-lines listing (a full listing in any order is sorted
//! first, by the engine in this process or the server's).

use crate::backend::{with_store, Backend};
use crate::convert::{self, kw};
use oncelake::reconcile::{ListingFormat, Plan, PlanEnd, PlanEvent, ReconcileForm};
use oncelake::UnitStore;
use pyo3::prelude::*;

/// The `(unit, version)` listing of `Store.reconcile`.
pub(crate) struct Listing {
    /// Each listed unit with its source version.
    pub pairs: Vec<(String, u64)>,
    /// The listing is the whole source: manifest units it does not list are `unknown`.
    pub full: bool,
    /// Also list units with nothing to do.
    pub list_up_to_date: bool,
}

/// The plan of `listing` on the store `backend` holds.
pub(crate) fn plan(py: Python<'_>, backend: &Backend, listing: &Listing) -> PyResult<Plan> {
    let mut lines = Vec::new();
    for (unit, version) in &listing.pairs {
        let line = serde_json::json!({ "unit": unit, "version": version });
        lines.extend_from_slice(line.to_string().as_bytes());
        lines.push(b'\n');
    }
    let form = ReconcileForm {
        changes_only: !listing.full,
        format: ListingFormat::JsonLines,
        list_up_to_date: listing.list_up_to_date,
        sort_in: listing.full.then(std::env::temp_dir),
    };
    let mut units = Vec::new();
    let end = with_store!(backend, py, |s| s.reconcile(
        &mut &lines[..],
        &form,
        &mut |event: PlanEvent<'_>| {
            if let PlanEvent::Item(item) = event {
                units.push(item.into());
            }
            true
        }
    ))?;
    match end {
        PlanEnd::Complete(summary) => Ok(Plan { units, summary }),
        PlanEnd::BadListing { message, .. } => Err(match kw(py, &[]) {
            Ok(f) => convert::error(py, "invalid_input", format!("bad listing: {message}"), f),
            Err(e) => e,
        }),
        PlanEnd::Stopped => Err(pyo3::exceptions::PyRuntimeError::new_err(
            "internal error: the reconcile stopped early; please report it",
        )),
    }
}
