//! `oncelake simulate --nodes N`: the worked example (SPEC R18) across N node processes of this
//! binary on one shared lake (R23), and the hidden node mode those processes run.

use super::output::thousands;
use super::sim_args::SimulateArgs;
use super::{exit, print_json, CliError};
use oncelake_sim::lake_env::LakeEnv;
use oncelake_sim::nodes::{run_node as node_share, simulate_nodes, workers_of, NodeShare};
use oncelake_sim::nodes::{NodeFigures, NodesReport};
use oncelake_sim::{SimConfig, SimMode};
use serde_json::json;
use std::path::Path;
use std::process::Command;

/// The run across nodes: each mode on a lake of its own, node directories under `root`.
pub(crate) fn run(
    a: &SimulateArgs,
    modes: &[SimMode],
    nodes: usize,
    root: &Path,
) -> Result<u8, CliError> {
    if a.crash_rate > 0.0 {
        return Err(CliError::Usage(
            "--crash-rate is not supported with --nodes yet: retrying a crashed chunk across \
             nodes is not built; drop --crash-rate"
                .into(),
        ));
    }
    let unique = root.file_name().map_or_else(
        || "oncelake-sim".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let lake = LakeEnv::start(a.lake, root, &unique).map_err(CliError::Usage)?;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Usage(format!("cannot find this program to start nodes: {e}")))?;
    let mut all_ok = true;
    for &mode in modes {
        let cfg = a.config(mode, root.join(mode.name()));
        let url = lake.url(mode.name());
        if !a.json {
            eprintln!(
                "simulate {}: {nodes} node processes on {}",
                mode.name(),
                lake.described
            );
        }
        let command = |i: usize| node_command(&exe, a, &cfg, &lake, &url, (i, nodes));
        let r = simulate_nodes(&cfg, nodes, &command)?;
        all_ok &= r.exactly_once();
        if a.json {
            print_json(&report_json(&r, &lake, &url));
        } else {
            print_report(&r, &lake);
        }
    }
    Ok(if all_ok { exit::OK } else { exit::FAILURE })
}

/// The command that runs node `i` of `n`.
fn node_command(
    exe: &Path,
    a: &SimulateArgs,
    cfg: &SimConfig,
    lake: &LakeEnv,
    url: &str,
    (i, n): (usize, usize),
) -> Command {
    let mut c = Command::new(exe);
    c.arg("simulate")
        .args(["--node-lake", url])
        .args(["--node-index", &i.to_string()])
        .args(["--nodes", &n.to_string()])
        .arg("--store")
        .arg(cfg.store_dir.join(format!("node{i}")))
        .args(["--mode", cfg.mode.name()])
        .args(["--units", &cfg.units.to_string()])
        .args(["--workers", &workers_of(a.workers, n, i).to_string()])
        .args(["--overlap", &cfg.overlap.to_string()])
        .args(["--seed", &cfg.seed.to_string()])
        .args(["--chunk", &cfg.chunk.to_string()]);
    lake.apply(&mut c);
    c
}

/// The hidden node mode: one node process's share, its figures on standard output.
pub(crate) fn run_node(a: &SimulateArgs) -> Result<u8, CliError> {
    let (Some(lake), Some(index), Some(nodes), Some(store)) =
        (&a.node_lake, a.node_index, a.nodes, &a.store)
    else {
        return Err(CliError::Usage(
            "a node process needs --node-lake, --node-index, --nodes and --store".into(),
        ));
    };
    let [mode] = a.modes() else {
        return Err(CliError::Usage(
            "a node process runs one mode: optimistic or coordinated".into(),
        ));
    };
    let cfg = SimConfig {
        node: Some(NodeShare {
            lake: lake.clone(),
            index,
            nodes,
        }),
        ..a.config(*mode, store.clone())
    };
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    node_share(&cfg, &mut stdin.lock(), &mut stdout.lock())?;
    Ok(exit::OK)
}

fn node_json(n: &NodeFigures) -> serde_json::Value {
    json!({
        "workers": n.workers,
        "computations": n.computations,
        "redundant": n.redundant,
        "already_done": n.already_done,
        "busy": n.busy,
        "manifest_entries": n.entries,
        "view_digest": n.digest,
        "log_units": n.log_units,
        "replay_clean": n.replay_clean,
        "elapsed_ms": n.elapsed.as_secs_f64() * 1000.0,
    })
}

fn report_json(r: &NodesReport, lake: &LakeEnv, url: &str) -> serde_json::Value {
    json!({
        "mode": r.mode.name(),
        "nodes": r.nodes.len(),
        "lake": lake.described,
        "lake_url": url,
        "schedule": "natural",
        "units": r.units,
        "overlapped_units": r.overlapped,
        "computations": r.computations(),
        "redundant": r.redundant(),
        "already_done": r.already_done(),
        "busy": r.busy(),
        "manifest_entries": r.entries(),
        "views_identical": r.views_identical(),
        "exactly_once": r.exactly_once(),
        "per_node": r.nodes.iter().map(node_json).collect::<Vec<_>>(),
        "elapsed_ms": r.elapsed.as_secs_f64() * 1000.0,
    })
}

fn print_report(r: &NodesReport, lake: &LakeEnv) {
    outln!(
        "{} across {} node processes on one lake ({}): {} units, {} handed to two workers \
         (on two nodes; real timing decides what the second finds).",
        r.mode.name(),
        r.nodes.len(),
        lake.described,
        thousands(r.units),
        thousands(r.overlapped)
    );
    outln!("  node  workers  computations  redundant  already done  busy   entries  seconds");
    for (i, n) in r.nodes.iter().enumerate() {
        outln!(
            "  {i:>4}  {:>7}  {:>12}  {:>9}  {:>12}  {:>4}  {:>8}  {:>7.2}",
            n.workers,
            n.computations,
            n.redundant,
            n.already_done,
            n.busy,
            n.entries,
            n.elapsed.as_secs_f64()
        );
    }
    outln!(
        "  all   {:>7}  {:>12}  {:>9}  {:>12}  {:>4}",
        r.nodes.iter().map(|n| n.workers).sum::<usize>(),
        r.computations(),
        r.redundant(),
        r.already_done(),
        r.busy()
    );
    outln!(
        "{}: {} entries (every node's view {}), {} redundant computations, {:.2} s",
        if r.exactly_once() {
            "exactly-once held"
        } else {
            "exactly-once FAILED"
        },
        thousands(r.entries()),
        if r.views_identical() {
            "identical"
        } else {
            "DIFFERS"
        },
        thousands(r.redundant()),
        r.elapsed.as_secs_f64()
    );
}
