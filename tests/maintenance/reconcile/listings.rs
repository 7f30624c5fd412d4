//! Bad listings refused with the line named and the store untouched; unsorted listings sorted in
//! runs on disk; the line parser.

use super::{csv_line, fill, json_line, open, state};
use oncelake::reconcile::{
    check_sorted_listing, reconcile_full, reconcile_full_unsorted, Action, ListingError,
    ListingFormat, ListingReader, Pairs, Plan, ReconcileError, ReconcileOptions, SortConfig,
    SortedListing,
};
use oncelake::Store;
use proptest::prelude::*;
use std::path::Path;

/// Runs a full reconcile of `text` and returns the error, checking that the store is unchanged.
pub(super) fn refused(store: &Store, text: &str, format: ListingFormat) -> ListingError {
    let before = state(store);
    let snap = store.snapshot().unwrap();
    let err = reconcile_full(
        &snap,
        ListingReader::new(text.as_bytes(), format),
        ReconcileOptions::default(),
        |_| Ok(()),
    )
    .unwrap_err();
    drop(snap);
    assert_eq!(state(store), before, "reconcile modified the store");
    // The check-only pass refuses the same listing at the same line.
    let checked = check_sorted_listing(ListingReader::new(text.as_bytes(), format)).unwrap_err();
    match err {
        ReconcileError::Listing(e) => {
            assert_eq!(e.line(), checked.line());
            e
        }
        other => panic!("expected a listing error, got {other}"),
    }
}

/// A store holding `u00`..`u19`, each at version 3.
fn twenty_units_at_version_3() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"));
    fill(&store, &(0..20).map(|i| (format!("u{i:02}"), 3)).collect());
    (dir, store)
}

#[test]
fn bad_listings_name_the_line_and_leave_the_store_alone() {
    let (_dir, store) = twenty_units_at_version_3();
    use ListingFormat::{Csv, JsonLines};

    let e = refused(&store, "unit,version\nu01,1\nu02 1\n", Csv);
    assert!(matches!(e, ListingError::Malformed { line: 3, .. }), "{e}");
    assert!(e.to_string().contains("line 3") && e.to_string().contains("unit,version"));

    let e = refused(&store, "u01,1\nu02,seven\n", Csv);
    assert!(matches!(e, ListingError::BadVersion { line: 2, .. }), "{e}");
    assert!(e.to_string().contains("\"seven\""), "{e}");

    let e = refused(&store, "u01,1\nu02,-2\n", Csv);
    assert!(matches!(e, ListingError::BadVersion { line: 2, .. }), "{e}");

    let e = refused(&store, "u01,1\n,2\n", Csv);
    assert!(matches!(e, ListingError::InvalidKey { line: 2, .. }), "{e}");

    let e = refused(
        &store,
        "{\"unit\":\"u01\",\"version\":1}\n{\"unit\":\"u0\\u00012\",\"version\":1}\n",
        JsonLines,
    );
    assert!(matches!(e, ListingError::InvalidKey { line: 2, .. }), "{e}");
    assert!(e.to_string().contains("control character"), "{e}");

    let e = refused(
        &store,
        "{\"unit\":\"u01\",\"version\":1}\n{\"unit\":\"u02\"}\n",
        JsonLines,
    );
    assert!(matches!(e, ListingError::Malformed { line: 2, .. }), "{e}");

    let e = refused(&store, "u01,1\nu02,4\nu02,5\n", Csv);
    match &e {
        ListingError::Duplicate {
            unit,
            first_line: 2,
            first_version: 4,
            line: 3,
            version: 5,
        } if unit == "u02" => {}
        other => panic!("expected a duplicate naming lines 2 and 3, got {other}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("line 2") && msg.contains("line 3"),
        "the error names both lines: {msg}"
    );

    let e = refused(&store, "u01,1\nu05,1\nu03,1\nu09,1\n", Csv);
    assert!(
        matches!(&e, ListingError::Unsorted { line: 3, previous_line: 2, unit, previous } if unit == "u03" && previous == "u05"),
        "{e}"
    );
    assert!(
        e.to_string().contains("sort"),
        "the error says what to do: {e}"
    );

    let e = refused(&store, "u01,1\n\u{ff}\n", Csv);
    assert!(matches!(e, ListingError::Malformed { line: 2, .. }), "{e}");
    let bytes = b"u01,1\nu0\xff2,1\n";
    let err = check_sorted_listing(ListingReader::new(&bytes[..], Csv)).unwrap_err();
    assert!(
        err.to_string().contains("line 2") && err.to_string().contains("UTF-8"),
        "{err}"
    );
}

/// Sorting in runs of `run_rows` rows, spilled into `tmp`.
pub(super) fn runs_of(run_rows: usize, tmp: &Path) -> SortConfig {
    SortConfig {
        run_rows,
        ..SortConfig::new(tmp)
    }
}

/// u07 on line 4 with version 2, again on line 37 with version 5, far apart and out of order:
/// refused as a duplicate whatever the run size (before any plan item when it is one run), and
/// the constant-memory primitive still refuses the listing as unsorted.
fn a_unit_listed_twice_far_apart_is_refused(store: &Store, tmp: &Path) {
    let mut lines: Vec<String> = (0..40).rev().map(|i| format!("u{:02},4", i + 40)).collect();
    lines[3] = "u07,2".into();
    lines[36] = "u07,5".into();
    let text = lines.join("\n") + "\n";
    for run_rows in [1, 3, 7, 1000] {
        let snap = store.snapshot().unwrap();
        let mut printed = 0;
        let err = reconcile_full_unsorted(
            &snap,
            ListingReader::new(text.as_bytes(), ListingFormat::Csv),
            ReconcileOptions::default(),
            &runs_of(run_rows, tmp),
            |_| {
                printed += 1;
                Ok(())
            },
        )
        .unwrap_err();
        match err {
            ReconcileError::Listing(ListingError::Duplicate {
                ref unit,
                first_line: 4,
                first_version: 2,
                line: 37,
                version: 5,
            }) if unit == "u07" => {}
            other => {
                panic!("{run_rows} rows a run: expected a duplicate on lines 4 and 37, got {other}")
            }
        }
        if run_rows >= 40 {
            assert_eq!(printed, 0, "one run: refused before any plan item");
        }
        let e = reconcile_full(
            &snap,
            ListingReader::new(text.as_bytes(), ListingFormat::Csv),
            ReconcileOptions::default(),
            |_| Ok(()),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                ReconcileError::Listing(ListingError::Unsorted { line: 2, .. })
            ),
            "{run_rows} rows a run: {e}"
        );
    }
}

/// A listing of exactly one run stays in memory; one row more spills two runs.
fn one_run_stays_in_memory(tmp: &Path) {
    let pairs = |n: u64| Pairs::new((0..n).rev().map(|i| (format!("k{i:03}"), i)));
    let config = runs_of(40, tmp);
    assert_eq!(
        SortedListing::sort(pairs(40), &config)
            .unwrap()
            .spilled_runs(),
        0
    );
    let sorted = SortedListing::sort(pairs(41), &config).unwrap();
    assert_eq!(sorted.spilled_runs(), 2);
    assert!(!sorted.was_sorted());
    drop(sorted);
    let in_order = Pairs::new((0..41u64).map(|i| (format!("k{i:03}"), i)));
    assert!(SortedListing::sort(in_order, &config).unwrap().was_sorted());
}

/// A bad line is reported with its line, before any plan item.
fn a_bad_line_is_named_before_any_plan_item(store: &Store, tmp: &Path) {
    let bad = "u09,1\nu01,1\nu05,x\nu02,1\n";
    let err = reconcile_full_unsorted(
        &store.snapshot().unwrap(),
        ListingReader::new(bad.as_bytes(), ListingFormat::Csv),
        ReconcileOptions::default(),
        &runs_of(1, tmp),
        |_| panic!("a plan item before the listing was read"),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ReconcileError::Listing(ListingError::BadVersion { line: 3, .. })
        ),
        "{err}"
    );
}

/// Exact repeats are planned once.
fn exact_repeats_are_planned_once(store: &Store, tmp: &Path) {
    let plan: Vec<(String, u64)> = vec![("u05".into(), 9), ("u01".into(), 9), ("u05".into(), 9)];
    let mut units = Vec::new();
    let summary = reconcile_full_unsorted(
        &store.snapshot().unwrap(),
        Pairs::new(plan),
        ReconcileOptions::default(),
        &runs_of(1, tmp),
        |i| {
            units.push((i.unit.to_string(), i.action));
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(summary.duplicate_lines, 1);
    assert_eq!(summary.behind, 2);
    assert_eq!(units.iter().filter(|u| u.1 == Action::Behind).count(), 2);
}

#[test]
fn unsorted_full_listings_are_sorted_but_a_unit_with_two_versions_is_refused() {
    let (_dir, store) = twenty_units_at_version_3();
    let before = state(&store);
    let tmp = tempfile::tempdir().unwrap();
    a_unit_listed_twice_far_apart_is_refused(&store, tmp.path());
    one_run_stays_in_memory(tmp.path());
    a_bad_line_is_named_before_any_plan_item(&store, tmp.path());
    exact_repeats_are_planned_once(&store, tmp.path());
    // Nothing is left in the temporary directory, and the store is unchanged.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    assert_eq!(state(&store), before);
}

#[test]
fn incremental_takes_any_order_but_refuses_a_unit_with_two_versions() {
    let (_dir, store) = twenty_units_at_version_3();
    let before = state(&store);
    let text = "u09,4\nu01,3\nzz,1\nu01,3\nu05,2\n";
    let plan = Plan::changes(
        &store,
        ListingReader::new(text.as_bytes(), ListingFormat::Csv),
        ReconcileOptions::default(),
    )
    .unwrap();
    let got: Vec<(&str, Action)> = plan
        .units
        .iter()
        .map(|p| (p.unit.as_str(), p.action))
        .collect();
    assert_eq!(got, [("u09", Action::Behind), ("zz", Action::Missing)]);
    assert_eq!(plan.summary.duplicate_lines, 1);
    assert_eq!(plan.summary.up_to_date, 2);

    let err = Plan::changes(
        &store,
        ListingReader::new("u09,4\nu01,3\nu09,5\n".as_bytes(), ListingFormat::Csv),
        ReconcileOptions::default(),
    )
    .unwrap_err();
    match err {
        ReconcileError::Listing(ListingError::Duplicate {
            first_line: 1,
            line: 3,
            ..
        }) => {}
        other => panic!("expected a duplicate naming lines 1 and 3, got {other}"),
    }
    assert_eq!(state(&store), before);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The line parser never panics, and whatever it accepts is a valid key.
    #[test]
    fn parse_line_never_panics(line in "\\PC{0,60}|[{}\":,\\\\u0-9a-f ]{0,60}") {
        for format in [ListingFormat::Csv, ListingFormat::JsonLines] {
            if let Ok((unit, _)) = oncelake::reconcile::parse_line(format, &line) {
                prop_assert!(oncelake::validate_key(&unit).is_ok());
            }
        }
    }

    /// Any valid key and version written in either syntax parses back to itself.
    #[test]
    fn listing_lines_round_trip(unit in "\\PC{1,40}", version in any::<u64>(), escape in any::<bool>()) {
        prop_assume!(oncelake::validate_key(&unit).is_ok());
        let csv = csv_line(&unit, version);
        prop_assert_eq!(
            oncelake::reconcile::parse_line(ListingFormat::Csv, &csv).unwrap(),
            (unit.clone(), version)
        );
        let json = json_line(&unit, version, escape);
        prop_assert_eq!(
            oncelake::reconcile::parse_line(ListingFormat::JsonLines, &json).unwrap(),
            (unit, version)
        );
    }
}
