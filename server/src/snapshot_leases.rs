//! The open snapshot leases of one server: each holds an engine `Snapshot` (so GC keeps what it
//! reads) under a random id until it is closed or unused for its TTL; bounded in number.

use crate::api_error::{ApiError, ApiResult};
use axum::http::StatusCode;
use oncelake::Snapshot;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an unused snapshot lease lives when the client does not say.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(600);
/// The longest a client may ask for: a forgotten view must not pin objects for days.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Open leases at most: each holds a read transaction and pins objects, so a buggy or hostile
/// client that never closes its views must not grow them without bound.
pub(crate) const MAX_OPEN: usize = 4096;

struct Lease {
    snap: Arc<Snapshot>,
    ttl: Duration,
    deadline: Instant,
}

/// The open snapshot leases of one server.
#[derive(Default)]
pub(crate) struct Leases {
    open: Mutex<HashMap<u64, Lease>>,
}

impl Leases {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Lease>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `snap` under a new random id; `Ok(None)` when `MAX_OPEN` leases are open already.
    pub(crate) fn insert(
        &self,
        snap: Snapshot,
        ttl: Duration,
    ) -> Result<Option<u64>, getrandom::Error> {
        let mut m = self.map();
        if m.len() >= MAX_OPEN {
            return Ok(None);
        }
        loop {
            let mut b = [0u8; 8];
            getrandom::fill(&mut b)?;
            let id = u64::from_le_bytes(b);
            if id != 0 && !m.contains_key(&id) {
                m.insert(
                    id,
                    Lease {
                        snap: Arc::new(snap),
                        ttl,
                        deadline: Instant::now() + ttl,
                    },
                );
                return Ok(Some(id));
            }
        }
    }

    /// The view of a live lease, its TTL started again.
    pub(crate) fn touch(&self, id: u64) -> ApiResult<Arc<Snapshot>> {
        let mut m = self.map();
        let now = Instant::now();
        match m.get_mut(&id) {
            Some(l) if now < l.deadline => {
                l.deadline = now + l.ttl;
                Ok(l.snap.clone())
            }
            _ => {
                m.remove(&id);
                Err(ApiError::new(
                    StatusCode::GONE,
                    "snapshot_gone",
                    format!(
                        "snapshot {id} is not open on this server: it was closed, it was not \
                         used for its TTL (each read renews it), the server restarted, or the id \
                         was never issued here; take a new snapshot"
                    ),
                ))
            }
        }
    }

    /// Ends the leases whose TTL passed (their objects become collectable).
    pub(crate) fn expire(&self) {
        let now = Instant::now();
        self.map().retain(|_, l| now < l.deadline);
    }

    pub(crate) fn close(&self, id: u64) -> bool {
        self.map().remove(&id).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_random_bounded_renewed_by_reads_and_end_at_their_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let store = oncelake::Store::open(dir.path()).unwrap();
        let leases = Leases::default();
        let a = leases
            .insert(store.snapshot().unwrap(), Duration::from_millis(300))
            .unwrap()
            .unwrap();
        let b = leases
            .insert(store.snapshot().unwrap(), Duration::ZERO)
            .unwrap()
            .unwrap();
        assert!(a.abs_diff(b) > 1 << 20, "ids are not a counter: {a} {b}");
        assert!(leases.touch(b).is_err(), "a lease past its TTL is gone");
        // Reads renew: touched every 100 ms, a 300 ms lease outlives 600 ms.
        for _ in 0..6 {
            std::thread::sleep(Duration::from_millis(100));
            assert!(leases.touch(a).is_ok());
        }
        std::thread::sleep(Duration::from_millis(400));
        leases.expire();
        assert!(leases.touch(a).is_err(), "unread for its TTL: closed");
        // At most MAX_OPEN at once; closing one makes room.
        let ids: Vec<u64> = (0..MAX_OPEN)
            .map(|_| {
                leases
                    .insert(store.snapshot().unwrap(), DEFAULT_TTL)
                    .unwrap()
                    .unwrap()
            })
            .collect();
        assert!(leases
            .insert(store.snapshot().unwrap(), DEFAULT_TTL)
            .unwrap()
            .is_none());
        assert!(leases.close(ids[0]) && !leases.close(ids[0]));
        assert!(leases
            .insert(store.snapshot().unwrap(), DEFAULT_TTL)
            .unwrap()
            .is_some());
    }
}
