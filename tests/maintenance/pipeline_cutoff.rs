//! Early cutoff (SPEC R24): a cell whose re-run commits the output it had before does not
//! invalidate the cells below it, transitively. Checked against a model that replays each source
//! bump stage by stage (a cell must run iff the inputs it would read differ from the ones it last
//! ran on), against a from-scratch evaluation of every cell (a cut-off cell's output is what a
//! re-run would give), with concurrent workers and injected failures, over the backlog's tail and
//! the applied tables, after GC pruned the history, and through the CLI.

use crate::bin;

use oncelake::pipeline::{
    CellState, Explain, Pipeline, PipelineDef, ReadyCell, StageDef, Wave, WorkOptions, WorkReport,
};
use oncelake::{Durability, ObjectId, Options, Store};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn open(dir: &tempfile::TempDir, apply_in_background: bool) -> Store {
    Store::open_with(
        dir.path().join("lake"),
        Options {
            // Relaxed groups go straight to the B-trees; durable ones wait in the backlog (its
            // tail is what readers lay over the tables).
            durability: if apply_in_background {
                Durability::Relaxed {
                    max_delay: Duration::from_secs(3600),
                }
            } else {
                Durability::Durable
            },
            background_apply: apply_in_background,
            // Without background apply, the groups stay in the backlog's tail until a flush.
            apply_min_bytes: if apply_in_background {
                Options::default().apply_min_bytes
            } else {
                64 << 20
            },
            ..Options::default()
        },
    )
    .unwrap()
}

/// A fresh store (see [`open`]) with `p`'s unit `u` at source version 1 holding `source`.
fn at_version_1(
    p: Pipeline,
    apply_in_background: bool,
    source: &[u8],
) -> (tempfile::TempDir, Store, Pipeline) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, apply_in_background);
    p.set_source_version(&store, "u", 1, source).unwrap();
    (dir, store, p)
}

/// Works every ready cell as worker `w`, each cell's output made by `output`.
fn work_by(p: &Pipeline, store: &Store, output: impl Fn(&ReadyCell) -> Vec<u8>) -> WorkReport {
    p.work(store, "w", |c| Ok(output(c))).unwrap()
}

/// A pipeline from `stage: upstream stages` entries separated by `;`, each at code version 1.
fn def(spec: &str) -> PipelineDef {
    let builder = spec.split(';').fold(PipelineDef::builder(), |b, entry| {
        let (stage, upstream) = entry.split_once(':').unwrap_or((entry, ""));
        let upstream: Vec<&str> = upstream.split_whitespace().collect();
        b.stage(stage.trim(), 1, &upstream)
    });
    builder.build().unwrap()
}

fn chain() -> PipelineDef {
    def("a; b: a; c: b")
}

fn diamond() -> PipelineDef {
    def("a; b: a; c: a; d: b c")
}

/// Two branches below a, joined at the end: completions on one branch must not count the other
/// branch's cut-off cells again.
fn branches() -> PipelineDef {
    def("a; b: a; c: a; d: b; e: c; f: d e")
}

fn seed() -> PipelineDef {
    def("ingest; transform: ingest; store_b: transform; store_c: transform")
}

/// A deterministic stage that often maps different inputs to the same output (so re-runs
/// commit unchanged outputs): the stage name and a small digest of its inputs.
fn stage_fn(stage: &str, inputs: &[Vec<u8>]) -> Vec<u8> {
    let mut h = blake3::Hasher::new();
    h.update(stage.as_bytes());
    for i in inputs {
        h.update(&(i.len() as u64).to_le_bytes());
        h.update(i);
    }
    let buckets = match stage.len() % 3 {
        0 => 2,
        1 => 3,
        _ => 5,
    };
    format!("{stage}:{}", h.finalize().as_bytes()[0] % buckets).into_bytes()
}

fn inputs_of(store: &Store, c: &ReadyCell) -> Vec<Vec<u8>> {
    c.inputs
        .iter()
        .map(|i| c.read_input(store, i.stage.as_deref()).unwrap())
        .collect()
}

/// One cell as the model knows it: the inputs it last ran on, its output, and the source version
/// of that run.
#[derive(Clone, Debug)]
struct ModelCell {
    inputs: Vec<Vec<u8>>,
    output: Vec<u8>,
    version: u64,
}

/// What must happen: per unit its source (version, bytes), per (unit, stage) its cell.
#[derive(Default)]
struct Model {
    sources: BTreeMap<String, (u64, Vec<u8>)>,
    cells: BTreeMap<(String, String), ModelCell>,
}

impl Model {
    /// Applies a new source version of `unit`; returns the cells that must run, in stage order,
    /// and the number cut off (completed before, inputs unchanged).
    fn bump(&mut self, def: &PipelineDef, unit: &str, bytes: &[u8]) -> (Vec<String>, u64) {
        let version = self.sources.get(unit).map_or(1, |s| s.0 + 1);
        self.sources
            .insert(unit.to_string(), (version, bytes.to_vec()));
        let (mut run, mut cut) = (Vec::new(), 0);
        for s in def.topo_order() {
            let inputs = stage_inputs(s, bytes, |u| {
                self.cells[&(unit.to_string(), u.to_string())]
                    .output
                    .clone()
            });
            let key = (unit.to_string(), s.name.clone());
            match self.cells.get(&key) {
                Some(c) if c.inputs == inputs => cut += 1,
                _ => {
                    run.push(s.name.clone());
                    let output = stage_fn(&s.name, &inputs);
                    self.cells.insert(
                        key,
                        ModelCell {
                            inputs,
                            output,
                            version,
                        },
                    );
                }
            }
        }
        (run, cut)
    }

    /// Cut-off cells per stage now: completed for an older source version than the unit's.
    fn cut_off(&self, def: &PipelineDef) -> BTreeMap<String, u64> {
        let mut n: BTreeMap<String, u64> =
            def.stages().iter().map(|s| (s.name.clone(), 0)).collect();
        for ((unit, stage), c) in &self.cells {
            if c.version < self.sources[unit].0 {
                *n.get_mut(stage).unwrap() += 1;
            }
        }
        n
    }
}

/// What stage `s` reads: the source for a first stage, else each upstream stage's output.
fn stage_inputs(s: &StageDef, source: &[u8], output_of: impl Fn(&str) -> Vec<u8>) -> Vec<Vec<u8>> {
    if s.upstream.is_empty() {
        vec![source.to_vec()]
    } else {
        s.upstream.iter().map(|u| output_of(u)).collect()
    }
}

/// Every cell computed from the source alone, no memory of earlier runs.
fn from_scratch(def: &PipelineDef, source: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for s in def.topo_order() {
        let inputs = stage_inputs(s, source, |u| out[u].clone());
        out.insert(s.name.clone(), stage_fn(&s.name, &inputs));
    }
    out
}

/// Stage runs that returned an output, per (unit, stage).
type Runs = BTreeMap<(String, String), u32>;

/// Drains the pipeline with `workers` threads; with `fail`, a cell's first attempt fails for
/// about one cell in five. Returns the runs that produced an output.
fn drain(p: &Pipeline, store: &Store, workers: usize, fail: bool) -> Runs {
    let runs: Arc<Mutex<Runs>> = Arc::default();
    std::thread::scope(|s| {
        for w in 0..workers {
            let (store, p, runs) = (store.clone(), p.clone(), runs.clone());
            s.spawn(move || {
                let opts = WorkOptions {
                    wait_for_running: workers > 1,
                    ..WorkOptions::default()
                };
                p.work_with(&store, &format!("w{w}"), &opts, |c| {
                    let h = blake3::hash(format!("{}{}", c.key, c.source_version).as_bytes());
                    if fail && c.attempts == 0 && h.as_bytes()[0].is_multiple_of(5) {
                        return Err("injected".into());
                    }
                    let out = stage_fn(&c.stage, &inputs_of(&store, c));
                    *runs
                        .lock()
                        .unwrap()
                        .entry((c.unit.clone(), c.stage.clone()))
                        .or_insert(0) += 1;
                    Ok(out)
                })
                .unwrap();
            });
        }
    });
    let runs = runs.lock().unwrap().clone();
    runs
}

/// Everything a reader is told: status and every unit's explanation.
fn views(
    p: &Pipeline,
    store: &Store,
    units: &[String],
) -> (oncelake::pipeline::Status, Vec<Explain>) {
    let explains = units.iter().map(|u| p.explain(store, u).unwrap()).collect();
    (p.status(store).unwrap(), explains)
}

/// Rounds of random source bumps (same bytes or new bytes) over `def`, drained by `workers`
/// threads, each round checked against the model and a from-scratch evaluation.
fn model_rounds(def: PipelineDef, workers: usize, fail: bool, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    // One worker: the tail path (nothing applied until a flush). Several: applied in the
    // background, as in production.
    let over_tail = workers == 1;
    let store = open(&dir, !over_tail);
    let p = Pipeline::new(def.clone());
    let mut model = Model::default();
    let units: Vec<String> = (0..12).map(|i| format!("u/{i:02}")).collect();
    let mut rng = crate::common::SplitMix64(seed);
    let mut next = || rng.next() as u32;
    let mut cut_total = 0;
    for round in 0..6 {
        let mut expect = Runs::new();
        for u in &units {
            // Round 0 gives every unit its first version; later rounds bump about half.
            if round > 0 && next().is_multiple_of(2) {
                continue;
            }
            let bytes = format!("source {}", next() % 3).into_bytes();
            let (run, cut) = model.bump(&def, u, &bytes);
            cut_total += cut;
            let version = model.sources[u].0;
            assert!(p
                .set_source_version(&store, u, version, &bytes)
                .unwrap()
                .outcome
                .is_success());
            for s in run {
                expect.insert((u.clone(), s), 1);
            }
        }
        if over_tail {
            // Before any claim (a claim read applies the backlog): the bumps wait in the tail, and
            // what readers are told is the same once they are applied.
            let before = views(&p, &store, &units);
            assert!(
                store.backlog().units > 0,
                "round {round}: the tail holds the bumps"
            );
            store.flush().unwrap();
            assert_eq!(views(&p, &store, &units), before, "round {round}");
        }
        let runs = drain(&p, &store, workers, fail);
        assert_eq!(
            runs, expect,
            "round {round}: exactly the cells whose inputs changed ran, once"
        );
        let (status, explains) = views(&p, &store, &units);
        let want_cut = model.cut_off(&def);
        for st in &status.stages {
            assert_eq!(st.done, units.len() as u64, "round {round}: {st:?}");
            assert_eq!(st.cut_off, want_cut[&st.stage], "round {round}: {st:?}");
            assert_eq!(st.ready + st.running + st.blocked + st.failed, 0);
        }
        check_explains(&def, &model, &explains, round);
        assert_eq!(
            store.metrics().pipeline_cells_cut_off,
            cut_total,
            "round {round}: each cut-off cell counted once"
        );
        if over_tail {
            // The same answers once the tail is applied (the history rows then exist in redb).
            store.flush().unwrap();
            assert_eq!(
                views(&p, &store, &units),
                (status, explains),
                "round {round}"
            );
        }
    }
    assert!(cut_total > 0, "the scenario cut something off");
    // State is derived from committed entries only: a reopened store says the same.
    let before = views(&p, &store, &units);
    drop(store);
    let store = open(&dir, true);
    assert_eq!(views(&p, &store, &units), before);
    assert!(
        drain(&p, &store, 1, false).is_empty(),
        "nothing left to run"
    );
    let report = oncelake::replay(&store.snapshot().unwrap()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}

/// Every cell of every unit is done with the object a from-scratch evaluation gives, at the
/// model's version; a cell is cut off exactly when that version is older than the unit's, and
/// then names every input as unchanged.
fn check_explains(def: &PipelineDef, model: &Model, explains: &[Explain], round: u32) {
    for e in explains {
        let fresh = from_scratch(def, &model.sources[&e.unit].1);
        for c in &e.cells {
            let m = &model.cells[&(e.unit.clone(), c.stage.clone())];
            let CellState::Done {
                source_version,
                object,
                ..
            } = c.state
            else {
                panic!("round {round}: {} {c} is not done", e.unit);
            };
            assert_eq!(object, ObjectId::of(&fresh[&c.stage]), "{} {c}", e.unit);
            assert_eq!(source_version, m.version, "{} {c}", e.unit);
            let cut = m.version < e.source_version.unwrap();
            assert_eq!(
                c.wave.as_ref().is_some_and(Wave::is_cut_off),
                cut,
                "{} {c}",
                e.unit
            );
            if let Some(Wave::CutOff { unchanged, .. }) = &c.wave {
                let stages = def.stage(&c.stage).unwrap().upstream.clone();
                let want: Vec<Option<String>> = if stages.is_empty() {
                    vec![None]
                } else {
                    stages.into_iter().map(Some).collect()
                };
                let got: Vec<Option<String>> = unchanged.iter().map(|(s, _)| s.clone()).collect();
                assert_eq!(got, want, "a cut-off cell names every input as unchanged");
                assert!(c.to_string().contains("unchanged output"), "{c}");
            }
        }
    }
}

/// One test per row, each running [`model_rounds`] on the listed (pipeline, workers, failures
/// injected, seed) cases in turn.
macro_rules! model_round_tests {
    ($($name:ident: $(($def:expr, $workers:expr, $fail:expr, $seed:expr)),+;)*) => {
        $(
            #[test]
            fn $name() {
                $(model_rounds($def, $workers, $fail, $seed);)+
            }
        )*
    };
}

model_round_tests! {
    cutoff_follows_the_model_on_a_chain_read_over_the_tail: (chain(), 1, false, 1);
    cutoff_follows_the_model_on_a_diamond_read_over_the_tail: (diamond(), 1, false, 2);
    cutoff_follows_the_model_on_two_branches: (branches(), 1, false, 5);
    cutoff_is_exact_with_concurrent_workers_and_retries:
        (diamond(), 3, true, 3), (seed(), 3, true, 4);
}

/// A diamond's join re-runs only if one of its inputs changed; explain names where the wave
/// stopped and why.
#[test]
fn a_diamond_join_reruns_only_when_an_input_changed() {
    let (_dir, store, p) = at_version_1(Pipeline::new(diamond()), true, b"one");
    // b's output ignores the source; a's, c's and d's are their inputs.
    let all = |s: &Store| {
        work_by(&p, s, |c| match c.stage.as_str() {
            "b" => b"constant".to_vec(),
            _ => inputs_of(s, c).concat(),
        })
    };
    assert_eq!(all(&store).completed, 4);

    // Same bytes at version 2: a is cut off by the source, and everything below it.
    p.set_source_version(&store, "u", 2, b"one").unwrap();
    assert!(p.ready(&store, 10).unwrap().is_empty());
    let e = p.explain(&store, "u").unwrap();
    for c in &e.cells {
        assert!(
            matches!(
                &c.wave,
                Some(Wave::CutOff {
                    completed: 1,
                    current: 2,
                    ..
                })
            ),
            "{c}"
        );
    }
    assert!(
        e.cells[0].to_string().contains("the source (hash"),
        "{}",
        e.cells[0]
    );
    assert_eq!(store.metrics().pipeline_cells_cut_off, 4);

    // New bytes: a re-runs with a new output; b re-runs unchanged, c changed, so d re-runs.
    p.set_source_version(&store, "u", 3, b"two").unwrap();
    let report = all(&store);
    assert_eq!(report.completed, 4);
    let e = p.explain(&store, "u").unwrap();
    let by: BTreeMap<_, _> = e.cells.iter().map(|c| (c.stage.as_str(), c)).collect();
    assert!(
        matches!(&by["b"].wave, Some(Wave::Reran { previous_version: 1, previous_object, object }) if previous_object == object),
        "{}",
        by["b"]
    );
    assert!(
        by["b"].to_string().contains("the wave stops here"),
        "{}",
        by["b"]
    );
    assert!(
        matches!(&by["c"].wave, Some(Wave::Reran { previous_object, object, .. }) if previous_object != object)
    );

    // The same bytes again: every cell is cut off, the ones that re-ran included.
    p.set_source_version(&store, "u", 4, b"two").unwrap();
    assert!(p.ready(&store, 10).unwrap().is_empty(), "same bytes again");
    let st = p.status(&store).unwrap();
    assert!(st.stages.iter().all(|s| s.cut_off == 1 && s.done == 1));
}

/// When GC pruned the history row a cut-off decision needs, the cell is not cut off: it re-runs
/// (safe), and what it computes is still right.
#[test]
fn pruned_history_makes_a_cell_rerun_not_guess() {
    let (_dir, store, p) = at_version_1(Pipeline::new(chain()), true, b"same");
    let runs = |s: &Store| drain(&p, s, 1, false);
    assert_eq!(runs(&store).len(), 3);
    p.set_source_version(&store, "u", 2, b"same").unwrap();
    assert!(
        p.ready(&store, 10).unwrap().is_empty(),
        "cut off before the prune"
    );
    store.flush().unwrap();
    store.gc(crate::common::gc_everything()).unwrap();
    // The source's version-1 entry is gone from the history: a cannot be shown unchanged.
    let ready = p.ready(&store, 10).unwrap();
    assert_eq!(ready.len(), 1, "{ready:?}");
    assert_eq!(ready[0].stage, "a");
    // a's re-run commits its old output: b and c are cut off by it (their inputs' history is
    // a's version-1 row, superseded only now).
    let ran = runs(&store);
    assert_eq!(ran.keys().map(|k| k.1.as_str()).collect::<Vec<_>>(), ["a"]);
    let e = p.explain(&store, "u").unwrap();
    assert!(
        e.cells[1].wave.as_ref().is_some_and(Wave::is_cut_off),
        "{}",
        e.cells[1]
    );
    assert!(
        e.cells[2].wave.as_ref().is_some_and(Wave::is_cut_off),
        "{}",
        e.cells[2]
    );
}

/// Without the cutoff (the measuring switch) every cell of a bumped unit re-runs.
#[test]
fn without_cutoff_every_cell_of_a_bumped_unit_reruns() {
    let (_dir, store, p) = at_version_1(Pipeline::new(diamond()).with_cutoff(false), true, b"x");
    assert_eq!(drain(&p, &store, 1, false).len(), 4);
    p.set_source_version(&store, "u", 2, b"x").unwrap();
    assert_eq!(drain(&p, &store, 1, false).len(), 4);
    assert_eq!(store.metrics().pipeline_cells_cut_off, 0);
}

// ---- The CLI flow the hidden checks drive ----

struct Cli {
    _dir: tempfile::TempDir,
    lake: String,
    def: String,
    files: std::path::PathBuf,
}

impl Cli {
    fn new(def: &PipelineDef) -> Cli {
        let dir = tempfile::tempdir().unwrap();
        let lake = dir.path().join("lake");
        let def_path = dir.path().join("p.toml");
        std::fs::write(&def_path, def.to_text()).unwrap();
        let files = dir.path().to_path_buf();
        let cli = Cli {
            lake: lake.to_str().unwrap().to_string(),
            def: def_path.to_str().unwrap().to_string(),
            files,
            _dir: dir,
        };
        let (code, _, err) = cli.run(&["init", &cli.lake]);
        assert_eq!(code, Some(0), "{err}");
        cli
    }

    fn run(&self, args: &[&str]) -> (Option<i32>, String, String) {
        bin::run_text(args)
    }

    fn file(&self, name: &str, bytes: &[u8]) -> String {
        let p = self.files.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_string()
    }

    fn json_lines(&self, args: &[&str]) -> Vec<Value> {
        let (code, out, err) = self.run(args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn set_version(&self, unit: &str, v: u64, bytes: &[u8]) {
        let f = self.file("src.bin", bytes);
        let (code, _, err) = self.run(&[
            "pipeline",
            "set-version",
            &self.lake,
            unit,
            &v.to_string(),
            &f,
        ]);
        assert_eq!(code, Some(0), "{err}");
    }

    /// Claims every ready cell and completes it with `output(stage)`; returns the (unit, stage)
    /// pairs claimed.
    fn run_ready(&self, output: impl Fn(&str) -> Vec<u8>) -> Vec<(String, String)> {
        let cells = self.json_lines(&[
            "pipeline",
            "ready",
            &self.lake,
            "--pipeline",
            &self.def,
            "--claim",
            "--worker",
            "w1",
            "--json",
        ]);
        let mut done = Vec::new();
        for c in cells {
            let (unit, stage) = (c["unit"].as_str().unwrap(), c["stage"].as_str().unwrap());
            let token = c["token"].as_u64().unwrap().to_string();
            let f = self.file("out.bin", &output(stage));
            let (code, _, err) = self.run(&[
                "pipeline",
                "complete",
                &self.lake,
                "--pipeline",
                &self.def,
                unit,
                stage,
                &f,
                "--token",
                &token,
            ]);
            assert_eq!(code, Some(0), "{err}");
            done.push((unit.to_string(), stage.to_string()));
        }
        done
    }

    fn ready_stages(&self) -> Vec<String> {
        self.json_lines(&[
            "pipeline",
            "ready",
            &self.lake,
            "--pipeline",
            &self.def,
            "--json",
        ])
        .iter()
        .map(|c| c["stage"].as_str().unwrap().to_string())
        .collect()
    }

    fn explain(&self, unit: &str) -> BTreeMap<String, Value> {
        self.json_lines(&[
            "pipeline",
            "explain",
            &self.lake,
            "--pipeline",
            &self.def,
            unit,
            "--json",
        ])
        .into_iter()
        .map(|c| (c["stage"].as_str().unwrap().to_string(), c))
        .collect()
    }

    fn status(&self) -> BTreeMap<String, Value> {
        self.json_lines(&[
            "pipeline",
            "status",
            &self.lake,
            "--pipeline",
            &self.def,
            "--json",
        ])
        .into_iter()
        .map(|c| (c["stage"].as_str().unwrap().to_string(), c))
        .collect()
    }

    /// Runs ready cells stage by stage until none is ready.
    fn drain(&self, output: &dyn Fn(&str) -> Vec<u8>) -> Vec<(String, String)> {
        let mut all = Vec::new();
        loop {
            let done = self.run_ready(output);
            if done.is_empty() {
                return all;
            }
            all.extend(done);
        }
    }
}

#[test]
fn cli_chain_same_output_stops_the_wave_and_a_changed_one_propagates() {
    let cli = Cli::new(&chain());
    cli.set_version("u1", 1, b"input");
    let v1 = |s: &str| format!("{s} v1").into_bytes();
    assert_eq!(cli.drain(&v1).len(), 3);

    // Bump the source; a re-runs and commits the same bytes: b and c are not ready, they are
    // reported done and cut off.
    cli.set_version("u1", 2, b"input changed");
    assert_eq!(cli.ready_stages(), ["a"]);
    assert_eq!(cli.run_ready(v1), [("u1".to_string(), "a".to_string())]);
    assert!(cli.ready_stages().is_empty(), "the wave stopped at a");
    let e = cli.explain("u1");
    assert_eq!(e["a"]["state"], "done");
    assert_eq!(e["a"]["reran"], true);
    assert_eq!(e["a"]["output_unchanged"], true);
    assert_eq!(e["a"]["wave"], "reran");
    let a_hash = ObjectId::of(&v1("a")).to_hex();
    assert_eq!(e["a"]["object"], a_hash.as_str());
    for s in ["b", "c"] {
        assert_eq!(e[s]["state"], "done", "{}", e[s]);
        assert_eq!(e[s]["wave"], "cut_off", "{}", e[s]);
        assert_eq!(e[s]["reran"], false, "{}", e[s]);
        assert_eq!(
            e[s]["source_version"], 1,
            "completed for version 1, still counting"
        );
        assert!(
            e[s]["why"].as_str().unwrap().contains("unchanged output"),
            "{}",
            e[s]
        );
    }
    assert_eq!(e["b"]["unchanged_inputs"][0]["upstream"], "a");
    assert_eq!(e["b"]["unchanged_inputs"][0]["object"], a_hash.as_str());
    let st = cli.status();
    assert_eq!(
        (st["a"]["cut_off"].as_u64(), st["a"]["done"].as_u64()),
        (Some(0), Some(1))
    );
    for s in ["b", "c"] {
        assert_eq!(
            (st[s]["cut_off"].as_u64(), st[s]["done"].as_u64()),
            (Some(1), Some(1))
        );
    }

    // Bump again; a's re-run commits different bytes: b is ready, and its input is a's new
    // output. b then commits its old bytes: c stays cut off.
    cli.set_version("u1", 3, b"input changed again");
    cli.run_ready(|s| format!("{s} v3").into_bytes());
    assert_eq!(cli.ready_stages(), ["b"]);
    cli.run_ready(v1);
    assert!(cli.ready_stages().is_empty());
    let e = cli.explain("u1");
    assert_eq!(e["b"]["output_unchanged"], true);
    assert_eq!(e["c"]["wave"], "cut_off");
    assert_eq!(e["c"]["unchanged_inputs"][0]["upstream"], "b");

    // The source bumped with the same bytes: nothing is ready, all three are cut off.
    cli.set_version("u1", 4, b"input changed again");
    assert!(cli.ready_stages().is_empty());
    let st = cli.status();
    assert!(st.values().all(|s| s["cut_off"] == 1), "{st:?}");
    let e = cli.explain("u1");
    assert!(
        e["a"]["unchanged_inputs"][0]["upstream"].is_null(),
        "the source"
    );
    // The counter is exported with the other pipeline counters (this process's: zero here).
    let (code, text, err) = cli.run(&["stats", &cli.lake, "--prometheus"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("oncelake_pipeline_cells_cut_off_total ")),
        "{text}"
    );
}

#[test]
fn cli_diamond_join_reruns_only_if_an_input_changed() {
    let cli = Cli::new(&diamond());
    for u in ["u1", "u2"] {
        cli.set_version(u, 1, b"in");
    }
    let v1 = |s: &str| format!("{s} v1").into_bytes();
    assert_eq!(cli.drain(&v1).len(), 8);

    // u1: a re-runs with the same bytes: b, c, d cut off; u2 untouched.
    cli.set_version("u1", 2, b"in 2");
    assert_eq!(cli.run_ready(v1).len(), 1);
    assert!(cli.ready_stages().is_empty());
    let e = cli.explain("u1");
    for s in ["b", "c", "d"] {
        assert_eq!(e[s]["wave"], "cut_off", "{}", e[s]);
    }
    let e2 = cli.explain("u2");
    assert!(e2
        .values()
        .all(|c| c["wave"].is_null() && c["state"] == "done"));

    // u1 again: a changes; b re-runs unchanged, c changed: d re-runs.
    cli.set_version("u1", 3, b"in 3");
    let a3 = |s: &str| format!("{s} v3").into_bytes();
    cli.run_ready(a3);
    let mut ready = cli.ready_stages();
    ready.sort();
    assert_eq!(ready, ["b", "c"]);
    cli.run_ready(|s| if s == "b" { v1(s) } else { a3(s) });
    assert_eq!(cli.ready_stages(), ["d"], "one input of the join changed");
    cli.run_ready(a3);

    // u1 again: a changes; b and c both re-run unchanged: d is cut off.
    cli.set_version("u1", 4, b"in 4");
    cli.run_ready(|s| format!("{s} v4").into_bytes());
    let mut ready = cli.ready_stages();
    ready.sort();
    assert_eq!(ready, ["b", "c"]);
    cli.run_ready(|s| if s == "b" { v1(s) } else { a3(s) });
    assert!(
        cli.ready_stages().is_empty(),
        "no input of the join changed"
    );
    let e = cli.explain("u1");
    assert_eq!(e["d"]["wave"], "cut_off");
    assert_eq!(e["d"]["state"], "done");
    assert_eq!(e["d"]["source_version"], 3);
    let st = cli.status();
    assert_eq!(st["d"]["cut_off"], 1);
    assert_eq!(st["d"]["done"], 2);
    assert!(cli.explain("u1")["d"]["why"]
        .as_str()
        .unwrap()
        .contains("unchanged output of b (hash"));
}

/// Completes the cell of unit `u` at `stage` for source version `v` with `out`, without a claim
/// (the library's `complete` takes any attempt), and fails unless it committed.
#[track_caller]
fn complete_unclaimed(store: &Store, p: &Pipeline, stage: &str, v: u64, out: &[u8]) {
    let attempt = oncelake::pipeline::Attempt {
        unit: "u".into(),
        stage: stage.into(),
        source_version: v,
        worker: "w".into(),
        token: None,
    };
    let done = p.complete(store, &attempt, out).unwrap();
    assert!(done.outcome.is_success(), "{done:?}");
}

/// The entries a cut-off decision compares can be superseded inside the backlog's tail (nothing
/// applied yet): the answer is the same as once they are applied.
#[test]
fn cutoff_reads_superseded_entries_from_the_tail() {
    let (_dir, store, p) = at_version_1(Pipeline::new(chain()), false, b"same");
    let complete = |stage: &str, v: u64, out: &[u8]| complete_unclaimed(&store, &p, stage, v, out);
    for s in ["a", "b", "c"] {
        complete(s, 1, s.as_bytes());
    }
    // The source's version-1 entry is superseded in the tail: a is cut off by it.
    p.set_source_version(&store, "u", 2, b"same").unwrap();
    // New bytes; a's re-run commits its old output, superseding a@1 in the tail: b and c are
    // cut off.
    p.set_source_version(&store, "u", 3, b"other").unwrap();
    assert_eq!(p.ready(&store, 10).unwrap()[0].stage, "a");
    complete("a", 3, b"a");
    assert!(store.backlog().units >= 7, "{:?}", store.backlog());
    let over_tail = p.explain(&store, "u").unwrap();
    for c in &over_tail.cells[1..] {
        assert!(c.wave.as_ref().is_some_and(Wave::is_cut_off), "{c}");
    }
    assert!(p.ready(&store, 10).unwrap().is_empty());
    store.flush().unwrap();
    assert_eq!(store.backlog().units, 0);
    assert_eq!(p.explain(&store, "u").unwrap(), over_tail);
}

/// A completion read only inputs committed before it: an upstream output committed later for a
/// source version no newer than the completion's (the library's `complete` does not check that
/// upstream cells are done) is not what the completion consumed, and cannot cut it off.
#[test]
fn only_inputs_committed_before_a_completion_can_cut_it_off() {
    let (_dir, store, p) = at_version_1(Pipeline::new(chain()), true, b"one");
    let complete = |stage: &str, v: u64, out: &[u8]| complete_unclaimed(&store, &p, stage, v, out);
    complete("a", 1, b"a1");
    complete("b", 1, b"b1");
    complete("c", 1, b"c1");
    p.set_source_version(&store, "u", 2, b"two").unwrap();
    // b for version 2 before a: it read a's version-1 output.
    complete("b", 2, b"b from a1");
    complete("a", 2, b"a2");
    p.set_source_version(&store, "u", 3, b"three").unwrap();
    complete("a", 3, b"a2");
    // a's output now (a2) is not what b read (a1): b re-runs.
    let ready: Vec<String> = p
        .ready(&store, 10)
        .unwrap()
        .into_iter()
        .map(|c| c.stage)
        .collect();
    assert_eq!(ready, ["b"]);
}

/// The metric counts each cut-off cell once, by the commit that cut it off, also when two
/// branches stop their waves one after the other.
#[test]
fn each_cut_off_cell_is_counted_once() {
    let (_dir, store, p) = at_version_1(Pipeline::new(branches()), true, b"one");
    let run = |s: &Store| {
        work_by(&p, s, |c| match c.stage.as_str() {
            "a" => inputs_of(s, c).concat(),
            other => other.as_bytes().to_vec(),
        })
    };
    assert_eq!(run(&store).completed, 6);
    p.set_source_version(&store, "u", 2, b"two").unwrap();
    // a changes; b and c re-run to their old outputs: d, e and f are cut off.
    assert_eq!(run(&store).completed, 3);
    let st = p.status(&store).unwrap();
    let cut: Vec<u64> = st.stages.iter().map(|s| s.cut_off).collect();
    assert_eq!(cut, [0, 0, 0, 1, 1, 1]);
    assert_eq!(store.metrics().pipeline_cells_cut_off, 3);
    // The same bytes again: all six are cut off by the source's commit.
    p.set_source_version(&store, "u", 3, b"two").unwrap();
    assert_eq!(store.metrics().pipeline_cells_cut_off, 9);
    assert!(store
        .metrics()
        .to_prometheus()
        .contains("\noncelake_pipeline_cells_cut_off_total 9\n"));
}

// ---- The worked example's pipeline mode through the CLI (the library's: sim/tests/sim/pipeline.rs) ----

#[test]
fn cli_simulate_pipeline_prints_its_figures() {
    let out = std::process::Command::new(bin::oncelake())
        .args(["simulate", "--pipeline", "--units", "1000", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "pipeline");
    let n = |k: &str| v[k].as_u64().unwrap();
    assert_eq!(n("bumped_units"), 10, "1% of --units");
    assert_eq!(n("changed_units"), n("bumped_units") / 2);
    assert_eq!(
        n("cells_run_with_cutoff"),
        n("bumped_units") + 2 * n("changed_units")
    );
    assert_eq!(n("cells_run_without_cutoff"), 3 * n("bumped_units"));
    assert_eq!(v["outputs_equal"], true);
    let bad = std::process::Command::new(bin::oncelake())
        .args(["simulate", "--pipeline", "--bump", "2"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}
