//! Long work started through `oncelake serve` prints the same plain progress lines on a
//! non-terminal stderr as in-process (SPEC R20): a large put, verify, gc, reconcile —
//! with the same stdout and exit code. `ONCELAKE_PROGRESS_INTERVAL=0` makes every update a line.

use crate::support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use support::{bin, new_store, put, Server};

/// (exit code, stdout, stderr) of the CLI with progress lines at every update.
fn run(args: &[String], stdin: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(bin::oncelake())
        .args(args)
        .env("ONCELAKE_PROGRESS_INTERVAL", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The progress lines of `what` in `stderr`.
fn progress_lines<'a>(stderr: &'a str, what: &str) -> Vec<&'a str> {
    let prefix = format!("oncelake {what}: ");
    stderr.lines().filter(|l| l.starts_with(&prefix)).collect()
}

/// Runs `args` (`{}` = the store) through the server of `served` and in-process on `local`:
/// the same exit code and stdout (store paths aside), and progress lines of `what` both ways.
fn on_twins(served: &Path, local: &Path, args: &[&str], stdin: &[u8], what: &str) -> Vec<String> {
    let with = |store: &Path| -> Vec<String> {
        args.iter()
            .map(|a| a.replace("{}", store.to_str().unwrap()))
            .collect()
    };
    let t = run(&with(served), stdin);
    let l = run(&with(local), stdin);
    let strip = |s: &str, store: &Path| s.replace(store.to_str().unwrap(), "STORE");
    assert_eq!(
        (t.0, strip(&t.1, served)),
        (l.0, strip(&l.1, local)),
        "{args:?}: through the server vs in-process; stderr {:?} vs {:?}",
        t.2,
        l.2
    );
    let (tp, lp) = (progress_lines(&t.2, what), progress_lines(&l.2, what));
    assert!(
        !lp.is_empty(),
        "{args:?}: no progress in-process: {:?}",
        l.2
    );
    assert!(
        !tp.is_empty(),
        "{args:?}: no progress through the server: {:?}",
        t.2
    );
    tp.iter().map(|s| s.to_string()).collect()
}

#[test]
fn long_work_through_the_server_prints_progress_as_in_process() {
    let (_da, served) = new_store();
    let (_db, local) = new_store();
    let server = Server::start(&served);
    for i in 0..30 {
        for store in [&served, &local] {
            put(
                store,
                &format!("u/{i:05}"),
                1,
                format!("out {i}").as_bytes(),
            );
        }
    }

    // A large put from a file: bytes read, with the file's size as the total.
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![7u8; 8 << 20]).unwrap();
    let lines = on_twins(
        &served,
        &local,
        &["put", "{}", "big/one", "1", big.to_str().unwrap()],
        b"",
        "put",
    );
    let last = lines.last().unwrap();
    assert!(
        last.contains(&format!("/{} bytes read", 8 << 20)),
        "{lines:?}"
    );

    // verify: objects checked of the total.
    let lines = on_twins(&served, &local, &["verify", "{}", "--deep"], b"", "verify");
    assert!(lines.iter().all(|l| l.contains("objects")), "{lines:?}");

    // gc: a heartbeat.
    on_twins(&served, &local, &["gc", "{}", "--dry-run"], b"", "gc");

    // reconcile: rows read, from a listing long enough to report.
    let mut listing = String::new();
    for i in 0..10_000 {
        listing.push_str(&format!("u/{i:05},1\n"));
    }
    let lines = on_twins(
        &served,
        &local,
        &["reconcile", "{}", "--source", "-", "--format", "csv"],
        listing.as_bytes(),
        "reconcile",
    );
    assert!(lines.iter().all(|l| l.contains("rows read")), "{lines:?}");
    server.stop();
}
