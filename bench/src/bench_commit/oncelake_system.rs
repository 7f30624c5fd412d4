//! oncelake under the workload: the preloaded store, commits through the group-commit queue, and
//! the samplers of the backlog and of reads beside the writers.

use super::keys::{preload_chunks, unit_key, KeySource, Next, PRELOAD_VERSION};
use super::measurement::{drive, finish, Measurement, Reads, Timings};
use super::{Plan, System, Target, Workload};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Creates an oncelake store at `path` holding `w`'s preload, and closes it (what the P1 run and
/// `oncelake-bench commit --via-server`'s server start from).
pub fn preload_oncelake_store(path: &Path, w: Workload) -> Result<(), String> {
    let e = |e: oncelake::Error| e.to_string();
    let store = crate::bench_fixtures::open_bench_store(path).map_err(e)?;
    let staged = store.stage_bytes(b"bench preload").map_err(e)?;
    for chunk in preload_chunks(w) {
        let mut batch = oncelake::Batch::new();
        for k in chunk {
            batch = batch.put(k, PRELOAD_VERSION, &staged);
        }
        let r = store.commit(batch).map_err(e)?;
        if !r.applied() {
            return Err("preload: a batch was not applied".into());
        }
    }
    store.flush().map_err(e)
}

pub(super) fn oncelake_preload(dir: &Path, w: Workload) -> Result<Target, String> {
    let path = dir.join("lake");
    let e = |e: oncelake::Error| e.to_string();
    preload_oncelake_store(&path, w)?;
    // Reopen with the default (durable) options: the timed part measures them.
    let mut options = oncelake::Options::default();
    w.tuning.set(&mut options)?;
    let store = oncelake::Store::open_with(&path, options).map_err(e)?;
    let staged = store.stage_bytes(b"bench output").map_err(e)?;
    Ok(Target::Oncelake { store, staged })
}

pub(super) fn oncelake_commits(
    store: &oncelake::Store,
    staged: &oncelake::Staged,
    keys: &KeySource,
    plan: Plan,
) -> Result<Measurement, String> {
    let before = store.metrics();
    let sampler = BacklogSampler::start(store);
    let reader = plan
        .read_probe
        .then(|| ReadProbe::start(store, keys.workload()));
    let batch_of = |units: &[Next]| {
        units.iter().fold(oncelake::Batch::new(), |b, u| {
            b.put(u.key.as_str(), u.version, staged)
        })
    };
    let timings = if plan.in_flight > 0 {
        drive_in_flight(store, keys, plan, &batch_of)?
    } else {
        drive(
            plan,
            |t| Ok(keys.writer(t, plan.threads)),
            |w| {
                let units = keys.next_units(w, plan.units_per_commit.max(1));
                let report = store.commit(batch_of(&units)).map_err(|e| e.to_string())?;
                all_committed(&units, &report)
            },
        )?
    };
    let samples = sampler.stop();
    let reads = reader.map(ReadProbe::stop).transpose()?;
    let drain = std::time::Instant::now();
    store.wait_applied().map_err(|e| e.to_string())?;
    let drained_in = drain.elapsed();
    let after = store.metrics();
    let mut m = finish(System::Oncelake, plan, timings);
    m.applied_elapsed = m.elapsed + drained_in;
    m.max_backlog = samples.iter().copied().max().or(Some(0));
    m.applier_thread = Some(store.has_applier_thread());
    m.reads = reads.map(|r| Reads::of(&r));
    m.backlog_by_tenth = (1..=10)
        .filter_map(|k| {
            samples
                .get((samples.len() * k / 10).saturating_sub(1))
                .copied()
        })
        .collect();
    let groups = after.groups - before.groups;
    let units = after.group_units.sum - before.group_units.sum;
    m.groups = Some(groups);
    m.mean_group = units as f64 / groups.max(1) as f64;
    Ok(m)
}

fn all_committed(units: &[Next], report: &oncelake::CommitReport) -> Result<(), String> {
    for (u, r) in units.iter().zip(&report.units) {
        if !matches!(r.outcome, oncelake::Outcome::Committed { .. }) {
            return Err(format!(
                "{}@{} was not committed: {:?}",
                u.key, u.version, r.outcome
            ));
        }
    }
    Ok(())
}

/// [`drive`] through [`oncelake::Store::submit`]: each writer keeps `plan.in_flight` commits in
/// flight, waiting for its oldest before it submits another, and waits for all of them at the
/// end. Counts the acknowledged units.
fn drive_in_flight(
    store: &oncelake::Store,
    keys: &KeySource,
    plan: Plan,
    batch_of: &(dyn Fn(&[Next]) -> oncelake::Batch + Sync),
) -> Result<Timings, String> {
    let per_commit = plan.units_per_commit.max(1);
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    type InFlight = (Instant, Vec<Next>, oncelake::CommitHandle);
    let answer = |(t0, units, h): InFlight| -> Result<u32, String> {
        let report = h.wait().map_err(|e| e.to_string())?;
        all_committed(&units, &report)?;
        Ok(t0.elapsed().as_micros().min(u32::MAX as u128) as u32)
    };
    let results: Vec<Result<Vec<u32>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..plan.threads.max(1))
            .map(|t| {
                let (next, answer) = (&next, &answer);
                s.spawn(move || {
                    let mut w = keys.writer(t, plan.threads);
                    let mut flight = std::collections::VecDeque::new();
                    let mut lat = Vec::new();
                    loop {
                        let i = next.fetch_add(per_commit, Ordering::Relaxed);
                        if i >= plan.max_units || start.elapsed() >= plan.max_time {
                            break;
                        }
                        let units = keys.next_units(&mut w, per_commit);
                        let h = store.submit(batch_of(&units)).map_err(|e| e.to_string())?;
                        flight.push_back((Instant::now(), units, h));
                        if flight.len() >= plan.in_flight {
                            lat.push(answer(flight.pop_front().expect("just pushed"))?);
                        }
                    }
                    for f in flight {
                        lat.push(answer(f)?);
                    }
                    Ok(lat)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into())))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut latencies_us = Vec::new();
    for r in results {
        latencies_us.extend(r?);
    }
    Ok(Timings {
        units: (latencies_us.len() * per_commit) as u64,
        elapsed,
        latencies_us,
    })
}

/// Samples a store's backlog (units acknowledged, not yet applied) every 20 ms on its own thread.
struct BacklogSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u64>>,
}

impl BacklogSampler {
    pub(super) fn start(store: &oncelake::Store) -> BacklogSampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (store, flag) = (store.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                samples.push(store.backlog().units as u64);
                std::thread::sleep(Duration::from_millis(20));
            }
            samples
        });
        BacklogSampler { stop, thread }
    }

    fn stop(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Times one `Store::get` of a preloaded unit every 20 ms on its own thread ([`Plan::read_probe`]).
struct ReadProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Result<Vec<u64>, String>>,
}

impl ReadProbe {
    pub(super) fn start(store: &oncelake::Store, w: Workload) -> ReadProbe {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (store, flag) = (store.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut latencies = Vec::new();
            let mut i: u64 = 0;
            while !flag.load(Ordering::Relaxed) {
                // Spread over the preloaded units (a stride prime to any preload); with none
                // preloaded the read finds nothing, and still waits for the backlog.
                i = i.wrapping_add(7_919);
                let key = unit_key(w.keys, i % w.preload.max(1));
                let t0 = std::time::Instant::now();
                store.get(&key).map_err(|e| format!("read probe: {e}"))?;
                latencies.push(t0.elapsed().as_micros() as u64);
                std::thread::sleep(Duration::from_millis(20));
            }
            latencies.sort_unstable();
            Ok(latencies)
        });
        ReadProbe { stop, thread }
    }

    fn stop(self) -> Result<Vec<u64>, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| "the read probe panicked".to_string())?
    }
}
