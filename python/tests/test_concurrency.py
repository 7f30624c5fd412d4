"""Threads and processes at once on one store: worker processes (which take the store's lock in
turn until a server exists) each run threads that share their Store; every unit is computed once
and has exactly one output. And Python threads share commit groups (the GIL is released)."""

import json
import subprocess
import threading

import oncelake

WORKER = r"""
import json, os, sys, threading, oncelake
lake, log, pid_name, units = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
outcomes = {"committed": 0, "already_done": 0, "busy": 0}
lock = threading.Lock()
with oncelake.Store(lake, lock_wait=120) as store:
    def work(t):
        for i in range(units):
            unit = f"u{(i + t * 5) % units:03d}"
            try:
                with store.run_once(unit, 1, worker=f"{pid_name}-t{t % 2}", ttl=60) as run:
                    with open(log, "a") as f:
                        f.write(unit + "\n")
                    run.output = f"{unit} by {pid_name}-{t}".encode()
                kind = "committed" if isinstance(run.outcome, oncelake.Committed) else "other"
            except oncelake.AlreadyDone:
                kind = "already_done"
            except oncelake.Busy:
                kind = "busy"
            with lock:
                outcomes[kind] = outcomes.get(kind, 0) + 1
    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
print(json.dumps(outcomes))
"""

UNITS = 30


def test_threads_and_processes_compute_each_unit_once(tmp_path, python):
    lake, log = tmp_path / "lake", tmp_path / "computed.log"
    # Created first: processes that race to *create* a store trip over the engine's check for a
    # non-store directory, which runs before the lock is taken (an engine defect outside this
    # binding; see the report). Opening an existing store concurrently is what is tested here.
    oncelake.Store(lake).close()
    procs = [
        subprocess.Popen([python, "-c", WORKER, str(lake), str(log), f"p{i}", str(UNITS)], stdout=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0
        results.append(json.loads(out))
    computed = log.read_text().split()
    assert sorted(computed) == sorted(f"u{i:03d}" for i in range(UNITS)), "each unit computed exactly once"
    assert sum(r["committed"] for r in results) == UNITS
    assert all(r.get("other", 0) == 0 for r in results)
    with oncelake.Store(lake) as store:
        entries = store.ls()
        assert [e.unit for e in entries] == [f"u{i:03d}" for i in range(UNITS)]
        for e in entries:
            assert store.get(e.unit).startswith(e.unit.encode() + b" by ")


def test_python_threads_share_commit_groups(tmp_path):
    with oncelake.Store(tmp_path / "lake") as store:
        barrier = threading.Barrier(16)

        def commit(t):
            barrier.wait()
            for i in range(20):
                store.put(f"t{t}/u{i}", 1, b"x" * 100)

        ts = [threading.Thread(target=commit, args=(t,)) for t in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        s = store.stats()
        assert s["units_committed"] == 320 and s["units"] == 320
        # With the GIL held during commits, every group would carry exactly one unit.
        assert s["groups"] < 320 and s["group_units"]["sum"] == 320, s["group_units"]


def test_one_snapshot_and_one_store_shared_by_threads(tmp_path):
    with oncelake.Store(tmp_path / "lake") as store:
        model = {f"u{i}": f"bytes {i}".encode() for i in range(20)}
        store.commit([(u, 1, b) for u, b in model.items()])
        errors = []
        with store.snapshot() as snap:
            store.put("later", 1, b"not in the snapshot")

            def read(t):
                try:
                    for i in range(200):
                        u = f"u{(i + t) % 20}"
                        assert snap.get(u) == model[u] and store.get(u) == model[u]
                        assert snap.get("later") is None
                except Exception as e:  # reported below, with the thread's failure
                    errors.append(e)

            ts = [threading.Thread(target=read, args=(t,)) for t in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        assert errors == []
