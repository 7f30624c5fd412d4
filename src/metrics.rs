//! Counters and histograms of what the engine did (SPEC R16). Cheap relaxed atomics on the hot
//! path; a consistent-enough [`MetricsSnapshot`] for the API, `oncelake stats` and Prometheus.
//!
//! # Counters that never lie
//!
//! Every counter has a [`Scope`]. The [`Scope::Store`] counters are what the store itself
//! decided: they are counted by the commit leader per group and added to a persisted row in the
//! group's own rows (`schema::meta::add_to_counters`, written with the group's redo), so they are exactly as durable as the
//! commits they count, survive restarts and crashes, and a freshly opened store reports them
//! from that row. A group that changes no row (duplicates and refusals only) writes no record:
//! its counts go with the next group that does, or with the close, so only a crash can lose
//! them, and only such counts (docs/commit.md, "A group that changes nothing"). The [`Scope::Process`] counters (staging, computations, GC, histograms...) are
//! only known to the running process and start at zero in each one; every output labels them so.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Power-of-two buckets: bucket i counts values in [2^(i-1), 2^i), bucket 0 counts 0.
const BUCKETS: usize = 40;

#[derive(Debug)]
pub(crate) struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub(crate) fn record(&self, v: u64) {
        let i = (64 - v.leading_zeros() as usize).min(BUCKETS - 1);
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum.fetch_add(v, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    (
                        if i == 0 { 0 } else { 1u64 << (i - 1) } * 2,
                        b.load(Relaxed),
                    )
                })
                .map(|(le, n)| (le.max(1) - 1, n))
                .collect(),
            sum: self.sum.load(Relaxed),
            count: self.count.load(Relaxed),
        }
    }
}

/// A histogram's state: per bucket its inclusive upper bound and count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HistogramSnapshot {
    /// (inclusive upper bound, count) per bucket, ascending.
    pub buckets: Vec<(u64, u64)>,
    /// Sum of all recorded values.
    pub sum: u64,
    /// Number of recorded values.
    pub count: u64,
}

impl HistogramSnapshot {
    /// An upper bound of the q-quantile (0..=1), from the buckets.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let want = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for &(le, n) in &self.buckets {
            seen += n;
            if seen >= want {
                return le;
            }
        }
        self.buckets.last().map(|b| b.0).unwrap_or(0)
    }

    /// The mean, 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        #[derive(Debug, Default)]
        pub(crate) struct Counters { $(pub(crate) $name: AtomicU64,)* }

        /// A point-in-time copy of every counter and histogram.
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct MetricsSnapshot {
            $($(#[$doc])* pub $name: u64,)*
            /// Units per commit group (one redb transaction each).
            pub group_units: HistogramSnapshot,
            /// Commit latency in microseconds, from enqueue to outcome.
            pub commit_latency_us: HistogramSnapshot,
            /// The seq the [`Scope::Store`] counters count from: 0 for a store whose counters
            /// were persisted from its creation; for an older store, its seq when a build that
            /// persists counters first committed to it.
            pub counted_since_seq: u64,
        }

        impl MetricsSnapshot {
            /// Every counter as (snake_case name, value), in a stable order.
            pub fn counters(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }

            /// Sets the counter `name` (for a copy read from elsewhere, e.g. a server);
            /// `false` when there is no such counter.
            pub fn set_counter(&mut self, name: &str, v: u64) -> bool {
                match name {
                    $(stringify!($name) => { self.$name = v; true })*
                    _ => false,
                }
            }
        }

        impl Counters {
            /// Every counter by name.
            pub(crate) fn fields(&self) -> Vec<(&'static str, &AtomicU64)> {
                vec![$((stringify!($name), &self.$name),)*]
            }
        }

        impl Metrics {
            /// Copies the current values.
            pub fn snapshot(&self) -> MetricsSnapshot {
                MetricsSnapshot {
                    $($name: self.c.$name.load(Relaxed),)*
                    group_units: self.group_units.snapshot(),
                    commit_latency_us: self.commit_latency_us.snapshot(),
                    counted_since_seq: self.counted_since_seq.load(Relaxed),
                }
            }
        }
    };
}

counters! {
    /// Commits that wrote a log record.
    commits,
    /// Units made visible.
    units_committed,
    /// Incoming entries identical to a committed one (collapsed retries and overlaps).
    duplicates_collapsed,
    /// Same version, different bytes (nondeterminism).
    conflicts,
    /// Entries older than the committed version.
    stale_rejections,
    /// Entries (and pipeline failures) carrying a fencing token not valid for their unit.
    fenced_rejections,
    /// Entries (and pipeline failures) without a token on a unit whose lease is live.
    busy_rejections,
    /// All-or-nothing commits aborted because of a rejected unit.
    commits_aborted,
    /// Leases granted (new or taken over).
    claims_granted,
    /// Claims refused because another worker holds a live lease.
    claims_held,
    /// Expired leases taken over by another worker.
    claims_taken_over,
    /// Leases renewed.
    claims_renewed,
    /// Leases released.
    claims_released,
    /// Claims answered "already done".
    claims_already_done,
    /// Leases found expired when the unit was asked for.
    claims_expired,
    /// Work closures run by the run-once family (`run_once`, `run_optimistic`, their `_many`
    /// batch forms and `begin_run` handles; counted where they run, also when the work then
    /// fails or its thread dies).
    computations,
    /// Computations whose output ran to a commit but did not become the unit's entry: collapsed as
    /// a duplicate, or rejected because another worker's lease or commit won (wasted work).
    redundant_computations,
    /// Units the run-once family found already committed, so the work was not run.
    runs_already_done,
    /// Units the coordinated run-once forms found held by another worker (or running in another
    /// thread), so the work was not run.
    runs_busy,
    /// Bytes written to staging.
    bytes_staged,
    /// Objects staged.
    objects_staged,
    /// Orphaned objects and staging files removed by GC.
    orphans_collected,
    /// Bytes GC freed.
    bytes_collected,
    /// Redb transactions written by commit leaders.
    groups,
    /// Write groups that failed to reach the disk.
    sync_failures,
    /// Pipeline cells found ready and claimed for a run.
    pipeline_cells_ready,
    /// Pipeline cells completed (their output committed; duplicates not counted).
    pipeline_cells_completed,
    /// Pipeline cell failures recorded.
    pipeline_cells_failed,
    /// Pipeline cell runs that retry an earlier failure of the same cell.
    pipeline_cells_retried,
    /// Pipeline cell runs that redo an invalidated (stale) completion.
    pipeline_cells_invalidated,
    /// Pipeline cells cut off (SPEC R24): not re-run after a newer source version because the
    /// completion this process committed (or the source it recorded) left their inputs unchanged.
    pipeline_cells_cut_off,
}

/// The engine's metrics. Read them with [`crate::Store::metrics`].
#[derive(Debug, Default)]
pub struct Metrics {
    pub(crate) c: Counters,
    pub(crate) group_units: Histogram,
    pub(crate) commit_latency_us: Histogram,
    pub(crate) counted_since_seq: AtomicU64,
}

pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// Where a counter's value comes from (SPEC R16: counters only a running process can know are
/// labelled as such).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Decided by the store's commit leader and persisted in the same transaction as the
    /// commits it counts: the store's whole history (since [`MetricsSnapshot::counted_since_seq`]),
    /// whichever process reads it.
    Store,
    /// Known only to this process (staging, computations, GC, group sizes, latency): zero when a
    /// process opens the store.
    Process,
}

impl Scope {
    /// `store` or `process`.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Store => "store",
            Scope::Process => "process",
        }
    }
}

/// The counters the commit leader counts per group, persisted with the group.
const STORE_COUNTERS: &[&str] = &[
    "commits",
    "units_committed",
    "duplicates_collapsed",
    "conflicts",
    "stale_rejections",
    "fenced_rejections",
    "busy_rejections",
    "commits_aborted",
    "claims_granted",
    "claims_held",
    "claims_taken_over",
    "claims_renewed",
    "claims_released",
    "claims_already_done",
    "claims_expired",
    "groups",
];

/// The persisted row's entry holding the seq the store-scope counting began at (0 for a store
/// created by a build that persists counters; later for an older store).
pub(crate) const SINCE_SEQ: &str = "_since_seq";

/// The scope of the counter `name`.
pub fn scope_of(name: &str) -> Scope {
    if STORE_COUNTERS.contains(&name) {
        Scope::Store
    } else {
        Scope::Process
    }
}

impl Counters {
    /// Adds every counter of `delta` (a group's counts) to these.
    pub(crate) fn absorb(&self, delta: &Counters) {
        for ((_, mine), (_, d)) in self.fields().into_iter().zip(delta.fields()) {
            add(mine, d.load(Relaxed));
        }
    }

    /// The store-scope counters of `self` (a group's counts) that are not zero.
    pub(crate) fn store_deltas(&self) -> Vec<(&'static str, u64)> {
        self.fields()
            .into_iter()
            .filter(|(n, v)| scope_of(n) == Scope::Store && v.load(Relaxed) > 0)
            .map(|(n, v)| (n, v.load(Relaxed)))
            .collect()
    }
}

impl Metrics {
    /// Metrics of a store just opened: the persisted store-scope counters (name, value), the
    /// process-scope ones at zero.
    pub(crate) fn from_persisted(persisted: &[(String, u64)]) -> Metrics {
        let m = Metrics::default();
        m.set_persisted(persisted);
        m
    }

    /// Sets the store-scope counters to the persisted `rows`: a lake node that applied other
    /// nodes' segments holds their counts in its replica, which a running process must report
    /// as a fresh one would (SPEC R16, R23).
    pub(crate) fn set_persisted(&self, persisted: &[(String, u64)]) {
        for (name, v) in persisted {
            if name == SINCE_SEQ {
                self.counted_since_seq.store(*v, Relaxed);
            }
            if scope_of(name) != Scope::Store {
                continue;
            }
            if let Some((_, c)) = self.c.fields().into_iter().find(|(n, _)| n == name) {
                c.store(*v, Relaxed);
            }
        }
    }
}

/// Encodes the persisted counters: per counter a name length (u8), the name, the value (u64 LE).
pub(crate) fn encode_counters(counters: &[(String, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(counters.len() * 32);
    for (name, v) in counters {
        let n = &name.as_bytes()[..name.len().min(255)];
        out.push(n.len() as u8);
        out.extend_from_slice(n);
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Decodes [`encode_counters`]; `None` when the bytes are not such a list.
pub(crate) fn decode_counters(mut bytes: &[u8]) -> Option<Vec<(String, u64)>> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = bytes.split_first() {
        let len = len as usize;
        if rest.len() < len + 8 {
            return None;
        }
        let name = std::str::from_utf8(&rest[..len]).ok()?.to_string();
        let v = u64::from_le_bytes(rest[len..len + 8].try_into().ok()?);
        out.push((name, v));
        bytes = &rest[len + 8..];
    }
    Some(out)
}

impl MetricsSnapshot {
    /// The Prometheus text exposition format (version 0.0.4).
    pub fn to_prometheus(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for (name, v) in self.counters() {
            let scope = match scope_of(name) {
                Scope::Store => "(persisted in the store: its whole history)",
                Scope::Process => "(this process only: zero when a process opens the store)",
            };
            let _ = writeln!(
                out,
                "# HELP oncelake_{name}_total {} {scope}",
                name.replace('_', " ")
            );
            let _ = writeln!(out, "# TYPE oncelake_{name}_total counter");
            let _ = writeln!(out, "oncelake_{name}_total {v}");
        }
        for (name, help, h) in [
            ("group_units", "units per commit group", &self.group_units),
            (
                "commit_latency_us",
                "commit latency in microseconds",
                &self.commit_latency_us,
            ),
        ] {
            let _ = writeln!(out, "# HELP oncelake_{name} {help} (this process only)");
            let _ = writeln!(out, "# TYPE oncelake_{name} histogram");
            let mut cum = 0;
            for &(le, n) in &h.buckets {
                cum += n;
                if n > 0 || cum == h.count {
                    let _ = writeln!(out, "oncelake_{name}_bucket{{le=\"{le}\"}} {cum}");
                }
                if cum == h.count {
                    break;
                }
            }
            let _ = writeln!(out, "oncelake_{name}_bucket{{le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "oncelake_{name}_sum {}", h.sum);
            let _ = writeln!(out, "oncelake_{name}_count {}", h.count);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persisted_counters_round_trip_and_only_store_scope_loads() {
        let rows = vec![
            ("commits".to_string(), 7),
            ("bytes_staged".to_string(), 99),
            (SINCE_SEQ.to_string(), 3),
            ("a_future_counter".to_string(), 5),
        ];
        let bytes = encode_counters(&rows);
        assert_eq!(decode_counters(&bytes), Some(rows.clone()));
        assert_eq!(decode_counters(&bytes[..bytes.len() - 1]), None);
        let m = Metrics::from_persisted(&rows).snapshot();
        assert_eq!(m.commits, 7);
        // A process-scope counter is never loaded from the store.
        assert_eq!(m.bytes_staged, 0);
        assert_eq!(m.counted_since_seq, 3);
        assert_eq!(scope_of("commits"), Scope::Store);
        assert_eq!(scope_of("computations"), Scope::Process);
        for name in STORE_COUNTERS {
            assert!(
                m.counters().iter().any(|(n, _)| n == name),
                "{name} is not a counter"
            );
        }
    }

    #[test]
    fn histogram_quantiles_bound_the_values() {
        let h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.count, 1000);
        assert_eq!(s.sum, 500_500);
        let p50 = s.quantile(0.5);
        assert!((500..1024).contains(&p50), "p50 bound {p50}");
        assert!(s.quantile(0.99) >= 990);
        assert_eq!(s.buckets[0], (0, 0));
    }
}
