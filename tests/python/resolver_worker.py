"""A pipeline resolver process for test_resolver_kill.py: works a pipeline's cells through
`oncelake serve` (ready, claim with a lease, read the inputs, complete) until every cell is done,
printing one JSON line per claim and completion. Python's standard library only.

    python resolver_worker.py BASE TOKEN PIPELINE_FILE WORKER TTL_MS [HOLD]

With HOLD = N it claims N cells, prints {"holding": [...]} and then waits without completing
them, to be killed with -9 while it holds their leases.
"""

import hashlib
import json
import sys
import time
import urllib.request


def main(base, token, pipeline_file, worker, ttl_ms, hold=0):
    pipeline = open(pipeline_file).read()

    def call(path, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(base + path, data=data, method="POST",
                                     headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def say(**line):
        print(json.dumps(line | {"worker": worker, "at_ms": int(time.time() * 1000)}), flush=True)

    held = []
    while True:
        status = json.loads(call("/v1/pipeline/status", {"pipeline": pipeline}))
        if all(s["done"] == status["units"] for s in status["stages"]):
            say(finished=True)
            return
        ready = json.loads(call("/v1/pipeline/ready", {"pipeline": pipeline, "limit": 100}))["cells"]
        claimed = None
        for cell in ready:
            got = json.loads(call("/v1/pipeline/claim", {"pipeline": pipeline, "cell": cell,
                                                         "worker": worker, "ttl_ms": ttl_ms}))
            if got["claim"] == "granted":
                claimed = got
                break
        if claimed is None:
            time.sleep(0.05)
            continue
        cell, lease = claimed["cell"], claimed["lease"]
        say(claimed=cell["key"], expires_at_ms=lease["expires_at_ms"])
        if hold:
            held.append(cell["key"])
            if len(held) == hold:
                say(holding=held)
                while True:
                    time.sleep(60)
            continue
        # The cell's output: a function of its inputs' bytes only, so any worker computes the same.
        digest = hashlib.sha256(cell["stage"].encode())
        for inp in cell["inputs"]:
            digest.update(call("/v1/pipeline/input", {"cell": cell, "stage": inp["stage"]}))
        time.sleep(0.02)  # the work
        attempt = {"unit": cell["unit"], "stage": cell["stage"], "source_version": cell["source_version"],
                   "worker": worker, "token": lease["token"]}
        head = json.dumps({"pipeline": pipeline, "attempt": attempt}).encode()
        out = json.loads(call("/v1/pipeline/complete", head + b"\n" + digest.hexdigest().encode()))
        say(completed=cell["key"], outcome=out["outcome"])


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]) if len(a) > 5 else 0)
