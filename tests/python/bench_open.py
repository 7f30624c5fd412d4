"""P8: how long delta-rs takes to open a Delta table (best and median of N opens).

Usage: python tests/python/bench_open.py TABLE_DIR [N]
"""

import json
import statistics
import sys
import time

from deltalake import DeltaTable

path = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 5
times = []
for _ in range(n):
    t = time.perf_counter()
    dt = DeltaTable(path)
    version = dt.version()
    files = len(dt.file_uris())
    times.append(time.perf_counter() - t)
print(json.dumps({"table": path, "version": version, "files": files,
                  "open_best_s": min(times), "open_median_s": statistics.median(times), "opens": n}))
