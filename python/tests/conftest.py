import contextlib
import os
import signal
import subprocess
import sys

import pytest

import oncelake

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The two-stage pipeline the API, manual and served tests define (ingest, then report with two
# attempts), the same text everywhere so their cells compare.
PIPELINE = """
[stage.ingest]
code_version = 1

[stage.report]
code_version = 1
upstream = ["ingest"]
max_attempts = 2
"""


@pytest.fixture
def store(tmp_path):
    with oncelake.Store(tmp_path / "lake") as s:
        yield s


@pytest.fixture
def python():
    return sys.executable


def oncelake_bin():
    """The `oncelake` binary that `oncelake serve` runs from: `$ONCELAKE_BIN`, or the debug build
    (`cargo build -p oncelake-cli --bin oncelake`, as `.ci/run` does before these tests)."""
    path = os.environ.get("ONCELAKE_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target"), "debug", "oncelake"
    )
    if not os.access(path, os.X_OK):
        pytest.fail(f"no oncelake binary at {path}: build it with `cargo build -p oncelake-cli --bin oncelake` "
                    "or set ONCELAKE_BIN")
    return path


@contextlib.contextmanager
def serving(lake):
    """Runs `oncelake serve lake` (creating the store first) until the block ends; yields the
    server's process. The server prints its ready line once it holds the store and listens."""
    oncelake.Store(lake).close()
    proc = subprocess.Popen([oncelake_bin(), "serve", str(lake)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("serving"):
            proc.kill()
            raise RuntimeError(f"oncelake serve did not start: {line!r} {proc.stderr.read()}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)


@pytest.fixture
def served(tmp_path):
    """A store held by a running `oncelake serve`: yields its path."""
    lake = tmp_path / "lake"
    with serving(lake):
        yield lake
