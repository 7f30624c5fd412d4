//! The CLI contract of `oncelake reconcile` and `oncelake log --since`.

use crate::bin;

use super::{fill, open};
use std::path::Path;
use std::process::Command;

pub(super) fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin::oncelake()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cli_store(dir: &Path) -> String {
    let store = dir.join("lake");
    {
        let s = open(&store);
        fill(
            &s,
            &[("a", 1), ("c", 3), ("d", 5)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        );
        s.put("c", 4, b"newer").unwrap();
    }
    store.to_str().unwrap().to_string()
}

/// Writes `text` to the listing file `name` in `dir`; its path.
fn listing_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// A full CSV listing with a header: the plan as tab-separated lines and a summary.
fn cli_plans_a_full_listing(dir: &Path, store: &str) {
    let csv = listing_file(dir, "src.csv", "unit,version\na,2\nb,1\nc,4\n");
    let (code, out, err) = cli(&["reconcile", store, "--source", &csv]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        &lines[..4],
        [
            "action\tunit\tsource_version\tcurrent_version",
            "behind\ta\t2\t1",
            "missing\tb\t1\t-",
            "unknown\td\t-\t5"
        ]
    );
    assert!(lines[4].starts_with("summary: 2 to process"), "{out}");
}

/// JSON lines, sniffed from the content (no extension), as changes, listing up-to-date units too.
fn cli_plans_changes_in_json_lines(dir: &Path, store: &str) {
    let jl = listing_file(
        dir,
        "changes",
        "{\"unit\": \"c\", \"version\": 9}\n{\"unit\": \"a\", \"version\": 1}\n",
    );
    let (code, out, err) = cli(&[
        "reconcile",
        store,
        "--source",
        &jl,
        "--changes-only",
        "--list-up-to-date",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (line, want) in lines[..2].iter().zip([
        [
            "\"unit\":\"c\"",
            "\"action\":\"behind\"",
            "\"source_version\":9",
            "\"current_version\":4",
        ],
        [
            "\"unit\":\"a\"",
            "\"action\":\"up_to_date\"",
            "\"source_version\":1",
            "\"current_version\":1",
        ],
    ]) {
        for w in want {
            assert!(line.contains(w), "{line} lacks {w}");
        }
    }
    assert!(lines[2].starts_with("{\"summary\":"), "{}", lines[2]);
    assert!(
        lines[2].contains("\"form\":\"incremental\""),
        "{}",
        lines[2]
    );
}

/// An unsorted full listing, from a file or from standard input, is sorted, with a note.
fn cli_sorts_an_unsorted_listing(dir: &Path, store: &str) {
    let unsorted = "d,5\nc,4\nb,1\na,2\n";
    let want = [
        "action\tunit\tsource_version\tcurrent_version",
        "behind\ta\t2\t1",
        "missing\tb\t1\t-",
    ];
    let p = listing_file(dir, "unsorted.csv", unsorted);
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let (code, out, err) = cli(&[
        "reconcile",
        store,
        "--source",
        &p,
        "--tmp",
        tmp.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("not sorted"), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..3], want, "{out}");
    assert!(lines[3].starts_with("summary: 2 to process"), "{out}");
    let o = bin::run(
        &["reconcile", store, "--source", "-", "--json"],
        Some(unsorted.as_bytes()),
    );
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("not sorted"), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].contains("\"unit\":\"a\"") && lines[0].contains("behind"),
        "{out}"
    );
    assert!(
        lines[1].contains("\"unit\":\"b\"") && lines[1].contains("missing"),
        "{out}"
    );
    assert!(
        lines[2].contains("\"to_process\":2") && lines[2].contains("\"unknown\":0"),
        "{out}"
    );
}

/// One refused reconcile: a listing file (name, text) if any, the further arguments, and what
/// the error must name ("" for anything).
pub(super) type Refusal = (
    Option<(&'static str, &'static str)>,
    &'static [&'static str],
    &'static str,
);

/// Bad listings (the line named), a unit listed twice in an unsorted listing, a missing file and
/// a bad `--format`: exit 2, nothing printed to stdout, the store unchanged.
fn cli_refuses_bad_listings(dir: &Path, store: &str) {
    const REFUSALS: &[Refusal] = &[
        (Some(("bad.csv", "a,1\nb;2\n")), &[], "line 2"),
        (
            Some(("dup.csv", "a,1\na,2\n")),
            &[],
            "line 1 and 2 on line 2",
        ),
        (
            Some(("bad.jsonl", "{\"unit\": \"a\", \"version\": \"1\"}\n")),
            &[],
            "line 1",
        ),
        (
            Some(("unsorted-dup.csv", "d,5\na,1\nc,4\na,2\n")),
            &[],
            "line 2 and 2 on line 4",
        ),
        (None, &["--source", "/nonexistent/x.csv"], ""),
        (Some(("good.csv", "a,2\nb,1\n")), &["--format", "xml"], ""),
    ];
    let before = cli(&["log", store, "--json"]).1;
    for &(file, extra, names) in REFUSALS {
        let mut args = vec!["reconcile".to_string(), store.to_string()];
        if let Some((name, text)) = file {
            args.extend(["--source".to_string(), listing_file(dir, name, text)]);
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = cli(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: printed a plan: {out}");
        assert!(err.contains(names), "{args:?}: {err}");
    }
    assert_eq!(cli(&["log", store, "--json"]).1, before);
}

#[test]
fn cli_reconcile_plans_and_exits_by_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let store = cli_store(dir.path());
    cli_plans_a_full_listing(dir.path(), &store);
    cli_plans_changes_in_json_lines(dir.path(), &store);
    cli_refuses_bad_listings(dir.path(), &store);
    cli_sorts_an_unsorted_listing(dir.path(), &store);
}

#[test]
fn cli_log_since_shows_only_later_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = cli_store(dir.path());
    let (code, out, err) = cli(&["log", &store, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2);
    let (code, out, _) = cli(&["log", &store, "--since", "1", "--json"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    for w in [
        "\"seq\":2",
        "\"kind\":\"commit\"",
        "\"unit\":\"c\"",
        "\"source_version\":4",
    ] {
        assert!(lines[0].contains(w), "{} lacks {w}", lines[0]);
    }
    let (_, out, _) = cli(&["log", &store, "--since", "1"]);
    // seq, the commit's date (RFC 3339, UTC), kind, units.
    let fields: Vec<&str> = out.lines().next().unwrap_or_default().split('\t').collect();
    assert_eq!(fields.len(), 5, "{out}");
    assert_eq!(
        (fields[0], fields[2], fields[3], fields[4]),
        ("seq 2", "commit", "1 unit(s)", "c@4"),
        "{out}"
    );
    assert!(
        fields[1].len() == 24 && fields[1].ends_with('Z') && fields[1].contains('T'),
        "{out}"
    );
    let (code, out, _) = cli(&["log", &store, "--since", "2"]);
    assert_eq!((code, out.as_str()), (0, ""));
    let (code, _, _) = cli(&["log", &store, "--since", "x"]);
    assert_eq!(code, 2);
}
