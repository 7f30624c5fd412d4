//! Every example of README.md's shell blocks and of `oncelake --help` (and the commands' own
//! `--help`) runs as written when pasted in order into an empty directory (SPEC R17).
//!
//! Each line runs in bash (`set -o pipefail`), in one temporary directory, with the binary
//! first on `PATH`, and must exit 0. README lines starting with `cargo ` build and test this
//! repository itself; they are the one thing not run here. Each line runs in a shell of its
//! own, so what the README's setup lines export (`PATH`, `ONCELAKE_EXAMPLES`) is given to
//! every line, and `mktemp` makes its directories inside the test's one (`TMPDIR`).

use crate::bin;

use std::path::Path;
use std::process::Command;

/// Subcommands whose `--help` has examples, in the order their examples are run (after the
/// top-level ones, in the same directory). `serve` is last: its examples stop the server they
/// start. `help_examples_are_all_run` checks that no subcommand with examples is missing here.
const HELP_WITH_EXAMPLES: &[&[&str]] = &[
    &["init"],
    &["sync"],
    &["checkpoint"],
    &["put"],
    &["get"],
    &["ls"],
    &["log"],
    &["claim"],
    &["release"],
    &["stats"],
    &["simulate"],
    &["gc"],
    &["verify"],
    &["reconcile"],
    &["pipeline"],
    &["table"],
    &["serve"],
];

/// The subcommands `oncelake <args> --help` lists under `Commands:` (without `help`).
fn subcommands(args: &[&str]) -> Vec<String> {
    let text = help_text(args);
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
            .env("ONCELAKE_EXAMPLES", Path::new(crate::REPO).join("examples"))
            .env("TMPDIR", dir)
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
    let readme = std::fs::read_to_string(Path::new(crate::REPO).join("README.md")).unwrap();
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
    let text = help_text(args);
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
    // The tour's table has a version that adds the one Parquet unit, a hard link to its object.
    let table = dir.path().join("lake/tables/sales");
    let v0 = std::fs::read_to_string(table.join("_delta_log/00000000000000000000.json")).unwrap();
    let adds: Vec<&str> = v0.lines().filter(|l| l.starts_with("{\"add\"")).collect();
    assert_eq!(adds.len(), 1, "{v0}");
    assert!(adds[0].contains("numRecords\\\":3"), "{v0}");
    let files: Vec<_> = std::fs::read_dir(table.join("date=2026-11-29"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(
        std::fs::read(&files[0]).unwrap(),
        std::fs::read(Path::new(crate::REPO).join("examples/sales.parquet")).unwrap()
    );
    // The serve section's new store was served and let go.
    assert!(dir.path().join("shared/oncelake.redb").is_file());
    assert!(!dir.path().join("shared/serve.sock").exists());
}

/// The README's setup exports what `run_lines` gives every line: the binary on `PATH` and
/// `ONCELAKE_EXAMPLES` pointing at the repository's `examples/` ("$PWD" is the repository root
/// where the README says to run it).
#[test]
fn readme_setup_exports_what_the_lines_are_given() {
    let lines = readme_lines();
    let export = lines
        .iter()
        .find(|l| l.starts_with("export PATH="))
        .expect("README says how to put oncelake on PATH");
    assert!(
        export.contains("PATH=\"$PWD/target/release:$PATH\"")
            && export.contains("ONCELAKE_EXAMPLES=\"$PWD/examples\""),
        "{export}"
    );
    assert!(Path::new(crate::REPO)
        .join("examples/sales.parquet")
        .is_file());
}

/// The README's "complete program": its `Cargo.toml` line resolves, offline, in a new project
/// next to the repository (as `cargo new hello-lake` beside the clone makes it), and its
/// `main.rs` is the whole file — no hidden `# ` lines — which `cargo test` compiles and runs as
/// a doc test of the README (src/lib.rs includes it).
#[test]
fn readme_program_is_a_whole_main_rs_with_its_cargo_toml() {
    let readme = std::fs::read_to_string(Path::new(crate::REPO).join("README.md")).unwrap();
    let block = |lang: &str| -> String {
        let start = readme
            .find(&format!("```{lang}\n"))
            .unwrap_or_else(|| panic!("README has a {lang} block"))
            + lang.len()
            + 4;
        let len = readme[start..].find("```").unwrap();
        readme[start..start + len].to_string()
    };
    let main = block("rust");
    assert!(main.contains("fn main()"), "{main}");
    assert!(
        !main.lines().any(|l| l.trim_start().starts_with("# ")),
        "hidden lines do not paste: {main}"
    );
    assert!(!main.contains("tempfile"), "a new project has no tempfile");
    let toml = block("toml");
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(crate::REPO, dir.path().join("oncelake")).unwrap();
    let project = dir.path().join("hello-lake");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(
        project.join("Cargo.toml"),
        format!(
            "[package]\nname = \"hello-lake\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n{toml}"
        ),
    )
    .unwrap();
    std::fs::write(project.join("src/main.rs"), &main).unwrap();
    // The repository's lock file pins the versions already in the local registry cache.
    std::fs::copy(
        Path::new(crate::REPO).join("Cargo.lock"),
        project.join("Cargo.lock"),
    )
    .unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Resolving only (for this platform), nothing built: cheap.
    let out = Command::new(cargo)
        .args(["tree", "--offline", "-e", "normal", "--depth", "1"])
        .current_dir(&project)
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        tree.contains("oncelake v"),
        "the oncelake dependency resolved: {tree}"
    );
}

/// Every command's `--help` teaches: examples (run by `help_examples_run_as_written_in_order`)
/// and its exit codes, each code one of the table of `oncelake --help`. `put` names every
/// outcome with its code.
#[test]
fn every_commands_help_has_examples_and_exit_codes() {
    let commands: Vec<Vec<String>> = subcommands(&[]).into_iter().map(|c| vec![c]).collect();
    let mut missing = Vec::new();
    for path in &commands {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help_text(&args);
        if help_lines(&args).is_empty() {
            missing.push(format!(
                "`oncelake {} --help` has no example",
                path.join(" ")
            ));
        }
        let codes = text.to_lowercase().find("exit codes").map(|i| &text[i..]);
        if !codes.is_some_and(|c| c.contains("  0 ") || c.contains(": 0 ")) {
            missing.push(format!(
                "`oncelake {} --help` has no exit codes",
                path.join(" ")
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    let put = help_text(&["put"]);
    for (code, outcome) in [
        (0, "committed"),
        (0, "duplicate"),
        (3, "conflict"),
        (4, "stale"),
        (5, "fenced"),
        (6, "busy"),
    ] {
        assert!(
            put.lines()
                .any(|l| l.trim_start().starts_with(&format!("{code}  {outcome}"))),
            "put --help lacks `{code}  {outcome}`:\n{put}"
        );
    }
}

/// The text `oncelake ARGS --help` prints (it must exit 0).
fn help_text(args: &[&str]) -> String {
    let out = Command::new(bin::oncelake())
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{args:?} --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
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
    // The put examples' outcomes, in order: committed, duplicate, conflict, stale, correction.
    assert_eq!(
        std::fs::read(dir.path().join("day.parquet")).unwrap(),
        b"rows\n"
    );
}
