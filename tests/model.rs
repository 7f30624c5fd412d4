//! Model-based property test (SPEC §4): random sequences of stage / commit / correct / multi-unit
//! commit / reopen against a `BTreeMap` model of what must be in the store, with I1, I2, I5 and I7
//! asserted after every step. The model decides R3 on its own, independently of the engine's rules.

use oncelake::{Batch, ObjectId, Outcome, Store};
use proptest::prelude::*;
use std::collections::BTreeMap;

const UNITS: [&str; 4] = ["a", "b/1", "b/2", "c"];

#[derive(Clone, Debug)]
enum Op {
    Put {
        unit: usize,
        version: u64,
        content: u8,
    },
    Correct {
        unit: usize,
        version: u64,
        content: u8,
    },
    Multi {
        items: Vec<(usize, u64, u8)>,
        partial: bool,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..UNITS.len(), 0..4u64, 0..3u8).prop_map(|(unit, version, content)| Op::Put { unit, version, content }),
        2 => (0..UNITS.len(), 0..4u64, 0..3u8).prop_map(|(unit, version, content)| Op::Correct { unit, version, content }),
        2 => (proptest::collection::vec((0..UNITS.len(), 0..4u64, 0..3u8), 1..4), any::<bool>())
            .prop_map(|(items, partial)| Op::Multi { items, partial }),
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

#[derive(Default)]
struct Model {
    current: BTreeMap<String, M>,
    /// Every entry ever committed per unit, for "late retry of a corrected output".
    history: BTreeMap<String, Vec<M>>,
    seq: u64,
}

impl Model {
    /// The expected outcome for one unit, or None when it would be accepted (with its revision).
    fn decide(
        &self,
        unit: &str,
        version: u64,
        object: ObjectId,
        correct: bool,
    ) -> Result<u32, Outcome> {
        let Some(cur) = self.current.get(unit) else {
            return Ok(0);
        };
        if version > cur.version {
            return Ok(0);
        }
        if version < cur.version {
            return Err(Outcome::Stale {
                current_version: cur.version,
            });
        }
        if object == cur.object {
            return Err(Outcome::Duplicate { seq: cur.seq });
        }
        if correct {
            return Ok(cur.revision + 1);
        }
        if let Some(old) = self.history[unit]
            .iter()
            .find(|m| m.version == version && m.object == object)
        {
            return Err(Outcome::Duplicate { seq: old.seq });
        }
        Err(Outcome::Conflict {
            winner_seq: cur.seq,
            winner: cur.object,
        })
    }

    /// Applies a batch to the model and returns the expected outcomes.
    fn commit(&mut self, items: &[(String, u64, ObjectId, bool)], partial: bool) -> Vec<Outcome> {
        let decided: Vec<_> = items
            .iter()
            .map(|(u, v, o, c)| self.decide(u, *v, *o, *c))
            .collect();
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
            .map(|((u, v, o, _), d)| match d {
                Ok(revision) if seq != 0 => {
                    let superseded = self.current.get(u).map(|m| m.version);
                    let m = M {
                        version: *v,
                        revision,
                        object: *o,
                        seq,
                    };
                    self.current.insert(u.clone(), m.clone());
                    self.history.entry(u.clone()).or_default().push(m);
                    Outcome::Committed {
                        seq,
                        revision,
                        superseded,
                    }
                }
                Ok(_) => Outcome::Aborted,
                Err(o) => o,
            })
            .collect()
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
    // I7: the log alone reproduces the manifest.
    let r = oncelake::replay(&snap).unwrap();
    assert!(r.is_clean(), "I7: {:?}", r.problems);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 200, .. ProptestConfig::default() })]

    #[test]
    fn the_store_behaves_like_the_model(ops in proptest::collection::vec(op(), 1..28)) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let mut model = Model::default();
        let mut past: BTreeMap<u64, BTreeMap<String, M>> = BTreeMap::new();
        for op in ops {
            let previous = model.current.clone();
            match op {
                Op::Reopen => {
                    drop(store);
                    store = Store::open(dir.path()).unwrap();
                }
                Op::Put { unit, version, content } | Op::Correct { unit, version, content } => {
                    let correct = matches!(op, Op::Correct { .. });
                    let data = bytes(unit, version, content);
                    let expected = model.commit(&[(UNITS[unit].to_string(), version, ObjectId::of(&data), correct)], false);
                    let got = if correct {
                        store.correct(UNITS[unit], version, &data).unwrap()
                    } else {
                        store.put(UNITS[unit], version, &data).unwrap()
                    };
                    prop_assert_eq!(got.outcome, expected[0]);
                }
                Op::Multi { items, partial } => {
                    let mut seen = std::collections::HashSet::new();
                    let items: Vec<_> = items.into_iter().filter(|(u, _, _)| seen.insert(*u)).collect();
                    let mut batch = Batch::new();
                    let mut model_items = Vec::new();
                    for &(u, v, c) in &items {
                        let data = bytes(u, v, c);
                        let staged = store.stage_bytes(&data).unwrap();
                        batch = batch.put(UNITS[u], v, &staged);
                        model_items.push((UNITS[u].to_string(), v, ObjectId::of(&data), false));
                    }
                    if partial {
                        batch = batch.partial();
                    }
                    let expected = model.commit(&model_items, partial);
                    let report = store.commit(batch).unwrap();
                    let got: Vec<_> = report.units.iter().map(|u| u.outcome).collect();
                    prop_assert_eq!(got, expected);
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
