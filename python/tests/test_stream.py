"""A 200 MB object is streamed into the store with bounded memory (peak RSS measured in a fresh
process, so nothing else of the test run counts)."""

import json
import shutil
import subprocess

CHILD = r"""
import json, os, resource, sys, oncelake

MB = 1 << 20
SIZE = 200 * MB

class Generated:
    '''A binary file object that produces SIZE bytes on demand (never all in memory).'''
    def __init__(self):
        self.left = SIZE
        self.block = bytes(range(256)) * (MB // 256)
    def read(self, n=-1):
        n = min(self.left, MB if n is None or n < 0 else n)
        self.left -= n
        return self.block[:n] if n <= len(self.block) else self.block * (n // len(self.block)) + self.block[: n % len(self.block)]

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

lake, big = sys.argv[1], sys.argv[2]
with open(big, "wb") as f:
    block = os.urandom(MB)
    for _ in range(SIZE // MB):
        f.write(block)
with oncelake.Store(lake) as store:
    store.put("warm-up", 1, b"x")
    before = peak_mb()
    a = store.put("from-generator", 1, Generated())
    with open(big, "rb") as fh:
        b = store.put("from-file-object", 1, fh)
    with store.run_once("from-path", 1, worker="w", ttl=300) as run:
        run.output = big
    after = peak_mb()
    e = store.entry("from-path")
print(json.dumps({"before_mb": before, "after_mb": after, "sizes": [a.size, b.size, e.size],
                  "same_object": b.object == e.object}))
"""


def run_child(python, child, lake, big):
    """Runs the child in a fresh process and returns what it printed. Its stderr goes into the
    failure (a disk-full store or a server error is then readable in the CI log), and the 600 MB it
    wrote is removed whatever happened: pytest keeps the last runs' temporary folders, and three
    runs of both tests would otherwise hold several GB on a shared disk."""
    try:
        done = subprocess.run([python, "-c", child, str(lake), str(big)], capture_output=True, text=True)
        assert done.returncode == 0, (
            f"the child exited with {done.returncode}; its stderr:\n{done.stderr}\n"
            f"free disk where it wrote: {shutil.disk_usage(big.parent).free >> 20} MB")
        return json.loads(done.stdout)
    finally:
        big.unlink(missing_ok=True)
        shutil.rmtree(lake / "objects", ignore_errors=True)


def test_a_200_mb_object_streams_with_bounded_memory(tmp_path, python):
    r = run_child(python, CHILD, tmp_path / "lake", tmp_path / "big.bin")
    assert r["sizes"] == [200 << 20] * 3 and r["same_object"]
    grew = r["after_mb"] - r["before_mb"]
    print(f"peak RSS {r['before_mb']:.0f} MB before, {r['after_mb']:.0f} MB after 3 x 200 MB puts (+{grew:.1f} MB)")
    # Reading any of the three objects whole would add 200 MB; streaming adds a few buffers.
    assert grew < 32, r
