//! Every label the repository cites — a requirement (R), an invariant (I) or a performance target (P) of
//! the specification, and every "SPEC §N" section — is defined in `docs/SPEC.md`.
//!
//! A label is a standalone word made of `R`, `I` or `P` and a number (the ranges the code writes, such as
//! "I1–I8", cite both ends). The scan covers the code, the tests, the benches, the fuzzers, the Python binding
//! and every Markdown page; `docs/SPEC.md` defines a requirement by a paragraph starting `**Rn `, an invariant by
//! a list item `- In `, a target by a table row `| Pn |` and a section by a heading `## N.`.

use crate::common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Directories scanned below the repository root (missing ones are skipped: the layout may move).
const SCANNED_DIRS: &[&str] = &[
    "src",
    "tests",
    "docs",
    "benches",
    "fuzz/fuzz_targets",
    "python",
    "cli",
    "examples",
];
/// Top-level files scanned.
const SCANNED_FILES: &[&str] = &["DESIGN.md", "README.md", "BENCHMARKS.md", "CHANGELOG.md"];
const SCANNED_EXTENSIONS: &[&str] = &["rs", "md", "py", "pyi", "toml"];
/// Directory names never entered besides hidden ones (build output, caches, virtual environments).
const SKIPPED_DIRS: &[&str] = &[
    "target",
    ".git",
    ".venv",
    ".venv-ci",
    "__pycache__",
    "corpus",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The labels `docs/SPEC.md` defines: "R3", "I8", "P6", and "§4" for a numbered section.
fn defined_labels(spec: &str) -> BTreeSet<String> {
    let mut defined = BTreeSet::new();
    for line in spec.lines() {
        let definition = if let Some(rest) = line.strip_prefix("**") {
            leading_label(rest, 'R')
        } else if let Some(rest) = line.strip_prefix("- ") {
            leading_label(rest, 'I')
        } else if let Some(rest) = line.strip_prefix("| ") {
            leading_label(rest, 'P')
        } else if let Some(rest) = line.strip_prefix("## ") {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            (!digits.is_empty() && rest[digits.len()..].starts_with('.'))
                .then(|| format!("§{digits}"))
        } else {
            None
        };
        defined.extend(definition);
    }
    defined
}

/// `rest` starts with `kind` and a number followed by a space or a `|`: that label.
fn leading_label(rest: &str, kind: char) -> Option<String> {
    let after = rest.strip_prefix(kind)?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    let next = after[digits.len()..].chars().next();
    (!digits.is_empty() && matches!(next, Some(' ' | '|'))).then(|| format!("{kind}{digits}"))
}

/// Every label `text` cites: standalone words `R<n>`, `I<n>`, `P<n>`, and `§<n>` right after "SPEC ".
fn cited_labels(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut cited = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts_word = i == 0 || !is_word(chars[i - 1]);
        if starts_word && matches!(c, 'R' | 'I' | 'P') {
            let digits: String = chars[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            let end = i + 1 + digits.len();
            if !digits.is_empty() && chars.get(end).is_none_or(|&c| !is_word(c)) {
                cited.push(format!("{c}{digits}"));
            }
        }
        if c == '§'
            && chars[..i]
                .iter()
                .copied()
                .rev()
                .skip_while(|c| *c == ' ')
                .take(4)
                .eq("CEPS".chars())
        {
            let digits: String = chars[i + 1..]
                .iter()
                .skip_while(|c| **c == ' ')
                .take_while(|c| c.is_ascii_digit())
                .collect();
            if !digits.is_empty() {
                cited.push(format!("§{digits}"));
            }
        }
        i += 1;
    }
    cited
}

fn scanned_files() -> Vec<PathBuf> {
    let root = root();
    let mut files: Vec<PathBuf> = SCANNED_FILES
        .iter()
        .map(|f| root.join(f))
        .filter(|p| p.is_file())
        .collect();
    for dir in SCANNED_DIRS {
        let keep = |p: &Path| {
            p.extension()
                .is_some_and(|e| SCANNED_EXTENSIONS.iter().any(|x| e == *x))
        };
        common::files_below(&root.join(dir), SKIPPED_DIRS, &keep, &mut files);
    }
    files.retain(|p| !p.ends_with("docs/SPEC.md"));
    files
}

/// "path:line: label" for every cited label `defined` lacks.
fn undefined_citations(path: &str, text: &str, defined: &BTreeSet<String>) -> Vec<String> {
    let mut missing = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for label in cited_labels(line) {
            if !defined.contains(&label) {
                missing.push(format!("{path}:{}: {label}", n + 1));
            }
        }
    }
    missing
}

fn spec() -> String {
    let path = root().join("docs/SPEC.md");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn every_cited_label_is_defined_in_docs_spec() {
    let defined = defined_labels(&spec());
    let root = root();
    let mut missing = Vec::new();
    let files = scanned_files();
    for file in &files {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        missing.extend(undefined_citations(&shown, &text, &defined));
    }
    assert!(
        files.len() > 50,
        "the scan found only {} files: is the layout still as this test expects?",
        files.len()
    );
    assert!(
        missing.is_empty(),
        "labels cited but not defined in docs/SPEC.md (define them there, or fix the citation):\n{}",
        missing.join("\n")
    );
}

#[test]
fn spec_defines_the_whole_label_set() {
    let defined = defined_labels(&spec());
    let mut expected: BTreeSet<String> = BTreeSet::new();
    expected.extend((1..=25).map(|n| format!("R{n}")));
    expected.extend((1..=11).map(|n| format!("I{n}")));
    expected.extend((1..=10).map(|n| format!("P{n}")));
    expected.extend((1..=5).map(|n| format!("§{n}")));
    assert_eq!(
        defined, expected,
        "docs/SPEC.md no longer defines the label set this repository was written against"
    );
}

/// The checker itself: a label outside the defined set is reported with its place, one inside is not,
/// and words that merely contain a label's shape are not citations.
#[test]
fn an_undefined_label_is_reported() {
    let defined = defined_labels(&spec());
    // Built at run time so that this file itself cites no undefined label.
    let bogus_requirement = format!("R{}", 25 + 77);
    let bogus_invariant = format!("I{}", 11 + 1);
    let bogus_section = format!("SPEC §{}", 5 + 4);
    let text = format!(
        "// holds by SPEC R3 and I8\n// see SPEC {bogus_requirement} and {bogus_invariant}\n// see {bogus_section}\n\
         let PR3 = R3x; let I2C = 0; // SPEC §2\n"
    );
    let missing = undefined_citations("x.rs", &text, &defined);
    assert_eq!(
        missing,
        vec![
            format!("x.rs:2: {bogus_requirement}"),
            format!("x.rs:2: {bogus_invariant}"),
            format!("x.rs:3: §{}", 5 + 4),
        ]
    );
}
