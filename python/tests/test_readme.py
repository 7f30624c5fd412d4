"""The README's Python example runs as written."""

import os
import re

from conftest import REPO


def test_the_readme_python_example_runs(tmp_path, monkeypatch):
    text = open(os.path.join(REPO, "README.md")).read()
    section = text.split("## Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "lake").is_dir()
