//! Full and incremental plans against a BTreeMap model: every input path (CSV, JSON lines, the
//! API's pairs, shuffled listings) plans alike; as-of seqs, the commits still in the tail, a source
//! that went back.

use super::listings::runs_of;
use super::{fill, key_pool, model_full, open, render, shuffle, sorted, state, Rows};
use oncelake::reconcile::{
    reconcile_full_unsorted, Action, ListingFormat, ListingReader, ListingSource, Pairs, Plan,
    PlannedUnit, ReconcileOptions, SortConfig, SortedListing,
};
use oncelake::{Batch, Options, Store};
use proptest::prelude::*;
use std::collections::BTreeMap;

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
