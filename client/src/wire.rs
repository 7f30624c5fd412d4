//! The JSON shapes of the HTTP API that are not the engine's own types: requests, the lease and
//! claim answers, the change feed's pages. The entries, objects, outcomes, commit and GC reports
//! cross the wire as the engine's types (its `serde` feature), so a client gets back the very
//! values an in-process caller would (and the CLI prints them with the same code).

use oncelake::{Lease, ObjectId, ObjectMeta, UnitOutcome};
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

/// A renew request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RenewReqW {
    /// The lease.
    pub lease: Lease,
    /// New lease length in ms.
    pub ttl_ms: u64,
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

    // The engine's types on the wire keep the API's JSON byte for byte (the shapes
    // docs/server.md shows), and read back to the very values sent.

    #[test]
    fn an_entry_keeps_the_apis_json_and_reads_back_exactly() {
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
    }

    #[test]
    fn every_outcome_keeps_the_apis_json_and_reads_back_exactly() {
        let id = ObjectId::of(b"x");
        let hex = id.to_hex();
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
    }

    #[test]
    fn a_gc_report_keeps_the_apis_json_and_reads_back_exactly() {
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

    fn lease() -> Lease {
        Lease {
            unit: "u".into(),
            worker: "w1".into(),
            token: 12,
            source_version: 7,
            expires_at_ms: 99,
        }
    }

    /// A lease and a release's answer as docs/server.md shows them.
    #[test]
    fn leases_and_releases_keep_the_apis_json() {
        let lease = lease();
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

    /// Claims, renewals and the pipeline's cell answers as the API has always spelled them (the
    /// engine's tuple variants carry their value under a field name), and back to equal values.
    #[test]
    fn claims_renewals_and_cells_keep_the_apis_json() {
        use oncelake::pipeline::{CellState, Claim, FailOutcome, StaleReason};
        use oncelake::{ClaimOutcome, RenewOutcome};
        let lease = lease();
        let lease_json = serde_json::to_string(&lease).unwrap();
        let entry = Entry {
            unit: "u".into(),
            source_version: 7,
            revision: 0,
            object: ObjectMeta {
                id: ObjectId::of(b"x"),
                size: 1,
                crc32: 2,
            },
            seq: 3,
            committed_at_ms: 4,
        };
        let entry_json = serde_json::to_string(&entry).unwrap();
        fn same<T>(value: T, text: &str)
        where
            T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
        {
            assert_eq!(serde_json::to_string(&value).unwrap(), text);
            assert_eq!(serde_json::from_str::<T>(text).unwrap(), value);
        }
        same(
            ClaimOutcome::Granted {
                lease: lease.clone(),
                took_over: true,
            },
            &format!(r#"{{"claim":"granted","lease":{lease_json},"took_over":true}}"#),
        );
        same(
            ClaimOutcome::Held {
                worker: "w2".into(),
                expires_at_ms: 5,
            },
            r#"{"claim":"held","worker":"w2","expires_at_ms":5}"#,
        );
        same(
            ClaimOutcome::AlreadyDone(entry.clone()),
            &format!(r#"{{"claim":"already_done","entry":{entry_json}}}"#),
        );
        same(
            RenewOutcome::Renewed(lease.clone()),
            &format!(r#"{{"renew":"renewed","lease":{lease_json}}}"#),
        );
        same(
            RenewOutcome::Lost { newest_token: 9 },
            r#"{"renew":"lost","newest_token":9}"#,
        );
        same(Claim::AlreadyDone, r#"{"claim":"already_done"}"#);
        same(
            Claim::GaveUp { attempts: 3 },
            r#"{"claim":"gave_up","attempts":3}"#,
        );
        same(
            FailOutcome::Busy {
                worker: "w".into(),
                expires_at_ms: 8,
            },
            r#"{"outcome":"busy","worker":"w","expires_at_ms":8}"#,
        );
        same(
            StaleReason::CodeChanged { from: 1, to: 2 },
            r#"{"reason":"code_changed","from":1,"to":2}"#,
        );
        same(
            CellState::Blocked {
                upstream: "parse".into(),
                upstream_state: "failed",
            },
            r#"{"state":"blocked","upstream":"parse","upstream_state":"failed"}"#,
        );
        let e = serde_json::from_str::<CellState>(
            r#"{"state":"blocked","upstream":"parse","upstream_state":"odd"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown cell state"), "{e}");
    }

    /// A verify report with every kind of problem reads back to the very report sent, paths as
    /// their text and each invariant as its label.
    #[test]
    fn a_verify_report_reads_back_exactly() {
        use oncelake::invariants::{Invariant, Violation};
        use oncelake::table::{LinkProblem, TableCheck};
        use oncelake::verify::{
            ObjectProblem, Reclaimable, ReclaimableObject, ReclaimableStaging, StrayFile, UnitRef,
        };
        use oncelake::{ReplayReport, VerifyReport};
        let p = ObjectProblem {
            object: ObjectId::of(b"a"),
            path: "o/a".into(),
            detail: "size 3, expected 1".into(),
            units: vec![UnitRef {
                unit: "u".into(),
                seq: 4,
                current: true,
            }],
        };
        let r = VerifyReport {
            deep: true,
            seq: 9,
            entries_checked: 3,
            objects_checked: 2,
            bytes_checked: 7,
            missing: vec![p.clone()],
            corrupt: vec![p],
            strays: vec![StrayFile {
                path: "o/x".into(),
                bytes: 2,
            }],
            reclaimable: Reclaimable {
                objects: vec![ReclaimableObject {
                    path: "o/b".into(),
                    bytes: 5,
                }],
                staging: vec![ReclaimableStaging {
                    path: "s/1".into(),
                    bytes: 6,
                    owner_gone: true,
                }],
            },
            replay: ReplayReport {
                records: 9,
                units: 3,
                problems: vec!["gap".into()],
            },
            history_problems: vec!["h".into()],
            tables: TableCheck {
                tables: 1,
                links_checked: 4,
                links_sole_copy: 1,
                problems: vec![LinkProblem {
                    table: "t".into(),
                    path: "t/p".into(),
                    detail: "gone".into(),
                }],
                stray: vec!["t/stray".into()],
            },
            invariants: Invariant::ALL
                .into_iter()
                .map(|invariant| Violation {
                    invariant,
                    seen: invariant.label().to_lowercase(),
                })
                .collect(),
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""path":"o/x""#), "{text}");
        assert!(text.contains(r#"{"invariant":"I6","seen":"i6"}"#), "{text}");
        assert_eq!(serde_json::from_str::<VerifyReport>(&text).unwrap(), r);
        let e = serde_json::from_str::<Violation>(r#"{"invariant":"I99","seen":""}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown invariant"), "{e}");
    }

    #[test]
    fn a_bad_object_id_is_refused_with_what_it_should_be() {
        let e = serde_json::from_str::<ObjectMeta>(r#"{"object":"zz","size":1,"crc32":2}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("64 hex digits"), "{e}");
    }
}
