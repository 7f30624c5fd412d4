//! Running a unit's work exactly once (SPEC R11, R10): [`Store::run_once`] claims the unit, runs
//! the work, stages its output and commits it with the lease's fencing token; it is the seed 001
//! `process_batch` without its check-then-act race. [`Store::run_optimistic`] is the coordinator-free
//! counterpart (SPEC R10): it always computes and lets the commit rules collapse duplicates.
//!
//! Both count, where the work really runs, `computations` (work closures run) and
//! `redundant_computations` (work whose output was committed but did not become the unit's entry:
//! collapsed as a duplicate, or rejected as fenced, stale or conflicting because another worker's
//! lease or commit won), and the calls that did not run the work: `runs_already_done` and
//! `runs_busy`. `oncelake simulate` reads its figures from these counters.
//!
//! # Why an in-process guard besides the claim
//!
//! A claim by the *same* worker name for the same version while its lease is live is an extension
//! that keeps the token (a worker asking again for its own work), so two threads that share a worker
//! name would both be granted. A process-wide guard keyed by (store, unit) therefore admits one
//! running work closure per unit at a time; a thread that is granted while another thread of this
//! process is still running the unit answers "busy" instead of running the work again, and a thread
//! that enters after the other committed re-checks the manifest and answers "already done". Claims
//! still arbitrate between processes and between different worker names.

use crate::claim::{ClaimOutcome, Lease};
use crate::commit::{Batch, Outcome, UnitOutcome};
use crate::error::Error;
use crate::manifest::Entry;
use crate::metrics::add;
use crate::stage::Staged;
use crate::store::Store;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// What [`Store::run_once`] (or [`Store::run_optimistic`]) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// The work ran and its output was committed; the outcome says how. `Committed` means this run
    /// produced the unit's entry. Anything else means the work was redundant: `Duplicate` (someone
    /// committed identical output first), `Fenced` (the lease was taken over while the work ran, so
    /// the newer holder's output wins), `Stale` or `Conflict`.
    Processed(UnitOutcome),
    /// The unit was already committed at (or above) the version; the work did not run.
    AlreadyDone(Entry),
    /// Another worker holds a live lease on the unit (or another thread of this process is running
    /// it); the work did not run. Try again after `until_ms` if the unit is still not done.
    BusyElsewhere {
        /// Who holds the unit.
        worker: String,
        /// When that lease may be taken over, ms since the Unix epoch.
        until_ms: u64,
    },
}

impl RunOutcome {
    /// A short snake_case name: `processed`, `already_done` or `busy`.
    pub fn name(&self) -> &'static str {
        match self {
            RunOutcome::Processed(_) => "processed",
            RunOutcome::AlreadyDone(_) => "already_done",
            RunOutcome::BusyElsewhere { .. } => "busy",
        }
    }

    /// Whether this call ran the work and its output became the unit's entry.
    pub fn committed_here(&self) -> bool {
        matches!(
            self,
            RunOutcome::Processed(UnitOutcome {
                outcome: Outcome::Committed { .. },
                ..
            })
        )
    }
}

/// Why a run failed: the work itself, or the engine.
#[derive(Debug)]
pub enum RunError<E> {
    /// The work closure returned an error. Its lease was released, so another worker may retry.
    Work(E),
    /// Claiming, staging or committing failed.
    Engine(Error),
}

impl<E: std::fmt::Display> std::fmt::Display for RunError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Work(e) => write!(f, "the unit's work failed (its lease was released): {e}"),
            RunError::Engine(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RunError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Work(e) => Some(e),
            RunError::Engine(e) => Some(e),
        }
    }
}

impl<E> From<Error> for RunError<E> {
    fn from(e: Error) -> Self {
        RunError::Engine(e)
    }
}

/// What a work closure may return: bytes, a reader (streamed into staging), or an object it staged
/// itself.
pub trait WorkOutput {
    /// Stages the output in `store`.
    fn stage_into(self, store: &Store) -> crate::Result<Staged>;
}

impl WorkOutput for Vec<u8> {
    fn stage_into(self, store: &Store) -> crate::Result<Staged> {
        store.stage_bytes(&self)
    }
}

impl WorkOutput for &[u8] {
    fn stage_into(self, store: &Store) -> crate::Result<Staged> {
        store.stage_bytes(self)
    }
}

impl WorkOutput for String {
    fn stage_into(self, store: &Store) -> crate::Result<Staged> {
        store.stage_bytes(self.as_bytes())
    }
}

impl WorkOutput for bytes::Bytes {
    fn stage_into(self, store: &Store) -> crate::Result<Staged> {
        store.stage_bytes(&self)
    }
}

impl WorkOutput for std::fs::File {
    fn stage_into(self, store: &Store) -> crate::Result<Staged> {
        store.stage_reader(self)
    }
}

impl WorkOutput for Staged {
    fn stage_into(self, _store: &Store) -> crate::Result<Staged> {
        Ok(self)
    }
}

/// Wraps any reader as work output: it is streamed into staging with constant memory.
#[derive(Debug)]
pub struct Reader<R>(pub R);

impl<R: Read> WorkOutput for Reader<R> {
    fn stage_into(self, store: &Store) -> crate::Result<Staged> {
        store.stage_reader(self.0)
    }
}

/// Who runs a unit in this process right now: the holder's worker name, token and lease expiry.
#[derive(Clone, Debug)]
struct Running {
    worker: String,
    token: u64,
    until_ms: u64,
}

/// Units whose work runs in this process, keyed by (store identity, unit). The store identity is
/// the address of its shared state, which cannot be reused while a guard exists because the guard
/// borrows the store.
type RunningMap = HashMap<(usize, String), Running>;
static RUNNING: LazyLock<Mutex<RunningMap>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Membership in [`RUNNING`]; leaving (also by unwinding from a panicking work closure) frees it.
/// It holds a handle to the store so that the store's identity cannot be reused while it exists.
#[derive(Debug)]
struct RunGuard {
    key: (usize, String),
    _store: Store,
}

impl RunGuard {
    /// Enters the unit, or returns who is already running it.
    fn enter(store: &Store, unit: &str, lease: &Lease) -> Result<Self, Running> {
        let key = (Arc::as_ptr(&store.inner) as usize, unit.to_string());
        let mut running = RUNNING.lock();
        if let Some(r) = running.get(&key) {
            return Err(r.clone());
        }
        running.insert(
            key.clone(),
            Running {
                worker: lease.worker.clone(),
                token: lease.token,
                until_ms: lease.expires_at_ms,
            },
        );
        Ok(RunGuard {
            key,
            _store: store.clone(),
        })
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        RUNNING.lock().remove(&self.key);
    }
}

impl Store {
    /// Runs `work` for `unit` at `source_version` at most once: claims the unit for `worker` for
    /// `ttl`, runs the work, stages its output and commits it carrying the lease's fencing token.
    ///
    /// - Already committed at this version or newer: [`RunOutcome::AlreadyDone`], work not run.
    /// - Another worker holds a live lease, or another thread of this process is running the unit:
    ///   [`RunOutcome::BusyElsewhere`], work not run.
    /// - Otherwise the work runs once and [`RunOutcome::Processed`] carries the commit outcome.
    ///
    /// If the work returns an error, or its output cannot be staged, the lease is released so that
    /// another worker can retry at once. If the process dies instead, the lease simply expires after
    /// `ttl` and another worker takes the unit over with a higher token; a late commit of the dead
    /// holder would then be fenced. A panic in the work is treated like a crash: the in-process
    /// guard is freed while unwinding, the lease is left to expire. Pick a `ttl` longer than the
    /// work takes, or renew the lease ([`Store::renew`]) from inside long work.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use oncelake::{RunOutcome, Store};
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("lake"))?;
    /// let ttl = Duration::from_secs(30);
    /// let first = store.run_once("orders/day=1", 1, "w1", ttl, || {
    ///     Ok::<_, std::io::Error>(b"rows".to_vec())
    /// })?;
    /// assert!(first.committed_here());
    /// // A retry does not run the work again.
    /// let again = store.run_once("orders/day=1", 1, "w2", ttl, || -> Result<Vec<u8>, std::io::Error> {
    ///     unreachable!("already done")
    /// })?;
    /// assert!(matches!(again, RunOutcome::AlreadyDone(_)));
    /// # Ok(()) }
    /// ```
    pub fn run_once<O, E, F>(
        &self,
        unit: &str,
        source_version: u64,
        worker: &str,
        ttl: Duration,
        work: F,
    ) -> Result<RunOutcome, RunError<E>>
    where
        F: FnOnce() -> Result<O, E>,
        O: WorkOutput,
    {
        // The in-memory dedup index answers the common "done already" case without a write.
        if let Some(entry) = self.done_entry(unit, source_version)? {
            return Ok(self.already_done(entry));
        }
        let lease = match self.claim(unit, source_version, worker, ttl)? {
            ClaimOutcome::Granted { lease, .. } => lease,
            ClaimOutcome::Held {
                worker,
                expires_at_ms,
            } => return Ok(self.busy(worker, expires_at_ms)),
            ClaimOutcome::AlreadyDone(entry) => return Ok(self.already_done(entry)),
        };
        let _guard = match RunGuard::enter(self, unit, &lease) {
            Ok(g) => g,
            Err(running) => {
                // Another thread of this process runs the unit. If it holds the very same lease
                // (same worker name: an extension), the lease is its, not ours to give back. If we
                // took over its expired lease, ours is newer and would fence it; give ours back so
                // that its commit is only fenced if someone else really takes over.
                if running.token != lease.token {
                    let _ = self.release(&lease);
                }
                return Ok(self.busy(running.worker, running.until_ms));
            }
        };
        // A thread that ran the unit may have committed between our claim and our guard.
        if let Some(entry) = self.done_entry(unit, source_version)? {
            let _ = self.release(&lease);
            return Ok(self.already_done(entry));
        }
        add(&self.inner.metrics.c.computations, 1);
        let staged = match work() {
            Ok(out) => match out.stage_into(self) {
                Ok(s) => s,
                Err(e) => {
                    let _ = self.release(&lease);
                    return Err(RunError::Engine(e));
                }
            },
            Err(e) => {
                let _ = self.release(&lease);
                return Err(RunError::Work(e));
            }
        };
        let batch = Batch::new().put_fenced(unit, source_version, &staged, lease.token);
        let mut report = match self.commit(batch) {
            Ok(r) => r,
            Err(e) => {
                let _ = self.release(&lease);
                return Err(RunError::Engine(e));
            }
        };
        let outcome = report.units.remove(0);
        if !matches!(outcome.outcome, Outcome::Committed { .. }) {
            // A committed entry ended the lease in the same transaction; any other outcome leaves
            // it live, and the unit no longer needs it.
            add(&self.inner.metrics.c.redundant_computations, 1);
            let _ = self.release(&lease);
        }
        Ok(RunOutcome::Processed(outcome))
    }

    /// Optimistic mode (SPEC R10, the seed's "distributed idempotency check"): runs `work` for
    /// `unit` at `source_version` without a claim, stages its output and commits it; a concurrent
    /// or repeated run of the same deterministic work collapses into a `Duplicate` at commit
    /// (counted as a redundant computation).
    ///
    /// A unit already committed at `source_version` or newer answers [`RunOutcome::AlreadyDone`]
    /// without running the work (the in-memory dedup index, no write). That check cannot stop two
    /// workers that both check before either commits — which is exactly the redundant work this
    /// mode accepts. Otherwise returns [`RunOutcome::Processed`] or an error.
    pub fn run_optimistic<O, E, F>(
        &self,
        unit: &str,
        source_version: u64,
        work: F,
    ) -> Result<RunOutcome, RunError<E>>
    where
        F: FnOnce() -> Result<O, E>,
        O: WorkOutput,
    {
        crate::key::validate_key(unit)?;
        if let Some(entry) = self.done_entry(unit, source_version)? {
            return Ok(self.already_done(entry));
        }
        add(&self.inner.metrics.c.computations, 1);
        let staged = work().map_err(RunError::Work)?.stage_into(self)?;
        let mut report = self.commit(Batch::new().put(unit, source_version, &staged))?;
        let outcome = report.units.remove(0);
        if !matches!(outcome.outcome, Outcome::Committed { .. }) {
            add(&self.inner.metrics.c.redundant_computations, 1);
        }
        Ok(RunOutcome::Processed(outcome))
    }

    /// Counts and answers a run that found the unit done.
    fn already_done(&self, entry: Entry) -> RunOutcome {
        add(&self.inner.metrics.c.runs_already_done, 1);
        RunOutcome::AlreadyDone(entry)
    }

    /// Counts and answers a run that found the unit held by `worker` until `until_ms`.
    fn busy(&self, worker: String, until_ms: u64) -> RunOutcome {
        add(&self.inner.metrics.c.runs_busy, 1);
        RunOutcome::BusyElsewhere { worker, until_ms }
    }

    /// The unit's entry if it is committed at `source_version` or newer.
    fn done_entry(&self, unit: &str, source_version: u64) -> crate::Result<Option<Entry>> {
        if !self.is_done(unit, source_version)? {
            return Ok(None);
        }
        Ok(self
            .get(unit)?
            .filter(|e| e.source_version >= source_version))
    }
}

/// What [`Store::begin_run`] found: the unit is yours to compute, or there is nothing to do.
#[derive(Debug)]
pub enum Begin {
    /// The unit is claimed for you: compute its output and [`Run::commit`] it.
    Claimed(Run),
    /// The unit was already committed at (or above) the version; do not compute it.
    AlreadyDone(Entry),
    /// Another worker holds a live lease on the unit (or another handle of this process is running
    /// it); do not compute it. Try again after `until_ms` if the unit is still not done.
    Busy {
        /// Who holds the unit.
        worker: String,
        /// When that lease may be taken over, ms since the Unix epoch.
        until_ms: u64,
    },
}

/// A unit claimed by [`Store::begin_run`]: the handle form of [`Store::run_once`], for callers
/// that cannot pass the work as a closure (a context manager in another language, work split
/// across callbacks). It holds the lease and this process's "running" slot for the unit.
///
/// End it with [`Run::commit`] (stage the output and commit it under the lease) or
/// [`Run::abandon`] (give the lease back, record nothing). Dropping it without either gives the
/// lease back too, except while the thread is panicking: a panic is treated like a crash, exactly
/// as in [`Store::run_once`], and the lease is left to expire.
#[derive(Debug)]
pub struct Run {
    store: Store,
    lease: Lease,
    /// `None` once the run was committed or abandoned.
    guard: Option<RunGuard>,
}

impl Run {
    /// The unit being computed.
    pub fn unit(&self) -> &str {
        &self.lease.unit
    }

    /// The source version being computed.
    pub fn source_version(&self) -> u64 {
        self.lease.source_version
    }

    /// The lease: its fencing token and its expiry.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Extends the lease from inside long work. On [`RenewOutcome::Lost`] the unit was taken over
    /// (the lease had expired): stop working, the commit would be fenced.
    pub fn renew(&mut self, ttl: Duration) -> crate::Result<crate::RenewOutcome> {
        let outcome = self.store.renew(&self.lease, ttl)?;
        if let crate::RenewOutcome::Renewed(lease) = &outcome {
            self.lease = lease.clone();
        }
        Ok(outcome)
    }

    /// Stages `output` and commits it for the unit, carrying the lease's fencing token.
    ///
    /// `Committed` means this run produced the unit's entry (the commit ended the lease). Any other
    /// outcome means the work was redundant (counted in `redundant_computations`) and the lease is
    /// given back: `Duplicate`, `Fenced` (the lease was taken over meanwhile), `Stale` or
    /// `Conflict`. If staging or the commit fails, the lease is given back and the error returned.
    pub fn commit(mut self, output: impl WorkOutput) -> crate::Result<UnitOutcome> {
        let staged = match output.stage_into(&self.store) {
            Ok(s) => s,
            Err(e) => {
                self.give_back();
                return Err(e);
            }
        };
        let lease = &self.lease;
        let batch =
            Batch::new().put_fenced(&lease.unit, lease.source_version, &staged, lease.token);
        let mut report = match self.store.commit(batch) {
            Ok(r) => r,
            Err(e) => {
                self.give_back();
                return Err(e);
            }
        };
        let outcome = report.units.remove(0);
        if matches!(outcome.outcome, Outcome::Committed { .. }) {
            // The committed entry ended the lease in the same transaction.
            self.guard = None;
        } else {
            add(&self.store.inner.metrics.c.redundant_computations, 1);
            self.give_back();
        }
        Ok(outcome)
    }

    /// Gives the lease back without recording anything, so that another worker may compute the
    /// unit at once. `Ok(false)` if the lease was no longer this run's (taken over meanwhile).
    pub fn abandon(mut self) -> crate::Result<bool> {
        self.guard = None;
        let released = self.store.release(&self.lease)?;
        Ok(released == crate::ReleaseOutcome::Released)
    }

    /// Releases the lease (errors ignored: the lease then simply expires) and leaves the slot.
    fn give_back(&mut self) {
        self.guard = None;
        let _ = self.store.release(&self.lease);
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.guard.is_some() && !std::thread::panicking() {
            self.give_back();
        }
    }
}

impl Store {
    /// Begins running `unit` at `source_version` at most once, as [`Store::run_once`] does, but
    /// returns a handle instead of calling a closure: already committed at this version or newer
    /// gives [`Begin::AlreadyDone`]; a live lease of another worker, or another run of this unit
    /// in this process, gives [`Begin::Busy`]; otherwise the unit is claimed for `worker` for `ttl`
    /// and [`Begin::Claimed`] carries the [`Run`] (counted as a computation).
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// use oncelake::{Begin, Store};
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("lake"))?;
    /// let ttl = Duration::from_secs(30);
    /// let Begin::Claimed(run) = store.begin_run("orders/day=1", 1, "w1", ttl)? else { panic!() };
    /// assert!(matches!(store.begin_run("orders/day=1", 1, "w2", ttl)?, Begin::Busy { .. }));
    /// assert_eq!(run.commit(b"rows".to_vec())?.outcome.name(), "committed");
    /// assert!(matches!(store.begin_run("orders/day=1", 1, "w2", ttl)?, Begin::AlreadyDone(_)));
    /// # Ok(()) }
    /// ```
    pub fn begin_run(
        &self,
        unit: &str,
        source_version: u64,
        worker: &str,
        ttl: Duration,
    ) -> crate::Result<Begin> {
        if let Some(entry) = self.done_entry(unit, source_version)? {
            return Ok(Begin::AlreadyDone(entry));
        }
        let lease = match self.claim(unit, source_version, worker, ttl)? {
            ClaimOutcome::Granted { lease, .. } => lease,
            ClaimOutcome::Held {
                worker,
                expires_at_ms,
            } => {
                return Ok(Begin::Busy {
                    worker,
                    until_ms: expires_at_ms,
                })
            }
            ClaimOutcome::AlreadyDone(entry) => return Ok(Begin::AlreadyDone(entry)),
        };
        let guard = match RunGuard::enter(self, unit, &lease) {
            Ok(g) => g,
            Err(running) => {
                // As in run_once: give back a lease that is ours and newer than the running one's.
                if running.token != lease.token {
                    let _ = self.release(&lease);
                }
                return Ok(Begin::Busy {
                    worker: running.worker,
                    until_ms: running.until_ms,
                });
            }
        };
        if let Some(entry) = self.done_entry(unit, source_version)? {
            drop(guard);
            let _ = self.release(&lease);
            return Ok(Begin::AlreadyDone(entry));
        }
        add(&self.inner.metrics.c.computations, 1);
        Ok(Begin::Claimed(Run {
            store: self.clone(),
            lease,
            guard: Some(guard),
        }))
    }
}
