"""`oncelake.Store(path)` on a store held by `oncelake serve` (SPEC R20) goes through the server:
the same calls give the same outcome values and exception classes as in-process, several
processes share the store, and a large upload streams with bounded memory."""

import http.client
import json
import pathlib
import signal
import socket
import multiprocessing as mp
import os
import subprocess
import time
from collections import Counter

import pytest

import oncelake
from conftest import PIPELINE, serving
from test_stream import CHILD, run_child

# Facts that depend on when and in which order things ran, not on what the engine decided.
VOLATILE = {"seq", "winner_seq", "committed_at_ms", "expires_at_ms", "time_ms"}


def shape(value, nested=False):
    """An outcome value or exception as (class name, its facts without the volatile ones). A
    rejected batch's exception lists itself among its ``outcomes``: nested ones skip that list."""
    if isinstance(value, oncelake.OncelakeError):
        facts = value.facts
    elif value is None or isinstance(value, (bool, bytes, int, float, str, dict)):
        return value
    elif isinstance(value, list):
        return [shape(v, nested=True) for v in value]
    else:
        facts = {k: getattr(value, k) for k in value.__dataclass_fields__}
    skip = VOLATILE | ({"outcomes"} if nested else set())
    return type(value).__name__, {k: shape(v, nested) for k, v in sorted(facts.items()) if k not in skip}


def recorder(out):
    """A ``call(f, *args, **kwargs)`` that appends to ``out`` the shape of what ``f`` returns or
    of the rejection it raises."""

    def call(f, *a, **kw):
        try:
            out.append(shape(f(*a, **kw)))
        except oncelake.OncelakeError as e:
            out.append(shape(e))

    return call


def script(store):
    """Every call that goes through a server, with every outcome and rejection it can give."""
    out = []
    call = recorder(out)

    call(store.put, "a/1", 1, b"one")
    call(store.put, "a/1", 1, b"one")                  # Duplicate
    call(store.put, "a/1", 1, b"ONE")                  # Conflict
    call(store.put, "a/1", 2, b"two")                  # Committed, supersedes 1
    call(store.put, "a/1", 1, b"one")                  # Stale
    call(store.correct, "a/1", 2, b"two, corrected")
    call(store.commit, [("f/1", 1, b"f1"), ("f/2", 1, b"f2")])
    call(store.commit, [("f/1", 1, b"f1"), ("f/3", 1, b"f3"), ("f/2", 1, b"other")])  # Conflict, nothing applied
    call(store.commit, [("f/1", 1, b"f1"), ("f/3", 1, b"f3"), ("f/2", 1, b"other")], partial=True)
    lease = store.claim("b/1", 1, worker="w1", ttl=60)
    out.append((lease.unit, lease.worker, lease.source_version, lease.took_over))
    call(store.claim, "b/1", 1, worker="w2", ttl=60)   # Busy
    call(store.put, "b/1", 1, b"no token")             # Busy: someone holds a live lease
    renewed = store.renew(lease, 60)
    call(store.put, "b/1", 1, b"b", token=lease.token + 1000)  # Fenced
    call(store.put, "b/1", 1, b"b", token=renewed.token)
    call(store.renew, lease, 60)                       # Fenced: ended by the commit
    call(store.release, lease)                         # False
    call(store.claim, "b/1", 1, worker="w2", ttl=60)   # AlreadyDone
    l2 = store.claim("c/1", 1, worker="w1", ttl=60)
    call(store.release, l2)                            # True
    with store.run_once("d/1", 1, worker="w1", ttl=60) as run:
        run.output = b"d"
    out.append(shape(run.outcome))
    with pytest.raises(RuntimeError):
        with store.run_once("e/1", 1, worker="w1", ttl=60) as run:
            raise RuntimeError("the body failed")
    call(store.lookup, "e/1")                          # None: nothing recorded, lease given back
    call(store.claim, "e/1", 1, worker="w2", ttl=60)   # granted at once (returns a Lease)
    for unit in ["a/1", "b/1", "d/1", "zz"]:
        call(store.get, unit)
        call(store.entry, unit)
        out.append(store.is_done(unit, 1))
        call(store.lookup, unit)
    call(store.ls, "")
    call(store.ls, "a/")
    call(store.changes_since, 0)
    call(store.get, "a/1", at=1)
    call(store.put, "", 1, b"x")                       # InvalidInput (the key)
    try:
        store.get("a/1", at=10_000)
        out.append("no error")
    except oncelake.OncelakeError as e:                # InvalidInput (a seq beyond the log)
        out.append(type(e).__name__)
    call(lambda: store.gc(dry_run=True).dry_run)
    out.extend(script_more(store))
    return out


def cell_shape(c):
    return (c.unit, c.stage, c.source_version, c.attempts, c.last_error, c.key, c.stale,
            None if c.lease is None else shape(c.lease))


def script_more(store):
    """The calls beyond put/commit/claim/reads: staging, snapshots, the log's position,
    reconcile, verify, stats and the pipeline's calls, with their rejections."""
    out = []
    call = recorder(out)

    # Staging: one Staged committed as several units, by put, commit and run_once.
    staged = store.stage(b"staged bytes")
    out.append((staged.size, staged.crc32, staged.object))
    call(store.commit, [("s/1", 1, staged), ("s/2", 1, staged)])
    call(store.put, "s/3", 1, staged)
    call(store.put, "s/3", 1, staged)                              # Duplicate
    call(store.commit, [("s/4", 1, b"four"), ("s/1", 1, b"other")])  # Conflict, nothing applied
    call(store.commit, [("s/4", 1, staged), ("s/1", 1, b"other")], partial=True)
    with store.run_once("s/5", 1, worker="w1", ttl=60) as run:
        run.output = staged
    out.append(shape(run.outcome))
    call(store.get, "s/5")
    call(store.stage(b"x").__repr__)
    # Snapshots: a view as of now keeps seeing it after later commits; as of an older seq.
    before = store.last_seq
    with store.snapshot() as snap:
        out.append((snap.seq == before, snap.history_from))
        call(store.put, "s/1", 2, b"s1 v2")
        out.append(store.last_seq == before + 1)
        call(snap.get, "s/1")
        call(snap.entry, "s/1")
        call(snap.get, "zz")
        call(snap.ls, "s/")
        call(snap.changes_since, before - 2)
        e = snap.entry("s/2")
        with open(snap.object_path(e), "rb") as f:
            out.append(f.read())
    with pytest.raises(ValueError, match="closed"):
        snap.get("s/1")
    with store.snapshot(at=1) as old:
        call(old.ls, "")
        call(old.get, "a/1")
    call(store.snapshot, at=10_000)                              # InvalidInput
    out.append(store.flush())
    # Reconcile: incremental, full (any order), refused listings.
    call(store.reconcile, [("s/1", 2), ("s/2", 5), ("new/1", 1)])
    call(store.reconcile, [("s/2", 1), ("a/1", 9), ("s/1", 1)], full=True, list_up_to_date=True)
    call(store.reconcile, [("bad\x00", 1)])                      # InvalidInput
    call(store.reconcile, [("s/1", 1), ("s/1", 1)], full=True)
    with pytest.raises(ValueError):
        store.reconcile([("a", "x")])
    # Verify (paths differ between the two stores: only the verdict and the counts).
    v = store.verify(deep=True)
    out.append((v.ok, v.problems, v.deep, v.seq, v.entries_checked, v.objects_checked))
    # Pipelines: by hand (ready, claim, complete, fail) and by work().
    p = store.pipeline(PIPELINE)
    call(p.set_source_version, "cust=1", 1, b"raw 1")
    call(p.set_source_version, "cust=2", 1, b"raw 2")
    call(p.set_source_version, "cust=1", 1, b"raw 1")             # Duplicate
    call(p.set_source_version, "cust=1", 0, b"raw 0")             # Stale
    ready = p.ready()
    out.append([cell_shape(c) for c in ready])
    out.append([cell_shape(c) for c in p.ready(limit=1)])
    mine = p.claim(ready[0], worker="w1", ttl=60)
    out.append(cell_shape(mine))
    out.append(mine.read_input())
    call(p.claim, ready[0], worker="w2", ttl=60)                  # Busy
    call(p.complete, ready[0], b"no lease")                       # Busy: w1 holds it
    call(p.fail, ready[0], "no lease", worker="w2")               # Busy
    call(p.complete, mine, b"INGESTED 1")
    call(p.complete, mine, b"INGESTED 1")                         # Duplicate
    call(p.claim, ready[0], worker="w2", ttl=60)                  # AlreadyDone
    call(p.fail, mine, "too late")                                # Fenced: the commit ended it
    second = p.claim(ready[1], worker="w1", ttl=60)
    call(p.fail, second, "boom")
    again = p.claim(p.ready()[0], worker="w1", ttl=60)
    out.append(cell_shape(again))
    call(p.fail, again, "boom again")
    out.append([cell_shape(c) for c in p.ready()])
    report_cell = [c for c in p.ready() if c.stage == "report"][0]
    out.append(report_cell.read_input("ingest"))
    with pytest.raises(oncelake.InvalidInput):
        report_cell.read_input("nope")
    last = p.claim(report_cell, worker="w1", ttl=60)
    call(p.fail, last, "boom 2")                                  # gave_up: max_attempts = 2
    call(p.claim, report_cell, worker="w1", ttl=60)               # GaveUp
    calls = []

    def stage_fn(cell):
        calls.append((cell.unit, cell.stage))
        if cell.unit == "cust=3":
            raise RuntimeError("report failed")
        return b"done " + cell.read_input(None if cell.stage == "ingest" else "ingest")

    p.set_source_version("cust=3", 1, b"raw 3")
    out.append(p.work("w1", stage_fn))
    out.append(sorted(calls))
    out.append(p.work("w1", stage_fn))
    for unit in ["cust=1", "cust=2", "cust=3", "nobody"]:
        ex = p.explain(unit)
        out.append({**ex, "cells": [{k: v for k, v in c.items() if k not in VOLATILE}
                                    for c in ex["cells"]]})
    out.append(p.status())
    call(store.pipeline, "[stage.a]\nupstream = [\"a\"]\n")        # InvalidInput
    call(p.set_source_version, "", 1, b"x")                       # InvalidInput
    out.append(store.last_seq)
    # Stats: the same keys and scopes, the same unit count, seq and store-scope counters.
    st = store.stats()
    scopes = st["scopes"]
    out.append((st["units"], st["last_seq"], sorted(k for k in st if k not in ("server", "store")),
                scopes, {k: st[k] for k, sc in scopes.items() if sc == "store"}))
    return out


def test_served_calls_answer_as_in_process(tmp_path, served):
    with oncelake.Store(tmp_path / "local") as local:
        assert local.served_by is None
        expected = script(local)
    with oncelake.Store(served) as remote:
        assert remote.served_by.startswith("unix:")
        got = script(remote)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"call {i}: through the server {g!r}, in-process {e!r}"
    # Sanity: the script met every outcome and rejection class.
    names = {x[0] for x in expected if isinstance(x, tuple) and isinstance(x[0], str)}
    assert {"Committed", "Duplicate", "Conflict", "Stale", "Fenced", "Busy", "AlreadyDone",
            "InvalidInput", "Entry", "GaveUp", "FailRecorded", "Plan", "Record"} <= names | {
                x[0][0] for x in expected if isinstance(x, list) and x and isinstance(x[0], tuple)}
    assert any(isinstance(x, tuple) and x[0] == "FailRecorded" and x[1]["gave_up"] for x in expected)


def test_without_a_server_a_second_process_gets_locked(tmp_path, python):
    lake = tmp_path / "lake"
    with oncelake.Store(lake):
        r = subprocess.run([python, "-c", f"import oncelake; oncelake.Store({str(lake)!r})"],
                           capture_output=True, text=True)
    assert r.returncode != 0 and "Locked" in r.stderr


# ------------------------------------------------------------------ processes through the server

UNITS = [f"part/{i:03d}" for i in range(24)]


def payload(unit):
    return f"output of {unit}\n".encode() * 50


def deliveries(workers):
    """Each unit goes to three of the workers, in a different order per worker."""
    lists = [[] for _ in range(workers)]
    for i, u in enumerate(UNITS):
        for k in range(3):
            lists[(i + k) % workers].append(u)
    for w, l in enumerate(lists):
        l.sort(key=lambda u: hash((u, w)) % 97)
    return lists


def worker(lake, wid, units, log_path, results):
    """Puts the even units (several workers put the same bytes) and runs the odd ones once."""
    done = Counter()
    with oncelake.Store(lake) as store:
        assert store.served_by, "the worker must go through the server"
        queue = list(units)
        while queue:
            unit = queue.pop(0)
            if int(unit[-3:]) % 2 == 0:
                done[type(store.put(unit, 1, payload(unit))).__name__] += 1
                continue
            try:
                with store.run_once(unit, 1, worker=f"w{wid}", ttl=120) as run:
                    with open(log_path, "a") as log:
                        log.write(f"{unit}\tw{wid}\t{run.lease.token}\t{run.lease.expires_at_ms}\t{time.time() * 1000:.0f}\n")
                    run.output = payload(unit)
                done[type(run.outcome).__name__] += 1
            except oncelake.AlreadyDone:
                done["AlreadyDone"] += 1
            except oncelake.Busy:
                # A live worker holds it and will commit it: ask again later.
                done["Busy"] += 1
                queue.append(unit)
    results.put((wid, dict(done)))


def test_processes_share_a_served_store_exactly_once(tmp_path, served):
    workers = 4
    log_path = str(tmp_path / "runs.log")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(str(served), w, l, log_path, results))
             for w, l in enumerate(deliveries(workers))]
    for p in procs:
        p.start()
    per_worker = dict(results.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0
    model = {u: payload(u) for u in UNITS}
    with oncelake.Store(served) as store:
        assert [e.unit for e in store.ls("part/")] == sorted(model)
        for unit, data in model.items():
            assert store.get(unit) == data, unit
            assert store.entry(unit).revision == 0
        # One commit of each unit in the log: nothing was committed twice.
        committed = Counter(e.unit for r in store.changes_since(0) if r.kind == "commit" for e in r.entries)
        assert committed == Counter({u: 1 for u in UNITS})
    total = Counter()
    for d in per_worker.values():
        total.update(d)
    puts = sum(1 for u in UNITS if int(u[-3:]) % 2 == 0)
    runs = len(UNITS) - puts
    assert total["Committed"] == len(UNITS), per_worker
    assert total["Duplicate"] == 3 * puts - puts
    assert total["AlreadyDone"] + total["Committed"] + total["Duplicate"] == 3 * len(UNITS)
    # Every run-once unit's work ran exactly once: no unit was done twice while its lease was live.
    with open(log_path) as log:
        ran = Counter(line.split("\t", 1)[0] for line in log)
    assert ran == Counter({u: 1 for u in UNITS if int(u[-3:]) % 2 == 1}) and len(ran) == runs


def test_a_200_mb_object_streams_through_the_server_with_bounded_memory(tmp_path, python):
    lake = tmp_path / "lake"
    with serving(lake):
        child = CHILD.replace("with oncelake.Store(lake) as store:",
                              "with oncelake.Store(lake) as store:\n    assert store.served_by")
        assert child != CHILD, "the child must check that it goes through the server"
        r = run_child(python, child, lake, tmp_path / "big.bin")
    assert r["sizes"] == [200 << 20] * 3 and r["same_object"]
    grew = r["after_mb"] - r["before_mb"]
    print(f"through the server: peak RSS +{grew:.1f} MB after 3 x 200 MB puts")
    assert grew < 32, r


# ------------------------------------------------------------------ staging and snapshots on the server

def object_file(lake, hex_id):
    return pathlib.Path(lake) / "objects" / hex_id[:2] / hex_id


def request(lake, method, path, body=b""):
    """One request to the server of `lake` over its Unix socket (what curl --unix-socket does)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(pathlib.Path(lake) / "serve.sock"))
    conn = http.client.HTTPConnection("localhost")
    conn.sock = sock
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = (r.status, json.loads(r.read() or b"null"))
    conn.close()
    return out


KILLED_STAGER = """
import os, signal, sys, oncelake
store = oncelake.Store(sys.argv[1])
assert store.served_by
staged = store.stage(b"staged by a process that is killed before its commit", ttl=float(sys.argv[2]))
print(staged.object, flush=True)
os.kill(os.getpid(), signal.SIGKILL)   # no cleanup runs: the server's deadline must reclaim it
"""


def test_a_killed_clients_staging_is_never_committed_and_is_reclaimed(served, python):
    ttl = 2.0
    r = subprocess.run([python, "-c", KILLED_STAGER, str(served), str(ttl)], capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr
    hex_id = r.stdout.strip()
    path = object_file(served, hex_id)
    assert path.is_file(), "staging publishes the object under its hash"
    with oncelake.Store(served) as store:
        # While the handle lives on the server, GC with no grace and no retention keeps it.
        store.gc(grace=0, retain=0)
        assert path.is_file(), "a live staging handle pins its object"
        assert store.stats()["server"]["staged_handles"] == 1
        time.sleep(ttl + 0.5)
        store.gc(grace=0, retain=0)
        assert not path.is_file(), "the killed client's staging is reclaimed after its deadline"
        assert store.stats()["server"]["staged_handles"] == 0
        # Nothing of it was committed.
        assert store.ls("") == [] and store.changes_since(0) == []


def test_forged_and_foreign_staging_handles_are_refused(tmp_path, served, python):
    # A forged id through the HTTP API: 400 with what to do, nothing committed.
    status, body = request(served, "POST", "/v1/commit",
                        json.dumps({"items": [{"unit": "u", "source_version": 1, "staged": 12345}]}))
    assert status == 400 and "unknown to this server" in body["message"], body
    other = tmp_path / "other"
    with serving(other), oncelake.Store(served) as a, oncelake.Store(other) as b, \
            oncelake.Store(tmp_path / "local") as local, oncelake.Store(tmp_path / "local2") as local2:
        assert a.served_by != b.served_by
        from_a = a.stage(b"staged through a")
        # A handle of store a used with store b (served), or in-process: InvalidInput, nothing stored.
        for call in [lambda: b.put("u", 1, from_a), lambda: b.commit([("u", 1, from_a)]),
                     lambda: local.put("u", 1, from_a), lambda: local.commit([("u", 1, from_a)])]:
            with pytest.raises(oncelake.InvalidInput, match="staged through the server of the store"):
                call()
        # An in-process handle used through a server: refused the same way; and in-process between
        # two stores the engine's own refusal has the same class.
        from_local = local.stage(b"staged in-process")
        with pytest.raises(oncelake.InvalidInput, match="stage it with this store"):
            a.put("u", 1, from_local)
        with pytest.raises(oncelake.InvalidInput, match="stage it with this store"):
            local2.put("u", 1, from_local)
        assert b.ls("") == [] and local.ls("") == []
        # The handle still works where it belongs, as often as wanted (as in-process).
        assert type(a.put("u/1", 1, from_a)).__name__ == "Committed"
        assert type(a.put("u/2", 1, from_a)).__name__ == "Committed"
        # A handle past its deadline is refused with what to do; nothing is committed.
        short = a.stage(b"staged for half a second", ttl=0.5)
        time.sleep(1.0)
        with pytest.raises(oncelake.InvalidInput, match="upload the object again"):
            a.put("late", 1, short)
        assert a.entry("late") is None
        del short
        # Dropping the Staged drops the handle on the server: its object is unpinned at once.
        lone = a.stage(b"staged and dropped")
        path = object_file(served, lone.object)
        assert a.stats()["server"]["staged_handles"] == 2
        del lone
        assert a.stats()["server"]["staged_handles"] == 1
        a.gc(grace=0, retain=0)
        assert not path.is_file()


def in_process_and_served(tmp_path, served, scenario):
    """`scenario(store, its directory)` on a new local store, then through the server of
    `served`: (what it saw in-process, what it saw through the server)."""
    with oncelake.Store(tmp_path / "local") as local:
        expected = scenario(local, tmp_path / "local")
    with oncelake.Store(served) as remote:
        got = scenario(remote, served)
    return expected, got


def snapshot_through_gc(store, lake):
    """A view taken before an overwrite keeps the old object through GC with zero retention;
    closing it lets the next GC remove it. What is seen at each step, for the model."""
    seen = []
    old = store.put("k", 1, b"old bytes")
    snap = store.snapshot()
    store.put("k", 2, b"new bytes")
    store.gc(grace=0, retain=0)
    seen.append(object_file(lake, old.object).is_file())
    seen.append(snap.get("k"))
    seen.append([e.source_version for e in snap.ls("")])
    seen.append(store.get("k"))
    snap.close()
    store.gc(grace=0, retain=0)
    seen.append(object_file(lake, old.object).is_file())
    try:
        store.get("k", at=old.seq)
        seen.append("readable")
    except oncelake.OncelakeError as e:
        seen.append(type(e).__name__)
    # Dropping a snapshot without close() releases it too.
    store.put("j", 1, b"j1")
    j1 = store.entry("j")
    view = store.snapshot()
    store.put("j", 2, b"j2")
    del view
    store.gc(grace=0, retain=0)
    seen.append(object_file(lake, j1.object).is_file())
    return seen


def test_a_snapshot_through_the_server_keeps_its_objects_through_gc(tmp_path, served):
    expected, got = in_process_and_served(tmp_path, served, snapshot_through_gc)
    assert got == expected
    # A snapshot id the server did not issue (or one closed) is refused: 410 and what to do.
    status, body = request(served, "GET", "/v1/snapshot/ls?id=12345")
    assert status == 410 and "take a new snapshot" in body["message"], body
    # The model: kept while the view is open, removed after it closed.
    assert expected[:4] == [True, b"old bytes", [1], b"new bytes"]
    assert expected[4] is False and expected[5] == "InvalidInput" and expected[6] is False


def test_stats_through_the_server_label_the_servers_own_counters(served):
    with oncelake.Store(served) as store:
        store.put("a", 1, b"a")
        store.put("a", 1, b"a")
        s = store.stats()
        assert s["units"] == 1 and s["last_seq"] == store.last_seq == 1
        assert s["commits"] == 1 and s["duplicates_collapsed"] == 1 and s["scopes"]["commits"] == "store"
        assert {"requests", "staged_handles", "connections_open"} <= set(s["server"])
        text = store.prometheus()
        assert "oncelake_commits" in text and "oncelake_server_requests_total" in text
        assert "(this server process only)" in text


def damaged_reads(store, lake):
    """A committed object damaged on disk: `get` (now and through a snapshot) raises Corrupt."""
    c = store.put("d", 1, b"bytes that will be damaged")
    path = object_file(lake, c.object)
    os.chmod(path, 0o644)
    path.write_bytes(b"bytes that were damaged!!!")          # same size, other CRC32
    seen = []
    for read in [lambda: store.get("d"), lambda: store.snapshot().get("d")]:
        try:
            read()
            seen.append("read")
        except oncelake.OncelakeError as e:
            seen.append(shape(e))
    return seen


def test_a_damaged_object_raises_corrupt_through_the_server_as_in_process(tmp_path, served):
    expected, got = in_process_and_served(tmp_path, served, damaged_reads)
    assert expected[0][0] == "Corrupt" and len(expected) == 2
    assert got == expected
