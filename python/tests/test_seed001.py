"""examples/seed001.py: with oncelake.run_once every batch has exactly one output, there are no
duplicate side effects, and no batch was done twice while its lease was live."""

import json
import os
import subprocess

from conftest import REPO


def test_seed001_run_once_has_one_output_per_batch(python):
    out = subprocess.run(
        [python, os.path.join(REPO, "examples", "seed001.py"), "--workers", "4", "--batches", "30", "--json"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    sqlite, once = [json.loads(line) for line in out.splitlines()]
    assert sqlite["pattern"].startswith("check-then-act") and sqlite["killed_workers"] == 1
    # The seed's pattern loses nothing (every batch has an output), whatever its duplicates.
    assert "0" not in sqlite["outputs_per_batch"]
    assert once["outputs_per_batch"] == {"1": 30}
    assert once["worker_processes"] == 4  # each with its own Store, through `oncelake serve`
    assert once["duplicate_side_effects"] == 0
    assert once["done_twice_while_lease_live"] == 0
    assert once["commits_per_batch_max"] == 1 and once["committed_outcomes"] == 30
    # Only the killed worker's batch may run twice (after its lease expired).
    assert once["processed_more_than_once"] <= 1
