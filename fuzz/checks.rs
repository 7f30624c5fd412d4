//! The properties the fuzz targets check (SPEC R19), on the engine's public API. One file,
//! included by path (`#[path]`) by each cargo-fuzz target in `fuzz/fuzz_targets/` and by the
//! corpus replay in `tests/repo/fuzz_corpus.rs`, so both run the very same code and cannot drift
//! apart, and the engine crate carries no fuzzing code. Every function takes arbitrary bytes and
//! panics when a property fails; bad input itself must never panic.

use oncelake::commit::invariants::{assert_ok, check_token_admitted, check_version_advance};
use oncelake::commit::rules::{decide, ClaimRecord, Current, Decision, Incoming, Intent};
use oncelake::log::Record;
use oncelake::{ObjectId, Outcome};

/// `log_record`: decoding arbitrary bytes never panics, and whatever decodes re-encodes to the
/// very same bytes (the frame is canonical) and decodes again to the same record.
pub fn log_record(data: &[u8]) {
    let Ok(rec) = Record::decode(data) else {
        return;
    };
    let again = rec.encode();
    assert!(
        again == data,
        "a decoded record re-encodes to different bytes: {rec:?}"
    );
    match Record::decode(&again) {
        Ok(back) => assert_eq!(back, rec, "a re-encoded record decodes differently"),
        Err(e) => panic!("a re-encoded record does not decode: {e}"),
    }
}

/// One committed entry of the model.
#[derive(Clone, Copy, Debug)]
struct ModelEntry {
    version: u64,
    object: ObjectId,
    revision: u32,
    seq: u64,
}

/// A unit of the model: every accepted entry (oldest first), every token issued for it (oldest
/// first), and the state of the newest one's lease.
#[derive(Default, Clone)]
struct ModelUnit {
    history: Vec<ModelEntry>,
    issued: Vec<u64>,
    /// The newest lease ended (released, or by an applied commit).
    ended: bool,
    /// With `ended`: its holder released it (its token is fenced even for an exact retry).
    released: bool,
    /// The newest lease expired by the clock (without ending).
    expired: bool,
}

impl ModelUnit {
    fn newest(&self) -> Option<u64> {
        self.issued.last().copied()
    }

    /// The stored record of the newest lease, as the claims table would hold it.
    fn lease(&self) -> Option<ClaimRecord> {
        self.newest().map(|token| ClaimRecord {
            worker: "w".into(),
            token,
            source_version: 0,
            expires_at_ms: token * 1_000,
            released: self.ended,
            by_commit: self.ended && !self.released,
        })
    }

    /// The leader's clock as the model's lease sees it: at its expiry once it expired, before
    /// it otherwise. The model keeps no clock, only whether the lease expired.
    fn now_ms(&self) -> u64 {
        if self.expired {
            self.newest().unwrap_or(0) * 1_000
        } else {
            0
        }
    }

    fn end_lease(&mut self) {
        if self.newest().is_some() {
            self.ended = true;
        }
    }
}

/// The R3 table written out directly, lease rows first: what the commit rules must decide.
fn expected(unit: &ModelUnit, inc: &Incoming) -> Decision {
    let newest = unit.newest();
    let by_versions = expected_by_versions(unit, inc);
    match inc.token {
        Some(t) => {
            let issued_here = unit.issued.contains(&t);
            let valid = issued_here && newest == Some(t) && !unit.ended;
            let retry_of_ended = issued_here && newest == Some(t) && unit.ended && !unit.released;
            if valid
                || (retry_of_ended
                    && matches!(by_versions, Decision::Unchanged(Outcome::Duplicate { .. })))
            {
                return by_versions;
            }
            Decision::Unchanged(Outcome::Fenced {
                token: t,
                newest_token: newest.unwrap_or(0),
            })
        }
        None if newest.is_some() && !unit.ended && !unit.expired => {
            Decision::Unchanged(Outcome::Busy {
                expires_at_ms: newest.unwrap_or(0) * 1_000,
            })
        }
        None => by_versions,
    }
}

/// The version rows of the R3 table.
fn expected_by_versions(unit: &ModelUnit, inc: &Incoming) -> Decision {
    let Some(cur) = unit.history.last() else {
        return Decision::Accept { revision: 0 };
    };
    if inc.source_version > cur.version {
        return Decision::Accept { revision: 0 };
    }
    if inc.source_version < cur.version {
        return Decision::Unchanged(Outcome::Stale {
            current_version: cur.version,
        });
    }
    if inc.object == cur.object {
        return Decision::Unchanged(Outcome::Duplicate { seq: cur.seq });
    }
    if inc.intent == Intent::Correct {
        return Decision::Accept {
            revision: cur.revision + 1,
        };
    }
    // A late retry of output a correction has since replaced is still a duplicate.
    match unit
        .history
        .iter()
        .rev()
        .find(|e| e.version == inc.source_version && e.object == inc.object)
    {
        Some(e) => Decision::Unchanged(Outcome::Duplicate { seq: e.seq }),
        None => Decision::Unchanged(Outcome::Conflict {
            winner_seq: cur.seq,
            winner: cur.object,
        }),
    }
}

/// The token an operation carries, from byte 1 (bits 5-7) and byte 2.
fn fuzz_token(units: &[ModelUnit], me: usize, op: &[u8], next_token: u64) -> Option<u64> {
    if op[1] & 0x20 == 0 {
        return None;
    }
    let p = u64::from(op[2]);
    Some(match op[1] >> 6 {
        // Near the counter: recent grants of any unit, or not issued yet.
        0 => (next_token + 2).saturating_sub(p & 7),
        // This unit's newest (or one of its earlier ones).
        1 => {
            let mine = &units[me].issued;
            let back = (p as usize) % 3;
            mine.len()
                .checked_sub(1 + back)
                .map_or(next_token, |i| mine[i])
        }
        // Another unit's newest: a foreign token.
        2 => units[(me + 1 + (p as usize) % 3) % units.len()]
            .newest()
            .unwrap_or(p),
        // Forged: any number at all.
        _ => p.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (p & 63),
    })
}

/// `commit_rules`: a sequence of operations decoded from the bytes (3 bytes each) is applied
/// through [`decide`] against a model of the units and their leases, checking each decision against
/// the R3 table and, after applying it, that no unit's version goes backwards (I5), that revisions
/// count corrections, and that only a token issued for the unit, its newest and of a lease that has
/// not ended gets through (I6, R9).
///
/// Byte 0: unit (bits 0-1), kind (bits 2-4: 0, 1, 6, 7 put; 2 correction; 3 claim grant;
/// 4 the newest lease expires; 5 the newest lease is released).
/// Byte 1: source version (bits 0-2), content (bits 3-4), carries a token (bit 5), where the token
/// comes from (bits 6-7: near the counter, this unit's, another unit's, forged).
/// Byte 2: the token's parameter.
pub fn commit_rules(data: &[u8]) {
    let mut units: Vec<ModelUnit> = vec![ModelUnit::default(); 4];
    let mut next_seq = 1u64;
    let mut next_token = 1u64;
    // Four distinct object ids; the rules only compare them, so no hashing is needed.
    let contents: [ObjectId; 4] = [
        ObjectId([1; 32]),
        ObjectId([2; 32]),
        ObjectId([3; 32]),
        ObjectId([0; 32]),
    ];
    for op in data.chunks_exact(3) {
        let me = (op[0] & 3) as usize;
        let kind = (op[0] >> 2) & 7;
        match kind {
            3 => {
                let unit = &mut units[me];
                unit.issued.push(next_token);
                (unit.ended, unit.expired, unit.released) = (false, false, false);
                next_token += 1;
                continue;
            }
            4 => {
                units[me].expired = true;
                continue;
            }
            5 => {
                // A release ends only a lease that has not ended (the engine answers `Lost`).
                if !units[me].ended {
                    units[me].end_lease();
                    units[me].released = true;
                }
                continue;
            }
            _ => {}
        }
        let token = fuzz_token(&units, me, op, next_token);
        let inc = Incoming {
            source_version: u64::from(op[1] & 7),
            object: contents[((op[1] >> 3) & 3) as usize],
            token,
            intent: if kind == 2 {
                Intent::Correct
            } else {
                Intent::Put
            },
        };
        let unit = &mut units[me];
        next_seq = decide_one(unit, &inc, next_seq);
    }
}

/// Decides `inc` for `unit` through [`decide`], checks it against the model and the invariants,
/// and applies it to the model. Returns the next seq.
fn decide_one(unit: &mut ModelUnit, inc: &Incoming, next_seq: u64) -> u64 {
    let current = unit.history.last().map(|e| Current {
        source_version: e.version,
        revision: e.revision,
        object: e.object,
        seq: e.seq,
    });
    let lease = unit.lease();
    let lookup = || {
        unit.history
            .iter()
            .rev()
            .take_while(|e| e.version >= inc.source_version)
            .find(|e| e.version == inc.source_version && e.object == inc.object)
            .map(|e| e.seq)
    };
    let got = decide(current.as_ref(), lease.as_ref(), unit.now_ms(), inc, lookup);
    let want = expected(unit, inc);
    assert_eq!(got, want, "decide disagrees with the R3 table for {inc:?}");
    // Determinism: the same inputs decide the same way.
    assert_eq!(
        got,
        decide(current.as_ref(), lease.as_ref(), unit.now_ms(), inc, lookup),
        "decide is not deterministic"
    );
    let Decision::Accept { revision } = got else {
        return next_seq;
    };
    assert_ok(check_token_admitted(
        "u",
        inc.token,
        lease.as_ref(),
        unit.now_ms(),
    ));
    let prev = unit.history.last().map(|e| (e.version, e.revision));
    assert_ok(check_version_advance(
        "u",
        prev,
        (inc.source_version, revision),
    ));
    if let Some(cur) = unit.history.last() {
        if inc.source_version == cur.version {
            assert_eq!(revision, cur.revision + 1, "a correction adds one revision");
            assert_eq!(inc.intent, Intent::Correct, "only a correction replaces");
        } else {
            assert_eq!(revision, 0, "a new version starts at revision 0");
        }
    }
    unit.history.push(ModelEntry {
        version: inc.source_version,
        object: inc.object,
        revision,
        seq: next_seq,
    });
    // An applied commit ends the unit's lease: no earlier token commits after it.
    if !unit.ended {
        unit.end_lease();
    }
    next_seq + 1
}

/// `listing_line`: the reconcile listing parser (SPEC R19). For every line of the input (lossily
/// decoded) and both formats, [`parse_line`](oncelake::reconcile::parse_line) never panics and
/// whatever it accepts is a valid key that survives [`write_listing_line`] and parsing back. The
/// whole input, as raw bytes, then goes through the streaming [`ListingReader`] and
/// [`check_sorted_listing`] in both formats: see [`check_listing_rows`].
///
/// [`ListingReader`]: oncelake::reconcile::ListingReader
/// [`check_sorted_listing`]: oncelake::reconcile::check_sorted_listing
pub fn listing_line(data: &[u8]) {
    use oncelake::reconcile::ListingFormat;
    let text = String::from_utf8_lossy(data);
    for line in text.split('\n') {
        for format in [ListingFormat::Csv, ListingFormat::JsonLines] {
            if let Ok((unit, version)) = oncelake::reconcile::parse_line(format, line) {
                if let Err(e) = check_listing_pair(format, &unit, version) {
                    panic!("{format:?} line {line:?} parsed to ({unit:?}, {version}): {e}");
                }
            }
        }
    }
    for format in [ListingFormat::Csv, ListingFormat::JsonLines] {
        if let Err(e) = check_listing_rows(format, data) {
            panic!("{format:?} listing reader: {e}");
        }
    }
}

/// A listing line in `format` that [`parse_line`](oncelake::reconcile::parse_line) reads back as
/// `(unit, version)`. With `quoted`, a CSV unit is always written as a quoted field; otherwise only
/// when it must be (it starts with a quote). JSON escapes only `"`, `\` and control characters.
pub fn write_listing_line(
    format: oncelake::reconcile::ListingFormat,
    unit: &str,
    version: u64,
    quoted: bool,
) -> String {
    use oncelake::reconcile::ListingFormat;
    match format {
        // The version is the text after the last comma, so commas in the unit need no quoting.
        ListingFormat::Csv if quoted || unit.starts_with('"') => {
            format!("\"{}\",{version}", unit.replace('"', "\"\""))
        }
        ListingFormat::Csv => format!("{unit},{version}"),
        ListingFormat::JsonLines => {
            let mut out = String::from("{\"unit\": \"");
            for c in unit.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push_str(&format!("\", \"version\": {version}}}"));
            out
        }
    }
}

/// The property of one accepted listing line: the unit is a valid user key (never an internal
/// unit, which no source lists) and both spellings of the pair written by [`write_listing_line`]
/// parse back to the same pair.
pub fn check_listing_pair(
    format: oncelake::reconcile::ListingFormat,
    unit: &str,
    version: u64,
) -> Result<(), String> {
    if let Err(e) = oncelake::validate_user_key(unit) {
        return Err(format!("an accepted unit breaks the key rules: {e}"));
    }
    for quoted in [false, true] {
        let line = write_listing_line(format, unit, version, quoted);
        match oncelake::reconcile::parse_line(format, &line) {
            Ok((u, v)) if u == unit && v == version => {}
            Ok(other) => return Err(format!("re-serialised as {line:?}, parses to {other:?}")),
            Err(e) => return Err(format!("re-serialised as {line:?}, refused: {e}")),
        }
    }
    Ok(())
}

/// The streaming reader over a whole listing, against a model that splits the lines itself: it
/// terminates, every row comes from a later line than the one before and equals what
/// [`parse_line`](oncelake::reconcile::parse_line) makes of that line (without its `\r`, and without
/// a byte order mark on line 1), every error names a line that exists, and
/// [`check_sorted_listing`](oncelake::reconcile::check_sorted_listing) accepts the listing exactly
/// when the rows are sorted without a unit listed at two versions.
pub fn check_listing_rows(
    format: oncelake::reconcile::ListingFormat,
    data: &[u8],
) -> Result<(), String> {
    use oncelake::reconcile::{check_sorted_listing, ListingReader};
    let sorted = check_sorted_listing(ListingReader::new(data, format));
    check_listing_source(format, data, ListingReader::new(data, format), sorted)
}

/// [`check_listing_rows`] with the rows read from `reader` and the verdict of
/// `check_sorted_listing` given, so a test can show that a wrong reader is caught.
pub fn check_listing_source(
    format: oncelake::reconcile::ListingFormat,
    data: &[u8],
    mut reader: impl oncelake::reconcile::ListingSource,
    sorted: Result<u64, oncelake::reconcile::ListingError>,
) -> Result<(), String> {
    use oncelake::reconcile::parse_line;
    let lines: Vec<&[u8]> = {
        let mut v: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
        if v.last().is_some_and(|l| l.is_empty()) {
            v.pop(); // the text after a final newline is no line
        }
        v
    };
    let n_lines = lines.len() as u64;
    let mut rows: Vec<(String, u64, u64)> = Vec::new();
    let mut failed = false;
    loop {
        if rows.len() as u64 > n_lines {
            return Err(format!("more rows than the {n_lines} lines"));
        }
        match reader.next_row() {
            Ok(None) => break,
            Ok(Some(row)) => {
                if row.line == 0 || row.line > n_lines {
                    return Err(format!("row on line {} of {n_lines}", row.line));
                }
                if let Some(prev) = rows.last() {
                    if row.line <= prev.2 {
                        return Err(format!("row on line {} after line {}", row.line, prev.2));
                    }
                }
                let mut raw = lines[(row.line - 1) as usize];
                raw = raw.strip_suffix(b"\r").unwrap_or(raw);
                if row.line == 1 {
                    raw = raw.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(raw);
                }
                let model = std::str::from_utf8(raw)
                    .map_err(|e| e.to_string())
                    .and_then(|t| parse_line(format, t).map_err(|e| e.to_string()));
                if model.as_ref() != Ok(&(row.unit.to_string(), row.version)) {
                    return Err(format!(
                        "line {} read as ({:?}, {}), but parse_line says {model:?}",
                        row.line, row.unit, row.version
                    ));
                }
                rows.push((row.unit.to_string(), row.version, row.line));
            }
            Err(e) => {
                if e.line() == 0 || e.line() > n_lines {
                    return Err(format!("error names line {} of {n_lines}: {e}", e.line()));
                }
                failed = true;
                break;
            }
        }
    }
    let in_order = rows
        .windows(2)
        .all(|w| w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 == w[1].1));
    match sorted {
        Ok(n) if !failed && in_order && n == rows.len() as u64 => Ok(()),
        Ok(n) => Err(format!(
            "check_sorted_listing accepted {n} rows; the reader gave {} (failed: {failed}, sorted: {in_order})",
            rows.len()
        )),
        Err(e) if e.line() == 0 || e.line() > n_lines => {
            Err(format!("check_sorted_listing names line {} of {n_lines}: {e}", e.line()))
        }
        Err(_) if failed || !in_order => Ok(()),
        Err(e) => Err(format!("check_sorted_listing refused sorted rows: {e}")),
    }
}

/// `pipeline_def`: [`PipelineDef::parse`](oncelake::pipeline::PipelineDef::parse) never panics on any
/// (lossily decoded) input; a syntax error names an existing line; whatever parses is a DAG
/// ([`check_pipeline_dag`]) and reads back from [`to_text`](oncelake::pipeline::PipelineDef::to_text)
/// to an equal definition.
pub fn pipeline_def(data: &[u8]) {
    use oncelake::pipeline::{PipelineDef, PipelineError};
    let text = String::from_utf8_lossy(data);
    let def = match PipelineDef::parse(&text) {
        Ok(def) => def,
        Err(PipelineError::Syntax { line, msg }) => {
            let n = text.lines().count();
            assert!(
                (1..=n).contains(&line),
                "syntax error names line {line} of {n}: {msg}"
            );
            return;
        }
        Err(_) => return,
    };
    let topo: Vec<&str> = def.topo_order().map(|s| s.name.as_str()).collect();
    if let Err(e) = check_pipeline_dag(def.stages(), &topo) {
        panic!("parsed definition is not a valid DAG: {e}\n{text}");
    }
    for s in def.stages() {
        let mut want: Vec<&str> = def
            .stages()
            .iter()
            .filter(|d| d.upstream.contains(&s.name))
            .map(|d| d.name.as_str())
            .collect();
        let mut got = def.downstream(&s.name);
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(
            got, want,
            "downstream of {:?} disagrees with upstream lists",
            s.name
        );
    }
    let written = def.to_text();
    match PipelineDef::parse(&written) {
        Ok(back) => assert!(back == def, "to_text does not read back equal:\n{written}"),
        Err(e) => panic!("to_text does not parse: {e}\n{written}"),
    }
}

/// The DAG property of a validated pipeline: at least one stage, valid unique names, every
/// upstream a defined stage listed once, and `topo` lists every stage once, each after all of its
/// upstream stages (so no cycle).
pub fn check_pipeline_dag(
    stages: &[oncelake::pipeline::StageDef],
    topo: &[&str],
) -> Result<(), String> {
    use std::collections::HashMap;
    if stages.is_empty() {
        return Err("no stages".into());
    }
    let mut pos: HashMap<&str, usize> = HashMap::new();
    for s in stages {
        oncelake::pipeline::def::validate_stage_name(&s.name).map_err(|e| e.to_string())?;
        if pos.insert(s.name.as_str(), usize::MAX).is_some() {
            return Err(format!("stage {:?} defined twice", s.name));
        }
    }
    if topo.len() != stages.len() {
        return Err(format!(
            "topological order has {} of {} stages",
            topo.len(),
            stages.len()
        ));
    }
    for (i, name) in topo.iter().enumerate() {
        match pos.get_mut(name) {
            Some(p) if *p == usize::MAX => *p = i,
            Some(_) => return Err(format!("{name:?} twice in the topological order")),
            None => return Err(format!("{name:?} in the topological order is no stage")),
        }
    }
    for s in stages {
        for (j, up) in s.upstream.iter().enumerate() {
            let Some(&u) = pos.get(up.as_str()) else {
                return Err(format!("{:?} lists unknown upstream {up:?}", s.name));
            };
            if s.upstream[..j].contains(up) {
                return Err(format!("{:?} lists {up:?} twice", s.name));
            }
            if u >= pos[s.name.as_str()] {
                return Err(format!(
                    "{:?} is not ordered after its upstream {up:?} (cycle)",
                    s.name
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncelake::pipeline::StageDef;
    use oncelake::reconcile::ListingFormat::{Csv, JsonLines};

    fn stage(name: &str, upstream: &[&str]) -> StageDef {
        StageDef {
            name: name.into(),
            code_version: 1,
            upstream: upstream.iter().map(|s| s.to_string()).collect(),
            max_attempts: 3,
        }
    }

    /// The listing checks can fail: an invalid key, a pair the writer cannot express, a reader
    /// model that disagrees.
    #[test]
    fn listing_checks_can_fail() {
        for f in [Csv, JsonLines] {
            assert!(check_listing_pair(f, "a,\"b\"\\c", 7).is_ok());
            assert!(check_listing_pair(f, "\"lead", u64::MAX).is_ok());
            // A control character is no key, so an accepted line with one must fail the check.
            assert!(check_listing_pair(f, "a\nb", 1).is_err());
            assert!(check_listing_pair(f, "", 1).is_err());
        }
        // A CSV unit with a leading space re-serialises fine, but a unit the reader would
        // strip (a BOM) does too: the single-line property holds for it.
        assert!(check_listing_pair(Csv, "\u{feff}a", 1).is_ok());
        assert!(check_listing_rows(Csv, b"a,1\nb,2\n").is_ok());
        assert!(check_listing_rows(JsonLines, b"{\"unit\":\"b\",\"version\":1}\na").is_ok());
        assert!(
            check_listing_rows(Csv, b"b,1\na,2\n").is_ok(),
            "unsorted is refused, not a bug"
        );
    }

    /// The reader check can fail: rows that disagree with the lines, name lines that do not
    /// exist, or a sortedness verdict that contradicts the rows are all caught.
    #[test]
    fn listing_reader_check_can_fail() {
        use oncelake::reconcile::{ListingError, Pairs};
        let data = b"a,1\nb,2\n";
        let ok = check_listing_source(Csv, data, Pairs::new([("a", 1), ("b", 2)]), Ok(2));
        assert!(ok.is_ok(), "{ok:?}");
        let wrong_unit = check_listing_source(Csv, data, Pairs::new([("a", 1), ("c", 2)]), Ok(2));
        assert!(wrong_unit.is_err());
        let wrong_version = check_listing_source(Csv, data, Pairs::new([("a", 2)]), Ok(1));
        assert!(wrong_version.is_err());
        let past_the_end =
            check_listing_source(Csv, b"a,1", Pairs::new([("a", 1), ("a", 1)]), Ok(2));
        assert!(past_the_end.is_err());
        let bad_line = ListingError::BadVersion {
            line: 3,
            text: "x".into(),
        };
        let err_line = check_listing_source(Csv, data, Pairs::new([("a", 1)]), Err(bad_line));
        assert!(err_line.is_err(), "line 3 of 2");
        let unsorted =
            check_listing_source(Csv, b"b,1\na,2\n", Pairs::new([("b", 1), ("a", 2)]), Ok(2));
        assert!(unsorted.is_err(), "accepting unsorted rows is caught");
    }

    /// The DAG check can fail: cycles, unknown or repeated upstreams, duplicate stages and bad
    /// orders are all caught.
    #[test]
    fn pipeline_dag_check_can_fail() {
        let good = [stage("a", &[]), stage("b", &["a"])];
        assert!(check_pipeline_dag(&good, &["a", "b"]).is_ok());
        assert!(check_pipeline_dag(&good, &["b", "a"]).is_err(), "order");
        assert!(check_pipeline_dag(&good, &["a"]).is_err(), "missing");
        assert!(check_pipeline_dag(&good, &["a", "a"]).is_err(), "repeated");
        let cycle = [stage("a", &["b"]), stage("b", &["a"])];
        assert!(check_pipeline_dag(&cycle, &["a", "b"]).is_err());
        assert!(check_pipeline_dag(&cycle, &["b", "a"]).is_err());
        assert!(check_pipeline_dag(&[stage("a", &["a"])], &["a"]).is_err());
        assert!(check_pipeline_dag(&[stage("a", &["x"])], &["a"]).is_err());
        let twice = [stage("a", &[]), stage("b", &["a", "a"])];
        assert!(check_pipeline_dag(&twice, &["a", "b"]).is_err());
        let dup = [stage("a", &[]), stage("a", &[])];
        assert!(check_pipeline_dag(&dup, &["a", "a"]).is_err());
        assert!(check_pipeline_dag(&[stage("a b", &[])], &["a b"]).is_err());
        assert!(check_pipeline_dag(&[], &[]).is_err());
    }

    #[test]
    fn pipeline_target_accepts_good_and_bad_input() {
        pipeline_def(
            b"[stage.a]\ncode_version = 1\n[stage.b]\ncode_version = 2\nupstream = [\"a\"]\n",
        );
        pipeline_def(b"[stage.a]\ncode_version = 1\nupstream = [\"a\"]\n");
        listing_line(b"\xef\xbb\xbfunit,version\r\n\"x,\"\"y\",1\r\n");
    }
}
