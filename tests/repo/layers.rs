//! The engine's module layering (docs/layers.md), checked on the source: every `crate::…` path in
//! `src/**/*.rs` (outside comments and unit-test modules) is a dependency of the file's top-level
//! module on the module it names; names re-exported at the crate root (`pub use m::{…}` in
//! `lib.rs`) count as their module. The test fails when a module uses one in a higher layer, when
//! the graph has a cycle, or when a module is missing from the layer table.
//!
//! Inside each folder of modules, at any depth (`src/table/`, `src/table/delta/`, …) the files must
//! not form an import cycle either: a file's `super::X` and `crate::<folder>::X` paths, with the
//! names its parent re-exports mapped to their file, are its uses of its siblings. The other crates
//! of the workspace (server, client, cli, sim, bench and its binary, python/src) are held to the
//! same: no cycle among their top-level modules, nor inside any of their folders.
//!
//! `cargo test --test repo layers -- --nocapture` prints the graph (one `module -> deps` line each).
//! `ONCELAKE_LAYERS_SRC=<dir>` checks another tree's `src` instead (e.g. an older commit's, from
//! `git archive <rev> src | tar -x -C /tmp/old`), to print its graph and cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a module may use modules of its own layer or below, never above,
/// and the graph must stay acyclic (so within a layer, too, uses go one way).
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "error", "layout", "text", "object", "key", "clock", "sync", "vfs", "fault", "metrics",
            "owner",
        ],
    ),
    ("schema", &["schema"]),
    (
        "state",
        &["index", "index_snap", "stage", "claim", "wal", "lake"],
    ),
    ("core", &["options", "core"]),
    ("leader and views", &["commit", "snapshot"]),
    ("store", &["store"]),
    (
        "services",
        &[
            "feed",
            "dedup",
            "replay",
            "table",
            "gc",
            "verify",
            "reconcile",
            "pipeline",
            "run",
        ],
    ),
    ("operations", &["api"]),
];

/// Top-level modules outside the engine's layering: the binary's code.
const OUTSIDE: &[&str] = &["cli", "main"];

type Graph = BTreeMap<String, BTreeSet<String>>;

fn src_dir() -> PathBuf {
    match std::env::var_os("ONCELAKE_LAYERS_SRC") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `text` without comments and with every string literal emptied (messages name crate paths in
/// prose). Lifetimes are left alone: only the `'"'` char literal is recognised.
fn strip_comments_and_strings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            out.extend(b[i..end].iter().filter(|&&c| c == b'\n'));
            i = end;
        } else if b[i..].starts_with(b"'\"'") || b[i..].starts_with(b"'\\\"'") {
            out.extend_from_slice(b"' '");
            i += if b[i + 1] == b'"' { 3 } else { 4 };
        } else if b[i] == b'"' {
            out.extend_from_slice(b"\"\"");
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if i < b.len() && b[i] == b'\n' {
                    out.push(b'\n');
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The code of a file without comments, string literals and its `#[cfg(test)]` modules.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<usize> = None;
    let mut depth = 0usize;
    let mut pending_test = false;
    for code in strip_comments_and_strings(text).lines() {
        let trimmed = code.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            pending_test = true;
        } else if pending_test
            && trimmed.starts_with("mod ")
            && !trimmed.ends_with(';')
            && skip_depth.is_none()
        {
            skip_depth = Some(depth);
            pending_test = false;
        } else if !trimmed.starts_with("#[") && !trimmed.is_empty() {
            pending_test = false;
        }
        depth = (depth + code.matches('{').count()).saturating_sub(code.matches('}').count());
        if let Some(d) = skip_depth {
            if depth <= d && code.contains('}') {
                skip_depth = None;
            }
            continue;
        }
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The crate-root re-exports of `lib.rs`: name → the module it comes from.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in code_of(lib).split(';') {
        let s = stmt.trim();
        let Some(path) = s.strip_prefix("pub use ") else {
            continue;
        };
        let path = path.trim_start_matches("crate::");
        let Some((module, rest)) = path.split_once("::") else {
            continue;
        };
        let names = rest.trim_start_matches('{').trim_end_matches('}');
        for name in names.split(',') {
            let name = name.trim().rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                map.insert(name.to_string(), module.to_string());
            }
        }
    }
    map
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Whether `file` is the body of a `#[cfg(test)] mod NAME;` declared by its parent module
/// (`x.rs` or `x/mod.rs` beside the directory `x/` holding `NAME.rs`): unit tests, which may use
/// any layer, like the inline test modules `code_of` drops.
fn is_unit_test_file(file: &Path) -> bool {
    let (Some(dir), Some(stem)) = (file.parent(), file.file_stem()) else {
        return false;
    };
    let declaration = format!("#[cfg(test)]\nmod {};", stem.to_string_lossy());
    [dir.with_extension("rs"), dir.join("mod.rs")]
        .iter()
        .filter(|parent| parent.as_path() != file)
        .filter_map(|parent| std::fs::read_to_string(parent).ok())
        .any(|text| text.contains(&declaration))
}

/// The module graph of the tree at `src`.
fn graph(src: &Path) -> Graph {
    crate_graph(src, "lib.rs", OUTSIDE)
}

/// The graph of a crate's top-level modules (the files and folders in `src` beside its root
/// file `root`, but those named in `skip`): each module -> the modules its `crate::…` paths name.
fn crate_graph(src: &Path, root: &str, skip: &[&str]) -> Graph {
    let lib = std::fs::read_to_string(src.join(root)).expect("read the crate root");
    let reexports = root_reexports(&lib);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::new();
    for f in files {
        let rel = f.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == root.trim_end_matches(".rs")
            || skip.contains(&module.as_str())
            || is_unit_test_file(&f)
        {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&f).expect("read a source file"));
        let deps = g.entry(module.clone()).or_default();
        let mut add = |name: &str| {
            let target = reexports
                .get(name)
                .cloned()
                .unwrap_or_else(|| name.to_string());
            if target != module && !target.is_empty() {
                deps.insert(target);
            }
        };
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for item in group.split(',') {
                    add(ident_at(item.trim()));
                }
            } else {
                add(ident_at(rest));
            }
        }
    }
    g
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// Every cycle's modules (strongly connected components of more than one module).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    // Kosaraju: order by finish time, then collect components on the reversed graph.
    fn visit(n: &str, g: &Graph, seen: &mut BTreeSet<String>, order: &mut Vec<String>) {
        if !seen.insert(n.to_string()) {
            return;
        }
        for d in g.get(n).into_iter().flatten() {
            visit(d, g, seen, order);
        }
        order.push(n.to_string());
    }
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for n in g.keys() {
        visit(n, g, &mut seen, &mut order);
    }
    let mut rev = Graph::new();
    for (n, ds) in g {
        for d in ds {
            rev.entry(d.clone()).or_default().insert(n.clone());
        }
    }
    let mut assigned = BTreeSet::new();
    let mut out = Vec::new();
    for n in order.iter().rev() {
        let mut comp = Vec::new();
        visit(n, &rev, &mut assigned, &mut comp);
        if comp.len() > 1 {
            comp.sort();
            out.push(comp);
        }
    }
    out
}

fn print_graph(g: &Graph) {
    for (m, ds) in g {
        let ds: Vec<&str> = ds.iter().map(String::as_str).collect();
        println!("{m} -> {}", ds.join(" "));
    }
}

#[test]
fn modules_use_only_their_layer_and_below_without_cycles() {
    let g = graph(&src_dir());
    print_graph(&g);
    let mut problems = BTreeSet::new();
    for (m, deps) in &g {
        let Some(lm) = layer_of(m) else {
            problems.insert(format!("module {m} is in no layer of tests/repo/layers.rs"));
            continue;
        };
        for d in deps {
            match layer_of(d) {
                Some(ld) if ld > lm => {
                    problems.insert(format!(
                        "{m} ({}) uses {d} ({}), a higher layer",
                        LAYERS[lm].0, LAYERS[ld].0
                    ));
                }
                Some(_) => {}
                None if g.contains_key(d) => {
                    problems.insert(format!("module {d} is in no layer of tests/repo/layers.rs"));
                }
                None => {} // not a module of the crate (a macro's path, a re-exported name)
            }
        }
    }
    for c in cycles(&g) {
        problems.insert(format!("import cycle among {}", c.join(", ")));
    }
    let problems: Vec<String> = problems.into_iter().collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A folder of modules: its directory (relative to the repository), its parent module's file
/// and the path its files name it by from the crate root.
struct Folder {
    dir: PathBuf,
    parent: PathBuf,
    crate_path: String,
}

/// The crates of the workspace (and of `python/`) outside the engine: the directory of each
/// one's modules, its root file, and the directories in it that are other crates.
const CRATES: &[(&str, &str, &[&str])] = &[
    ("server/src", "lib.rs", &[]),
    ("client/src", "lib.rs", &[]),
    ("cli/src", "main.rs", &[]),
    ("sim/src", "lib.rs", &[]),
    ("bench/src", "lib.rs", &["bin"]),
    ("bench/src/bin/oncelake-bench", "main.rs", &[]),
    ("python/src", "lib.rs", &[]),
];

/// Every folder of modules to check, at any depth: the engine's (`src/table/`,
/// `src/table/delta/`, …) and those of every other crate (`cli/src/cli/`, …). A folder's parent
/// module is `<dir>.rs` beside it or its own `mod.rs`.
fn folders(root: &Path) -> Vec<Folder> {
    let mut out = Vec::new();
    let mut crates = vec![(root.join("src"), Vec::new())];
    for (dir, _, skip) in CRATES {
        crates.push((
            root.join(dir),
            skip.iter().map(|s| root.join(dir).join(s)).collect(),
        ));
    }
    for (src, skip) in crates {
        subfolders(&src, "crate", &skip, &mut out);
    }
    out
}

/// The folders of modules below `dir` (whose modules `crate_path` names), depth first.
fn subfolders(dir: &Path, crate_path: &str, skip: &[PathBuf], out: &mut Vec<Folder>) {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read a source folder")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir() && !skip.contains(p))
        .collect();
    dirs.sort();
    for sub in dirs {
        let name = sub
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let parent = [dir.join(format!("{name}.rs")), sub.join("mod.rs")]
            .into_iter()
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{} has no parent module file", sub.display()));
        let path = format!("{crate_path}::{name}");
        subfolders(&sub, &path, skip, out);
        out.push(Folder {
            dir: sub,
            parent,
            crate_path: path,
        });
    }
}

/// The names an item definition introduces (`pub fn x`, `pub(crate) struct X`, `macro_rules! x`…).
fn defined_names(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in code.lines() {
        let mut words = line.split_whitespace().peekable();
        while let Some(w) = words.next() {
            let kind = matches!(
                w,
                "fn" | "struct" | "enum" | "const" | "static" | "trait" | "type" | "macro_rules!"
            );
            if kind {
                if let Some(next) = words.peek() {
                    names.insert(ident_at(next).to_string());
                }
            }
        }
    }
    names
}

/// A folder's graph: each child module (a file, or a subfolder with all its files) -> the
/// siblings it uses.
fn folder_graph(f: &Folder) -> Graph {
    let children = folder_children(f);
    let reexports = parent_reexports(f, &children);
    let mut g = Graph::new();
    for (child, files) in &children {
        let deps = g.entry(child.clone()).or_default();
        for file in files {
            if is_unit_test_file(file) {
                continue;
            }
            let code = code_of(&std::fs::read_to_string(file).expect("read a source file"));
            let direct = file.parent() == Some(f.dir.as_path());
            let mut prefixes = vec![format!("{}::", f.crate_path)];
            if direct {
                prefixes.push("super::".into());
            }
            for prefix in &prefixes {
                for (i, _) in code.match_indices(prefix.as_str()) {
                    // `crate::` must not match inside `crate::table::`'s own prefix of another.
                    let before = code[..i].chars().next_back();
                    if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                        continue;
                    }
                    let rest = &code[i + prefix.len()..];
                    let names: Vec<&str> = match rest.strip_prefix('{') {
                        Some(group) => group[..group.find('}').unwrap_or(group.len())]
                            .split(',')
                            .map(|item| ident_at(item.trim()))
                            .collect(),
                        None => vec![ident_at(rest)],
                    };
                    for name in names {
                        let target = if children.contains_key(name) {
                            Some(name.to_string())
                        } else {
                            reexports.get(name).cloned()
                        };
                        if let Some(t) = target.filter(|t| t != child) {
                            deps.insert(t);
                        }
                    }
                }
            }
        }
    }
    g
}

/// A folder's child modules: each file's stem, or a subfolder's name with all its files.
fn folder_children(f: &Folder) -> BTreeMap<String, Vec<PathBuf>> {
    let mut children: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for e in std::fs::read_dir(&f.dir).expect("read a folder") {
        let p = e.expect("dir entry").path();
        let stem = p
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if p == f.parent || stem == "mod" {
            continue;
        }
        if p.is_dir() {
            let mut files = Vec::new();
            rust_files(&p, &mut files);
            children.entry(stem).or_default().extend(files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            children.entry(stem).or_default().push(p);
        }
    }
    children
}

/// The names the folder's parent re-exports (`pub use child::{a, b}`, `pub(crate) use child::*`)
/// -> the child that defines them.
fn parent_reexports(
    f: &Folder,
    children: &BTreeMap<String, Vec<PathBuf>>,
) -> BTreeMap<String, String> {
    let parent_code = code_of(&std::fs::read_to_string(&f.parent).expect("read a parent"));
    let mut reexports: BTreeMap<String, String> = BTreeMap::new();
    for stmt in parent_code.split(';') {
        let s = stmt.trim();
        let Some(rest) = s.split_once("use ").map(|(pre, rest)| (pre.trim(), rest)) else {
            continue;
        };
        if !rest.0.starts_with("pub") {
            continue;
        }
        let path = rest.1.trim().trim_start_matches("self::");
        let Some((child, items)) = path.split_once("::") else {
            continue;
        };
        let Some(files) = children.get(child) else {
            continue;
        };
        let names: BTreeSet<String> = if items.trim() == "*" {
            files
                .iter()
                .flat_map(|p| defined_names(&code_of(&std::fs::read_to_string(p).expect("read"))))
                .collect()
        } else {
            items
                .trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .map(|n| {
                    n.trim()
                        .rsplit("::")
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_string()
                })
                .filter(|n| !n.is_empty())
                .collect()
        };
        for n in names {
            reexports.insert(n, child.to_string());
        }
    }
    reexports
}

#[test]
fn the_files_of_each_folder_use_each_other_without_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for f in folders(root) {
        let g = folder_graph(&f);
        println!("{}:", f.dir.strip_prefix(root).unwrap_or(&f.dir).display());
        print_graph(&g);
        for c in cycles(&g) {
            problems.push(format!(
                "import cycle in {} among {}",
                f.dir.strip_prefix(root).unwrap_or(&f.dir).display(),
                c.join(", ")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The other crates of the workspace: their top-level modules use each other without a cycle
/// (they have no layer table; the engine's layering is the test above).
#[test]
fn the_modules_of_every_other_crate_use_each_other_without_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for (dir, file, skip) in CRATES {
        let g = crate_graph(&root.join(dir), file, skip);
        println!("{dir}:");
        print_graph(&g);
        for c in cycles(&g) {
            found.push((dir.to_string(), c));
        }
    }
    assert_eq!(
        found,
        Vec::<(String, Vec<String>)>::new(),
        "import cycles (crate folder, modules)"
    );
}

#[test]
fn the_folder_check_sees_a_cycle_through_a_reexport() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("mod.rs"),
        "mod a;\nmod b;\npub(crate) use a::*;\npub use b::{Thing};\n",
    )
    .unwrap();
    // a uses b by a re-exported name; b uses a through a glob re-export.
    std::fs::write(
        d.join("a.rs"),
        "pub(crate) fn helper() {}\nuse super::Thing;\n",
    )
    .unwrap();
    std::fs::write(
        d.join("b.rs"),
        "pub struct Thing;\nfn f() { super::helper() }\n",
    )
    .unwrap();
    std::fs::write(d.join("c.rs"), "use crate::m::a;\n// super::b\n").unwrap();
    let g = folder_graph(&Folder {
        dir: d.to_path_buf(),
        parent: d.join("mod.rs"),
        crate_path: "crate::m".into(),
    });
    assert_eq!(cycles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
    assert_eq!(g["c"], BTreeSet::from(["a".to_string()]), "{g:?}");
}

#[test]
fn the_checker_sees_a_cycle_and_an_upward_use() {
    let mut g = Graph::new();
    g.entry("store".into()).or_default().insert("commit".into());
    g.entry("commit".into()).or_default().insert("store".into());
    g.entry("schema".into()).or_default().insert("error".into());
    assert_eq!(
        cycles(&g),
        vec![vec!["commit".to_string(), "store".to_string()]]
    );
    assert!(
        layer_of("commit") < layer_of("store"),
        "an upward use is seen by layer"
    );
    let code = code_of(
        "use crate::a::B; // crate::c\nlet s = \"crate::d\";\n#[cfg(test)]\nmod tests {\n use crate::e;\n}\nuse crate::f;\n",
    );
    assert!(
        code.contains("crate::a") && code.contains("crate::f"),
        "{code}"
    );
    assert!(
        !code.contains("crate::c") && !code.contains("crate::d") && !code.contains("crate::e"),
        "{code}"
    );
}
