//! What only this server process knows: requests, rejections, open uploads. Reported under
//! `process.server` in `/v1/stats` and as `oncelake_server_*` in `/metrics`, labelled as
//! process-only (they start at zero with every server).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The server's own counters.
#[derive(Debug, Default)]
pub(crate) struct Live {
    requests: AtomicU64,
    unauthorized: AtomicU64,
    bad_requests: AtomicU64,
    too_large: AtomicU64,
    overloaded: AtomicU64,
    uploads_in_flight: AtomicU64,
    uploads_aborted: AtomicU64,
    staged_handles: AtomicU64,
    connections_open: AtomicU64,
    connections_total: AtomicU64,
}

/// A figure of [`Live`]: its name, its help text, whether it is a counter (else a gauge), and
/// its cell.
type Figure = (&'static str, &'static str, bool, fn(&Live) -> &AtomicU64);

/// Every figure of [`Live`]. Process-only: every figure starts at zero with the server.
#[rustfmt::skip]
const FIGURES: [Figure; 10] = [
    ("requests", "HTTP requests received", true, |l| &l.requests),
    ("unauthorized", "requests refused for a missing or wrong token (401)", true, |l| &l.unauthorized),
    ("bad_requests", "malformed requests (400)", true, |l| &l.bad_requests),
    ("too_large", "requests over a size limit (413)", true, |l| &l.too_large),
    ("overloaded", "requests and connections shed over a bound of the server (503 overloaded)", true, |l| &l.overloaded),
    ("uploads_aborted", "uploads cut off, timed out or too large (their staging discarded)", true, |l| &l.uploads_aborted),
    ("connections", "connections accepted", true, |l| &l.connections_total),
    ("uploads_in_flight", "uploads being staged now", false, |l| &l.uploads_in_flight),
    ("staged_handles", "uploads staged and not yet committed", false, |l| &l.staged_handles),
    ("connections_open", "connections open now", false, |l| &l.connections_open),
];

/// Decrements the in-flight uploads when dropped (also when the handler is cancelled).
pub(crate) struct UploadGuard<'a>(&'a AtomicU64);

impl Drop for UploadGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Live {
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Relaxed);
    }
    pub(crate) fn unauthorized(&self) {
        self.unauthorized.fetch_add(1, Relaxed);
    }
    pub(crate) fn bad_request(&self) {
        self.bad_requests.fetch_add(1, Relaxed);
    }
    pub(crate) fn too_large(&self) {
        self.too_large.fetch_add(1, Relaxed);
    }
    pub(crate) fn overloaded(&self) {
        self.overloaded.fetch_add(1, Relaxed);
    }
    pub(crate) fn upload_started(&self) -> UploadGuard<'_> {
        self.uploads_in_flight.fetch_add(1, Relaxed);
        UploadGuard(&self.uploads_in_flight)
    }
    pub(crate) fn upload_aborted(&self) {
        self.uploads_aborted.fetch_add(1, Relaxed);
    }
    pub(crate) fn set_staged_handles(&self, n: u64) {
        self.staged_handles.store(n, Relaxed);
    }
    /// A connection opened; [`Live::connection_closed`] when it ends.
    pub(crate) fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Relaxed);
        self.connections_total.fetch_add(1, Relaxed);
    }
    /// A connection ended.
    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Relaxed);
    }

    /// Every figure with its value: (name, help, a counter (else a gauge), value).
    fn values(&self) -> impl Iterator<Item = (&'static str, &'static str, bool, u64)> + '_ {
        FIGURES
            .iter()
            .map(|&(name, help, counter, cell)| (name, help, counter, cell(self).load(Relaxed)))
    }

    /// The Prometheus lines of the server's own counters and gauges.
    pub(crate) fn to_prometheus(&self) -> String {
        let mut out = String::new();
        for (name, help, counter, v) in self.values() {
            let (suffix, kind) = if counter {
                ("_total", "counter")
            } else {
                ("", "gauge")
            };
            out.push_str(&format!(
                "# HELP oncelake_server_{name}{suffix} {help} (this server process only)\n\
                 # TYPE oncelake_server_{name}{suffix} {kind}\n\
                 oncelake_server_{name}{suffix} {v}\n"
            ));
        }
        out
    }

    /// The Prometheus lines of the C allocator's heap (glibc only; nothing elsewhere): what the
    /// process has allocated and not freed, and what the allocator holds from the system for
    /// it. Resident memory above the second is stacks and file pages; between the two is memory
    /// freed but kept by the allocator (fragmentation), which only the first tells from a leak
    /// (`oncelake-bench serve-load` samples both; BENCHMARKS.md, serve-load memory).
    pub(crate) fn heap_prometheus() -> String {
        let Some((in_use, held)) = heap_bytes() else {
            return String::new();
        };
        let mut out = String::new();
        for (name, help, v) in [
            (
                "heap_in_use_bytes",
                "heap bytes allocated and not freed",
                in_use,
            ),
            (
                "heap_held_bytes",
                "heap bytes the allocator holds from the system (in use, or freed and kept)",
                held,
            ),
        ] {
            out.push_str(&format!(
                "# HELP oncelake_server_{name} {help} (this server process only)\n\
                 # TYPE oncelake_server_{name} gauge\n\
                 oncelake_server_{name} {v}\n"
            ));
        }
        out
    }

    /// The server's own counters as JSON.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (name, _, _, v) in self.values() {
            m.insert(name.to_string(), v.into());
        }
        serde_json::Value::Object(m)
    }
}

/// (in use, held) bytes of glibc's heap, all arenas, mmapped blocks included. That is the
/// process's heap as long as the binary keeps the system allocator (a `#[global_allocator]`
/// of its own would leave glibc's heap nearly empty, and these figures meaningless).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_bytes() -> Option<(u64, u64)> {
    // SAFETY: mallinfo2 (glibc 2.33+) only reads the allocator's statistics, under its locks.
    let m = unsafe { libc::mallinfo2() };
    Some(((m.uordblks + m.hblkhd) as u64, (m.arena + m.hblkhd) as u64))
}

/// Other allocators keep no such statistics that this crate reads.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_bytes() -> Option<(u64, u64)> {
    None
}
