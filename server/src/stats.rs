//! The store's metrics for `/v1/stats` and `/metrics`. `/v1/stats` carries the engine's whole
//! [`MetricsSnapshot`] (a client rebuilds it exactly, so `oncelake stats` prints a served store
//! with the same code), what is derived from the store (units, seq) and the server's own
//! process-only counters. Every counter's scope (`store`: persisted with the commits;
//! `process`: this server process only) is in the output.

use crate::wire_stats::StatsW;
use oncelake::metrics::scope_of;
use oncelake::{Store, UnitStore, VerifyReport};
use serde_json::{json, Value};

/// Reads the store's metrics and what is derived from it (the unit count scans the manifest).
pub(crate) fn stats(store: &Store, live: &crate::live::Live) -> oncelake::Result<StatsW> {
    let s = UnitStore::stats(store)?;
    let m = &s.metrics;
    Ok(StatsW {
        counters: m
            .counters()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
        scopes: m
            .counters()
            .into_iter()
            .map(|(n, _)| (n.to_string(), scope_of(n).name().to_string()))
            .collect(),
        group_units: m.group_units.clone(),
        commit_latency_us: m.commit_latency_us.clone(),
        counted_since_seq: m.counted_since_seq,
        units: s.units,
        bytes_stored: s.bytes_stored,
        seq: s.last_seq,
        server: live.to_json(),
        server_prometheus: live.to_prometheus(),
    })
}

/// `/metrics`: the engine's Prometheus text (its HELP lines carry the scope) and what is read
/// from the store (units, bytes stored, seq), as `oncelake stats --prometheus` prints them.
pub(crate) fn prometheus(store: &Store) -> oncelake::Result<String> {
    let s = UnitStore::stats(store)?;
    Ok(format!(
        "{}# HELP oncelake_counted_since_seq the seq the persisted counters count from\n\
         # TYPE oncelake_counted_since_seq gauge\noncelake_counted_since_seq {}\n",
        s.to_prometheus(),
        s.metrics.counted_since_seq
    ))
}

/// A verify report as JSON: its counts and every problem as a line of text.
pub(crate) fn verify_json(r: &VerifyReport) -> Value {
    let problems: Vec<String> = r
        .missing
        .iter()
        .map(|p| format!("missing object {}: {}", p.object, p.detail))
        .chain(
            r.corrupt
                .iter()
                .map(|p| format!("corrupt object {}: {}", p.object, p.detail)),
        )
        .chain(r.history_problems.iter().cloned())
        .chain(r.replay.problems.iter().map(|p| format!("replay: {p:?}")))
        .chain(r.invariants.iter().map(|v| format!("{v:?}")))
        .collect();
    json!({
        "ok": r.is_ok(),
        "deep": r.deep,
        "seq": r.seq,
        "entries_checked": r.entries_checked,
        "objects_checked": r.objects_checked,
        "bytes_checked": r.bytes_checked,
        "problems": problems,
        "report": r,
    })
}
