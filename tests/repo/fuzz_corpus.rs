//! Replays every committed fuzz corpus file through the same check the fuzz target runs
//! (`fuzz/checks.rs`, included here by path), so a crash the fuzzer once found stays fixed
//! (SPEC R19). The checks' own unit tests run in this test binary too.

#[path = "../../fuzz/checks.rs"]
mod checks;

use std::path::Path;

/// A fuzz target's check: panics on input the engine mishandles.
type Check = fn(&[u8]);

fn replay(target: &str, check: Check) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if !path.is_file() {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(
            outcome.is_ok(),
            "corpus file {} fails the {target} check",
            path.display()
        );
        n += 1;
    }
    assert!(n > 0, "the {target} corpus is empty");
}

/// Every fuzz target's corpus, each through its target's check.
#[test]
fn every_corpus_passes_its_check() {
    let targets: [(&str, Check); 4] = [
        ("log_record", checks::log_record),
        ("commit_rules", checks::commit_rules),
        ("listing_line", checks::listing_line),
        ("pipeline_def", checks::pipeline_def),
    ];
    for (target, check) in targets {
        replay(target, check);
    }
}

/// The replay must be able to fail: a check that panics is reported.
#[test]
fn a_failing_check_is_caught() {
    let outcome = std::panic::catch_unwind(|| {
        replay("log_record", |_| panic!("always fails"));
    });
    assert!(outcome.is_err());
}

/// The valid seeds really are records, so the round-trip property is exercised, not skipped.
#[test]
fn valid_seed_records_decode() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/log_record");
    for name in [
        "commit_one",
        "commit_three_fenced",
        "commit_empty",
        "claim_granted",
        "claim_released",
        "extension",
    ] {
        let data = std::fs::read(dir.join(name)).unwrap();
        assert!(
            oncelake::log::Record::decode(&data).is_ok(),
            "seed {name} does not decode"
        );
    }
}

/// The valid listing seeds really parse to rows, so the reader/line-parser agreement and the
/// re-serialisation are exercised, not skipped.
#[test]
fn valid_listing_seeds_have_rows() {
    use oncelake::reconcile::{check_sorted_listing, ListingFormat, ListingReader};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/listing_line");
    for (name, format, rows) in [
        ("csv_simple", ListingFormat::Csv, 1),
        ("csv_header_sorted", ListingFormat::Csv, 2),
        ("csv_bom_crlf", ListingFormat::Csv, 2),
        ("csv_repeat_no_final_newline", ListingFormat::Csv, 3),
        ("json_reordered", ListingFormat::JsonLines, 2),
        ("json_escapes", ListingFormat::JsonLines, 1),
        ("json_bom_crlf", ListingFormat::JsonLines, 2),
    ] {
        let data = std::fs::read(dir.join(name)).unwrap();
        let got = check_sorted_listing(ListingReader::new(data.as_slice(), format));
        assert_eq!(got.unwrap(), rows, "seed {name}");
    }
}

/// The valid pipeline seeds parse, and the invalid ones are refused, so both sides are covered.
#[test]
fn pipeline_seeds_parse_as_expected() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/pipeline_def");
    for (name, ok) in [
        ("one_stage", true),
        ("documented", true),
        ("crlf_forward_ref", true),
        ("max_values", true),
        ("hash_in_string", false),
        ("cycle_two", false),
        ("cycle_self", false),
        ("cycle_three", false),
        ("unknown_upstream", false),
        ("duplicate_upstream", false),
        ("duplicate_stage", false),
    ] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(
            oncelake::pipeline::PipelineDef::parse(&text).is_ok(),
            ok,
            "seed {name}"
        );
    }
}

/// Besides the corpus, the commit rules' check on many seeded random operation sequences: the
/// check is pure and fast, so this covers far more lease/token combinations than the corpus
/// (forged, foreign, superseded and ended tokens, expiries, releases, token-less commits).
#[test]
fn commit_rules_on_seeded_random_sequences() {
    let mut rng = crate::common::SplitMix64(0x5EED);
    let mut next = || rng.next();
    for case in 0..20_000 {
        let len = 3 * (1 + next() % 60) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let outcome = std::panic::catch_unwind(|| checks::commit_rules(&data));
        assert!(outcome.is_ok(), "case {case} fails: {data:02x?}");
    }
}
