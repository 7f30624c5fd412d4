//! A seeded simulation of a shared lake (SPEC R23, I1–I11): three in-process nodes on one
//! `memory://` lake behind the fault plan (failures before the store, lost responses after it,
//! 409s and 5xx-then-412 answered `AlreadyExists`, latency), each with its own clock that is
//! skewed and jumps (backwards too); nodes restart, are wiped and rejoin from the log, and hold
//! leases while others take them over (a node that does not act is a paused node). One step at a
//! time, from one seed, so a failing seed replays: `ONCELAKE_LAKE_SEEDS=7,8 cargo test --features
//! lake --test lake_sim`.
//!
//! Checked at every step: a plain put's answer is the one the R3 model gives. At the end, on
//! every node: the manifest equals the model, the log replays to the manifest (I7), every object
//! is there (I2, verify), every acknowledged commit is readable at its seq, and the log never
//! admits a stale token (I6: each fenced commit carries its unit's newest granted token).

use crate::common;

use common::SplitMix64 as Rng;
use oncelake::log::RecordBody;
use oncelake::{
    Batch, ClaimOutcome, FaultRates, LakeFaults, Lease, ManualClock, ObjectId, Options, Outcome,
    Store, VerifyOptions,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const T0: u64 = 1_800_000_000_000;
const NODES: usize = 3;
const STEPS: usize = 120;
const TTL: Duration = Duration::from_secs(30);

fn seeds() -> Vec<u64> {
    match std::env::var("ONCELAKE_LAKE_SEEDS") {
        Ok(s) => s.split(',').map(|x| x.trim().parse().unwrap()).collect(),
        Err(_) => vec![1, 2, 3],
    }
}

/// The R3 model of plain puts (no token, never claimed, no corrections): unit -> current
/// (version, object). An older version is stale even if it was committed once.
#[derive(Default)]
struct Model {
    current: BTreeMap<String, (u64, ObjectId)>,
}

impl Model {
    /// The answer the rules give, as a kind, and the state after it.
    fn put(&mut self, unit: &str, v: u64, o: ObjectId) -> &'static str {
        let kind = match self.current.get(unit) {
            None => "committed",
            Some(&(cv, _)) if v > cv => "committed",
            Some(&(cv, co)) if v == cv && o == co => "duplicate",
            Some(&(cv, _)) if v == cv => "conflict",
            _ => "stale",
        };
        if kind == "committed" {
            self.current.insert(unit.to_string(), (v, o));
        }
        kind
    }
}

fn kind(o: &Outcome) -> &'static str {
    match o {
        Outcome::Committed { .. } => "committed",
        Outcome::Duplicate { .. } => "duplicate",
        Outcome::Conflict { .. } => "conflict",
        Outcome::Stale { .. } => "stale",
        Outcome::Fenced { .. } => "fenced",
        Outcome::Busy { .. } => "busy",
        Outcome::Aborted => "aborted",
    }
}

struct Node {
    dir: PathBuf,
    clock: ManualClock,
    store: Option<Store>,
    /// Leases this node's worker holds (forgotten when the node is wiped).
    leases: Vec<Lease>,
}

fn open(dir: &Path, url: &str, clock: &ManualClock) -> Store {
    Store::open_with(
        dir,
        Options {
            lake: Some(url.to_string()),
            clock: Arc::new(clock.clone()),
            ..Options::default()
        },
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

fn simulate(seed: u64) {
    let name = format!("lake-sim-{seed}-{}", std::process::id());
    let url = format!("memory://{name}");
    let plan = LakeFaults::install(&name, seed);
    plan.set_rates(FaultRates {
        before: 30,
        after: 30,
        conflict: 30,
        after_already_exists: 30,
        max_latency_ms: 1,
    });
    let d = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed);
    let mut nodes: Vec<Node> = (0..NODES)
        .map(|i| {
            // Skewed by up to two minutes either way.
            let clock = ManualClock::new(T0 + rng.below(240_000) - 120_000);
            let dir = d.path().join(format!("n{i}"));
            let store = Some(open(&dir, &url, &clock));
            Node {
                dir,
                clock,
                store,
                leases: Vec::new(),
            }
        })
        .collect();
    let mut model = Model::default();
    // Every acknowledged commit: (unit, seq, object).
    let mut acked: Vec<(String, u64, ObjectId)> = Vec::new();
    let mut versions: HashMap<(String, u64), ObjectId> = HashMap::new();
    for step in 0..STEPS {
        let i = rng.below(NODES as u64) as usize;
        let n = &mut nodes[i];
        let store = n.store.as_ref().unwrap();
        let ctx = format!("seed {seed} step {step} node {i}");
        match rng.below(100) {
            0..=44 => {
                let unit = format!("p{}", rng.below(5));
                let v = 1 + rng.below(4);
                let bytes = format!("{unit}@{v}#{}", rng.below(2));
                let o = ObjectId::of(bytes.as_bytes());
                let got = store.put(&unit, v, bytes.as_bytes()).unwrap().outcome;
                assert_eq!(kind(&got), model.put(&unit, v, o), "{ctx}: put {unit}@{v}");
                if let Outcome::Committed { seq, .. } = got {
                    acked.push((unit, seq, o));
                }
            }
            45..=59 => {
                let unit = format!("c{}", rng.below(3));
                let v = 1 + rng.below(3);
                if let ClaimOutcome::Granted { lease, .. } =
                    store.claim(&unit, v, &format!("w{i}"), TTL).unwrap()
                {
                    n.leases.push(lease);
                }
            }
            60..=74 if !n.leases.is_empty() => {
                let lease = n.leases.remove(rng.below(n.leases.len() as u64) as usize);
                let bytes = format!("{}@{}#{i}", lease.unit, lease.source_version);
                let staged = store.stage_bytes(bytes.as_bytes()).unwrap();
                let r = store
                    .commit(Batch::new().put_fenced(
                        &lease.unit,
                        lease.source_version,
                        &staged,
                        lease.token,
                    ))
                    .unwrap();
                let got = r.units[0].outcome;
                assert!(
                    !matches!(got, Outcome::Busy { .. } | Outcome::Aborted),
                    "{ctx}: {got:?}"
                );
                if let Outcome::Committed { seq, .. } = got {
                    let o = ObjectId::of(bytes.as_bytes());
                    let key = (lease.unit.clone(), lease.source_version);
                    assert!(versions.insert(key, o).is_none(), "{ctx}: a second commit");
                    acked.push((lease.unit.clone(), seq, o));
                }
            }
            75..=81 => {
                // The node's clock jumps, backwards as often as forwards.
                let by = rng.below(120_000);
                let now = oncelake::Clock::now_ms(&n.clock);
                n.clock.set_ms(if rng.below(2) == 0 {
                    now + by
                } else {
                    now - by
                });
            }
            82..=89 => {
                // Time passes for every node but this one's (it is paused).
                for (j, m) in nodes.iter().enumerate() {
                    if j != i {
                        m.clock.advance_ms(15_000);
                    }
                }
            }
            90..=94 => {
                drop(n.store.take());
                n.store = Some(open(&n.dir, &url, &n.clock));
            }
            95..=97 => {
                // Wiped: a new node in its place, from the log alone.
                drop(n.store.take());
                std::fs::remove_dir_all(&n.dir).unwrap();
                n.leases.clear();
                n.store = Some(open(&n.dir, &url, &n.clock));
            }
            _ => store.sync().unwrap(),
        }
    }
    let stores: Vec<&Store> = nodes.iter().map(|n| n.store.as_ref().unwrap()).collect();
    let mut seen = None;
    for (i, s) in stores.iter().enumerate() {
        s.sync().unwrap();
        let snap = s.snapshot().unwrap();
        let all: BTreeMap<String, (u64, ObjectId)> = snap
            .iter()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.unit, (e.source_version, e.object.id))
            })
            .collect();
        let plain: BTreeMap<_, _> = all
            .iter()
            .filter(|(u, _)| u.starts_with('p'))
            .map(|(u, v)| (u.clone(), *v))
            .collect();
        assert_eq!(
            plain, model.current,
            "seed {seed} node {i}: the manifest is not the model"
        );
        match &seen {
            None => seen = Some(all),
            Some(first) => assert_eq!(&all, first, "seed {seed}: node {i} differs from node 0"),
        }
        for (unit, seq, o) in &acked {
            let e = s.snapshot_at(*seq).unwrap().get(unit).unwrap();
            assert_eq!(
                e.map(|e| e.object.id),
                Some(*o),
                "seed {seed}: {unit}@seq {seq} lost"
            );
        }
        let report = s.verify(VerifyOptions::default()).unwrap();
        assert!(report.is_ok(), "seed {seed} node {i}: {report:?}");
        let replay = oncelake::replay(&snap).unwrap();
        assert!(
            replay.problems.is_empty(),
            "seed {seed} node {i}: {replay:?}"
        );
        // I6 on the log: a fenced commit carries its unit's newest granted token.
        let mut newest: HashMap<String, u64> = HashMap::new();
        for rec in snap.changes_since(0).unwrap() {
            match rec.unwrap().body {
                RecordBody::ClaimGranted(c) => {
                    newest.insert(c.unit, c.token);
                }
                RecordBody::Commit { entries } => {
                    for e in entries {
                        if let Some(t) = e.token {
                            assert_eq!(newest.get(&e.unit), Some(&t), "seed {seed}: stale token");
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let c = plan.counts();
    eprintln!(
        "seed {seed}: {} commits acknowledged, faults {c:?}",
        acked.len()
    );
}

#[test]
fn seeded_nodes_with_faults_crashes_and_skewed_clocks_keep_i1_to_i11() {
    for seed in seeds() {
        simulate(seed);
    }
}
