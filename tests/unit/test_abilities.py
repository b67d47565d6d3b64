"""Pool abilities are declared ABCs, found with ``isinstance`` and asked for through the target (issue 28).

A ``getattr(target.pool, "realization", None)`` turns a renamed method into a silent SKIP; an ability ABC makes the
pool fail at construction and ``connect`` names the capability it lacks. The AST test below fails on a
``hasattr``/``getattr`` probe of a pool (or of an ability's method name) in the package and the suites.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from pytest_slurmflox.harness.connection import _probe_pool
from pytest_slurmflox.model.abilities import (
    ABILITIES,
    DirectoryChanges,
    IsolatingWorkers,
    NodeAdmin,
    RuntimeRecord,
    ServiceRestart,
)
from pytest_slurmflox.model.pool import WorkerInfo, WorkerPool, WorkerView
from pytest_slurmflox.substrates.local.pool import LocalWorkerPool
from pytest_slurmflox.substrates.qemu.pool import NodeSetPool

ROOT = Path(__file__).resolve().parents[2]
ABILITY_METHODS = {name for ability, _ in ABILITIES.values() for name in ability.__abstractmethods__}
POOL_METHODS = set(WorkerPool.__abstractmethods__) | {"restart", "step_timeout"}
#: suites files whose hasattr/getattr probe no pool, each with why (the package's many getattr calls on pytest,
#: xdist and report objects are left to the probe rule). Keep it short.
ALLOWED = {
    "suites/_marks.py": "dataclasses.fields(Result) copied by name onto Marked",
    "suites/test_td_directory.py": "the login runner's evidence observer (a Runner attribute, not a pool ability)",
}


def test_the_pools_declare_what_they_have():
    assert not inspect.isabstract(LocalWorkerPool) and not inspect.isabstract(NodeSetPool)
    local = {IsolatingWorkers, ServiceRestart, RuntimeRecord, DirectoryChanges}
    assert all(issubclass(LocalWorkerPool, a) for a in local) and not issubclass(LocalWorkerPool, NodeAdmin)
    assert issubclass(NodeSetPool, NodeAdmin) and not any(issubclass(NodeSetPool, a) for a in local)


class _View(WorkerView):
    def desired_count(self) -> int:
        return 1

    def desired_revision(self) -> str | None:
        return None

    def workers(self) -> list[WorkerInfo]:
        return []

    def profile_revision(self, name: str) -> str | None:
        return None


class _Restarting(_View, ServiceRestart):
    def restart_service(self, service: str) -> None:
        return None


@pytest.mark.parametrize(
    ("pool", "present"),
    [
        (None, set()),
        (_View(), {"worker-pool"}),
        (_Restarting(), {"worker-pool", "service-restart"}),
    ],
    ids=["no pool", "a customer's view", "a view that restarts services"],
)
def test_capabilities_follow_the_declared_abilities(pool, present):
    caps: set[str] = set()
    missing: dict[str, str] = {}
    _probe_pool(pool, caps, missing)
    assert caps == present
    for capability in {"worker-pool", "worker-owner", *ABILITIES} - present:
        assert missing[capability], capability  # every absent one says why


def _probes(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each hasattr/getattr call in ``path`` that probes a pool or names an ability's method."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in ("hasattr", "getattr") or len(node.args) < 2:
            continue
        subject, name = ast.unparse(node.args[0]), node.args[1]
        names_ability = isinstance(name, ast.Constant) and name.value in ABILITY_METHODS | POOL_METHODS
        if "pool" in subject.lower() or names_ability:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_duck_typed_ability_probes():
    files = sorted((ROOT / "pytest_slurmflox").rglob("*.py")) + sorted((ROOT / "suites").rglob("*.py"))
    probes = {str(p.relative_to(ROOT)): _probes(p) for p in files}
    assert {f: found for f, found in probes.items() if found} == {}


def test_the_suites_use_getattr_only_where_the_allow_list_says():
    """In the suites every hasattr/getattr is listed (the package is held by the probe rule above)."""
    users = set()
    for path in sorted((ROOT / "suites").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        if any(n.func.id in ("hasattr", "getattr") for n in calls):
            users.add(str(path.relative_to(ROOT)))
    assert users == set(ALLOWED)
