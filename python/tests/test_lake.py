"""Two nodes of one shared lake (SPEC R23) from Python: ``Store(path, lake=URL)``, checked against a
model of what the lake must hold."""

import pytest

import oncelake
from conftest import serving


def entries(store):
    return {e.unit: (e.source_version, e.object) for e in store.ls()}


def test_two_nodes_on_a_file_lake_decide_across_nodes_and_sync_reads_after_write(tmp_path):
    lake = f"file://{tmp_path / 'lake'}"
    model = {}
    with oncelake.Store(tmp_path / "node1", lake=lake) as n1, oncelake.Store(tmp_path / "node2", lake=lake) as n2:
        assert n1.lake == lake and n2.lake == lake
        first = n1.put("sales/day=1", 1, b"rows of day 1")
        assert isinstance(first, oncelake.Committed)
        model["sales/day=1"] = (1, first.object)
        # Node 2 has not applied node 1's commit yet; its own commit syncs first, so the rules see
        # node 1's entry: a conflict decided across nodes, with node 1's entry as the winner.
        with pytest.raises(oncelake.Conflict) as c:
            n2.put("sales/day=1", 1, b"other rows")
        assert c.value.winner_seq == first.seq and c.value.winner_object == first.object
        again = n2.put("sales/day=1", 1, b"rows of day 1")
        assert isinstance(again, oncelake.Duplicate) and again.seq == first.seq
        with pytest.raises(oncelake.Stale):
            n2.put("sales/day=1", 0, b"older rows")
        second = n2.put("sales/day=2", 1, b"rows of day 2")
        assert isinstance(second, oncelake.Committed) and second.seq > first.seq
        model["sales/day=2"] = (1, second.object)
        # Read-after-write across nodes: after sync, node 1 reads what node 2 committed.
        n1.sync()
        assert entries(n1) == model == entries(n2)
        assert n1.get("sales/day=2") == b"rows of day 2"
        assert n1.last_seq == n2.last_seq
    # A bound node reopens without the URL, and refuses another lake.
    with oncelake.Store(tmp_path / "node1") as n1:
        assert n1.lake == lake and entries(n1) == model
    with pytest.raises(oncelake.OncelakeError):
        oncelake.Store(tmp_path / "node1", lake=f"file://{tmp_path / 'other'}")


def test_memory_lake_nodes_share_one_lake_in_a_process(tmp_path):
    lake = "memory://python-test"
    with oncelake.Store(tmp_path / "a", lake=lake) as a, oncelake.Store(tmp_path / "b", lake=lake) as b:
        a.put("u", 1, b"x")
        b.sync()
        assert b.get("u") == b"x"


def test_a_local_store_has_no_lake_and_sync_does_nothing(store):
    assert store.lake is None
    store.put("u", 1, b"x")
    store.sync()
    assert store.get("u") == b"x"


def test_a_served_node_syncs_through_its_server(tmp_path):
    """`sync()` on a node held by `oncelake serve` asks the server to apply what other nodes
    committed, so what is read next through it sees that: the same answer as in-process."""
    lake = f"file://{tmp_path / 'lake'}"
    oncelake.Store(tmp_path / "served", lake=lake).close()
    model = {}
    with serving(tmp_path / "served"), oncelake.Store(tmp_path / "served") as s, \
            oncelake.Store(tmp_path / "other", lake=lake) as other:
        assert s.served_by is not None
        for day in (1, 2):
            c = other.put(f"sales/day={day}", 1, f"rows of day {day}".encode())
            model[f"sales/day={day}"] = (1, c.object)
            s.sync()
            assert entries(s) == model == entries(other)
            assert s.get(f"sales/day={day}") == f"rows of day {day}".encode()
            assert s.last_seq == other.last_seq
