//! The JSON shapes of the HTTP API and their exact conversions to and from the engine's types,
//! so that a client gets back the very values an in-process caller would (and the CLI prints
//! them with the same code).

use oncelake::{
    ClaimOutcome, CommitReport, Committed, Entry, GcReport, Lease, ObjectId, ObjectMeta, Outcome,
    ReleaseOutcome, RenewOutcome, UnitOutcome,
};
use serde::{Deserialize, Serialize};

/// An error answer: a stable kind and a message that says what to do.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable machine-readable kind (`bad_request`, `unauthorized`, `too_large`, `locked`, ...).
    pub error: String,
    /// Human-readable message.
    pub message: String,
}

/// An object's identity as the engine computed it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ObjectW {
    /// BLAKE3, 64 hex digits.
    pub object: String,
    /// Bytes.
    pub size: u64,
    /// CRC32.
    pub crc32: u32,
}

impl From<ObjectMeta> for ObjectW {
    fn from(m: ObjectMeta) -> Self {
        ObjectW {
            object: m.id.to_hex(),
            size: m.size,
            crc32: m.crc32,
        }
    }
}

impl ObjectW {
    /// Back to the engine's type.
    pub fn to_meta(&self) -> Result<ObjectMeta, String> {
        Ok(ObjectMeta {
            id: parse_id(&self.object)?,
            size: self.size,
            crc32: self.crc32,
        })
    }
}

/// Parses an object id.
pub fn parse_id(hex: &str) -> Result<ObjectId, String> {
    hex.parse()
        .map_err(|_| format!("{hex:?} is not an object id (64 hex digits)"))
}

/// A manifest entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EntryW {
    /// Unit key.
    pub unit: String,
    /// Source version.
    pub source_version: u64,
    /// Revision (corrections).
    pub revision: u32,
    /// Its object.
    #[serde(flatten)]
    pub object: ObjectW,
    /// The commit that made it visible.
    pub seq: u64,
    /// Commit time, ms since the Unix epoch.
    pub committed_at_ms: u64,
}

impl From<&Entry> for EntryW {
    fn from(e: &Entry) -> Self {
        EntryW {
            unit: e.unit.clone(),
            source_version: e.source_version,
            revision: e.revision,
            object: e.object.into(),
            seq: e.seq,
            committed_at_ms: e.committed_at_ms,
        }
    }
}

impl EntryW {
    /// Back to the engine's type.
    pub fn to_entry(&self) -> Result<Entry, String> {
        Ok(Entry {
            unit: self.unit.clone(),
            source_version: self.source_version,
            revision: self.revision,
            object: self.object.to_meta()?,
            seq: self.seq,
            committed_at_ms: self.committed_at_ms,
        })
    }
}

/// A unit's outcome in a commit.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum OutcomeW {
    /// See [`Outcome::Committed`].
    Committed {
        /// seq
        seq: u64,
        /// revision
        revision: u32,
        /// superseded version
        superseded: Option<u64>,
    },
    /// See [`Outcome::Duplicate`].
    Duplicate {
        /// seq
        seq: u64,
    },
    /// See [`Outcome::Conflict`].
    Conflict {
        /// the winner's seq
        winner_seq: u64,
        /// the winner's object
        winner: String,
    },
    /// See [`Outcome::Stale`].
    Stale {
        /// the committed version
        current_version: u64,
    },
    /// See [`Outcome::Fenced`].
    Fenced {
        /// the token used
        token: u64,
        /// the unit's newest token
        newest_token: u64,
    },
    /// See [`Outcome::Busy`].
    Busy {
        /// lease expiry
        expires_at_ms: u64,
    },
    /// See [`Outcome::Aborted`].
    Aborted,
}

impl From<&Outcome> for OutcomeW {
    fn from(o: &Outcome) -> Self {
        match *o {
            Outcome::Committed {
                seq,
                revision,
                superseded,
            } => OutcomeW::Committed {
                seq,
                revision,
                superseded,
            },
            Outcome::Duplicate { seq } => OutcomeW::Duplicate { seq },
            Outcome::Conflict { winner_seq, winner } => OutcomeW::Conflict {
                winner_seq,
                winner: winner.to_hex(),
            },
            Outcome::Stale { current_version } => OutcomeW::Stale { current_version },
            Outcome::Fenced {
                token,
                newest_token,
            } => OutcomeW::Fenced {
                token,
                newest_token,
            },
            Outcome::Busy { expires_at_ms } => OutcomeW::Busy { expires_at_ms },
            Outcome::Aborted => OutcomeW::Aborted,
        }
    }
}

impl OutcomeW {
    /// Back to the engine's type.
    pub fn to_outcome(&self) -> Result<Outcome, String> {
        Ok(match self {
            OutcomeW::Committed {
                seq,
                revision,
                superseded,
            } => Outcome::Committed {
                seq: *seq,
                revision: *revision,
                superseded: *superseded,
            },
            OutcomeW::Duplicate { seq } => Outcome::Duplicate { seq: *seq },
            OutcomeW::Conflict { winner_seq, winner } => Outcome::Conflict {
                winner_seq: *winner_seq,
                winner: parse_id(winner)?,
            },
            OutcomeW::Stale { current_version } => Outcome::Stale {
                current_version: *current_version,
            },
            OutcomeW::Fenced {
                token,
                newest_token,
            } => Outcome::Fenced {
                token: *token,
                newest_token: *newest_token,
            },
            OutcomeW::Busy { expires_at_ms } => Outcome::Busy {
                expires_at_ms: *expires_at_ms,
            },
            OutcomeW::Aborted => Outcome::Aborted,
        })
    }
}

/// One unit's answer in a commit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UnitOutcomeW {
    /// Unit key.
    pub unit: String,
    /// Source version asked for.
    pub source_version: u64,
    /// The object asked for.
    pub object: String,
    /// The worker holding the lease of a busy unit.
    pub holder: Option<String>,
    /// What happened.
    #[serde(flatten)]
    pub outcome: OutcomeW,
}

impl From<&UnitOutcome> for UnitOutcomeW {
    fn from(u: &UnitOutcome) -> Self {
        UnitOutcomeW {
            unit: u.unit.clone(),
            source_version: u.source_version,
            object: u.object.to_hex(),
            holder: u.holder.clone(),
            outcome: (&u.outcome).into(),
        }
    }
}

impl UnitOutcomeW {
    /// Back to the engine's type.
    pub fn to_unit_outcome(&self) -> Result<UnitOutcome, String> {
        Ok(UnitOutcome {
            unit: self.unit.clone(),
            source_version: self.source_version,
            object: parse_id(&self.object)?,
            outcome: self.outcome.to_outcome()?,
            holder: self.holder.clone(),
        })
    }
}

/// A commit's report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CommitReportW {
    /// The log record's seq, if anything was written.
    pub seq: Option<u64>,
    /// Per unit, in batch order.
    pub units: Vec<UnitOutcomeW>,
}

impl From<&CommitReport> for CommitReportW {
    fn from(r: &CommitReport) -> Self {
        CommitReportW {
            seq: r.seq,
            units: r.units.iter().map(Into::into).collect(),
        }
    }
}

impl CommitReportW {
    /// Back to the engine's type.
    pub fn to_report(&self) -> Result<CommitReport, String> {
        Ok(CommitReport {
            seq: self.seq,
            units: self
                .units
                .iter()
                .map(UnitOutcomeW::to_unit_outcome)
                .collect::<Result<_, _>>()?,
        })
    }
}

/// The answer of a one-unit put: the unit's outcome and the staged object.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PutW {
    /// The unit's outcome.
    #[serde(flatten)]
    pub unit: UnitOutcomeW,
    /// The object staged from the upload.
    pub staged: ObjectW,
}

/// The answer of a staging upload: a handle for a later commit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StagedW {
    /// The handle to name in `POST /v1/commit`; it lives until committed, dropped, or idle for
    /// the server's staging timeout.
    pub staged: u64,
    /// What staging computed.
    #[serde(flatten)]
    pub meta: ObjectW,
}

/// One item of a batch commit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CommitItemW {
    /// Unit key.
    pub unit: String,
    /// Source version.
    pub source_version: u64,
    /// A handle from `POST /v1/stage`.
    pub staged: u64,
    /// Fencing token of a claim.
    #[serde(default)]
    pub token: Option<u64>,
    /// A deliberate correction of the same version.
    #[serde(default)]
    pub correct: bool,
}

/// A batch commit request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CommitW {
    /// The items.
    pub items: Vec<CommitItemW>,
    /// Apply what is acceptable instead of all-or-nothing.
    #[serde(default)]
    pub partial: bool,
    /// Keep the staging handles after the commit, to commit the same bytes again as other
    /// units (by default a commit drops the handles it names).
    #[serde(default)]
    pub keep_staged: bool,
}

/// A lease.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LeaseW {
    /// Unit key.
    pub unit: String,
    /// Worker.
    pub worker: String,
    /// Fencing token.
    pub token: u64,
    /// Source version.
    pub source_version: u64,
    /// Expiry, ms since the Unix epoch.
    pub expires_at_ms: u64,
}

impl From<&Lease> for LeaseW {
    fn from(l: &Lease) -> Self {
        LeaseW {
            unit: l.unit.clone(),
            worker: l.worker.clone(),
            token: l.token,
            source_version: l.source_version,
            expires_at_ms: l.expires_at_ms,
        }
    }
}

impl From<&LeaseW> for Lease {
    fn from(l: &LeaseW) -> Self {
        Lease {
            unit: l.unit.clone(),
            worker: l.worker.clone(),
            token: l.token,
            source_version: l.source_version,
            expires_at_ms: l.expires_at_ms,
        }
    }
}

/// A claim request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClaimReqW {
    /// Unit key.
    pub unit: String,
    /// Source version.
    pub source_version: u64,
    /// Worker name.
    pub worker: String,
    /// Lease length in ms.
    pub ttl_ms: u64,
}

/// A claim's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "claim", rename_all = "snake_case")]
pub enum ClaimW {
    /// Granted.
    Granted {
        /// The lease.
        lease: LeaseW,
        /// Took over an expired lease.
        took_over: bool,
    },
    /// Held by another worker.
    Held {
        /// Who.
        worker: String,
        /// Until when.
        expires_at_ms: u64,
    },
    /// Already committed at or above the version.
    AlreadyDone {
        /// The entry.
        entry: EntryW,
    },
}

impl From<&ClaimOutcome> for ClaimW {
    fn from(c: &ClaimOutcome) -> Self {
        match c {
            ClaimOutcome::Granted { lease, took_over } => ClaimW::Granted {
                lease: lease.into(),
                took_over: *took_over,
            },
            ClaimOutcome::Held {
                worker,
                expires_at_ms,
            } => ClaimW::Held {
                worker: worker.clone(),
                expires_at_ms: *expires_at_ms,
            },
            ClaimOutcome::AlreadyDone(e) => ClaimW::AlreadyDone { entry: e.into() },
        }
    }
}

impl ClaimW {
    /// Back to the engine's type.
    pub fn to_outcome(&self) -> Result<ClaimOutcome, String> {
        Ok(match self {
            ClaimW::Granted { lease, took_over } => ClaimOutcome::Granted {
                lease: lease.into(),
                took_over: *took_over,
            },
            ClaimW::Held {
                worker,
                expires_at_ms,
            } => ClaimOutcome::Held {
                worker: worker.clone(),
                expires_at_ms: *expires_at_ms,
            },
            ClaimW::AlreadyDone { entry } => ClaimOutcome::AlreadyDone(entry.to_entry()?),
        })
    }
}

/// A renew request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RenewReqW {
    /// The lease.
    pub lease: LeaseW,
    /// New lease length in ms.
    pub ttl_ms: u64,
}

/// A renewal's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "renew", rename_all = "snake_case")]
pub enum RenewW {
    /// Renewed.
    Renewed {
        /// The renewed lease.
        lease: LeaseW,
    },
    /// Lost.
    Lost {
        /// The unit's newest token.
        newest_token: u64,
    },
}

impl From<&RenewOutcome> for RenewW {
    fn from(r: &RenewOutcome) -> Self {
        match r {
            RenewOutcome::Renewed(l) => RenewW::Renewed { lease: l.into() },
            RenewOutcome::Lost { newest_token } => RenewW::Lost {
                newest_token: *newest_token,
            },
        }
    }
}

impl From<&RenewW> for RenewOutcome {
    fn from(r: &RenewW) -> Self {
        match r {
            RenewW::Renewed { lease } => RenewOutcome::Renewed(lease.into()),
            RenewW::Lost { newest_token } => RenewOutcome::Lost {
                newest_token: *newest_token,
            },
        }
    }
}

/// A release request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReleaseReqW {
    /// The lease.
    pub lease: LeaseW,
}

/// A release's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "release", rename_all = "snake_case")]
pub enum ReleaseW {
    /// Released.
    Released,
    /// Another worker holds it.
    NotHolder {
        /// The holder.
        holder: String,
    },
    /// Not a lease that can still end.
    Lost {
        /// The unit's newest token.
        newest_token: u64,
    },
}

impl From<&ReleaseOutcome> for ReleaseW {
    fn from(r: &ReleaseOutcome) -> Self {
        match r {
            ReleaseOutcome::Released => ReleaseW::Released,
            ReleaseOutcome::NotHolder { holder } => ReleaseW::NotHolder {
                holder: holder.clone(),
            },
            ReleaseOutcome::Lost { newest_token } => ReleaseW::Lost {
                newest_token: *newest_token,
            },
        }
    }
}

impl From<&ReleaseW> for ReleaseOutcome {
    fn from(r: &ReleaseW) -> Self {
        match r {
            ReleaseW::Released => ReleaseOutcome::Released,
            ReleaseW::NotHolder { holder } => ReleaseOutcome::NotHolder {
                holder: holder.clone(),
            },
            ReleaseW::Lost { newest_token } => ReleaseOutcome::Lost {
                newest_token: *newest_token,
            },
        }
    }
}

/// The dedup fast path's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CommittedW {
    /// Committed source version.
    pub source_version: u64,
    /// Its object.
    pub object: String,
    /// The commit's seq.
    pub seq: u64,
}

impl From<&Committed> for CommittedW {
    fn from(c: &Committed) -> Self {
        CommittedW {
            source_version: c.source_version,
            object: c.object.to_hex(),
            seq: c.seq,
        }
    }
}

impl CommittedW {
    /// Back to the engine's type.
    pub fn to_committed(&self) -> Result<Committed, String> {
        Ok(Committed {
            source_version: self.source_version,
            object: parse_id(&self.object)?,
            seq: self.seq,
        })
    }
}

/// One record of the change feed: its exact encoding (hex), so a client decodes the engine's
/// own [`oncelake::log::Record`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecordW {
    /// seq.
    pub seq: u64,
    /// The framed record, hex.
    pub record: String,
}

/// A page of the change feed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChangesW {
    /// Records after the asked seq, in seq order.
    pub records: Vec<RecordW>,
    /// The store's seq when read: ask again with `since` = this.
    pub seq: u64,
}

/// Lowercase hex.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Parses lowercase or uppercase hex.
pub fn from_hex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("odd-length hex".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("bad hex at {i}")))
        .collect()
}

/// A GC report, field for field.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GcReportW {
    /// See [`GcReport`].
    pub dry_run: bool,
    /// See [`GcReport`].
    pub staging_files: u64,
    /// See [`GcReport`].
    pub staging_bytes: u64,
    /// See [`GcReport`].
    pub staging_files_young: u64,
    /// See [`GcReport`].
    pub objects: u64,
    /// See [`GcReport`].
    pub object_bytes: u64,
    /// See [`GcReport`].
    pub history_rows_pruned: u64,
    /// See [`GcReport`].
    pub history_from: u64,
    /// See [`GcReport`].
    pub objects_referenced: u64,
    /// See [`GcReport`].
    pub objects_pinned: u64,
    /// See [`GcReport`].
    pub stray_files: u64,
}

impl From<&GcReport> for GcReportW {
    fn from(r: &GcReport) -> Self {
        GcReportW {
            dry_run: r.dry_run,
            staging_files: r.staging_files,
            staging_bytes: r.staging_bytes,
            staging_files_young: r.staging_files_young,
            objects: r.objects,
            object_bytes: r.object_bytes,
            history_rows_pruned: r.history_rows_pruned,
            history_from: r.history_from,
            objects_referenced: r.objects_referenced,
            objects_pinned: r.objects_pinned,
            stray_files: r.stray_files,
        }
    }
}

impl From<&GcReportW> for GcReport {
    fn from(r: &GcReportW) -> Self {
        GcReport {
            dry_run: r.dry_run,
            staging_files: r.staging_files,
            staging_bytes: r.staging_bytes,
            staging_files_young: r.staging_files_young,
            objects: r.objects,
            object_bytes: r.object_bytes,
            history_rows_pruned: r.history_rows_pruned,
            history_from: r.history_from,
            objects_referenced: r.objects_referenced,
            objects_pinned: r.objects_pinned,
            stray_files: r.stray_files,
        }
    }
}
