//! Model-based property test (SPEC §4): random sequences of stage / commit / correct / multi-unit
//! commit / claim / renew / release / clock jumps / reopen — commits carrying no token, the
//! newest token, an older one, another unit's or a forged one — against a `BTreeMap` model of what
//! must be in the store and of every unit's newest lease, with I1, I2, I5, I6 and I7 asserted after
//! every step. The model decides R3 (lease rows included) and claims on its own, independently of
//! the engine's rules; `Store::check_invariants` also checks I6 from the commit log alone.

use crate::common;

use common::open_with_clock as open;
use oncelake::{
    Batch, ClaimOutcome, Intent, ManualClock, ObjectId, Outcome, ReleaseOutcome, RenewOutcome,
    Store,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

const UNITS: [&str; 4] = ["a", "b/1", "b/2", "c"];
const WORKERS: [&str; 3] = ["w0", "w1", "w2"];
const T0: u64 = 1_800_000_000_000;

/// Which token a request carries, resolved against the model when it runs.
#[derive(Clone, Copy, Debug)]
enum Tok {
    /// None at all.
    None,
    /// The newest token issued for the unit (if any; else a forged one).
    Newest,
    /// An earlier token of the unit (if any; else a forged one).
    Older,
    /// The newest token of another unit.
    Foreign,
    /// A token never issued: this far beyond the counter.
    Forged(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Put {
        unit: usize,
        version: u64,
        content: u8,
        tok: Tok,
    },
    Correct {
        unit: usize,
        version: u64,
        content: u8,
        tok: Tok,
    },
    Multi {
        items: Vec<(usize, u64, u8, Tok)>,
        partial: bool,
    },
    Claim {
        unit: usize,
        version: u64,
        worker: usize,
        ttl_ms: u64,
    },
    Renew {
        unit: usize,
        worker: usize,
        tok: Tok,
        ttl_ms: u64,
    },
    Release {
        unit: usize,
        worker: usize,
        tok: Tok,
    },
    Advance {
        ms: u64,
    },
    Reopen,
}

fn tok() -> impl Strategy<Value = Tok> {
    prop_oneof![
        4 => Just(Tok::None),
        4 => Just(Tok::Newest),
        1 => Just(Tok::Older),
        1 => Just(Tok::Foreign),
        1 => (0..1000u64).prop_map(Tok::Forged),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let u = 0..UNITS.len();
    prop_oneof![
        6 => (u.clone(), 0..4u64, 0..3u8, tok()).prop_map(|(unit, version, content, tok)| Op::Put { unit, version, content, tok }),
        2 => (u.clone(), 0..4u64, 0..3u8, tok()).prop_map(|(unit, version, content, tok)| Op::Correct { unit, version, content, tok }),
        2 => (proptest::collection::vec((u.clone(), 0..4u64, 0..3u8, tok()), 1..4), any::<bool>())
            .prop_map(|(items, partial)| Op::Multi { items, partial }),
        4 => (u.clone(), 0..5u64, 0..WORKERS.len(), 1..60_000u64)
            .prop_map(|(unit, version, worker, ttl_ms)| Op::Claim { unit, version, worker, ttl_ms }),
        1 => (u.clone(), 0..WORKERS.len(), tok(), 1..60_000u64)
            .prop_map(|(unit, worker, tok, ttl_ms)| Op::Renew { unit, worker, tok, ttl_ms }),
        2 => (u, 0..WORKERS.len(), tok()).prop_map(|(unit, worker, tok)| Op::Release { unit, worker, tok }),
        2 => (0..40_000u64).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Reopen),
    ]
}

fn bytes(unit: usize, version: u64, content: u8) -> Vec<u8> {
    // Content depends on the unit and version too, so equal `content` means equal output for the
    // same (unit, version) only: a retry, not an accident.
    format!("{unit}:{version}:{content}").into_bytes()
}

#[derive(Clone, Debug, PartialEq)]
struct M {
    version: u64,
    revision: u32,
    object: ObjectId,
    seq: u64,
}

impl M {
    fn of(e: &oncelake::Entry) -> M {
        M {
            version: e.source_version,
            revision: e.revision,
            object: e.object.id,
            seq: e.seq,
        }
    }
}

/// A unit's newest lease, as the model keeps it.
#[derive(Clone, Debug)]
struct ML {
    token: u64,
    worker: String,
    version: u64,
    expires: u64,
    /// Released, or ended by an applied commit of the unit.
    ended: bool,
    /// With `ended`: released by its holder (its token is fenced even for an exact retry).
    released: bool,
}

#[derive(Default)]
struct Model {
    current: BTreeMap<String, M>,
    /// Every entry ever committed per unit, for "late retry of a corrected output".
    history: BTreeMap<String, Vec<M>>,
    seq: u64,
    now: u64,
    next_token: u64,
    /// Every token issued per unit, oldest first.
    issued: BTreeMap<String, Vec<u64>>,
    leases: BTreeMap<String, ML>,
}

/// One unit of a commit, as the model sees it.
struct Item {
    unit: String,
    version: u64,
    object: ObjectId,
    correct: bool,
    token: Option<u64>,
}

impl Model {
    fn new() -> Model {
        Model {
            now: T0,
            next_token: 1,
            ..Model::default()
        }
    }

    /// The token `tok` stands for on `unit` now.
    fn token(&self, unit: usize, tok: Tok) -> Option<u64> {
        let mine = self.issued.get(UNITS[unit]);
        let forged = self.next_token + 1_000_000;
        match tok {
            Tok::None => None,
            Tok::Newest => Some(mine.and_then(|v| v.last().copied()).unwrap_or(forged)),
            Tok::Older => Some(
                mine.and_then(|v| v.len().checked_sub(2).map(|i| v[i]))
                    .unwrap_or(forged),
            ),
            Tok::Foreign => Some(
                self.issued
                    .get(UNITS[(unit + 1) % UNITS.len()])
                    .and_then(|v| v.last().copied())
                    .unwrap_or(forged),
            ),
            Tok::Forged(k) => Some(self.next_token + k),
        }
    }

    /// R3's version rows: Ok(revision) when it would be accepted.
    fn versions(&self, it: &Item) -> Result<u32, Outcome> {
        let Some(cur) = self.current.get(&it.unit) else {
            return Ok(0);
        };
        if it.version > cur.version {
            return Ok(0);
        }
        if it.version < cur.version {
            return Err(Outcome::Stale {
                current_version: cur.version,
            });
        }
        if it.object == cur.object {
            return Err(Outcome::Duplicate { seq: cur.seq });
        }
        if it.correct {
            return Ok(cur.revision + 1);
        }
        if let Some(old) = self.history[&it.unit]
            .iter()
            .find(|m| m.version == it.version && m.object == it.object)
        {
            return Err(Outcome::Duplicate { seq: old.seq });
        }
        Err(Outcome::Conflict {
            winner_seq: cur.seq,
            winner: cur.object,
        })
    }

    /// The expected outcome for one unit, or Ok(revision) when it would be accepted: first the
    /// lease rows (R3 fenced and busy, R9), then the version rows.
    fn decide(&self, it: &Item) -> Result<u32, Outcome> {
        let lease = self.leases.get(&it.unit);
        match it.token {
            Some(t) => {
                let issued_here = self.issued.get(&it.unit).is_some_and(|v| v.contains(&t));
                let newest = lease.is_some_and(|l| l.token == t);
                let ended = lease.is_some_and(|l| l.ended);
                let by_versions = self.versions(it);
                if issued_here && newest && !ended {
                    return by_versions;
                }
                // The newest token of a lease ended by a commit may only hear that its output is
                // there; a released one is fenced whatever it carries.
                let released = lease.is_some_and(|l| l.released);
                if issued_here
                    && newest
                    && !released
                    && matches!(by_versions, Err(Outcome::Duplicate { .. }))
                {
                    return by_versions;
                }
                Err(Outcome::Fenced {
                    token: t,
                    newest_token: lease.map_or(0, |l| l.token),
                })
            }
            None => match lease {
                Some(l) if !l.ended && self.now < l.expires => Err(Outcome::Busy {
                    expires_at_ms: l.expires,
                }),
                _ => self.versions(it),
            },
        }
    }

    /// Applies a batch to the model and returns the expected outcomes with, for busy units, the
    /// expected holder.
    fn commit(&mut self, items: &[Item], partial: bool) -> Vec<(Outcome, Option<String>)> {
        let decided: Vec<_> = items.iter().map(|it| self.decide(it)).collect();
        let rejected = decided
            .iter()
            .any(|d| matches!(d, Err(o) if !matches!(o, Outcome::Duplicate { .. })));
        let applies = partial || !rejected;
        let any_accept = decided.iter().any(|d| d.is_ok());
        let seq = if applies && any_accept {
            self.seq + 1
        } else {
            0
        };
        if seq != 0 {
            self.seq = seq;
        }
        items
            .iter()
            .zip(decided)
            .map(|(it, d)| match d {
                Ok(revision) if seq != 0 => {
                    let superseded = self.current.get(&it.unit).map(|m| m.version);
                    let m = M {
                        version: it.version,
                        revision,
                        object: it.object,
                        seq,
                    };
                    self.current.insert(it.unit.clone(), m.clone());
                    self.history.entry(it.unit.clone()).or_default().push(m);
                    // An applied commit ends the unit's lease: no earlier token commits after it.
                    if let Some(l) = self.leases.get_mut(&it.unit) {
                        l.ended = true;
                    }
                    (
                        Outcome::Committed {
                            seq,
                            revision,
                            superseded,
                        },
                        None,
                    )
                }
                Ok(_) => (Outcome::Aborted, None),
                Err(o @ Outcome::Busy { .. }) => {
                    (o, self.leases.get(&it.unit).map(|l| l.worker.clone()))
                }
                Err(o) => (o, None),
            })
            .collect()
    }

    fn live(&self, unit: &str) -> Option<&ML> {
        self.leases
            .get(unit)
            .filter(|l| !l.ended && self.now < l.expires)
    }

    /// R9's claim, as the model grants it.
    fn claim(&mut self, unit: &str, version: u64, worker: &str, ttl: u64) -> ClaimOutcome {
        if let Some(cur) = self.current.get(unit).filter(|c| c.version >= version) {
            return ClaimOutcome::AlreadyDone(oncelake::Entry {
                unit: unit.to_string(),
                source_version: cur.version,
                revision: cur.revision,
                object: oncelake::ObjectMeta {
                    id: cur.object,
                    size: 0,
                    crc32: 0,
                },
                seq: cur.seq,
                committed_at_ms: 0,
            });
        }
        let now = self.now;
        let mut took_over = false;
        if let Some(l) = self.live(unit).cloned() {
            if l.worker != worker {
                return ClaimOutcome::Held {
                    worker: l.worker,
                    expires_at_ms: l.expires,
                };
            }
            if l.version == version {
                let l = self.leases.get_mut(unit).expect("live");
                l.expires = now + ttl;
                self.seq += 1;
                return granted(unit, l, false);
            }
        } else if let Some(l) = self.leases.get(unit) {
            took_over = !l.ended && l.worker != worker;
        }
        let token = self.next_token;
        self.next_token += 1;
        self.seq += 1;
        self.issued.entry(unit.to_string()).or_default().push(token);
        let l = ML {
            token,
            worker: worker.to_string(),
            version,
            expires: now + ttl,
            ended: false,
            released: false,
        };
        let out = granted(unit, &l, took_over);
        self.leases.insert(unit.to_string(), l);
        out
    }

    /// Only the holder renews: its token, its lease not ended, its worker.
    fn renew(&mut self, unit: &str, worker: &str, token: u64, ttl: u64) -> RenewOutcome {
        let now = self.now;
        match self.leases.get_mut(unit) {
            Some(l) if l.token == token && !l.ended && l.worker == worker => {
                l.expires = now + ttl;
                self.seq += 1;
                match granted(unit, l, false) {
                    ClaimOutcome::Granted { lease, .. } => RenewOutcome::Renewed(lease),
                    _ => unreachable!(),
                }
            }
            l => RenewOutcome::Lost {
                newest_token: l.map_or(0, |l| l.token),
            },
        }
    }

    fn release(&mut self, unit: &str, worker: &str, token: u64) -> ReleaseOutcome {
        match self.leases.get_mut(unit) {
            Some(l) if l.token == token && !l.ended => {
                if l.worker != worker {
                    return ReleaseOutcome::NotHolder {
                        holder: l.worker.clone(),
                    };
                }
                l.ended = true;
                l.released = true;
                self.seq += 1;
                ReleaseOutcome::Released
            }
            l => ReleaseOutcome::Lost {
                newest_token: l.map_or(0, |l| l.token),
            },
        }
    }
}

fn granted(unit: &str, l: &ML, took_over: bool) -> ClaimOutcome {
    ClaimOutcome::Granted {
        lease: oncelake::Lease {
            unit: unit.to_string(),
            worker: l.worker.clone(),
            token: l.token,
            source_version: l.version,
            expires_at_ms: l.expires,
        },
        took_over,
    }
}

/// Compares a claim outcome with the model's (an already-done entry by version and seq only).
/// A caller's lease on `unit` for `worker` under `token`, as a hostile or forgetful caller may
/// hand it over (version and end unknown).
fn lease_of(unit: &str, worker: &str, token: u64) -> oncelake::Lease {
    oncelake::Lease {
        unit: unit.to_string(),
        worker: worker.to_string(),
        token,
        source_version: 0,
        expires_at_ms: 0,
    }
}

fn same_claim(got: &ClaimOutcome, want: &ClaimOutcome) -> bool {
    match (got, want) {
        (ClaimOutcome::AlreadyDone(g), ClaimOutcome::AlreadyDone(w)) => {
            (g.source_version, g.seq) == (w.source_version, w.seq)
        }
        _ => got == want,
    }
}

/// Time travel (R7): every older seq still reads exactly as the model stood then.
fn check_history(store: &Store, past: &BTreeMap<u64, BTreeMap<String, M>>) {
    for (&seq, state) in past {
        let snap = store.snapshot_at(seq).unwrap();
        let got: BTreeMap<String, M> = snap
            .iter()
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.unit.clone(), M::of(&e)))
            .collect();
        assert_eq!(&got, state, "as of seq {seq}");
        for (unit, m) in state {
            assert_eq!(
                snap.get(unit).unwrap().map(|e| e.seq),
                Some(m.seq),
                "get {unit} as of seq {seq}"
            );
        }
    }
}

fn check_invariants(store: &Store, model: &Model, previous: &BTreeMap<String, M>) {
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.seq(), model.seq);
    let entries: Vec<_> = snap.iter().unwrap().map(|e| e.unwrap()).collect();
    // I1: exactly one current entry per acknowledged unit, and nothing else.
    let got: BTreeMap<String, M> = entries.iter().map(|e| (e.unit.clone(), M::of(e))).collect();
    assert_eq!(got.len(), entries.len(), "two entries for one unit");
    assert_eq!(got, model.current, "manifest differs from the model");
    for e in &entries {
        // I2: the object exists with the recorded size and CRC32 (read_object checks both) and
        // its content hash.
        let data = snap.read_object(e).unwrap();
        assert_eq!(ObjectId::of(&data), e.object.id);
        // I5: versions never go backwards.
        if let Some(p) = previous.get(&e.unit) {
            assert!(e.source_version >= p.version, "I5: {} went back", e.unit);
        }
        // The dedup fast path agrees with the snapshot.
        let fast = store.lookup(&e.unit).unwrap().unwrap();
        assert_eq!(
            (fast.source_version, fast.object, fast.seq),
            (e.source_version, e.object.id, e.seq)
        );
    }
    // I1, I5, I6 (from the log alone), I7 and the log rules, as the engine states them.
    drop(snap);
    oncelake::invariants::assert_holds(&store.check_invariants().unwrap());
}

/// Runs one commit (a put, a correction or a batch) against the store and the model.
fn run_commit(
    store: &Store,
    model: &mut Model,
    items: &[(usize, u64, u8, Tok)],
    correct: bool,
    partial: bool,
) -> Result<(), TestCaseError> {
    let mut batch = Batch::new();
    let mut model_items = Vec::new();
    for &(u, v, c, tok) in items {
        let data = bytes(u, v, c);
        let staged = store.stage_bytes(&data).unwrap();
        let token = model.token(u, tok);
        let intent = if correct {
            Intent::Correct
        } else {
            Intent::Put
        };
        batch = batch.item(UNITS[u].to_string(), v, &staged, token, intent);
        model_items.push(Item {
            unit: UNITS[u].to_string(),
            version: v,
            object: ObjectId::of(&data),
            correct,
            token,
        });
    }
    if partial {
        batch = batch.partial();
    }
    let expected = model.commit(&model_items, partial);
    let report = store.commit(batch).unwrap();
    let got: Vec<_> = report
        .units
        .iter()
        .map(|u| (u.outcome, u.holder.clone()))
        .collect();
    prop_assert_eq!(got, expected);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 200, .. ProptestConfig::default() })]

    #[test]
    fn the_store_behaves_like_the_model(ops in proptest::collection::vec(op(), 1..36)) {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let mut store = open(dir.path(), &clock);
        let mut model = Model::new();
        let mut past: BTreeMap<u64, BTreeMap<String, M>> = BTreeMap::new();
        for op in ops {
            let previous = model.current.clone();
            match op {
                Op::Reopen => {
                    drop(store);
                    store = open(dir.path(), &clock);
                }
                Op::Advance { ms } => {
                    clock.advance_ms(ms);
                    model.now += ms;
                }
                Op::Put { unit, version, content, tok } => {
                    run_commit(&store, &mut model, &[(unit, version, content, tok)], false, false)?;
                }
                Op::Correct { unit, version, content, tok } => {
                    run_commit(&store, &mut model, &[(unit, version, content, tok)], true, false)?;
                }
                Op::Multi { items, partial } => {
                    let mut seen = std::collections::HashSet::new();
                    let items: Vec<_> = items.into_iter().filter(|(u, ..)| seen.insert(*u)).collect();
                    run_commit(&store, &mut model, &items, false, partial)?;
                }
                Op::Claim { unit, version, worker, ttl_ms } => {
                    let want = model.claim(UNITS[unit], version, WORKERS[worker], ttl_ms);
                    let got = store
                        .claim(UNITS[unit], version, WORKERS[worker], Duration::from_millis(ttl_ms))
                        .unwrap();
                    prop_assert!(same_claim(&got, &want), "claim: got {:?}, want {:?}", got, want);
                }
                Op::Renew { unit, worker, tok, ttl_ms } => {
                    let token = model.token(unit, tok).unwrap_or(0);
                    let want = model.renew(UNITS[unit], WORKERS[worker], token, ttl_ms);
                    let lease = lease_of(UNITS[unit], WORKERS[worker], token);
                    let got = store.renew(&lease, Duration::from_millis(ttl_ms)).unwrap();
                    match (&got, &want) {
                        // The model's renewed lease knows the holder and version; the store's
                        // answer carries them from the record.
                        (RenewOutcome::Renewed(g), RenewOutcome::Renewed(w)) => {
                            prop_assert_eq!((g.token, g.expires_at_ms), (w.token, w.expires_at_ms))
                        }
                        _ => prop_assert_eq!(&got, &want),
                    }
                }
                Op::Release { unit, worker, tok } => {
                    let token = model.token(unit, tok).unwrap_or(0);
                    let want = model.release(UNITS[unit], WORKERS[worker], token);
                    let lease = lease_of(UNITS[unit], WORKERS[worker], token);
                    prop_assert_eq!(store.release(&lease).unwrap(), want);
                }
            }
            check_invariants(&store, &model, &previous);
            if model.seq > 0 {
                past.insert(model.seq, model.current.clone());
            }
        }
        check_history(&store, &past);
    }
}
