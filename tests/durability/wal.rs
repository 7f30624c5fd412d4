//! The write-ahead path of durable commits (docs/commit.md, "The write-ahead path"): a group is
//! acknowledged once its record in `wal.redb` is synced, the database is written unsynced and
//! checkpointed in bulk, and an open replays what the database lacks.
//!
//! * a power cut (torn tails, a random subset of the unsynced writes kept) at every file
//!   operation of a workload loses no acknowledged commit, keeps every batch whole, keeps every
//!   acknowledged seq's view for time travel, and reuses no seq;
//! * acknowledged commits survive a cut that loses *every* unsynced write: they are in the log
//!   only, and the open puts them back;
//! * every kind of row a group writes (claims, renewals, releases, corrections) comes back from
//!   the log alone: a live lease still holds and no token is handed out twice (I6 across a cut);
//! * a read-only open of a store that needs its log replayed says what to do;
//! * a store of format 2 or 3 (development builds only) is refused by both opens, unchanged.

use crate::common;

use common::{copy_dir, faulty_options, real_options, scratch, SplitMix64};
use oncelake::fault::FaultPlan;
use oncelake::seal;
use oncelake::{
    Batch, ClaimOutcome, Error, Intent, ManualClock, Options, Outcome, RenewOutcome, Store,
    MARKER_FILE,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const T0: u64 = 1_700_000_000_000;

/// unit → (source version, object hex).
type Model = BTreeMap<String, (u64, String)>;

fn view(snap: &oncelake::Snapshot) -> Model {
    snap.iter()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.unit.clone(), (e.source_version, e.object.id.to_hex()))
        })
        .collect()
}

/// One step of the workload: a batch (units, versions, contents); all-or-nothing.
type Step = Vec<(String, u64, Vec<u8>)>;

/// A scripted workload: batches of 1–3 distinct units, mostly newer versions (accepted), now and
/// then an older version in the batch (the whole batch is refused as stale).
fn script(steps: usize) -> Vec<Step> {
    let mut rng = SplitMix64(7);
    let mut versions: BTreeMap<String, u64> = BTreeMap::new();
    let mut out = Vec::with_capacity(steps);
    for i in 0..steps {
        let n = 1 + rng.below(3) as usize;
        let mut units: Vec<String> = Vec::new();
        while units.len() < n {
            let u = format!("u{}", rng.below(6));
            if !units.contains(&u) {
                units.push(u);
            }
        }
        let stale = i % 5 == 4 && versions.get(&units[0]).is_some_and(|v| *v > 0);
        let step: Step = units
            .iter()
            .enumerate()
            .map(|(j, u)| {
                let v = versions.get(u).copied().unwrap_or(0);
                let version = if stale && j == 0 { v - 1 } else { v + 1 };
                (
                    u.clone(),
                    version,
                    format!("step {i} unit {j}").into_bytes(),
                )
            })
            .collect();
        if !stale {
            for (u, v, _) in &step {
                versions.insert(u.clone(), *v);
            }
        }
        out.push(step);
    }
    out
}

/// The model after `step`, if all-or-nothing R3 accepts it on `model`.
fn apply(model: &Model, step: &Step) -> Option<Model> {
    let mut next = model.clone();
    for (u, v, bytes) in step {
        let cur = model.get(u).map(|c| c.0).unwrap_or(0);
        if *v <= cur {
            return None;
        }
        next.insert(u.clone(), (*v, oncelake::ObjectId::of(bytes).to_hex()));
    }
    Some(next)
}

/// What the workload was told: each acknowledged commit's seq and view, and the step in flight
/// when an error stopped it.
#[derive(Default)]
struct Acked {
    views: Vec<(u64, Model)>,
    model: Model,
    in_flight: Option<Step>,
}

fn run(store: &Store, steps: &[Step]) -> Acked {
    run_on(store, steps, Acked::default())
}

/// [`run`] on a store that already holds what `acked` says.
fn run_on(store: &Store, steps: &[Step], mut acked: Acked) -> Acked {
    for step in steps {
        let staged: Result<Vec<_>, _> = step.iter().map(|(_, _, b)| store.stage_bytes(b)).collect();
        let Ok(staged) = staged else {
            return acked;
        };
        let mut batch = Batch::new();
        for ((u, v, _), s) in step.iter().zip(&staged) {
            batch = batch.put(u, *v, s);
        }
        acked.in_flight = Some(step.clone());
        let Ok(report) = store.commit(batch) else {
            return acked;
        };
        acked.in_flight = None;
        match (report.seq, apply(&acked.model, step)) {
            (Some(seq), Some(next)) => {
                acked.model = next;
                acked.views.push((seq, acked.model.clone()));
            }
            (None, None) => {}
            (seq, next) => panic!("the store answered {seq:?} where the model says {next:?}"),
        }
    }
    acked
}

/// After the power cut and a reopen: every acknowledged view is there as of its seq, the current
/// state is the acknowledged one or that plus the whole step in flight, verify is clean, and the
/// next commit gets the next seq.
fn check(dir: &Path, clock: &ManualClock, acked: &Acked, label: &str) {
    let store = Store::open_with(dir, real_options(clock))
        .unwrap_or_else(|e| panic!("{label}: reopen failed: {e}"));
    let snap = store.snapshot().unwrap();
    let now = view(&snap);
    let last_seq = acked.views.last().map(|v| v.0).unwrap_or(0);
    let with_flight = acked
        .in_flight
        .as_ref()
        .and_then(|s| apply(&acked.model, s));
    if now == acked.model {
        assert_eq!(
            snap.seq(),
            last_seq,
            "{label}: no seq beyond the acknowledged"
        );
    } else {
        assert_eq!(
            Some(&now),
            with_flight.as_ref(),
            "{label}: the state is neither the acknowledged one nor that plus the whole batch in flight"
        );
        assert_eq!(snap.seq(), last_seq + 1, "{label}");
    }
    for (seq, model) in &acked.views {
        let old = store.snapshot_at(*seq).unwrap();
        assert_eq!(&view(&old), model, "{label}: the view as of seq {seq}");
    }
    let report = store.verify(Default::default()).unwrap();
    assert!(report.is_intact(), "{label}: verify: {report:?}");
    let s = store.stage_bytes(b"after the cut").unwrap();
    let r = store.commit(Batch::new().put("after", 1, &s)).unwrap();
    assert_eq!(r.seq, Some(snap.seq() + 1), "{label}: no seq is reused");
}

/// A new store `lake` in `tmp` opened through a fault plan that loses every unsynced write at a
/// cut: what it acknowledges survives in the write-ahead log alone.
fn losing_unsynced_writes(
    tmp: &tempfile::TempDir,
) -> (PathBuf, ManualClock, std::sync::Arc<FaultPlan>, Store) {
    let dir = tmp.path().join("lake");
    let clock = ManualClock::new(T0);
    let (plan, store) = common::created_then_losing_unsynced(&dir, &clock);
    (dir, clock, plan, store)
}

/// A power cut now that keeps no unsynced write of the store's database.
fn cut_every_unsynced_write(plan: &FaultPlan, store: Store, dir: &Path) {
    plan.crash_now();
    drop(store);
    plan.apply_power_loss(&dir.join(oncelake::DB_FILE)).unwrap();
}

/// A store `name` in `tmp` that ran `steps` steps of the script and was closed.
fn written(tmp: &tempfile::TempDir, name: &str, steps: usize) -> (PathBuf, ManualClock, Acked) {
    let dir = tmp.path().join(name);
    let clock = ManualClock::new(T0);
    let store = Store::open_with(&dir, real_options(&clock)).unwrap();
    let acked = run(&store, &script(steps));
    drop(store);
    (dir, clock, acked)
}

/// The store's change feed from the start, a record a line.
fn feed(store: &Store) -> Vec<String> {
    store
        .snapshot()
        .unwrap()
        .changes_since(0)
        .unwrap()
        .map(|r| format!("{:?}", r.unwrap()))
        .collect()
}

#[test]
fn a_power_cut_at_any_operation_loses_no_acknowledged_commit_and_tears_no_batch() {
    let tmp = scratch("oncelake-wal");
    let template = tmp.path().join("template");
    // The clock stands still: no checkpoint by time, so the database is written unsynced and
    // only the log makes groups durable (a checkpoint also comes every 64 groups).
    let clock = ManualClock::new(T0);
    drop(Store::open_with(&template, real_options(&clock)).unwrap());
    let steps = script(80);

    let counted = tmp.path().join("counted");
    copy_dir(&template, &counted);
    let plan = FaultPlan::new();
    let store = Store::open_with(&counted, faulty_options(&plan, &clock)).unwrap();
    let first = plan.ops() + 1;
    let acked = run(&store, &steps);
    let last = plan.ops();
    assert!(acked.views.len() > 40, "the script commits");
    drop(store);

    let mut cuts = 0;
    // Every operation of the workload, in steps of 3 to bound the time by default;
    // ONCELAKE_WAL_CUT_STEP=1 cuts at every one (ONCELAKE_WAL_CUT_OFFSET shifts the start).
    let knob = |name: &str, default: u64| {
        std::env::var(name).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        })
    };
    let step = knob("ONCELAKE_WAL_CUT_STEP", 3).max(1) as usize;
    let offset = knob("ONCELAKE_WAL_CUT_OFFSET", 0);
    for n in (first + offset..=last).step_by(step) {
        let dir = tmp.path().join(format!("cut{n}"));
        copy_dir(&template, &dir);
        let plan = FaultPlan::new();
        plan.lose_unsynced_writes(true);
        plan.crash_at(n);
        let store = Store::open_with(&dir, faulty_options(&plan, &clock)).unwrap();
        let acked = run(&store, &steps);
        drop(store);
        let report = plan
            .apply_power_loss_seeded(&dir.join(oncelake::DB_FILE), n)
            .unwrap();
        cuts += usize::from(report.db_torn);
        check(&dir, &clock, &acked, &format!("power cut at op {n}"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(cuts > 0, "some cut tore a database write");
}

#[test]
fn acknowledged_commits_are_in_the_log_alone_and_the_open_replays_them() {
    let tmp = scratch("oncelake-wal");
    let (dir, clock, plan, store) = losing_unsynced_writes(&tmp);
    let acked = run(&store, &script(30));
    assert!(acked.in_flight.is_none());
    // The pessimistic cut: every unsynced write is lost, so the database keeps nothing the
    // groups wrote (none was a checkpoint): whatever is there came from the log.
    cut_every_unsynced_write(&plan, store, &dir);
    {
        let raw = redb::Database::open(dir.join(oncelake::DB_FILE)).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&raw).unwrap();
        let manifest: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("manifest");
        let t = txn.open_table(manifest).unwrap();
        assert_eq!(
            redb::ReadableTableMetadata::len(&t).unwrap(),
            0,
            "the database itself holds no commit"
        );
    }

    // Read-only, the store is answered from the log replayed in memory: every acknowledged
    // commit, and not a byte of the store written.
    let ro = Options {
        read_only: true,
        ..real_options(&clock)
    };
    let before = common::tree(&dir);
    let store = Store::open_with(&dir, ro.clone()).unwrap();
    assert_eq!(view(&store.snapshot().unwrap()), acked.model);
    drop(store);
    assert_eq!(
        common::tree(&dir),
        before,
        "a read-only open writes nothing"
    );

    check(&dir, &clock, &acked, "after the cut");
    // After a clean close the log is empty and a read-only open works.
    let store = Store::open_with(&dir, ro).unwrap();
    assert_eq!(
        view(&store.snapshot().unwrap()).len(),
        acked.model.len() + 1
    );
}

#[test]
fn a_format_2_store_is_refused_unchanged() {
    let tmp = scratch("oncelake-wal");
    let (dir, clock, _) = written(&tmp, "lake", 20);
    // Rewrite it as format 2 wrote it: no log file, no applied-group counter, format 2.
    std::fs::remove_file(dir.join("wal.redb")).unwrap();
    {
        let db = redb::Database::create(dir.join(oncelake::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let meta: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("store_meta");
            let mut t = txn.open_table(meta).unwrap();
            t.remove("wal_group").unwrap();
            let v = seal("meta", b"format", 2u64.to_le_bytes().to_vec());
            t.insert("format", v.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    std::fs::write(dir.join(MARKER_FILE), "oncelake store\nformat 2\n").unwrap();
    refused_unchanged(&dir, &clock, 2);
}

/// A store of an older format is refused by both opens, with every file as it was (no format
/// before 4 was released: none is upgraded, see docs/format.md).
fn refused_unchanged(dir: &Path, clock: &ManualClock, format: u32) {
    let before = common::tree(dir);
    for read_only in [true, false] {
        let options = Options {
            read_only,
            ..real_options(clock)
        };
        match Store::open_with(dir, options) {
            Err(oncelake::Error::OlderFormat { found, .. }) => assert_eq!(found, format),
            other => panic!("format {format}, read_only {read_only}: {other:?}"),
        }
        assert_eq!(common::tree(dir), before, "read_only {read_only}");
    }
}

/// Rewrites a closed store as format 3 wrote it: the history also holds every current entry
/// (a copy of its manifest row), and the meta table and the marker say format 3.
fn rewrite_as_format_3(dir: &Path) -> usize {
    use redb::ReadableTable;
    let db = redb::Database::create(dir.join(oncelake::DB_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    let copies;
    {
        let manifest: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("manifest");
        let history: redb::TableDefinition<(&str, u64), &[u8]> =
            redb::TableDefinition::new("history");
        let rows: Vec<(String, Vec<u8>)> = txn
            .open_table(manifest)
            .unwrap()
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                (k.value().to_string(), v.value().to_vec())
            })
            .collect();
        let mut h = txn.open_table(history).unwrap();
        for (unit, v) in &rows {
            let payload = &v[..v.len() - 4];
            // The entry's seq sits after version (8), revision (4), hash (32), size (8), crc (4).
            let seq = u64::from_le_bytes(payload[56..64].try_into().unwrap());
            let mut key = unit.as_bytes().to_vec();
            key.extend_from_slice(&seq.to_le_bytes());
            assert!(
                h.get((unit.as_str(), seq)).unwrap().is_none(),
                "format 4 keeps no copy"
            );
            h.insert(
                (unit.as_str(), seq),
                seal("history", &key, payload.to_vec()).as_slice(),
            )
            .unwrap();
        }
        copies = rows.len();
        let meta: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("store_meta");
        let mut t = txn.open_table(meta).unwrap();
        let v = seal("meta", b"format", 3u64.to_le_bytes().to_vec());
        t.insert("format", v.as_slice()).unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    std::fs::write(dir.join(MARKER_FILE), "oncelake store\nformat 3\n").unwrap();
    copies
}

#[test]
fn a_format_3_store_is_refused_unchanged() {
    let tmp = scratch("oncelake-wal");
    let (dir, clock, acked) = written(&tmp, "lake", 30);
    let copies = rewrite_as_format_3(&dir);
    assert_eq!(copies, acked.model.len());
    refused_unchanged(&dir, &clock, 3);
}

#[test]
fn a_store_whose_log_is_missing_or_damaged_is_refused_not_opened_without_it() {
    let tmp = scratch("oncelake-wal");
    let (base, clock, _) = written(&tmp, "base", 5);
    // Missing: it could have held acknowledged commits, so the open refuses and says so.
    let missing = tmp.path().join("missing");
    copy_dir(&base, &missing);
    std::fs::remove_file(missing.join("wal.redb")).unwrap();
    let err = Store::open_with(&missing, real_options(&clock)).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("write-ahead log"), "{err}");
    assert!(!missing.join("wal.redb").exists(), "nothing was recreated");
    // Not a redb file at all.
    let garbage = tmp.path().join("garbage");
    copy_dir(&base, &garbage);
    std::fs::write(garbage.join("wal.redb"), vec![0x5a; 8192]).unwrap();
    let err = Store::open_with(&garbage, real_options(&clock)).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(
        std::fs::read(garbage.join("wal.redb")).unwrap(),
        vec![0x5a; 8192],
        "the damaged log is left as it was"
    );
}

/// The counters the store itself persists (`Scope::Store`), by name.
fn store_counters(store: &Store) -> Vec<(&'static str, u64)> {
    let m = store.metrics();
    m.counters()
        .into_iter()
        .filter(|(name, _)| {
            matches!(
                oncelake::metrics::scope_of(name),
                oncelake::metrics::Scope::Store
            )
        })
        .collect()
}

/// A lease on `unit` at version 1 for `worker`, which must be granted.
fn granted(store: &Store, unit: &str, worker: &str) -> oncelake::Lease {
    match store
        .claim(unit, 1, worker, Duration::from_secs(600))
        .unwrap()
    {
        ClaimOutcome::Granted { lease, .. } => lease,
        other => panic!("claim of {unit}: {other:?}"),
    }
}

/// A fenced put: `unit` at `version` with `bytes`, under `token` if given.
fn put_with(store: &Store, unit: &str, version: u64, bytes: &[u8], token: Option<u64>) -> Outcome {
    let staged = store.stage_bytes(bytes).unwrap();
    let batch = Batch::new().item(unit.to_string(), version, &staged, token, Intent::Put);
    store.commit(batch).unwrap().units[0].outcome
}

/// Every kind of write a group can hold — puts, corrections, claims, renewals, releases and a
/// commit that ends its lease — comes back from the log alone, row for row: the change feed is the
/// same record for record, the manifest and the persisted counters are the same, a lease that was
/// live is still held against another worker and still makes a token-less put busy, and no token
/// is handed out twice (I6 across the cut).
#[test]
fn claims_renewals_releases_and_corrections_come_back_from_the_log_alone() {
    let tmp = scratch("oncelake-wal");
    let (dir, clock, plan, store) = losing_unsynced_writes(&tmp);
    let ttl = Duration::from_secs(600);
    assert!(matches!(
        put_with(&store, "a", 1, b"a1", None),
        Outcome::Committed { .. }
    ));
    assert!(matches!(
        store.correct("a", 1, b"a1-fixed").unwrap().outcome,
        Outcome::Committed { revision: 1, .. }
    ));
    let b = granted(&store, "b", "w1");
    assert!(matches!(
        store.renew(&b, ttl).unwrap(),
        RenewOutcome::Renewed(_)
    ));
    let c = granted(&store, "c", "w2");
    assert!(store.release(&c).unwrap().is_released());
    let d = granted(&store, "d", "w3");
    assert!(matches!(
        put_with(&store, "d", 1, b"d1", Some(d.token)),
        Outcome::Committed { .. }
    ));
    let held = granted(&store, "e", "w4");
    let before_feed = feed(&store);
    let before_view = view(&store.snapshot().unwrap());
    let before_counters = store_counters(&store);
    cut_every_unsynced_write(&plan, store, &dir);

    let store = Store::open_with(&dir, real_options(&clock)).unwrap();
    let after_feed = feed(&store);
    assert_eq!(
        after_feed, before_feed,
        "the change feed, record for record"
    );
    assert_eq!(view(&store.snapshot().unwrap()), before_view);
    assert_eq!(
        store_counters(&store),
        before_counters,
        "persisted counters"
    );
    match store.claim("e", 1, "w5", ttl).unwrap() {
        ClaimOutcome::Held { worker, .. } => assert_eq!(worker, "w4"),
        other => panic!("the live lease on e was lost: {other:?}"),
    }
    assert!(matches!(
        put_with(&store, "e", 1, b"e1", None),
        Outcome::Busy { .. }
    ));
    assert!(matches!(
        put_with(&store, "e", 1, b"e1", Some(held.token)),
        Outcome::Committed { .. }
    ));
    let issued = [b.token, c.token, d.token, held.token];
    let next = granted(&store, "f", "w6");
    assert!(
        issued.iter().all(|t| next.token > *t),
        "token {} handed out again after the cut (issued before: {issued:?})",
        next.token
    );
}
