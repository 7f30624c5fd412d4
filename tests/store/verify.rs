//! `Store::verify` finds every kind of damage and names the affected units (SPEC R15).

use oncelake::verify::VerifyOptions;
use oncelake::{Batch, Store};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lake")).unwrap();
    store.put("a", 1, b"alpha alpha alpha").unwrap();
    store.put("b", 1, b"beta beta").unwrap();
    store.put("c", 1, b"gamma").unwrap();
    (dir, store)
}

/// Objects are read-only: make one writable before damaging it.
fn writable(path: &Path) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

fn object_of(store: &Store, unit: &str) -> PathBuf {
    store.object_path(&store.get(unit).unwrap().unwrap().object.id)
}

fn shallow() -> VerifyOptions {
    VerifyOptions { deep: false }
}

fn deep() -> VerifyOptions {
    VerifyOptions { deep: true }
}

#[test]
fn a_healthy_store_is_clean() {
    let (_d, store) = store();
    store.correct("c", 1, b"gamma, fixed").unwrap();
    for opts in [shallow(), deep()] {
        let r = store.verify(opts).unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(r.objects_checked, 4);
        assert_eq!(r.entries_checked, 4, "3 current + 1 history entry");
        assert_eq!(r.replay.units, 3);
    }
}

#[test]
fn a_flipped_byte_is_corrupt_and_names_the_unit() {
    let (_d, store) = store();
    let path = object_of(&store, "a");
    writable(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[3] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let r = store.verify(shallow()).unwrap();
    assert!(!r.is_intact());
    assert_eq!(r.corrupt.len(), 1, "{r:?}");
    assert!(
        r.corrupt[0].detail.contains("crc32"),
        "{}",
        r.corrupt[0].detail
    );
    assert_eq!(r.corrupt[0].units[0].unit, "a");
    assert!(r.corrupt[0].units[0].current);
    assert!(r.missing.is_empty() && r.strays.is_empty() && r.reclaimable.is_empty());
    assert_eq!(r.affected_units().into_iter().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn a_truncated_object_is_corrupt() {
    let (_d, store) = store();
    let path = object_of(&store, "b");
    writable(&path);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(4).unwrap();
    let r = store.verify(shallow()).unwrap();
    assert_eq!(r.corrupt.len(), 1, "{r:?}");
    assert!(
        r.corrupt[0].detail.contains("4 bytes"),
        "{}",
        r.corrupt[0].detail
    );
    assert_eq!(r.affected_units().into_iter().collect::<Vec<_>>(), ["b"]);
}

#[test]
fn a_deleted_object_is_missing_also_from_the_history() {
    let (_d, store) = store();
    let old = object_of(&store, "c");
    store.put("c", 2, b"gamma v2").unwrap();
    std::fs::remove_file(&old).unwrap();
    let r = store.verify(shallow()).unwrap();
    assert_eq!(r.missing.len(), 1, "{r:?}");
    let m = &r.missing[0];
    assert_eq!(m.units.len(), 1);
    assert_eq!(m.units[0].unit, "c");
    assert!(!m.units[0].current, "the history entry of c@1 is affected");
    assert!(r.corrupt.is_empty());
    // The current entry's object is fine.
    let cur = store.get("c").unwrap().unwrap();
    assert!(store.snapshot().unwrap().read_object(&cur).is_ok());
}

#[test]
fn stray_files_are_problems_and_orphans_are_reclaimable() {
    let (_d, store) = store();
    let objects = store.path().join("objects");
    std::fs::write(objects.join("README.txt"), b"someone's notes").unwrap();
    std::fs::write(objects.join("ab").join("not-a-hash"), b"x").unwrap();
    // An object named right but in the wrong fan-out directory is a stray too.
    let id = oncelake::ObjectId::of(b"misplaced");
    std::fs::write(objects.join("00").join(id.to_hex()), b"misplaced").unwrap();
    drop(store.stage_bytes(b"staged, never committed").unwrap());
    let r = store.verify(shallow()).unwrap();
    assert!(r.is_intact(), "strays lose no data: {r:?}");
    assert!(!r.is_ok(), "but they are problems");
    assert_eq!(r.strays.len(), 3, "{r:?}");
    assert_eq!(r.problem_count(), 3);
    assert_eq!(r.reclaimable.objects.len(), 1, "{r:?}");
    assert_eq!(
        r.reclaimable.object_bytes(),
        "staged, never committed".len() as u64
    );
}

/// Every kind of rejected put leaves its object unreferenced: space for GC, not a problem.
#[test]
fn objects_of_rejected_puts_are_reclaimable_not_problems() {
    use std::time::Duration;
    let (_d, store) = store();
    let mut rejected = std::collections::BTreeMap::new();
    // Conflict: same version, other bytes.
    let out = store.put("a", 1, b"other alpha").unwrap();
    assert_eq!(out.outcome.name(), "conflict");
    rejected.insert(oncelake::ObjectId::of(b"other alpha"), 11u64);
    // Stale: an older version than the committed one.
    store.put("b", 5, b"beta v5").unwrap();
    let out = store.put("b", 4, b"beta v4").unwrap();
    assert_eq!(out.outcome.name(), "stale");
    rejected.insert(oncelake::ObjectId::of(b"beta v4"), 7);
    // Fenced: a superseded token.
    let ttl = Duration::from_secs(60);
    let first = match store.claim("f", 1, "w1", ttl).unwrap() {
        oncelake::ClaimOutcome::Granted { lease, .. } => lease,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        store.release(&first).unwrap(),
        oncelake::ReleaseOutcome::Released
    );
    assert!(matches!(
        store.claim("f", 1, "w2", ttl).unwrap(),
        oncelake::ClaimOutcome::Granted { .. }
    ));
    let late = store.stage_bytes(b"fenced output").unwrap();
    let r = store
        .commit(Batch::new().put_fenced("f", 1, &late, first.token))
        .unwrap();
    assert!(!r.applied(), "{r:?}");
    drop(late);
    rejected.insert(oncelake::ObjectId::of(b"fenced output"), 13);
    // Busy: no token while w2's lease is live.
    let out = store.put("f", 1, b"busy output").unwrap();
    assert_eq!(out.outcome.name(), "busy");
    rejected.insert(oncelake::ObjectId::of(b"busy output"), 11);
    // A lost race: two writers staged the same unit and version; the one decided second loses.
    let (x, y) = (
        store.stage_bytes(b"race winner").unwrap(),
        store.stage_bytes(b"race loser").unwrap(),
    );
    assert!(store
        .commit(Batch::new().put("r", 1, &x))
        .unwrap()
        .applied());
    let lost = store.commit(Batch::new().put("r", 1, &y)).unwrap();
    assert!(!lost.applied());
    drop((x, y));
    rejected.insert(oncelake::ObjectId::of(b"race loser"), 10);

    let r = store.verify(deep()).unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert!(!r.is_clean(), "there is something to reclaim");
    let mut got = std::collections::BTreeMap::new();
    for o in &r.reclaimable.objects {
        let name = o.path.file_name().unwrap().to_str().unwrap();
        got.insert(name.parse::<oncelake::ObjectId>().unwrap(), o.bytes);
    }
    assert_eq!(got, rejected);
    assert_eq!(r.reclaimable.object_bytes(), rejected.values().sum::<u64>());
    let gc = store
        .gc(oncelake::GcOptions {
            grace: Duration::ZERO,
            ..oncelake::GcOptions::default()
        })
        .unwrap();
    assert_eq!(gc.objects, rejected.len() as u64);
    assert!(store.verify(deep()).unwrap().is_clean());
}

#[test]
fn an_object_staged_for_a_commit_in_flight_is_not_an_orphan() {
    let (_d, store) = store();
    let held = store.stage_bytes(b"about to be committed").unwrap();
    let r = store.verify(shallow()).unwrap();
    assert!(r.is_clean(), "{r:?}");
    store.commit(Batch::new().put("d", 1, &held)).unwrap();
    drop(held);
    assert!(store.verify(shallow()).unwrap().is_clean());
}

/// Changes the last four bytes of `bytes` so that its CRC32 becomes `target` (CRC32 is linear
/// over GF(2), so 32 free bits can reach any value): a forgery only a hash can detect.
fn forge_crc(bytes: &mut [u8], target: u32) {
    let n = bytes.len();
    assert!(n >= 4);
    let base = crc32fast::hash(bytes);
    // Effect on the CRC of flipping each of the last 32 bits.
    let mut rows: Vec<(u32, u32)> = (0..32)
        .map(|bit| {
            let mut b = bytes.to_vec();
            b[n - 4 + bit / 8] ^= 1 << (bit % 8);
            (crc32fast::hash(&b) ^ base, 1u32 << bit)
        })
        .collect();
    // Gaussian elimination: find a set of flips whose effects XOR to base ^ target.
    let mut want = base ^ target;
    let mut flips = 0u32;
    for col in 0..32 {
        let Some(p) = (col..32).find(|&r| rows[r].0 >> col & 1 == 1) else {
            continue;
        };
        rows.swap(col, p);
        let pivot = rows[col];
        for (r, row) in rows.iter_mut().enumerate() {
            if r != col && row.0 >> col & 1 == 1 {
                row.0 ^= pivot.0;
                row.1 ^= pivot.1;
            }
        }
        if want >> col & 1 == 1 {
            want ^= pivot.0;
            flips ^= pivot.1;
        }
    }
    assert_eq!(want, 0, "CRC32 forging failed");
    for bit in 0..32 {
        if flips >> bit & 1 == 1 {
            bytes[n - 4 + bit / 8] ^= 1 << (bit % 8);
        }
    }
    assert_eq!(crc32fast::hash(bytes), target);
}

#[test]
fn only_deep_finds_content_with_a_forged_crc() {
    let (_d, store) = store();
    let entry = store.get("a").unwrap().unwrap();
    let path = store.object_path(&entry.object.id);
    writable(&path);
    let mut bytes = b"ALPHA alpha alpha".to_vec();
    forge_crc(&mut bytes, entry.object.crc32);
    assert_eq!(bytes.len() as u64, entry.object.size);
    std::fs::write(&path, &bytes).unwrap();
    assert!(store.verify(shallow()).unwrap().is_clean());
    let r = store.verify(deep()).unwrap();
    assert_eq!(r.corrupt.len(), 1, "{r:?}");
    assert!(r.corrupt[0].detail.contains("hashes to"));
    assert_eq!(r.corrupt[0].units[0].unit, "a");
}

#[test]
fn progress_counts_every_object() {
    let (_d, store) = store();
    let mut seen = Vec::new();
    store
        .verify_with_progress(shallow(), &mut |done, total| seen.push((done, total)))
        .unwrap();
    assert_eq!(seen, vec![(1, 3), (2, 3), (3, 3)]);
}

/// Deep verify holds the history to the log: a lost row is found. A row moved under another key
/// fails its checksum (SPEC I9): verify refuses to answer from it and names it.
#[test]
fn deep_verify_checks_the_history_against_the_log() {
    const HISTORY: redb::TableDefinition<(&str, u64), &[u8]> =
        redb::TableDefinition::new("history");
    let (d, store) = store();
    // The history holds replaced entries: replace b's, and lose the row of the first one.
    let b_seq = store.get("b").unwrap().unwrap().seq;
    store.put("b", 2, b"beta, newer").unwrap();
    let path = store.path().to_path_buf();
    drop(store);
    type HistoryTable<'t> = redb::Table<'t, (&'static str, u64), &'static [u8]>;
    let edit = |f: &dyn Fn(&mut HistoryTable)| {
        let db = redb::Database::open(path.join(oncelake::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        f(&mut txn.open_table(HISTORY).unwrap());
        txn.commit().unwrap();
    };
    let row = std::cell::RefCell::new(Vec::new());
    edit(&|h| *row.borrow_mut() = h.remove(("b", b_seq)).unwrap().unwrap().value().to_vec());
    let store = Store::open(&path).unwrap();
    assert!(store.verify(shallow()).unwrap().history_problems.is_empty());
    let r = store.verify(deep()).unwrap();
    assert!(!r.is_intact());
    assert_eq!(r.history_problems.len(), 1, "{:?}", r.history_problems);
    assert!(
        r.history_problems[0].contains("unit \"b\""),
        "{:?}",
        r.history_problems
    );
    drop(store);
    edit(&|h| {
        h.insert(("zzz", b_seq), row.borrow().as_slice()).unwrap();
    });
    let store = Store::open(&path).unwrap();
    let err = store.verify(deep()).unwrap_err();
    assert!(matches!(err, oncelake::Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("\"zzz\""), "{err}");
    drop(d);
}
