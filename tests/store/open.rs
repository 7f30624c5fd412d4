//! Opening a store (SPEC R1): concurrent first opens end with one store, an interrupted creation
//! is completed by the next open, a store of an older format is refused unchanged (none is
//! upgraded), and a store on read-only media can be read.

use crate::bin;
use crate::common;

use common::tree;
use oncelake::fault::{FaultPlan, FaultyVfs};
use oncelake::vfs::RealVfs;
use oncelake::{Error, Options, Store, DB_FILE, FORMAT_VERSION, MARKER_FILE};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// A scratch directory and the path of a store not created yet inside it.
fn missing_lake() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let lake = tmp.path().join("lake");
    (tmp, lake)
}

/// Runs `racer(i)` for `i` in `0..n` on `n` threads released at once; their answers, in order.
fn race<T: Send>(n: usize, racer: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(n);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (barrier, racer) = (&barrier, &racer);
                scope.spawn(move || {
                    barrier.wait();
                    racer(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn waiting() -> Options {
    Options {
        lock_wait: Duration::from_secs(120),
        ..Options::default()
    }
}

/// Everything a reader can see: unit → (version, revision, object hex, seq).
type Model = BTreeMap<String, (u64, u32, String, u64)>;

fn current(store: &Store) -> Model {
    let snap = store.snapshot().unwrap();
    snap.iter()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.unit.clone(),
                (e.source_version, e.revision, e.object.id.to_hex(), e.seq),
            )
        })
        .collect()
}

/// The log's seqs, in order: a re-initialised store restarts them (and overwrites records).
fn log_seqs(store: &Store) -> Vec<u64> {
    let snap = store.snapshot().unwrap();
    snap.changes_since(0)
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect()
}

#[test]
fn many_threads_opening_a_missing_directory_end_with_one_store() {
    const THREADS: usize = 6;
    for round in 0..40 {
        let (_tmp, lake) = missing_lake();
        let created = race(THREADS, |t| {
            let store = Store::open_with(&lake, waiting())
                .unwrap_or_else(|e| panic!("round {round} thread {t}: {e}"));
            let created = store.created();
            let out = store.put(&format!("t{t}"), 1, b"x").unwrap();
            assert_eq!(out.outcome.name(), "committed", "round {round} thread {t}");
            created
        });
        let created = created.into_iter().filter(|&c| c).count();
        one_created_and_every_write_kept(
            &lake,
            created,
            THREADS,
            &format!("round {round} of opens"),
        );
    }
}

/// After `writers` racing creators each wrote one unit into the store at `lake`: exactly one of
/// them created it (`created` said so), every write is there, and the seqs never restarted.
fn one_created_and_every_write_kept(lake: &Path, created: usize, writers: usize, round: &str) {
    assert_eq!(created, 1, "{round}: exactly one creates the store");
    let store = Store::open(lake).unwrap();
    assert_eq!(current(&store).len(), writers, "{round}: data kept");
    let want: Vec<u64> = (1..=writers as u64).collect();
    assert_eq!(log_seqs(&store), want, "{round}: seqs never restart");
}

fn oncelake(args: &[&str]) -> Output {
    Command::new(bin::oncelake()).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn many_processes_initialising_and_writing_a_missing_directory_end_with_one_store() {
    const PROCS: usize = 4;
    for round in 0..8 {
        let (tmp, lake) = missing_lake();
        let data = tmp.path().join("data");
        std::fs::write(&data, b"rows").unwrap();
        let answers = race(PROCS, |p| {
            let init = oncelake(&["--wait", "120s", "init", s(&lake), "--json"]);
            let unit = format!("p{p}");
            let put = oncelake(&["--wait", "120s", "put", s(&lake), &unit, "1", s(&data)]);
            (init, put)
        });
        let mut created = 0;
        for (init, put) in answers {
            let err = |o: &Output| String::from_utf8_lossy(&o.stderr).to_string();
            assert_eq!(init.status.code(), Some(0), "round {round}: {}", err(&init));
            assert_eq!(put.status.code(), Some(0), "round {round}: {}", err(&put));
            let v: serde_json::Value = serde_json::from_slice(&init.stdout).unwrap();
            created += v["created"].as_bool().unwrap() as usize;
        }
        one_created_and_every_write_kept(&lake, created, PROCS, &format!("round {round} of inits"));
    }
}

fn faulty(plan: &Arc<FaultPlan>) -> Options {
    Options {
        vfs: Arc::new(FaultyVfs::new(Arc::new(RealVfs), plan.clone())),
        faults: Some(plan.clone()),
        ..Options::default()
    }
}

/// Opens `dir` and checks it is a complete, working store with `units` units.
///
/// Every open here waits for the lock: another test of this binary spawning a process can hold
/// a copy of a just-closed `LOCK` descriptor between its fork and its exec.
fn reopen_works(dir: &Path, units: usize, what: &str) {
    let store =
        Store::open_with(dir, waiting()).unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    assert_eq!(current(&store).len(), units, "{what}");
    let out = store.put("after", 1, b"y").unwrap();
    assert_eq!(out.outcome.name(), "committed", "{what}");
    drop(store);
    let store = Store::open_with(dir, waiting()).unwrap();
    assert_eq!(current(&store).len(), units + 1, "{what}");
}

#[test]
fn a_creation_crashed_at_any_operation_is_completed_by_the_next_open() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let store = Store::open_with(tmp.path().join("count"), faulty(&plan)).unwrap();
    let total = plan.ops();
    drop(store);
    assert!(total > 256, "creation makes {total} file operations");
    // Every index, except that of the 256 identical `objects/xx` mkdirs only every 15th is
    // taken (each round costs a dozen fsyncs).
    let sweep = (1..=total).filter(|n| !(6..=254).contains(n) || n % 15 == 0);
    for n in sweep {
        let lake = tmp.path().join(format!("lake{n}"));
        let plan = FaultPlan::new();
        plan.crash_at(n);
        let r = Store::open_with(&lake, faulty(&plan));
        assert!(
            r.is_err(),
            "a crash at operation {n} of {total} fails the open"
        );
        drop(r);
        let had_marker = lake.join(MARKER_FILE).exists();
        let store =
            Store::open_with(&lake, waiting()).unwrap_or_else(|e| panic!("crash at {n}: {e}"));
        assert_eq!(
            store.created(),
            !had_marker,
            "crash at {n}: the open completed the creation unless the marker was in place"
        );
        drop(store);
        reopen_works(&lake, 0, &format!("crash at {n}"));
    }
}

#[test]
fn a_leftover_of_a_killed_init_is_completed_by_init() {
    let tmp = tempfile::tempdir().unwrap();
    let lake = tmp.path().join("lake");
    // What a killed `init` left in about half the rounds: LOCK and objects/, no marker.
    std::fs::create_dir_all(lake.join("objects/00")).unwrap();
    std::fs::create_dir_all(lake.join("objects/01")).unwrap();
    std::fs::write(lake.join("LOCK"), b"").unwrap();
    let out = oncelake(&["init", s(&lake), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["created"], true);
    let again = oncelake(&["init", s(&lake), "--json"]);
    assert_eq!(again.status.code(), Some(0), "init is idempotent");
    let v: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(v["created"], false);
    reopen_works(&lake, 0, "leftover");
}

#[test]
fn a_directory_that_is_not_a_store_is_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str]); 4] = [
        ("other-file", &["notes.txt"]),
        ("leftover-plus-file", &["LOCK", "notes.txt"]),
        ("object-file", &["LOCK", "objects/00/abc"]),
        ("odd-dir", &["objects/zz/"]),
    ];
    for (name, files) in cases {
        let dir = tmp.path().join(name);
        for f in files {
            let p = dir.join(f);
            if f.ends_with('/') {
                std::fs::create_dir_all(&p).unwrap();
            } else {
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, b"mine").unwrap();
            }
        }
        let before = tree(&dir);
        let err = Store::open_with(&dir, waiting()).unwrap_err();
        assert!(matches!(err, Error::NotAStore { .. }), "{name}: {err}");
        assert_eq!(tree(&dir), before, "{name}: nothing was touched");
    }
}

// ---- format 1 → 2 -------------------------------------------------------------------------

const META_V2: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("store_meta");
const META_V1: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
const UNIT_TABLES: [&str; 3] = ["manifest", "claims", "extensions"];
const HISTORY: redb::TableDefinition<(&str, u64), &[u8]> = redb::TableDefinition::new("history");

/// Rewrites a (closed) format-2 store the way format 1 stored it: values without their 4-byte
/// seal, plain u64 meta values in the `meta` table, a marker saying format 1.
fn downgrade_to_format_1(dir: &Path, keep_store_id: bool) {
    use redb::{ReadableDatabase, ReadableTable};
    let db = redb::Database::create(dir.join(DB_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let strip = |v: &[u8]| v[..v.len() - 4].to_vec();
        for name in UNIT_TABLES {
            let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(name);
            let mut t = txn.open_table(def).unwrap();
            let rows: Vec<(String, Vec<u8>)> = t
                .iter()
                .unwrap()
                .map(|r| {
                    let (k, v) = r.unwrap();
                    (k.value().to_string(), strip(v.value()))
                })
                .collect();
            for (k, v) in rows {
                t.insert(k.as_str(), v.as_slice()).unwrap();
            }
        }
        let mut h = txn.open_table(HISTORY).unwrap();
        let rows: Vec<((String, u64), Vec<u8>)> = h
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                let (u, s) = k.value();
                ((u.to_string(), s), strip(v.value()))
            })
            .collect();
        for ((u, s), v) in rows {
            h.insert((u.as_str(), s), v.as_slice()).unwrap();
        }
        let meta: Vec<(String, u64)> = {
            let t = txn.open_table(META_V2).unwrap();
            let rows = t.iter().unwrap();
            rows.map(|r| {
                let (k, v) = r.unwrap();
                let v = v.value();
                (
                    k.value().to_string(),
                    u64::from_le_bytes(v[..8].try_into().unwrap()),
                )
            })
            .collect()
        };
        txn.delete_table(META_V2).unwrap();
        let mut old = txn.open_table(META_V1).unwrap();
        for (k, v) in meta {
            if k == "store_id" && !keep_store_id {
                continue; // as in a store written before store ids
            }
            let v = if k == "format" { 1 } else { v };
            old.insert(k.as_str(), v).unwrap();
        }
    }
    txn.commit().unwrap();
    let r = db.begin_read().unwrap();
    assert!(
        r.open_table(META_V2).is_err(),
        "the sealed meta table is gone"
    );
    drop(r);
    drop(db);
    let marker = dir.join(MARKER_FILE);
    let mut perm = std::fs::metadata(&marker).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    std::fs::set_permissions(&marker, perm).unwrap();
    std::fs::write(&marker, "oncelake store\nformat 1\n").unwrap();
}

fn populated_format_1(dir: &Path) {
    let store = Store::open(dir).unwrap();
    for i in 0..20 {
        store
            .put(&format!("u{i:02}"), i, format!("v{i}").as_bytes())
            .unwrap();
    }
    store.correct("u03", 3, b"fixed").unwrap();
    store.put("u04", 9, b"newer").unwrap();
    store
        .claim("claimed", 3, "w1", Duration::from_secs(3600))
        .unwrap();
    drop(store);
    downgrade_to_format_1(dir, true);
}

#[test]
fn a_store_of_an_older_format_is_refused_unchanged_by_every_open_and_every_command() {
    // No format before 4 was released: none is upgraded (docs/format.md). Such a store — from a
    // development build — is refused by the library's opens and by reading and writing commands,
    // saying what it is, with every file as it was.
    let tmp = tempfile::tempdir().unwrap();
    let lake = tmp.path().join("lake");
    populated_format_1(&lake);
    let before = tree(&lake);
    for read_only in [false, true] {
        let options = Options {
            read_only,
            ..Options::default()
        };
        match Store::open_with(&lake, options) {
            Err(oncelake::Error::OlderFormat {
                found: 1,
                supported,
                ..
            }) => {
                assert_eq!(supported, FORMAT_VERSION)
            }
            other => panic!("read_only {read_only}: {other:?}"),
        }
        assert_eq!(tree(&lake), before, "read_only {read_only}");
    }
    // The marker says format 1 too: also refused from the marker, before the database is read.
    std::fs::write(lake.join(MARKER_FILE), "oncelake store\nformat 1\n").unwrap();
    let before = tree(&lake);
    assert!(matches!(
        Store::open(&lake),
        Err(oncelake::Error::OlderFormat { found: 1, .. })
    ));
    for args in [
        vec!["ls", s(&lake)],
        vec!["get", s(&lake), "u01"],
        vec!["log", s(&lake)],
        vec!["verify", s(&lake)],
        vec!["put", s(&lake), "u99", "1", "-"],
    ] {
        let out = oncelake(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("format version 1"), "{args:?}: {stderr}");
        assert_eq!(tree(&lake), before, "{args:?}");
    }
}

// ---- read-only ----------------------------------------------------------------------------

fn populated(dir: &Path) -> Model {
    let store = Store::open(dir).unwrap();
    for i in 0..10 {
        store
            .put(&format!("u{i}"), i, format!("v{i}").as_bytes())
            .unwrap();
    }
    current(&store)
}

#[test]
fn a_read_only_open_reads_everything_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let lake = tmp.path().join("lake");
    let model = populated(&lake);
    let before = tree(&lake);
    let store = Store::open_read_only(&lake).unwrap();
    let again = Store::open_read_only(&lake).unwrap();
    assert_eq!(current(&store), model);
    assert_eq!(current(&again), model, "readers share the store");
    assert_eq!(common::current_bytes(&store, "u3"), b"v3");
    assert!(store.verify(Default::default()).unwrap().is_clean());
    let err = store.put("u1", 99, b"no").unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err}");
    let err = store
        .claim("u1", 99, "w", Duration::from_secs(1))
        .unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err}");
    drop((store, again));
    assert_eq!(tree(&lake), before, "a read-only open writes nothing");
}

/// Mounts a tmpfs at `at` (root only); `false` when this sandbox does not allow it.
fn mount_tmpfs(at: &Path) -> bool {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64m", "oncelake-test", s(at)])
        .output()
        .is_ok_and(|o| o.status.success())
}

struct Unmount(PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

#[test]
fn a_store_on_a_read_only_mount_can_be_listed_read_and_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    if !mount_tmpfs(&mnt) {
        eprintln!("skipped: cannot mount a tmpfs here (not root?); the read-only open is tested by a_read_only_open_reads_everything_and_writes_nothing");
        return;
    }
    let _unmount = Unmount(mnt.clone());
    let lake = mnt.join("lake");
    let model = populated(&lake);
    let remount = Command::new("mount")
        .args(["-o", "remount,ro", s(&mnt)])
        .output()
        .unwrap();
    assert!(remount.status.success(), "{remount:?}");
    assert!(
        std::fs::write(mnt.join("probe"), b"x").is_err(),
        "the mount is read-only"
    );

    let err = Store::open(&lake).unwrap_err();
    assert!(
        matches!(err, Error::Io { .. }),
        "a read-write open fails: {err}"
    );
    let store = Store::open_read_only(&lake).unwrap();
    assert_eq!(current(&store), model);
    drop(store);

    let ok = |args: &[&str]| {
        let out = oncelake(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let ls = ok(&["ls", s(&lake), "--json"]);
    assert_eq!(ls.lines().count(), model.len(), "{ls}");
    assert_eq!(ok(&["get", s(&lake), "u7"]), "v7");
    assert_eq!(
        ok(&["log", s(&lake), "--json"]).lines().count(),
        model.len()
    );
    ok(&["verify", s(&lake)]);
    let put = oncelake(&["put", s(&lake), "u1", "50", "-"]);
    assert_ne!(put.status.code(), Some(0));
    let msg = String::from_utf8_lossy(&put.stderr);
    assert!(msg.contains("read-only"), "{msg}");
}

/// Backlog limits that could never hold a group are refused with a message that names both,
/// before anything is created or opened; the defaults and a consistent pair open.
#[test]
fn backlog_limits_that_cannot_hold_a_group_are_refused_before_anything_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    for (backlog, batch) in [(32 << 20, 0), (1 << 20, 4 << 20)] {
        let o = oncelake::Options {
            backlog_bytes: backlog,
            apply_batch_bytes: batch,
            ..oncelake::Options::default()
        };
        let e = match oncelake::Store::open_with(&path, o) {
            Err(e) => e,
            Ok(_) => panic!("backlog {backlog} / batch {batch} was accepted"),
        };
        let msg = e.to_string();
        assert!(
            matches!(e, oncelake::Error::InvalidRequest(_))
                && msg.contains("apply_batch_bytes")
                && msg.contains("backlog_bytes"),
            "{e:?}"
        );
        assert!(!path.exists(), "a refused open created the store");
    }
    let o = oncelake::Options {
        backlog_bytes: 64 << 10,
        apply_batch_bytes: 16 << 10,
        ..oncelake::Options::default()
    };
    let store = oncelake::Store::open_with(&path, o).unwrap();
    for i in 0..200u64 {
        store.put(&format!("u{i}"), 1, &i.to_le_bytes()).unwrap();
    }
    assert_eq!(store.snapshot().unwrap().prefix("").unwrap().count(), 200);
}

#[test]
fn the_files_a_store_locks_are_created_owner_only_under_a_permissive_umask() {
    // A flock (and redb's byte-range locks) needs only a descriptor open for reading: a user
    // who could read LOCK or a database file could lock the owner out (R20). Under umask 022
    // (files 0644 by default) they are created 0600; the objects stay as the umask says.
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: umask only changes the process's creation mask; 022 is the common default, so
    // other tests of this binary creating files meanwhile get the modes they would anyway.
    let old = unsafe { libc::umask(0o022) };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("lake");
    let store = Store::open(&dir).unwrap();
    store.put("u", 1, b"x").unwrap();
    drop(store);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    for name in ["LOCK", DB_FILE, "wal.redb"] {
        let mode = std::fs::metadata(dir.join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name}: {mode:o}");
    }
}
