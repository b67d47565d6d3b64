"""tests/README.md stays a true map: every file of tests/ is named once, each test file lives in the folder of its
layer (``unit/``, ``integration/``, ``kvm/``) and is listed under that layer's heading, and the layer is also what
its marker says (a module-level ``pytestmark`` with ``integration`` or ``kvm``; no such mark: unit), so
``-m "not integration and not kvm"`` and the folders never disagree.

Test files are named for what they test. A unit file ``test_<name>.py`` names a module of the package: ``<name>`` is a
module's file name, or its folders and file name joined by ``_`` (``render_values`` for ``render/values.py``), searched
in every folder of what the wheel installs as ``pytest_slurmflox`` (the package, ``suites/``, ``provision/``): a
``.py`` or ``.sh`` file, a folder's ``__init__.py`` naming the folder, one leading ``_`` dropped and ``-`` read as
``_`` (``_marks.py``: ``marks``; ``task-prolog.sh``: ``task_prolog``). A unit file that tests no single module is a
row of the map's table of capability tests, with a one-line reason. An integration or kvm file name carries no round
or issue number: its only digits are a check's id (``t2``, ``t11``). No test function's name carries a round, trust
round, issue or item number."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SECTIONS = {"unit": "## Unit files", "integration": "## Integration files", "kvm": "## KVM files"}
#: What the wheel installs as ``pytest_slurmflox`` (pyproject.toml's package-dir).
PACKAGE_ROOTS = ("pytest_slurmflox", "suites", "provision")
CAPABILITY_ROW = re.compile(r"^\| `(test_[a-z_0-9]+\.py)` \| (.*?) *\|$", re.M)
#: A check's id in a scenario file's name (``test_t2_nix_...``): the only digits such a name may hold.
CHECK_ID = re.compile(r"(?<=_)t\d{1,2}(?=_)")
ROUND_NUMBER = re.compile(r"(?:issue|trust|round|item)_?\d", re.I)


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


def _part(name: str) -> str:
    return name.removeprefix("_").replace("-", "_")


def _module_names() -> set[str]:
    """Every name a unit file may take after a module: each file's or folder's tail of path parts, joined by ``_``."""
    names: set[str] = set()
    for root in PACKAGE_ROOTS:
        for path in sorted((TESTS.parent / root).rglob("*")):
            if path.suffix not in (".py", ".sh") or "__pycache__" in path.parts:
                continue
            parts = path.relative_to(TESTS.parent).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            tails = [[_part(p) for p in parts[i:]] for i in range(len(parts))]
            names.update("_".join(tail) for tail in tails)
    return names


def _capability_rows() -> dict[str, str]:
    readme = (TESTS / "README.md").read_text()
    return {name: reason for name, reason in CAPABILITY_ROW.findall(readme)}


def test_every_unit_file_names_its_module_or_is_a_capability_test_with_a_reason():
    modules, rows = _module_names(), _capability_rows()
    unnamed = [
        f"tests/unit/{path.name}: no module of {', '.join(PACKAGE_ROOTS)} is called {path.stem[5:]!r}; rename it "
        f"after the module it tests, or add a row `| `{path.name}` | why it tests no single module |` to the "
        "table of capability tests in tests/README.md"
        for path in sorted((TESTS / "unit").glob("test_*.py"))
        if path.stem[5:] not in modules and path.name not in rows
    ]
    assert not unnamed, "\n".join(unnamed)
    stale = sorted(name for name in rows if not (TESTS / "unit" / name).exists())
    assert not stale, f"capability rows for unit files that do not exist: {stale}"
    unexplained = sorted(name for name, reason in rows.items() if not reason.strip())
    assert not unexplained, f"capability rows without a reason: {unexplained}"


def test_scenario_file_names_carry_no_round_numbers_only_check_ids():
    numbered = [
        str(path.relative_to(TESTS))
        for layer in ("integration", "kvm")
        for path in sorted((TESTS / layer).glob("test_*.py"))
        if re.search(r"\d", CHECK_ID.sub("", path.stem))
    ]
    assert not numbered, f"name these for what they test (a check's id like t2 is the only number allowed): {numbered}"


def test_no_test_function_is_named_after_a_round_or_an_issue():
    sources = [*TESTS.rglob("test_*.py"), *(TESTS.parent / "suites").glob("test_*.py")]
    named = [
        f"{path.relative_to(TESTS.parent)}: {name}"
        for path in sorted(sources)
        for name in re.findall(r"^\s*(?:async\s+)?def (test_\w+)", path.read_text(), re.M)
        if ROUND_NUMBER.search(name)
    ]
    assert not named, named
