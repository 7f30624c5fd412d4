//! Fault injection for a lake's object store (tests and the simulation; SPEC I11): an
//! [`ObjectStore`] wrapper that fails requests before they reach the store, or after they took
//! effect (a lost response), answers a create that did not happen with `AlreadyExists` (S3's
//! 409 mapping), answers one that did with `AlreadyExists` (a 5xx retried into 412), and adds
//! latency. Installed on an in-memory lake by name ([`LakeFaults::install`]); every node of the
//! process that connects to that `memory://NAME` afterwards goes through it.
//!
//! Decisions come from one seeded generator, so a single-threaded run replays from its seed.

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// One fault, scripted with [`LakeFaults::script`] for the next PUT under a path prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Without `testing` only the engine's own uses are compiled: the crash faults are scripted by tests.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub enum LakeFault {
    /// The request fails before it reaches the store (nothing written).
    Before,
    /// The request takes effect, and its response is lost (an error is returned).
    After,
    /// A create that did not take effect is answered `AlreadyExists` (S3 maps any 409 to it).
    Conflict,
    /// A create that took effect is answered `AlreadyExists` (a 5xx, retried, answered 412).
    AfterAlreadyExists,
    /// The node crashes before the request reaches the store: it is answered with an error the
    /// lake client does not retry (`PermissionDenied`), so the node's operation fails there,
    /// as if its process had died, and the store is failed until reopened.
    Crash,
    /// The same, after the request took effect (a crash between a segment's create and its
    /// apply, say).
    CrashAfter,
}

/// Random faults: each request draws one with these odds (per mille).
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultRates {
    /// [`LakeFault::Before`], on any request.
    pub before: u32,
    /// [`LakeFault::After`], on any PUT.
    pub after: u32,
    /// [`LakeFault::Conflict`], on a create.
    pub conflict: u32,
    /// [`LakeFault::AfterAlreadyExists`], on a create.
    pub after_already_exists: u32,
    /// Latency added to each request: up to this many milliseconds.
    pub max_latency_ms: u64,
}

/// What was injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Requests failed before the store.
    pub before: u64,
    /// PUTs that took effect and whose response was lost (either form).
    pub lost_responses: u64,
    /// Creates answered `AlreadyExists` without taking effect.
    pub conflicts: u64,
    /// Crashes injected ([`LakeFault::Crash`], [`LakeFault::CrashAfter`]).
    pub crashes: u64,
}

/// The fault plan of one in-memory lake.
#[derive(Debug)]
pub struct LakeFaults {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    rng: u64,
    rates: FaultRates,
    scripted: Vec<(String, LakeFault)>,
    counts: FaultCounts,
    list_lag: usize,
    holds: Vec<(String, Arc<Hold>)>,
}

/// A PUT held before it reaches the store, until released ([`LakeFaults::hold_next_put`]): a
/// node paused inside a group (between its uploads and its segment's create, say).
#[derive(Debug, Default)]
pub struct Hold {
    state: std::sync::Mutex<(bool, bool)>,
    changed: std::sync::Condvar,
}

// Held PUTs are released by tests (`testing`); the engine only holds them.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
impl Hold {
    /// Waits until a PUT is held here.
    pub fn wait_held(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while !s.0 {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Lets the held PUT (or the next one to arrive) go on.
    pub fn release(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.changed.notify_all();
    }

    fn hold(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = true;
        self.changed.notify_all();
        while !s.1 {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

fn plans() -> &'static Mutex<HashMap<String, Arc<LakeFaults>>> {
    static PLANS: OnceLock<Mutex<HashMap<String, Arc<LakeFaults>>>> = OnceLock::new();
    PLANS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The key of a plan installed on a whole URL ([`LakeFaults::install_on`]).
fn url_key(url: &str) -> String {
    format!("url {url}")
}

/// `store` behind the plan installed on `url` with [`LakeFaults::install_on`], if any.
pub(crate) fn wrap_for_url(url: &str, store: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
    match plan_for(&url_key(url)) {
        Some(plan) => Arc::new(Faulty { inner: store, plan }),
        None => store,
    }
}

/// The plan installed for `memory://name`, if any (read when a node connects).
pub(crate) fn plan_for(name: &str) -> Option<Arc<LakeFaults>> {
    plans().lock().get(name).cloned()
}

// Installed and steered by tests and the simulation only (`testing`).
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
impl LakeFaults {
    /// Installs a plan on the in-memory lake `memory://name`, seeded with `seed`, with no faults
    /// yet; nodes that connect to it from now on go through it.
    pub fn install(name: &str, seed: u64) -> Arc<LakeFaults> {
        let plan = Arc::new(LakeFaults {
            state: Mutex::new(State {
                rng: seed ^ 0x9E37_79B9_7F4A_7C15,
                rates: FaultRates::default(),
                scripted: Vec::new(),
                counts: FaultCounts::default(),
                list_lag: 0,
                holds: Vec::new(),
            }),
        });
        plans().lock().insert(name.to_string(), plan.clone());
        plan
    }

    /// Installs a plan on the lake at `url`, whatever its form (`s3://`, `file://`, `memory://`):
    /// nodes of this process that connect to that URL from now on go through it (the P10
    /// benchmark's lost responses on SeaweedFS).
    pub fn install_on(url: &str, seed: u64) -> Arc<LakeFaults> {
        Self::install(&url_key(url), seed)
    }

    /// Sets the odds of random faults.
    pub fn set_rates(&self, rates: FaultRates) {
        self.state.lock().rates = rates;
    }

    /// Injects `fault` into the next PUT whose path starts with `prefix` (`"log/"`, `"objects/"`).
    pub fn script(&self, prefix: &str, fault: LakeFault) {
        self.state.lock().scripted.push((prefix.to_string(), fault));
    }

    /// Listing lag: every LIST leaves out the `newest` objects (by name) it would return, as
    /// a listing that has not caught up with the newest writes does.
    pub fn set_list_lag(&self, newest: usize) {
        self.state.lock().list_lag = newest;
    }

    /// Forgets the scripted faults no PUT has drawn yet.
    pub fn clear_scripts(&self) {
        self.state.lock().scripted.clear();
    }

    /// Holds the next PUT whose path starts with `prefix` before it reaches the store, until
    /// the returned [`Hold`] is released. The thread that makes the PUT blocks.
    pub fn hold_next_put(&self, prefix: &str) -> Arc<Hold> {
        let hold = Arc::new(Hold::default());
        self.state
            .lock()
            .holds
            .push((prefix.to_string(), hold.clone()));
        hold
    }

    /// What was injected so far.
    pub fn counts(&self) -> FaultCounts {
        self.state.lock().counts
    }

    /// The fault for a PUT of `path` (`create`: put-if-absent), and the latency to add.
    fn draw_put(&self, path: &str, create: bool) -> (Option<LakeFault>, u64) {
        let mut s = self.state.lock();
        let latency = s.latency();
        if let Some(i) = s.scripted.iter().position(|(p, _)| path.starts_with(p)) {
            return (Some(s.scripted.remove(i).1), latency);
        }
        let r = s.next() % 1000;
        let FaultRates {
            before,
            after,
            conflict,
            after_already_exists,
            ..
        } = s.rates;
        let create_only = |f| if create { Some(f) } else { None };
        let fault = if r < u64::from(before) {
            Some(LakeFault::Before)
        } else if r < u64::from(before + after) {
            Some(LakeFault::After)
        } else if r < u64::from(before + after + conflict) {
            create_only(LakeFault::Conflict)
        } else if r < u64::from(before + after + conflict + after_already_exists) {
            create_only(LakeFault::AfterAlreadyExists)
        } else {
            None
        };
        (fault, latency)
    }

    /// Whether a read fails, and the latency to add.
    fn draw_read(&self) -> (bool, u64) {
        let mut s = self.state.lock();
        let latency = s.latency();
        let fail = s.next() % 1000 < u64::from(s.rates.before);
        if fail {
            s.counts.before += 1;
        }
        (fail, latency)
    }
}

impl State {
    /// SplitMix64.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn latency(&mut self) -> u64 {
        match self.rates.max_latency_ms {
            0 => 0,
            m => self.next() % (m + 1),
        }
    }
}

/// An object store with a fault plan in front of it.
#[derive(Debug)]
pub(crate) struct Faulty {
    pub(crate) inner: Arc<dyn ObjectStore>,
    pub(crate) plan: Arc<LakeFaults>,
}

impl std::fmt::Display for Faulty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "Faulty",
        source: format!("injected fault: {what}").into(),
    }
}

fn crashed(path: &Path) -> object_store::Error {
    object_store::Error::PermissionDenied {
        path: path.to_string(),
        source: "injected fault: the node crashed here".into(),
    }
}

fn exists(path: &Path) -> object_store::Error {
    object_store::Error::AlreadyExists {
        path: path.to_string(),
        source: "injected fault: answered as 409/412".into(),
    }
}

async fn delay(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

#[async_trait]
impl ObjectStore for Faulty {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let create = matches!(opts.mode, PutMode::Create);
        let held = {
            let mut s = self.plan.state.lock();
            let i = s
                .holds
                .iter()
                .position(|(p, _)| location.as_ref().starts_with(p.as_str()));
            i.map(|i| s.holds.remove(i).1)
        };
        if let Some(hold) = held {
            hold.hold();
        }
        let (fault, latency) = self.plan.draw_put(location.as_ref(), create);
        delay(latency).await;
        let count = |f: fn(&mut FaultCounts)| f(&mut self.plan.state.lock().counts);
        match fault {
            Some(LakeFault::Before) => {
                count(|c| c.before += 1);
                Err(injected("the request failed before the store"))
            }
            Some(LakeFault::Conflict) => {
                count(|c| c.conflicts += 1);
                Err(exists(location))
            }
            Some(LakeFault::Crash) => {
                count(|c| c.crashes += 1);
                Err(crashed(location))
            }
            Some(LakeFault::CrashAfter) => {
                self.inner.put_opts(location, payload, opts).await?;
                count(|c| c.crashes += 1);
                Err(crashed(location))
            }
            Some(f @ (LakeFault::After | LakeFault::AfterAlreadyExists)) => {
                let r = self.inner.put_opts(location, payload, opts).await;
                if r.is_ok() {
                    count(|c| c.lost_responses += 1);
                }
                r?;
                Err(match f {
                    LakeFault::After => injected("the response was lost"),
                    _ => exists(location),
                })
            }
            None => self.inner.put_opts(location, payload, opts).await,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let (fail, latency) = self.plan.draw_read();
        delay(latency).await;
        if fail {
            return Err(injected("the read failed"));
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        use futures_util::StreamExt;
        let lag = self.plan.state.lock().list_lag;
        let listed = self.inner.list(prefix);
        if lag == 0 {
            return listed;
        }
        futures_util::stream::once(async move {
            let (mut found, errors): (Vec<_>, Vec<_>) = listed
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .partition(Result::is_ok);
            found.sort_by(|a, b| match (a, b) {
                (Ok(a), Ok(b)) => a.location.cmp(&b.location),
                _ => std::cmp::Ordering::Equal,
            });
            found.truncate(found.len().saturating_sub(lag));
            futures_util::stream::iter(found.into_iter().chain(errors))
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
