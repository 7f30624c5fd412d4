//! The lines of a `/v1/reconcile` answer and their exact conversions to the engine's plan types.

use oncelake::reconcile::{Action, ListingError, PlanItem, Summary};
use serde::{Deserialize, Serialize};

/// One line of the answer (JSON lines): `{"sorted": …}` first when the server sorted the listing,
/// then one `{"item": …}` per planned unit, then `{"summary": …}` for a complete plan or
/// `{"error": …}` for one that stopped (the items before it are then an incomplete plan).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanLineW {
    /// The listing was sorted before the merge.
    Sorted(SortedW),
    /// A planned unit.
    Item(PlanItemW),
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

/// A planned unit (the CLI's `--json` plan line).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanItemW {
    /// The unit key.
    pub unit: String,
    /// `missing`, `behind`, `up_to_date` or `unknown`.
    pub action: String,
    /// The source's version.
    pub source_version: Option<u64>,
    /// The version the store holds.
    pub current_version: Option<u64>,
}

impl From<&PlanItem<'_>> for PlanItemW {
    fn from(i: &PlanItem<'_>) -> Self {
        PlanItemW {
            unit: i.unit.to_string(),
            action: i.action.name().to_string(),
            source_version: i.source_version,
            current_version: i.manifest_version,
        }
    }
}

impl PlanItemW {
    /// The engine's item (borrowing the unit).
    pub fn to_item(&self) -> Result<PlanItem<'_>, String> {
        let action = [
            Action::Missing,
            Action::Behind,
            Action::UpToDate,
            Action::Unknown,
        ]
        .into_iter()
        .find(|a| a.name() == self.action)
        .ok_or_else(|| format!("unknown plan action {:?}", self.action))?;
        Ok(PlanItem {
            unit: &self.unit,
            action,
            source_version: self.source_version,
            manifest_version: self.current_version,
        })
    }
}

/// Why a plan stopped: `kind` is `bad_listing` (with `listing`, the listing error's kind) or
/// the store's error kind (`io`, `corrupt`, ...).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorLineW {
    /// Stable kind.
    pub kind: String,
    /// What is wrong, naming the line for a bad listing.
    pub message: String,
    /// For a bad listing: `malformed`, `bad_version`, `invalid_key`, `duplicate`, `unsorted`
    /// or `io`.
    pub listing: Option<String>,
}

impl ErrorLineW {
    /// A refused listing.
    pub fn listing(e: &ListingError) -> Self {
        let kind = match e {
            ListingError::Malformed { .. } => "malformed",
            ListingError::BadVersion { .. } => "bad_version",
            ListingError::InvalidKey { .. } => "invalid_key",
            ListingError::Duplicate { .. } => "duplicate",
            ListingError::Unsorted { .. } => "unsorted",
            ListingError::Io { .. } => "io",
            _ => "other",
        };
        ErrorLineW {
            kind: "bad_listing".into(),
            message: e.to_string(),
            listing: Some(kind.into()),
        }
    }
}
