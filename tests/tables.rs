//! Lake tables (SPEC R21) in the engine: the registry, publishing against a model of the table,
//! exactly-once across a crash at every file operation of a publish, bad data, GC and verify.
//! The real clients (delta-rs, DuckDB) read the tables in `tests/python/test_tables.py`.

mod common;
#[path = "common/parquet.rs"]
mod parquet_files;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use common::copy_dir;
use oncelake::fault::{FaultPlan, FaultyVfs};
use oncelake::gc::GcOptions;
use oncelake::table::{position, AutoPublisher, TableError, TableFormat};
use oncelake::vfs::RealVfs;
use oncelake::{Options, Store, VerifyOptions};
use parquet_files::parquet;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Every action of every version of a Delta log, by version.
fn versions(table: &Path) -> BTreeMap<u64, Vec<Value>> {
    let mut out = BTreeMap::new();
    for ent in std::fs::read_dir(table.join("_delta_log")).unwrap() {
        let name = ent.unwrap().file_name().into_string().unwrap();
        if let Some(v) = name.strip_suffix(".json") {
            let text = std::fs::read_to_string(table.join("_delta_log").join(&name)).unwrap();
            let actions = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            out.insert(v.parse().unwrap(), actions);
        }
    }
    out
}

/// The live data files (path -> numRecords) after replaying `versions` up to `upto`.
fn live_files(vs: &BTreeMap<u64, Vec<Value>>, upto: u64) -> BTreeMap<String, i64> {
    let mut live = BTreeMap::new();
    for (_, actions) in vs.range(..=upto) {
        for a in actions {
            if let Some(r) = a.get("remove") {
                assert!(
                    live.remove(r["path"].as_str().unwrap()).is_some(),
                    "remove of a dead file"
                );
            }
            if let Some(add) = a.get("add") {
                let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
                let prev = live.insert(
                    add["path"].as_str().unwrap().to_string(),
                    stats["numRecords"].as_i64().unwrap(),
                );
                assert!(prev.is_none(), "duplicate add");
            }
        }
    }
    live
}

/// A new store (in a directory that must outlive it) with the Delta table `t` over the prefix `t/`.
fn with_table_t() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lake")).unwrap();
    store.create_table("t", "t/", TableFormat::Delta).unwrap();
    (dir, store)
}

fn txn_version(actions: &[Value]) -> u64 {
    actions[0]["txn"]["version"].as_u64().unwrap()
}

/// The seq of a write that must have committed (fails otherwise).
#[track_caller]
fn seq_of(written: oncelake::Result<oncelake::UnitOutcome>) -> u64 {
    let written = written.unwrap();
    written
        .outcome
        .seq()
        .unwrap_or_else(|| panic!("{:?}", written.outcome))
}

#[test]
fn tables_are_defined_once_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lake")).unwrap();
    assert!(store.tables().unwrap().is_empty());
    let d = store
        .create_table("sales", "sales", TableFormat::Delta)
        .unwrap();
    assert_eq!(d.prefix, "sales/");
    // The same definition again is a no-op; another under the name is refused.
    assert_eq!(
        store
            .create_table("sales", "sales/", TableFormat::Delta)
            .unwrap(),
        d
    );
    assert!(matches!(
        store.create_table("sales", "orders/", TableFormat::Delta),
        Err(TableError::Exists { .. })
    ));
    assert!(matches!(
        store.create_table("../x", "a/", TableFormat::Delta),
        Err(TableError::InvalidName { .. })
    ));
    store.create_table("all", "", TableFormat::Delta).unwrap();
    let names: Vec<String> = store
        .tables()
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["all", "sales"]);
    let e = store.publish_table("nope").unwrap_err();
    assert!(e.to_string().contains("all, sales"), "{e}");
    drop(store);
    let store = Store::open(dir.path().join("lake")).unwrap();
    assert_eq!(store.table("sales").unwrap(), d);
}

/// The model: unit -> (its data file path, rows) after each store commit under the prefix.
#[test]
fn every_version_holds_exactly_the_committed_units() {
    let (_dir, store) = with_table_t();
    let mut model: BTreeMap<String, i64> = BTreeMap::new();
    let mut expected: Vec<(u64, BTreeMap<String, i64>)> = Vec::new();
    let mut seq_of_unit = BTreeMap::new();
    for i in 0..40u64 {
        let unit = format!("t/d={}/r=x%2Fy/u{}", (i % 7) % 3, i % 7);
        let rows = (i % 5 + 1) as usize;
        let out = if i % 9 == 8 {
            store.correct(&unit, seq_of_unit[&unit], &parquet(i as i64, rows, "c"))
        } else {
            store.put(&unit, i + 100, &parquet(i as i64, rows, "p"))
        }
        .unwrap();
        let seq = out.outcome.seq().unwrap();
        seq_of_unit.insert(
            unit.clone(),
            if i % 9 == 8 {
                seq_of_unit[&unit]
            } else {
                i + 100
            },
        );
        model.insert(unit, rows as i64);
        expected.push((seq, model.clone()));
        if i % 10 == 4 {
            store
                .put(&format!("other/{i}"), 1, b"not a table unit")
                .unwrap();
        }
        if i % 13 == 0 {
            store.publish_table("t").unwrap(); // publishing in several runs changes nothing
        }
    }
    let r = store.publish_table("t").unwrap();
    assert_eq!(r.version, Some(39));
    let table = store.table_dir("t");
    let vs = versions(&table);
    assert_eq!(vs.len(), 40);
    for (v, (seq, units)) in expected.iter().enumerate() {
        let actions = &vs[&(v as u64)];
        assert_eq!(txn_version(actions), *seq, "version {v} carries its seq");
        let live = live_files(&vs, v as u64);
        // One live file per unit, with the unit's row count, under its partition directory.
        assert_eq!(live.len(), units.len(), "version {v}");
        let mut counts: Vec<i64> = live.values().copied().collect();
        let mut want: Vec<i64> = units.values().copied().collect();
        counts.sort();
        want.sort();
        assert_eq!(counts, want, "version {v}");
        for path in live.keys() {
            assert!(path.starts_with("d="), "{path}");
            assert!(
                path.contains("/r=x%252Fy/"),
                "the raw segment, URI-encoded: {path}"
            );
        }
    }
    let meta = &vs[&0][3]["metaData"];
    assert_eq!(meta["partitionColumns"], serde_json::json!(["d", "r"]));
    let first_add = vs[&0].iter().find_map(|a| a.get("add")).unwrap();
    assert_eq!(first_add["partitionValues"]["r"], "x/y");
    // The checkpoint is not due yet; the position is what the log says.
    let pos = position::published("t", &table).unwrap();
    assert_eq!((pos.version, pos.seq), (Some(39), expected[39].0));
    assert_eq!(store.publish_table("t").unwrap().versions, 0);
    assert!(store
        .verify(VerifyOptions { deep: true })
        .unwrap()
        .is_clean());
}

/// A fresh store with `n` commits under `t/`, closed, its directory returned.
fn store_with_commits(dir: &Path, n: u64) -> PathBuf {
    let path = dir.join("base");
    let store = Store::open(&path).unwrap();
    store.create_table("t", "t/", TableFormat::Delta).unwrap();
    for i in 0..n {
        let unit = format!("t/p={}/u{}", i % 2, i % 3);
        store.put(&unit, i + 1, &parquet(i as i64, 2, "x")).unwrap();
    }
    path
}

#[test]
fn a_publish_cut_at_any_file_operation_resumes_to_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let base = store_with_commits(dir.path(), 6);
    let reference = dir.path().join("reference");
    copy_dir(&base, &reference);
    Store::open(&reference).unwrap().publish_table("t").unwrap();
    let want = common::files(&reference.join("tables/t"));
    let mut n = 1;
    loop {
        let victim = dir.path().join(format!("victim{n}"));
        copy_dir(&base, &victim);
        let plan = FaultPlan::new();
        let options = Options {
            vfs: Arc::new(FaultyVfs::new(Arc::new(RealVfs), plan.clone())),
            ..Options::default()
        };
        let store = Store::open_with(&victim, options).unwrap();
        plan.crash_at(plan.ops() + n);
        let cut = store.publish_table("t").is_err();
        drop(store);
        let store = Store::open(&victim).unwrap();
        let r = store.publish_table("t").unwrap();
        assert_eq!(r.version, Some(5));
        let mut got = common::files(&victim.join("tables/t"));
        got.retain(|p, _| !p.to_string_lossy().contains(".tmp")); // a cut temporary file
        assert_eq!(got, want, "cut at operation {n}");
        std::fs::remove_dir_all(&victim).unwrap();
        if !cut {
            break;
        }
        n += 1;
    }
    assert!(n > 20, "the sweep covered {n} operations");
}

/// The add paths and the tombstones (path -> deletionTimestamp) of a checkpoint file, and its
/// row count.
fn checkpoint_state(path: &Path) -> (BTreeSet<String>, BTreeMap<String, u64>, usize) {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Array;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let (mut adds, mut tombstones, mut rows) = (BTreeSet::new(), BTreeMap::new(), 0);
    for batch in reader {
        let batch = batch.unwrap();
        rows += batch.num_rows();
        let add = batch.column_by_name("add").unwrap().as_struct();
        let add_path = add.column_by_name("path").unwrap().as_string::<i32>();
        let rm = batch.column_by_name("remove").unwrap().as_struct();
        let rm_path = rm.column_by_name("path").unwrap().as_string::<i32>();
        let rm_time = rm
            .column_by_name("deletionTimestamp")
            .unwrap()
            .as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            if add.is_valid(i) {
                assert!(
                    adds.insert(add_path.value(i).to_string()),
                    "a path added twice"
                );
            }
            if rm.is_valid(i) {
                let prev = tombstones.insert(rm_path.value(i).to_string(), rm_time.value(i) as u64);
                assert!(prev.is_none(), "a path removed twice");
            }
        }
    }
    (adds, tombstones, rows)
}

/// Delta's default `delta.deletedFileRetentionDuration`.
const WEEK_MS: u64 = 7 * 24 * 3600 * 1000;

/// What the checkpoint of version `c` must hold by the rule: the live files, and every removed
/// file not added again whose deletion is at most a week older than the commit time of the
/// checkpoint version, expiry applied at each checkpoint version up to `c`.
fn model_checkpoint(
    vs: &BTreeMap<u64, Vec<Value>>,
    c: u64,
) -> (BTreeSet<String>, BTreeMap<String, u64>) {
    let mut tombstones = BTreeMap::new();
    for (v, actions) in vs.range(..=c) {
        for a in actions {
            if let Some(r) = a.get("remove") {
                let path = r["path"].as_str().unwrap().to_string();
                tombstones.insert(path, r["deletionTimestamp"].as_u64().unwrap());
            }
            if let Some(add) = a.get("add") {
                tombstones.remove(add["path"].as_str().unwrap());
            }
        }
        if *v > 0 && v % 100 == 0 {
            let time = actions[0]["txn"]["lastUpdated"].as_u64().unwrap();
            tombstones.retain(|_, t| *t + WEEK_MS >= time);
        }
    }
    (live_files(vs, c).into_keys().collect(), tombstones)
}

#[test]
fn checkpoints_every_100_versions_and_a_lost_one_is_rewritten_identically() {
    let dir = tempfile::tempdir().unwrap();
    let base = store_with_commits(dir.path(), 205);
    let store = Store::open(&base).unwrap();
    store.publish_table("t").unwrap();
    let log = store.table_dir("t").join("_delta_log");
    let cp = log.join("00000000000000000200.checkpoint.parquet");
    let cp100 = std::fs::read(log.join("00000000000000000100.checkpoint.parquet")).unwrap();
    let bytes = std::fs::read(&cp).unwrap();
    // The checkpoint holds the live files of version 200, the removed ones as tombstones (all
    // younger than a week) and the txn of its seq.
    let vs = versions(&store.table_dir("t"));
    let (adds, tombstones, rows) = checkpoint_state(&cp);
    let (want_adds, want_tombstones) = model_checkpoint(&vs, 200);
    assert_eq!(adds.len(), 6, "one file per unit (6 units)");
    assert_eq!(
        tombstones.len(),
        195,
        "every file removed in versions 1..=200"
    );
    assert_eq!((&adds, &tombstones), (&want_adds, &want_tombstones));
    assert_eq!(rows, 3 + 6 + 195, "protocol, metaData, txn, adds, removes");
    assert_eq!(
        std::fs::read_to_string(log.join("_last_checkpoint")).unwrap(),
        format!(r#"{{"version":200,"size":{rows}}}"#)
    );
    // Lost (a cut between the commit and its checkpoint): the next publish writes it again.
    std::fs::remove_file(&cp).unwrap();
    std::fs::remove_file(log.join("_last_checkpoint")).unwrap();
    drop(store);
    let store = Store::open(&base).unwrap();
    store.publish_table("t").unwrap();
    assert_eq!(std::fs::read(&cp).unwrap(), bytes);
    // Rebuilt from checkpoint 100 and the commits after it, the same bytes as from memory.
    assert_eq!(
        std::fs::read(log.join("00000000000000000100.checkpoint.parquet")).unwrap(),
        cp100
    );
    assert!(log.join("_last_checkpoint").exists());
}

/// Commits `range` under `t/` at the times `time_of(i)`: three partitions of changing units
/// (new bytes each time) and one unit flipping between two contents, so a removed path is
/// added again.
fn commit_timed(
    path: &Path,
    clock: &oncelake::ManualClock,
    range: std::ops::RangeInclusive<u64>,
    time_of: impl Fn(u64) -> u64,
) {
    let options = Options {
        clock: Arc::new(clock.clone()),
        ..Options::default()
    };
    let store = Store::open_with(path, options).unwrap();
    let _ = store.create_table("t", "t/", TableFormat::Delta);
    for i in range {
        clock.set_ms(time_of(i));
        if i % 10 == 5 {
            let flip = (i / 10) % 2;
            store
                .put("t/p=0/flip", i + 1, &parquet(flip as i64, 1, "f"))
                .unwrap();
        } else {
            let unit = format!("t/p={}/u{}", i % 3, i % 4);
            store.put(&unit, i + 1, &parquet(i as i64, 2, "x")).unwrap();
        }
    }
}

#[test]
fn checkpoint_tombstones_expire_after_a_week_the_same_whichever_way_they_are_built() {
    const T0: u64 = 1_700_000_000_000;
    const DAY: u64 = 24 * 3600 * 1000;
    // Versions 0..=59 on day 0, 60..=100 on day 8 (the first ones' removes expire at
    // checkpoint 100), 101..=200 back on day 1 (a clock that went backwards).
    let time_of = |i: u64| match i {
        0..=59 => T0 + i,
        60..=100 => T0 + 8 * DAY + i,
        _ => T0 + DAY + i,
    };
    let dir = tempfile::tempdir().unwrap();
    let clock = oncelake::ManualClock::new(T0);
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    commit_timed(&a, &clock, 0..=150, time_of);
    copy_dir(&a, &b);
    std::fs::create_dir_all(b.join("staging")).unwrap(); // copy_dir copies files only
                                                         // b: published to 150 first, so checkpoint 200 is built from checkpoint 100 on disk.
    Store::open(&b).unwrap().publish_table("t").unwrap();
    commit_timed(&a, &clock, 151..=200, time_of);
    commit_timed(&b, &clock, 151..=200, time_of);
    copy_dir(&a, &c);
    std::fs::create_dir_all(c.join("staging")).unwrap();
    // a: in one run, checkpoint 200 from memory.
    Store::open(&a).unwrap().publish_table("t").unwrap();
    Store::open(&b).unwrap().publish_table("t").unwrap();
    let log_a = a.join("tables/t/_delta_log");
    let cp = |v: u64| format!("{v:020}.checkpoint.parquet");
    let vs = versions(&a.join("tables/t"));
    for v in [100, 200] {
        let (adds, tombstones, _) = checkpoint_state(&log_a.join(cp(v)));
        assert_eq!(
            (adds, tombstones),
            model_checkpoint(&vs, v),
            "checkpoint {v}"
        );
        let want = std::fs::read(log_a.join(cp(v))).unwrap();
        let got = std::fs::read(b.join("tables/t/_delta_log").join(cp(v))).unwrap();
        assert_eq!(got, want, "checkpoint {v}: resumed from disk vs in memory");
    }
    let (_, at100, _) = checkpoint_state(&log_a.join(cp(100)));
    assert!(
        at100.values().all(|t| *t >= T0 + 8 * DAY),
        "day-0 removes expired"
    );
    assert!(!at100.is_empty());
    let (_, at200, _) = checkpoint_state(&log_a.join(cp(200)));
    // Day-0 removes would be young enough at checkpoint 200's (earlier) time: expired stays
    // expired.
    assert!(
        at200.values().all(|t| *t >= T0 + DAY),
        "expired stays expired"
    );
    assert!(
        at200.values().any(|t| *t < T0 + 2 * DAY),
        "day-1 removes kept"
    );
    // c: both checkpoints lost, 200 rebuilt by replaying every commit (expiring at 100).
    Store::open(&c).unwrap().publish_table("t").unwrap();
    let log_c = c.join("tables/t/_delta_log");
    std::fs::remove_file(log_c.join(cp(100))).unwrap();
    std::fs::remove_file(log_c.join(cp(200))).unwrap();
    std::fs::remove_file(log_c.join("_last_checkpoint")).unwrap();
    Store::open(&c).unwrap().publish_table("t").unwrap();
    assert_eq!(
        std::fs::read(log_c.join(cp(200))).unwrap(),
        std::fs::read(log_a.join(cp(200))).unwrap(),
        "checkpoint 200 replayed from version 0"
    );
}

#[test]
fn bad_objects_stop_publish_naming_unit_and_seq_and_a_correction_continues() {
    let (_dir, store) = with_table_t();
    store.put("t/d=1/a", 1, &parquet(0, 3, "a")).unwrap();
    let bad = seq_of(store.put("t/d=1/b", 1, b"id,name\n1,b\n"));
    let e = store.publish_table("t").unwrap_err();
    assert!(
        matches!(&e, TableError::BadUnit { unit, seq, .. } if unit == "t/d=1/b" && *seq == bad),
        "{e}"
    );
    assert!(e.to_string().contains("not a Parquet file"), "{e}");
    let table = store.table_dir("t");
    assert_eq!(versions(&table).len(), 1, "nothing of the bad commit");
    assert!(
        !table.join("d=1").read_dir().unwrap().any(|f| {
            let f = f.unwrap().file_name().into_string().unwrap();
            !f.starts_with(&store.get("t/d=1/a").unwrap().unwrap().object.id.to_hex())
        }),
        "no link of the bad commit"
    );
    // Again: still stopped, still nothing partial.
    assert!(store.publish_table("t").is_err());
    let fix = seq_of(store.correct("t/d=1/b", 1, &parquet(10, 1, "b")));
    let r = store.publish_table("t").unwrap();
    assert_eq!(
        r.skipped,
        vec![oncelake::table::Skipped {
            unit: "t/d=1/b".to_string(),
            seq: bad
        }]
    );
    assert_eq!(r.seq, fix);
    let vs = versions(&table);
    assert_eq!(
        live_files(&vs, 1).len(),
        1,
        "the bad version shows no rows of b"
    );
    assert_eq!(live_files(&vs, 2).values().sum::<i64>(), 4);
    // A schema change and a unit without the partition segments are refused too.
    let other = {
        let b =
            RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![1])) as ArrayRef)])
                .unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(Vec::new(), b.schema(), None).unwrap();
        w.write(&b).unwrap();
        w.into_inner().unwrap()
    };
    let s = seq_of(store.put("t/d=2/c", 1, &other));
    let e = store.publish_table("t").unwrap_err();
    assert!(
        matches!(&e, TableError::BadUnit { seq, reason, .. } if *seq == s && reason.contains("schema")),
        "{e}"
    );
    store.correct("t/d=2/c", 1, &parquet(20, 1, "c")).unwrap();
    store.publish_table("t").unwrap();
    let s = seq_of(store.put("t/flat", 1, &parquet(30, 1, "f")));
    let e = store.publish_table("t").unwrap_err();
    assert!(
        matches!(&e, TableError::BadPartitions { seq, .. } if *seq == s),
        "{e}"
    );
    assert!(e.to_string().contains("as d=.../NAME"), "{e}");
}

#[test]
fn gc_keeps_what_tables_have_not_published_and_links_outlive_collected_objects() {
    let (_dir, store) = with_table_t();
    let zero = GcOptions {
        grace: Duration::ZERO,
        retain: Duration::ZERO,
        ..GcOptions::default()
    };
    let mut objects = BTreeSet::new();
    for i in 0..6u64 {
        let out = store
            .put("t/d=1/u", i + 1, &parquet(i as i64, 1, "x"))
            .unwrap();
        objects.insert(out.object);
    }
    // Not published yet: GC with zero retention keeps every version's object.
    store.gc(zero).unwrap();
    for id in &objects {
        assert!(
            store.object_path(id).exists(),
            "unpublished object {id} kept"
        );
    }
    store.publish_table("t").unwrap();
    let report = store.gc(zero).unwrap();
    assert_eq!(report.objects, 5, "published and superseded: collected");
    let table = store.table_dir("t");
    let vs = versions(&table);
    for v in 0..6 {
        for path in live_files(&vs, v).keys() {
            assert!(table.join(path).exists(), "version {v} still reads {path}");
        }
    }
    let report = store.verify(VerifyOptions { deep: true }).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.tables.links_checked, 6);
    assert_eq!(report.tables.links_sole_copy, 5);
}

#[test]
fn verify_finds_wrong_and_missing_links_and_stray_files() {
    let (_dir, store) = with_table_t();
    store.put("t/d=1/a", 1, &parquet(0, 1, "a")).unwrap();
    store.put("t/d=1/b", 1, &parquet(5, 1, "b")).unwrap();
    store.publish_table("t").unwrap();
    let table = store.table_dir("t");
    assert!(store.verify(VerifyOptions::default()).unwrap().is_clean());
    let mut files: Vec<PathBuf> = std::fs::read_dir(table.join("d=1"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    // A link replaced by other bytes; another removed; a stray file.
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::write(&files[0], b"other bytes").unwrap();
    std::fs::remove_file(&files[1]).unwrap();
    std::fs::write(table.join("d=1/notes.txt"), b"hello").unwrap();
    let r = store.verify(VerifyOptions::default()).unwrap();
    assert_eq!(r.tables.problems.len(), 2, "{:?}", r.tables);
    assert!(r
        .tables
        .problems
        .iter()
        .any(|p| p.path == files[0] && p.detail.contains("not object")));
    assert!(r
        .tables
        .problems
        .iter()
        .any(|p| p.path == files[1] && p.detail.contains("missing")));
    assert_eq!(r.tables.stray, vec![table.join("d=1/notes.txt")]);
    assert!(!r.is_intact());
}

#[test]
fn an_auto_publisher_keeps_tables_up_to_date() {
    let (_dir, store) = with_table_t();
    let auto = AutoPublisher::start(store.clone(), Duration::from_millis(5));
    let mut last = 0;
    for i in 0..20u64 {
        last = seq_of(store.put(&format!("t/u{}", i % 4), i + 1, &parquet(i as i64, 1, "a")));
    }
    assert_eq!(
        auto.wait_published(last, Duration::from_secs(120)),
        Ok(true)
    );
    let pos = position::published("t", &store.table_dir("t")).unwrap();
    assert_eq!((pos.version, pos.seq), (Some(19), last));
    drop(auto);
}

/// The units a lake table must show: every committed put (seq -> unit, rows), one unit each.
type LakeModel = BTreeMap<u64, (String, i64)>;

/// Checks every version of the lake's table `table` against `model`: the versions are 0..=N
/// with no gap, each carries the next commit's seq (every commit once, in order, none left out
/// up to the newest; a commitInfo-only version carries none), and its live files are exactly
/// the units the model holds at that seq,
/// one file per unit (found by the unit tag in its name) with the unit's row count. Returns
/// the newest version.
#[cfg(feature = "lake")]
#[track_caller]
fn check_lake_table(table: &Path, model: &LakeModel) -> u64 {
    let vs = versions(table);
    let newest = *vs.keys().last().expect("the lake's table has versions");
    assert_eq!(
        vs.len() as u64,
        newest + 1,
        "versions 0..={newest}, none missing"
    );
    // A version without oncelake's txn (Delta's VACUUM's commitInfo) keeps the seq before it.
    let mut seqs: Vec<u64> = Vec::new();
    let mut at: BTreeMap<u64, u64> = BTreeMap::new();
    for (v, actions) in &vs {
        if actions[0].get("txn").is_some() {
            seqs.push(txn_version(actions));
        }
        at.insert(*v, seqs.last().copied().unwrap_or(0));
    }
    let committed: Vec<u64> = model
        .range(..=seqs[seqs.len() - 1])
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(seqs, committed, "one version per commit, in commit order");
    let tag = |unit: &str| blake3::hash(unit.as_bytes()).to_hex()[..16].to_string();
    for (&v, seq) in &at {
        let mut want: BTreeMap<String, i64> = BTreeMap::new();
        for (unit, rows) in model.range(..=seq).map(|(_, u)| u) {
            want.insert(tag(unit), *rows);
        }
        let mut got: BTreeMap<String, i64> = BTreeMap::new();
        for (path, rows) in live_files(&vs, v) {
            let t = path
                .rsplit_once('-')
                .unwrap()
                .1
                .trim_end_matches(".parquet");
            assert!(
                got.insert(t.to_string(), rows).is_none(),
                "a unit twice in version {v}"
            );
        }
        assert_eq!(got, want, "version {v} (seq {seq}) against the model");
    }
    newest
}

/// A node of the `file://` lake at `dir/lake`, its directory `dir/<name>`.
#[cfg(feature = "lake")]
fn lake_node(dir: &Path, name: &str) -> Store {
    let opts = Options {
        lake: Some(format!("file://{}", dir.join("lake").display())),
        ..Options::default()
    };
    Store::open_with(dir.join(name), opts).unwrap()
}

/// Nodes 1 and 2 of the `file://` lake at `dir/lake`, node 1 having created the lake's table
/// `t` over `t/`; with the lake's directory of that table.
#[cfg(feature = "lake")]
fn two_nodes_with_table_t(dir: &Path) -> (PathBuf, Store, Store) {
    let (n1, n2) = (lake_node(dir, "node1"), lake_node(dir, "node2"));
    n1.create_table("t", "t/", TableFormat::Delta).unwrap();
    (dir.join("lake").join("tables").join("t"), n1, n2)
}

/// Puts units `from..to` of the lake tables' tests on `store` (ids from `id`, so every object
/// differs) and records each in the model.
#[cfg(feature = "lake")]
fn put_units(store: &Store, model: &mut LakeModel, id: u64, from: u64, to: u64) {
    for i in from..to {
        let (unit, rows) = (format!("t/d={}/u{id}-{}", i % 3, i % 11), i % 4 + 1);
        let bytes = parquet((id + i) as i64, rows as usize, "n");
        let seq = seq_of(store.put(&unit, id + i + 1, &bytes));
        model.insert(seq, (unit, rows as i64));
    }
}

/// A lake table is the lake's (SPEC R23): its definition is created in the lake once (the same
/// definition again is fine on any node, another is `Exists`), every node lists it, and any
/// node publishes the next version. Two nodes publish alternately, each also the other's
/// commits; every version of the lake's table equals the model at its seq. A third node that
/// never published lists the table, catches up from the lake and publishes next.
#[cfg(feature = "lake")]
#[test]
fn any_lake_node_publishes_the_next_version_of_the_lakes_table() {
    let dir = tempfile::tempdir().unwrap();
    let (lake_table, n1, n2) = two_nodes_with_table_t(dir.path());
    assert!(lake_table.join("_oncelake_table").is_file());
    let names = |s: &Store| s.tables().unwrap().into_iter().map(|t| t.name);
    assert_eq!(names(&n2).collect::<Vec<_>>(), ["t"]);
    assert_eq!(n2.table("t").unwrap().prefix, "t/");
    n2.create_table("t", "t", TableFormat::Delta).unwrap();
    match n2.create_table("t", "other/", TableFormat::Delta) {
        Err(TableError::Exists { existing, .. }) => assert_eq!(existing, "t/"),
        other => panic!("another definition under the lake's name: {other:?}"),
    }
    let mut model = LakeModel::new();
    let nodes = [&n1, &n2];
    let mut next = 0;
    for round in 0..6u64 {
        // Commits on one node, published by the other or by itself.
        let (committer, publisher) = (nodes[(round % 2) as usize], nodes[(round / 2 % 2) as usize]);
        put_units(committer, &mut model, 0, next, next + 7);
        next += 7;
        let r = publisher.publish_table("t").unwrap();
        let newest = check_lake_table(&lake_table, &model);
        assert_eq!(r.version, Some(newest), "round {round}");
        assert_eq!(r.app_id, "oncelake:lake:t");
    }
    // Nothing new: a publish on either node writes no version.
    for n in nodes {
        assert_eq!(n.publish_table("t").unwrap().versions, 0);
    }
    // Node 3 starts from a lake checkpoint taken after commits the table has not published:
    // its replica's log begins there, and the units it publishes were last published before.
    put_units(&n1, &mut model, 0, next, next + 4);
    next += 4;
    n1.checkpoint().unwrap();
    let n3 = lake_node(dir.path(), "node3");
    assert!(n3.lake_seeded_from().is_some());
    assert_eq!(names(&n3).collect::<Vec<_>>(), ["t"]);
    put_units(&n3, &mut model, 0, next, next + 5);
    let r = n3.publish_table("t").unwrap();
    assert_eq!(
        r.versions, 9,
        "only the new commits are built: the rest was pulled"
    );
    assert_eq!(r.version, Some(check_lake_table(&lake_table, &model)));
    // Node 3's own copy holds the lake's log, byte for byte.
    let logs = |d: &Path| {
        let mut f = common::files(&d.join("_delta_log"));
        f.retain(|p, _| p.extension().is_some_and(|e| e == "json"));
        f
    };
    assert_eq!(logs(&n3.table_dir("t")), logs(&lake_table));
    // Its data files (linked from the objects it fetched from the lake, or the lake's) are
    // the lake's, byte for byte.
    let lake_files = common::files(&lake_table);
    let mut data = common::files(&n3.table_dir("t"));
    data.retain(|p, _| {
        p.extension().is_some_and(|e| e == "parquet") && !p.starts_with("_delta_log")
    });
    assert!(!data.is_empty());
    for (p, bytes) in data {
        assert_eq!(lake_files.get(&p), Some(&bytes), "{}", p.display());
    }
    let report = n3.verify(VerifyOptions { deep: true }).unwrap();
    assert!(report.is_clean(), "{report:?}");

    // A version of node 2's own that the lake holds with other bytes (as when another node
    // won it) is discarded, and the lake's pulled in its place.
    let newest = n2.publish_table("t").unwrap().version.unwrap();
    let local = n2.table_dir("t").join("_delta_log");
    let name = |v: u64| format!("{v:020}.json");
    std::fs::copy(local.join(name(newest - 1)), local.join(name(newest + 1))).unwrap();
    put_units(&n1, &mut model, 0, next + 5, next + 8);
    n1.publish_table("t").unwrap();
    put_units(&n1, &mut model, 0, next + 8, next + 9);
    assert_eq!(n2.publish_table("t").unwrap().versions, 1);
    check_lake_table(&lake_table, &model);
    assert_eq!(logs(&n2.table_dir("t")), logs(&lake_table));
}

/// Two nodes commit and publish the lake's table concurrently (threads): the versions are
/// raced for with put-if-absent, and whichever node wins each, the lake's table equals the
/// model at every version, each commit once, no unit twice.
#[cfg(feature = "lake")]
#[test]
fn two_nodes_publishing_concurrently_give_every_commit_one_version() {
    let dir = tempfile::tempdir().unwrap();
    let (lake_table, n1, n2) = two_nodes_with_table_t(dir.path());
    fn run(node: &Store, id: u64) -> LakeModel {
        let mut model = LakeModel::new();
        for round in 0..5 {
            put_units(node, &mut model, id, round * 3, round * 3 + 3);
            node.publish_table("t").unwrap();
        }
        model
    }
    let models: Vec<LakeModel> = std::thread::scope(|s| {
        let a = s.spawn(|| run(&n1, 0));
        let b = s.spawn(|| run(&n2, 1_000));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    let model: LakeModel = models.into_iter().flatten().collect();
    assert_eq!(model.len(), 30, "every put committed at a seq of its own");
    n1.publish_table("t").unwrap();
    let newest = check_lake_table(&lake_table, &model);
    assert_eq!(newest, 29, "every commit is one version");
    assert_eq!(n2.publish_table("t").unwrap().versions, 0);
}

/// A node that loses a version in the lake to another writer (here Delta's VACUUM, writing a
/// commitInfo-only version while the node's create of that version is held) discards its own
/// versions from it on, pulls the winner's and publishes after it: the lake's table still
/// equals the model at every version.
#[cfg(feature = "lake")]
#[test]
fn a_node_that_loses_a_version_pulls_the_winner_and_publishes_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("lake").display());
    let faults = oncelake::LakeFaults::install_on(&url, 7);
    let (lake_table, n1, n2) = two_nodes_with_table_t(dir.path());
    let mut model = LakeModel::new();
    put_units(&n1, &mut model, 0, 0, 5);
    let v = n1.publish_table("t").unwrap().version.unwrap() + 1;
    put_units(&n2, &mut model, 0, 5, 8);
    let hold = faults.hold_next_put("tables/t/_delta_log/");
    let r = std::thread::scope(|s| {
        let publish = s.spawn(|| n2.publish_table("t"));
        hold.wait_held();
        let vacuum = "{\"commitInfo\":{\"timestamp\":1,\"operation\":\"VACUUM START\"}}\n";
        let path = lake_table.join("_delta_log").join(format!("{v:020}.json"));
        std::fs::write(path, vacuum).unwrap();
        hold.release();
        publish.join().unwrap().unwrap()
    });
    assert_eq!(
        r.version,
        Some(v + 3),
        "the node's 3 versions after the lost one"
    );
    assert_eq!(check_lake_table(&lake_table, &model), v + 3);
    let logs = |d: &Path| {
        let mut f = common::files(&d.join("_delta_log"));
        f.retain(|p, _| p.extension().is_some_and(|e| e == "json"));
        f
    };
    assert_eq!(logs(&n2.table_dir("t")), logs(&lake_table));
    assert_eq!(n1.publish_table("t").unwrap().versions, 0);
}

/// On a lake node, a publish stopped by a unit that cannot be published puts the versions
/// before it into the lake (as a local store publishes them), nothing of the unit.
#[cfg(feature = "lake")]
#[test]
fn a_lake_publish_stopped_by_a_bad_unit_puts_the_versions_before_it_into_the_lake() {
    let dir = tempfile::tempdir().unwrap();
    let lake_table = dir.path().join("lake").join("tables").join("t");
    let n1 = lake_node(dir.path(), "node1");
    n1.create_table("t", "t/", TableFormat::Delta).unwrap();
    let mut model = LakeModel::new();
    put_units(&n1, &mut model, 0, 0, 3);
    let bad = seq_of(n1.put("t/d=0/bad", 1, b"not parquet"));
    match n1.publish_table("t") {
        Err(TableError::BadUnit { seq, .. }) => assert_eq!(seq, bad),
        other => panic!("a unit that is not Parquet must stop the publish: {other:?}"),
    }
    assert_eq!(check_lake_table(&lake_table, &model), 2);
}
