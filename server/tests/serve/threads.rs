//! The server's threads stay a fixed set under a burst of concurrent commits or small puts:
//! connections are served by `--connection-threads`, commits taken by `--committers` and the
//! small uploads' staging run on `--store-threads`, all made at start — not on a thread each (as
//! with `block_in_place` or tokio's blocking pool, whose thread count follows the number of calls
//! in flight and stays at its peak). And (glibc) all of them allocate from one malloc arena.

use crate::support;

use oncelake_server::wire::CommitItemW;
use oncelake_server::Client;
use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use support::{new_store, served_store, Server};

/// The server's threads now: (count from `/proc/PID/status`, their ids from `/proc/PID/task`).
fn threads_of(pid: i32) -> (usize, Vec<u64>) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let n = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ids = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (n, ids)
}

/// Runs `op(client, i)` for `i` in `0..each` on `clients` threads at once (released together)
/// while sampling the server's threads; returns (the most threads at once, every thread seen).
/// After a burst: `units` units under `prefix`, and at most `slack` threads more than the
/// `before` there were, at the peak and all told.
#[track_caller]
/// Puts `unit` with its own name as bytes through the server, which must commit it.
fn puts_its_name(c: &Client, unit: &str) {
    let (o, _) = c.put_reader(unit, 1, None, false, unit.as_bytes()).unwrap();
    assert!(
        matches!(o.outcome, oncelake::Outcome::Committed { .. }),
        "{o:?}"
    );
}

fn check_burst(
    c: &Client,
    prefix: &str,
    units: usize,
    before: usize,
    (peak, seen): (usize, HashSet<u64>),
    slack: usize,
) {
    let mut found = BTreeSet::new();
    c.ls(prefix, None, |e| {
        found.insert(e.unit);
        true
    })
    .unwrap();
    assert_eq!(found.len(), units);
    assert!(
        peak <= before + slack,
        "{peak} threads during the burst, {before} before it"
    );
    assert!(
        seen.len() <= before + slack,
        "{} distinct threads seen during the burst, {before} before it",
        seen.len()
    );
}

fn burst(
    pid: i32,
    clients: usize,
    each: usize,
    op: impl Fn(usize, usize) + Sync,
) -> (usize, HashSet<u64>) {
    let line = Barrier::new(clients);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let (mut peak, mut seen) = (0, HashSet::new());
            while !done.load(Ordering::SeqCst) {
                let (n, ids) = threads_of(pid);
                peak = peak.max(n);
                seen.extend(ids);
            }
            (peak, seen)
        });
        let threads: Vec<_> = (0..clients)
            .map(|t| {
                let (line, op) = (&line, &op);
                s.spawn(move || {
                    line.wait();
                    for i in 0..each {
                        op(t, i);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
        sampler.join().unwrap()
    })
}

#[test]
fn a_burst_of_concurrent_commits_adds_no_threads() {
    const CONNECTION_THREADS: usize = 2;
    const COMMITTERS: usize = 3;
    const CLIENTS: usize = 96;
    const EACH: usize = 10;
    let (_dir, store) = new_store();
    let server = Server::start_with(
        &store,
        &[
            "--connection-threads",
            &CONNECTION_THREADS.to_string(),
            "--committers",
            &COMMITTERS.to_string(),
        ],
    );
    let pid = server.pid();
    let c = Client::for_store(&store).unwrap();
    // Staged one at a time before the burst (uploads run on tokio's blocking pool, whose
    // threads follow the number of uploads in flight; this test is about commits).
    let staged: Vec<u64> = (0..CLIENTS)
        .map(|i| c.stage_reader(format!("object {i}").as_bytes()).unwrap().0)
        .collect();
    let (before, _) = threads_of(pid);
    // One client shared by all (as the benchmarks do): a connection per request in flight, so
    // all 96 can be at the server at once.
    let (peak, seen) = burst(pid, CLIENTS, EACH, |t, i| {
        let item = CommitItemW {
            unit: format!("burst/t={t:03}/i={i:02}"),
            source_version: 1,
            staged: staged[t],
            token: None,
            correct: false,
        };
        let r = c.commit_with(vec![item], false, true).unwrap();
        assert!(r.applied(), "{:?}", r.units);
    });
    // Every commit is there, and the threads of the burst are the ones there before it: the
    // connection threads and the committers were made at start, and no commit made a thread of
    // its own. (Slack of 4 for a thread of the blocking pool serving a request of the sampler's
    // kind, none of which this burst sends.)
    check_burst(&c, "burst/", CLIENTS * EACH, before, (peak, seen), 4);
    // The connection threads and the committers were there before it.
    assert!(before > CONNECTION_THREADS + COMMITTERS, "{before} threads");
    server.stop();
}

/// Small puts (upload and commit in one request) are staged on the store threads and committed
/// by the committers: a burst of them adds no thread either (uploads used to run on tokio's
/// blocking pool, one thread per upload in flight, which grew to each new peak and stayed).
#[test]
fn a_burst_of_small_puts_adds_no_threads() {
    const STORE_THREADS: usize = 8;
    const CLIENTS: usize = 48;
    const EACH: usize = 10;
    let (_dir, store) = new_store();
    let server = Server::start_with(&store, &["--store-threads", &STORE_THREADS.to_string()]);
    let pid = server.pid();
    let c = Client::for_store(&store).unwrap();
    // One put first, so that whatever a first request starts is there before the burst.
    c.put_reader("burst/first", 1, None, false, &b"first"[..])
        .unwrap();
    let (before, _) = threads_of(pid);
    let (peak, seen) = burst(pid, CLIENTS, EACH, |t, i| {
        let unit = format!("burst/t={t:03}/i={i:02}");
        puts_its_name(&c, &unit);
    });
    check_burst(&c, "burst/t=", CLIENTS * EACH, before, (peak, seen), 2);
    server.stop();
}

/// glibc's arenas other than the main one in `pid`'s address space: each is a heap mapped at a
/// 64 MiB boundary (`HEAP_MAX_SIZE` on 64-bit), anonymous, read-write for the part in use and
/// inaccessible for the rest of its 64 MiB.
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
fn thread_arenas(pid: i32) -> usize {
    const HEAP: u64 = 64 << 20;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let regions: Vec<(u64, u64, String, bool)> = maps
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (a, b) = f[0].split_once('-').unwrap();
            let a = u64::from_str_radix(a, 16).unwrap();
            let b = u64::from_str_radix(b, 16).unwrap();
            (a, b, f[1].to_string(), f.len() <= 5)
        })
        .collect();
    let mut n = 0;
    for (i, (a, b, perm, anon)) in regions.iter().enumerate() {
        if !anon || a % HEAP != 0 || !perm.starts_with("rw") {
            continue;
        }
        let whole = b - a == HEAP;
        let rest_reserved = regions.get(i + 1).is_some_and(|(a2, b2, p2, anon2)| {
            a2 == b && p2.starts_with("---") && *anon2 && *b2 == a + HEAP
        });
        if whole || rest_reserved {
            n += 1;
        }
    }
    n
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
#[test]
fn the_server_allocates_from_one_malloc_arena() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        // The environment's setting wins over the server's (documented); nothing to check.
        return;
    }
    const CLIENTS: usize = 16;
    let (_dir, _store, server, c) = served_store();
    // Small uploads (the store threads) and commits (the committers) from 16 threads at once,
    // so that many of the server's threads allocate: with glibc's default they get arenas of their
    // own (15 of them here under this load).
    std::thread::scope(|s| {
        for t in 0..CLIENTS {
            let c = &c;
            s.spawn(move || {
                for i in 0..20 {
                    let unit = format!("arena/t={t:02}/i={i:02}");
                    puts_its_name(c, &unit);
                }
            });
        }
    });
    assert_eq!(
        thread_arenas(server.pid()),
        0,
        "the server has arenas besides the main one"
    );
    server.stop();
}
