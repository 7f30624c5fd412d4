//! Running a unit's work exactly once (SPEC R11, R10): [`Store::run_once`] claims the unit, runs
//! the work, stages its output and commits it with the lease's fencing token; it is the seed 001
//! `process_batch` without its check-then-act race. [`Store::run_optimistic`] is the coordinator-free
//! counterpart (SPEC R10): it always computes and lets the commit rules collapse duplicates.
//!
//! One coordination path: [`Store::run_once_many`] and [`Store::run_optimistic_many`] do the same
//! for a batch of units with one claim transaction and one partial commit, and the single-unit
//! forms are those batch forms called with one unit; [`Store::begin_run`] shares the claim half.
//!
//! All of them count, where the work really runs, `computations` (work closures run) and
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
use crate::metrics::add;
use crate::schema::manifest::Entry;
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
        let key = (Arc::as_ptr(store.core()) as usize, unit.to_string());
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

/// One answer per unit of a batched run ([`Store::run_once_many`], [`Store::run_optimistic_many`]),
/// in the order of the units asked for.
pub type RunAnswers<E> = Vec<Result<RunOutcome, RunError<E>>>;

/// A unit of a batch that is claimed for this call and entered in this process's running map: its
/// work may run. Dropping it leaves the map but keeps the lease (a crash); give it back with
/// [`Store::give_back`].
#[derive(Debug)]
struct Holding {
    /// Position in the batch.
    index: usize,
    lease: Lease,
    guard: RunGuard,
}

/// A holding whose work ran and whose output is staged, waiting for the batch's commit.
struct Produced {
    holding: Holding,
    staged: Staged,
}

/// One answer slot per unit, none filled yet (see [`finish`]).
type Slots<E> = Vec<Option<Result<RunOutcome, RunError<E>>>>;

/// Refuses a batch with a bad key or a unit listed twice, before anything is claimed or run;
/// otherwise the batch's empty answer slots.
fn validate_units<E>(units: &[(&str, u64)]) -> crate::Result<Slots<E>> {
    let mut seen = std::collections::HashSet::with_capacity(units.len());
    for (unit, _) in units {
        crate::key::validate_key(unit)?;
        if !seen.insert(*unit) {
            return Err(Error::InvalidRequest(format!(
                "unit {unit:?} appears twice in one batched run; list each unit once"
            )));
        }
    }
    Ok(units.iter().map(|_| None).collect())
}

/// Takes the answers once every unit has one.
fn finish<E>(answers: Slots<E>) -> RunAnswers<E> {
    answers
        .into_iter()
        .map(|a| a.expect("invariant: every unit of a batched run is answered"))
        .collect()
}

/// A batched run (`many`) of one unit: its one `work`, and its one answer.
fn single<O, E, F, M>(work: F, many: M) -> Result<RunOutcome, RunError<E>>
where
    F: FnOnce() -> Result<O, E>,
    M: FnOnce(&mut dyn FnMut(usize) -> Result<O, E>) -> crate::Result<RunAnswers<E>>,
{
    let mut work = Some(work);
    let mut answers = many(&mut |_| {
        let work = work
            .take()
            .expect("invariant: a batched run calls each unit's work at most once");
        work()
    })?;
    answers
        .pop()
        .expect("invariant: a batched run answers every unit")
}

impl Store {
    /// Runs `work` for `unit` at `source_version` at most once: claims the unit for `worker` for
    /// `ttl`, runs the work, stages its output and commits it carrying the lease's fencing token.
    /// It is [`Store::run_once_many`] for a batch of one.
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
        single(work, |work| {
            self.run_once_many(&[(unit, source_version)], worker, ttl, work)
        })
    }

    /// [`Store::run_once`] for many units at once, with two write transactions for the whole batch
    /// instead of two per unit: one [`Store::claim_many`] for the units not already done, and one
    /// partial commit ([`Batch::partial`]) of every output produced, each fenced by its own lease's
    /// token. Each unit gets exactly the answer (and the same metrics) `run_once` would give it:
    ///
    /// - already committed at its version or newer → [`RunOutcome::AlreadyDone`];
    /// - held by another worker's live lease, or run by another thread of this process →
    ///   [`RunOutcome::BusyElsewhere`];
    /// - otherwise `work(i)` runs (`i` is the unit's position in `units`; the works run one after the
    ///   other in the order of `units`, after every claim was decided), its output is staged at once,
    ///   and [`RunOutcome::Processed`] carries its own commit outcome (a fenced, stale or conflicting
    ///   unit does not hold the others back);
    /// - the work failed or its output could not be staged → `Err(RunError::Work | Engine)` for that
    ///   unit, its lease released.
    ///
    /// The outer `Err` is for the batch as a whole: a bad key or a unit listed twice (refused before
    /// anything is claimed), or a claim or commit the engine could not decide (then every lease this
    /// call was granted is given back). A panic in a work is a crash of the whole batch: the
    /// in-process guards are freed while unwinding, every lease of the batch is left to expire, and
    /// outputs already staged are not committed.
    ///
    /// ```
    /// # fn main() -> oncelake::Result<()> {
    /// use oncelake::{RunOutcome, Store};
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("lake"))?;
    /// let ttl = Duration::from_secs(30);
    /// store.put("b", 1, b"done before")?;
    /// let units = [("a", 1), ("b", 1), ("c", 1)];
    /// let answers = store.run_once_many(&units, "w1", ttl, |i| {
    ///     Ok::<_, std::io::Error>(format!("output of {}", units[i].0).into_bytes())
    /// })?;
    /// assert!(answers[0].as_ref().is_ok_and(|a| a.committed_here()));
    /// assert!(matches!(answers[1], Ok(RunOutcome::AlreadyDone(_))));
    /// assert!(answers[2].as_ref().is_ok_and(|a| a.committed_here()));
    /// # Ok(()) }
    /// ```
    pub fn run_once_many<O, E, F>(
        &self,
        units: &[(&str, u64)],
        worker: &str,
        ttl: Duration,
        mut work: F,
    ) -> crate::Result<RunAnswers<E>>
    where
        F: FnMut(usize) -> Result<O, E>,
        O: WorkOutput,
    {
        let mut answers = validate_units(units)?;
        let holdings = self.claim_phase(units, worker, ttl, &mut |i, outcome| {
            answers[i] = Some(Ok(outcome));
        })?;
        let mut produced = Vec::with_capacity(holdings.len());
        for holding in holdings {
            let i = holding.index;
            match self.compute(&mut work, i) {
                Ok(staged) => produced.push(Produced { holding, staged }),
                Err(e) => {
                    self.give_back(holding);
                    answers[i] = Some(Err(e));
                }
            }
        }
        self.commit_produced(units, produced, &mut |i, outcome| {
            answers[i] = Some(Ok(outcome));
        })?;
        Ok(finish(answers))
    }

    /// The first half of a coordinated run, shared by [`Store::run_once_many`] (and so
    /// [`Store::run_once`]) and [`Store::begin_run`]: the dedup-index check, one claim for the
    /// units not done, the in-process guard and the re-check. Units that will not run are answered
    /// through `answer` (and counted); the ones claimed for this call are returned, in the order of
    /// `units`.
    fn claim_phase(
        &self,
        units: &[(&str, u64)],
        worker: &str,
        ttl: Duration,
        answer: &mut dyn FnMut(usize, RunOutcome),
    ) -> crate::Result<Vec<Holding>> {
        let to_claim = self.not_done(units, answer)?;
        if to_claim.is_empty() {
            return Ok(Vec::new());
        }
        let asked: Vec<(&str, u64)> = to_claim.iter().map(|&i| units[i]).collect();
        let claims = self.claim_many(&asked, worker, ttl)?;
        let mut granted = Vec::with_capacity(claims.len());
        for (&i, claim) in to_claim.iter().zip(claims) {
            match claim {
                ClaimOutcome::Granted { lease, .. } => granted.push((i, lease)),
                ClaimOutcome::Held {
                    worker,
                    expires_at_ms,
                } => answer(i, self.busy(worker, expires_at_ms)),
                ClaimOutcome::AlreadyDone(entry) => answer(i, self.already_done(entry)),
            }
        }
        self.enter_granted(units, granted, answer)
    }

    /// Enters every granted unit in this process's running map and re-checks that it is still not
    /// done. On an error every lease not yet handed out is given back.
    fn enter_granted(
        &self,
        units: &[(&str, u64)],
        granted: Vec<(usize, Lease)>,
        answer: &mut dyn FnMut(usize, RunOutcome),
    ) -> crate::Result<Vec<Holding>> {
        let mut holdings = Vec::with_capacity(granted.len());
        let mut granted = granted.into_iter();
        while let Some((i, lease)) = granted.next() {
            let (unit, version) = units[i];
            let guard = match RunGuard::enter(self, unit, &lease) {
                Ok(g) => g,
                Err(running) => {
                    // Another thread of this process runs the unit. If it holds the very same
                    // lease (same worker name: an extension), the lease is its, not ours to give
                    // back. If we took over its expired lease, ours is newer and would fence it;
                    // give ours back so that its commit is only fenced if someone else really
                    // takes over.
                    if running.token != lease.token {
                        let _ = self.release(&lease);
                    }
                    answer(i, self.busy(running.worker, running.until_ms));
                    continue;
                }
            };
            let holding = Holding {
                index: i,
                lease,
                guard,
            };
            // A thread that ran the unit may have committed between our claim and our guard.
            match self.done_entry(unit, version) {
                Ok(None) => holdings.push(holding),
                Ok(Some(entry)) => {
                    self.give_back(holding);
                    answer(i, self.already_done(entry));
                }
                Err(e) => {
                    self.give_back(holding);
                    for h in holdings {
                        self.give_back(h);
                    }
                    for (_, lease) in granted {
                        let _ = self.release(&lease);
                    }
                    return Err(e);
                }
            }
        }
        Ok(holdings)
    }

    /// The second half of a coordinated run: one partial commit of every produced output, each
    /// fenced by its lease's token. A unit whose output did not become its entry is a redundant
    /// computation and its lease, which the commit did not end, is given back.
    fn commit_produced(
        &self,
        units: &[(&str, u64)],
        produced: Vec<Produced>,
        answer: &mut dyn FnMut(usize, RunOutcome),
    ) -> crate::Result<()> {
        if produced.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::new().partial();
        for p in &produced {
            let (unit, version) = units[p.holding.index];
            batch = batch.put_fenced(unit, version, &p.staged, p.holding.lease.token);
        }
        let report = match self.commit(batch) {
            Ok(r) => r,
            Err(e) => {
                for p in produced {
                    self.give_back(p.holding);
                }
                return Err(e);
            }
        };
        for (p, outcome) in produced.into_iter().zip(report.units) {
            let i = p.holding.index;
            if matches!(outcome.outcome, Outcome::Committed { .. }) {
                // The committed entry ended the lease in the same transaction.
                drop(p.holding.guard);
            } else {
                add(&self.core().metrics.c.redundant_computations, 1);
                self.give_back(p.holding);
            }
            answer(i, RunOutcome::Processed(outcome));
        }
        Ok(())
    }

    /// Releases a holding's lease (errors ignored: the lease then simply expires), then leaves the
    /// running map.
    fn give_back(&self, holding: Holding) {
        let _ = self.release(&holding.lease);
        drop(holding.guard);
    }

    /// Optimistic mode (SPEC R10, the seed's "distributed idempotency check"): runs `work` for
    /// `unit` at `source_version` without a claim, stages its output and commits it; a concurrent
    /// or repeated run of the same deterministic work collapses into a `Duplicate` at commit
    /// (counted as a redundant computation). It is [`Store::run_optimistic_many`] for a batch of
    /// one.
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
        single(work, |work| {
            self.run_optimistic_many(&[(unit, source_version)], work)
        })
    }

    /// [`Store::run_optimistic`] for many units at once, with one write transaction for the batch:
    /// every unit the in-memory dedup index says is done answers [`RunOutcome::AlreadyDone`]; for
    /// the others `work(i)` runs (in the order of `units`, after every unit was checked) and its
    /// output is staged; then one partial commit ([`Batch::partial`]) of all outputs gives each
    /// unit its own [`RunOutcome::Processed`] outcome — a `Duplicate` where another worker's
    /// identical output came first (a redundant computation). A unit whose work failed, or whose
    /// output could not be staged, gets `Err(RunError::Work | Engine)`; the others go on.
    ///
    /// The outer `Err` is for the batch as a whole: a bad key or a unit listed twice (refused
    /// before any work runs), or a commit the engine could not decide.
    pub fn run_optimistic_many<O, E, F>(
        &self,
        units: &[(&str, u64)],
        mut work: F,
    ) -> crate::Result<RunAnswers<E>>
    where
        F: FnMut(usize) -> Result<O, E>,
        O: WorkOutput,
    {
        let mut answers = validate_units(units)?;
        let to_run = self.not_done(units, &mut |i, outcome| answers[i] = Some(Ok(outcome)))?;
        let mut produced: Vec<(usize, Staged)> = Vec::with_capacity(to_run.len());
        for i in to_run {
            match self.compute(&mut work, i) {
                Ok(staged) => produced.push((i, staged)),
                Err(e) => answers[i] = Some(Err(e)),
            }
        }
        if !produced.is_empty() {
            let mut batch = Batch::new().partial();
            for (i, staged) in &produced {
                batch = batch.put(units[*i].0, units[*i].1, staged);
            }
            let report = self.commit(batch)?;
            for ((i, _), outcome) in produced.iter().zip(report.units) {
                if !matches!(outcome.outcome, Outcome::Committed { .. }) {
                    add(&self.core().metrics.c.redundant_computations, 1);
                }
                answers[*i] = Some(Ok(RunOutcome::Processed(outcome)));
            }
        }
        Ok(finish(answers))
    }

    /// The positions of the units not yet committed at their version or newer, in the order of
    /// `units`; the others are answered (and counted) as done. The in-memory dedup index answers
    /// the common "done already" case without a write.
    fn not_done(
        &self,
        units: &[(&str, u64)],
        answer: &mut dyn FnMut(usize, RunOutcome),
    ) -> crate::Result<Vec<usize>> {
        let mut rest = Vec::with_capacity(units.len());
        for (i, &(unit, version)) in units.iter().enumerate() {
            match self.done_entry(unit, version)? {
                Some(entry) => answer(i, self.already_done(entry)),
                None => rest.push(i),
            }
        }
        Ok(rest)
    }

    /// Runs `work(i)` (counted as a computation) and stages its output.
    fn compute<O, E, F>(&self, work: &mut F, i: usize) -> Result<Staged, RunError<E>>
    where
        F: FnMut(usize) -> Result<O, E>,
        O: WorkOutput,
    {
        add(&self.core().metrics.c.computations, 1);
        work(i)
            .map_err(RunError::Work)
            .and_then(|out| out.stage_into(self).map_err(RunError::Engine))
    }

    /// Counts and answers a run that found the unit done.
    fn already_done(&self, entry: Entry) -> RunOutcome {
        add(&self.core().metrics.c.runs_already_done, 1);
        RunOutcome::AlreadyDone(entry)
    }

    /// Counts and answers a run that found the unit held by `worker` until `until_ms`.
    fn busy(&self, worker: String, until_ms: u64) -> RunOutcome {
        add(&self.core().metrics.c.runs_busy, 1);
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

    /// Extends the lease from inside long work. On [`Lost`](crate::RenewOutcome::Lost) the unit
    /// was taken over (the lease had expired): stop working, the commit would be fenced.
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
            add(&self.store.core().metrics.c.redundant_computations, 1);
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
    /// and [`Begin::Claimed`] carries the [`Run`] (counted as a computation). The first half is
    /// run_once's own code (index check, claim, in-process guard, re-check), so the answers that
    /// do not run are counted in `runs_already_done` and `runs_busy` as run_once counts them.
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
        validate_units::<Error>(&[(unit, source_version)])?;
        // The same first half as run_once: one coordination path.
        let mut answer = None;
        let mut holdings =
            self.claim_phase(&[(unit, source_version)], worker, ttl, &mut |_, outcome| {
                answer = Some(outcome);
            })?;
        let Some(Holding { lease, guard, .. }) = holdings.pop() else {
            return Ok(match answer {
                Some(RunOutcome::AlreadyDone(entry)) => Begin::AlreadyDone(entry),
                Some(RunOutcome::BusyElsewhere { worker, until_ms }) => {
                    Begin::Busy { worker, until_ms }
                }
                other => unreachable!(
                    "invariant: a unit not claimed is answered done or busy, got {other:?}"
                ),
            });
        };
        add(&self.core().metrics.c.computations, 1);
        Ok(Begin::Claimed(Run {
            store: self.clone(),
            lease,
            guard: Some(guard),
        }))
    }
}
