"""The code is formatted and linted by the pinned ruff (`make lint`; `make format` fixes what it can)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

RUFF = Path(sys.executable).parent / "ruff"


@pytest.mark.parametrize("command", [["format", "--check", "."], ["check", "."]], ids=["format", "lint"])
def test_ruff(command):
    result = subprocess.run([str(RUFF), *command], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
