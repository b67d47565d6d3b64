"""The package's shape: small modules and functions, imports that point one way, and a clean type check.

Sizes are counted in source lines (a module) and from ``def`` to the last line of the body (a function, nested
ones counted on their own). Imports are read from the AST, function-level (lazy) imports included: a cycle hidden
in a function body is still a cycle.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_slurmflox"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
SUITES = ROOT / "suites"


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "suites" not in p.relative_to(PACKAGE).parts)


def _name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _size_offenders() -> list[str]:
    """The package and the suites (issue 28: ``suites/`` is held to the same rules)."""
    offenders = []
    for path in [*_modules(), *sorted(SUITES.glob("*.py"))]:
        rel = str(path.relative_to(ROOT))
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            offenders.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    offenders.append(f"{rel}:{node.lineno} {node.name}(): {length} lines")
    return offenders


def test_no_module_over_400_lines_and_no_function_over_60():
    offenders = _size_offenders()
    assert offenders == [], "\n".join(offenders)


def _imports(path: Path) -> set[str]:
    """Every pytest_slurmflox module ``path`` imports, at any depth of its body."""
    return _imports_from(path, ROOT)


def _imports_from(path: Path, root: Path) -> set[str]:
    """:func:`_imports` of a file in a copy of the package under ``root``."""
    name = _name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pytest_slurmflox")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if not base.startswith("pytest_slurmflox"):
                continue
            for alias in node.names:  # `from . import fixtures` imports a module
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in _MODULE_NAMES else base)
    return found - {name}


_MODULE_NAMES = {_name(p) for p in _modules()}


def _graph() -> dict[str, set[str]]:
    return {_name(p): {i for i in _imports(p) if i in _MODULE_NAMES} for p in _modules()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (as a path), ignoring a package's imports of its own submodules' parent (``__init__``)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if node.startswith(nxt + "."):  # a submodule importing its package's __init__ (Progress, errors)
                continue
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


LOCAL = "pytest_slurmflox.substrates.local."


def test_the_import_graph_is_acyclic():
    """Over the whole package, except edges between two modules of substrates/local (see the next test)."""
    graph = _graph()
    assert graph.get("pytest_slurmflox.plugin"), "the graph reader found nothing"
    pruned = {m: {i for i in deps if not (m.startswith(LOCAL) and i.startswith(LOCAL))} for m, deps in graph.items()}
    assert _cycle(pruned) is None, " -> ".join(_cycle(pruned) or [])


def test_the_local_substrate_has_no_import_cycle():
    """Fails while local/pool and local/substrate import each other: the pool taking over the cohort code is other
    work of issue 15 (item 4). Strict: once it lands this XPASSes, which fails the run until the marker goes."""
    graph = _graph()
    local = {m: {i for i in deps if i.startswith(LOCAL)} for m, deps in graph.items() if m.startswith(LOCAL)}
    assert _cycle(local) is None, " -> ".join(_cycle(local) or [])


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


#: The folder order: which folders each folder's modules may import (besides their own folder). ``plugin.py`` (the
#: ``pytest11`` entry point) and the suites stand above every folder; nothing imports ``harness``, the run. The
#: substrates are reached from ``harness`` only lazily (the next test holds that). docs/architecture.md draws this.
FOLDER_ORDER: dict[str, frozenset[str]] = {
    "harness": frozenset({"reporting", "cluster", "judges", "model", "base", "substrates"}),
    "substrates": frozenset({"cluster", "model", "base"}),
    "reporting": frozenset({"model", "base"}),
    "cluster": frozenset({"model", "base"}),
    "judges": frozenset({"model", "base"}),
    "model": frozenset({"base"}),
    "base": frozenset(),
    "examples": frozenset(),  # a site's checks, as a site writes them: fixtures only, nothing of the package
}
#: Modules directly under pytest_slurmflox/ (the package's ``__init__`` and the entry point), at most this many.
MAX_TOP_MODULES = 12


def _folder(module: str) -> str | None:
    """The folder a module lives in (``pytest_slurmflox.model.target`` -> ``model``); None at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FOLDER_ORDER) else None


def _order_offenders(graph: dict[str, set[str]]) -> list[str]:
    """Every import from one folder into another that the folder order does not allow, and any import of the entry
    point; an import of the package itself (its empty ``__init__``) is no edge."""
    offenders = []
    for module, deps in sorted(graph.items()):
        src = _folder(module)
        for dep in sorted(deps):
            dst = _folder(dep)
            if dep == "pytest_slurmflox.plugin" or (src is not None and dst is None and dep != "pytest_slurmflox"):
                offenders.append(f"{module} -> {dep}")
            elif src is not None and dst is not None and src != dst and dst not in FOLDER_ORDER.get(src, ()):
                offenders.append(f"{module} -> {dep} ({src} may import {sorted(FOLDER_ORDER.get(src, ()))})")
    return offenders


def test_every_folder_imports_only_what_the_folder_order_allows():
    """At any depth of a body: a lazy import against the order is still against it."""
    graph = _graph()
    assert {_folder(m) for m in graph} - {None} == set(FOLDER_ORDER), "a folder the order does not name"
    assert _order_offenders(graph) == []


def test_the_folder_order_fails_on_a_planted_import():
    """The real graph plus one import each way the order forbids: the model reaching up into the run, the report
    into the cluster, the cluster into the report, a judge into the cluster, the base into the model, and a
    folder importing the entry point."""
    planted = {
        "pytest_slurmflox.model.settings": "pytest_slurmflox.harness.session",
        "pytest_slurmflox.reporting.report": "pytest_slurmflox.cluster.slurm",
        "pytest_slurmflox.cluster.submit": "pytest_slurmflox.reporting.signoff",
        "pytest_slurmflox.judges.expectations": "pytest_slurmflox.cluster.kube",
        "pytest_slurmflox.base.run": "pytest_slurmflox.model.settings",
        "pytest_slurmflox.cluster.kube": "pytest_slurmflox.plugin",
    }
    graph = _graph()
    for module, dep in planted.items():
        assert module in graph and dep in _MODULE_NAMES, (module, dep)
        graph[module] = {*graph[module], dep}
    found = [o.split(" (")[0] for o in _order_offenders(graph)]
    assert found == sorted(f"{m} -> {d}" for m, d in planted.items())


def test_the_folder_order_fails_on_an_import_planted_in_a_module(tmp_path):
    """The import reader and the order together: a real module's source with one lazy import added (inside a
    function) is read as an edge against the order."""
    source = (PACKAGE / "model" / "settings.py").read_text()
    planted = tmp_path / "pytest_slurmflox" / "model" / "settings.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(source + "\n\ndef _planted():\n    from ..harness import session\n\n    return session\n")
    found = _imports_from(planted, tmp_path)
    assert "pytest_slurmflox.harness.session" in found
    graph = {"pytest_slurmflox.model.settings": {i for i in found if i in _MODULE_NAMES}}
    assert _order_offenders(graph) == [
        "pytest_slurmflox.model.settings -> pytest_slurmflox.harness.session (model may import ['base'])"
    ]


def test_at_most_twelve_modules_at_the_top_and_every_folder_says_its_role_and_its_imports():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    folders = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert set(folders) == set(FOLDER_ORDER), folders
    for folder in folders:
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())) or ""
        if folder == "substrates":
            continue  # the registry's module: its docstring is the substrate contract
        assert doc and "\n\n" not in doc.strip(), f"{folder}/__init__.py: one paragraph saying its role"
        assert "may import" in doc, f"{folder}/__init__.py: say what it may import"
        named = set(re.findall(r"``(\w+)``", doc))
        assert FOLDER_ORDER[folder] <= named, f"{folder}/__init__.py names {sorted(named)}"


def _documented_order(markdown: str) -> dict[str, frozenset[str]]:
    """The folder table of docs/architecture.md: folder -> the folders it may import."""
    rows = re.findall(r"^\| `(\w+)/` \|[^|]*\| ([^|]*) \|$", markdown, flags=re.M)
    return {
        f: frozenset() if may.strip() == "nothing" else frozenset(may.replace(" ", "").split(",")) for f, may in rows
    }


def test_the_architecture_doc_draws_every_folder_in_its_order():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert _documented_order(doc) == FOLDER_ORDER
    picture = doc.split("## The folders and their order", 1)[1].split("```")[1]
    assert all(f"{folder}/" in picture for folder in FOLDER_ORDER), picture


def test_the_doc_check_fails_on_a_folder_it_does_not_name():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `judges/` |"))
    assert _documented_order(doc.replace(row + "\n", "")) != FOLDER_ORDER
    assert (
        _documented_order(doc.replace(row, row.replace("| model, base |", "| model, base, cluster |"))) != FOLDER_ORDER
    )


#: The plugin layer operates a deployment, so it may reach substrate code, but only lazily (inside a function, through
#: ``make_substrate`` and the substrate's errors): loading the plugin never loads a substrate.
PLUGIN_LAYER = {"harness.deploy", "harness.fixtures", "harness.session", "harness.verbs"}


def test_core_modules_never_import_substrates():
    """The core (settings, target, lifecycle, runners, clients, sign-off, reports...) never imports substrate code at
    any depth; the plugin layer does so only inside functions."""
    offenders = []
    for path in _modules():
        name = _name(path)
        if ".substrates" in name:
            continue
        short = name.removeprefix("pytest_slurmflox.")
        tree = ast.parse(path.read_text())
        nodes = tree.body if short in PLUGIN_LAYER else list(ast.walk(tree))
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and "substrates" in (node.module or ""):
                offenders.append(f"{name}:{node.lineno}: from {'.' * node.level}{node.module} import ...")
            if isinstance(node, ast.Import) and any("substrates" in a.name for a in node.names):
                offenders.append(f"{name}:{node.lineno}: import {', '.join(a.name for a in node.names)}")
    assert offenders == []


def test_the_package_type_checks_clean():
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed (pip install 'pytest-slurmflox[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "pytest_slurmflox"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def _inherited_beyond_substrate(cls: type) -> list[str]:
    """What ``cls`` (a Substrate) inherits besides Substrate and its ABC machinery: a substrate holds the parts it
    builds on (issue 28: LocalSubstrate once *was* its LocalCluster, ~50 methods on one object) instead."""
    from pytest_slurmflox.substrates import Substrate

    allowed = {cls, *Substrate.__mro__}
    return [f"{base.__module__}.{base.__qualname__}" for base in cls.__mro__ if base not in allowed]


def test_substrates_hold_their_cluster_instead_of_inheriting_it():
    from pytest_slurmflox.substrates import SUBSTRATES, Substrate, substrate_class
    from pytest_slurmflox.substrates.local.cluster import LocalCluster

    offenders = {name: found for name in SUBSTRATES if (found := _inherited_beyond_substrate(substrate_class(name)))}
    assert offenders == {}, offenders
    # the rule catches what it is for: a substrate that is its cluster again
    relapse = type("Relapse", (LocalCluster, Substrate), {})
    assert _inherited_beyond_substrate(relapse) == ["pytest_slurmflox.substrates.local.cluster.LocalCluster"]


def test_the_local_pool_gets_the_cluster_not_the_substrate(tmp_path):
    import typing

    from pytest_slurmflox.model.settings import resolve
    from pytest_slurmflox.model.workdir import Workdir
    from pytest_slurmflox.substrates import Substrate
    from pytest_slurmflox.substrates.local import LocalSubstrate
    from pytest_slurmflox.substrates.local.cluster import LocalCluster
    from pytest_slurmflox.substrates.local.pool import LocalWorkerPool

    hints = typing.get_type_hints(LocalWorkerPool.__init__)
    assert hints["cluster"] is LocalCluster and not any(
        isinstance(h, type) and issubclass(h, Substrate) for h in hints.values()
    ), hints
    settings = resolve(cli={"WORKDIR": str(tmp_path)}, substrate="local").settings
    sub = LocalSubstrate(LocalCluster(settings, Workdir(tmp_path), print))
    pool = sub.pool()
    assert pool.cluster is sub.cluster and all(value is not sub for value in vars(pool).values())


def _not_hooks(source: str) -> list[str]:
    """What a module's top level holds besides its docstring, its imports and ``pytest_*`` functions."""
    offenders = []
    for i, node in enumerate(ast.parse(source).body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the module docstring
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("pytest_"):
            continue
        offenders.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return offenders


def test_the_plugin_module_holds_only_hooks():
    """plugin.py (the ``pytest11`` entry point) is pytest's door and nothing else: option parsing lives in
    options.py, the report writer's registration in report.py, the run's state in session.py."""
    offenders = _not_hooks((PACKAGE / "plugin.py").read_text())
    assert offenders == [], "plugin.py holds only pytest_* hook functions:\n" + "\n".join(offenders)


def test_the_hooks_only_rule_catches_a_helper_a_class_and_a_constant():
    planted = (
        '"""doc"""\nimport os\n\nLIMIT = 3\n\n\ndef pytest_configure(config):\n    pass\n\n\n'
        "def _register(config):\n    pass\n\n\nclass EarlyOptions:\n    pass\n"
    )
    assert [o.split(":", 1)[0] for o in _not_hooks(planted)] == ["line 4", "line 11", "line 15"]
