//! `oncelake gc` and `oncelake verify` as scripts use them: JSON fields and exit codes.

use crate::bin;

use std::process::Command;

fn oncelake(args: &[&str]) -> (i32, String) {
    let out = Command::new(bin::oncelake()).args(args).output().unwrap();
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
    assert_eq!(
        code, 0,
        "an orphan is reclaimable space, not a problem: {out}"
    );
    let v = json(&out);
    assert_eq!(
        (v["ok"].as_bool(), v["problems"].as_u64()),
        (Some(true), Some(0))
    );
    assert_eq!(v["reclaimable"]["objects"], 1);
    assert_eq!(v["reclaimable"]["object_bytes"], 7);
    assert_eq!(v["strays"].as_array().unwrap().len(), 0);

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

/// The staging file a running `put` (pid `pid`) writes into `staging`: a named `.part` file with
/// bytes in it, or (Linux, `O_TMPFILE`) an open descriptor of the process on an unnamed file in
/// that directory, which `/proc` shows as `staging/#<inode> (deleted)`.
fn staging_in_progress(staging: &std::path::Path, pid: u32) -> Option<Option<std::path::PathBuf>> {
    let named = std::fs::read_dir(staging)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.metadata().is_ok_and(|m| m.len() > 0));
    if let Some(e) = named {
        return Some(Some(e.path()));
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let unnamed = fds.filter_map(|e| e.ok()).any(|e| {
        std::fs::read_link(e.path()).is_ok_and(|target| {
            target.starts_with(staging)
                && target.to_string_lossy().ends_with("(deleted)")
                && std::fs::metadata(e.path()).is_ok_and(|m| m.len() > 0)
        })
    });
    unnamed.then_some(None)
}

/// A `put` killed mid-write commits nothing and leaves no problem: an unnamed staging file
/// (`O_TMPFILE`) vanishes with the process; a named one is reported as reclaimable (exit 0) and
/// `gc` with its default hour of grace removes it at once (its writer is gone).
#[test]
fn a_killed_put_leaves_nothing_or_reclaimable_staging_that_gc_removes_at_once() {
    use std::io::Write;
    let (_dir, lake) = crate::kit::new_store();
    let lake_s = lake.to_str().unwrap();
    let staging = lake.join("staging");
    let mut child = Command::new(bin::oncelake())
        .args(["put", lake_s, "big/unit", "1", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // More than one staging buffer (256 KiB), so part of it reaches the file; stdin stays open.
    stdin.write_all(&vec![7u8; 1 << 20]).unwrap();
    stdin.flush().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let part = loop {
        if let Some(part) = staging_in_progress(&staging, child.id()) {
            break part;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the put never wrote its staging file"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    drop(stdin);
    let (code, out) = oncelake(&["ls", lake_s, "--json"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("big/unit"), "a killed put committed: {out}");
    match part {
        Some(part) => reclaim_a_dead_writers_staging_file(lake_s, &part),
        None => {
            assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);
            let (code, out) = oncelake(&["verify", lake_s, "--json"]);
            assert_eq!(code, 0, "{out}");
            assert_eq!(json(&out)["reclaimable"]["staging_files"], 0, "{out}");
        }
    }
}

/// A staging file left by a writer that is gone (another process's name), as a `put` killed
/// mid-write leaves it where staging files are named.
#[test]
fn a_dead_writers_staging_file_is_reclaimable_and_gc_removes_it_at_once() {
    let (_dir, lake) = crate::kit::new_store();
    let lake_s = lake.to_str().unwrap();
    let part = lake.join("staging").join("4242-18a2b3c4d5e6f708-0.part");
    std::fs::write(&part, vec![7u8; 300_000]).unwrap();
    reclaim_a_dead_writers_staging_file(lake_s, &part);
}

/// `part` is the only staging file, its writer is gone: verify says reclaimable (exit 0) and gc
/// removes it although it is younger than the default grace.
fn reclaim_a_dead_writers_staging_file(lake_s: &str, part: &std::path::Path) {
    let size = std::fs::metadata(part).unwrap().len();
    assert!(size > 0);
    let (code, out) = oncelake(&["verify", lake_s, "--json"]);
    assert_eq!(
        code, 0,
        "a dead writer's staging file is not a problem: {out}"
    );
    let v = json(&out);
    assert_eq!(v["ok"], true);
    assert_eq!(v["reclaimable"]["staging_files"], 1, "{v}");
    assert_eq!(v["reclaimable"]["staging_bytes"], size);
    let f = &v["reclaimable"]["files"][0];
    assert_eq!(
        (f["kind"].as_str(), f["owner_gone"].as_bool()),
        (Some("staging"), Some(true)),
        "{v}"
    );
    let (code, out) = oncelake(&["verify", lake_s]);
    assert_eq!(code, 0);
    assert!(
        out.contains("reclaimable:") && out.contains("ok: no problems found"),
        "{out}"
    );

    // Default grace (1h): the file is seconds old, and still goes.
    let (code, out) = oncelake(&["gc", lake_s, "--json"]);
    assert_eq!(code, 0);
    let g = json(&out);
    assert_eq!(
        (g["staging_files"].as_u64(), g["staging_bytes"].as_u64()),
        (Some(1), Some(size)),
        "{g}"
    );
    assert!(!part.exists());
    let (code, out) = oncelake(&["verify", lake_s, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["reclaimable"]["staging_files"], 0);
}

/// Strays in objects/ stay problems: exit 7, listed under `strays`.
#[test]
fn a_stray_file_in_objects_is_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let lake_s = lake.to_str().unwrap();
    drop(oncelake::Store::open(&lake).unwrap());
    std::fs::write(lake.join("objects").join("notes.txt"), b"hello").unwrap();
    let (code, out) = oncelake(&["verify", lake_s, "--json"]);
    assert_eq!(code, 7, "{out}");
    let v = json(&out);
    assert_eq!(
        (v["ok"].as_bool(), v["problems"].as_u64()),
        (Some(false), Some(1))
    );
    assert_eq!(v["strays"][0]["bytes"], 5);
    let (code, out) = oncelake(&["verify", lake_s]);
    assert_eq!(code, 7);
    assert!(out.contains("STRAY"), "{out}");
}
