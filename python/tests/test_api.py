"""Every call of the Python API, against a model of what must be there."""

import io
import os
import subprocess
import sys

import pytest

import oncelake
from conftest import PIPELINE
from oncelake import errors


def test_put_is_committed_then_duplicate_then_conflict_and_stale(store):
    first = store.put("orders/d=1", 3, b"rows")
    assert isinstance(first, oncelake.Committed)
    assert (first.unit, first.source_version, first.size, first.revision, first.superseded_version) == ("orders/d=1", 3, 4, 0, None)
    again = store.put("orders/d=1", 3, b"rows")
    assert isinstance(again, oncelake.Duplicate) and again.seq == first.seq and again.object == first.object
    with pytest.raises(oncelake.Conflict) as c:
        store.put("orders/d=1", 3, b"other rows")
    assert c.value.winner_seq == first.seq and c.value.winner_object == first.object
    assert c.value.facts["outcome"] == "conflict" and c.value.facts["source_version"] == 3
    newer = store.put("orders/d=1", 4, b"rows v4")
    assert isinstance(newer, oncelake.Committed) and newer.superseded_version == 3
    with pytest.raises(oncelake.Stale) as s:
        store.put("orders/d=1", 3, b"rows")
    assert s.value.current_version == 4
    fixed = store.correct("orders/d=1", 4, b"rows v4 fixed")
    assert isinstance(fixed, oncelake.Committed) and fixed.revision == 1
    assert store.get("orders/d=1") == b"rows v4 fixed"


def test_put_takes_bytes_like_paths_and_binary_files(store, tmp_path):
    f = tmp_path / "out.parquet"
    f.write_bytes(b"from a file" * 1000)
    model = {
        "a": b"bytes",
        "b": b"bytearray",
        "c": b"memoryview",
        "d": f.read_bytes(),
        "e": f.read_bytes(),
        "f": b"file object" * 100_000,
    }
    store.put("a", 1, model["a"])
    store.put("b", 1, bytearray(model["b"]))
    store.put("c", 1, memoryview(model["c"]))
    store.put("d", 1, f)  # os.PathLike
    store.put("e", 1, str(f))  # str is a path
    store.put("f", 1, io.BytesIO(model["f"]))
    assert {e.unit: store.get(e.unit) for e in store.ls()} == model
    with open(f, "rb") as fh:
        assert isinstance(store.put("d", 1, fh), oncelake.Duplicate)


def test_bad_data_is_refused_clearly_and_records_nothing(store, tmp_path):
    with pytest.raises(TypeError, match="bytes, a path"):
        store.put("a", 1, 42)
    with pytest.raises(FileNotFoundError):
        store.put("a", 1, str(tmp_path / "missing"))
    text = tmp_path / "t.txt"
    text.write_text("hello")
    with open(text) as fh, pytest.raises(TypeError, match="binary mode"):
        store.put("a", 1, fh)

    class Failing(io.RawIOBase):
        def read(self, n=-1):
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        store.put("a", 1, Failing())
    with pytest.raises(oncelake.InvalidInput) as bad:
        store.put("bad\nkey", 1, b"x")
    assert isinstance(bad.value, ValueError)
    with pytest.raises(OverflowError):
        store.put("a", -1, b"x")
    assert store.ls() == [] and store.last_seq == 0


def test_all_or_nothing_batch_raises_with_every_outcome_and_applies_nothing(store):
    store.put("b", 2, b"old")
    staged = store.stage(b"staged bytes")
    assert (staged.size, len(staged.object)) == (12, 64)
    before = store.last_seq
    with pytest.raises(oncelake.Stale) as e:
        store.commit([("a", 1, b"a"), ("b", 1, b"b"), ("c", 1, staged)])
    kinds = [type(o).__name__ for o in e.value.outcomes]
    assert kinds == ["Aborted", "Stale", "Aborted"]
    assert store.last_seq == before and store.entry("a") is None
    out = store.commit([("a", 1, b"a"), ("c", 1, staged)])
    assert [type(o) for o in out] == [oncelake.Committed, oncelake.Committed]
    assert out[0].seq == out[1].seq, "one atomic commit"
    part = store.commit([("d", 1, b"d"), ("b", 1, b"b"), ("a", 1, b"a")], partial=True)
    assert [type(o) for o in part] == [oncelake.Committed, oncelake.Stale, oncelake.Duplicate]
    assert store.get("d") == b"d" and store.get("c") == b"staged bytes"
    with pytest.raises(oncelake.InvalidInput, match="twice"):
        store.commit([("x", 1, b"1"), ("x", 1, b"1")])
    with pytest.raises(ValueError):
        store.commit([("x", 1)])


def test_claim_renew_release_and_fenced_puts(store):
    lease = store.claim("u", 1, worker="w1", ttl=30)
    assert (lease.unit, lease.worker, lease.source_version, lease.took_over) == ("u", "w1", 1, False)
    with pytest.raises(oncelake.Busy) as busy:
        store.claim("u", 1, worker="w2", ttl=30)
    assert busy.value.worker == "w1" and busy.value.expires_at_ms == lease.expires_at_ms
    renewed = store.renew(lease, 60)
    assert renewed.token == lease.token and renewed.expires_at_ms >= lease.expires_at_ms
    assert store.release(renewed) is True
    assert store.release(renewed) is False
    with pytest.raises(oncelake.Fenced) as f:
        store.renew(renewed, 30)
    assert f.value.token == lease.token
    # A lease taken over (ttl=0: expired at once) fences its holder's late put.
    short = store.claim("u", 1, worker="w1", ttl=0)
    second = store.claim("u", 1, worker="w2", ttl=30)
    assert second.token > short.token > lease.token and second.took_over
    with pytest.raises(oncelake.Fenced) as f:
        store.put("u", 1, b"late", token=short.token)
    assert (f.value.token, f.value.newest_token) == (short.token, second.token)
    assert isinstance(store.put("u", 1, b"out", token=second.token), oncelake.Committed)
    with pytest.raises(oncelake.AlreadyDone) as done:
        store.claim("u", 1, worker="w3", ttl=30)
    assert done.value.entry.seq == store.entry("u").seq
    with pytest.raises(oncelake.InvalidInput):
        store.claim("u", 2, worker="", ttl=30)
    with pytest.raises(ValueError):
        store.claim("u", 2, worker="w", ttl=-1)


def test_run_once_commits_once_then_is_already_done(store):
    with store.run_once("u", 1, worker="w1", ttl=30) as run:
        assert run.lease.worker == "w1" and run.unit == "u" and run.version == 1
        assert run.renew().token == run.lease.token
        run.output = b"rows"
    assert isinstance(run.outcome, oncelake.Committed) and run.lease is None
    with pytest.raises(oncelake.AlreadyDone):
        with store.run_once("u", 1, worker="w2", ttl=30):
            raise AssertionError("the body must not run")
    m = store.stats()
    assert (m["computations"], m["redundant_computations"]) == (1, 0)


def test_run_once_is_busy_while_another_run_holds_the_unit(store):
    with store.run_once("u", 1, worker="w1", ttl=30) as run:
        for worker in ("w2", "w1"):
            with pytest.raises(oncelake.Busy) as b:
                with store.run_once("u", 1, worker=worker, ttl=30):
                    raise AssertionError("the body must not run")
            assert b.value.worker == "w1"
        run.output = b"x"
    assert store.get("u") == b"x"


def test_an_exception_in_the_body_releases_the_lease_and_records_nothing(store):
    with pytest.raises(KeyError):
        with store.run_once("u", 1, worker="w1", ttl=3600) as run:
            run.output = b"half"
            raise KeyError("etl failed")
    assert store.entry("u") is None
    # Free at once (no expiry needed): the lease was released.
    lease = store.claim("u", 1, worker="w2", ttl=30)
    store.release(lease)
    with pytest.raises(ValueError, match="without run.output"):
        with store.run_once("u", 1, worker="w3", ttl=3600):
            pass
    store.release(store.claim("u", 1, worker="w4", ttl=30))
    assert store.entry("u") is None and store.stats()["computations"] == 2


def test_run_once_output_may_be_a_path_or_a_file_object(store, tmp_path):
    p = tmp_path / "o"
    p.write_bytes(b"from path")
    with store.run_once("a", 1, worker="w", ttl=30) as run:
        run.output = p
    with store.run_once("b", 1, worker="w", ttl=30) as run:
        run.output = io.BytesIO(b"from file object")
    assert (store.get("a"), store.get("b")) == (b"from path", b"from file object")


def test_a_run_whose_lease_was_taken_over_is_fenced_on_leaving(store):
    # ttl=0: the lease expires at once, so another worker takes the unit over mid-body.
    with pytest.raises(oncelake.Fenced) as f:
        with store.run_once("u", 1, worker="slow", ttl=0) as run:
            taker = store.claim("u", 1, worker="fast", ttl=30)
            with pytest.raises(oncelake.Fenced) as lost:
                run.renew(30)
            assert lost.value.newest_token == taker.token
            run.output = b"slow output"
    assert f.value.newest_token == taker.token
    assert store.entry("u") is None
    assert isinstance(store.put("u", 1, b"fast output", token=taker.token), oncelake.Committed)
    assert store.stats()["redundant_computations"] == 1


def test_lookup_snapshots_and_reads_as_of(store):
    assert store.lookup("u") is None and not store.is_done("u", 1)
    c1 = store.put("u", 1, b"one")
    store.put("v/x", 1, b"vx")
    c2 = store.put("u", 2, b"two")
    look = store.lookup("u")
    assert (look.source_version, look.seq, look.object) == (2, c2.seq, c2.object)
    assert store.is_done("u", 2) and not store.is_done("u", 3)
    assert store.get("u", at=c1.seq) == b"one" and store.get("u") == b"two"
    assert store.entry("u", at=c1.seq).source_version == 1
    assert [e.unit for e in store.ls()] == ["u", "v/x"]
    assert [e.unit for e in store.ls("v/")] == ["v/x"]
    assert [e.unit for e in store.ls(at=c1.seq)] == ["u"]
    with store.snapshot() as snap:
        store.put("w", 1, b"after the snapshot")
        assert snap.seq == c2.seq and snap.entry("w") is None
        e = snap.entry("u")
        with open(snap.object_path(e), "rb") as fh:
            assert fh.read() == b"two"
        assert snap.get("u") == b"two" and [x.unit for x in snap.ls()] == ["u", "v/x"]
        assert snap.history_from <= c1.seq
    with pytest.raises(ValueError, match="closed"):
        snap.seq
    with store.snapshot(at=c1.seq) as old:
        assert old.get("u") == b"one" and old.get("v/x") is None
    with pytest.raises(oncelake.InvalidInput) as oor:
        store.snapshot(at=10_000)
    assert oor.value.asked == 10_000


def test_changes_since_is_the_log(store):
    store.put("a", 1, b"a")
    lease = store.claim("b", 1, worker="w", ttl=30)
    store.release(lease)
    recs = store.changes_since(0)
    assert [r.kind for r in recs] == ["commit", "claim_granted", "claim_released"]
    assert recs[0].entries[0].unit == "a" and recs[1].token == lease.token and recs[1].worker == "w"
    assert [r.seq for r in store.changes_since(recs[0].seq)] == [r.seq for r in recs[1:]]
    store.flush()


def test_reconcile_incremental_and_full_match_the_model(store):
    store.put("a", 1, b"a")
    store.put("b", 5, b"b")
    store.put("z", 1, b"z")
    plan = store.reconcile([("a", 2), ("b", 5), ("c", 1)])
    assert {(u.unit, u.action) for u in plan.units} == {("a", "behind"), ("c", "missing")}
    assert plan.summary["to_process"] == 2 and plan.summary["up_to_date"] == 1
    assert [u.unit for u in plan.to_process()] == ["a", "c"]
    full = store.reconcile(iter([("c", 1), ("b", 5), ("a", 2)]), full=True, list_up_to_date=True)
    assert [(u.unit, u.action, u.source_version, u.manifest_version) for u in full.units] == [
        ("a", "behind", 2, 1),
        ("b", "up_to_date", 5, 5),
        ("c", "missing", 1, None),
        ("z", "unknown", None, 1),
    ]
    with pytest.raises(oncelake.InvalidInput):
        store.reconcile([("bad\x00", 1)])
    with pytest.raises(ValueError):
        store.reconcile([("a", "x")])


def test_pipelines_run_each_cell_once_and_record_failures(store):
    p = store.pipeline(PIPELINE)
    assert isinstance(p.set_source_version("cust=1", 1, b"raw 1"), oncelake.Committed)
    p.set_source_version("cust=2", 1, b"raw 2")
    calls = []

    def stage_fn(cell):
        calls.append((cell.unit, cell.stage))
        if cell.stage == "ingest":
            return cell.read_input().upper()
        if cell.unit == "cust=2":
            raise RuntimeError("report failed")
        return b"report of " + cell.read_input("ingest")

    report = p.work("w1", stage_fn)
    assert report["completed"] == 3 and report["failed"] == 2
    assert sorted(set(calls)) == [("cust=1", "ingest"), ("cust=1", "report"), ("cust=2", "ingest"), ("cust=2", "report")]
    ex = p.explain("cust=2")
    states = {c["stage"]: c["state"] for c in ex["cells"]}
    assert states == {"ingest": "done", "report": "failed"} and "report failed" in ex["cells"][1]["last_error"]
    st = {s["stage"]: s for s in p.status()["stages"]}
    assert (st["ingest"]["done"], st["report"]["done"], st["report"]["failed"]) == (2, 1, 1)
    assert p.work("w1", stage_fn)["runs"] == 0, "nothing left to do"
    with pytest.raises(oncelake.InvalidInput, match="cycle"):
        store.pipeline('[stage.a]\ncode_version = 1\nupstream = ["b"]\n[stage.b]\ncode_version = 1\nupstream = ["a"]\n')


def test_stats_and_prometheus(store):
    store.put("a", 1, b"a")
    store.put("a", 1, b"a")
    s = store.stats()
    assert (s["units"], s["last_seq"], s["commits"], s["duplicates_collapsed"]) == (1, 1, 1, 1)
    assert s["commit_latency_us"]["count"] == 2 and s["store"] == store.path
    assert "oncelake_commits_total 1" in store.prometheus()


def test_a_closed_store_refuses_calls_and_a_second_process_gets_locked(tmp_path, python):
    path = tmp_path / "lake"
    s = oncelake.Store(path)
    s.put("a", 1, b"a")
    code = "import oncelake, sys\ntry:\n    oncelake.Store(sys.argv[1])\nexcept oncelake.Locked as e:\n    print(e.kind, e.path)\n"
    out = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["locked", str(path)]
    s.close()
    assert s.closed and "closed" in repr(s)
    with pytest.raises(ValueError, match="closed"):
        s.put("a", 1, b"a")
    with oncelake.Store(path) as again:
        assert again.get("a") == b"a"


def test_a_damaged_object_is_corrupt_and_a_non_store_is_invalid(store, tmp_path):
    store.put("a", 1, b"original bytes")
    with store.snapshot() as snap:
        p = snap.object_path(snap.entry("a"))
    os.chmod(p, 0o644)
    with open(p, "r+b") as fh:
        fh.write(b"X")
    with pytest.raises(oncelake.Corrupt) as c:
        store.get("a")
    assert "objects/" in c.value.path
    (tmp_path / "notastore").mkdir()
    (tmp_path / "notastore" / "file").write_text("x")
    with pytest.raises(oncelake.InvalidInput):
        oncelake.Store(tmp_path / "notastore")


def test_exception_classes_form_one_hierarchy():
    for cls, base in [
        (oncelake.Conflict, oncelake.Rejected),
        (oncelake.Stale, oncelake.Rejected),
        (oncelake.Fenced, oncelake.Rejected),
        (oncelake.Aborted, oncelake.Rejected),
        (oncelake.Busy, oncelake.NothingToDo),
        (oncelake.AlreadyDone, oncelake.NothingToDo),
        (oncelake.Locked, oncelake.OncelakeError),
        (oncelake.Corrupt, oncelake.OncelakeError),
        (oncelake.InvalidInput, ValueError),
        (oncelake.StoreError, oncelake.OncelakeError),
        (oncelake.Rejected, oncelake.OncelakeError),
        (oncelake.NothingToDo, oncelake.OncelakeError),
    ]:
        assert issubclass(cls, base), (cls, base)
    e = errors._make("stale", "m", {"current_version": 3})
    assert type(e) is oncelake.Stale and e.current_version == 3 and e.facts == {"current_version": 3}
    assert type(errors._make("no such kind", "m")) is oncelake.StoreError


def test_the_package_is_typed():
    pkg = os.path.dirname(oncelake.__file__)
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    assert os.path.exists(os.path.join(pkg, "_native.pyi"))
    assert oncelake.Store.__doc__ and oncelake.Store.run_once.__doc__ and oncelake.Store.put.__doc__
