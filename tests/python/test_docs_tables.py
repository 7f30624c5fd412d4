"""docs/tables.md, "Reading a table: delta-rs and DuckDB, offline", run as written: its shell lines
with the oncelake binary on PATH and ONCELAKE_EXAMPLES set as the README's setup sets them, then
each of its Python blocks in a process of its own (delta-rs may abort at exit, delta-rs #2184: a
block's printed output is what is checked), in one empty directory.

Run by `.ci/run` with the venv's python: `pytest tests/python`. The binary is `$ONCELAKE_BIN`
(default: target/debug/oncelake).
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("ONCELAKE_BIN") or str(
    Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "oncelake"
)
SECTION = "## Reading a table: delta-rs and DuckDB, offline"


def blocks(lang):
    text = (ROOT / "docs" / "tables.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    out = []
    for part in section.split("```" + lang + "\n")[1:]:
        out.append(part.split("```", 1)[0])
    return out


def test_the_reading_section_runs_as_written(tmp_path):
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(BIN).parent), str(Path(sys.executable).parent), env["PATH"]])
    env["ONCELAKE_EXAMPLES"] = str(ROOT / "examples")
    (shell,) = blocks("sh")
    for line in shell.splitlines():
        if line.strip() and not line.startswith("#"):
            p = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True)
            assert p.returncode == 0, f"{line}: {p.stderr}"
    readers = blocks("python")
    assert len(readers) == 2, "deltalake and DuckDB"
    for code in readers:
        p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
        for item in ("apples", "pears", "plums", "2026-11-29"):
            assert item in p.stdout, f"{code}\nprinted {p.stdout!r}, stderr {p.stderr!r}"
