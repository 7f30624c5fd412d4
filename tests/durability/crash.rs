//! Crash test (SPEC R5, I3): a child process commits in a loop and reports each acknowledgement;
//! the parent kills it with SIGKILL at a random moment, reopens the store and checks that every
//! acknowledged commit is there, that a multi-unit commit is never torn, and that I1, I2 and I7
//! hold. Thirty rounds on the same store.

use oncelake::{Batch, ObjectId, Store};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "ONCELAKE_CRASH_CHILD";
const ROUNDS: u64 = 30;

/// The child's body; a no-op unless the parent started this test binary as the child.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (dir, round) = spec.split_once('|').expect("dir|round");
    let round: u64 = round.parse().expect("round number");
    let store = Store::open_with(
        dir,
        oncelake::Options {
            lock_wait: Duration::from_secs(10),
            ..Default::default()
        },
    )
    .expect("child opens the store");
    let out = std::io::stdout();
    for i in 0u64.. {
        // Versions rise across rounds, so an acknowledged version can only be superseded.
        let version = round * 1_000_000 + i + 1;
        if i % 5 == 4 {
            // A three-unit all-or-nothing commit: after any crash all three share one version.
            let staged = store
                .stage_bytes(format!("batch {version}").as_bytes())
                .expect("stage");
            let mut b = Batch::new();
            for k in 0..3 {
                b = b.put(format!("batch/{k}"), version, &staged);
            }
            let r = store.commit(b).expect("commit");
            assert!(r.applied());
            let mut o = out.lock();
            for k in 0..3 {
                writeln!(o, "ack batch/{k} {version} {}", staged.id()).unwrap();
            }
            o.flush().unwrap();
        } else {
            let unit = format!("unit/{}", (i * 7 + round) % 23);
            let data = format!("{unit} @ {version}").repeat(1 + (i % 13) as usize);
            let u = store.put(&unit, version, data.as_bytes()).expect("put");
            assert!(u.outcome.is_success(), "{:?}", u.outcome);
            let mut o = out.lock();
            writeln!(o, "ack {unit} {version} {}", ObjectId::of(data.as_bytes())).unwrap();
            o.flush().unwrap();
        }
    }
}

fn lcg(x: &mut u64) -> u64 {
    *x = x
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *x >> 33
}

#[test]
fn acknowledged_commits_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lake");
    Store::open(&path).unwrap();
    let exe = std::env::current_exe().unwrap();
    let child_test = crate::common::test_path(module_path!(), "crash_child");
    // unit -> (version, object) of its newest acknowledged commit
    let mut acked: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut total_acks = 0usize;
    let mut rng = 0x5eed_u64;
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args([
                child_test.as_str(),
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{}|{round}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter(|l| l.starts_with("ack "))
                .collect::<Vec<_>>()
        });
        std::thread::sleep(Duration::from_millis(30 + lcg(&mut rng) % 250));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let lines = reader.join().unwrap();
        total_acks += lines.len();
        for l in lines {
            let mut parts = l.split(' ').skip(1);
            let (unit, version, object) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            acked.insert(
                unit.to_string(),
                (version.parse().unwrap(), object.to_string()),
            );
        }

        let store = Store::open(&path).unwrap();
        let snap = store.snapshot().unwrap();
        for (unit, (version, object)) in &acked {
            let e = snap
                .get(unit)
                .unwrap()
                .unwrap_or_else(|| panic!("round {round}: acknowledged {unit} is gone"));
            assert!(
                e.source_version >= *version,
                "round {round}: {unit} lost version {version}"
            );
            if e.source_version == *version {
                assert_eq!(
                    &e.object.id.to_hex(),
                    object,
                    "round {round}: {unit} changed object"
                );
            }
        }
        let entries: Vec<_> = snap.iter().unwrap().map(|e| e.unwrap()).collect();
        let batch: Vec<u64> = entries
            .iter()
            .filter(|e| e.unit.starts_with("batch/"))
            .map(|e| e.source_version)
            .collect();
        assert!(
            batch.is_empty() || (batch.len() == 3 && batch.iter().all(|&v| v == batch[0])),
            "round {round}: torn multi-unit commit {batch:?}"
        );
        for e in &entries {
            snap.read_object(e).unwrap(); // I2: size and CRC32 match
        }
        let r = oncelake::replay(&snap).unwrap();
        assert!(r.is_clean(), "round {round}: I7: {:?}", r.problems);
    }
    assert!(
        total_acks > ROUNDS as usize,
        "the child barely committed ({total_acks} acks)"
    );
    eprintln!("{ROUNDS} SIGKILL rounds, {total_acks} acknowledged commits checked");
}
