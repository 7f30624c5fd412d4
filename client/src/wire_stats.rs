//! `/v1/stats` on the wire: the engine's metrics (each counter with its scope), what is read
//! from the store and the server's own counters, and the engine's metrics rebuilt from them.

use oncelake::metrics::HistogramSnapshot;
use oncelake::{MetricsSnapshot, StoreStats};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `/v1/stats`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatsW {
    /// Every engine counter by name.
    pub counters: BTreeMap<String, u64>,
    /// Every counter's scope: `store` or `process`.
    pub scopes: BTreeMap<String, String>,
    /// Units per commit group (process only).
    pub group_units: HistogramSnapshot,
    /// Commit latency in µs (process only).
    pub commit_latency_us: HistogramSnapshot,
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
        m.group_units = self.group_units.clone();
        m.commit_latency_us = self.commit_latency_us.clone();
        m.counted_since_seq = self.counted_since_seq;
        m
    }

    /// The engine's part: what the store holds and the engine's metrics (the answer of
    /// `UnitStore::stats`).
    pub fn store_stats(&self) -> StoreStats {
        StoreStats {
            units: self.units,
            bytes_stored: self.bytes_stored,
            last_seq: self.seq,
            metrics: self.metrics(),
        }
    }
}
