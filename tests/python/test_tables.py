"""Lake tables read by the real clients (SPEC R21): delta-rs (`deltalake`) and DuckDB's
`delta_scan`, against a model of what each published version must hold.

Run by `.ci/run` with the venv's python: `python -m pytest tests/python`. The oncelake binary is
`$ONCELAKE_BIN` (default: target/debug/oncelake).

This process never imports deltalake or DuckDB: every read of a table runs in a process of its
own (`reader.py`), which leaves with `os._exit` after printing its result, because deltalake
aborts some interpreters at exit (delta-rs #2184) and would fail a run whose assertions passed.
"""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("ONCELAKE_BIN") or str(
    Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "oncelake"
)


def ol(*args, check=True):
    """Runs the oncelake CLI; returns the completed process."""
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"oncelake {args} exited {p.returncode}: {p.stderr}")
    return p


def parquet_file(path, rows):
    """Writes `rows` (list of dicts with id:int, name:str) as a Parquet file."""
    table = pa.table(
        {
            "id": pa.array([r["id"] for r in rows], pa.int64()),
            "name": pa.array([r["name"] for r in rows], pa.string()),
        }
    )
    pq.write_table(table, path)
    return path


class Lake:
    """A store with one table, and the model: unit -> rows, and rows per published version."""

    def __init__(self, tmp, prefix="sales/", name="sales"):
        self.store = tmp / "lake"
        self.files = tmp / "files"
        self.files.mkdir()
        ol("init", self.store)
        ol("table", "create", self.store, name, "--prefix", prefix)
        self.name = name
        self.table = self.store / "tables" / name
        self.current = {}
        self.versions = []  # expected rows at each Delta version
        self.n = 0

    def put(self, unit, version, rows, correct=False):
        self.n += 1
        f = parquet_file(self.files / f"f{self.n}.parquet", rows)
        args = ["put", self.store, unit, version, f, "--json"]
        if correct:
            args.append("--correct")
        out = json.loads(ol(*args).stdout)
        assert out["outcome"] == "committed", out
        self.current[unit] = [dict(r, **partitions(unit)) for r in rows]
        # One store commit -> one table version.
        self.versions.append(self.expected())
        return out["seq"]

    def expected(self):
        return sorted(
            (tuple(sorted(r.items())) for rows in self.current.values() for r in rows)
        )

    def publish(self):
        return json.loads(ol("table", "publish", self.store, self.name, "--json").stdout)


def partitions(unit):
    out = {}
    for seg in unit.split("/")[1:]:
        if "=" in seg:
            k, v = seg.split("=", 1)
            out[k] = v
    return out


READER = Path(__file__).resolve().parent / "reader.py"


def read(op, path, **kw):
    """One read by a real client in its own process (see reader.py); returns its result."""
    p = subprocess.run(
        [sys.executable, str(READER), json.dumps({"op": op, "path": str(path), **kw})],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, f"reader {op} exited {p.returncode}: {p.stderr}"
    out = json.loads(p.stdout)
    assert "error" not in out, f"reader {op}: {out['error']}"
    return out["ok"]


def as_rows(rows):
    """Rows as the model holds them: sorted tuples of (column, value) pairs."""
    return sorted(tuple(tuple(pair) for pair in r) for r in rows)


def delta_rows(path, version=None):
    """The rows delta-rs reads from the table at `path` (at `version`, or the newest)."""
    return as_rows(read("delta_rows", path, version=version))


def delta_info(path, app_id=None):
    """delta-rs' version, history length, partition columns (and app_id's transaction)."""
    return read("delta_info", path, app_id=app_id)


def duck_rows(path, version=None):
    """The rows DuckDB's delta_scan reads from the table at `path`."""
    return as_rows(read("duck_rows", path, version=version))


def check_all_versions(lake, duck_time_travel=True):
    assert delta_info(lake.table)["version"] == len(lake.versions) - 1
    for v, want in enumerate(lake.versions):
        got = delta_rows(lake.table, v)
        assert got == want, f"delta-rs version {v}"
        if duck_time_travel:
            assert duck_rows(lake.table, v) == want, f"duckdb version {v}"
    assert duck_rows(lake.table) == lake.versions[-1]


def test_puts_new_versions_and_corrections_at_every_version(tmp_path):
    lake = Lake(tmp_path)
    lake.put("sales/date=2026-11-29/region=eu", 1, [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    lake.put("sales/date=2026-11-29/region=us", 1, [{"id": 3, "name": "c"}])
    r = lake.publish()
    assert (r["versions"], r["adds"], r["removes"]) == (2, 2, 0)
    check_all_versions(lake)
    # A new version, a new unit, a correction, a unit with a quoted partition value.
    lake.put("sales/date=2026-11-29/region=eu", 2, [{"id": 1, "name": "a2"}])
    lake.put("sales/date=2026-11-30/region=eu", 1, [{"id": 4, "name": "d"}])
    lake.put("sales/date=2026-11-30/region=eu", 1, [{"id": 4, "name": "d-fixed"}], correct=True)
    last = lake.put("sales/date=2026-12-01/region=eu%20west", 1, [{"id": 5, "name": "e"}])
    lake.current["sales/date=2026-12-01/region=eu%20west"] = [
        {"id": 5, "name": "e", "date": "2026-12-01", "region": "eu west"}
    ]
    lake.versions[-1] = lake.expected()
    ol("put", lake.store, "other/x", 1, parquet_file(tmp_path / "o.parquet", [{"id": 9, "name": "z"}]))
    r = lake.publish()
    assert (r["versions"], r["adds"], r["removes"]) == (4, 4, 2)
    assert r["seq"] == last
    check_all_versions(lake)
    info = delta_info(lake.table, r["app_id"])
    assert info["partition_columns"] == ["date", "region"]
    assert info["transaction_version"] == last
    # Publishing again adds nothing.
    assert lake.publish()["versions"] == 0
    assert ol("verify", lake.store).returncode == 0


def published_puts(tmp_path, puts, units):
    """A Lake after `puts` one-row puts (each a new version) over 3 partitions of `units` units,
    published: one table version a put, checkpoints every hundred."""
    lake = Lake(tmp_path)
    for i in range(puts):
        lake.put(f"sales/part={i % 3}/u{i % units}", i + 1, [{"id": i, "name": f"n{i}"}])
    lake.publish()
    return lake


def test_checkpoints_keep_every_version_readable(tmp_path):
    lake = published_puts(tmp_path, 105, 7)
    log = lake.table / "_delta_log"
    assert (log / "00000000000000000100.checkpoint.parquet").exists()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 100
    assert delta_rows(lake.table) == lake.versions[-1]
    for v in (0, 50, 99, 100, 101, 104):
        got = delta_rows(lake.table, v)
        assert got == lake.versions[v], v
        assert duck_rows(lake.table, v) == lake.versions[v], v
    assert duck_rows(lake.table) == lake.versions[-1]


def replayed(table, upto):
    """(live add paths, removed paths not added again) after the JSON versions 0..=upto."""
    live, removed = set(), set()
    for v in range(upto + 1):
        for line in (table / "_delta_log" / f"{v:020}.json").read_text().splitlines():
            action = json.loads(line)
            if "remove" in action:
                live.discard(action["remove"]["path"])
                removed.add(action["remove"]["path"])
            if "add" in action:
                removed.discard(action["add"]["path"])
                live.add(action["add"]["path"])
    return live, removed


def test_checkpoints_carry_remove_tombstones_for_delta_vacuum(tmp_path):
    lake = published_puts(tmp_path, 103, 5)
    log = lake.table / "_delta_log"
    cp = pq.read_table(log / "00000000000000000100.checkpoint.parquet").to_pylist()
    adds = {r["add"]["path"] for r in cp if r["add"]}
    removes = {r["remove"]["path"] for r in cp if r["remove"]}
    live, removed = replayed(lake.table, 100)
    assert (adds, removes) == (live, removed)
    assert len(removes) == 101 - 15, "every superseded file of versions 0..=100 (15 units)"
    # Readers at, before and after the checkpoint see exactly the committed rows.
    for v in (99, 100, 102):
        got = delta_rows(lake.table, v)
        assert got == lake.versions[v], v
        assert duck_rows(lake.table, v) == lake.versions[v], v
    # Delta's own VACUUM (delta-rs' default mode goes by the tombstones) finds every superseded
    # file, also those removed before the checkpoint it starts from.
    _, removed_now = replayed(lake.table, 102)
    stale = read("vacuum", lake.table, dry_run=True)
    assert {Path(p).name for p in stale} == {Path(p).name for p in removed_now}
    # Vacuumed for real: the table's links go, the store's objects stay.
    read("vacuum", lake.table, dry_run=False)
    assert not any((lake.table / p).exists() for p in removed_now)
    assert delta_rows(lake.table) == lake.versions[-1]
    assert duck_rows(lake.table) == lake.versions[-1]
    assert ol("verify", lake.store, "--deep").returncode == 0
    # VACUUM wrote two versions of commitInfo only (START, END); publishing goes on after them.
    lake.versions += [lake.versions[-1]] * 2
    assert delta_info(lake.table)["version"] == len(lake.versions) - 1
    last = lake.put("sales/part=0/u0", 1000, [{"id": 1000, "name": "after vacuum"}])
    r = lake.publish()
    assert (r["versions"], r["version"], r["seq"]) == (1, len(lake.versions) - 1, last), r
    assert delta_rows(lake.table) == lake.versions[-1]
    assert delta_info(lake.table, r["app_id"])["transaction_version"] == last
    assert duck_rows(lake.table) == lake.versions[-1]
    assert ol("verify", lake.store).returncode == 0


def snapshot_tree(root):
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def test_kill_9_during_publish_resumes_to_the_identical_table(tmp_path):
    lake = Lake(tmp_path)
    for i in range(230):
        lake.put(f"sales/part={i % 4}/u{i % 11}", i + 1, [{"id": i, "name": f"n{i}"}])
    reference = tmp_path / "reference"
    shutil.copytree(lake.store, reference)
    ol("table", "publish", reference, "sales")
    want = snapshot_tree(reference / "tables" / "sales")
    killed = 0
    for delay in (0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4, 0.8):
        victim = tmp_path / f"victim{delay}"
        shutil.copytree(lake.store, victim)
        p = subprocess.Popen([BIN, "table", "publish", victim, "sales"])
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        if p.wait() == -signal.SIGKILL:
            killed += 1
        # A second cut, then the resume.
        p = subprocess.Popen([BIN, "table", "publish", victim, "sales"])
        time.sleep(delay / 2)
        p.send_signal(signal.SIGKILL)
        p.wait()
        ol("table", "publish", victim, "sales")
        got = snapshot_tree(victim / "tables" / "sales")
        assert got.keys() == want.keys(), delay
        for k in want:
            assert got[k] == want[k], (delay, k)
        assert delta_rows(victim / "tables" / "sales") == lake.versions[-1]
        assert delta_info(victim / "tables" / "sales")["history"] == len(lake.versions)
    assert killed > 0, "no publish was killed mid-way"


def test_bad_objects_stop_publish_until_corrected(tmp_path):
    lake = Lake(tmp_path)
    lake.put("sales/d=1/a", 1, [{"id": 1, "name": "a"}])
    lake.publish()
    csv = tmp_path / "bad.csv"
    csv.write_text("id,name\n2,b\n")
    bad = json.loads(ol("put", lake.store, "sales/d=1/b", 1, csv, "--json").stdout)["seq"]
    p = ol("table", "publish", lake.store, "sales", check=False)
    assert p.returncode == 2
    assert '"sales/d=1/b"' in p.stderr and f"seq {bad}" in p.stderr, p.stderr
    assert delta_info(lake.table)["version"] == 0
    # Correct it: the bad entry is left out (no rows for the unit at its version), then the fix.
    lake.versions.append(lake.expected())
    lake.put("sales/d=1/b", 1, [{"id": 2, "name": "b"}], correct=True)
    r = lake.publish()
    assert r["skipped"] == [{"unit": "sales/d=1/b", "seq": bad}]
    check_all_versions(lake)
    # A Parquet file of another schema stops it the same way.
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": pa.array([1.5])}), other)
    seq = json.loads(ol("put", lake.store, "sales/d=2/c", 1, other, "--json").stdout)["seq"]
    p = ol("table", "publish", lake.store, "sales", check=False)
    assert p.returncode == 2 and "schema" in p.stderr and f"seq {seq}" in p.stderr, p.stderr
    # A unit without the table's partition segments is refused, naming it.
    (tmp_path / "two").mkdir()
    lake2 = Lake(tmp_path / "two", prefix="t/", name="t")
    lake2.put("t/d=1/a", 1, [{"id": 1, "name": "a"}])
    ol("put", lake2.store, "t/flat", 1, parquet_file(tmp_path / "flat.parquet", [{"id": 2, "name": "x"}]))
    p = ol("table", "publish", lake2.store, "t", check=False)
    assert p.returncode == 2 and '"t/flat"' in p.stderr and "d=..." in p.stderr, p.stderr


def test_gc_with_zero_retention_keeps_every_version_readable(tmp_path):
    lake = Lake(tmp_path)
    for i in range(12):
        lake.put(f"sales/d={i % 2}/u{i % 3}", i + 1, [{"id": i, "name": f"n{i}"}])
    lake.publish()
    gc = json.loads(ol("gc", lake.store, "--retain", "0s", "--grace", "0s", "--json").stdout)
    assert gc["objects"] > 0, gc  # superseded objects left the store ...
    check_all_versions(lake)  # ... and every version still reads (hard links)
    assert ol("verify", lake.store, "--deep").returncode == 0
    # Unpublished commits are kept by GC until published.
    for i in range(12, 18):
        lake.put(f"sales/d={i % 2}/u{i % 3}", i + 1, [{"id": i, "name": f"n{i}"}])
    ol("gc", lake.store, "--retain", "0s", "--grace", "0s")
    lake.publish()
    check_all_versions(lake)
