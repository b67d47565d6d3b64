"""tests/README.md stays a true map: every file of tests/ is named once, and each test file under the layer its
marker says (a module-level ``pytestmark`` with ``integration`` or ``kvm``; no such mark: unit)."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECTIONS = {"unit": "## Unit files", "integration": "## Integration files", "kvm": "## KVM files"}


def _layer(path: Path) -> str:
    marks = re.findall(r"^pytestmark\s*=.*$", path.read_text(), re.M)
    return next((layer for layer in ("integration", "kvm") if any(layer in m for m in marks)), "unit")


def _named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_0-9]+\.py)`", text))


def test_every_file_is_on_the_map_under_its_layer():
    readme = (HERE / "README.md").read_text()
    parts = re.split(r"^(## .*)$", readme, flags=re.M)
    sections = {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    files = {p.name for p in HERE.glob("*.py")}
    assert files <= _named(readme), sorted(files - _named(readme))
    for path in sorted(HERE.glob("test_*.py")):
        heading = next(h for h in sections if h.startswith(SECTIONS[_layer(path)]))
        assert path.name in _named(sections[heading]), f"{path.name} is not listed under {heading!r}"
