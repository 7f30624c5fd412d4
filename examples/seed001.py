#!/usr/bin/env python3
"""A batch job handed overlapping batches, twice: check-then-act `process_batch`, and `oncelake.run_once`.

Workers are handed overlapping batch ids (a share of the batches is delivered to two workers at
about the same time, as a rebalancing scheduler does) and one worker is killed mid-batch; the
scheduler then delivers the killed worker's batches again. For each pattern it prints the batches
processed more than once, the duplicate side effects (outputs written more than once), the final
outputs per batch and the wall time.

1. **check-then-act on SQLite** (the standard library's `sqlite3`, WAL, one connection per
   worker): `SELECT` the checkpoint, run the ETL (which writes the batch's output), `INSERT` the
   checkpoint — the usual `process_batch`, with each statement in its own transaction as under
   PostgreSQL's READ COMMITTED. N worker *processes*; the victim process is killed (SIGKILL)
   between its ETL and its checkpoint insert.

2. **oncelake.run_once**: claim, ETL, commit of the output under the lease. The store is held by
   `oncelake serve` (SPEC R20), and every worker is a *process* with its own `oncelake.Store(lake)`,
   which goes through the server. The victim process enters `run_once` for its batch and is killed
   (SIGKILL) mid-batch, with its lease live. The killed worker's batch answers `Busy` until its
   lease expires, and is then taken over.

Run: `python examples/seed001.py [--workers 4] [--batches 40] [--json] [--oncelake-bin PATH]`
(the binary: --oncelake-bin, else $ONCELAKE_BIN, else `oncelake` on PATH, else this repository's
target/release, else target/debug — `cargo build --release -p oncelake-cli` makes one).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import sqlite3
import sys
import subprocess
import tempfile
import time
from collections import Counter
from typing import Dict, List, Optional, Tuple

import hashlib

import oncelake

VICTIM = 0  # the worker that is killed mid-batch


def payload(batch_id: str) -> bytes:
    """The batch's input; the ETL output is derived from it deterministically."""
    return f"rows of {batch_id}\n".encode() * 64


def etl(batch_id: str, data: bytes, work_ms: float, log_path: str, who: str) -> bytes:
    """The actual ETL: takes a while, and logs that it ran (the count of 'processed')."""
    with open(log_path, "a") as log:
        log.write(f"{batch_id}\t{who}\t{time.time() * 1000:.0f}\n")
    time.sleep(work_ms / 1000)
    return hashlib.sha256(data).hexdigest().encode() + b"\n" + data.upper()


def deliveries(workers: int, batches: int, overlap: float, seed: int) -> List[List[str]]:
    """Per worker, the batch ids it is handed, in order. A share `overlap` of the batches goes to
    two workers at the same position of their lists, so both get it at about the same time."""
    rng = random.Random(seed)
    lists: List[List[str]] = [[] for _ in range(workers)]
    for i in range(batches):
        b = f"batch-{i:04d}"
        first = i % workers
        lists[first].append(b)
        if rng.random() < overlap:
            second = (first + 1 + rng.randrange(workers - 1)) % workers
            lists[second].append(b)
    return lists


def work_ms(batch_id: str, seed: int) -> float:
    return random.Random(f"{seed}:{batch_id}").uniform(2, 20)


# ---------------------------------------------------------------- check-then-act on SQLite


def sqlite_connect(db: str) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=60, isolation_level=None)  # autocommit: READ COMMITTED-like
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def sqlite_worker(wid: int, batch_ids: List[str], db: str, log_path: str, seed: int) -> None:
    conn = sqlite_connect(db)
    for n, batch_id in enumerate(batch_ids):
        data = payload(batch_id)
        content_hash = hashlib.sha256(data).hexdigest()
        # The usual process_batch: check ...
        existing = conn.execute(
            "SELECT 1 FROM checkpoints WHERE batch_id = ? AND hash = ?", (batch_id, content_hash)
        ).fetchone()
        if existing:
            continue
        # ... act: the ETL writes its output to the lake (here: the outputs table) ...
        out = etl(batch_id, data, work_ms(batch_id, seed), log_path, f"worker-{wid}")
        conn.execute("INSERT INTO outputs (batch_id, worker, bytes) VALUES (?, ?, ?)", (batch_id, wid, out))
        if wid == VICTIM and n == len(batch_ids) // 2:
            os.kill(os.getpid(), signal.SIGKILL)  # dies between the ETL and the checkpoint
        # ... and only then records the checkpoint.
        conn.execute("INSERT INTO checkpoints (batch_id, hash) VALUES (?, ?)", (batch_id, content_hash))


def run_sqlite(workdir: str, lists: List[List[str]], seed: int) -> Dict[str, object]:
    db = os.path.join(workdir, "checkpoints.sqlite")
    log_path = os.path.join(workdir, "sqlite-etl.log")
    conn = sqlite_connect(db)
    conn.execute("CREATE TABLE checkpoints (batch_id TEXT, hash TEXT)")
    conn.execute("CREATE TABLE outputs (batch_id TEXT, worker INTEGER, bytes BLOB)")
    start = time.monotonic()
    procs = [mp.Process(target=sqlite_worker, args=(w, l, db, log_path, seed)) for w, l in enumerate(lists)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    # The scheduler redelivers the killed worker's batches to a fresh worker.
    killed = [w for w, p in enumerate(procs) if p.exitcode == -signal.SIGKILL]
    for w in killed:
        retry = mp.Process(target=sqlite_worker, args=(len(lists) + w, lists[w], db, log_path, seed))
        retry.start()
        retry.join()
    wall = time.monotonic() - start
    outputs = Counter(b for (b,) in conn.execute("SELECT batch_id FROM outputs"))
    return summarize("check-then-act on SQLite", lists, outputs, log_path, wall, killed)


# ---------------------------------------------------------------- oncelake.run_once


def oncelake_bin(explicit: Optional[str]) -> str:
    """The `oncelake` binary that serves the store: --oncelake-bin, $ONCELAKE_BIN, `oncelake` on
    PATH, or this repository's release build, then its debug build."""
    if explicit or os.environ.get("ONCELAKE_BIN"):
        path = explicit or os.environ["ONCELAKE_BIN"]
        if not os.access(path, os.X_OK):
            sys.exit(f"no oncelake binary at {path}")
        return path
    on_path = shutil.which("oncelake")
    if on_path:
        return on_path
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
    tried = [os.path.join(target, profile, "oncelake") for profile in ("release", "debug")]
    for path in tried:
        if os.access(path, os.X_OK):
            return path
    sys.exit("no oncelake binary on PATH nor at " + " or ".join(tried) + ": build it with "
             "`cargo build --release -p oncelake-cli`, or pass --oncelake-bin / set ONCELAKE_BIN")


def oncelake_victim(lake: str, batch_id: str, ttl: float, log_path: str, ready) -> None:
    """Opens the served store, claims its batch, starts the ETL and is killed mid-batch."""
    with oncelake.Store(lake) as store:
        with store.run_once(batch_id, 1, worker="worker-victim", ttl=ttl) as run:
            etl(batch_id, payload(batch_id), 0, log_path, "worker-victim")
            ready.send(run.lease.expires_at_ms)
            time.sleep(3600)  # killed here, lease live, output never committed
            run.output = b"never"


def oncelake_worker(lake: str, wid: int, batch_ids: List[str], ttl: float, log_path: str, seed: int,
                    results) -> None:
    """A worker process: its own `Store(lake)`, which goes through the server."""
    committed: Counter = Counter()
    busy_seen = 0
    with oncelake.Store(lake) as store:
        assert store.served_by, "a worker process must go through `oncelake serve`"
        queue = list(batch_ids)
        while queue:
            batch_id = queue.pop(0)
            try:
                with store.run_once(batch_id, 1, worker=f"worker-{wid}", ttl=ttl) as run:
                    run.output = etl(batch_id, payload(batch_id), work_ms(batch_id, seed), log_path, f"worker-{wid}")
                if isinstance(run.outcome, oncelake.Committed):
                    committed[batch_id] += 1
            except oncelake.AlreadyDone:
                pass
            except oncelake.Busy as busy:
                # Another worker holds it. The scheduler retries it later, in case that worker died.
                busy_seen += 1
                wait = busy.expires_at_ms / 1000 - time.time()
                if not queue and wait > 0:
                    time.sleep(min(wait, ttl) + 0.01)
                queue.append(batch_id)
    results.put((dict(committed), busy_seen))


def run_oncelake(workdir: str, lists: List[List[str]], seed: int, ttl: float, binary: str) -> Dict[str, object]:
    lake = os.path.join(workdir, "lake")
    log_path = os.path.join(workdir, "oncelake-etl.log")
    oncelake.Store(lake).close()  # create it; `oncelake serve` serves an existing store
    server = subprocess.Popen([binary, "serve", lake], stdout=subprocess.PIPE, text=True)
    try:
        ready_line = server.stdout.readline()  # printed once the server holds the store and listens
        if not ready_line.startswith("serving"):
            raise RuntimeError(f"oncelake serve did not start: {ready_line!r}")
        start = time.monotonic()
        # The victim: a separate process killed mid-batch with its lease live.
        victim_batch = lists[VICTIM][len(lists[VICTIM]) // 2]
        recv, send = mp.Pipe(duplex=False)
        victim = mp.Process(target=oncelake_victim, args=(lake, victim_batch, ttl, log_path, send))
        victim.start()
        victim_lease_until = recv.recv()
        os.kill(victim.pid, signal.SIGKILL)
        victim.join()
        results = mp.Queue()
        procs = [mp.Process(target=oncelake_worker, args=(lake, w, l, ttl, log_path, seed, results))
                 for w, l in enumerate(lists)]
        for p in procs:
            p.start()
        answers = [results.get() for _ in procs]
        for p in procs:
            p.join()
        wall = time.monotonic() - start
        with oncelake.Store(lake) as store:
            outputs = Counter({e.unit: 1 for e in store.ls("batch-")})
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()
    committed: Counter = Counter()
    for c, _ in answers:
        committed.update(c)
    result = summarize("oncelake.run_once", lists, outputs, log_path, wall, [VICTIM])
    # "Done twice while its lease was live": a second ETL run of a batch that started before the
    # lease of the first had expired. The only repeat must be the victim's batch, after expiry.
    runs: Dict[str, List[Tuple[str, float]]] = {}
    with open(log_path) as log:
        for line in log:
            b, who, ms = line.rstrip("\n").split("\t")
            runs.setdefault(b, []).append((who, float(ms)))
    live_repeats = [b for b, r in runs.items() if len(r) > 1 and not (b == victim_batch and min(ms for who, ms in r if who != "worker-victim") >= victim_lease_until)]
    result.update(
        victim_batch=victim_batch,
        worker_processes=len(procs),
        done_twice_while_lease_live=len(live_repeats),
        committed_outcomes=sum(committed.values()),
        commits_per_batch_max=max(committed.values(), default=0),
        busy_answers=sum(b for _, b in answers),
    )
    return result


def summarize(name: str, lists: List[List[str]], outputs: Counter, log_path: str, wall: float, killed: List[int]) -> Dict[str, object]:
    batches = sorted({b for l in lists for b in l})
    processed = Counter()
    if os.path.exists(log_path):
        with open(log_path) as log:
            processed = Counter(line.split("\t", 1)[0] for line in log)
    per_batch = Counter(outputs.get(b, 0) for b in batches)
    return {
        "pattern": name,
        "batches": len(batches),
        "deliveries": sum(len(l) for l in lists),
        "killed_workers": len(killed),
        "processed_more_than_once": sum(1 for b in batches if processed[b] > 1),
        "duplicate_side_effects": sum(max(outputs.get(b, 0) - 1, 0) for b in batches),
        "outputs_per_batch": {str(k): v for k, v in sorted(per_batch.items())},
        "wall_s": round(wall, 3),
    }


def print_table(results: List[Dict[str, object]]) -> None:
    """The patterns side by side, each row saying what it counts, then one line per pattern on
    whether every batch ended with exactly one output."""
    first = results[0]
    print(f"{first['batches']} batches, {first['deliveries']} deliveries: "
          f"{first['deliveries'] - first['batches']} batches were handed to two workers at once (a rebalancing "
          f"scheduler), and one worker was killed mid-batch; its batches were handed out again.")
    if "worker_processes" in results[-1]:
        print(f"oncelake.run_once: {results[-1]['worker_processes']} worker processes, each with its own "
              "oncelake.Store, through one `oncelake serve`.")
    print()
    width = 36
    print(" " * width + "".join(f"{r['pattern']:>28}" for r in results))

    def row(label: str, cell) -> None:
        print(f"{label:<{width}}" + "".join(f"{cell(r):>28}" for r in results))

    def exactly_one(r) -> str:
        return f"{r['outputs_per_batch'].get('1', 0)} of {r['batches']}"

    row("batches processed more than once", lambda r: str(r["processed_more_than_once"]))
    row("extra outputs (a batch written again)", lambda r: str(r["duplicate_side_effects"]))
    row("batches with exactly one output", exactly_one)
    row("batches with no output", lambda r: str(r["outputs_per_batch"].get("0", 0)))
    row("wall time", lambda r: f"{r['wall_s']:.2f} s")
    print()
    for r in results:
        held = r["duplicate_side_effects"] == 0 and r["outputs_per_batch"].get("1", 0) == r["batches"]
        verdict = "exactly-once held" if held else "exactly-once did NOT hold"
        print(f"{r['pattern']}: {verdict}: {r['batches']} batches, "
              f"{r['outputs_per_batch'].get('1', 0)} with exactly one output, {r['duplicate_side_effects']} extra outputs")
        if "done_twice_while_lease_live" in r:
            print(f"  (processed more than once: only the killed worker's {r['victim_batch']}, re-run after its "
                  f"lease expired; while a lease was live: {r['done_twice_while_lease_live']})")


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--overlap", type=float, default=0.5, help="share of batches delivered to two workers")
    ap.add_argument("--ttl", type=float, default=1.0, help="run_once lease, seconds")
    ap.add_argument("--seed", type=int, default=1, help="random seed of the deliveries (the same number, the same run)")
    ap.add_argument("--only", choices=["sqlite", "oncelake"])
    ap.add_argument("--json", action="store_true", help="one JSON object per pattern")
    ap.add_argument("--oncelake-bin", help="the oncelake binary that serves the store (default: $ONCELAKE_BIN)")
    a = ap.parse_args(argv)
    if a.workers < 2:
        ap.error("--workers must be at least 2 (the scenario needs overlapping deliveries)")
    lists = deliveries(a.workers, a.batches, a.overlap, a.seed)
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        if a.only in (None, "sqlite"):
            os.mkdir(os.path.join(workdir, "sqlite"))
            results.append(run_sqlite(os.path.join(workdir, "sqlite"), lists, a.seed))
        if a.only in (None, "oncelake"):
            os.mkdir(os.path.join(workdir, "oncelake"))
            binary = oncelake_bin(a.oncelake_bin)
            results.append(run_oncelake(os.path.join(workdir, "oncelake"), lists, a.seed, a.ttl, binary))
    if a.json:
        for r in results:
            print(json.dumps(r))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
