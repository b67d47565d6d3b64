"""Docstrings state contracts, not history: no docstring of the package or the suites names an issue.

A docstring says what a module, class or function guarantees; which issue asked for it, and what was measured on
the way, lives in docs/design-notes.md ("History moved from docstrings"). This test reads the AST of
``pytest_slurmflox/``, ``suites/`` and ``bench/`` and fails on ``#<n>`` or ``issue <n>`` in a module, class or function
docstring.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("pytest_slurmflox", "suites", "bench")
#: ``#29``, ``issue 26``, ``issues 13 and 16``, ``issue #20``; not a kernel build number (``OS=Linux 6.1.0 #1 SMP``,
#: the OS field of a Slurm node record) nor a colour (``#2e7d32``).
ISSUE_REFERENCE = re.compile(r"(?<![\w&#])#\d+\b(?! SMP\b)|\bissues? #?\d+", re.IGNORECASE)


def issue_references(source: str, file: str) -> list[str]:
    """``file:line name: reference`` for each issue reference in a module, class or function docstring."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        doc = ast.get_docstring(node, clean=False)
        for match in ISSUE_REFERENCE.finditer(doc or ""):
            name = getattr(node, "name", "<module>")
            found.append(f"{file}:{getattr(node, 'lineno', 1)} {name}: {match.group()}")
    return found


def references_under(root: Path) -> list[str]:
    out = []
    for base in SCANNED:
        for path in sorted((root / base).rglob("*.py")):
            out += issue_references(path.read_text(), str(path.relative_to(root)))
    return out


def test_no_docstring_names_an_issue():
    found = references_under(ROOT)
    assert not found, "say what it guarantees; history goes to docs/design-notes.md:\n" + "\n".join(found)


def test_the_scan_fails_on_planted_references(tmp_path: Path):
    for base in SCANNED:
        (tmp_path / base).mkdir()
    (tmp_path / "pytest_slurmflox/planted.py").write_text(
        '"""A module (issue 26)."""\n\n\n'
        "class Holder:\n"
        '    """Holds it (#29)."""\n\n'
        "    def get(self):\n"
        '        """Gets it; see issue #20 and issues 13."""\n\n\n'
        "async def wait():\n"
        '    """Waits. Fixed in ISSUE 7."""\n'
    )
    (tmp_path / "suites/test_planted.py").write_text(
        'def test_x():\n    """Colours #2e7d32 and OS=Linux 6.1.0 #1 SMP are no references."""\n    x = "#13"\n'
    )
    assert references_under(tmp_path) == [
        "pytest_slurmflox/planted.py:1 <module>: issue 26",
        "pytest_slurmflox/planted.py:4 Holder: #29",
        "pytest_slurmflox/planted.py:11 wait: ISSUE 7",
        "pytest_slurmflox/planted.py:7 get: issue #20",
        "pytest_slurmflox/planted.py:7 get: issues 13",
    ]
