//! The whole verify report on the wire, and back to the engine's [`VerifyReport`], so that the
//! CLI prints a served store's report with the same code as in-process (SPEC R15, R20).

use oncelake::invariants::{Invariant, Violation};
use oncelake::table::{LinkProblem, TableCheck};
use oncelake::verify::{
    ObjectProblem, Reclaimable, ReclaimableObject, ReclaimableStaging, StrayFile, UnitRef,
};
use oncelake::{ReplayReport, VerifyReport};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Every field of a [`VerifyReport`]; paths as text (the server's paths, which are the store's).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VerifyReportW {
    /// See [`VerifyReport`].
    pub deep: bool,
    /// See [`VerifyReport`].
    pub seq: u64,
    /// See [`VerifyReport`].
    pub entries_checked: u64,
    /// See [`VerifyReport`].
    pub objects_checked: u64,
    /// See [`VerifyReport`].
    pub bytes_checked: u64,
    /// Referenced objects that do not exist.
    pub missing: Vec<ObjectProblemW>,
    /// Referenced objects with the wrong size, CRC32 or hash.
    pub corrupt: Vec<ObjectProblemW>,
    /// Files in `objects/` that are not objects: (path, bytes).
    pub strays: Vec<(String, u64)>,
    /// Unreferenced objects: (path, bytes).
    pub reclaimable_objects: Vec<(String, u64)>,
    /// Staging files no live writer uses: (path, bytes, owner gone).
    pub reclaimable_staging: Vec<(String, u64, bool)>,
    /// Log records replayed.
    pub replay_records: u64,
    /// Units in the rebuilt manifest.
    pub replay_units: u64,
    /// Differences between the log and the manifest.
    pub replay_problems: Vec<String>,
    /// See [`VerifyReport`].
    pub history_problems: Vec<String>,
    /// Tables checked.
    pub tables: u64,
    /// Table data files checked.
    pub links_checked: u64,
    /// Table data files whose store object is gone.
    pub links_sole_copy: u64,
    /// Wrong or missing table links: (table, path, detail).
    pub link_problems: Vec<(String, String, String)>,
    /// Stray files in table directories.
    pub table_strays: Vec<String>,
    /// Broken invariants: (label, what was seen).
    pub invariants: Vec<(String, String)>,
}

/// An object problem and the entries it affects: (unit, seq, current).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ObjectProblemW {
    /// BLAKE3, 64 hex digits.
    pub object: String,
    /// Its path.
    pub path: String,
    /// What is wrong.
    pub detail: String,
    /// The entries that reference it.
    pub units: Vec<(String, u64, bool)>,
}

/// Every invariant, for decoding by label (labels are unique; see `Invariant::label`).
const INVARIANTS: [Invariant; 12] = [
    Invariant::OneCurrentEntry,
    Invariant::VersionNeverBack,
    Invariant::NoStaleToken,
    Invariant::ReplayReproduces,
    Invariant::Checksummed,
    Invariant::LogSeqIncreasing,
    Invariant::NextSeqFollowsLog,
    Invariant::HorizonOnlyRises,
    Invariant::HorizonWithinLog,
    Invariant::GroupWithinBound,
    Invariant::ObjectBeforeRow,
    Invariant::TokenBelowNext,
];

fn text(p: &std::path::Path) -> String {
    p.display().to_string()
}

impl From<&ObjectProblem> for ObjectProblemW {
    fn from(p: &ObjectProblem) -> Self {
        ObjectProblemW {
            object: p.object.to_hex(),
            path: text(&p.path),
            detail: p.detail.clone(),
            units: p
                .units
                .iter()
                .map(|u| (u.unit.clone(), u.seq, u.current))
                .collect(),
        }
    }
}

impl ObjectProblemW {
    fn to_engine(&self) -> Result<ObjectProblem, String> {
        Ok(ObjectProblem {
            object: crate::wire::parse_id(&self.object)?,
            path: PathBuf::from(&self.path),
            detail: self.detail.clone(),
            units: self
                .units
                .iter()
                .map(|(unit, seq, current)| UnitRef {
                    unit: unit.clone(),
                    seq: *seq,
                    current: *current,
                })
                .collect(),
        })
    }
}

impl From<&VerifyReport> for VerifyReportW {
    fn from(r: &VerifyReport) -> Self {
        VerifyReportW {
            deep: r.deep,
            seq: r.seq,
            entries_checked: r.entries_checked,
            objects_checked: r.objects_checked,
            bytes_checked: r.bytes_checked,
            missing: r.missing.iter().map(Into::into).collect(),
            corrupt: r.corrupt.iter().map(Into::into).collect(),
            strays: r.strays.iter().map(|s| (text(&s.path), s.bytes)).collect(),
            reclaimable_objects: r
                .reclaimable
                .objects
                .iter()
                .map(|o| (text(&o.path), o.bytes))
                .collect(),
            reclaimable_staging: r
                .reclaimable
                .staging
                .iter()
                .map(|f| (text(&f.path), f.bytes, f.owner_gone))
                .collect(),
            replay_records: r.replay.records,
            replay_units: r.replay.units,
            replay_problems: r.replay.problems.clone(),
            history_problems: r.history_problems.clone(),
            tables: r.tables.tables,
            links_checked: r.tables.links_checked,
            links_sole_copy: r.tables.links_sole_copy,
            link_problems: r
                .tables
                .problems
                .iter()
                .map(|p| (p.table.clone(), text(&p.path), p.detail.clone()))
                .collect(),
            table_strays: r.tables.stray.iter().map(|p| text(p)).collect(),
            invariants: r
                .invariants
                .iter()
                .map(|v| (v.invariant.label().to_string(), v.seen.clone()))
                .collect(),
        }
    }
}

impl VerifyReportW {
    /// Back to the engine's report; an unknown object id or invariant label is an error.
    pub fn to_engine(&self) -> Result<VerifyReport, String> {
        Ok(VerifyReport {
            deep: self.deep,
            seq: self.seq,
            entries_checked: self.entries_checked,
            objects_checked: self.objects_checked,
            bytes_checked: self.bytes_checked,
            missing: problems(&self.missing)?,
            corrupt: problems(&self.corrupt)?,
            strays: self
                .strays
                .iter()
                .map(|(p, b)| StrayFile {
                    path: p.into(),
                    bytes: *b,
                })
                .collect(),
            reclaimable: self.reclaimable(),
            replay: ReplayReport {
                records: self.replay_records,
                units: self.replay_units,
                problems: self.replay_problems.clone(),
            },
            history_problems: self.history_problems.clone(),
            tables: self.tables(),
            invariants: self.violations()?,
        })
    }

    fn reclaimable(&self) -> Reclaimable {
        Reclaimable {
            objects: self
                .reclaimable_objects
                .iter()
                .map(|(p, b)| ReclaimableObject {
                    path: p.into(),
                    bytes: *b,
                })
                .collect(),
            staging: self
                .reclaimable_staging
                .iter()
                .map(|(p, b, gone)| ReclaimableStaging {
                    path: p.into(),
                    bytes: *b,
                    owner_gone: *gone,
                })
                .collect(),
        }
    }

    fn tables(&self) -> TableCheck {
        TableCheck {
            tables: self.tables,
            links_checked: self.links_checked,
            links_sole_copy: self.links_sole_copy,
            problems: self
                .link_problems
                .iter()
                .map(|(table, path, detail)| LinkProblem {
                    table: table.clone(),
                    path: path.into(),
                    detail: detail.clone(),
                })
                .collect(),
            stray: self.table_strays.iter().map(PathBuf::from).collect(),
        }
    }

    fn violations(&self) -> Result<Vec<Violation>, String> {
        self.invariants
            .iter()
            .map(|(label, seen)| {
                let invariant = INVARIANTS
                    .into_iter()
                    .find(|i| i.label() == label)
                    .ok_or_else(|| format!("unknown invariant {label:?}"))?;
                Ok(Violation {
                    invariant,
                    seen: seen.clone(),
                })
            })
            .collect()
    }
}

fn problems(ps: &[ObjectProblemW]) -> Result<Vec<ObjectProblem>, String> {
    ps.iter().map(ObjectProblemW::to_engine).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_invariant_label_decodes_to_itself() {
        for i in INVARIANTS {
            let w = VerifyReportW::from(&VerifyReport {
                invariants: vec![Violation {
                    invariant: i,
                    seen: "x".into(),
                }],
                ..VerifyReport::default()
            });
            assert_eq!(w.to_engine().unwrap().invariants[0].invariant, i);
        }
    }

    #[test]
    fn a_report_with_problems_round_trips() {
        let id = oncelake::ObjectId::of(b"a");
        let p = ObjectProblem {
            object: id,
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
            missing: vec![p.clone()],
            corrupt: vec![p],
            strays: vec![StrayFile {
                path: "o/x".into(),
                bytes: 2,
            }],
            replay: ReplayReport {
                records: 9,
                units: 3,
                problems: vec!["gap".into()],
            },
            history_problems: vec!["h".into()],
            ..VerifyReport::default()
        };
        let back: VerifyReportW =
            serde_json::from_str(&serde_json::to_string(&VerifyReportW::from(&r)).unwrap())
                .unwrap();
        assert_eq!(back.to_engine().unwrap(), r);
    }
}
