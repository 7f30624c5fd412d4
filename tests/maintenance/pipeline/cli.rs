//! The `oncelake pipeline` commands, run as the built binary.

use crate::bin;

use super::dot::check_dot;
use super::seed_def;
use oncelake::pipeline::Pipeline;
use oncelake::Store;

/// The `oncelake pipeline` commands on one store, run as the built binary.
pub(super) struct PipelineCli {
    pub(super) dir: tempfile::TempDir,
    pub(super) lake: String,
    pub(super) def: String,
}

impl PipelineCli {
    /// Runs `oncelake ARGS`: its exit code, standard output and standard error.
    pub(super) fn run(&self, args: &[&str]) -> (Option<i32>, String, String) {
        bin::run_text(args)
    }

    /// Runs `oncelake pipeline COMMAND LAKE --pipeline DEF ARGS`.
    pub(super) fn pipeline(&self, command: &str, args: &[&str]) -> (Option<i32>, String, String) {
        let head = ["pipeline", command, &self.lake, "--pipeline", &self.def];
        self.run(&[&head[..], args].concat())
    }
}

/// The JSON lines of a command's output, each parsed.
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The seed pipeline over u1..u3 worked once through the library: store_c of u2 and transform
/// of u3 failed, everything else done.
fn seed_worked_with_failures() -> PipelineCli {
    let dir = tempfile::tempdir().unwrap();
    let lake = dir.path().join("lake");
    let def_path = dir.path().join("etl.toml");
    std::fs::write(&def_path, seed_def().to_text()).unwrap();
    let store = Store::open(&lake).unwrap();
    let p = Pipeline::new(seed_def());
    for u in ["u1", "u2", "u3"] {
        p.set_source_version(&store, u, 1, b"x").unwrap();
    }
    let mut n = 0;
    p.work(&store, "w", |c| {
        n += 1;
        if c.stage == "store_c" && c.unit == "u2" {
            Err("boom".into())
        } else if c.stage == "transform" && c.unit == "u3" {
            Err("nope".into())
        } else {
            Ok(vec![n])
        }
    })
    .unwrap();
    let (lake, def) = (
        lake.to_str().unwrap().to_string(),
        def_path.to_str().unwrap().to_string(),
    );
    PipelineCli { dir, lake, def }
}

/// `status --dot` is a graph with the stages' counts that graphviz (where installed) draws.
fn status_dot_is_valid_graphviz(cli: &PipelineCli) {
    let (code, dot, err) = cli.pipeline("status", &["--dot"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(check_dot(&dot), Ok((4, 3)), "{dot}");
    assert!(dot.contains("\"store_c\" [label=\"store_c (code v1)\\ndone 1 (cut off 0) | ready 0 | running 0\\nblocked 1 | failed 1 | stale 0\", fillcolor=\"salmon\"]"), "{dot}");
    assert!(dot.contains("\"transform\" -> \"store_b\";"));
    let png = cli.dir.path().join("g.png");
    if let Ok(out) = std::process::Command::new("dot")
        .args(["-Tpng", "-o"])
        .arg(&png)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(dot.as_bytes())?;
            child.wait_with_output()
        })
    {
        assert!(out.status.success(), "dot refused the graph");
        assert!(std::fs::metadata(&png).unwrap().len() > 0);
    }
}

/// `explain`, a blocked `complete` and a source version going back, by exit code and JSON.
fn explain_and_refusals_follow_the_contract(cli: &PipelineCli) {
    let (code, text, _) = cli.pipeline("explain", &["u2", "--json"]);
    assert_eq!(code, Some(0));
    let lines = json_lines(&text);
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[3]["stage"], "store_c");
    assert_eq!(lines[3]["state"], "failed");
    assert_eq!(lines[3]["last_error"], "boom");
    let (code, _, err) = cli.pipeline("complete", &["u3", "store_b", "-"]);
    assert_eq!(code, Some(2), "blocked cells cannot be completed: {err}");
    assert!(err.contains("blocked on transform"));
    let (code, _, _) = cli.run(&["pipeline", "set-version", &cli.lake, "u1", "0"]);
    assert_eq!(code, Some(4), "a source version never goes back");
}

/// By hand: a new unit, claimed, completed under its token, the retry a duplicate, the next
/// cell failed.
fn a_unit_worked_by_hand(cli: &PipelineCli) {
    let (code, _, err) = cli.run(&["pipeline", "set-version", &cli.lake, "u4", "1"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, text, _) = cli.pipeline("ready", &["--claim", "--worker", "cli-w", "--json"]);
    assert_eq!(code, Some(0));
    let claimed = json_lines(&text);
    let mine = claimed
        .iter()
        .find(|v| v["unit"] == "u4" && v["stage"] == "ingest")
        .expect("u4 ingest is ready and claimed");
    let token = mine["token"].as_u64().unwrap().to_string();
    let out_file = cli.dir.path().join("out.bin");
    std::fs::write(&out_file, b"u4 ingested").unwrap();
    let out_s = out_file.to_str().unwrap();
    let complete = || {
        cli.pipeline(
            "complete",
            &["u4", "ingest", out_s, "--token", &token, "--json"],
        )
    };
    let (code, text, err) = complete();
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["outcome"], "committed");
    let (code, text, _) = complete();
    assert_eq!(code, Some(0));
    assert!(text.contains("\"outcome\":\"duplicate\""), "{text}");
    let (code, text, _) = cli.pipeline("explain", &["u4"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("ingest: done at source version 1"), "{text}");
    assert!(text.contains("transform: ready"), "{text}");
    let (code, text, _) = cli.pipeline("fail", &["u4", "transform", "--error", "oops", "--json"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("\"attempts\":1"), "{text}");
}

/// A definition with a cycle is bad input that names the cycle.
fn a_cyclic_definition_is_refused(cli: &PipelineCli) {
    let bad_def = cli.dir.path().join("bad.toml");
    std::fs::write(
        &bad_def,
        "[stage.a]\ncode_version = 1\nupstream = [\"a\"]\n",
    )
    .unwrap();
    let bad = bad_def.to_str().unwrap();
    let (code, _, err) = cli.run(&["pipeline", "status", &cli.lake, "--pipeline", bad]);
    assert_eq!(code, Some(2));
    assert!(err.contains("cycle: a -> a"), "{err}");
}

#[test]
fn cli_status_dot_is_valid_graphviz() {
    let cli = seed_worked_with_failures();
    status_dot_is_valid_graphviz(&cli);
    explain_and_refusals_follow_the_contract(&cli);
    a_unit_worked_by_hand(&cli);
    a_cyclic_definition_is_refused(&cli);
}
