"""Seed 002's resolver across processes (SPEC R24, R13, R20): resolver processes work a
pipeline's cells through `oncelake serve`; one is killed with -9 while it holds leases on two
cells, a replacement is started, and the cells it held are taken over once their leases expire —
never before — and completed once. The outputs (a function of the inputs only) are the same as
those of one resolver working a twin store undisturbed. The time from the kill to the last of the
held cells completed (time to recovery) is printed, not asserted (run `pytest -s` to see it):
speed is measured, never asserted in a test.

Run by `.ci/run` with the venv's python: `pytest tests/python`. The binary is `$ONCELAKE_BIN`.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from served import Server, pipeline_toml

HERE = Path(__file__).resolve().parent
TTL_MS = 1500
UNITS = [f"clicks/d={d}" for d in range(1, 9)]
# a -> {b, c} -> d: a diamond, so a held cell of `a` blocks three cells downstream of it.
PIPELINE = pipeline_toml(("a", 1, []), ("b", 1, ["a"]), ("c", 1, ["a"]), ("d", 1, ["b", "c"]))


class Resolver:
    """A resolver_worker.py process whose JSON lines are collected as they come."""

    def __init__(self, srv, pipeline_file, name, hold=0):
        self.lines = []
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "resolver_worker.py"), srv.base, srv.token, str(pipeline_file),
             name, str(TTL_MS), str(hold)], stdout=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def wait(self, timeout=120):
        assert self.proc.wait(timeout=timeout) == 0
        self.reader.join(timeout=10)


def start(tmp_path, name):
    srv = Server(tmp_path / name)
    pipeline_file = tmp_path / f"{name}.toml"
    pipeline_file.write_text(PIPELINE)
    srv.call("POST", "/v1/pipeline/define", {"pipeline": PIPELINE})
    for i, u in enumerate(UNITS):
        srv.call("PUT", f"/v1/pipeline/source?unit={u.replace('=', '%3D')}&version=1", f"raw clicks {i}".encode())
    return srv, pipeline_file


def outputs(srv):
    """(unit, stage) -> the object its done cell holds, through `explain`."""
    out = {}
    for u in UNITS:
        e = srv.call("POST", "/v1/pipeline/explain", {"pipeline": PIPELINE, "unit": u})
        for c in e["cells"]:
            assert c["state"]["state"] == "done", c
            out[(u, c["stage"])] = c["state"]["object"]
    return out


def test_a_killed_resolvers_cells_resume_after_their_leases(tmp_path):
    twin, twin_file = start(tmp_path, "twin")
    srv, pipeline_file = start(tmp_path, "lake")
    try:
        alone = Resolver(twin, twin_file, "alone")

        victim = Resolver(srv, pipeline_file, "victim", hold=2)
        deadline = time.monotonic() + 30
        while not any("holding" in line for line in victim.lines):
            assert time.monotonic() < deadline, "the victim never held two cells"
            time.sleep(0.02)
        survivor = Resolver(srv, pipeline_file, "survivor")
        held = {line["claimed"]: line["expires_at_ms"] for line in victim.lines if "claimed" in line}
        assert len(held) == 2
        victim.proc.send_signal(signal.SIGKILL)
        killed_at_ms = int(time.time() * 1000)
        victim.proc.wait(timeout=10)
        replacement = Resolver(srv, pipeline_file, "replacement")

        for r in (survivor, replacement, alone):
            r.wait()
        lines = survivor.lines + replacement.lines

        # Each held cell: claimed again only after the victim's lease expired, completed once.
        done_at = {}
        for key, expires in held.items():
            claims = [line for line in lines if line.get("claimed") == key]
            assert claims and all(c["at_ms"] >= expires for c in claims), (key, expires, claims)
            completions = [line for line in lines if line.get("completed") == key]
            assert [c["outcome"] for c in completions] == ["committed"], completions
            done_at[key] = completions[0]["at_ms"]
        # No cell completed twice, and none by the victim.
        committed = [line["completed"] for line in lines if line.get("outcome") == "committed"]
        assert len(committed) == len(set(committed)) == len(UNITS) * 4, committed
        assert not any("completed" in line for line in victim.lines)

        stats = srv.call("GET", "/v1/stats")["counters"]
        assert stats["claims_taken_over"] + stats["claims_expired"] >= 2, stats
        assert outputs(srv) == outputs(twin), "a different answer than one undisturbed resolver's"
        recovery = (max(done_at.values()) - killed_at_ms) / 1000
        print(f"\ntime to recovery after kill -9 (lease {TTL_MS} ms): {recovery:.2f} s "
              f"(the held cells' leases had {(max(held.values()) - killed_at_ms) / 1000:.2f} s left)")
    finally:
        for p in ("victim", "survivor", "replacement", "alone"):
            r = locals().get(p)
            if r and r.proc.poll() is None:
                r.proc.kill()
        srv.stop()
        twin.stop()
