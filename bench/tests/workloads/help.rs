//! Every benchmark's `--help` teaches: it has an example and the exit codes, and the examples
//! run as written (tiny sizes) and exit 0, in an empty directory.

use crate::support;

/// The subcommands `oncelake-bench --help` lists under `Commands:` (without `help`).
fn subcommands() -> Vec<String> {
    let out = support::oncelake_bench().arg("--help").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut names = Vec::new();
    let mut in_commands = false;
    for line in text.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
        } else if in_commands && line.trim().is_empty() {
            break;
        } else if in_commands && line.starts_with("  ") && !line.starts_with("   ") {
            let name = line.split_whitespace().next().unwrap_or_default();
            if name != "help" {
                names.push(name.to_string());
            }
        }
    }
    names
}

#[test]
fn every_benchmarks_help_has_examples_that_run_and_exit_codes() {
    let commands = subcommands();
    // The hidden helpers (`open`, `crash`, `seed001-worker`) are not listed; the benchmarks are.
    for expected in [
        "commit",
        "stage",
        "dedup",
        "reconcile",
        "serve-load",
        "table",
        "lake",
    ] {
        assert!(commands.iter().any(|c| c == expected), "{commands:?}");
    }
    assert!(
        !commands.iter().any(|c| c == "seed001-worker"),
        "{commands:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    for command in &commands {
        let out = support::oncelake_bench()
            .args([command, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(help.contains("Exit codes: 0 measured"), "{command}: {help}");
        let examples: Vec<&str> = help
            .lines()
            .filter_map(|l| l.trim().strip_prefix("oncelake-bench "))
            .collect();
        assert!(!examples.is_empty(), "`{command} --help` has no example");
        for example in examples {
            let args: Vec<&str> = example.split_whitespace().collect();
            let out = support::oncelake_bench_served()
                .args(&args)
                .arg("-q")
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(0), "{example}: {out:?}");
            // --json examples print JSON lines only.
            if args.contains(&"--json") {
                for line in String::from_utf8(out.stdout).unwrap().lines() {
                    serde_json::from_str::<serde_json::Value>(line)
                        .unwrap_or_else(|e| panic!("{example}: {line}: {e}"));
                }
            }
        }
    }
}

#[test]
fn a_missing_oncelake_binary_is_a_usage_error_naming_how_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-oncelake-here");
    let out = support::oncelake_bench()
        .args(["serve-load", "--clients", "1", "--seconds", "1", "--dir"])
        .arg(dir.path())
        .env("ONCELAKE_BIN", &missing)
        .output()
        .unwrap();
    support::usage_error(
        &out,
        &["no-oncelake-here", "cargo build --release -p oncelake-cli"],
    );
    // Nothing was started: the scratch directory stays empty.
    support::nothing_left_in(dir.path());
}
