//! `/v1/stats` on the wire: the engine's metrics (each counter with its scope), what is read
//! from the store and the server's own counters, and the engine's metrics rebuilt from them.

use oncelake::metrics::HistogramSnapshot;
use oncelake::MetricsSnapshot;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A histogram on the wire.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HistogramW {
    /// (inclusive upper bound, count) per bucket.
    pub buckets: Vec<(u64, u64)>,
    /// Sum of the values.
    pub sum: u64,
    /// Number of values.
    pub count: u64,
}

/// `/v1/stats`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatsW {
    /// Every engine counter by name.
    pub counters: BTreeMap<String, u64>,
    /// Every counter's scope: `store` or `process`.
    pub scopes: BTreeMap<String, String>,
    /// Units per commit group (process only).
    pub group_units: HistogramW,
    /// Commit latency in µs (process only).
    pub commit_latency_us: HistogramW,
    /// The seq the store-scope counters count from.
    pub counted_since_seq: u64,
    /// Units with a current entry (read from the store).
    pub units: u64,
    /// The sum of the current entries' object sizes (read from the store).
    #[serde(default)]
    pub bytes_stored: u64,
    /// The newest seq (read from the store).
    pub seq: u64,
    /// The server's own counters (process only).
    pub server: Value,
    /// The server's own counters in Prometheus text.
    pub server_prometheus: String,
}

impl StatsW {
    /// The engine's metrics, rebuilt.
    pub fn metrics(&self) -> MetricsSnapshot {
        let mut m = MetricsSnapshot::default();
        for (name, v) in &self.counters {
            m.set_counter(name, *v);
        }
        m.group_units = hist_back(&self.group_units);
        m.commit_latency_us = hist_back(&self.commit_latency_us);
        m.counted_since_seq = self.counted_since_seq;
        m
    }
}

/// A histogram of the engine, for the wire.
pub fn hist(h: &HistogramSnapshot) -> HistogramW {
    HistogramW {
        buckets: h.buckets.clone(),
        sum: h.sum,
        count: h.count,
    }
}

fn hist_back(h: &HistogramW) -> HistogramSnapshot {
    HistogramSnapshot {
        buckets: h.buckets.clone(),
        sum: h.sum,
        count: h.count,
    }
}
