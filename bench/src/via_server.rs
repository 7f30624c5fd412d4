//! The workload of `oncelake-bench commit --via-server` (SPEC P7): durable one-unit commits from
//! N client connections through a real `oncelake serve` process, objects pre-staged (one per
//! client, kept), measured like the in-process P1 workload it is printed beside.

use crate::bench_commit::KeySource;
use crate::writers::{self, Run};
use oncelake_server::wire::CommitItemW;
use oncelake_server::Client;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What one run through the server measured.
#[derive(Clone, Debug)]
pub struct ServerRun {
    /// Client connections (one thread each).
    pub clients: usize,
    /// Units committed.
    pub units: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Median commit latency seen by a client, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// Commit groups the server's store wrote during the run.
    pub groups: u64,
}

impl ServerRun {
    /// Units per second.
    pub fn units_per_sec(&self) -> f64 {
        self.units as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn unit_key(i: usize) -> String {
    format!("bench/orders/customer={:06}/date=2026-11-29", i)
}

/// A client thread's source of commits: the next unit and source version to commit.
pub type KeyGen<'a> = Box<dyn FnMut() -> (String, u64) + Send + 'a>;

/// Client `thread` of `threads`'s commits drawn from `source`: the same units and versions that
/// thread commits in-process (the P1 workload through the server).
pub fn keys_of(source: &KeySource, thread: usize, threads: usize) -> KeyGen<'_> {
    let mut writer = source.writer(thread, threads);
    Box::new(move || {
        let next = source.next(&mut writer);
        (next.key, next.version)
    })
}

/// What a run through the server commits, and on what store.
pub struct Workload<'a> {
    /// Fills the fresh store before the server starts (in-process; e.g. the P1 preload): it
    /// must leave a closed store at the path it is given.
    pub prepare: &'a (dyn Fn(&Path) -> Result<(), String> + Sync),
    /// For client `t` of `n`, its commits' keys and versions.
    pub keys: &'a (dyn Fn(usize, usize) -> KeyGen<'a> + Sync),
}

/// Starts `exe serve` on a fresh store under `scratch`, commits up to `max_units` units (or for
/// `max_time`) from `clients` connections, stops the server and removes the store. New units
/// with sequential keys into an empty store; see [`commits_via_server_with`] for others.
pub fn commits_via_server(
    exe: &Path,
    scratch: &Path,
    clients: usize,
    max_units: usize,
    max_time: Duration,
) -> Result<ServerRun, String> {
    let next = AtomicUsize::new(0);
    let next = &next;
    let keys = move |_, _| -> KeyGen<'_> {
        Box::new(move || (unit_key(next.fetch_add(1, Ordering::Relaxed)), 1))
    };
    let workload = Workload {
        prepare: &|p: &Path| {
            drop(oncelake::Store::open(p).map_err(|e| e.to_string())?);
            Ok(())
        },
        keys: &keys,
    };
    commits_via_server_with(exe, scratch, clients, max_units, max_time, &workload)
}

/// [`commits_via_server`] on `workload`'s store with its keys.
pub fn commits_via_server_with(
    exe: &Path,
    scratch: &Path,
    clients: usize,
    max_units: usize,
    max_time: Duration,
    workload: &Workload<'_>,
) -> Result<ServerRun, String> {
    let clients = clients.max(1);
    let dir = scratch.join(format!("serve-{clients}c-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = dir.join("lake");
    let run = (workload.prepare)(&store).and_then(|()| {
        crate::serve_load::start_server(exe, &store, &[]).and_then(|mut server| {
            let run = drive(&store, clients, max_units, max_time, workload.keys);
            crate::serve_load::stop_server(&mut server);
            run
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
    run
}

fn drive<'a>(
    store: &Path,
    clients: usize,
    max_units: usize,
    max_time: Duration,
    keys: &(dyn Fn(usize, usize) -> KeyGen<'a> + Sync),
) -> Result<ServerRun, String> {
    let client = Client::for_store(store).map_err(|e| e.to_string())?;
    let groups_of = |c: &Client| -> Result<u64, String> {
        Ok(c.stats().map_err(|e| e.to_string())?.counters["groups"])
    };
    let groups_before = groups_of(&client)?;
    let run = Run {
        threads: clients,
        step: 1,
        limit: max_units as u64,
        max_time,
    };
    // Each client's state: its staged object (kept, so every commit names it) and its keys.
    let setup = |t: usize| -> Result<(u64, KeyGen<'a>), String> {
        let (staged, _) = client
            .stage_reader(format!("bench output of client {t}").as_bytes())
            .map_err(|e| e.to_string())?;
        Ok((staged, keys(t, clients)))
    };
    let (mut lat, elapsed) = writers::drive(&run, setup, |(staged, keys)| {
        let (unit, source_version) = keys();
        let item = CommitItemW {
            unit: unit.clone(),
            source_version,
            staged: *staged,
            token: None,
            correct: false,
        };
        let r = client
            .commit_with(vec![item], false, true)
            .map_err(|e| e.to_string())?;
        if !r.applied() || r.seq.is_none() {
            return Err(format!(
                "{unit}@{source_version} was not committed: {:?}",
                r.units
            ));
        }
        Ok(())
    })?;
    lat.sort_unstable();
    let q = |q: f64| -> u64 {
        if lat.is_empty() {
            return 0;
        }
        let i = ((lat.len() as f64 * q).ceil() as usize).clamp(1, lat.len());
        u64::from(lat[i - 1])
    };
    Ok(ServerRun {
        clients,
        units: lat.len() as u64,
        elapsed,
        p50_us: q(0.5),
        p99_us: q(0.99),
        groups: groups_of(&client)?.saturating_sub(groups_before),
    })
}
