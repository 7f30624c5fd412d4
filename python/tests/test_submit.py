"""`Store.submit`: commits in flight from one thread, answered through handles, against a model of
what must be committed."""

import threading

import pytest

import oncelake


def test_many_commits_in_flight_are_answered_by_the_rules_and_the_store_ends_as_the_model(store):
    model = {}  # unit -> (version, data)
    handles = []
    for i in range(300):
        unit, version, data = f"s/{i % 120}", 1 + i // 120, b"rows %d" % (i % 120)
        handles.append(((unit, version, data), store.submit([(unit, version, data)])))
        if i % 120 == 119:
            # A unit's next version goes in only after its earlier one is answered.
            for (unit, version, data), h in handles:
                [outcome] = h.wait()
                assert isinstance(outcome, oncelake.Committed), outcome
                assert (outcome.unit, outcome.source_version) == (unit, version)
                assert h.done()
                model[unit] = (version, data)
            handles = []
    for (unit, version, data), h in handles:
        assert isinstance(h.wait()[0], oncelake.Committed)
        model[unit] = (version, data)
    assert {e.unit: e.source_version for e in store.ls()} == {u: v for u, (v, _) in model.items()}
    assert all(store.get(u) == d for u, (_, d) in model.items())
    # The same again: duplicates; a second wait answers the same.
    again = store.submit([(u, v, d) for u, (v, d) in model.items()])
    first = again.wait()
    assert all(isinstance(o, oncelake.Duplicate) for o in first) and len(first) == len(model)
    assert [o.seq for o in again.wait()] == [o.seq for o in first]


def test_a_rejected_commit_raises_from_its_handle_and_changes_nothing(store):
    assert isinstance(store.submit([("u", 2, b"v2")]).wait()[0], oncelake.Committed)
    stale = store.submit([("u", 1, b"v1"), ("w", 1, b"new")])
    conflict = store.submit([("u", 2, b"other")])
    partial = store.submit([("u", 2, b"other"), ("x", 1, b"x")], partial=True)
    with pytest.raises(oncelake.Stale) as s:
        stale.wait()
    assert s.value.current_version == 2 and len(s.value.outcomes) == 2
    with pytest.raises(oncelake.Stale):
        stale.wait()  # the same answer again
    with pytest.raises(oncelake.Conflict):
        conflict.wait()
    got = partial.wait()
    assert isinstance(got[0], oncelake.Conflict) and isinstance(got[1], oncelake.Committed)
    assert {e.unit for e in store.ls()} == {"u", "x"}, "an all-or-nothing commit left a unit"
    with pytest.raises(ValueError):
        store.submit([("u",)])


def test_handles_are_waited_from_other_threads_and_dropped_handles_still_commit(tmp_path):
    path = tmp_path / "lake"
    with oncelake.Store(path) as store:
        handles = [store.submit([(f"t/{i}", 1, b"x")]) for i in range(64)]
        results = {}

        def waiter(k):
            results[k] = handles[k].wait(timeout=60)

        threads = [threading.Thread(target=waiter, args=(k,)) for k in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == list(range(64))
        assert all(isinstance(r[0], oncelake.Committed) for r in results.values())
        for i in range(100):
            store.submit([(f"d/{i}", 1, b"dropped")])  # handle dropped at once
    with oncelake.Store(path, lock_wait=60) as store:
        assert {e.unit for e in store.ls() if e.unit.startswith("d/")} == {f"d/{i}" for i in range(100)}


def test_through_a_server_submit_commits_at_the_call_and_answers_as_commit(served):
    with oncelake.Store(served) as store:
        assert store.served_by is not None
        h = store.submit([("srv/a", 1, b"a"), ("srv/b", 1, b"b")])
        assert h.done()
        assert [type(o) for o in h.wait()] == [oncelake.Committed, oncelake.Committed]
        with pytest.raises(oncelake.Conflict):
            store.submit([("srv/a", 1, b"other")]).wait()
        assert {e.unit: store.get(e.unit) for e in store.ls()} == {"srv/a": b"a", "srv/b": b"b"}
