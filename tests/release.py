"""The release as ``python -m build`` makes it, for the tests that check it (tests/unit/test_wheel_contents.py) and
install it (tests/integration/test_wheel_install.py): the version from the one place it is written, the sdist and
wheel built from a copy of the checkout into a ``dist/`` directory, and the wheel's name there."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", "reports", "operator", ".venv", ".hypothesis", ".ruff_cache"
)


def project_version() -> str:
    """The version, from the one place it is written (pyproject.toml)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def build_dist(out: Path) -> Path:
    """``python -m build`` from a copy of the checkout (other work in the tree never races the build): the sdist,
    then the wheel built from that sdist, so a file the sdist forgets is missing from the wheel too. Returns the
    ``dist/`` directory holding both."""
    src = out / "src"
    shutil.copytree(REPO, src, ignore=IGNORE)
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out / "dist"


def built_wheel(dist: Path) -> Path:
    """The one wheel of this version in ``dist``, by the name a release gives it."""
    return dist / f"pytest_slurmflox-{project_version()}-py3-none-any.whl"
