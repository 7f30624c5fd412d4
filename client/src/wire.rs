//! The JSON shapes of the HTTP API that are not the engine's own types: requests, the lease and
//! claim answers, the change feed's pages. The entries, objects, outcomes, commit and GC reports
//! cross the wire as the engine's types (its `serde` feature), so a client gets back the very
//! values an in-process caller would (and the CLI prints them with the same code).

use oncelake::{ClaimOutcome, Entry, Lease, ObjectId, ObjectMeta, RenewOutcome, UnitOutcome};
use serde::{Deserialize, Serialize};

/// An error answer: a stable kind and a message that says what to do.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable machine-readable kind (`bad_request`, `unauthorized`, `too_large`, `locked`, ...).
    pub error: String,
    /// Human-readable message.
    pub message: String,
}

/// Parses an object id.
pub fn parse_id(hex: &str) -> Result<ObjectId, String> {
    hex.parse()
        .map_err(|_| format!("{hex:?} is not an object id (64 hex digits)"))
}

/// The answer of a one-unit put: the unit's outcome and the staged object.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PutW {
    /// The unit's outcome.
    #[serde(flatten)]
    pub unit: UnitOutcome,
    /// The object staged from the upload.
    pub staged: ObjectMeta,
}

/// The answer of a staging upload: a handle for a later commit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StagedW {
    /// The handle to name in `POST /v1/commit`; it lives until committed, dropped, or idle for
    /// the server's staging timeout.
    pub staged: u64,
    /// What staging computed.
    #[serde(flatten)]
    pub meta: ObjectMeta,
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
        lease: Lease,
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
        entry: Entry,
    },
}

impl From<&ClaimOutcome> for ClaimW {
    fn from(c: &ClaimOutcome) -> Self {
        match c {
            ClaimOutcome::Granted { lease, took_over } => ClaimW::Granted {
                lease: lease.clone(),
                took_over: *took_over,
            },
            ClaimOutcome::Held {
                worker,
                expires_at_ms,
            } => ClaimW::Held {
                worker: worker.clone(),
                expires_at_ms: *expires_at_ms,
            },
            ClaimOutcome::AlreadyDone(e) => ClaimW::AlreadyDone { entry: e.clone() },
        }
    }
}

impl ClaimW {
    /// Back to the engine's type.
    pub fn to_outcome(&self) -> Result<ClaimOutcome, String> {
        Ok(match self {
            ClaimW::Granted { lease, took_over } => ClaimOutcome::Granted {
                lease: lease.clone(),
                took_over: *took_over,
            },
            ClaimW::Held {
                worker,
                expires_at_ms,
            } => ClaimOutcome::Held {
                worker: worker.clone(),
                expires_at_ms: *expires_at_ms,
            },
            ClaimW::AlreadyDone { entry } => ClaimOutcome::AlreadyDone(entry.clone()),
        })
    }
}

/// A renew request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RenewReqW {
    /// The lease.
    pub lease: Lease,
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
        lease: Lease,
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
            RenewOutcome::Renewed(l) => RenewW::Renewed { lease: l.clone() },
            RenewOutcome::Lost { newest_token } => RenewW::Lost {
                newest_token: *newest_token,
            },
        }
    }
}

impl From<&RenewW> for RenewOutcome {
    fn from(r: &RenewW) -> Self {
        match r {
            RenewW::Renewed { lease } => RenewOutcome::Renewed(lease.clone()),
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
    pub lease: Lease,
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

#[cfg(test)]
mod tests {
    use oncelake::{
        CommitReport, Entry, GcReport, Lease, ObjectId, ObjectMeta, Outcome, ReleaseOutcome,
        UnitOutcome,
    };

    /// The engine's types on the wire keep the API's JSON byte for byte (the shapes
    /// docs/server.md shows), and read back to the very values sent.
    #[test]
    fn engine_types_keep_the_apis_json_and_read_back_exactly() {
        let id = ObjectId::of(b"x");
        let hex = id.to_hex();
        let entry = Entry {
            unit: "orders/d=1".into(),
            source_version: 7,
            revision: 1,
            object: ObjectMeta {
                id,
                size: 3,
                crc32: 9,
            },
            seq: 18,
            committed_at_ms: 5,
        };
        let text = serde_json::to_string(&entry).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"unit":"orders/d=1","source_version":7,"revision":1,"object":"{hex}","size":3,"crc32":9,"seq":18,"committed_at_ms":5}}"#
            )
        );
        assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), entry);

        let outcomes = [
            (
                Outcome::Committed {
                    seq: 18,
                    revision: 0,
                    superseded: None,
                },
                r#""outcome":"committed","seq":18,"revision":0,"superseded":null"#.to_string(),
            ),
            (
                Outcome::Duplicate { seq: 4 },
                r#""outcome":"duplicate","seq":4"#.into(),
            ),
            (
                Outcome::Conflict {
                    winner_seq: 2,
                    winner: id,
                },
                format!(r#""outcome":"conflict","winner_seq":2,"winner":"{hex}""#),
            ),
            (
                Outcome::Stale { current_version: 9 },
                r#""outcome":"stale","current_version":9"#.into(),
            ),
            (
                Outcome::Fenced {
                    token: 12,
                    newest_token: 14,
                },
                r#""outcome":"fenced","token":12,"newest_token":14"#.into(),
            ),
            (
                Outcome::Busy { expires_at_ms: 77 },
                r#""outcome":"busy","expires_at_ms":77"#.into(),
            ),
            (Outcome::Aborted, r#""outcome":"aborted""#.into()),
        ];
        let mut report = CommitReport {
            seq: Some(19),
            units: Vec::new(),
        };
        for (i, (outcome, fields)) in outcomes.into_iter().enumerate() {
            let holder = matches!(outcome, Outcome::Busy { .. }).then(|| "w2".to_string());
            let u = UnitOutcome {
                unit: format!("u{i}"),
                source_version: 7,
                object: id,
                holder: holder.clone(),
                outcome,
            };
            let holder = holder.map_or("null".into(), |h| format!("\"{h}\""));
            let text = serde_json::to_string(&u).unwrap();
            assert_eq!(
                text,
                format!(
                    r#"{{"unit":"u{i}","source_version":7,"object":"{hex}","holder":{holder},{fields}}}"#
                )
            );
            assert_eq!(serde_json::from_str::<UnitOutcome>(&text).unwrap(), u);
            report.units.push(u);
        }
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<CommitReport>(&text).unwrap(), report);

        let gc = GcReport {
            dry_run: true,
            objects: 3,
            history_from: 2,
            ..GcReport::default()
        };
        let text = serde_json::to_string(&gc).unwrap();
        assert!(
            text.starts_with(r#"{"dry_run":true,"staging_files":0,"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<GcReport>(&text).unwrap(), gc);
    }

    /// A lease and a release's answer as docs/server.md shows them.
    #[test]
    fn leases_and_releases_keep_the_apis_json() {
        let lease = Lease {
            unit: "u".into(),
            worker: "w1".into(),
            token: 12,
            source_version: 7,
            expires_at_ms: 99,
        };
        let text = serde_json::to_string(&lease).unwrap();
        assert_eq!(
            text,
            r#"{"unit":"u","worker":"w1","token":12,"source_version":7,"expires_at_ms":99}"#
        );
        assert_eq!(serde_json::from_str::<Lease>(&text).unwrap(), lease);
        for (out, text) in [
            (ReleaseOutcome::Released, r#"{"release":"released"}"#),
            (
                ReleaseOutcome::NotHolder {
                    holder: "w2".into(),
                },
                r#"{"release":"not_holder","holder":"w2"}"#,
            ),
            (
                ReleaseOutcome::Lost { newest_token: 15 },
                r#"{"release":"lost","newest_token":15}"#,
            ),
        ] {
            assert_eq!(serde_json::to_string(&out).unwrap(), text);
            assert_eq!(serde_json::from_str::<ReleaseOutcome>(text).unwrap(), out);
        }
    }

    #[test]
    fn a_bad_object_id_is_refused_with_what_it_should_be() {
        let e = serde_json::from_str::<ObjectMeta>(r#"{"object":"zz","size":1,"crc32":2}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("64 hex digits"), "{e}");
    }
}
