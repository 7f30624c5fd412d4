//! A seeded simulation of a shared lake (SPEC R23, I1–I11): three in-process nodes on one
//! `memory://` lake behind the fault plan (failures before the store, lost responses after it,
//! 409s and 5xx-then-412 answered `AlreadyExists`, latency), each with its own clock that is
//! skewed and jumps (backwards too); nodes restart, are wiped and rejoin from the log, and hold
//! leases while others take them over (a node that does not act is a paused node). Nodes also
//! crash *inside* a group — while uploading, between deciding and the segment's create, between
//! the create and the apply — and mid-checkpoint; they write checkpoints (a wiped node starts
//! from the newest), prune and sweep the lake (GC), and a GC round pauses between its fence and
//! its deletes, which another step carries out later. One step at a time, from one seed, so a
//! failing seed replays: `ONCELAKE_LAKE_SEEDS=7,8 cargo test --features lake --test lake_sim`
//! (`ONCELAKE_LAKE_STEPS` sets the steps per seed).
//!
//! Checked at every step: a plain put's answer is the one the R3 model gives; a put cut by a
//! crash is wholly visible or wholly absent after the node reopens. At the end, on every node
//! and on a new node started from the lake: the manifest equals the model and the nodes agree,
//! the log replays to the manifest (I7), every object is there (I2, verify: the new node fetches
//! each from the lake, so GC never deleted a referenced one), every acknowledged commit is
//! readable at its seq (unless GC pruned that seq), never two commits of one unit version, and
//! the log never admits a stale token (I6: each fenced commit carries its unit's newest granted
//! token).

use crate::common;
use crate::nodes::node as open;

use common::SplitMix64 as Rng;
use oncelake::log::RecordBody;
use oncelake::{
    Batch, ClaimOutcome, FaultRates, LakeFault, LakeFaults, Lease, ManualClock, ObjectId, Outcome,
    Store, VerifyOptions,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const T0: u64 = 1_800_000_000_000;
const NODES: usize = 3;
const STEPS: usize = 160;
const TTL: Duration = Duration::from_secs(30);

fn steps() -> usize {
    common::env_or("ONCELAKE_LAKE_STEPS", STEPS)
}

fn seeds() -> Vec<u64> {
    match std::env::var("ONCELAKE_LAKE_SEEDS") {
        Ok(s) => s.split(',').map(|x| x.trim().parse().unwrap()).collect(),
        Err(_) => vec![1, 2, 3],
    }
}

/// The R3 model of plain puts (no token, never claimed, no corrections): unit -> current
/// (version, object). An older version is stale even if it was committed once.
#[derive(Default)]
struct Model {
    current: BTreeMap<String, (u64, ObjectId)>,
}

impl Model {
    /// The answer the rules give, as a kind, and the state after it.
    fn put(&mut self, unit: &str, v: u64, o: ObjectId) -> &'static str {
        let kind = self.would(unit, v, o);
        if kind == "committed" {
            self.current.insert(unit.to_string(), (v, o));
        }
        kind
    }

    /// The answer the rules would give, the state unchanged.
    fn would(&self, unit: &str, v: u64, o: ObjectId) -> &'static str {
        match self.current.get(unit) {
            None => "committed",
            Some(&(cv, _)) if v > cv => "committed",
            Some(&(cv, co)) if v == cv && o == co => "duplicate",
            Some(&(cv, _)) if v == cv => "conflict",
            _ => "stale",
        }
    }
}

struct Node {
    dir: PathBuf,
    clock: ManualClock,
    store: Option<Store>,
    /// Leases this node's worker holds (forgotten when the node is wiped).
    leases: Vec<Lease>,
}

/// The simulation's state between steps.
struct Sim {
    seed: u64,
    url: String,
    plan: Arc<LakeFaults>,
    rng: Rng,
    nodes: Vec<Node>,
    model: Model,
    /// Every acknowledged commit: (unit, seq, object).
    acked: Vec<(String, u64, ObjectId)>,
    /// Every committed version of a fenced unit, so a second commit of one is seen.
    versions: HashMap<(String, u64), ObjectId>,
    /// GC rounds paused between their fence and their deletes: the names they doomed.
    paused_gc: Vec<Vec<String>>,
    /// Steps of each kind taken.
    taken: BTreeMap<&'static str, u64>,
}

fn gc_options() -> oncelake::GcOptions {
    oncelake::GcOptions {
        retain: Duration::ZERO,
        grace: Duration::ZERO,
        ..oncelake::GcOptions::default()
    }
}

impl Sim {
    fn new(seed: u64, dir: &Path) -> Sim {
        let name = format!("lake-sim-{seed}-{}", std::process::id());
        let url = format!("memory://{name}");
        let plan = LakeFaults::install(&name, seed);
        plan.set_rates(FaultRates {
            before: 30,
            after: 30,
            conflict: 30,
            after_already_exists: 30,
            max_latency_ms: 1,
        });
        let mut rng = Rng(seed);
        let nodes = (0..NODES)
            .map(|i| {
                // Skewed by up to two minutes either way.
                let clock = ManualClock::new(T0 + rng.below(240_000) - 120_000);
                let dir = dir.join(format!("n{i}"));
                let store = Some(open(&dir, &url, &clock));
                Node {
                    dir,
                    clock,
                    store,
                    leases: Vec::new(),
                }
            })
            .collect();
        Sim {
            seed,
            url,
            plan,
            rng,
            nodes,
            model: Model::default(),
            acked: Vec::new(),
            versions: HashMap::new(),
            paused_gc: Vec::new(),
            taken: BTreeMap::new(),
        }
    }

    fn store(&self, i: usize) -> &Store {
        self.nodes[i].store.as_ref().unwrap()
    }

    /// A node's process dies and starts again on its directory.
    fn restart(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        drop(n.store.take());
        n.store = Some(open(&n.dir, &self.url, &n.clock));
    }

    fn step(&mut self, step: usize) {
        let i = self.rng.below(NODES as u64) as usize;
        let ctx = format!("seed {} step {step} node {i}", self.seed);
        let kind = match self.rng.below(120) {
            0..=44 => self.plain_put(i, &ctx),
            45..=59 => self.claim(i),
            60..=74 => self.fenced_commit(i, &ctx),
            75..=81 => self.clock_jump(i),
            82..=89 => {
                // Time passes for every node but this one's (it is paused).
                for (j, m) in self.nodes.iter().enumerate() {
                    if j != i {
                        m.clock.advance_ms(15_000);
                    }
                }
                "pause"
            }
            90..=94 => {
                self.restart(i);
                "restart"
            }
            95..=97 => {
                // Wiped: a new node in its place, from the lake's newest checkpoint and the log.
                let n = &mut self.nodes[i];
                drop(n.store.take());
                std::fs::remove_dir_all(&n.dir).unwrap();
                n.leases.clear();
                n.store = Some(open(&n.dir, &self.url, &n.clock));
                "wipe"
            }
            98..=99 => {
                self.store(i).sync().unwrap();
                "sync"
            }
            100..=107 => self.crash_inside_a_group(i, &ctx),
            108..=111 => self.checkpoint(i, &ctx),
            112..=115 => self.gc(i, &ctx),
            _ => self.resume_paused_gc(i, &ctx),
        };
        *self.taken.entry(kind).or_default() += 1;
    }

    fn plain_put(&mut self, i: usize, ctx: &str) -> &'static str {
        let unit = format!("p{}", self.rng.below(8));
        let v = 1 + self.rng.below(8);
        let bytes = format!("{unit}@{v}#{}", self.rng.below(2));
        let o = ObjectId::of(bytes.as_bytes());
        let got = self
            .store(i)
            .put(&unit, v, bytes.as_bytes())
            .unwrap()
            .outcome;
        self.answered(&got, unit, v, o, ctx);
        "put"
    }

    /// Checks a put's answer against the model's (which takes the put), and keeps a commit as
    /// acknowledged.
    fn answered(&mut self, got: &Outcome, unit: String, v: u64, o: ObjectId, ctx: &str) {
        assert_eq!(
            got.name(),
            self.model.put(&unit, v, o),
            "{ctx}: put {unit}@{v}"
        );
        if let Outcome::Committed { seq, .. } = *got {
            self.acked.push((unit, seq, o));
        }
    }

    fn claim(&mut self, i: usize) -> &'static str {
        let unit = format!("c{}", self.rng.below(3));
        let v = 1 + self.rng.below(3);
        if let ClaimOutcome::Granted { lease, .. } = self
            .store(i)
            .claim(&unit, v, &format!("w{i}"), TTL)
            .unwrap()
        {
            self.nodes[i].leases.push(lease);
        }
        "claim"
    }

    fn fenced_commit(&mut self, i: usize, ctx: &str) -> &'static str {
        if self.nodes[i].leases.is_empty() {
            return "fenced commit (no lease)";
        }
        let n = self.nodes[i].leases.len() as u64;
        let lease = self.nodes[i].leases.remove(self.rng.below(n) as usize);
        let bytes = format!("{}@{}#{i}", lease.unit, lease.source_version);
        let store = self.store(i);
        let staged = store.stage_bytes(bytes.as_bytes()).unwrap();
        let r = store
            .commit(Batch::new().put_fenced(
                &lease.unit,
                lease.source_version,
                &staged,
                lease.token,
            ))
            .unwrap();
        let got = r.units[0].outcome;
        assert!(
            !matches!(got, Outcome::Busy { .. } | Outcome::Aborted),
            "{ctx}: {got:?}"
        );
        if let Outcome::Committed { seq, .. } = got {
            let o = ObjectId::of(bytes.as_bytes());
            let key = (lease.unit.clone(), lease.source_version);
            assert!(
                self.versions.insert(key, o).is_none(),
                "{ctx}: a second commit"
            );
            self.acked.push((lease.unit.clone(), seq, o));
        }
        "fenced commit"
    }

    fn clock_jump(&mut self, i: usize) -> &'static str {
        // The node's clock jumps, backwards as often as forwards.
        let by = self.rng.below(120_000);
        let back = self.rng.below(2) == 0;
        let clock = &self.nodes[i].clock;
        let now = oncelake::Clock::now_ms(clock);
        clock.set_ms(if back { now - by } else { now + by });
        "clock jump"
    }

    /// A plain put whose node crashes inside the group: while uploading its object, after
    /// deciding and before the segment's create, or after the create and before the apply. The
    /// node restarts; the put is then wholly visible (its segment landed) or wholly absent.
    fn crash_inside_a_group(&mut self, i: usize, ctx: &str) -> &'static str {
        let (prefix, fault, what) = [
            ("objects/", LakeFault::Crash, "crash mid-upload"),
            ("log/", LakeFault::Crash, "crash before the create"),
            (
                "log/",
                LakeFault::CrashAfter,
                "crash between create and apply",
            ),
        ][self.rng.below(3) as usize];
        let unit = format!("p{}", self.rng.below(8));
        // Mostly the next version, so that the put has a group to crash in.
        let next = self.model.current.get(&unit).map_or(1, |c| c.0 + 1);
        let v = if self.rng.below(4) == 0 {
            1 + self.rng.below(8)
        } else {
            next
        };
        let bytes = format!("{unit}@{v}#{}", self.rng.below(2));
        let o = ObjectId::of(bytes.as_bytes());
        self.plan.script(prefix, fault);
        let r = self.store(i).put(&unit, v, bytes.as_bytes());
        // A put that made no request of that kind (a duplicate, a refusal) drew no crash.
        self.plan.clear_scripts();
        match r {
            Ok(w) => {
                self.answered(&w.outcome, unit, v, o, ctx);
                "crash not reached"
            }
            Err(_) => {
                self.restart(i);
                let snap = self.store(i).snapshot().unwrap();
                let now = snap
                    .get(&unit)
                    .unwrap()
                    .map(|e| (e.source_version, e.object.id));
                let landed = now == Some((v, o)) && self.model.current.get(&unit) != now.as_ref();
                if landed {
                    assert_eq!(self.model.put(&unit, v, o), "committed", "{ctx}: {what}");
                }
                assert_eq!(
                    now.as_ref(),
                    self.model.current.get(&unit),
                    "{ctx}: {what}: part of a put, or another's"
                );
                what
            }
        }
    }

    /// A checkpoint, a third of them cut by a crash before or after the upload.
    fn checkpoint(&mut self, i: usize, ctx: &str) -> &'static str {
        let crash = self.rng.below(3);
        if crash < 2 {
            let fault = [LakeFault::Crash, LakeFault::CrashAfter][crash as usize];
            self.plan.script("checkpoints/", fault);
        }
        let r = self.store(i).checkpoint();
        self.plan.clear_scripts();
        match r {
            Ok(_) => "checkpoint",
            Err(e @ oncelake::Error::Lake { .. }) => {
                assert!(crash < 2, "{ctx}: checkpoint: {e}");
                "crash mid-checkpoint"
            }
            Err(e) => panic!("{ctx}: checkpoint: {e}"),
        }
    }

    /// A GC round (the history pruned as a segment, then the lake swept); half of them stop
    /// after deciding (their fence) and leave the deletes to a later step.
    fn gc(&mut self, i: usize, ctx: &str) -> &'static str {
        if self.rng.below(2) == 0 {
            let r = self.store(i).gc(gc_options());
            r.unwrap_or_else(|e| panic!("{ctx}: gc: {e}"));
            "gc round"
        } else {
            let doomed = self.store(i).lake_sweep_plan().unwrap();
            self.paused_gc.push(doomed);
            "gc paused after its fence"
        }
    }

    fn resume_paused_gc(&mut self, i: usize, ctx: &str) -> &'static str {
        if self.paused_gc.is_empty() {
            self.store(i).sync().unwrap();
            return "sync";
        }
        let n = self.paused_gc.len() as u64;
        let doomed = self.paused_gc.remove(self.rng.below(n) as usize);
        self.store(i)
            .lake_sweep_delete(&doomed)
            .unwrap_or_else(|e| panic!("{ctx}: gc deletes: {e}"));
        "paused gc's deletes"
    }
}

fn simulate(seed: u64) -> u64 {
    let d = tempfile::tempdir().unwrap();
    let mut sim = Sim::new(seed, d.path());
    let steps = steps();
    for step in 0..steps {
        sim.step(step);
    }
    // A GC round still paused deletes now, before the end's checks.
    for doomed in std::mem::take(&mut sim.paused_gc) {
        sim.store(0).lake_sweep_delete(&doomed).unwrap();
    }
    // A new node, from the lake's newest checkpoint and the log: it fetches every object it
    // reads from the lake, so verify on it sees any referenced object GC deleted.
    let fresh = open(&d.path().join("fresh"), &sim.url, &sim.nodes[0].clock);
    let mut stores: Vec<&Store> = sim
        .nodes
        .iter()
        .map(|n| n.store.as_ref().unwrap())
        .collect();
    stores.push(&fresh);
    check_end(&sim, &stores);
    let c = sim.plan.counts();
    eprintln!(
        "seed {seed}: {steps} steps {:?}, {} commits acknowledged, faults {c:?}, new node from checkpoint {:?}",
        sim.taken,
        sim.acked.len(),
        fresh.lake_seeded_from()
    );
    steps as u64
}

fn check_end(sim: &Sim, stores: &[&Store]) {
    let seed = sim.seed;
    let mut seen = None;
    for (i, s) in stores.iter().enumerate() {
        s.sync().unwrap();
        let snap = s.snapshot().unwrap();
        let all: BTreeMap<String, (u64, ObjectId)> = snap
            .iter()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.unit, (e.source_version, e.object.id))
            })
            .collect();
        let plain: BTreeMap<_, _> = all
            .iter()
            .filter(|(u, _)| u.starts_with('p'))
            .map(|(u, v)| (u.clone(), *v))
            .collect();
        assert_eq!(
            plain, sim.model.current,
            "seed {seed} node {i}: the manifest is not the model"
        );
        match &seen {
            None => seen = Some(all),
            Some(first) => assert_eq!(&all, first, "seed {seed}: node {i} differs from node 0"),
        }
        for (unit, seq, o) in &sim.acked {
            let at = match s.snapshot_at(*seq) {
                Ok(at) => at,
                // GC pruned the history of that seq.
                Err(oncelake::Error::SeqOutOfRange { .. }) => continue,
                Err(e) => panic!("seed {seed}: snapshot at {seq}: {e}"),
            };
            let e = at.get(unit).unwrap();
            assert_eq!(
                e.as_ref().map(|e| e.object.id),
                Some(*o),
                "seed {seed}: {unit}@seq {seq} lost"
            );
            let e = e.unwrap();
            assert!(
                at.read_object(&e).is_ok(),
                "seed {seed}: {unit}@{seq}'s object"
            );
        }
        let report = s.verify(VerifyOptions::default()).unwrap();
        assert!(report.is_ok(), "seed {seed} node {i}: {report:?}");
        let replay = oncelake::replay(&snap).unwrap();
        assert!(
            replay.problems.is_empty(),
            "seed {seed} node {i}: {replay:?}"
        );
        check_tokens(seed, &snap);
    }
}

/// I6 on the log: a fenced commit carries its unit's newest granted token.
fn check_tokens(seed: u64, snap: &oncelake::Snapshot) {
    let mut newest: HashMap<String, u64> = HashMap::new();
    for rec in snap.changes_since(0).unwrap() {
        match rec.unwrap().body {
            RecordBody::ClaimGranted(c) => {
                newest.insert(c.unit, c.token);
            }
            RecordBody::Commit { entries } => {
                for e in entries {
                    if let Some(t) = e.token {
                        assert_eq!(newest.get(&e.unit), Some(&t), "seed {seed}: stale token");
                    }
                }
            }
            _ => {}
        }
    }
}

#[test]
fn seeded_nodes_with_faults_crashes_and_skewed_clocks_keep_i1_to_i11() {
    let mut steps = 0;
    let seeds = seeds();
    for &seed in &seeds {
        steps += simulate(seed);
    }
    eprintln!("lake_sim: {} seeds, {steps} steps", seeds.len());
}
