"""No dead code in the package or the suites (issue 28): vulture over both, with the tests counted as users
(a helper only a test calls is still used) and a short, commented whitelist (tests/vulture_whitelist.py) of what
pytest, its plugins or a by-name lookup uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = [
    "--ignore-names",
    "pytest_*",  # hooks: pluggy calls them by name
    "--ignore-decorators",
    "@pytest.fixture,@pytest.hookimpl",  # fixtures are requested by name; hookimpls are hooks
]


def _vulture(*paths: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "vulture", *paths, *OPTIONS], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode in (0, 3), proc.stderr  # 3: dead code found; anything else: vulture itself failed
    return proc.stdout.splitlines()


def test_no_dead_code_in_the_package_or_the_suites():
    found = _vulture("pytest_slurmflox", "suites", "tests")
    dead = [line for line in found if line.startswith(("pytest_slurmflox/", "suites/"))]
    assert not dead, "remove it, or say in tests/vulture_whitelist.py who uses it:\n" + "\n".join(dead)


def test_vulture_finds_an_unused_function(tmp_path: Path):
    """The check can fail: a module with a function nobody calls is reported."""
    (tmp_path / "mod.py").write_text("def used():\n    return 1\n\n\ndef unused():\n    return 2\n\n\nused()\n")
    found = _vulture(str(tmp_path / "mod.py"))
    assert len(found) == 1 and "unused function 'unused'" in found[0]
