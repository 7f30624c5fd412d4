//! `oncelake table create|ls|publish` through `oncelake serve` print what they print in-process,
//! with the same exit codes (SPEC R20, R21), on a served store and an in-process twin with the
//! same history; the published Delta log is checked against a model of the units.

use crate::parquet_files::parquet;
use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use support::{new_store, put, run, Server};

/// The output with what differs between twins by construction made equal: the store's path,
/// and the store id inside a Delta `txn` appId (`oncelake:<store id>:<table>`).
fn normalized(out: &str, store: &Path) -> String {
    out.replace(store.to_str().unwrap(), "STORE")
        .lines()
        .map(|l| match l.find("\"app_id\":\"oncelake:") {
            Some(i) => {
                let rest = &l[i + 19..];
                let end = rest.find(':').unwrap();
                format!("{}STORE-ID{}", &l[..i + 19], &rest[end..])
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `args` (`{}` = the store) through the server of `served` and in-process on `local`;
/// both must answer the same. The exit code.
fn on_twins(served: &Path, local: &Path, args: &[&str]) -> (i32, String) {
    let with = |store: &Path| -> Vec<String> {
        args.iter()
            .map(|a| a.replace("{}", store.to_str().unwrap()))
            .collect()
    };
    let (a, b) = (with(served), with(local));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let b: Vec<&str> = b.iter().map(String::as_str).collect();
    let through = support::oncelake(&a);
    let in_process = support::oncelake(&b);
    let show = |o: &std::process::Output, store: &Path| {
        (
            o.status.code().unwrap_or(-1),
            normalized(&String::from_utf8_lossy(&o.stdout), store),
            normalized(&String::from_utf8_lossy(&o.stderr), store),
        )
    };
    let (t, l) = (show(&through, served), show(&in_process, local));
    assert_eq!(
        (t.0, &t.1),
        (l.0, &l.1),
        "{args:?}: through the server vs in-process; stderr {:?} vs {:?}",
        t.2,
        l.2
    );
    // Error messages say the same thing (a served failure may carry the server's prefix).
    if t.0 != 0 {
        let first = |s: &str| s.lines().next().unwrap_or("").to_string();
        let msg = first(&l.2);
        let msg = msg.trim_start_matches("error: ");
        assert!(t.2.contains(msg), "{args:?}: {:?} vs {:?}", t.2, l.2);
    }
    (t.0, t.1)
}

/// The data files the Delta log of `table` holds now (adds minus removes), and its newest
/// version.
fn delta_state(table: &Path) -> (BTreeSet<String>, u64) {
    let mut files = BTreeSet::new();
    let mut v: u64 = 0;
    while let Ok(text) = std::fs::read_to_string(table.join(format!("_delta_log/{v:020}.json"))) {
        for line in text.lines() {
            let a: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(p) = a["add"]["path"].as_str() {
                files.insert(p.to_string());
            }
            if let Some(p) = a["remove"]["path"].as_str() {
                files.remove(p);
            }
        }
        v += 1;
    }
    (files, v.saturating_sub(1))
}

#[test]
fn table_commands_through_the_server_match_in_process_and_the_model() {
    let (_da, served) = new_store();
    let (_db, local) = new_store();
    let server = Server::start(&served);
    let mut model = BTreeSet::new();
    let both_put = |unit: &str, version: u64, bytes: &[u8]| {
        put(&served, unit, version, bytes);
        put(&local, unit, version, bytes);
    };

    // No tables yet: both say so.
    assert_eq!(on_twins(&served, &local, &["table", "ls", "{}"]).0, 0);
    assert_eq!(on_twins(&served, &local, &["table", "publish", "{}"]).0, 0);
    for json in [false, true] {
        let mut args = vec!["table", "create", "{}", "sales", "--prefix", "sales/"];
        if json {
            args.push("--json"); // the second create is the same definition: a no-op
        }
        assert_eq!(on_twins(&served, &local, &args).0, 0);
    }
    // Refusals exit as in-process, with the engine's message.
    for args in [
        vec!["table", "create", "{}", "sales", "--prefix", "other/"],
        vec!["table", "create", "{}", "bad name", "--prefix", "x/"],
        vec!["table", "publish", "{}", "nosuch"],
    ] {
        let (code, _) = on_twins(&served, &local, &args);
        assert_eq!(code, 2, "{args:?}");
    }
    let (_, out) = on_twins(&served, &local, &["table", "ls", "{}", "--json"]);
    assert!(out.contains("\"version\":null"), "{out}");

    for (i, region) in ["eu", "us", "apac"].iter().enumerate() {
        let unit = format!("sales/date=2026-11-29/region={region}");
        both_put(&unit, 1, &parquet(i as i64 * 10, 3, region));
        model.insert(unit);
    }
    both_put("other/x", 1, b"not in the table");
    let (code, out) = on_twins(
        &served,
        &local,
        &["table", "publish", "{}", "sales", "--json"],
    );
    assert_eq!(code, 0);
    let rep: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(rep["adds"], 3, "{out}");

    // A new version of one unit replaces its file; publishing again changes nothing more.
    let unit = "sales/date=2026-11-29/region=eu";
    both_put(unit, 2, &parquet(100, 5, "eu2"));
    assert_eq!(on_twins(&served, &local, &["table", "publish", "{}"]).0, 0);
    assert_eq!(
        on_twins(&served, &local, &["table", "publish", "{}", "--json"]).0,
        0
    );
    assert_eq!(on_twins(&served, &local, &["table", "ls", "{}"]).0, 0);

    // The model: one live data file per unit, in each unit's partition, same on both twins.
    for store in [&served, &local] {
        let (files, version) = delta_state(&store.join("tables/sales"));
        // One table version per store commit under the prefix: 3 units, then one new version.
        assert_eq!(version, 3, "{files:?}");
        let partitions: BTreeSet<String> = files
            .iter()
            .map(|f| f.rsplit_once('/').unwrap().0.to_string())
            .collect();
        // The units' keys under the prefix are their partition paths.
        let want: BTreeSet<String> = model
            .iter()
            .map(|u| u.trim_start_matches("sales/").to_string())
            .collect();
        assert_eq!(files.len(), model.len(), "{files:?}");
        assert_eq!(partitions, want, "{files:?}");
    }
    // The server still holds the store: in-process table commands did not run on it.
    let (code, _) = run(&["stats", served.to_str().unwrap()]);
    assert_eq!(code, 0);
    server.stop();
}

/// Runs `args` (`{}` = the store, `--json` added) through the server of `served` and in-process
/// on `local`: the same exit code, nothing on standard output, and the same JSON error object on
/// standard error — kind, exit code and message. The error object.
fn json_error_on_twins(served: &Path, local: &Path, args: &[&str]) -> serde_json::Value {
    let run = |store: &Path| {
        let mut a: Vec<String> = args
            .iter()
            .map(|a| a.replace("{}", store.to_str().unwrap()))
            .collect();
        a.push("--json".into());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = support::oncelake(&a);
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).to_string(),
            normalized(String::from_utf8_lossy(&o.stderr).trim(), store),
        )
    };
    let (through, in_process) = (run(served), run(local));
    assert_eq!(
        through, in_process,
        "{args:?}: through the server vs in-process"
    );
    assert!(through.1.is_empty(), "{args:?}: {}", through.1);
    let v: serde_json::Value = serde_json::from_str(&through.2)
        .unwrap_or_else(|e| panic!("{args:?}: not one JSON object ({e}): {}", through.2));
    assert_eq!(v["exit_code"], through.0, "{args:?}: {v}");
    v
}

/// A refused table call reports the in-process error kind under `--json` through the server too
/// (`table`, exit 2, for every refusal; `table_damaged`, exit 1, for damaged table files), not
/// the `usage` or `io` of a generic server error.
#[test]
fn table_errors_through_the_server_have_the_in_process_kind() {
    let (_da, served) = new_store();
    let (_db, local) = new_store();
    let server = Server::start(&served);
    let both_put = |unit: &str, version: u64, bytes: &[u8]| {
        put(&served, unit, version, bytes);
        put(&local, unit, version, bytes);
    };
    let ok = |args: &[&str]| assert_eq!(on_twins(&served, &local, args).0, 0, "{args:?}");
    ok(&["table", "create", "{}", "sales", "--prefix", "sales/"]);
    let refusals: [&[&str]; 4] = [
        // Exists with another definition.
        &["table", "create", "{}", "sales", "--prefix", "other/"],
        // An invalid name, an invalid prefix.
        &["table", "create", "{}", "bad name", "--prefix", "x/"],
        &["table", "create", "{}", "t2", "--prefix", "bad\u{1}prefix/"],
        // No such table.
        &["table", "publish", "{}", "nosuch"],
    ];
    for args in refusals {
        let v = json_error_on_twins(&served, &local, args);
        assert_eq!(
            (&v["error"], &v["exit_code"]),
            (&"table".into(), &2.into()),
            "{args:?}: {v}"
        );
    }
    // A unit that is not Parquet stops the publish (BadUnit): kind table, exit 2.
    both_put("sales/date=2026-11-29/region=eu", 1, &parquet(0, 3, "eu"));
    ok(&["table", "publish", "{}", "sales"]);
    both_put("sales/date=2026-11-29/region=us", 1, b"not parquet");
    let v = json_error_on_twins(&served, &local, &["table", "publish", "{}", "sales"]);
    assert_eq!(
        (&v["error"], &v["exit_code"]),
        (&"table".into(), &2.into()),
        "{v}"
    );
    // A log file written by someone else: table_damaged, exit 1.
    for store in [&served, &local] {
        let log = store.join("tables/sales/_delta_log/00000000000000000000.json");
        assert!(log.exists(), "{}", log.display());
        std::fs::write(&log, "").unwrap();
    }
    for args in [&["table", "ls", "{}"][..], &["table", "publish", "{}"]] {
        let v = json_error_on_twins(&served, &local, args);
        assert_eq!(
            (&v["error"], &v["exit_code"]),
            (&"table_damaged".into(), &1.into()),
            "{args:?}: {v}"
        );
    }
    server.stop();
}
