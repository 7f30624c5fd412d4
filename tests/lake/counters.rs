//! The store-scope counters on lake nodes (SPEC R16, R23): a group that changes nothing (every
//! answer a duplicate or a refusal) logs no segment, so its node carries its counts into the
//! next segment it wins; once every node has committed after its refusals and synced, every
//! node reports the lake's totals, equal to a model of every answer given on any node.

use crate::common::SplitMix64 as Rng;
use oncelake::{MetricsSnapshot, Options, Outcome, Store};
use std::collections::BTreeMap;
use std::path::Path;

fn node(dir: &Path, url: &str) -> Store {
    let opts = Options {
        lake: Some(url.to_string()),
        ..Options::default()
    };
    Store::open_with(dir, opts).unwrap()
}

/// What every answer counts, as the rules decide it (R3) from the model of committed units.
#[derive(Default, Debug, PartialEq, Eq)]
struct Counts {
    units_committed: u64,
    duplicates_collapsed: u64,
    conflicts: u64,
    stale_rejections: u64,
}

impl Counts {
    fn of(m: &MetricsSnapshot) -> Counts {
        Counts {
            units_committed: m.units_committed,
            duplicates_collapsed: m.duplicates_collapsed,
            conflicts: m.conflicts,
            stale_rejections: m.stale_rejections,
        }
    }

    /// Counts `put(unit, version, bytes)` against `model`, updating it; checks the answer.
    fn put(&mut self, model: &mut BTreeMap<String, (u64, Vec<u8>)>, o: &Outcome, put: Put<'_>) {
        let (unit, version, bytes) = put;
        let (want, counter) = match model.get(unit) {
            Some((v, b)) if *v == version && b == bytes => {
                ("duplicate", &mut self.duplicates_collapsed)
            }
            Some((v, _)) if *v == version => ("conflict", &mut self.conflicts),
            Some((v, _)) if *v > version => ("stale", &mut self.stale_rejections),
            _ => ("committed", &mut self.units_committed),
        };
        assert_eq!(o.name(), want, "{unit}: {o:?}");
        *counter += 1;
        if want == "committed" {
            model.insert(unit.to_string(), (version, bytes.to_vec()));
        }
    }
}

type Put<'a> = (&'a str, u64, &'a [u8]);

#[test]
fn refusals_on_any_node_reach_the_lakes_counters_with_its_next_segment() {
    for seed in [1u64, 2, 3] {
        let d = tempfile::tempdir().unwrap();
        let url = format!("memory://counters-{seed}");
        let nodes: Vec<Store> = (0..3)
            .map(|i| node(&d.path().join(format!("n{i}")), &url))
            .collect();
        let mut rng = Rng(seed);
        let mut model = BTreeMap::new();
        let mut want = Counts::default();
        for _ in 0..120 {
            let n = &nodes[rng.below(3) as usize];
            let unit = format!("u/{}", rng.below(6));
            let version = rng.below(4);
            let bytes = format!("v{version} b{}", rng.below(2)).into_bytes();
            let o = n.put(&unit, version, &bytes).unwrap().outcome;
            want.put(&mut model, &o, (&unit, version, &bytes));
        }
        // Each node commits once more (carrying what it refused), then all sync.
        for (i, n) in nodes.iter().enumerate() {
            let (unit, bytes) = (format!("last/{i}"), b"last".as_slice());
            let o = n.put(&unit, 1, bytes).unwrap().outcome;
            want.put(&mut model, &o, (&unit, 1, bytes));
        }
        for (i, n) in nodes.iter().enumerate() {
            n.sync().unwrap();
            assert_eq!(Counts::of(&n.metrics()), want, "seed {seed}, node {i}");
        }
        // A new node reads the same totals from the lake.
        let late = node(&d.path().join("late"), &url);
        assert_eq!(Counts::of(&late.metrics()), want, "seed {seed}, a new node");
    }
}

#[test]
fn a_nodes_refusals_are_in_its_own_stats_at_once_and_in_the_lakes_after_its_next_segment() {
    let d = tempfile::tempdir().unwrap();
    let url = "memory://counters-carried";
    let (a, b) = (
        node(&d.path().join("a"), url),
        node(&d.path().join("b"), url),
    );
    let answer = |s: &Store, unit: &str, v: u64, bytes: &[u8]| s.put(unit, v, bytes).unwrap();
    assert_eq!(answer(&a, "u", 2, b"x").outcome.name(), "committed");
    assert_eq!(answer(&b, "u", 2, b"x").outcome.name(), "duplicate");
    assert_eq!(answer(&b, "u", 2, b"y").outcome.name(), "conflict");
    assert_eq!(answer(&b, "u", 1, b"x").outcome.name(), "stale");
    let refused = |dup, conflicts, stale| Counts {
        units_committed: 0,
        duplicates_collapsed: dup,
        conflicts,
        stale_rejections: stale,
    };
    let only_refusals = |s: &Store| Counts {
        units_committed: 0,
        ..Counts::of(&s.metrics())
    };
    // b counts its refusals; no segment carried them, so a does not.
    a.sync().unwrap();
    b.sync().unwrap();
    assert_eq!(only_refusals(&b), refused(1, 1, 1));
    assert_eq!(only_refusals(&a), refused(0, 0, 0));
    // a commits (its segment does not carry b's), b syncs it: b still counts its own.
    assert_eq!(answer(&a, "v", 1, b"x").outcome.name(), "committed");
    b.sync().unwrap();
    assert_eq!(only_refusals(&b), refused(1, 1, 1));
    // b's next segment carries them: a reads them after a sync, and b does not count them twice.
    assert_eq!(answer(&b, "w", 1, b"x").outcome.name(), "committed");
    a.sync().unwrap();
    assert_eq!(only_refusals(&a), refused(1, 1, 1));
    assert_eq!(answer(&b, "w", 1, b"x").outcome.name(), "duplicate");
    assert_eq!(answer(&b, "z", 1, b"x").outcome.name(), "committed");
    a.sync().unwrap();
    assert_eq!(only_refusals(&a), refused(2, 1, 1));
    assert_eq!(only_refusals(&b), refused(2, 1, 1));
    assert_eq!(a.metrics().units_committed, 4);
}
