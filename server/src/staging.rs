//! The server's registry of staged uploads (`POST /v1/stage`) that a later `POST /v1/commit`
//! names. The engine's rule that a `Staged` handle belongs to the store that staged it must hold
//! across the wire, so a handle here is a capability:
//! - its id is 64 random bits from the OS (not a counter): a client cannot name another
//!   client's staging by guessing, and an id from another server, an earlier run of this one, or
//!   no server at all is simply unknown and refused with a message that says what to do;
//! - it lives until it is committed, dropped (`DELETE /v1/stage?id=`), or its deadline passes: a
//!   client that was killed never comes back for its handles, so the deadline reclaims them
//!   (dropping the engine's `Staged` unpins the object; nothing committed references it, so
//!   the next GC removes it). An expired handle is refused even before the sweep removes it.

use oncelake::Staged;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The staged handles of one server.
#[derive(Default)]
pub(crate) struct Registry {
    handles: Mutex<HashMap<u64, (Staged, Instant)>>,
}

/// Why a named handle cannot be used.
pub(crate) fn unknown_handle(id: u64) -> String {
    format!(
        "staging handle {id} is unknown to this server: it was never issued here (a handle from \
         another server or store, or a forged one), was already committed or dropped, or its \
         deadline passed (a killed client's staging is reclaimed that way); upload the object \
         again with POST /v1/stage. Nothing was committed"
    )
}

impl Registry {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Staged, Instant)>> {
        // A panic while holding the lock leaves the map consistent (single inserts/removes).
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `staged` until `ttl` from now; its new id, unguessable. `None` only if the OS gives
    /// no randomness.
    pub(crate) fn insert(&self, staged: Staged, ttl: Duration) -> Option<(u64, usize)> {
        let mut m = self.map();
        let deadline = Instant::now() + ttl;
        loop {
            let mut b = [0u8; 8];
            getrandom::fill(&mut b).ok()?;
            let id = u64::from_le_bytes(b);
            // 0 is never issued, so a default-filled request never names a live handle.
            if id != 0 && !m.contains_key(&id) {
                m.insert(id, (staged, deadline));
                return Some((id, m.len()));
            }
        }
    }

    /// The live handle `id`.
    pub(crate) fn get(&self, id: u64) -> Option<Staged> {
        let m = self.map();
        match m.get(&id) {
            Some((s, deadline)) if Instant::now() < *deadline => Some(s.clone()),
            _ => None,
        }
    }

    /// Drops handles; whether each was there. The count left.
    pub(crate) fn remove(&self, ids: impl IntoIterator<Item = u64>) -> (bool, usize) {
        let mut m = self.map();
        let mut all = true;
        for id in ids {
            all &= m.remove(&id).is_some();
        }
        (all, m.len())
    }

    /// Drops the handles whose deadline passed; the count left.
    pub(crate) fn expire(&self) -> usize {
        let now = Instant::now();
        let mut m = self.map();
        m.retain(|_, (_, deadline)| now < *deadline);
        m.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_live_until_the_deadline_and_gone_after() {
        let dir = tempfile::tempdir().unwrap();
        let store = oncelake::Store::open(dir.path()).unwrap();
        let r = Registry::default();
        let (a, _) = r
            .insert(store.stage_bytes(b"a").unwrap(), Duration::from_secs(60))
            .unwrap();
        let (b, n) = r
            .insert(store.stage_bytes(b"b").unwrap(), Duration::ZERO)
            .unwrap();
        assert_eq!(n, 2);
        // Not a counter: consecutive ids are far apart (a counter would differ by one).
        assert!(a.abs_diff(b) > 1 << 20, "{a} {b}");
        assert!(r.get(a).is_some());
        assert!(
            r.get(b).is_none(),
            "an expired handle is refused before the sweep"
        );
        assert!(r.get(a ^ 1).is_none(), "a forged id names nothing");
        assert_eq!(r.expire(), 1);
        assert_eq!(r.remove([a]), (true, 0));
        assert_eq!(r.remove([a]), (false, 0));
    }
}
