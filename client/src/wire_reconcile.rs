//! The lines of a `/v1/reconcile` answer: the engine's planned units and summary, with the
//! sort note and the error line that only the wire has.

use oncelake::reconcile::{PlannedUnit, Summary};
use serde::{Deserialize, Serialize};

/// One line of the answer (JSON lines): `{"sorted": …}` first when the server sorted the listing,
/// then one `{"item": …}` per planned unit, then `{"summary": …}` for a complete plan or
/// `{"error": …}` for one that stopped (the items before it are then an incomplete plan).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanLineW {
    /// The listing was sorted before the merge.
    Sorted(SortedW),
    /// A planned unit (the CLI's `--json` plan line).
    Item(PlannedUnit),
    /// The counts of a complete plan.
    Summary(Summary),
    /// Why the plan stopped.
    Error(ErrorLineW),
}

/// What the external sort did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SortedW {
    /// The listing was in order already.
    pub was_sorted: bool,
    /// Rows sorted.
    pub rows: u64,
    /// Runs spilled to temporary files.
    pub spilled_runs: u64,
}

/// Why a plan stopped: `kind` is `bad_listing` (with `listing`, the listing error's kind) or
/// the store's error kind (`io`, `corrupt`, ...).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorLineW {
    /// Stable kind.
    pub kind: String,
    /// What is wrong, naming the line for a bad listing.
    pub message: String,
    /// For a bad listing: [`oncelake::reconcile::ListingError::kind`].
    pub listing: Option<String>,
}

impl ErrorLineW {
    /// A refused listing: its [`oncelake::reconcile::ListingError::kind`] and the engine's message.
    pub fn listing(kind: String, message: String) -> Self {
        ErrorLineW {
            kind: "bad_listing".into(),
            message,
            listing: Some(kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncelake::reconcile::Action;

    /// A plan line keeps the API's JSON (the manifest's version as `current_version`, actions
    /// in snake_case) and reads back to the engine's item.
    #[test]
    fn plan_items_keep_the_apis_json() {
        for (action, name) in [
            (Action::Missing, "missing"),
            (Action::Behind, "behind"),
            (Action::UpToDate, "up_to_date"),
            (Action::Unknown, "unknown"),
        ] {
            let unit = PlannedUnit {
                unit: "d/1".into(),
                action,
                source_version: Some(4),
                manifest_version: None,
            };
            let text = serde_json::to_string(&PlanLineW::Item(unit.clone())).unwrap();
            assert_eq!(
                text,
                format!(
                    r#"{{"item":{{"unit":"d/1","action":"{name}","source_version":4,"current_version":null}}}}"#
                )
            );
            assert_eq!(
                serde_json::to_string(&unit.item()).unwrap(),
                text[8..text.len() - 1]
            );
            let PlanLineW::Item(back) = serde_json::from_str(&text).unwrap() else {
                panic!("{text} is not an item line");
            };
            assert_eq!(back, unit);
        }
    }
}
