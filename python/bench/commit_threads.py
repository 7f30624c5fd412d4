#!/usr/bin/env python3
"""Durable commits/s from 1, 4 and 16 Python threads sharing one Store, next to the same workload
driven by Rust threads inside the same native module (same build, same run, same disk).

Each thread commits one distinct unit per commit (`store.commit([(unit, 1, staged)])`) carrying
one pre-staged 100-byte object, for `--seconds`, on a fresh store per measurement. The GIL is
released while the engine commits, so Python threads share commit groups as Rust threads do.

Run: `python python/bench/commit_threads.py [--threads 1,4,16] [--seconds 3] [--dir DIR]`.
"""

import argparse
import json
import os
import tempfile
import threading
import time

import oncelake
from oncelake import _native


def python_run(path, threads, seconds):
    with oncelake.Store(path) as store:
        staged = store.stage(bytes([7]) * 100)
        stop = threading.Event()
        counts = [0] * threads
        barrier = threading.Barrier(threads + 1)

        def work(t):
            barrier.wait()
            i = 0
            while not stop.is_set():
                store.commit([(f"t{t}/u{i}", 1, staged)])
                i += 1
            counts[t] = i

        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        barrier.wait()
        start = time.monotonic()
        time.sleep(seconds)
        stop.set()
        for t in ts:
            t.join()
        elapsed = time.monotonic() - start
        groups = store.stats()["group_units"]
        return sum(counts), elapsed, groups["mean"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--dir", default=None, help="scratch directory (default: the system's temp dir)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    for n in [int(x) for x in a.threads.split(",")]:
        with tempfile.TemporaryDirectory(dir=a.dir) as d:
            py_units, py_s, py_group = python_run(os.path.join(d, "py"), n, a.seconds)
            rs_units, rs_s = _native._rust_commit_bench(os.path.join(d, "rs"), n, a.seconds)
        row = {
            "threads": n,
            "python_commits_per_s": round(py_units / py_s),
            "rust_commits_per_s": round(rs_units / rs_s),
            "python_over_rust": round((py_units / py_s) / (rs_units / rs_s), 2),
            "python_mean_group_units": round(py_group, 1),
        }
        rows.append(row)
        if a.json:
            print(json.dumps(row), flush=True)
    if not a.json:
        print(f"{'threads':>7} {'python commits/s':>17} {'rust commits/s':>15} {'python/rust':>12} {'py units/group':>15}")
        for r in rows:
            print(f"{r['threads']:>7} {r['python_commits_per_s']:>17} {r['rust_commits_per_s']:>15} "
                  f"{r['python_over_rust']:>12} {r['python_mean_group_units']:>15}")


if __name__ == "__main__":
    main()
