//! Bad input gets a clear error and changes nothing (SPEC R1, R19).

use crate::common;

use common::tree;
use oncelake::{Error, Store};
use std::path::Path;

fn populated() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    let s = Store::open(&path).unwrap();
    for i in 0..50u64 {
        s.put(&format!("unit/{i}"), i, &i.to_le_bytes()).unwrap();
    }
    drop(s);
    (dir, path)
}

#[test]
fn bad_keys_are_refused_and_the_store_is_untouched() {
    let (_d, path) = populated();
    let s = Store::open(&path).unwrap();
    let seq = s.last_seq().unwrap();
    for (key, expect) in [
        (String::new(), "empty"),
        ("tab\tkey".to_string(), "control character"),
        ("nul\0key".to_string(), "control character"),
        ("k".repeat(1025), "longer than 1024"),
    ] {
        let err = s.put(&key, 1, b"x").unwrap_err();
        assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
        assert!(err.to_string().contains(expect), "{err}");
        assert!(s
            .claim(&key, 1, "w", std::time::Duration::from_secs(1))
            .is_err());
    }
    assert!(s.put(&"k".repeat(1024), 1, b"x").is_ok());
    assert_eq!(s.last_seq().unwrap(), seq + 1);
}

#[test]
fn a_directory_that_is_not_a_store_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"my precious data").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let before = tree(dir.path());
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::NotAStore { .. }), "{err}");
    assert!(err.to_string().contains("not an oncelake store"), "{err}");
    assert_eq!(tree(dir.path()), before);
    // A plain file is not a store either.
    let file = dir.path().join("notes.txt");
    assert!(matches!(Store::open(&file), Err(Error::NotAStore { .. })));
    assert_eq!(tree(dir.path()), before);
}

fn assert_refused_unchanged(path: &Path, damage: impl FnOnce(&Path)) -> Error {
    damage(path);
    let before = tree(path);
    let err = Store::open(path).unwrap_err();
    assert_eq!(tree(path), before, "a refused open changed files ({err})");
    // And again: refusing is stable.
    let again = Store::open(path).unwrap_err();
    assert_eq!(err.to_string(), again.to_string());
    err
}

/// A populated store damaged by `damage` is refused as corrupt, unchanged.
fn refused_as_corrupt(damage: impl FnOnce(&Path)) {
    let (_d, path) = populated();
    let err = assert_refused_unchanged(&path, damage);
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[test]
fn a_truncated_database_is_refused_unchanged() {
    for keep in [0u64, 9, 4096, 20_000] {
        let (_d, path) = populated();
        let err = assert_refused_unchanged(&path, |p| {
            let db = p.join(oncelake::DB_FILE);
            let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
            let len = f.metadata().unwrap().len();
            f.set_len(keep.min(len / 2)).unwrap();
        });
        assert!(matches!(err, Error::Corrupt { .. }), "keep {keep}: {err}");
        assert!(err.to_string().contains("corrupt"), "{err}");
    }
}

#[test]
fn a_garbage_database_is_refused_unchanged() {
    refused_as_corrupt(|p| {
        let db = p.join(oncelake::DB_FILE);
        let len = std::fs::metadata(&db).unwrap().len() as usize;
        let junk: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        std::fs::write(&db, junk).unwrap();
    });
}

#[test]
fn garbage_behind_a_valid_header_is_refused_unchanged() {
    refused_as_corrupt(|p| {
        let db = p.join(oncelake::DB_FILE);
        let mut bytes = std::fs::read(&db).unwrap();
        for b in bytes.iter_mut().skip(64) {
            *b = b.wrapping_mul(31).wrapping_add(17);
        }
        std::fs::write(&db, bytes).unwrap();
    });
}

#[test]
fn a_missing_database_file_is_refused_unchanged() {
    refused_as_corrupt(|p| {
        std::fs::remove_file(p.join(oncelake::DB_FILE)).unwrap();
    });
}

/// Replaces the marker (it is created read-only).
fn rewrite_marker(store: &Path, text: &str) {
    let marker = store.join(oncelake::MARKER_FILE);
    std::fs::remove_file(&marker).unwrap();
    std::fs::write(&marker, text).unwrap();
}

#[test]
fn a_store_of_a_newer_format_is_refused_unchanged() {
    let (_d, path) = populated();
    let err = assert_refused_unchanged(&path, |p| {
        rewrite_marker(p, "oncelake store\nformat 99\n");
    });
    assert!(matches!(err, Error::NewerFormat { found: 99, .. }), "{err}");
    assert!(err.to_string().contains("upgrade oncelake"), "{err}");
}

#[test]
fn a_damaged_marker_is_refused_unchanged() {
    refused_as_corrupt(|p| {
        rewrite_marker(p, "hello\n");
    });
}

#[test]
fn a_second_opener_is_told_the_store_is_locked() {
    let (_d, path) = populated();
    let s = Store::open(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    assert!(
        err.to_string().contains("locked by another process"),
        "{err}"
    );
    drop(s);
    Store::open(&path).unwrap();
}
