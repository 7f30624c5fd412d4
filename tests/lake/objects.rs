//! Objects on a lake node (SPEC R23, I2): applying another node's segment fetches the objects
//! it references into the node's `objects/` first, checked against its entries; one the lake no
//! longer holds is skipped then, and reported by its read and by verify.

use oncelake::{Error, ObjectId, Options, Outcome, Store, VerifyOptions};
use std::collections::BTreeMap;
use std::path::Path;

fn node(dir: &Path, url: &str) -> Store {
    let opts = Options {
        lake: Some(url.to_string()),
        ..Options::default()
    };
    Store::open_with(dir, opts).unwrap()
}

/// Every unit's bytes as node `a` committed them: the model the other node must read.
fn commit_some(a: &Store, n: u64) -> BTreeMap<String, Vec<u8>> {
    let mut model = BTreeMap::new();
    for i in 0..n {
        let (unit, bytes) = (format!("u/{i}"), format!("bytes of unit {i}").into_bytes());
        let o = a.put(&unit, 1, &bytes).unwrap().outcome;
        assert!(matches!(o, Outcome::Committed { .. }), "{o:?}");
        model.insert(unit, bytes);
    }
    model
}

#[test]
fn a_synced_segment_brings_its_objects_before_its_entries_are_read() {
    let d = tempfile::tempdir().unwrap();
    let url = format!("file://{}", d.path().join("lake").display());
    let a = node(&d.path().join("a"), &url);
    let b = node(&d.path().join("b"), &url);
    let model = commit_some(&a, 5);
    b.sync().unwrap();
    let snap = b.snapshot().unwrap();
    for (unit, bytes) in &model {
        let e = snap.get(unit).unwrap().expect("b applied a's commit");
        let local = b.object_path(&e.object.id);
        assert!(local.exists(), "{unit}'s object not fetched by the sync");
        assert_eq!(
            &std::fs::read(&local).unwrap(),
            bytes,
            "{unit}'s object on disk"
        );
        assert_eq!(&snap.read_object(&e).unwrap(), bytes);
    }
    let report = b.verify(VerifyOptions::default()).unwrap();
    assert!(report.is_ok(), "{report:?}");
}

#[test]
fn an_object_the_lake_lost_is_reported_when_read_and_by_verify() {
    let d = tempfile::tempdir().unwrap();
    let lake = d.path().join("lake");
    let url = format!("file://{}", lake.display());
    let a = node(&d.path().join("a"), &url);
    let model = commit_some(&a, 3);
    let lost = ObjectId::of(&model["u/1"]);
    let mut doomed = Vec::new();
    let hex = lost.to_hex();
    let is_lost = |p: &Path| p.to_string_lossy().contains(&hex);
    crate::common::files_below(&lake.join("objects"), &[], &is_lost, &mut doomed);
    assert_eq!(doomed.len(), 1, "one lake object of u/1: {doomed:?}");
    std::fs::remove_file(&doomed[0]).unwrap();
    // A new node applies the whole log (fetching the objects the lake holds), then reads.
    let b = node(&d.path().join("b"), &url);
    let snap = b.snapshot().unwrap();
    for (unit, bytes) in &model {
        let e = snap.get(unit).unwrap().expect("b applied a's commit");
        match snap.read_object(&e) {
            Ok(got) if e.object.id != lost => assert_eq!(&got, bytes),
            Err(Error::Lake { detail, .. }) if e.object.id == lost => {
                assert!(detail.contains("is not in the lake"), "{detail}")
            }
            other => panic!("{unit}: {other:?}"),
        }
    }
    let report = b.verify(VerifyOptions::default()).unwrap();
    let missing: Vec<_> = report.missing.iter().map(|p| p.object).collect();
    assert_eq!(missing, vec![lost], "{report:?}");
    assert!(report.corrupt.is_empty(), "{report:?}");
}
