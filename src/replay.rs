//! Rebuilding the manifest from the commit log alone, and comparing it with the stored one
//! (invariant I7; `verify` runs it).

use crate::error::Result;
use crate::schema::log::RecordBody;
use crate::schema::manifest::EntryValue;
use crate::snapshot::Snapshot;
use std::collections::BTreeMap;

/// What a replay found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReplayReport {
    /// Log records read.
    pub records: u64,
    /// Units in the rebuilt manifest.
    pub units: u64,
    /// Every difference between the rebuilt and the stored manifest, or in the log itself.
    pub problems: Vec<String>,
}

impl ReplayReport {
    /// True when the log reproduces the manifest exactly.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The manifest the log of `snap` rebuilds (each unit's last committed entry), noting in
/// `report` the records counted, undecodable records, seq gaps and versions going back (I5).
fn rebuild_from_log(
    snap: &Snapshot,
    report: &mut ReplayReport,
) -> Result<BTreeMap<String, EntryValue>> {
    let mut rebuilt: BTreeMap<String, EntryValue> = BTreeMap::new();
    let mut expected_seq = None;
    for rec in snap.changes_since(0)? {
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                report.problems.push(format!("undecodable log record: {e}"));
                continue;
            }
        };
        report.records += 1;
        if let Some(prev) = expected_seq {
            if rec.seq != prev {
                report.problems.push(format!(
                    "log seq {} follows {} (gap or reorder)",
                    rec.seq,
                    prev - 1
                ));
            }
        }
        expected_seq = Some(rec.seq + 1);
        if let RecordBody::Commit { entries } = rec.body {
            for e in entries {
                if let Some(prev) = rebuilt.get(&e.unit) {
                    if prev.source_version > e.source_version {
                        report.problems.push(format!(
                            "seq {}: unit {:?} goes back from version {} to {} (I5)",
                            rec.seq, e.unit, prev.source_version, e.source_version
                        ));
                    }
                }
                let entry = history_entry(&e, rec.seq, rec.time_ms);
                rebuilt.insert(e.unit, entry);
            }
        }
    }
    Ok(rebuilt)
}

/// Walks the manifest of `snap` and `rebuilt` side by side (both in unit order), noting every
/// unit that differs or is in only one of them.
fn compare_with_manifest(
    snap: &Snapshot,
    rebuilt: BTreeMap<String, EntryValue>,
    report: &mut ReplayReport,
) -> Result<()> {
    let mut stored = snap.iter()?;
    let mut rebuilt = rebuilt.into_iter();
    let (mut a, mut b) = (stored.next().transpose()?, rebuilt.next());
    loop {
        match (&a, &b) {
            (None, None) => break,
            (Some(s), Some((unit, v))) if &s.unit == unit => {
                if s.value() != *v {
                    report.problems.push(format!(
                        "unit {unit:?}: manifest has {:?}, the log says {:?}",
                        s.value(),
                        v
                    ));
                }
                a = stored.next().transpose()?;
                b = rebuilt.next();
            }
            (Some(s), Some((unit, _))) if s.unit < *unit => {
                report.problems.push(format!(
                    "unit {:?} is in the manifest but not in the log",
                    s.unit
                ));
                a = stored.next().transpose()?;
            }
            (Some(s), None) => {
                report.problems.push(format!(
                    "unit {:?} is in the manifest but not in the log",
                    s.unit
                ));
                a = stored.next().transpose()?;
            }
            (_, Some((unit, _))) => {
                report.problems.push(format!(
                    "unit {unit:?} is in the log but not in the manifest"
                ));
                b = rebuilt.next();
            }
        }
    }
    Ok(())
}

/// Replays the log of `snap` and compares the result with its manifest.
pub fn replay(snap: &Snapshot) -> Result<ReplayReport> {
    let mut report = ReplayReport::default();
    let rebuilt = rebuild_from_log(snap, &mut report)?;
    report.units = rebuilt.len() as u64;
    compare_with_manifest(snap, rebuilt, &mut report)?;
    Ok(report)
}

/// The history entry a logged commit entry stands for, in the record of `seq` committed at
/// `time_ms`.
pub(crate) fn history_entry(
    e: &crate::schema::log::LogEntry,
    seq: u64,
    time_ms: u64,
) -> EntryValue {
    EntryValue {
        source_version: e.source_version,
        revision: e.revision,
        object: e.object,
        seq,
        committed_at_ms: time_ms,
    }
}
