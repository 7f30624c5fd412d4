//! Replays every committed fuzz corpus file through the same check the fuzz target runs
//! (`oncelake::fuzzing`), so a crash the fuzzer once found stays fixed (SPEC R19).

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
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

#[test]
fn log_record_corpus() {
    replay("log_record", oncelake::fuzzing::log_record);
}

#[test]
fn commit_rules_corpus() {
    replay("commit_rules", oncelake::fuzzing::commit_rules);
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
