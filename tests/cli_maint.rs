//! `oncelake gc` and `oncelake verify` as scripts use them: JSON fields and exit codes.

use std::process::Command;

fn oncelake(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oncelake"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line.trim()).unwrap()
}

#[test]
fn gc_and_verify_report_counts_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let lake = lake.to_str().unwrap();
    {
        let store = oncelake::Store::open(lake).unwrap();
        store.put("a", 1, b"one").unwrap();
        store.put("a", 2, b"two").unwrap();
        drop(store.stage_bytes(b"orphan!").unwrap());
    }
    let (code, out) = oncelake(&["verify", lake, "--json"]);
    assert_eq!(code, 7, "an orphan is a problem");
    assert_eq!(json(&out)["orphaned"].as_array().unwrap().len(), 1);

    let (code, out) = oncelake(&["gc", lake, "--dry-run", "--json"]);
    assert_eq!(code, 0);
    let v = json(&out);
    assert_eq!(
        (v["dry_run"].as_bool(), v["objects"].as_u64()),
        (Some(true), Some(1))
    );
    assert_eq!(v["object_bytes"], 7);
    assert_eq!(
        v["history_rows_pruned"], 0,
        "history is kept 7 days by default"
    );

    let (code, out) = oncelake(&["gc", lake, "--retain", "0", "--grace", "0", "--json"]);
    assert_eq!(code, 0);
    let v = json(&out);
    // The orphan, plus a@1's object if its row was pruned (superseded in an earlier millisecond).
    let pruned = v["history_rows_pruned"].as_u64().unwrap();
    assert_eq!(v["objects"].as_u64().unwrap(), 1 + pruned, "{v}");

    let (code, out) = oncelake(&["verify", lake, "--deep", "--json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(json(&out)["ok"], true);

    // Damage: delete a unit's object.
    let store = oncelake::Store::open(lake).unwrap();
    let path = store.object_path(&store.get("a").unwrap().unwrap().object.id);
    drop(store);
    std::fs::remove_file(path).unwrap();
    let (code, out) = oncelake(&["verify", lake]);
    assert_eq!(code, 7);
    assert!(
        out.contains("MISSING") && out.contains("a (current"),
        "{out}"
    );

    let (code, _) = oncelake(&["gc", lake, "--grace", "soon"]);
    assert_eq!(code, 2, "a bad duration is a usage error");
}
