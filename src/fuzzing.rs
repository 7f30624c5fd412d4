//! The properties the fuzz targets check (SPEC R19), in the library so that the cargo-fuzz
//! targets in `fuzz/` and the corpus replay in `tests/fuzz_corpus.rs` run the very same code and
//! cannot drift apart. Every function takes arbitrary bytes and panics when a property fails;
//! bad input itself must never panic.
//!
//! Not a public API: hidden from the docs, no stability promise.

use crate::commit::rules::{decide, Current, Decision, Incoming, Intent};
use crate::log::Record;
use crate::object::ObjectId;

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

/// A unit of the model: every accepted entry (oldest first) and the newest token granted.
#[derive(Default, Clone)]
struct ModelUnit {
    history: Vec<ModelEntry>,
    newest_token: Option<u64>,
}

/// The R3 table written out directly: what the commit rules must decide.
fn expected(unit: &ModelUnit, inc: &Incoming) -> Decision {
    if let (Some(t), Some(n)) = (inc.token, unit.newest_token) {
        if t < n {
            return Decision::Fenced {
                token: t,
                newest_token: n,
            };
        }
    }
    let Some(cur) = unit.history.last() else {
        return Decision::Accept { revision: 0 };
    };
    if inc.source_version > cur.version {
        return Decision::Accept { revision: 0 };
    }
    if inc.source_version < cur.version {
        return Decision::Stale {
            current_version: cur.version,
        };
    }
    if inc.object == cur.object {
        return Decision::Duplicate { seq: cur.seq };
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
        Some(e) => Decision::Duplicate { seq: e.seq },
        None => Decision::Conflict {
            winner_seq: cur.seq,
            winner: cur.object,
        },
    }
}

/// `commit_rules`: a sequence of operations decoded from the bytes (3 bytes each) is applied
/// through [`decide`] against a model of the units, checking each decision against the R3 table
/// and, after applying it, that no unit's version goes backwards (I5), that revisions count
/// corrections, and that outdated tokens never get through (I6).
///
/// Byte 0: unit (bits 0-1), kind (bits 2-3: 0-1 put, 2 correction, 3 claim grant).
/// Byte 1: source version (bits 0-2), content (bits 3-4), carries a token (bit 5).
/// Byte 2: the token carried, relative to the next token to be granted.
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
        let unit = &mut units[(op[0] & 3) as usize];
        let kind = (op[0] >> 2) & 3;
        if kind == 3 {
            unit.newest_token = Some(next_token);
            next_token += 1;
            continue;
        }
        let token = (op[1] & 0x20 != 0).then(|| next_token.saturating_sub(u64::from(op[2] & 7)));
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
        let current = unit.history.last().map(|e| Current {
            source_version: e.version,
            revision: e.revision,
            object: e.object,
            seq: e.seq,
        });
        let lookup = || {
            unit.history
                .iter()
                .rev()
                .take_while(|e| e.version >= inc.source_version)
                .find(|e| e.version == inc.source_version && e.object == inc.object)
                .map(|e| e.seq)
        };
        let got = decide(current.as_ref(), unit.newest_token, &inc, lookup);
        let want = expected(unit, &inc);
        assert_eq!(got, want, "decide disagrees with the R3 table for {inc:?}");
        // Determinism: the same inputs decide the same way.
        assert_eq!(
            got,
            decide(current.as_ref(), unit.newest_token, &inc, lookup),
            "decide is not deterministic"
        );
        if let Decision::Accept { revision } = got {
            if let (Some(t), Some(n)) = (inc.token, unit.newest_token) {
                assert!(t >= n, "I6: token {t} older than {n} was accepted");
            }
            if let Some(cur) = unit.history.last() {
                assert!(
                    inc.source_version >= cur.version,
                    "I5: version went back from {} to {}",
                    cur.version,
                    inc.source_version
                );
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
            next_seq += 1;
        }
    }
}
