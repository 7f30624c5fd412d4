//! The worked example across node *processes* on one shared lake (SPEC R18, R23): `oncelake
//! simulate --nodes N`.
//!
//! Every node process builds the same first-round queue (same seed) and takes the chunks whose
//! position is its index modulo `N`; the two chunks of a pair are adjacent, so the two workers of
//! a unit handed out twice are on two different nodes, and real timing decides what the second
//! finds (the meeting of the premise schedule is an in-process handshake, so across processes the
//! schedule is always the natural one). A node runs one round: without crashes every unit handed
//! to it is committed by it or found done or busy because another node has it. The redundant
//! computations are the engine's own counters, summed over the nodes.
//!
//! The nodes then wait for each other (a line on their standard input), sync, and each reports
//! its view of the lake: the entry count, a digest of every entry, the lake-wide counters and the
//! replay check (I7). The run is exactly-once when every view is the same, holds one entry per
//! unit, and the lake counted one unit committed per unit.

use crate::{SimConfig, SimMode};
use oncelake::log::RecordBody;
use oncelake::{Error, Result, Store};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One node process's share of a run across nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeShare {
    /// The lake every node is bound to.
    pub lake: String,
    /// This node's index, `0..nodes`.
    pub index: usize,
    /// Node processes in the run.
    pub nodes: usize,
}

/// The line a node prints when its share is done; the figures follow as `name=value`.
const DONE: &str = "ONCELAKE-SIM-NODE-DONE";
/// The line a node prints with its view of the lake after the others finished.
const VIEW: &str = "ONCELAKE-SIM-NODE-VIEW";

/// One node's figures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFigures {
    /// Worker threads on this node.
    pub workers: usize,
    /// Its work closures run (engine counter `computations`, this process).
    pub computations: u64,
    /// Of those, the ones whose output did not become the entry (`redundant_computations`).
    pub redundant: u64,
    /// Runs that found the unit done (`runs_already_done`).
    pub already_done: u64,
    /// Runs that found the unit claimed by a worker (on this node or another) (`runs_busy`).
    pub busy: u64,
    /// Entries in its view of the lake at the end, after a sync.
    pub entries: u64,
    /// BLAKE3 of every entry of its view (unit, version, revision, object, seq), in key order.
    pub digest: String,
    /// Unit commits in the lake's log as this node replays it (one per unit when none was
    /// written twice).
    pub log_units: u64,
    /// Whether replaying its replica's log reproduced its manifest (I7).
    pub replay_clean: bool,
    /// Wall time of its share (open to the end of its round).
    pub elapsed: Duration,
}

/// What a run across nodes measured.
#[derive(Clone, Debug, PartialEq)]
pub struct NodesReport {
    /// The mode simulated.
    pub mode: SimMode,
    /// Logical units.
    pub units: u64,
    /// Units handed to two workers (on two nodes).
    pub overlapped: u64,
    /// Each node's figures, by index.
    pub nodes: Vec<NodeFigures>,
    /// Wall time of the whole run: the processes' start to the last view.
    pub elapsed: Duration,
}

impl NodesReport {
    /// Work closures run on all nodes.
    pub fn computations(&self) -> u64 {
        self.nodes.iter().map(|n| n.computations).sum()
    }
    /// Redundant computations on all nodes.
    pub fn redundant(&self) -> u64 {
        self.nodes.iter().map(|n| n.redundant).sum()
    }
    /// Runs that found their unit done, on all nodes.
    pub fn already_done(&self) -> u64 {
        self.nodes.iter().map(|n| n.already_done).sum()
    }
    /// Runs that found their unit busy, on all nodes.
    pub fn busy(&self) -> u64 {
        self.nodes.iter().map(|n| n.busy).sum()
    }
    /// Whether every node's view of the lake is the same.
    pub fn views_identical(&self) -> bool {
        self.nodes.windows(2).all(|w| {
            (w[0].entries, &w[0].digest, w[0].log_units)
                == (w[1].entries, &w[1].digest, w[1].log_units)
        })
    }
    /// Entries in the lake (node 0's view).
    pub fn entries(&self) -> u64 {
        self.nodes.first().map_or(0, |n| n.entries)
    }
    /// Whether exactly-once held across the nodes: identical views, one entry per unit, each
    /// unit committed once in the lake's log, every replica replaying to its manifest.
    pub fn exactly_once(&self) -> bool {
        self.views_identical()
            && self.entries() == self.units
            && self.nodes.iter().all(|n| n.log_units == self.units)
            && self.nodes.iter().all(|n| n.replay_clean)
    }
}

/// Worker threads of node `index` when `workers` are spread over `nodes`.
pub fn workers_of(workers: usize, nodes: usize, index: usize) -> usize {
    (workers / nodes + usize::from(index < workers % nodes)).max(1)
}

/// Runs one node process's share (`cfg.node` set): its chunks, then its line of figures on
/// `out`, then — once a line arrives on `input`, when every node is done — its view of the lake.
pub fn run_node(cfg: &SimConfig, input: &mut dyn BufRead, out: &mut dyn Write) -> Result<()> {
    if cfg.node.is_none() {
        return Err(Error::InvalidRequest(
            "a node's share needs the node's lake, index and node count".into(),
        ));
    }
    let r = crate::simulate(cfg, &|_, _| {})?;
    let io = |source: std::io::Error| Error::Io {
        context: "report to the simulation's parent process".into(),
        source,
    };
    writeln!(
        out,
        "{DONE} workers={} computations={} redundant={} already_done={} busy={} elapsed_ms={} \
         taken_over={} fenced={} granted={} held={} duplicates={}",
        r.workers,
        r.computations,
        r.redundant,
        r.already_done,
        r.busy,
        r.elapsed.as_millis(),
        r.claims_taken_over,
        r.fenced_rejections,
        r.claims_granted,
        r.claims_held,
        r.duplicates_collapsed
    )
    .and_then(|()| out.flush())
    .map_err(io)?;
    let mut go = String::new();
    input.read_line(&mut go).map_err(io)?;
    // Reopening a node syncs it with the lake before the open returns.
    let store = Store::open(&cfg.store_dir)?;
    store.sync()?;
    let view = view_of(&store)?;
    writeln!(
        out,
        "{VIEW} entries={} digest={} log_units={} replay_clean={}",
        view.0, view.1, view.2, view.3
    )
    .and_then(|()| out.flush())
    .map_err(io)
}

/// (entries, digest, units committed in the log, replay clean) of a node's replica.
fn view_of(store: &Store) -> Result<(u64, String, u64, bool)> {
    let snap = store.snapshot()?;
    let mut h = blake3::Hasher::new();
    let mut entries = 0u64;
    for e in snap.iter()? {
        let e = e?;
        h.update(e.unit.as_bytes());
        h.update(&e.source_version.to_le_bytes());
        h.update(&e.revision.to_le_bytes());
        h.update(e.object.id.to_hex().as_bytes());
        h.update(&e.seq.to_le_bytes());
        entries += 1;
    }
    let mut log_units = 0u64;
    for r in snap.changes_since(0)? {
        if let RecordBody::Commit { entries } = r?.body {
            log_units += entries.len() as u64;
        }
    }
    let clean = oncelake::replay(&snap)?.is_clean();
    Ok((entries, h.finalize().to_hex().to_string(), log_units, clean))
}

/// Runs `nodes` node processes, node `i` started by `node_command(i)` (a command that runs
/// [`run_node`] with its share and the standard streams), and gathers their figures.
pub fn simulate_nodes(
    cfg: &SimConfig,
    nodes: usize,
    node_command: &dyn Fn(usize) -> Command,
) -> Result<NodesReport> {
    if nodes == 0 || nodes > 64 {
        return Err(Error::InvalidRequest(format!(
            "nodes is {nodes}; use 1..=64 node processes"
        )));
    }
    let start = Instant::now();
    let failed = |i: usize, what: String| {
        Error::InvalidRequest(format!("simulation node {i} failed: {what}"))
    };
    let mut children = Vec::new();
    for i in 0..nodes {
        let mut cmd = node_command(i);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| failed(i, format!("start: {e}")))?;
        let stdout = child.stdout.take().map(BufReader::new);
        children.push((child, stdout));
    }
    // Every node finishes its share before any is asked for its view.
    let mut figures = Vec::new();
    for (i, (_, stdout)) in children.iter_mut().enumerate() {
        let fields = read_line(stdout.as_mut(), DONE).map_err(|e| failed(i, e))?;
        figures.push(fields);
    }
    for (child, _) in &mut children {
        if let Some(mut stdin) = child.stdin.take() {
            // A node that died is reported below by its missing view.
            let _ = stdin.write_all(b"go\n");
        }
    }
    let mut out = Vec::new();
    for (i, ((mut child, mut stdout), done)) in children.into_iter().zip(figures).enumerate() {
        let view = read_line(stdout.as_mut(), VIEW).map_err(|e| failed(i, e))?;
        let status = child.wait().map_err(|e| failed(i, e.to_string()))?;
        if !status.success() {
            return Err(failed(i, format!("exited with {status}")));
        }
        out.push(figures_of(&done, &view).map_err(|e| failed(i, e))?);
    }
    Ok(NodesReport {
        mode: cfg.mode,
        units: cfg.units,
        overlapped: cfg.overlapped_units(),
        nodes: out,
        elapsed: start.elapsed(),
    })
}

/// Reads lines until the one starting with `tag`; returns its `name=value` fields.
fn read_line(
    stdout: Option<&mut BufReader<std::process::ChildStdout>>,
    tag: &str,
) -> std::result::Result<BTreeMap<String, String>, String> {
    let stdout = stdout.ok_or("no standard output")?;
    let mut line = String::new();
    loop {
        line.clear();
        match stdout.read_line(&mut line) {
            Ok(0) => {
                return Err(format!(
                    "ended before its {tag} line (see its errors above)"
                ))
            }
            Ok(_) if line.starts_with(tag) => break,
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

fn figures_of(
    done: &BTreeMap<String, String>,
    view: &BTreeMap<String, String>,
) -> std::result::Result<NodeFigures, String> {
    let num = |m: &BTreeMap<String, String>, k: &str| -> std::result::Result<u64, String> {
        m.get(k)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no number {k} in its report"))
    };
    Ok(NodeFigures {
        workers: num(done, "workers")? as usize,
        computations: num(done, "computations")?,
        redundant: num(done, "redundant")?,
        already_done: num(done, "already_done")?,
        busy: num(done, "busy")?,
        entries: num(view, "entries")?,
        digest: view.get("digest").cloned().ok_or("no digest in its view")?,
        log_units: num(view, "log_units")?,
        replay_clean: view.get("replay_clean").map(String::as_str) == Some("true"),
        elapsed: Duration::from_millis(num(done, "elapsed_ms")?),
    })
}
