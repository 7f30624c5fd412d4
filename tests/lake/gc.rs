//! GC on lake nodes (SPEC R23, I8): the history prune is a segment every node applies, and a
//! round deletes from the lake only what no entry at its fence references — also when an
//! uploader is paused across the fence, and when rounds overlap or pause before their deletes;
//! and it keeps the two newest checkpoints and every segment.

use crate::nodes::{
    assert_same_state, check_answers, check_node, ckpt_file, entries, flip_a_byte, put, Lake,
    Writes, T0,
};
use oncelake::{GcOptions, LakeFaults, ManualClock, ObjectId, Outcome, Store};
use std::path::Path;
use std::time::Duration;

/// The lake's object names (`objects/<hh>/<hex>.<seq>`) as (object, seq), from a `file://`
/// lake's directory.
fn lake_objects(lake: &Path) -> std::collections::BTreeSet<(ObjectId, u64)> {
    let mut out = std::collections::BTreeSet::new();
    let Ok(fans) = std::fs::read_dir(lake.join("objects")) else {
        return out;
    };
    for fan in fans {
        for f in std::fs::read_dir(fan.unwrap().path()).unwrap() {
            let name = f.unwrap().file_name().into_string().unwrap();
            let (hex, seq) = name.split_once('.').unwrap();
            out.insert((hex.parse().unwrap(), seq.parse().unwrap()));
        }
    }
    out
}

/// Every (object, seq) the entries of a node reference, current and kept history (read
/// through snapshots as of each seq from the history horizon on).
fn referenced(store: &Store) -> std::collections::BTreeSet<(ObjectId, u64)> {
    store.sync().unwrap();
    let newest = store.last_seq().unwrap();
    let mut out = std::collections::BTreeSet::new();
    for seq in 1..=newest {
        let Ok(snap) = store.snapshot_at(seq) else {
            continue;
        };
        for e in snap.iter().unwrap() {
            let e = e.unwrap();
            out.insert((e.object.id, e.seq));
        }
    }
    out
}

#[test]
fn gc_on_a_lake_node_prunes_the_same_history_everywhere_and_deletes_only_the_unreferenced() {
    let (net, lake) = Lake::on_files();
    let (a, b) = (net.node("a"), net.node("b"));
    let mut w = Writes::seeded(3);
    w.on(&[&a, &b], 40);
    net.clock.advance_ms(10 * 24 * 3600 * 1000);
    w.on(&[&a, &b], 10);
    let before = lake_objects(&lake);
    let report = a
        .gc(oncelake::GcOptions {
            retain: Duration::ZERO,
            grace: Duration::ZERO,
            ..oncelake::GcOptions::default()
        })
        .unwrap();
    assert!(report.history_rows_pruned > 0, "{report:?}");
    assert!(report.lake_objects > 0, "{report:?}");
    let after = lake_objects(&lake);
    // Every node prunes the same rows (the prune is a segment) and reads the same.
    assert_eq!(entries(&a), entries(&b));
    let refs = referenced(&a);
    assert_eq!(refs, referenced(&b));
    // Nothing referenced was deleted, and what was deleted was not referenced.
    assert!(refs.is_subset(&after), "a referenced object was deleted");
    assert_eq!(
        before.len() - after.len(),
        report.lake_objects as usize,
        "the report counts the deletions"
    );
    for gone in before.difference(&after) {
        assert!(!refs.contains(gone), "{gone:?} was referenced");
    }
    // A node replaying the whole log through the pruned stretch, and one from a checkpoint.
    let c = net.node("c");
    assert_eq!(c.lake_seeded_from(), None);
    a.checkpoint().unwrap();
    let e = net.node("e");
    assert!(e.lake_seeded_from().is_some());
    for n in [&a, &b, &c, &e] {
        assert_eq!(entries(n), entries(&a));
        check_node(n);
    }
    assert_same_state(&a, &[&b, &c, &e]);
}

/// Two nodes `p` and `g` of a fresh lake with a fault plan, `g` having committed once.
struct Paused {
    net: Lake,
    p: Store,
    g: Store,
}

/// `p` puts `unit`, and is held after its upload and before its segment's create while
/// `meanwhile` runs on `g` (p is released before anything is asserted: a failed assertion must
/// not leave it held). Returns the nodes, p's answer and what `meanwhile` returned.
fn paused_upload<T: Send>(
    tag: &str,
    seed: u64,
    (unit, bytes): (&str, &[u8]),
    meanwhile: impl FnOnce(&Store) -> T + Send,
) -> (Paused, Outcome, T) {
    let name = format!("{tag}-{}", std::process::id());
    let faults = LakeFaults::install(&name, seed);
    let net = Lake {
        d: tempfile::tempdir().unwrap(),
        url: format!("memory://{name}"),
        clock: ManualClock::new(T0),
    };
    let (p, g) = (net.node("p"), net.node("g"));
    put(&g, "seed", 1, b"s");
    let hold = faults.hold_next_put("log/");
    let (answer, out) = std::thread::scope(|s| {
        let h = s.spawn(|| put(&p, unit, 1, bytes));
        hold.wait_held();
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| meanwhile(&g)));
        hold.release();
        (h.join().unwrap(), out.unwrap())
    });
    (Paused { net, p, g }, answer, out)
}

#[test]
fn a_paused_uploader_across_a_gc_fence_never_references_a_deleted_object() {
    // Meanwhile g commits (taking the slot and the seq p decided) and runs a GC round: the
    // fence is past p's seq, p's upload is referenced by nothing, and it is deleted.
    let (n, answer, doomed) =
        paused_upload("paused-uploader", 1, ("paused", b"paused bytes"), |g| {
            put(g, "other", 1, b"other bytes");
            let doomed = g.lake_sweep_plan().unwrap();
            g.lake_sweep_delete(&doomed).unwrap();
            doomed
        });
    let id = ObjectId::of(b"paused bytes").to_hex();
    assert!(
        doomed.iter().any(|n| n.contains(&id)),
        "the paused upload is not doomed: {doomed:?}"
    );
    // p's create failed (the slot was taken); it applied g's segment and decided again, with a
    // new seq and a new upload.
    let Outcome::Committed { seq, .. } = answer else {
        panic!("expected a commit, got {answer:?}");
    };
    let c = n.net.node("c");
    for node in [&n.p, &n.g, &c] {
        node.sync().unwrap();
        let snap = node.snapshot().unwrap();
        let e = snap.get("paused").unwrap().unwrap();
        assert_eq!(e.seq, seq);
        assert_eq!(snap.read_object(&e).unwrap(), b"paused bytes");
        check_node(node);
    }
    assert_same_state(&n.g, &[&n.p, &c]);
}

#[test]
fn a_gc_round_decided_while_an_upload_is_in_flight_leaves_the_upload_alone() {
    // Nothing lands while p is held, so its seq is not decided at g's fence and its upload must
    // survive g's round.
    let (n, answer, doomed) =
        paused_upload("inflight-upload", 2, ("inflight", b"in flight"), |g| {
            let doomed = g.lake_sweep_plan().unwrap();
            g.lake_sweep_delete(&doomed).unwrap();
            doomed
        });
    let id = ObjectId::of(b"in flight").to_hex();
    assert!(!doomed.iter().any(|n| n.contains(&id)), "{doomed:?}");
    assert!(matches!(answer, Outcome::Committed { .. }), "{answer:?}");
    let c = n.net.node("c");
    assert_eq!(crate::common::current_bytes(&c, "inflight"), b"in flight");
    check_node(&c);
}

#[test]
fn overlapping_gc_rounds_and_a_round_paused_between_fence_and_deletes_are_safe() {
    let (net, lake) = Lake::on_files();
    let (a, b) = (net.node("a"), net.node("b"));
    let mut w = Writes::seeded(9);
    let gc = |s: &Store| {
        s.gc(oncelake::GcOptions {
            retain: Duration::ZERO,
            grace: Duration::ZERO,
            ..oncelake::GcOptions::default()
        })
        .unwrap()
    };
    for round in 0..4 {
        w.on(&[&a, &b], 30);
        net.clock.advance_ms(24 * 3600 * 1000);
        // a decides a round (its fence) and pauses; b prunes and sweeps, the nodes commit more
        // (content equal to what a doomed, under new names), b decides a round of its own;
        // then both delete, in either order.
        let a_doomed = a.lake_sweep_plan().unwrap();
        gc(&b);
        w.on(&[&a, &b], 20);
        let b_doomed = b.lake_sweep_plan().unwrap();
        if round % 2 == 0 {
            a.lake_sweep_delete(&a_doomed).unwrap();
            b.lake_sweep_delete(&b_doomed).unwrap();
        } else {
            b.lake_sweep_delete(&b_doomed).unwrap();
            a.lake_sweep_delete(&a_doomed).unwrap();
        }
        let refs = referenced(&a);
        assert!(
            refs.is_subset(&lake_objects(&lake)),
            "round {round}: a referenced object was deleted"
        );
    }
    let c = net.node("c");
    for n in [&a, &b, &c] {
        assert_eq!(entries(n), entries(&a));
        check_node(n);
    }
    assert_same_state(&a, &[&b, &c]);
}

/// The checkpoints in a `file://` lake's directory, by segment.
fn checkpoints(lake: &Path) -> std::collections::BTreeSet<u64> {
    std::fs::read_dir(lake.join("checkpoints"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".ckpt")?.parse().ok()
        })
        .collect()
}

#[test]
fn gc_keeps_the_two_newest_checkpoints_and_every_segment() {
    let (net, lake, a, mut w) = Lake::on_files_written_by_a(11, 10);
    // A node far behind: it applies nothing until the GC has run.
    let far = net.node("far");
    let mut written = Vec::new();
    for _ in 0..4 {
        w.on(&[&a], 10);
        written.push(a.checkpoint().unwrap().segment);
    }
    assert_eq!(checkpoints(&lake), written.iter().copied().collect());
    // The default retention prunes no history here: every acknowledged answer stays readable.
    a.gc(GcOptions::default()).unwrap();
    assert_eq!(checkpoints(&lake), written[2..].iter().copied().collect());
    // The newest damaged: a new node starts from the other one kept.
    let newest = ckpt_file(&lake, written[3]);
    flip_a_byte(&newest);
    let b = net.node("b");
    assert_eq!(b.lake_seeded_from(), Some(written[2]));
    // Both kept ones gone: the log is whole, a new node replays it from segment 1.
    for n in &written[2..] {
        std::fs::remove_file(ckpt_file(&lake, *n)).unwrap();
    }
    let c = net.node("c");
    assert_eq!(c.lake_seeded_from(), None);
    far.sync().unwrap();
    w.on(&[&a, &b, &c, &far], 10);
    check_answers(&w.answers, &[&a, &b, &c, &far]);
    assert_same_state(&c, &[&a, &b, &far]);
    // A second round with nothing to delete keeps what is there.
    let before = checkpoints(&lake);
    a.gc(GcOptions::default()).unwrap();
    assert_eq!(checkpoints(&lake), before);
}
