"""tests/README.md stays a true map: every file of tests/ is named once, each test file lives in the folder of its
layer (``unit/``, ``integration/``, ``kvm/``) and is listed under that layer's heading, and the layer is also what
its marker says (a module-level ``pytestmark`` with ``integration`` or ``kvm``; no such mark: unit), so
``-m "not integration and not kvm"`` and the folders never disagree."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SECTIONS = {"unit": "## Unit files", "integration": "## Integration files", "kvm": "## KVM files"}


def _marked_layer(path: Path) -> str:
    marks = re.findall(r"^pytestmark\s*=.*$", path.read_text(), re.M)
    return next((layer for layer in ("integration", "kvm") if any(layer in m for m in marks)), "unit")


def _named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_0-9]+\.py)`", text))


def test_every_file_is_on_the_map_under_its_layer():
    readme = (TESTS / "README.md").read_text()
    parts = re.split(r"^(## .*)$", readme, flags=re.M)
    sections = {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    files = {p.name for p in TESTS.rglob("*.py")}
    assert files <= _named(readme), sorted(files - _named(readme))
    for layer, heading_start in SECTIONS.items():
        heading = next(h for h in sections if h.startswith(heading_start))
        for path in sorted((TESTS / layer).glob("test_*.py")):
            assert path.name in _named(sections[heading]), f"{path.name} is not listed under {heading!r}"


def test_every_test_file_is_in_the_folder_its_marker_names():
    misplaced = [
        f"{path.relative_to(TESTS)}: marked {_marked_layer(path)}"
        for path in sorted(TESTS.rglob("test_*.py"))
        if path.parent.name != _marked_layer(path)
    ]
    assert not misplaced, misplaced
