//! A shared lake (SPEC R23, I11): several nodes in this process on one `memory://` lake commit
//! overlapping units; every answer is checked against a model of what must be there, and the
//! lake against the invariants. Lost responses and 409s come from the lake's fault plan
//! (`LakeFaults`). Needs the `lake` feature: `cargo test --features lake --test lake`.

use crate::common;

use common::SplitMix64 as Rng;
use oncelake::{
    Batch, ClaimOutcome, Entry, LakeFault, LakeFaults, ManualClock, ObjectId, Options, Outcome,
    Store, VerifyOptions,
};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const T0: u64 = 1_800_000_000_000;

/// A lake of its own for each test (memory lakes are shared by name within the process).
fn lake_url(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("memory://{test}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// A memory lake of its own for one test, the directory its nodes live in, and their clock.
pub(crate) struct Lake {
    pub(crate) d: tempfile::TempDir,
    pub(crate) url: String,
    pub(crate) clock: ManualClock,
}

impl Lake {
    pub(crate) fn new(test: &str) -> Lake {
        Lake {
            d: tempfile::tempdir().unwrap(),
            url: lake_url(test),
            clock: ManualClock::new(T0),
        }
    }

    /// A `file://` lake of its own in its directory, and the lake's directory.
    pub(crate) fn on_files() -> (Lake, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let lake = d.path().join("lake");
        let url = file_lake(&lake);
        let clock = ManualClock::new(T0);
        (Lake { d, url, clock }, lake)
    }

    /// [`Lake::on_files`] whose node `a` has made `n` writes seeded by `seed`: the lake, its
    /// directory, node `a` and the writes.
    pub(crate) fn on_files_written_by_a(
        seed: u64,
        n: usize,
    ) -> (Lake, std::path::PathBuf, Store, Writes) {
        let (net, lake) = Lake::on_files();
        let a = net.node("a");
        let mut w = Writes::seeded(seed);
        w.on(&[&a], n);
        (net, lake, a, w)
    }

    /// Opens node `name` of the lake (a new one, or the one of that name again).
    pub(crate) fn node(&self, name: &str) -> Store {
        node(&self.d.path().join(name), &self.url, &self.clock)
    }
}

pub(crate) fn node(dir: &Path, url: &str, clock: &ManualClock) -> Store {
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

pub(crate) fn put(store: &Store, unit: &str, version: u64, bytes: &[u8]) -> Outcome {
    store.put(unit, version, bytes).unwrap().outcome
}

/// Every entry of a node's snapshot, after a sync: unit -> (version, object, seq).
pub(crate) fn entries(store: &Store) -> BTreeMap<String, (u64, ObjectId, u64)> {
    store.sync().unwrap();
    let snap = store.snapshot().unwrap();
    snap.iter()
        .unwrap()
        .map(|e| {
            let e: Entry = e.unwrap();
            (e.unit, (e.source_version, e.object.id, e.seq))
        })
        .collect()
}

/// The invariants a node's replica must hold: I1/I2 (verify: every entry's object is there,
/// with its size and CRC), I7 (replaying the log reproduces the manifest).
pub(crate) fn check_node(store: &Store) {
    store.sync().unwrap();
    let report = store.verify(VerifyOptions::default()).unwrap();
    assert!(report.is_ok(), "verify: {report:?}");
    let replay = oncelake::replay(&store.snapshot().unwrap()).unwrap();
    assert!(replay.problems.is_empty(), "replay: {replay:?}");
}

#[test]
fn a_commit_on_one_node_is_seen_by_another_after_sync_and_its_object_is_fetched() {
    let lake = Lake::new("seen");
    let (a, b) = (lake.node("a"), lake.node("b"));
    let out = put(&a, "orders/day=1", 7, b"parquet of day 1");
    let Outcome::Committed { seq, .. } = out else {
        panic!("expected a commit, got {out:?}");
    };
    // b has not synced: its replica is behind. After sync it reads a's commit and its bytes.
    b.sync().unwrap();
    let snap = b.snapshot().unwrap();
    let e = snap
        .get("orders/day=1")
        .unwrap()
        .expect("b sees a's commit");
    assert_eq!((e.source_version, e.seq), (7, seq));
    assert_eq!(snap.read_object(&e).unwrap(), b"parquet of day 1");
    assert_eq!(b.lake_url().as_deref(), Some(lake.url.as_str()));
    check_node(&a);
    check_node(&b);
}

#[test]
fn a_conflict_is_decided_by_the_same_rules_on_either_node() {
    let lake = Lake::new("conflict");
    let (a, b) = (lake.node("a"), lake.node("b"));
    let won = put(&a, "u", 1, b"first");
    assert!(matches!(won, Outcome::Committed { .. }), "{won:?}");
    let first = ObjectId::of(b"first");
    // Every commit syncs before it decides: b's replica was behind, its answer is not.
    for (store, bytes) in [(&b, &b"other"[..]), (&a, &b"other"[..])] {
        match put(store, "u", 1, bytes) {
            Outcome::Conflict { winner, .. } => assert_eq!(winner, first),
            o => panic!("expected a conflict, got {o:?}"),
        }
    }
    assert!(matches!(
        put(&b, "u", 1, b"first"),
        Outcome::Duplicate { .. }
    ));
    assert!(matches!(
        put(&b, "u", 0, b"older"),
        Outcome::Stale { current_version: 1 }
    ));
    assert_eq!(entries(&a), entries(&b));
}

/// What one writer was answered.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    unit: String,
    version: u64,
    object: ObjectId,
    outcome: Outcome,
}

/// Checks the answers of a run against the lake's final state, as the model says it must be:
/// at most one commit per unit version (I11), versions rising with seq (I5), every acknowledged
/// commit readable at its seq on every node (nothing acknowledged is missing), the current entry
/// the acknowledged commit of highest seq, and duplicates and conflicts naming that commit.
pub(crate) fn check_answers(answers: &[Answer], nodes: &[&Store]) {
    let mut committed: BTreeMap<(String, u64), (ObjectId, u64)> = BTreeMap::new();
    let mut model: BTreeMap<String, (u64, ObjectId, u64)> = BTreeMap::new();
    let mut seqs: HashMap<u64, String> = HashMap::new();
    for a in answers {
        if let Outcome::Committed { seq, .. } = a.outcome {
            let again = committed.insert((a.unit.clone(), a.version), (a.object, seq));
            assert!(again.is_none(), "two commits of {}@{}", a.unit, a.version);
            if let Some(other) = seqs.insert(seq, a.unit.clone()) {
                assert_eq!(
                    other, a.unit,
                    "seq {seq} answered for two units in two commits"
                );
            }
            let cur = model
                .entry(a.unit.clone())
                .or_insert((a.version, a.object, seq));
            if seq >= cur.2 {
                *cur = (a.version, a.object, seq);
            }
        }
    }
    // I5: per unit, committed versions rise with seq.
    let mut by_unit: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for ((unit, version), (_, seq)) in &committed {
        by_unit.entry(unit).or_default().push((*seq, *version));
    }
    for (unit, mut v) in by_unit {
        v.sort();
        assert!(v.windows(2).all(|w| w[0].1 < w[1].1), "{unit}: {v:?}");
    }
    for a in answers {
        match a.outcome {
            Outcome::Duplicate { seq } => {
                let (obj, s) = committed[&(a.unit.clone(), a.version)];
                assert_eq!((obj, s), (a.object, seq), "duplicate of {a:?}");
            }
            Outcome::Conflict { winner, winner_seq } => {
                let (obj, s) = committed[&(a.unit.clone(), a.version)];
                assert_eq!((obj, s), (winner, winner_seq), "conflict of {a:?}");
                assert_ne!(obj, a.object);
            }
            Outcome::Stale { current_version } => assert!(current_version > a.version),
            Outcome::Committed { .. } => {}
            o => panic!("unexpected answer {o:?} to {a:?}"),
        }
    }
    for n in nodes {
        let got = entries(n);
        assert_eq!(got, model, "a node's manifest differs from the model");
        let newest = n.last_seq().unwrap();
        for ((unit, _), (obj, seq)) in &committed {
            let snap = n.snapshot_at(*seq).unwrap();
            let e = snap
                .get(unit)
                .unwrap()
                .expect("an acknowledged commit is missing");
            assert_eq!((e.object.id, e.seq), (*obj, *seq));
            assert!(*seq <= newest);
        }
        check_node(n);
    }
}

/// Threads on several nodes commit overlapping unit versions, some with differing bytes.
fn race(url: &str, dir: &Path, nodes: usize, threads: usize, writes: usize, seed: u64) {
    let clock = ManualClock::new(T0);
    let stores: Vec<Store> = (0..nodes)
        .map(|i| node(&dir.join(format!("n{i}")), url, &clock))
        .collect();
    let answers = std::thread::scope(|s| {
        let hs: Vec<_> = (0..nodes * threads)
            .map(|t| {
                let store = stores[t % nodes].clone();
                s.spawn(move || {
                    let mut rng = Rng(seed ^ ((t as u64 + 1) * 0x1234_5678));
                    let mut out = Vec::new();
                    for _ in 0..writes {
                        let unit = format!("u{}", rng.below(6));
                        let version = 1 + rng.below(4);
                        let bytes = format!("{unit}@{version}#{}", rng.below(2));
                        let outcome = put(&store, &unit, version, bytes.as_bytes());
                        out.push(Answer {
                            unit,
                            version,
                            object: ObjectId::of(bytes.as_bytes()),
                            outcome,
                        });
                    }
                    out
                })
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(answers.len(), nodes * threads * writes);
    let refs: Vec<&Store> = stores.iter().collect();
    check_answers(&answers, &refs);
}

#[test]
fn nodes_racing_on_overlapping_units_agree_with_the_model() {
    let d = tempfile::tempdir().unwrap();
    race(&lake_url("race"), d.path(), 3, 3, 40, 0xA11CE);
}

#[test]
fn lost_responses_and_409s_never_commit_twice_nor_fail_a_winner() {
    let url = lake_url("lost");
    let plan = LakeFaults::install(url.trim_start_matches("memory://"), 7);
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock);
    let b = node(&d.path().join("b"), &url, &clock);
    let mut answers = Vec::new();
    for (i, fault) in [
        LakeFault::After,
        LakeFault::AfterAlreadyExists,
        LakeFault::Conflict,
        LakeFault::Before,
    ]
    .into_iter()
    .enumerate()
    {
        plan.script("log/", fault);
        let unit = format!("u{i}");
        let outcome = put(&a, &unit, 1, b"x");
        assert!(
            matches!(outcome, Outcome::Committed { .. }),
            "{fault:?}: {outcome:?}"
        );
        answers.push(Answer {
            unit: unit.clone(),
            version: 1,
            object: ObjectId::of(b"x"),
            outcome,
        });
        // The retry of the writer that won is a duplicate, on either node.
        for n in [&a, &b] {
            let again = put(n, &unit, 1, b"x");
            assert!(matches!(again, Outcome::Duplicate { .. }), "{again:?}");
            answers.push(Answer {
                outcome: again,
                ..answers.last().unwrap().clone()
            });
        }
    }
    let c = plan.counts();
    assert_eq!(
        (c.lost_responses, c.conflicts, c.before),
        (2, 1, 1),
        "{c:?}"
    );
    // Four groups, four segments: a lost response never wrote a second one.
    assert_eq!(a.last_seq().unwrap(), 4);
    check_answers(&answers, &[&a, &b]);
}

#[test]
fn random_faults_under_a_race_keep_every_answer_definitive_and_right() {
    // Which requests draw a fault depends on how the threads interleave, so one race may miss a
    // kind: race again, on a fresh lake, until every kind was injected (each race checks all of
    // its answers), and fail if eight races never injected one.
    let (mut lost, mut conflicts, mut before) = (0, 0, 0);
    for round in 0..8u64 {
        let url = lake_url("faulty-race");
        let plan = LakeFaults::install(url.trim_start_matches("memory://"), 11 + round);
        plan.set_rates(oncelake::FaultRates {
            before: 40,
            after: 40,
            conflict: 40,
            after_already_exists: 40,
            max_latency_ms: 2,
        });
        let d = tempfile::tempdir().unwrap();
        race(&url, d.path(), 3, 2, 30, 0xFA17 + round);
        let c = plan.counts();
        (lost, conflicts, before) = (
            lost + c.lost_responses,
            conflicts + c.conflicts,
            before + c.before,
        );
        if lost > 0 && conflicts > 0 && before > 0 {
            return;
        }
    }
    panic!("eight races injected {lost} lost responses, {conflicts} conflicts, {before} failures before the write: every kind must occur");
}

#[test]
fn a_takeover_on_one_node_fences_the_old_holder_on_another_whatever_its_clock_says() {
    let url = lake_url("fence");
    let d = tempfile::tempdir().unwrap();
    // Each node has its own clock: a's stands still (it was paused past its lease), b's moved.
    let clock_a = ManualClock::new(T0);
    let clock_b = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock_a);
    let b = node(&d.path().join("b"), &url, &clock_b);
    let ttl = Duration::from_secs(30);
    let ClaimOutcome::Granted { lease: old, .. } = a.claim("u", 1, "wa", ttl).unwrap() else {
        panic!("a's claim is granted");
    };
    // While the lease is live by b's clock, b is told it is held.
    assert!(matches!(
        b.claim("u", 1, "wb", ttl).unwrap(),
        ClaimOutcome::Held { .. }
    ));
    clock_b.advance_ms(31_000);
    let ClaimOutcome::Granted {
        lease: new,
        took_over,
    } = b.claim("u", 1, "wb", ttl).unwrap()
    else {
        panic!("b takes the expired lease over");
    };
    assert!(took_over && new.token > old.token);
    // a's clock says its lease is live; the log says it was taken over: fenced.
    let staged = a.stage_bytes(b"late").unwrap();
    let late = a
        .commit(Batch::new().put_fenced("u", 1, &staged, old.token))
        .unwrap();
    match late.units[0].outcome {
        Outcome::Fenced {
            token,
            newest_token,
        } => assert_eq!((token, newest_token), (old.token, new.token)),
        o => panic!("expected fenced, got {o:?}"),
    }
    let staged = b.stage_bytes(b"new holder").unwrap();
    let ok = b
        .commit(Batch::new().put_fenced("u", 1, &staged, new.token))
        .unwrap();
    assert!(matches!(ok.units[0].outcome, Outcome::Committed { .. }));
    let e = a.snapshot().map(|_| ()).and_then(|_| {
        a.sync()?;
        a.get("u")
    });
    assert_eq!(e.unwrap().unwrap().object.id, ObjectId::of(b"new holder"));
}

#[test]
fn a_node_reopened_or_joining_late_catches_up_from_the_lake() {
    let lake = Lake::new("join");
    let (a, b) = (lake.node("a"), lake.node("b"));
    for i in 0..20u64 {
        let n = if i % 2 == 0 { &a } else { &b };
        assert!(matches!(
            put(n, &format!("u{}", i % 7), i + 1, format!("v{i}").as_bytes()),
            Outcome::Committed { .. }
        ));
    }
    drop(a);
    put(&b, "after-a-closed", 1, b"x");
    // Reopened without naming the lake: the directory's binding names it.
    let a = Store::open(lake.d.path().join("a")).unwrap();
    assert_eq!(entries(&a), entries(&b));
    let c = lake.node("c");
    assert_eq!(entries(&c), entries(&b));
    assert_eq!(common::current_bytes(&c, "after-a-closed"), b"x");
    check_node(&c);
}

#[test]
fn a_binding_is_kept_and_a_local_store_with_commits_is_not_bound() {
    let url = lake_url("bind");
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    drop(node(&d.path().join("a"), &url, &clock));
    let other = Store::open_with(
        d.path().join("a"),
        Options {
            lake: Some(lake_url("bind-other")),
            ..Options::default()
        },
    );
    assert!(other
        .unwrap_err()
        .to_string()
        .contains("is a node of the lake"));
    let local = Store::open(d.path().join("local")).unwrap();
    local.put("u", 1, b"x").unwrap();
    drop(local);
    let bound = Store::open_with(
        d.path().join("local"),
        Options {
            lake: Some(url.clone()),
            ..Options::default()
        },
    );
    assert!(bound
        .unwrap_err()
        .to_string()
        .contains("local store with commits"));
    let bad = Store::open_with(
        d.path().join("bad"),
        Options {
            lake: Some("http://nope".into()),
            ..Options::default()
        },
    );
    assert!(bad.unwrap_err().to_string().contains("s3://BUCKET/PREFIX"));
}

// ---- Checkpoints in the lake ----------------------------------------------------------------

/// Random writes and their answers, for `check_answers`.
pub(crate) struct Writes {
    rng: Rng,
    pub(crate) answers: Vec<Answer>,
}

impl Writes {
    pub(crate) fn seeded(seed: u64) -> Writes {
        Writes {
            rng: Rng(seed),
            answers: Vec::new(),
        }
    }

    /// `n` writes spread over `nodes`, on overlapping unit versions (some with differing bytes),
    /// a claim now and then; each answer recorded.
    pub(crate) fn on(&mut self, nodes: &[&Store], n: usize) {
        let rng = &mut self.rng;
        for _ in 0..n {
            let store = nodes[rng.below(nodes.len() as u64) as usize];
            let unit = format!("u{}", rng.below(12));
            let version = 1 + rng.below(8);
            let bytes = format!("{unit}@{version}#{}", rng.below(2));
            if rng.chance(10) {
                let claimed = store.claim(
                    &format!("job/{unit}"),
                    version,
                    "w",
                    Duration::from_secs(60),
                );
                assert!(claimed.is_ok(), "{claimed:?}");
            }
            let outcome = put(store, &unit, version, bytes.as_bytes());
            self.answers.push(Answer {
                unit,
                version,
                object: ObjectId::of(bytes.as_bytes()),
                outcome,
            });
        }
    }
}

/// A node that writes a checkpoint at the lake's head agrees with every other node's replica:
/// the checkpoint's per-table digests cover the whole replicated state (manifest, history, log,
/// claims, extensions, meta), so this is an equality check of the complete replicas.
pub(crate) fn assert_same_state(writer: &Store, others: &[&Store]) {
    let w = writer.checkpoint().unwrap();
    for o in others {
        let r = o.checkpoint().unwrap();
        assert_eq!(r.segment, w.segment, "the nodes are at different segments");
        assert!(
            !r.written,
            "the checkpoint at {} was there already",
            r.segment
        );
    }
}

/// A scratch directory, the `file://` lake in it (its directory and URL), and a clock at `T0`.
/// Flips one bit in the middle of the file at `path` (damage a checksum must catch).
pub(crate) fn flip_a_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(path, &bytes).unwrap();
}

pub(crate) fn file_lake(dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    format!("file://{}", dir.display())
}

pub(crate) fn ckpt_file(lake: &Path, n: u64) -> std::path::PathBuf {
    lake.join(format!("checkpoints/{n:020}.ckpt"))
}

#[test]
fn a_new_node_starts_from_the_newest_checkpoint_and_equals_a_full_replay() {
    for seed in [1u64, 2, 3] {
        let lake = Lake::new("ckpt");
        let a = lake.node("a");
        // b replays the whole log (it joins before any checkpoint exists).
        let b = lake.node("b");
        assert_eq!(b.lake_seeded_from(), None);
        let mut w = Writes::seeded(seed);
        w.on(&[&a, &b], 60);
        let first = a.checkpoint().unwrap();
        assert!(first.written && first.segment > 0, "{first:?}");
        // The tail after it.
        w.on(&[&a, &b], 40);
        let c = lake.node("c");
        assert_eq!(c.lake_seeded_from(), Some(first.segment), "seed {seed}");
        check_answers(&w.answers, &[&a, &b, &c]);
        assert_same_state(&a, &[&b, &c]);
        // The new node goes on like any other, and is reopened from its own replica.
        w.on(&[&c, &a], 20);
        drop(c);
        let c = Store::open(lake.d.path().join("c")).unwrap();
        assert_eq!(c.lake_seeded_from(), None);
        check_answers(&w.answers, &[&a, &b, &c]);
        assert_same_state(&b, &[&a, &c]);
    }
}

#[test]
fn a_lagging_listing_only_costs_a_longer_tail() {
    let name = format!("ckpt-lag-{}", std::process::id());
    let faults = LakeFaults::install(&name, 7);
    let url = format!("memory://{name}");
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock);
    let mut w = Writes::seeded(11);
    w.on(&[&a], 30);
    let older = a.checkpoint().unwrap().segment;
    w.on(&[&a], 30);
    let newer = a.checkpoint().unwrap().segment;
    assert!(newer > older);
    w.on(&[&a], 10);
    // The listing misses the newest checkpoint: the older one and a longer tail.
    faults.set_list_lag(1);
    let b = node(&d.path().join("b"), &url, &clock);
    assert_eq!(b.lake_seeded_from(), Some(older));
    // It misses both: the whole log.
    faults.set_list_lag(2);
    let c = node(&d.path().join("c"), &url, &clock);
    assert_eq!(c.lake_seeded_from(), None);
    faults.set_list_lag(0);
    let e = node(&d.path().join("e"), &url, &clock);
    assert_eq!(e.lake_seeded_from(), Some(newer));
    check_answers(&w.answers, &[&a, &b, &c, &e]);
    assert_same_state(&a, &[&b, &c, &e]);
}

#[test]
fn a_damaged_checkpoint_is_skipped_and_a_crash_mid_checkpoint_leaves_the_lake_usable() {
    let (net, lake, a, mut w) = Lake::on_files_written_by_a(5, 20);
    let older = a.checkpoint().unwrap().segment;
    w.on(&[&a], 20);
    let newer = a.checkpoint().unwrap().segment;
    // What a crash mid-upload can leave: a temporary file beside the checkpoints (the lake's
    // put-if-absent makes an object visible whole or not at all).
    std::fs::write(lake.join("checkpoints/partial.tmp"), b"half a checkpo").unwrap();
    // The newest checkpoint damaged: a flipped byte in its database.
    let path = ckpt_file(&lake, newer);
    flip_a_byte(&path);
    let b = net.node("b");
    assert_eq!(b.lake_seeded_from(), Some(older));
    // Both damaged (the older one truncated): the whole log.
    let path = ckpt_file(&lake, older);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 3)
        .unwrap();
    let c = net.node("c");
    assert_eq!(c.lake_seeded_from(), None);
    w.on(&[&a, &b, &c], 10);
    check_answers(&w.answers, &[&a, &b, &c]);
    assert_same_state(&c, &[&a, &b]);
}

#[test]
fn checkpoints_are_written_every_k_segments_by_themselves() {
    let (net, lake) = Lake::on_files();
    let a = Store::open_with(
        net.d.path().join("a"),
        Options {
            lake: Some(net.url.clone()),
            clock: Arc::new(net.clock.clone()),
            lake_checkpoint_every: 4,
            ..Options::default()
        },
    )
    .unwrap();
    let mut answers = Vec::new();
    for i in 0..10u64 {
        let bytes = format!("v{i}");
        let outcome = put(&a, &format!("u{i}"), 1, bytes.as_bytes());
        assert!(matches!(outcome, Outcome::Committed { .. }), "{outcome:?}");
        answers.push(Answer {
            unit: format!("u{i}"),
            version: 1,
            object: ObjectId::of(bytes.as_bytes()),
            outcome,
        });
    }
    // Written in the background after segments 4 and 8, one at a time: one that is won while
    // an earlier one runs is skipped.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let written = || {
        [4u64, 8]
            .into_iter()
            .filter(|n| ckpt_file(&lake, *n).exists())
            .max()
    };
    while written().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let newest_before = written();
    for n in [1, 2, 3, 5, 6, 7, 9, 10] {
        assert!(!ckpt_file(&lake, n).exists(), "checkpoint {n} written");
    }
    // A new node starts from the newest checkpoint listed when it opens: checkpoint 8 may still
    // be being written while it opens, so that is one of those written before or after.
    let b = net.node("b");
    let newest_after = written();
    let seeded = b.lake_seeded_from();
    assert!(
        seeded.is_some() && seeded >= newest_before && seeded <= newest_after,
        "seeded from {seeded:?}; written before its open {newest_before:?}, after {newest_after:?}"
    );
    check_answers(&answers, &[&a, &b]);
}

#[test]
fn a_forged_divergence_is_detected_and_named() {
    let d = tempfile::tempdir().unwrap();
    let url = lake_url("diverge");
    let clock = ManualClock::new(T0);
    let a = node(&d.path().join("a"), &url, &clock);
    let b = node(&d.path().join("b"), &url, &clock);
    put(&a, "u", 1, b"x");
    assert!(matches!(
        a.claim("job", 1, "w", Duration::from_secs(60)).unwrap(),
        ClaimOutcome::Granted { .. }
    ));
    put(&a, "v", 1, b"y");
    b.sync().unwrap();
    drop(b);
    // Forge: b's replica loses its claims behind the engine's back (every other row intact,
    // every seal valid).
    {
        let db = redb::Database::open(d.path().join("b").join(oncelake::DB_FILE)).unwrap();
        let w = db.begin_write().unwrap();
        w.delete_table(redb::TableDefinition::<&str, &[u8]>::new("claims"))
            .unwrap();
        w.commit().unwrap();
    }
    let b = Store::open(d.path().join("b")).unwrap();
    a.checkpoint().unwrap();
    let e = b.checkpoint().unwrap_err();
    assert!(matches!(e, oncelake::Error::Corrupt { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("diverged") && msg.contains("claims"), "{msg}");
    assert!(!msg.contains("manifest"), "only the claims differ: {msg}");
    // The store is failed: nothing more is decided from the diverged replica.
    assert!(b.put("w", 1, b"z").is_err());
    // The other node is unaffected.
    a.checkpoint().unwrap();
    assert!(matches!(put(&a, "w", 1, b"z"), Outcome::Committed { .. }));
}

#[test]
fn a_damaged_segment_fails_the_store_cleanly() {
    let (net, lake) = Lake::on_files();
    let (a, b) = (net.node("a"), net.node("b"));
    put(&a, "u", 1, b"x");
    b.sync().unwrap();
    put(&a, "u", 2, b"y");
    put(&a, "v", 1, b"z");
    let seg = lake.join("log/00000000000000000002");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[20] ^= 0x08;
    std::fs::write(&seg, &bytes).unwrap();
    // A node that reaches it: Corrupt, naming the log, and failed; no panic.
    let e = b.sync().unwrap_err();
    assert!(matches!(e, oncelake::Error::Corrupt { .. }), "{e:?}");
    assert!(e.to_string().contains("segment 2"), "{e}");
    assert!(b.put("w", 1, b"w").is_err());
    // A new node that replays through it is refused the same way.
    let e = Store::open_with(
        net.d.path().join("c"),
        Options {
            lake: Some(net.url.clone()),
            ..Options::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, oncelake::Error::Corrupt { .. }), "{e:?}");
}

/// P10's open figure: a new node opens a lake of `ONCELAKE_P10_UNITS` units (default 1,000,000)
/// from its newest checkpoint plus a tail of 10 segments, beside the same-run baseline of a node
/// replaying the whole log; on a `memory://` lake and a `file://` one. Prints the figures (never
/// asserts a speed): `cargo test --release --features lake --test lake -- --ignored p10 --nocapture`.
#[test]
#[ignore]
fn p10_a_new_node_opens_a_big_lake_from_its_checkpoint() {
    let units: u64 = common::env_or("ONCELAKE_P10_UNITS", 1_000_000);
    let d = tempfile::tempdir().unwrap();
    for url in [lake_url("p10"), file_lake(&d.path().join("lake"))] {
        let kind = &url[..url.find(':').unwrap()];
        let dir = d.path().join(kind);
        let opts = || Options {
            lake: Some(url.clone()),
            lake_checkpoint_every: 0,
            ..Options::default()
        };
        let a = Store::open_with(dir.join("a"), opts()).unwrap();
        let t = std::time::Instant::now();
        let staged = a.stage_bytes(b"one small object").unwrap();
        let per = 4096u64;
        let mut done = 0u64;
        while done < units {
            let mut b = Batch::new();
            for i in done..(done + per).min(units) {
                b = b.put(format!("table/part={:07}", i), 1, &staged);
            }
            done = (done + per).min(units);
            a.commit(b).unwrap();
        }
        let build = t.elapsed();
        let t = std::time::Instant::now();
        let r = a.checkpoint().unwrap();
        let write = t.elapsed();
        for i in 0..10 {
            a.commit(Batch::new().put(format!("tail/{i}"), 1, &staged))
                .unwrap();
        }
        let t = std::time::Instant::now();
        let n = Store::open_with(dir.join("new"), opts()).unwrap();
        let open = t.elapsed();
        assert_eq!(n.lake_seeded_from(), Some(r.segment));
        assert_eq!(n.last_seq().unwrap(), a.last_seq().unwrap());
        drop(n);
        // The same-run baseline: replaying the whole log (no checkpoint listed).
        std::fs::create_dir_all(dir.join("replay")).unwrap();
        let t = std::time::Instant::now();
        let replayed = if kind == "file" {
            let ck = d.path().join("lake/checkpoints");
            std::fs::rename(&ck, d.path().join("hidden")).unwrap();
            let s = Store::open_with(dir.join("replay"), opts()).unwrap();
            std::fs::rename(d.path().join("hidden"), &ck).unwrap();
            Some(s)
        } else {
            None
        };
        let replay = t.elapsed();
        println!(
            "P10 open {kind}: {units} units in {} segments (built in {build:.1?}); checkpoint of \
             segment {} = {} MB written in {write:.2?}; new node open (checkpoint + 10-segment \
             tail) {open:.2?}{}",
            r.segment,
            r.segment,
            r.bytes >> 20,
            match replayed {
                Some(_) => format!("; full replay of the log {replay:.2?}"),
                None => String::new(),
            }
        );
    }
}
