import os
import sys

import pytest

import oncelake

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def store(tmp_path):
    with oncelake.Store(tmp_path / "lake") as s:
        yield s


@pytest.fixture
def python():
    return sys.executable
