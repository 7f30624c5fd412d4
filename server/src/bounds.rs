//! What one client may hold of the server, and all clients together (SPEC R20): open
//! connections, threads of the blocking pool, staging handles. A hostile or buggy local client —
//! a thousand slow uploads, a flood of half-sent request heads, handles it never commits — must
//! not starve the others: each resource is counted per client and in total, a request over a
//! bound is shed at once with a clear `503` (and `Retry-After`) instead of queueing without
//! end, and `/healthz` keeps a lane of its own.
//!
//! A *client* is what the server can tell apart without trusting the client: on the Unix socket
//! a process (the peer's pid from the socket's credentials), on TCP a host (the peer's address;
//! all processes of the machine on loopback are one client there, so the totals protect them).

use crate::api_error::ApiError;
use axum::http::StatusCode;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Who a connection belongs to, for the per-client bounds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ClientId {
    /// A process on the Unix socket.
    Process(i32),
    /// A user on the Unix socket whose pid the kernel did not give.
    User(u32),
    /// A host on TCP.
    Host(std::net::IpAddr),
    /// No connection (a call made outside any request, as in unit tests).
    Unknown,
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientId::Process(pid) => write!(f, "process {pid}"),
            ClientId::User(uid) => write!(f, "user {uid}"),
            ClientId::Host(ip) => write!(f, "host {ip}"),
            ClientId::Unknown => f.write_str("an unknown client"),
        }
    }
}

tokio::task_local! {
    /// The client whose request the current task serves (set around each request's handler).
    static CLIENT: ClientId;
}

/// Runs `fut` (a request's handler) as `client`'s.
pub(crate) async fn as_client<F: std::future::Future>(client: ClientId, fut: F) -> F::Output {
    CLIENT.scope(client, fut).await
}

/// The client of the request being served, if any.
pub(crate) fn current_client() -> ClientId {
    CLIENT.try_with(Clone::clone).unwrap_or(ClientId::Unknown)
}

/// A bound was reached: the request is shed with `503` and `Retry-After`.
#[derive(Debug)]
pub(crate) struct Overloaded {
    /// What ran out, in words ("calls on the blocking pool").
    pub what: &'static str,
    pub client: ClientId,
    /// The bound that was reached, and whether it is the client's own or the server's total.
    pub limit: usize,
    pub per_client: bool,
}

/// Seconds a shed client is told to wait before retrying.
pub(crate) const RETRY_AFTER_SECS: u64 = 1;

impl Overloaded {
    /// The error's message: what ran out, whose, and what to do.
    pub(crate) fn message(&self) -> String {
        if self.per_client {
            format!(
                "{} already holds {} {} (the most one client may); retry after {}s, once some \
                 of them have finished, or send fewer at once",
                self.client, self.limit, self.what, RETRY_AFTER_SECS
            )
        } else {
            format!(
                "the server is at its limit of {} {} for all clients together; retry after {}s",
                self.limit, self.what, RETRY_AFTER_SECS
            )
        }
    }
}

impl From<Overloaded> for ApiError {
    fn from(o: Overloaded) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", o.message())
            .retry_after(RETRY_AFTER_SECS)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below is a few counter updates that cannot leave them half done.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts of one resource per client and in total, each with its bound. Nothing waits: a
/// caller over a bound is told so at once.
#[derive(Debug)]
pub(crate) struct Quota {
    what: &'static str,
    per_client: usize,
    total: usize,
    held: Mutex<(usize, HashMap<ClientId, usize>)>,
}

impl Quota {
    pub(crate) fn new(what: &'static str, per_client: usize, total: usize) -> Arc<Quota> {
        Arc::new(Quota {
            what,
            per_client: per_client.max(1),
            total: total.max(1),
            held: Mutex::new((0, HashMap::new())),
        })
    }

    /// One unit for `client`, given back when the permit drops.
    pub(crate) fn take(self: &Arc<Self>, client: ClientId) -> Result<Permit, Overloaded> {
        let mut held = lock(&self.held);
        let mine = held.1.get(&client).copied().unwrap_or(0);
        let over = |per_client: bool, limit: usize| Overloaded {
            what: self.what,
            client: client.clone(),
            limit,
            per_client,
        };
        if mine >= self.per_client {
            return Err(over(true, self.per_client));
        }
        if held.0 >= self.total {
            return Err(over(false, self.total));
        }
        held.0 += 1;
        *held.1.entry(client.clone()).or_insert(0) += 1;
        Ok(Permit {
            quota: self.clone(),
            client,
        })
    }

    /// Units held now (in total).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        lock(&self.held).0
    }
}

/// One unit of a [`Quota`], held until dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    quota: Arc<Quota>,
    client: ClientId,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut held = lock(&self.quota.held);
        held.0 -= 1;
        if let Some(n) = held.1.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                held.1.remove(&self.client);
            }
        }
    }
}

/// One open connection, as the connection table sees it.
pub(crate) struct Conn {
    id: u64,
    client: ClientId,
    /// Requests of this connection being answered now (a response counts until its body has
    /// been sent or dropped).
    busy: AtomicUsize,
    /// Milliseconds since the table's start when a request last started or ended (or the
    /// connection opened).
    last_active: AtomicU64,
    /// Told to close: the connection table needed its place.
    evict: tokio::sync::Notify,
    table: Arc<ConnTable>,
}

impl Conn {
    /// Marks a request started; the guard marks it ended.
    pub(crate) fn request(self: &Arc<Self>) -> BusyGuard {
        self.busy.fetch_add(1, Ordering::Relaxed);
        self.touch();
        BusyGuard(self.clone())
    }

    fn touch(&self) {
        let now = self.table.start.elapsed().as_millis() as u64;
        self.last_active.store(now, Ordering::Relaxed);
    }

    /// Completes when the table evicts this connection.
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await
    }

    /// Whose it is.
    pub(crate) fn client(&self) -> &ClientId {
        &self.client
    }
}

/// A request of a connection in progress; dropped when its answer is sent (or abandoned).
pub(crate) struct BusyGuard(Arc<Conn>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A connection's place in the table, given back when dropped.
pub(crate) struct Ticket(pub Arc<Conn>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.table.remove(self.0.id, &self.0.client);
    }
}

/// The open connections, bounded per client and in total.
pub(crate) struct ConnTable {
    per_client: usize,
    total: usize,
    start: Instant,
    state: Mutex<TableState>,
}

#[derive(Default)]
struct TableState {
    next_id: u64,
    open: HashMap<u64, Arc<Conn>>,
    per_client: HashMap<ClientId, usize>,
}

impl ConnTable {
    pub(crate) fn new(per_client: usize, total: usize) -> Arc<ConnTable> {
        Arc::new(ConnTable {
            per_client: per_client.max(1),
            total: total.max(1),
            start: Instant::now(),
            state: Mutex::default(),
        })
    }

    /// A place for a new connection of `client`. Over the client's own bound it is refused.
    /// When the table is full, the connection that has been idle longest (between requests, or
    /// still waiting for a request's head: what a flood of half-sent heads holds) is told to
    /// close and makes room; only when every connection is answering a request is the new one
    /// refused.
    pub(crate) fn admit(self: &Arc<Self>, client: ClientId) -> Result<Ticket, Overloaded> {
        let mut st = lock(&self.state);
        let mine = st.per_client.get(&client).copied().unwrap_or(0);
        if mine >= self.per_client {
            return Err(Overloaded {
                what: "open connections",
                client,
                limit: self.per_client,
                per_client: true,
            });
        }
        if st.open.len() >= self.total {
            let victim = st
                .open
                .values()
                .filter(|c| c.busy.load(Ordering::Relaxed) == 0)
                .min_by_key(|c| c.last_active.load(Ordering::Relaxed))
                .cloned();
            let Some(victim) = victim else {
                return Err(Overloaded {
                    what: "open connections",
                    client,
                    limit: self.total,
                    per_client: false,
                });
            };
            st.open.remove(&victim.id);
            decrement(&mut st.per_client, &victim.client);
            // Stored if the connection's task is not waiting yet: it closes as soon as it looks.
            victim.evict.notify_one();
        }
        st.next_id += 1;
        let conn = Arc::new(Conn {
            id: st.next_id,
            client: client.clone(),
            busy: AtomicUsize::new(0),
            last_active: AtomicU64::new(self.start.elapsed().as_millis() as u64),
            evict: tokio::sync::Notify::new(),
            table: self.clone(),
        });
        st.open.insert(conn.id, conn.clone());
        *st.per_client.entry(client).or_insert(0) += 1;
        Ok(Ticket(conn))
    }

    fn remove(&self, id: u64, client: &ClientId) {
        let mut st = lock(&self.state);
        // An evicted connection was removed when it was evicted.
        if st.open.remove(&id).is_some() {
            decrement(&mut st.per_client, client);
        }
    }

    /// Connections in the table now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.state).open.len()
    }
}

fn decrement(m: &mut HashMap<ClientId, usize>, client: &ClientId) {
    if let Some(n) = m.get_mut(client) {
        *n -= 1;
        if *n == 0 {
            m.remove(client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(last: u8) -> ClientId {
        ClientId::Host(std::net::IpAddr::from([127, 0, 0, last]))
    }

    #[test]
    fn a_quota_bounds_each_client_and_all_together_and_permits_give_back() {
        let q = Quota::new("calls", 2, 3);
        let a1 = q.take(host(1)).unwrap();
        let _a2 = q.take(host(1)).unwrap();
        let e = q.take(host(1)).unwrap_err();
        assert!(e.per_client && e.limit == 2, "{e:?}");
        let _b1 = q.take(host(2)).unwrap();
        let e = q.take(host(2)).unwrap_err();
        assert!(!e.per_client && e.limit == 3, "{e:?}");
        assert!(e.message().contains("retry after"), "{}", e.message());
        drop(a1);
        assert_eq!(q.held(), 2);
        let _b2 = q.take(host(2)).unwrap();
    }

    #[test]
    fn a_full_table_evicts_the_longest_idle_connection_never_a_busy_one() {
        let t = ConnTable::new(2, 3);
        let a = t.admit(host(1)).unwrap();
        let _busy = a.0.request();
        let b = t.admit(host(2)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let c = t.admit(host(3)).unwrap();
        // a's client has one of its two places; the table is full.
        drop(t.admit(host(1)).unwrap());
        // The table was full: the idle one seen longest ago (b) was evicted, not a (busy).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(1), b.0.evicted())
                .await
                .expect("b was told to close");
            assert!(
                tokio::time::timeout(std::time::Duration::from_millis(50), c.0.evicted())
                    .await
                    .is_err(),
                "c was not"
            );
        });
        drop(b);
        // b left when evicted, the fourth when dropped: a and c remain.
        assert_eq!(t.len(), 2);
        assert!(t.admit(host(9)).is_ok());
    }

    #[test]
    fn a_client_over_its_own_bound_is_refused_and_all_busy_is_refused() {
        let t = ConnTable::new(1, 2);
        let a = t.admit(host(1)).unwrap();
        assert!(t.admit(host(1)).err().unwrap().per_client);
        let b = t.admit(host(2)).unwrap();
        let (_ga, _gb) = (a.0.request(), b.0.request());
        let e = t.admit(host(3)).err().unwrap();
        assert!(!e.per_client, "{e:?}");
        drop((_ga, _gb));
        assert!(t.admit(host(3)).is_ok());
    }
}
