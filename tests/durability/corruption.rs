//! SPEC I9: a damaged store never answers wrongly. Random overwrites of a copy of a populated
//! store's database; after each, every read either gives exactly the undamaged store's answer or
//! an error — never another answer — and no panic escapes, in the library and through the CLI.
//!
//! `ONCELAKE_CORRUPTION_ROUNDS` raises the number of rounds (default 300 in the library, 40
//! through the CLI); the seed of each round is printed on failure.

use crate::bin;
use crate::common;

use common::{copy_dir, XorShift64Star as Rng};
use oncelake::pipeline::{self, Attempt, Pipeline, PipelineDef, RecordedState};
use oncelake::{seal, ClaimOutcome, Options, Store, DB_FILE};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const UNITS: u64 = 150;
const LONG: Duration = Duration::from_secs(86_400 * 365);

fn def() -> PipelineDef {
    PipelineDef::builder()
        .stage("a", 1, &[])
        .stage("b", 1, &["a"])
        .build()
        .unwrap()
}

/// A store with current entries, corrections, newer versions (history), claims, and pipeline
/// extension records (a definition and failures).
fn populate(dir: &Path) {
    let store = Store::open(dir).unwrap();
    for i in 0..UNITS {
        store
            .put(&format!("unit/{i:04}"), 1, format!("v1 of {i}").as_bytes())
            .unwrap();
    }
    for i in (0..UNITS).step_by(3) {
        store
            .put(&format!("unit/{i:04}"), 2, format!("v2 of {i}").as_bytes())
            .unwrap();
    }
    for i in (0..UNITS).step_by(7) {
        store
            .correct(&format!("unit/{i:04}"), 2, format!("fix of {i}").as_bytes())
            .unwrap();
    }
    for i in 0..10 {
        store
            .claim(&format!("claimed/{i}"), 5, &format!("w{i}"), LONG)
            .unwrap();
    }
    let p = Pipeline::new(def());
    p.record_definition(&store).unwrap();
    for i in 0..5 {
        let unit = format!("src{i}");
        pipeline::set_source_version(&store, &unit, 3, b"input").unwrap();
        let att = Attempt {
            unit,
            stage: "a".into(),
            source_version: 3,
            worker: "w".into(),
            token: None,
        };
        p.fail(&store, &att, "disk full").unwrap();
    }
}

/// What every read of the store answers, as text (so two answers compare whole).
#[derive(Debug, PartialEq, Clone)]
struct Answers {
    current: Vec<String>,
    gets: Vec<String>,
    as_of: Vec<String>,
    log: Vec<String>,
    lookups: Vec<String>,
    claims: Vec<String>,
    pipeline: String,
    stale_put: String,
    /// A full reconcile of every unit at version 2, and a GC dry run: both walk whole tables.
    plan: Vec<String>,
    gc_dry: String,
}

fn entry_text(e: &oncelake::Entry) -> String {
    format!(
        "{} v{} r{} {} {} {:08x} seq{}",
        e.unit,
        e.source_version,
        e.revision,
        e.object.id.to_hex(),
        e.object.size,
        e.object.crc32,
        e.seq
    )
}

type R<T> = oncelake::Result<T>;

/// Every current entry of `snap`, as text.
fn entries(snap: &oncelake::Snapshot) -> R<Vec<String>> {
    snap.iter()?
        .map(|e| e.map(|e| entry_text(&e)))
        .collect::<R<Vec<_>>>()
}

fn read_all(store: &Store) -> R<Answers> {
    let snap = store.snapshot()?;
    let current = entries(&snap)?;
    let mut gets = Vec::new();
    for i in (0..UNITS + 5).step_by(4) {
        let unit = format!("unit/{i:04}");
        gets.push(format!(
            "{unit}: {:?}",
            snap.get(&unit)?.map(|e| entry_text(&e))
        ));
    }
    let mut as_of = Vec::new();
    for at in [1, UNITS / 2, UNITS + 10, UNITS + 40, snap.seq() - 3] {
        let old = store.snapshot_at(at)?;
        for i in (0..UNITS).step_by(9) {
            let unit = format!("unit/{i:04}");
            as_of.push(format!(
                "{at} {unit}: {:?}",
                old.get(&unit)?.map(|e| entry_text(&e))
            ));
        }
        let n = old.prefix("unit/")?.collect::<R<Vec<_>>>()?.len();
        as_of.push(format!("{at}: {n} entries"));
    }
    let log = snap
        .changes_since(0)?
        .map(|r| r.map(|r| format!("{r:?}")))
        .collect::<R<Vec<_>>>()?;
    let mut lookups = Vec::new();
    for i in (0..UNITS).step_by(5) {
        let unit = format!("unit/{i:04}");
        lookups.push(format!("{:?}", store.lookup(&unit)?));
    }
    let mut claims = Vec::new();
    for i in 0..10 {
        let c = store.claim(&format!("claimed/{i}"), 5, "intruder", LONG)?;
        claims.push(match c {
            ClaimOutcome::Held { worker, .. } => format!("held by {worker}"),
            ClaimOutcome::Granted { lease, .. } => format!("granted {}", lease.token),
            ClaimOutcome::AlreadyDone(e) => format!("done {}", entry_text(&e)),
        });
    }
    let RecordedState {
        sources,
        completions,
        failures,
        claims: cell_claims,
        definition,
    } = pipeline::recorded_state(store)?;
    let pipeline =
        format!("{sources:?} {completions:?} {failures:?} {cell_claims:?} {definition:?}");
    let listing = (0..UNITS + 3).map(|i| (format!("unit/{i:04}"), 2u64));
    let mut plan = Vec::new();
    oncelake::reconcile::reconcile_full(
        &snap,
        oncelake::reconcile::Pairs::new(listing),
        oncelake::reconcile::ReconcileOptions {
            list_up_to_date: true,
        },
        |item| {
            plan.push(format!("{} {:?}", item.unit, item.action));
            Ok(())
        },
    )
    .map_err(|e| oncelake::Error::InvalidRequest(format!("reconcile: {e}")))?;
    let gc = store.gc(oncelake::GcOptions {
        dry_run: true,
        ..oncelake::GcOptions::default()
    })?;
    // Not the count of unreferenced objects: the stale put below leaves one behind in
    // `objects/`, which the rounds share.
    let gc_dry = format!(
        "{} referenced, {} rows, horizon {}",
        gc.objects_referenced, gc.history_rows_pruned, gc.history_from
    );
    // A decision: version 1 of a unit at version 2 is stale, whatever the damage.
    let stale = store.put("unit/0003", 1, b"late retry")?;
    let stale_put = format!("{:?}", stale.outcome);
    Ok(Answers {
        current,
        gets,
        as_of,
        log,
        lookups,
        claims,
        pipeline,
        stale_put,
        plan,
        gc_dry,
    })
}

#[derive(Default, Debug)]
struct Tally {
    rounds: u64,
    /// Damage detected: the open or a read answered an error.
    refused: u64,
    harmless: u64,
    wrong: Vec<String>,
}

fn rounds(default: u64) -> u64 {
    common::env_or("ONCELAKE_CORRUPTION_ROUNDS", default)
}

/// Overwrites 1..=4 bytes at a random offset (half the time within bytes that are not zero, where
/// the data is) with different values.
fn damage(pristine: &[u8], rng: &mut Rng) -> (Vec<u8>, String) {
    let mut bytes = pristine.to_vec();
    let offset = loop {
        let o = rng.below(bytes.len() as u64) as usize;
        if rng.below(2) == 0 || bytes[o] != 0 {
            break o;
        }
    };
    let len = if rng.below(2) == 0 {
        1
    } else {
        1 + rng.below(4) as usize
    };
    for b in &mut bytes[offset..(offset + len).min(pristine.len())] {
        *b ^= 1 + rng.below(255) as u8;
    }
    (bytes, format!("{len} byte(s) at {offset}"))
}

struct Fixture {
    _tmp: tempfile::TempDir,
    pristine_dir: PathBuf,
    work: PathBuf,
    db: Vec<u8>,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let pristine_dir = tmp.path().join("pristine");
    populate(&pristine_dir);
    let work = tmp.path().join("work");
    copy_dir(&pristine_dir, &work);
    let db = std::fs::read(pristine_dir.join(DB_FILE)).unwrap();
    Fixture {
        _tmp: tmp,
        pristine_dir,
        work,
        db,
    }
}

/// What the undamaged store answers (the work copy reset to the pristine one).
fn pristine_answers(f: &Fixture) -> Answers {
    reset(f, &f.db);
    read_all(&Store::open(&f.work).unwrap()).unwrap()
}

/// Restores the work copy's database (and index snapshot) to the pristine one with `bytes` as
/// its database.
fn reset(f: &Fixture, bytes: &[u8]) {
    std::fs::write(f.work.join(DB_FILE), bytes).unwrap();
    let snap = f.pristine_dir.join("index.snap");
    let work_snap = f.work.join("index.snap");
    let _ = std::fs::remove_file(&work_snap);
    if snap.exists() {
        std::fs::copy(&snap, &work_snap).unwrap();
    }
}

#[test]
fn random_damage_to_the_database_never_gives_a_wrong_answer() {
    let f = fixture();
    let want = pristine_answers(&f);
    let mut tally = Tally::default();
    for round in 0..rounds(300) {
        let seed = 0x9E37_79B9_7F4A_7C15 ^ round.wrapping_mul(0x1000_0000_01B3);
        let mut rng = Rng(seed | 1);
        let (bytes, what) = damage(&f.db, &mut rng);
        reset(&f, &bytes);
        tally.rounds += 1;
        let got = std::panic::catch_unwind(|| {
            let store = Store::open_with(&f.work, Options::default())?;
            read_all(&store)
        });
        match got {
            Err(_) => panic!("round {round} (seed {seed:#x}, {what}): a panic escaped"),
            Ok(Err(e)) if tally.refused < 3 => {
                eprintln!("round {round}: refused: {e}");
                tally.refused += 1;
            }
            Ok(Err(_)) => tally.refused += 1,
            Ok(Ok(got)) if got == want => tally.harmless += 1,
            Ok(Ok(got)) => tally.wrong.push(format!(
                "round {round} (seed {seed:#x}, {what}): {}",
                first_difference(&want, &got)
            )),
        }
    }
    eprintln!("{tally:?}");
    assert!(tally.wrong.is_empty(), "wrong answers: {:#?}", tally.wrong);
    assert!(
        tally.refused > 0,
        "some damage must have been detected: {tally:?}"
    );
}

fn first_difference(want: &Answers, got: &Answers) -> String {
    let w = format!("{want:#?}");
    let g = format!("{got:#?}");
    for (a, b) in w.lines().zip(g.lines()) {
        if a != b {
            return format!("expected {a:?}, got {b:?}");
        }
    }
    "lengths differ".into()
}

#[test]
fn through_the_cli_a_damaged_database_never_exits_0_with_wrong_output() {
    let f = fixture();
    let run = |args: &[&str]| Command::new(bin::oncelake()).args(args).output().unwrap();
    let work = f.work.to_str().unwrap().to_string();
    let commands: [Vec<&str>; 4] = [
        vec!["ls", &work, "--json"],
        vec!["get", &work, "unit/0042"],
        vec!["log", &work, "--json"],
        vec!["ls", &work, "--at", "100", "--json"],
    ];
    reset(&f, &f.db);
    let want: Vec<Vec<u8>> = commands
        .iter()
        .map(|c| {
            let out = run(c);
            assert_eq!(out.status.code(), Some(0), "{c:?}");
            out.stdout
        })
        .collect();
    let (mut detected, mut harmless, mut wrong) = (0, 0, Vec::new());
    for round in 0..rounds(40) {
        let seed = 0x5851_F42D_4C95_7F2D ^ round.wrapping_mul(0x1000_0000_01B3);
        let mut rng = Rng(seed | 1);
        let (bytes, what) = damage(&f.db, &mut rng);
        for (c, want) in commands.iter().zip(&want) {
            reset(&f, &bytes);
            let out = run(c);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !stderr.contains("panicked") && !stderr.contains("stack backtrace"),
                "round {round} (seed {seed:#x}, {what}) {c:?}: {stderr}"
            );
            match out.status.code() {
                Some(0) if &out.stdout == want => harmless += 1,
                Some(0) => wrong.push(format!("round {round} (seed {seed:#x}, {what}) {c:?}")),
                _ => detected += 1,
            }
        }
    }
    eprintln!(
        "cli: {detected} detected, {harmless} harmless, {} wrong",
        wrong.len()
    );
    assert!(wrong.is_empty(), "exit 0 with wrong output: {wrong:#?}");
}

#[test]
fn every_table_record_is_sealed_against_a_flipped_bit() {
    // A targeted complement to the random loop: find each sealed value of a few kinds in the
    // file and flip one bit of it; the read that uses it must fail, never answer.
    let f = fixture();
    let want = pristine_answers(&f);
    let needles: BTreeMap<&str, Vec<u8>> = [
        ("worker of a claim", b"w7".to_vec()),
        ("pipeline failure", b"disk full".to_vec()),
    ]
    .into_iter()
    .collect();
    for (what, needle) in needles {
        let positions: Vec<usize> =
            f.db.windows(needle.len())
                .enumerate()
                .filter(|(_, w)| *w == needle.as_slice())
                .map(|(i, _)| i)
                .collect();
        assert!(!positions.is_empty(), "{what} is in the file");
        for p in positions {
            let mut bytes = f.db.clone();
            bytes[p] ^= 0x01;
            reset(&f, &bytes);
            let got = Store::open(&f.work).and_then(|s| read_all(&s));
            if let Ok(got) = got {
                assert_eq!(got, want, "{what} at {p}: damage gave another answer");
            }
        }
    }
}

#[test]
fn a_stored_token_at_or_above_the_next_one_is_refused_as_damage_not_a_panic() {
    // Damage the fencing tokens' order (I5) without breaking any seal: the store's next token
    // goes back to 1, below every token its claims rows hold. The grant that would follow must
    // not hand out a token that does not rise: the store answers an error naming the damage.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    {
        let store = Store::open(&dir).unwrap();
        for i in 0..3 {
            store.claim(&format!("c/{i}"), 1, "w", LONG).unwrap();
        }
    }
    {
        let db = redb::Database::open(dir.join(DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("store_meta");
            let mut meta = txn.open_table(def).unwrap();
            meta.insert(
                "next_token",
                seal("meta", b"next_token", 1u64.to_le_bytes().to_vec()).as_slice(),
            )
            .unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open(&dir).unwrap();
    // The holder moves on to version 2: a fresh grant, which would take token 1 again.
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.claim("c/2", 2, "w", LONG)
    }));
    let got = got.unwrap_or_else(|_| panic!("damage made the claim panic"));
    let e = got.expect_err("a grant below a stored token must be refused");
    assert!(matches!(e, oncelake::Error::Corrupt { .. }), "{e:?}");
    let m = e.to_string();
    assert!(m.contains("corrupt") && m.contains("fencing token"), "{m}");
    // Nothing was granted: the unit's lease is still the undamaged one.
    drop(store);
    let store = Store::open(&dir).unwrap();
    match store.claim("c/2", 1, "intruder", LONG) {
        Ok(ClaimOutcome::Held { worker, .. }) => assert_eq!(worker, "w"),
        other => panic!("{other:?}"),
    }
}

/// What the sweep reads of a store through the library: the current entries, point reads, the
/// log, and whether verify finds it intact.
fn sweep_read(store: &Store) -> R<SweepAnswers> {
    let snap = store.snapshot()?;
    let ls = entries(&snap)?;
    let mut gets = Vec::new();
    for i in 0..SWEEP_UNITS + 2 {
        let unit = format!("u/{i:02}");
        gets.push(format!(
            "{unit}: {:?}",
            snap.get(&unit)?.map(|e| entry_text(&e))
        ));
    }
    let log = snap
        .changes_since(0)?
        .map(|r| r.map(|r| format!("{r:?}")))
        .collect::<R<Vec<_>>>()?;
    let report = store.verify(oncelake::VerifyOptions::default())?;
    if !report.is_ok() {
        return Err(oncelake::Error::InvalidRequest(format!(
            "verify: {report:?}"
        )));
    }
    Ok((ls, gets, log))
}

const SWEEP_UNITS: u64 = 24;
const SWEPT: [&str; 2] = [DB_FILE, "wal.redb"];

/// Sweep answers: current entries, point reads, the log.
type SweepAnswers = (Vec<String>, Vec<String>, Vec<String>);

/// A small store left as a crash leaves it (copied while open, groups in the write-ahead log
/// not yet applied), so both files matter on open; and the model: what the store answered
/// when it was copied, every commit acknowledged.
fn sweep_image(tmp: &Path) -> (PathBuf, SweepAnswers) {
    let live = tmp.join("live");
    let image = tmp.join("image");
    let options = Options {
        background_apply: false,
        ..Options::default()
    };
    let store = Store::open_with(&live, options).unwrap();
    for i in 0..SWEEP_UNITS {
        store
            .put(&format!("u/{i:02}"), 1, format!("v1 of {i}").as_bytes())
            .unwrap();
    }
    store.flush().unwrap();
    for i in (0..SWEEP_UNITS).step_by(3) {
        store
            .put(&format!("u/{i:02}"), 2, format!("v2 of {i}").as_bytes())
            .unwrap();
    }
    store.claim("u/99", 1, "w", LONG).unwrap();
    copy_dir(&live, &image);
    let want = sweep_read(&store).unwrap();
    drop(store);
    (image, want)
}

/// The offsets of `len` bytes the sweep damages: the header densely, then evenly over the file,
/// every one in the non-zero bytes where the data is.
fn sweep_offsets(bytes: &[u8], n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = (0..512.min(bytes.len())).step_by(16).collect();
    let data: Vec<usize> = (512..bytes.len()).filter(|&i| bytes[i] != 0).collect();
    let step = (data.len() / n).max(1);
    out.extend(data.iter().step_by(step).copied());
    out
}

fn damaged(bytes: &[u8], at: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for x in &mut b[at..(at + 4).min(bytes.len())] {
        *x ^= 0xA5;
    }
    b
}

#[test]
fn swept_damage_to_both_files_never_panics_never_answers_wrongly_and_a_refused_store_is_left_as_it_was(
) {
    // SPEC I9 over small byte ranges of the database and the write-ahead log of a store not
    // closed cleanly: every open either answers exactly what was committed or refuses; no
    // panic escapes; a refused open and every read-only open leave every file byte-for-byte.
    let tmp = tempfile::tempdir().unwrap();
    let (image, want) = sweep_image(tmp.path());
    let work = tmp.path().join("work");
    let reset = |file: &str, bytes: &[u8]| {
        let _ = std::fs::remove_dir_all(&work);
        copy_dir(&image, &work);
        std::fs::write(work.join(file), bytes).unwrap();
    };
    let n = rounds(40) as usize;
    let (mut refused, mut answered, mut earlier, mut wrong) = (0, 0, 0, Vec::new());
    for file in SWEPT {
        let pristine = std::fs::read(image.join(file)).unwrap();
        for at in sweep_offsets(&pristine, n) {
            let bytes = damaged(&pristine, at);
            for read_only in [true, false] {
                reset(file, &bytes);
                let before = common::tree(&work);
                let what = format!("{file} at {at}, read_only {read_only}");
                let got = std::panic::catch_unwind(|| {
                    let options = Options {
                        read_only,
                        ..Options::default()
                    };
                    let store = match Store::open_with(&work, options) {
                        Ok(s) => s,
                        Err(e) => return Err((true, e)),
                    };
                    sweep_read(&store).map_err(|e| (false, e))
                });
                match got {
                    Err(_) => panic!("{what}: a panic escaped"),
                    Ok(Err((open_refused, e))) => {
                        refused += 1;
                        if open_refused || read_only {
                            assert!(
                                common::tree(&work) == before,
                                "{what}: refused ({e}) but the store was changed"
                            );
                        }
                    }
                    Ok(Ok(got)) if got == want => {
                        answered += 1;
                        if read_only {
                            assert!(common::tree(&work) == before, "{what}: a read wrote");
                        }
                    }
                    // Damage to the log's newest transaction (its header slot or a page it
                    // wrote) reads as a torn last append: redb falls back to the transaction
                    // before, and the store answers as of an earlier durable state. Then it
                    // must be one the store passed through — its log a prefix of the committed
                    // one — never a state of its own.
                    Ok(Ok(got))
                        if file == "wal.redb"
                            && got.2.len() < want.2.len()
                            && want.2.starts_with(&got.2) =>
                    {
                        earlier += 1
                    }
                    Ok(Ok(got)) => wrong.push(format!(
                        "{what}: log {} of {}, ls {:?}",
                        got.2.len(),
                        want.2.len(),
                        got.0.iter().zip(&want.0).find(|(a, b)| a != b)
                    )),
                }
            }
        }
    }
    eprintln!("library: {refused} refused, {answered} answered, {earlier} as of an earlier state");
    assert!(wrong.is_empty(), "wrong answers: {wrong:#?}");
    assert!(
        refused > 0 && answered > 0,
        "{refused} refused, {answered} answered"
    );
}

#[test]
fn swept_damage_through_the_cli_never_panics_and_reading_commands_change_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (image, _) = sweep_image(tmp.path());
    let work = tmp.path().join("work");
    let w = work.to_str().unwrap().to_string();
    let commands: [Vec<&str>; 4] = [
        vec!["ls", &w, "--json"],
        vec!["get", &w, "u/03"],
        vec!["log", &w, "--json"],
        vec!["verify", &w, "--json"],
    ];
    let reset = |file: &str, bytes: &[u8]| {
        let _ = std::fs::remove_dir_all(&work);
        copy_dir(&image, &work);
        std::fs::write(work.join(file), bytes).unwrap();
    };
    let run = |c: &Vec<&str>| Command::new(bin::oncelake()).args(c).output().unwrap();
    reset(DB_FILE, &std::fs::read(image.join(DB_FILE)).unwrap());
    let want: Vec<Vec<u8>> = commands
        .iter()
        .map(|c| {
            let before = common::tree(&work);
            let out = run(c);
            assert_eq!(out.status.code(), Some(0), "{c:?}: {out:?}");
            assert!(common::tree(&work) == before, "{c:?} changed the store");
            out.stdout
        })
        .collect();
    let n = rounds(40) as usize / 2;
    let (mut detected, mut harmless, mut wrong) = (0, 0, Vec::new());
    for file in SWEPT {
        let pristine = std::fs::read(image.join(file)).unwrap();
        for at in sweep_offsets(&pristine, n).into_iter().step_by(2) {
            let bytes = damaged(&pristine, at);
            reset(file, &bytes);
            let before = common::tree(&work);
            for (c, want) in commands.iter().zip(&want) {
                let out = run(c);
                let stderr = String::from_utf8_lossy(&out.stderr);
                let what = format!("{file} at {at}: {}", c[0]);
                assert!(
                    out.status.code() != Some(101) && !stderr.contains("panicked"),
                    "{what}: {stderr}"
                );
                assert!(
                    common::tree(&work) == before,
                    "{what}: a reading command wrote"
                );
                match out.status.code() {
                    Some(0) if &out.stdout == want => harmless += 1,
                    // Possibly an earlier durable state (a torn last append): the library's
                    // sweep checks that state against the committed log.
                    Some(0) if file == "wal.redb" => harmless += 1,
                    Some(0) => wrong.push(what),
                    _ => detected += 1,
                }
            }
        }
    }
    eprintln!("cli: {detected} detected, {harmless} harmless");
    assert!(wrong.is_empty(), "exit 0 with wrong output: {wrong:#?}");
    assert!(detected > 0, "some damage must have been detected");
}
