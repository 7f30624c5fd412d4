"""Pipeline cells by hand (ready, claim, complete, fail), garbage collection and verification,
each checked against a model of what the store must hold."""

import os

import pytest

import oncelake
from conftest import PIPELINE


def ready_model(p):
    return {(c.unit, c.stage): c for c in p.ready()}


def test_cells_by_hand_claim_complete_and_fence(store):
    p = store.pipeline(PIPELINE)
    p.set_source_version("cust=1", 1, b"raw 1")
    p.set_source_version("cust=2", 1, b"raw 2")
    ready = ready_model(p)
    assert set(ready) == {("cust=1", "ingest"), ("cust=2", "ingest")}, "report waits for ingest"
    cell = ready[("cust=1", "ingest")]
    assert cell.lease is None and cell.attempts == 0 and cell.source_version == 1 and cell.key

    claimed = p.claim(cell, worker="w1", ttl=60)
    assert (claimed.lease.worker, claimed.lease.unit, claimed.key) == ("w1", cell.key, cell.key)
    assert claimed.read_input() == b"raw 1"
    with pytest.raises(oncelake.Busy) as busy:
        p.claim(cell, worker="w2", ttl=60)
    assert (busy.value.worker, busy.value.stage, busy.value.cell) == ("w1", "ingest", cell.key)
    with pytest.raises(oncelake.Busy):
        p.complete(cell, b"RAW 1")  # no token while w1's lease is live

    done = p.complete(claimed, b"RAW 1")
    assert isinstance(done, oncelake.Committed) and done.unit == cell.key and done.size == 5
    with pytest.raises(oncelake.AlreadyDone) as already:
        p.claim(cell, worker="w2", ttl=60)
    assert already.value.cell == cell.key and already.value.entry is None
    retry = p.complete(claimed, b"RAW 1")  # an idempotent retry of the completion
    assert isinstance(retry, oncelake.Duplicate) and retry.seq == done.seq
    with pytest.raises(oncelake.Fenced):
        p.complete(claimed, b"other bytes")  # the completion ended the lease
    again = p.complete(cell, b"RAW 1")  # no lease left: the commit rules decide
    assert isinstance(again, oncelake.Duplicate) and again.seq == done.seq
    with pytest.raises(oncelake.Conflict) as conflict:
        p.complete(cell, b"other bytes")
    assert conflict.value.winner_seq == done.seq

    ready = ready_model(p)
    assert set(ready) == {("cust=1", "report"), ("cust=2", "ingest")}
    report = p.claim(ready[("cust=1", "report")], worker="w2", ttl=60)
    assert report.read_input("ingest") == b"RAW 1"
    assert isinstance(p.complete(report, b"report 1"), oncelake.Committed)
    states = {c["stage"]: c["state"] for c in p.explain("cust=1")["cells"]}
    assert states == {"ingest": "done", "report": "done"}


def test_failures_by_hand_count_attempts_until_the_cell_gives_up(store):
    p = store.pipeline(PIPELINE)
    p.set_source_version("cust=2", 1, b"raw 2")
    p.complete(p.claim(p.ready()[0], worker="w1", ttl=60), b"RAW 2")
    listed = ready_model(p)[("cust=2", "report")]

    first = p.claim(listed, worker="w1", ttl=60)
    rec = p.fail(first, "report failed")
    assert isinstance(rec, oncelake.FailRecorded)
    assert (rec.unit, rec.stage, rec.cell, rec.attempts, rec.gave_up) == ("cust=2", "report", listed.key, 1, False)
    with pytest.raises(oncelake.Fenced) as fenced:
        p.fail(first, "again, under the ended lease")
    assert fenced.value.token == first.lease.token and fenced.value.cell == listed.key
    with pytest.raises(oncelake.Fenced):
        p.complete(first, b"late output")

    second = p.claim(listed, worker="w2", ttl=60)
    assert (second.attempts, second.last_error) == (1, "report failed")
    rec = p.fail(second, "failed twice")
    assert (rec.attempts, rec.gave_up) == (2, True)
    assert ("cust=2", "report") not in ready_model(p)
    with pytest.raises(oncelake.GaveUp) as gave_up:
        p.claim(listed, worker="w3", ttl=60)
    assert gave_up.value.attempts == 2 and isinstance(gave_up.value, oncelake.NothingToDo)
    cells = {c["stage"]: c for c in p.explain("cust=2")["cells"]}
    assert cells["report"]["state"] == "failed" and cells["report"]["attempts"] == 2


def test_a_failure_without_a_claim_names_its_worker(store):
    p = store.pipeline(PIPELINE)
    p.set_source_version("cust=3", 1, b"raw 3")
    cell = p.ready()[0]
    with pytest.raises(ValueError, match="worker="):
        p.fail(cell, "no worker")
    assert p.fail(cell, "by hand", worker="operator").attempts == 1
    holder = p.claim(cell, worker="w1", ttl=60)
    with pytest.raises(oncelake.Busy) as busy:
        p.fail(cell, "while w1 holds it", worker="operator")
    assert busy.value.worker == "w1"
    assert p.fail(holder, "w1 failed").attempts == 2


def test_gc_and_verify_against_a_model(store):
    model = {f"u{i}": f"rows {i}".encode() for i in range(5)}
    for unit, data in model.items():
        store.put(unit, 1, data)
    with pytest.raises(oncelake.Conflict):
        store.put("u0", 1, b"a rejected output")  # leaves an unreferenced object
    v = store.verify()
    assert (v.ok, v.problems, v.entries_checked, v.objects_checked) == (True, 0, 5, 5)
    assert (v.reclaimable.objects, v.reclaimable.object_bytes) == (1, len(b"a rejected output"))
    assert [f.kind for f in v.reclaimable.files] == ["object"]
    orphan = v.reclaimable.files[0].path
    assert os.path.exists(orphan)

    dry = store.gc(dry_run=True)
    assert isinstance(dry, oncelake.GcReport) and (dry.dry_run, dry.objects) == (True, 1)
    assert os.path.exists(orphan), "a dry run removes nothing"
    gc = store.gc()
    assert (gc.objects, gc.object_bytes, gc.objects_referenced) == (1, len(b"a rejected output"), 5)
    assert not os.path.exists(orphan)

    store.put("u1", 2, b"rows 1, version 2")
    model["u1"] = b"rows 1, version 2"
    assert store.gc().objects == 0, "history within the retention keeps the old object"
    pruned = store.gc(retain=0)
    assert (pruned.objects, pruned.history_rows_pruned) == (1, 1)
    v = store.verify(deep=True)
    assert v.ok and v.deep and v.reclaimable.objects == 0 and v.entries_checked == 5
    assert {e.unit: store.get(e.unit) for e in store.ls()} == model


def test_verify_names_what_is_damaged_missing_or_stray(store):
    for unit in ("a", "b", "c"):
        store.put(unit, 1, f"bytes of {unit}".encode())
    with store.snapshot() as snap:
        damaged = snap.object_path(snap.entry("b"))
        lost = snap.object_path(snap.entry("c"))
    os.chmod(damaged, 0o644)
    with open(damaged, "r+b") as fh:
        fh.write(b"X")
    os.remove(lost)
    stray = os.path.join(store.path, "objects", "not-an-object")
    with open(stray, "wb") as fh:
        fh.write(b"junk")
    v = store.verify()
    assert not v.ok and v.problems == 3
    assert [(p.path, [u.unit for u in p.units]) for p in v.corrupt] == [(damaged, ["b"])]
    assert [(p.path, p.units[0].current) for p in v.missing] == [(lost, True)]
    assert [(s.path, s.bytes) for s in v.strays] == [(stray, 4)]
    assert v.affected_units == ["b", "c"] and v.invariants == [] and v.log_problems == []
    assert store.gc().stray_files == 1 and os.path.exists(stray), "GC leaves strays alone"


def test_gc_and_verify_refuse_bad_arguments_and_closed_stores(tmp_path):
    s = oncelake.Store(tmp_path / "lake")
    with pytest.raises(ValueError, match="grace"):
        s.gc(grace=-1)
    with pytest.raises(ValueError, match="retain"):
        s.gc(retain=float("inf"))
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.verify()
