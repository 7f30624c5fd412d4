//! Every example of README.md's shell blocks and of `oncelake --help` (and the commands' own
//! `--help`) runs as written when pasted in order into an empty directory (SPEC R17).
//!
//! Each line runs in bash (`set -o pipefail`), in one temporary directory, with the binary
//! first on `PATH`, and must exit 0. README lines starting with `cargo ` build and test this
//! repository itself; they are the one thing not run here.

mod bin;

use std::path::Path;
use std::process::Command;

/// Subcommands whose `--help` has examples, in the order their examples are run (after the
/// top-level ones, in the same directory). `serve` is last: its examples stop the server they
/// start. `help_examples_are_all_run` checks that no subcommand with examples is missing here.
const HELP_WITH_EXAMPLES: &[&[&str]] = &[
    &["gc"],
    &["verify"],
    &["reconcile"],
    &["pipeline"],
    &["table"],
    &["bench", "commit"],
    &["bench", "stage"],
    &["bench", "serve-load"],
    &["serve"],
];

/// The subcommands `oncelake <args> --help` lists under `Commands:` (without `help`).
fn subcommands(args: &[&str]) -> Vec<String> {
    let out = Command::new(bin::oncelake())
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut names = Vec::new();
    let mut in_commands = false;
    for line in text.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if in_commands && line.trim().is_empty() {
            break;
        }
        // A command's line is indented by two; a wrapped description by more.
        if in_commands && line.starts_with("  ") && !line.starts_with("   ") {
            if let Some(name) = line.split_whitespace().next() {
                if name != "help" {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// Every subcommand, at any depth, whose `--help` has examples is in [`HELP_WITH_EXAMPLES`]
/// (`table` and `serve` once had examples that no test ran, and did not run as written).
#[test]
fn help_examples_are_all_run() {
    let mut with_examples = Vec::new();
    let mut todo: Vec<Vec<String>> = subcommands(&[]).into_iter().map(|c| vec![c]).collect();
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        if !help_lines(&args).is_empty() {
            with_examples.push(path.clone());
        }
        for sub in subcommands(&args) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
    }
    for path in with_examples {
        assert!(
            HELP_WITH_EXAMPLES
                .iter()
                .any(|h| h.iter().copied().eq(path.iter().map(String::as_str))),
            "`oncelake {} --help` has examples that no test runs: add it to HELP_WITH_EXAMPLES",
            path.join(" ")
        );
    }
}

/// Runs `lines` in order in `dir`; returns the failures.
fn run_lines(dir: &Path, source: &str, lines: &[String]) -> Vec<String> {
    let bin_dir = bin::oncelake().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failures = Vec::new();
    for line in lines {
        let out = Command::new("bash")
            .args(["-c", &format!("set -o pipefail\n{line}")])
            .current_dir(dir)
            .env("PATH", &path)
            .env("ONCELAKE_PROGRESS_INTERVAL", "1h")
            .output()
            .unwrap();
        if !out.status.success() {
            failures.push(format!(
                "{source}: `{line}` exited {:?}: {}{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    failures
}

/// The command lines of README.md's ```sh blocks, in order.
fn readme_lines() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        if line.trim_start().starts_with("```") {
            in_sh = !in_sh && line.trim() == "```sh";
            continue;
        }
        let l = line.trim();
        if in_sh && !l.is_empty() && !l.starts_with('#') && !l.starts_with("cargo ") {
            lines.push(l.to_string());
        }
    }
    lines
}

/// The example lines of one `--help` text: the indented lines after `Examples:` / `Example:`,
/// up to the first blank line, comments left out.
fn help_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new(bin::oncelake())
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{args:?} --help");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = Vec::new();
    let mut in_examples = false;
    for line in text.lines() {
        if line.starts_with("Examples:") || line.starts_with("Example:") {
            in_examples = true;
            continue;
        }
        if line.trim().is_empty() {
            in_examples = false;
            continue;
        }
        let l = line.trim();
        if in_examples && line.starts_with("  ") && !l.starts_with('#') {
            lines.push(l.to_string());
        }
    }
    lines
}

#[test]
fn readme_shell_examples_run_as_written_in_order() {
    let lines = readme_lines();
    assert!(
        lines.iter().filter(|l| l.contains("oncelake ")).count() >= 15,
        "README's command-line block was not found: {lines:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let failures = run_lines(dir.path(), "README.md", &lines);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // What the examples said they would make is there.
    assert_eq!(
        std::fs::read(dir.path().join("out.parquet")).unwrap(),
        b"rows\n"
    );
    assert!(dir.path().join("lake/tables/sales").is_dir());
}

#[test]
fn help_examples_run_as_written_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let top = help_lines(&[]);
    assert!(top.len() >= 10, "oncelake --help has examples: {top:?}");
    let mut failures = run_lines(dir.path(), "oncelake --help", &top);
    for args in HELP_WITH_EXAMPLES {
        let lines = help_lines(args);
        assert!(!lines.is_empty(), "oncelake {args:?} --help has examples");
        failures.extend(run_lines(
            dir.path(),
            &format!("oncelake {} --help", args.join(" ")),
            &lines,
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(dir.path().join("etl.dot").is_file());
    assert!(dir.path().join("lake/tables/sales").is_dir());
    assert!(
        !dir.path().join("lake/serve.sock").exists(),
        "the serve examples stop their server"
    );
}
