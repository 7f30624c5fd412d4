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
//!
//! Each handle holds a pinned object and a few hundred bytes of the server's memory, so their
//! number is bounded per client ([`crate::bounds::ClientId`]; `429` beyond: commit or drop some)
//! and in total (`503` beyond) (SPEC R20).

use crate::api_error::ApiError;
use crate::bounds::ClientId;
use axum::http::StatusCode;
use oncelake::Staged;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Handle {
    staged: Staged,
    deadline: Instant,
    client: ClientId,
}

#[derive(Default)]
struct Handles {
    by_id: HashMap<u64, Handle>,
    per_client: HashMap<ClientId, usize>,
}

impl Handles {
    fn take(&mut self, id: u64) -> bool {
        let Some(h) = self.by_id.remove(&id) else {
            return false;
        };
        if let Some(n) = self.per_client.get_mut(&h.client) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&h.client);
            }
        }
        true
    }
}

/// The staged handles of one server.
pub(crate) struct Registry {
    handles: Mutex<Handles>,
    per_client: usize,
    total: usize,
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
    /// An empty registry holding at most `per_client` handles of one client and `total` of all.
    pub(crate) fn new(per_client: usize, total: usize) -> Registry {
        Registry {
            handles: Mutex::default(),
            per_client: per_client.max(1),
            total: total.max(1),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Handles> {
        // A panic while holding the lock leaves the map consistent (single inserts/removes).
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `client` may hold one more handle (checked before its upload, and again when the
    /// handle is kept): the refusal says whose bound was reached and what to do.
    pub(crate) fn room_for(&self, client: &ClientId) -> Result<(), ApiError> {
        self.room(&self.map(), client)
    }

    fn room(&self, m: &Handles, client: &ClientId) -> Result<(), ApiError> {
        let mine = m.per_client.get(client).copied().unwrap_or(0);
        if mine >= self.per_client {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_staged",
                format!(
                    "{client} holds {mine} uncommitted staging handles, the most one client may; \
                     commit them or drop them (DELETE /v1/stage?id=) before staging more"
                ),
            ));
        }
        if m.by_id.len() >= self.total {
            return Err(crate::bounds::Overloaded {
                what: "uncommitted staging handles",
                client: client.clone(),
                limit: self.total,
                per_client: false,
            }
            .into());
        }
        Ok(())
    }

    /// Keeps `staged` for `client` until `ttl` from now; its new id, unguessable, and the count
    /// held now. Refused over the bounds ([`Registry::room_for`]), or (`503`) if the OS gives no
    /// randomness.
    pub(crate) fn insert(
        &self,
        staged: Staged,
        ttl: Duration,
        client: ClientId,
    ) -> Result<(u64, usize), ApiError> {
        let mut m = self.map();
        self.room(&m, &client)?;
        let deadline = Instant::now() + ttl;
        loop {
            let mut b = [0u8; 8];
            getrandom::fill(&mut b).map_err(|_| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "io",
                    "the system gave no randomness for a staging handle; retry",
                )
            })?;
            let id = u64::from_le_bytes(b);
            // 0 is never issued, so a default-filled request never names a live handle.
            if id != 0 && !m.by_id.contains_key(&id) {
                *m.per_client.entry(client.clone()).or_insert(0) += 1;
                m.by_id.insert(
                    id,
                    Handle {
                        staged,
                        deadline,
                        client,
                    },
                );
                return Ok((id, m.by_id.len()));
            }
        }
    }

    /// The live handle `id`.
    pub(crate) fn get(&self, id: u64) -> Option<Staged> {
        let m = self.map();
        match m.by_id.get(&id) {
            Some(h) if Instant::now() < h.deadline => Some(h.staged.clone()),
            _ => None,
        }
    }

    /// Drops handles; whether each was there. The count left.
    pub(crate) fn remove(&self, ids: impl IntoIterator<Item = u64>) -> (bool, usize) {
        let mut m = self.map();
        let mut all = true;
        for id in ids {
            all &= m.take(id);
        }
        (all, m.by_id.len())
    }

    /// Drops the handles whose deadline passed; the count left.
    pub(crate) fn expire(&self) -> usize {
        let now = Instant::now();
        let mut m = self.map();
        let gone: Vec<u64> = m
            .by_id
            .iter()
            .filter(|(_, h)| now >= h.deadline)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            m.take(id);
        }
        m.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_live_until_the_deadline_and_gone_after() {
        let dir = tempfile::tempdir().unwrap();
        let store = oncelake::Store::open(dir.path()).unwrap();
        let r = Registry::new(10, 10);
        let me = ClientId::Unknown;
        let (a, _) = r
            .insert(
                store.stage_bytes(b"a").unwrap(),
                Duration::from_secs(60),
                me.clone(),
            )
            .ok()
            .unwrap();
        let (b, n) = r
            .insert(store.stage_bytes(b"b").unwrap(), Duration::ZERO, me)
            .ok()
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

    #[test]
    fn handles_are_bounded_per_client_and_in_total_and_dropping_makes_room() {
        let dir = tempfile::tempdir().unwrap();
        let store = oncelake::Store::open(dir.path()).unwrap();
        let r = Registry::new(2, 3);
        let (a, b) = (ClientId::Process(1), ClientId::Process(2));
        let ttl = Duration::from_secs(60);
        let stage = || store.stage_bytes(b"x").unwrap();
        let a1 = r.insert(stage(), ttl, a.clone()).ok().unwrap().0;
        r.insert(stage(), ttl, a.clone()).ok().unwrap();
        let e = r.insert(stage(), ttl, a.clone()).err().unwrap();
        assert_eq!((e.status.as_u16(), e.kind), (429, "too_many_staged"));
        assert!(r.room_for(&a).is_err());
        r.insert(stage(), ttl, b.clone()).ok().unwrap();
        let e = r.room_for(&b).err().unwrap();
        assert_eq!((e.status.as_u16(), e.kind), (503, "overloaded"));
        assert_eq!(e.retry_after, Some(crate::bounds::RETRY_AFTER_SECS));
        assert_eq!(r.remove([a1]), (true, 2));
        assert!(r.room_for(&a).is_ok() && r.room_for(&b).is_ok());
    }
}
