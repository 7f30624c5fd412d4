//! What the object store itself allows, with the lake's protocol switched off: the floor the
//! P10 bench compares its nodes with. Each acknowledged unit needs at least one object PUT, and
//! the log at most one segment create per slot, so the store's plain PUT rate at the nodes'
//! concurrency bounds units/s, and the rate at which racing clients can create consecutive
//! put-if-absent slots bounds segments/s. Both go through the same client a node uses (the URL's
//! connection and a two-worker runtime per client), under a prefix of their own.

use super::{url::LakeUrl, Lake};
use crate::error::{Error, Result};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What [`lake_floor`] measures: `clients` clients (as nodes), each with `in_flight` PUTs in
/// flight, for `duration` per measurement.
#[derive(Debug, Clone, Copy)]
pub struct FloorSpec {
    /// Clients, each with its own connection and runtime (the nodes of the run compared).
    pub clients: usize,
    /// Plain PUTs each client keeps in flight (a node's committing threads).
    pub in_flight: usize,
    /// Bytes of each plain PUT (about a unit's object).
    pub object_bytes: usize,
    /// Bytes of each put-if-absent slot (about a one-group segment).
    pub slot_bytes: usize,
    /// How long each of the two measurements runs.
    pub duration: Duration,
}

/// What [`lake_floor`] measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct FloorFigures {
    /// Plain PUTs answered success.
    pub puts: u64,
    /// Their rate: the most units/s the store allows at this concurrency if each unit needs one
    /// object PUT and nothing else.
    pub puts_per_sec: f64,
    /// Median and 99th percentile of a plain PUT, milliseconds.
    pub put_p50_ms: f64,
    /// See `put_p50_ms`.
    pub put_p99_ms: f64,
    /// Consecutive put-if-absent slots created by the racing clients (each slot once).
    pub slots: u64,
    /// Their rate: the most segments/s the store can serialise.
    pub slots_per_sec: f64,
    /// Creates that found the slot taken (another client won it).
    pub slots_lost: u64,
    /// Median put-if-absent create, milliseconds.
    pub create_p50_ms: f64,
}

/// Measures the object store of lake `url` with the lake's protocol switched off: plain PUTs of
/// small objects at `spec.clients × spec.in_flight` in flight, then `spec.clients` clients
/// racing to create slots `1, 2, 3, ...` with put-if-absent, each moving to the next slot when
/// it wins or finds it taken (no log, no replica, no read-back). Writes under `floor/` of the
/// lake, which no node reads; use a lake of its own.
pub fn lake_floor(url: &str, spec: FloorSpec) -> Result<FloorFigures> {
    let clients = (0..spec.clients.max(1))
        .map(|_| client(url))
        .collect::<Result<Vec<_>>>()?;
    let mut f = FloorFigures::default();
    let (puts, mut lat) = run_clients(&clients, spec.duration, |store, i, stop| {
        plain_puts(store, i, spec, stop)
    })?;
    f.puts = puts;
    f.puts_per_sec = puts as f64 / spec.duration.as_secs_f64().max(1e-9);
    (f.put_p50_ms, f.put_p99_ms) = percentiles(&mut lat);
    let next = AtomicU64::new(1);
    let lost = AtomicU64::new(0);
    let (slots, mut lat) = run_clients(&clients, spec.duration, |store, _, stop| {
        race_slots(store, spec.slot_bytes, &next, &lost, stop)
    })?;
    f.slots = slots;
    f.slots_per_sec = f.slots as f64 / spec.duration.as_secs_f64().max(1e-9);
    f.slots_lost = lost.load(Relaxed);
    f.create_p50_ms = percentiles(&mut lat).0;
    Ok(f)
}

struct Client {
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
}

fn client(url: &str) -> Result<Client> {
    let bad = |detail: String| Error::Lake {
        url: url.to_string(),
        what: "connecting to measure the floor".into(),
        detail,
        todo: "check the URL and the AWS_* environment variables",
    };
    let store = LakeUrl::parse(url).and_then(|u| u.connect()).map_err(bad)?;
    Ok(Client {
        store,
        rt: Lake::client_runtime()?,
    })
}

type Latencies = Vec<Duration>;

/// Runs `work` on every client at once for `duration`: (successes, latencies) over all.
fn run_clients<W, Fut>(clients: &[Client], duration: Duration, work: W) -> Result<(u64, Latencies)>
where
    W: Fn(Arc<dyn ObjectStore>, usize, Arc<AtomicBool>) -> Fut + Sync,
    Fut: std::future::Future<Output = std::result::Result<(u64, Latencies), String>>,
{
    let stop = Arc::new(AtomicBool::new(false));
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (work, stop) = (&work, stop.clone());
                s.spawn(move || c.rt.block_on(work(c.store.clone(), i, stop)))
            })
            .collect();
        std::thread::sleep(duration);
        stop.store(true, Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<Vec<_>>()
    });
    total(results).map_err(|detail| Error::Lake {
        url: String::new(),
        what: "measuring the object store's floor".into(),
        detail,
        todo: "check the object store is reachable",
    })
}

/// The successes and latencies of several workers, or the first one's error.
fn total(
    results: Vec<std::result::Result<(u64, Latencies), String>>,
) -> std::result::Result<(u64, Latencies), String> {
    let (mut n, mut lat) = (0, Vec::new());
    for r in results {
        let (k, l) = r?;
        n += k;
        lat.extend(l);
    }
    Ok((n, lat))
}

/// Plain PUTs of distinct small objects, `spec.in_flight` at a time, until `stop`.
async fn plain_puts(
    store: Arc<dyn ObjectStore>,
    client: usize,
    spec: FloorSpec,
    stop: Arc<AtomicBool>,
) -> std::result::Result<(u64, Latencies), String> {
    let body = Bytes::from(vec![b'x'; spec.object_bytes]);
    let results = futures_util::stream::iter(0..spec.in_flight.max(1))
        .map(|lane| {
            let (store, body, stop) = (store.clone(), body.clone(), stop.clone());
            async move {
                let (mut n, mut lat) = (0u64, Vec::new());
                while !stop.load(Relaxed) {
                    let path = ObjectPath::from(format!("floor/puts/{client}/{lane}/{n}"));
                    let t = Instant::now();
                    store
                        .put_opts(&path, PutPayload::from(body.clone()), PutOptions::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    lat.push(t.elapsed());
                    n += 1;
                }
                Ok::<_, String>((n, lat))
            }
        })
        .buffer_unordered(spec.in_flight.max(1))
        .collect::<Vec<_>>()
        .await;
    total(results)
}

/// Races for consecutive put-if-absent slots until `stop`: create `next`; won or taken, move on.
async fn race_slots(
    store: Arc<dyn ObjectStore>,
    bytes: usize,
    next: &AtomicU64,
    lost: &AtomicU64,
    stop: Arc<AtomicBool>,
) -> std::result::Result<(u64, Latencies), String> {
    let body = Bytes::from(vec![b's'; bytes]);
    let (mut won, mut lat) = (0u64, Vec::new());
    while !stop.load(Relaxed) {
        let slot = next.load(Relaxed);
        let path = ObjectPath::from(format!("floor/log/{slot:020}"));
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let t = Instant::now();
        match store
            .put_opts(&path, PutPayload::from(body.clone()), opts)
            .await
        {
            Ok(_) => {
                lat.push(t.elapsed());
                won += 1;
            }
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => {
                lost.fetch_add(1, Relaxed);
            }
            Err(e) => return Err(e.to_string()),
        }
        // Whoever created it or found it taken, the slot is filled: the next one is raced for.
        let _ = next.compare_exchange(slot, slot + 1, Relaxed, Relaxed);
    }
    Ok((won, lat))
}

/// (p50, p99) in milliseconds.
fn percentiles(lat: &mut [Duration]) -> (f64, f64) {
    lat.sort_unstable();
    let at = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    (at(0.50), at(0.99))
}
