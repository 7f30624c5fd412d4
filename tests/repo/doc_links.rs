//! Every relative link in the repository's Markdown pages resolves: the file exists, and a `#fragment` names a
//! heading of that file (GitHub's anchor rule: lower case, punctuation dropped, spaces to hyphens, `-1`, `-2`
//! for repeats). Links to the web are not followed.

use crate::common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Pages written on other branches of the same restructuring step: a link to one of them is accepted while the
/// file is absent, and checked like any other once it exists. Empty this list once they are merged.
const PENDING_PAGES: &[&str] = &[];
const SKIPPED_DIRS: &[&str] = &["target", "node_modules", "corpus"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text outside fenced code blocks and inline code spans, line by line.
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut in_fence = false;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
            lines.push((n + 1, prose));
        }
    }
    lines
}

/// The targets of the inline links `[text](target)` of one line.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        targets.push(after[..end].trim().to_string());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchors of a Markdown file's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if in_fence || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// "file:line: problem" for every relative link of `file` that does not resolve.
fn broken_links(root: &Path, file: &Path) -> Vec<String> {
    let text =
        fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut broken = Vec::new();
    for (n, line) in prose_lines(&text) {
        for target in link_targets(&line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.to_path_buf()
            } else {
                file.parent().unwrap_or(root).join(path)
            };
            let relative = resolved
                .strip_prefix(root)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let relative = relative.replace("/./", "/");
            if !resolved.exists() {
                let pending = PENDING_PAGES.iter().any(|p| normalise(&relative) == *p);
                if !pending {
                    broken.push(format!("{shown}:{n}: `{target}`: no such file"));
                }
                continue;
            }
            if let Some(fragment) = fragment {
                let target_text = fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&target_text).contains(fragment) {
                    broken.push(format!(
                        "{shown}:{n}: `{target}`: no heading with that anchor"
                    ));
                }
            }
        }
    }
    broken
}

/// `a/b/../c` → `a/c` (the paths here have no symbolic links).
fn normalise(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

#[test]
fn every_relative_markdown_link_resolves() {
    let root = root();
    let mut files = Vec::new();
    let is_markdown = |p: &Path| p.extension().is_some_and(|e| e == "md");
    common::files_below(&root, SKIPPED_DIRS, &is_markdown, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("DESIGN.md")),
        "the scan did not find DESIGN.md under {}",
        root.display()
    );
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(&root, f)).collect();
    assert!(
        broken.is_empty(),
        "links that do not resolve:\n{}",
        broken.join("\n")
    );
}

/// DESIGN.md is the entry to the docs: it links every page under `docs/`.
#[test]
fn design_links_every_page_under_docs() {
    let root = root();
    let design =
        fs::read_to_string(root.join("DESIGN.md")).expect("DESIGN.md at the repository root");
    let mut pages: Vec<String> = fs::read_dir(root.join("docs"))
        .expect("docs/ at the repository root")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .collect();
    pages.sort();
    let unlinked: Vec<&String> = pages
        .iter()
        .filter(|p| !design.contains(&format!("](docs/{p})")))
        .collect();
    assert!(
        unlinked.is_empty(),
        "pages under docs/ that DESIGN.md does not link: {unlinked:?}"
    );
}

/// The checker itself finds a missing file and a missing heading, and accepts good links.
#[test]
fn a_broken_link_is_reported() {
    let dir = tempfile::tempdir().expect("temporary directory");
    fs::write(
        dir.path().join("b.md"),
        "# Two words, here\n## Two words, here\n",
    )
    .expect("write b.md");
    let a = dir.path().join("a.md");
    fs::write(
        &a,
        "[ok](b.md) [ok](b.md#two-words-here-1) [web](https://example.org/x)\n\
         [gone](c.md) [no heading](b.md#three)\n```\n[in code](d.md)\n```\n`[span](e.md)`\n",
    )
    .expect("write a.md");
    assert_eq!(
        broken_links(dir.path(), &a),
        vec![
            "a.md:2: `c.md`: no such file".to_string(),
            "a.md:2: `b.md#three`: no heading with that anchor".to_string()
        ]
    );
}
