"""The code stays lint- and format-clean (ruff, configured in pyproject.toml): CI enforces it through this test."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff(args):
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (pip install 'pytest-slurmflox[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
