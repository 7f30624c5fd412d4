//! Reconcile (SPEC R12) and the change feed (R8): plans checked against a BTreeMap model on real
//! stores, bad listings refused with the line named and the store untouched, and the CLI contract
//! of `oncelake reconcile` and `oncelake log --since`.

use crate::bin;

use oncelake::reconcile::{
    check_sorted_listing, reconcile_full, reconcile_full_unsorted, Action, ListingError,
    ListingFormat, ListingReader, ListingSource, Pairs, Plan, PlannedUnit, ReconcileError,
    ReconcileOptions, Row, SortConfig, SortedListing,
};
use oncelake::{Batch, Durability, Options, Store};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Unit keys the generators draw from: plain ones plus keys that stress the listing syntaxes
/// (commas, quotes, backslashes, spaces, non-ASCII) and the byte order of keys.
fn key_pool() -> Vec<String> {
    let mut keys: Vec<String> = (0..300).map(|i| format!("orders/c={i:03}")).collect();
    keys.extend(
        [
            "a,b",
            "\"quoted\"",
            "back\\slash",
            " lead space",
            "é/ü",
            "Z",
            "zz,1,2",
            "日本/語",
            "emoji😀",
            "orders/c=1",
        ]
        .map(String::from),
    );
    keys
}

fn open(dir: &Path) -> Store {
    Store::open_with(
        dir,
        Options {
            durability: Durability::Relaxed {
                max_delay: Duration::from_secs(60),
            },
            ..Options::default()
        },
    )
    .unwrap()
}

/// Commits `manifest` (unit -> version) in one batch; every unit shares one small object.
fn fill(store: &Store, manifest: &BTreeMap<String, u64>) {
    if manifest.is_empty() {
        return;
    }
    let staged = store.stage_bytes(b"out").unwrap();
    let mut batch = Batch::new();
    for (u, v) in manifest {
        batch = batch.put(u.clone(), *v, &staged);
    }
    assert!(store.commit(batch).unwrap().applied());
}

/// The model: what a plan must say, computed from two maps.
fn model_full(
    manifest: &BTreeMap<String, u64>,
    listing: &BTreeMap<String, u64>,
    list_up_to_date: bool,
) -> Vec<PlannedUnit> {
    let keys: BTreeSet<&String> = manifest.keys().chain(listing.keys()).collect();
    keys.into_iter()
        .filter_map(|k| model_one(k, listing.get(k).copied(), manifest.get(k).copied()))
        .filter(|p| list_up_to_date || p.action != Action::UpToDate)
        .collect()
}

fn model_one(unit: &str, source: Option<u64>, manifest: Option<u64>) -> Option<PlannedUnit> {
    let action = match (source, manifest) {
        (None, None) => return None,
        (None, Some(_)) => Action::Unknown,
        (Some(_), None) => Action::Missing,
        (Some(s), Some(m)) if s > m => Action::Behind,
        (Some(_), Some(_)) => Action::UpToDate,
    };
    Some(PlannedUnit {
        unit: unit.to_string(),
        action,
        source_version: source,
        manifest_version: manifest,
    })
}

fn csv_line(unit: &str, v: u64) -> String {
    if unit.contains('"') || unit.starts_with(' ') {
        format!("\"{}\",{v}", unit.replace('"', "\"\""))
    } else {
        format!("{unit},{v}")
    }
}

fn json_line(unit: &str, v: u64, escape_all: bool) -> String {
    let mut s = String::from("{\"unit\": \"");
    for c in unit.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '/' if escape_all => s.push_str("\\/"),
            c if escape_all && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    s.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => s.push(c),
        }
    }
    s.push_str(&format!("\", \"version\": {v}}}"));
    s
}

fn render(listing: &[(String, u64)], format: ListingFormat, header: bool, escape: bool) -> String {
    let mut out = String::new();
    if header && format == ListingFormat::Csv {
        out.push_str("unit,version\r\n");
    }
    for (u, v) in listing {
        out.push_str(&match format {
            ListingFormat::Csv => csv_line(u, *v),
            _ => json_line(u, *v, escape),
        });
        out.push('\n');
    }
    out
}

/// Everything observable of a store's state: its seq and every entry.
fn state(store: &Store) -> (u64, Vec<oncelake::Entry>) {
    let snap = store.snapshot().unwrap();
    let entries = snap.iter().unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    (store.last_seq().unwrap(), entries)
}

/// A deterministic Fisher-Yates shuffle (xorshift).
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

fn sorted(mut v: Vec<PlannedUnit>) -> Vec<PlannedUnit> {
    v.sort();
    v
}

/// A listing as rows, in order.
type Rows = Vec<(String, u64)>;

/// The same listing as CSV and as JSON lines plans what the API pairs plan.
fn both_formats_plan_alike(
    snap: &oncelake::Snapshot,
    rows: &Rows,
    opts: ReconcileOptions,
    escape: bool,
    plan: &Plan,
) -> Result<(), TestCaseError> {
    for format in [ListingFormat::Csv, ListingFormat::JsonLines] {
        let text = render(rows, format, escape, escape);
        let plan2 = Plan::full(snap, ListingReader::new(text.as_bytes(), format), opts).unwrap();
        prop_assert_eq!(&plan2.units, &plan.units, "format {:?}", format);
        prop_assert_eq!(plan2.summary, plan.summary);
    }
    Ok(())
}

/// Shuffled, the same listing is sorted (in many spilled runs) and gives the same plan; the
/// sorted rows keep their original lines, and no temporary run is left behind.
fn a_shuffled_listing_plans_alike(
    snap: &oncelake::Snapshot,
    rows: &Rows,
    (opts, escape, seed): (ReconcileOptions, bool, u64),
    plan: &Plan,
) -> Result<(), TestCaseError> {
    let mut shuffled = rows.clone();
    shuffle(&mut shuffled, seed.rotate_left(7));
    let tmp = tempfile::tempdir().unwrap();
    let small = runs_of(7, tmp.path());
    for (format, config) in [
        (ListingFormat::Csv, &small),
        (ListingFormat::JsonLines, &small),
        (ListingFormat::Csv, &SortConfig::new(tmp.path())),
    ] {
        let text = render(&shuffled, format, escape, escape);
        let mut units = Vec::new();
        let summary = reconcile_full_unsorted(
            snap,
            ListingReader::new(text.as_bytes(), format),
            opts,
            config,
            |i| {
                units.push(PlannedUnit::from(i));
                Ok(())
            },
        )
        .unwrap();
        prop_assert_eq!(
            &units,
            &plan.units,
            "shuffled {:?}, {} rows a run",
            format,
            config.run_rows
        );
        prop_assert_eq!(summary, plan.summary);
    }
    let mut sorted_rows =
        SortedListing::sort(Pairs::new(shuffled.iter().cloned()), &small).unwrap();
    prop_assert_eq!(sorted_rows.spilled_runs(), shuffled.len().div_ceil(7));
    // The rows keep their original lines (positions in the shuffled listing).
    let mut prev: Option<(String, u64)> = None;
    while let Some(row) = sorted_rows.next_row().unwrap() {
        prop_assert_eq!(
            &shuffled[row.line as usize - 1],
            &(row.unit.to_string(), row.version)
        );
        if let Some((u, l)) = &prev {
            prop_assert!((u.as_str(), *l) < (row.unit, row.line));
        }
        prev = Some((row.unit.to_string(), row.line));
    }
    drop(sorted_rows);
    prop_assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "temporary runs left behind"
    );
    Ok(())
}

/// Incremental: a shuffled subset of the listing as changes plans the model's changed units, in
/// the order the changes came in, and agrees with the full plan on them.
fn changes_plan_as_the_full_plan_on_them(
    store: &Store,
    (manifest, listing): (&BTreeMap<String, u64>, &BTreeMap<String, u64>),
    (change_mask, seed): (&[bool], u64),
    opts: ReconcileOptions,
    plan: &Plan,
) -> Result<(), TestCaseError> {
    let mut changes: Rows = listing
        .iter()
        .zip(change_mask)
        .filter(|(_, m)| **m)
        .map(|((k, v), _)| (k.clone(), *v))
        .collect();
    shuffle(&mut changes, seed);
    let inc = Plan::changes(store, Pairs::new(changes.iter().cloned()), opts).unwrap();
    let changed: BTreeMap<String, u64> = changes.iter().cloned().collect();
    let want: Vec<PlannedUnit> = model_full(manifest, &changed, opts.list_up_to_date)
        .into_iter()
        .filter(|p| p.action != Action::Unknown)
        .collect();
    prop_assert_eq!(sorted(inc.units.clone()), want);
    let order: Vec<&String> = inc.units.iter().map(|p| &p.unit).collect();
    let listed: Vec<&String> = changes
        .iter()
        .map(|(k, _)| k)
        .filter(|k| order.contains(k))
        .collect();
    prop_assert_eq!(order, listed);
    let full_on_changes: Vec<PlannedUnit> = plan
        .units
        .iter()
        .filter(|p| changed.contains_key(&p.unit))
        .cloned()
        .collect();
    prop_assert_eq!(sorted(inc.units), full_on_changes);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Full and incremental plans equal the model, through every input path, and agree with
    /// each other on the same changes. The store is never modified.
    #[test]
    fn plans_match_the_model(
        manifest_pick in prop::collection::vec(prop::option::weighted(0.7, 1u64..6), 310),
        listing_pick in prop::collection::vec(prop::option::weighted(0.8, 0u64..8), 310),
        change_mask in prop::collection::vec(any::<bool>(), 310),
        shuffle_seed in any::<u64>(),
        repeat_at in prop::option::of(0usize..200),
        list_up_to_date in any::<bool>(),
        escape in any::<bool>(),
    ) {
        let pool = key_pool();
        let manifest: BTreeMap<String, u64> = pool.iter().zip(&manifest_pick)
            .filter_map(|(k, v)| v.map(|v| (k.clone(), v))).collect();
        let listing: BTreeMap<String, u64> = pool.iter().zip(&listing_pick)
            .filter_map(|(k, v)| v.map(|v| (k.clone(), v))).collect();
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("s"));
        fill(&store, &manifest);
        let before = state(&store);
        let opts = ReconcileOptions { list_up_to_date };
        let expected = model_full(&manifest, &listing, list_up_to_date);

        // API pairs, sorted; an exact repeat of one row is planned once.
        let mut rows: Rows = listing.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let repeats = match repeat_at {
            Some(i) if i < rows.len() => { let r = rows[i].clone(); rows.insert(i, r); 1 }
            _ => 0,
        };
        let snap = store.snapshot().unwrap();
        let plan = Plan::full(&snap, Pairs::new(rows.iter().cloned()), opts).unwrap();
        prop_assert_eq!(&plan.units, &expected);
        prop_assert_eq!(plan.summary.duplicate_lines, repeats);
        prop_assert_eq!(plan.summary.listed, rows.len() as u64);
        let count = |a| expected.iter().filter(|p| p.action == a).count() as u64;
        prop_assert_eq!(plan.summary.missing, count(Action::Missing));
        prop_assert_eq!(plan.summary.behind, count(Action::Behind));
        prop_assert_eq!(plan.summary.unknown, count(Action::Unknown));
        prop_assert_eq!(plan.summary.manifest_units, manifest.len() as u64);
        let up_to_date = listing.iter().filter(|(k, v)| manifest.get(*k).is_some_and(|m| m >= v)).count();
        prop_assert_eq!(plan.summary.up_to_date, up_to_date as u64);

        both_formats_plan_alike(&snap, &rows, opts, escape, &plan)?;
        a_shuffled_listing_plans_alike(&snap, &rows, (opts, escape, shuffle_seed), &plan)?;
        changes_plan_as_the_full_plan_on_them(
            &store, (&manifest, &listing), (&change_mask, shuffle_seed), opts, &plan,
        )?;
        drop(snap);
        prop_assert_eq!(state(&store), before);
    }
}

#[test]
fn full_reconcile_as_of_an_older_seq_uses_that_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"));
    let first: BTreeMap<String, u64> = (0..50).map(|i| (format!("u{i:02}"), 1)).collect();
    fill(&store, &first);
    let seq1 = store.last_seq().unwrap();
    let second: BTreeMap<String, u64> = (25..75).map(|i| (format!("u{i:02}"), 2)).collect();
    fill(&store, &second);
    let listing: BTreeMap<String, u64> = (10..60).map(|i| (format!("u{i:02}"), 2)).collect();
    let rows = || Pairs::new(listing.iter().map(|(k, v)| (k.as_str(), *v)));
    let opts = ReconcileOptions {
        list_up_to_date: true,
    };
    let old = Plan::full(&store.snapshot_at(seq1).unwrap(), rows(), opts).unwrap();
    assert_eq!(old.units, model_full(&first, &listing, true));
    let mut now = first.clone();
    now.extend(second);
    let new = Plan::full(&store.snapshot().unwrap(), rows(), opts).unwrap();
    assert_eq!(new.units, model_full(&now, &listing, true));
    assert_ne!(old.units, new.units);
}

/// A full reconcile on a snapshot whose tail holds commits not yet applied to the manifest table
/// (new units and new versions of applied ones, `background_apply` off and a start no commit
/// here reaches): the plan is the model's of everything acknowledged, the reconcile applies
/// nothing, and after a flush the plan is the same.
#[test]
fn a_full_reconcile_merges_the_commits_still_in_the_tail() {
    let (_dir, store) = crate::common::open_new(
        "s",
        Options {
            background_apply: false,
            apply_min_bytes: 16 << 20,
            apply_batch_bytes: 16 << 20,
            ..Options::default()
        },
    );
    let first: BTreeMap<String, u64> = (0..60).map(|i| (format!("u{i:02}"), 1)).collect();
    fill(&store, &first);
    store.flush().unwrap();
    // Every third unit of a wider range in its own commit: interleaved with the applied rows,
    // before the first, and after the last.
    let mut now = first.clone();
    let staged = store.stage_bytes(b"out").unwrap();
    for i in (0..90).step_by(3) {
        let (unit, version) = (format!("u{i:02}"), 3);
        assert!(store
            .commit(Batch::new().put(unit.clone(), version, &staged))
            .unwrap()
            .applied());
        now.insert(unit, version);
    }
    for unit in ["a-before", "zz-after"] {
        assert!(store
            .commit(Batch::new().put(unit, 1, &staged))
            .unwrap()
            .applied());
        now.insert(unit.to_string(), 1);
    }
    let waiting = store.backlog();
    assert_eq!(waiting.units, 32, "the later commits wait in the tail");
    let listing: BTreeMap<String, u64> = (0..100).map(|i| (format!("u{i:02}"), 2)).collect();
    let rows = || Pairs::new(listing.iter().map(|(k, v)| (k.as_str(), *v)));
    let opts = ReconcileOptions {
        list_up_to_date: true,
    };
    let plan = Plan::full(&store.snapshot().unwrap(), rows(), opts).unwrap();
    assert_eq!(plan.units, model_full(&now, &listing, true));
    assert_eq!(plan.summary.manifest_units, now.len() as u64);
    assert_eq!(store.backlog(), waiting, "a reconcile applies nothing");
    store.flush().unwrap();
    assert_eq!(store.backlog().units, 0);
    let applied = Plan::full(&store.snapshot().unwrap(), rows(), opts).unwrap();
    assert_eq!(applied.units, plan.units);
    assert_eq!(applied.summary, plan.summary);
}

#[test]
fn a_source_that_went_back_is_up_to_date_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"));
    store.put("a", 5, b"x").unwrap();
    let plan = Plan::full(
        &store.snapshot().unwrap(),
        Pairs::new([("a", 3)]),
        ReconcileOptions::default(),
    )
    .unwrap();
    assert!(plan.units.is_empty());
    assert_eq!(
        (plan.summary.up_to_date, plan.summary.manifest_ahead),
        (1, 1)
    );
}

/// Runs a full reconcile of `text` and returns the error, checking that the store is unchanged.
fn refused(store: &Store, text: &str, format: ListingFormat) -> ListingError {
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
fn runs_of(run_rows: usize, tmp: &Path) -> SortConfig {
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

#[test]
fn the_change_feed_streams_what_changed_after_a_seq() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"));
    let mut seqs = Vec::new();
    for (i, u) in ["a", "b", "c", "a"].iter().enumerate() {
        seqs.push(
            store
                .put(u, i as u64 + 1, u.as_bytes())
                .unwrap()
                .outcome
                .seq()
                .unwrap(),
        );
    }
    let all: Vec<u64> = store
        .changes_since(0)
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(all, seqs);
    let feed = store.changes_since(seqs[1]).unwrap();
    // Commits after the feed was opened are not in it (it reads one consistent view).
    store.put("d", 1, b"d").unwrap();
    let later: Vec<(u64, Vec<String>)> = feed
        .map(|r| {
            let r = r.unwrap();
            match r.body {
                oncelake::log::RecordBody::Commit { entries } => {
                    (r.seq, entries.into_iter().map(|e| e.unit).collect())
                }
                other => panic!("unexpected record {other:?}"),
            }
        })
        .collect();
    assert_eq!(
        later,
        [
            (seqs[2], vec!["c".to_string()]),
            (seqs[3], vec!["a".to_string()])
        ]
    );
    assert_eq!(store.changes_since(u64::MAX).unwrap().count(), 0);
}

// ---- the command line ----

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin::oncelake()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cli_store(dir: &Path) -> String {
    let store = dir.join("lake");
    {
        let s = open(&store);
        fill(
            &s,
            &[("a", 1), ("c", 3), ("d", 5)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        );
        s.put("c", 4, b"newer").unwrap();
    }
    store.to_str().unwrap().to_string()
}

/// Writes `text` to the listing file `name` in `dir`; its path.
fn listing_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// A full CSV listing with a header: the plan as tab-separated lines and a summary.
fn cli_plans_a_full_listing(dir: &Path, store: &str) {
    let csv = listing_file(dir, "src.csv", "unit,version\na,2\nb,1\nc,4\n");
    let (code, out, err) = cli(&["reconcile", store, "--source", &csv]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        &lines[..4],
        [
            "action\tunit\tsource_version\tcurrent_version",
            "behind\ta\t2\t1",
            "missing\tb\t1\t-",
            "unknown\td\t-\t5"
        ]
    );
    assert!(lines[4].starts_with("summary: 2 to process"), "{out}");
}

/// JSON lines, sniffed from the content (no extension), as changes, listing up-to-date units too.
fn cli_plans_changes_in_json_lines(dir: &Path, store: &str) {
    let jl = listing_file(
        dir,
        "changes",
        "{\"unit\": \"c\", \"version\": 9}\n{\"unit\": \"a\", \"version\": 1}\n",
    );
    let (code, out, err) = cli(&[
        "reconcile",
        store,
        "--source",
        &jl,
        "--changes-only",
        "--list-up-to-date",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (line, want) in lines[..2].iter().zip([
        [
            "\"unit\":\"c\"",
            "\"action\":\"behind\"",
            "\"source_version\":9",
            "\"current_version\":4",
        ],
        [
            "\"unit\":\"a\"",
            "\"action\":\"up_to_date\"",
            "\"source_version\":1",
            "\"current_version\":1",
        ],
    ]) {
        for w in want {
            assert!(line.contains(w), "{line} lacks {w}");
        }
    }
    assert!(lines[2].starts_with("{\"summary\":"), "{}", lines[2]);
    assert!(
        lines[2].contains("\"form\":\"incremental\""),
        "{}",
        lines[2]
    );
}

/// An unsorted full listing, from a file or from standard input, is sorted, with a note.
fn cli_sorts_an_unsorted_listing(dir: &Path, store: &str) {
    let unsorted = "d,5\nc,4\nb,1\na,2\n";
    let want = [
        "action\tunit\tsource_version\tcurrent_version",
        "behind\ta\t2\t1",
        "missing\tb\t1\t-",
    ];
    let p = listing_file(dir, "unsorted.csv", unsorted);
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let (code, out, err) = cli(&[
        "reconcile",
        store,
        "--source",
        &p,
        "--tmp",
        tmp.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("not sorted"), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..3], want, "{out}");
    assert!(lines[3].starts_with("summary: 2 to process"), "{out}");
    let o = bin::run(
        &["reconcile", store, "--source", "-", "--json"],
        Some(unsorted.as_bytes()),
    );
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("not sorted"), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].contains("\"unit\":\"a\"") && lines[0].contains("behind"),
        "{out}"
    );
    assert!(
        lines[1].contains("\"unit\":\"b\"") && lines[1].contains("missing"),
        "{out}"
    );
    assert!(
        lines[2].contains("\"to_process\":2") && lines[2].contains("\"unknown\":0"),
        "{out}"
    );
}

/// One refused reconcile: a listing file (name, text) if any, the further arguments, and what
/// the error must name ("" for anything).
type Refusal = (
    Option<(&'static str, &'static str)>,
    &'static [&'static str],
    &'static str,
);

/// Bad listings (the line named), a unit listed twice in an unsorted listing, a missing file and
/// a bad `--format`: exit 2, nothing printed to stdout, the store unchanged.
fn cli_refuses_bad_listings(dir: &Path, store: &str) {
    const REFUSALS: &[Refusal] = &[
        (Some(("bad.csv", "a,1\nb;2\n")), &[], "line 2"),
        (
            Some(("dup.csv", "a,1\na,2\n")),
            &[],
            "line 1 and 2 on line 2",
        ),
        (
            Some(("bad.jsonl", "{\"unit\": \"a\", \"version\": \"1\"}\n")),
            &[],
            "line 1",
        ),
        (
            Some(("unsorted-dup.csv", "d,5\na,1\nc,4\na,2\n")),
            &[],
            "line 2 and 2 on line 4",
        ),
        (None, &["--source", "/nonexistent/x.csv"], ""),
        (Some(("good.csv", "a,2\nb,1\n")), &["--format", "xml"], ""),
    ];
    let before = cli(&["log", store, "--json"]).1;
    for &(file, extra, names) in REFUSALS {
        let mut args = vec!["reconcile".to_string(), store.to_string()];
        if let Some((name, text)) = file {
            args.extend(["--source".to_string(), listing_file(dir, name, text)]);
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = cli(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: printed a plan: {out}");
        assert!(err.contains(names), "{args:?}: {err}");
    }
    assert_eq!(cli(&["log", store, "--json"]).1, before);
}

#[test]
fn cli_reconcile_plans_and_exits_by_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let store = cli_store(dir.path());
    cli_plans_a_full_listing(dir.path(), &store);
    cli_plans_changes_in_json_lines(dir.path(), &store);
    cli_refuses_bad_listings(dir.path(), &store);
    cli_sorts_an_unsorted_listing(dir.path(), &store);
}

#[test]
fn cli_log_since_shows_only_later_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = cli_store(dir.path());
    let (code, out, err) = cli(&["log", &store, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2);
    let (code, out, _) = cli(&["log", &store, "--since", "1", "--json"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    for w in [
        "\"seq\":2",
        "\"kind\":\"commit\"",
        "\"unit\":\"c\"",
        "\"source_version\":4",
    ] {
        assert!(lines[0].contains(w), "{} lacks {w}", lines[0]);
    }
    let (_, out, _) = cli(&["log", &store, "--since", "1"]);
    // seq, the commit's date (RFC 3339, UTC), kind, units.
    let fields: Vec<&str> = out.lines().next().unwrap_or_default().split('\t').collect();
    assert_eq!(fields.len(), 5, "{out}");
    assert_eq!(
        (fields[0], fields[2], fields[3], fields[4]),
        ("seq 2", "commit", "1 unit(s)", "c@4"),
        "{out}"
    );
    assert!(
        fields[1].len() == 24 && fields[1].ends_with('Z') && fields[1].contains('T'),
        "{out}"
    );
    let (code, out, _) = cli(&["log", &store, "--since", "2"]);
    assert_eq!((code, out.as_str()), (0, ""));
    let (code, _, _) = cli(&["log", &store, "--since", "x"]);
    assert_eq!(code, 2);
}

/// A listing generated on the fly: `n` sorted units, no memory of its own.
struct Synthetic {
    n: u64,
    i: u64,
    key: String,
}

impl ListingSource for Synthetic {
    fn next_row(&mut self) -> Result<Option<Row<'_>>, ListingError> {
        if self.i >= self.n {
            return Ok(None);
        }
        self.i += 1;
        self.key.clear();
        use std::fmt::Write;
        let _ = write!(self.key, "orders/customer={:09}", self.i);
        Ok(Some(Row {
            unit: &self.key,
            version: 1,
            line: self.i,
        }))
    }
}

fn peak_rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Memory of a full pass does not grow with the listing: peak RSS after a 10,000,000-row pass is
/// within a few MiB of the peak after a 1,000,000-row one. Slow in debug; run alone, in release:
/// `cargo test --release --test reconcile -- --ignored --test-threads 1`.
#[test]
#[ignore]
fn full_reconcile_memory_is_independent_of_listing_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"));
    let manifest: BTreeMap<String, u64> = (0..100_000u64)
        .map(|i| (format!("orders/customer={:09}", i * 10), 1))
        .collect();
    fill(&store, &manifest);
    let snap = store.snapshot().unwrap();
    let mut peaks = Vec::new();
    for n in [1_000_000u64, 10_000_000] {
        let mut planned = 0u64;
        let s = reconcile_full(
            &snap,
            Synthetic {
                n,
                i: 0,
                key: String::new(),
            },
            ReconcileOptions::default(),
            |_| {
                planned += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(s.listed, n);
        peaks.push(peak_rss_kb());
        eprintln!(
            "listing of {n} rows: {planned} planned, peak RSS {} KiB",
            peak_rss_kb()
        );
    }
    assert!(
        peaks[1] - peaks[0] < 8 * 1024,
        "peak RSS grew from {} KiB to {} KiB",
        peaks[0],
        peaks[1]
    );
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

#[test]
fn lookup_many_answers_like_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s"));
    fill(
        &store,
        &(0..600).map(|i| (format!("u{i:04}"), i % 7)).collect(),
    );
    store.put("u0003", 9, b"newer").unwrap();
    // Present and absent units, repeats, more than one chunk of 256.
    let units: Vec<String> = (0..1500)
        .map(|i| format!("u{:04}", (i * 7) % 900))
        .collect();
    let mut out = Vec::new();
    store.lookup_many(&units, &mut out).unwrap();
    assert_eq!(out.len(), units.len());
    for (u, got) in units.iter().zip(&out) {
        assert_eq!(*got, store.lookup(u).unwrap(), "{u}");
    }
    assert!(out.iter().any(Option::is_some) && out.iter().any(Option::is_none));
    store.lookup_many(&Vec::<String>::new(), &mut out).unwrap();
    assert!(out.is_empty());
}
