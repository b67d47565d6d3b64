"""State handed down once (issue 28): the target file is read in one place per process and written by one module.

The plugin layer reads the target file once (``SlurmfloxSession.read_target``) into ``SessionState.spec``; the
fixtures, the report writer and the sweep take the spec from there. A second read would let two parts of one run
disagree about the target (one file, read before and after a pool rewrote it). Writing is target.py's alone:
``write_target`` for ``up``, ``write_runtime`` for a pool that moved the workers' runtime.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from pytest_slurmflox.model.revision import runtime_revision
from pytest_slurmflox.model.settings import WORKER_KEYS, resolve
from pytest_slurmflox.model.target import Endpoint, Expectations, TargetSpec, load_target, write_runtime, write_target

ROOT = Path(__file__).resolve().parents[2]
OLD_IMAGE = "slurmflox/worker:1@sha256:" + "a" * 64
NEW_IMAGE = "slurmflox/worker:1@sha256:" + "b" * 64
PACKAGE = ROOT / "pytest_slurmflox"
READERS = {"load_target", "parse_target"}
#: the serializers: a module that calls one of them and dumps YAML in the same function writes a target file
SERIALIZERS = {"target_document", "expect_document", "serialize_target"}


def _called_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _plugin_layer() -> list[Path]:
    """The package outside target.py (where the readers live) and the substrates (which write, never read for a
    run), plus the suites."""
    files = [p for p in PACKAGE.rglob("*.py") if p.name != "target.py" and "substrates" not in p.parts]
    return files + sorted((ROOT / "suites").rglob("*.py"))


def test_the_target_file_is_read_in_one_place():
    calls = []
    for path in _plugin_layer():
        tree = ast.parse(path.read_text(), filename=str(path))
        calls += [
            f"{path.relative_to(ROOT)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and _called_name(node) in READERS
        ]
    # the doctor (--slurmflox-check-target) reads its file at cmdline_main, where no run and no session exists;
    # the starter (--slurmflox-init-target) parses only the login it was given, at cmdline_main too
    verbs = ("pytest_slurmflox/harness/doctor.py:", "pytest_slurmflox/harness/starter.py:")
    run = [call for call in calls if not call.startswith(verbs)]
    assert len(run) == 1 and run[0].startswith("pytest_slurmflox/harness/session.py:") and len(calls) <= 3, calls


def test_session_does_not_take_the_spec_from_the_report_module():
    tree = ast.parse((PACKAGE / "harness/session.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names} | {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "load_spec" not in imported and "report" not in imported


def test_only_target_py_serializes_and_dumps_a_target():
    """A function that serializes a target and dumps YAML itself is a second writer (the local pool once was)."""
    writers = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "target.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef):
                continue
            names = {_called_name(n) for n in ast.walk(func) if isinstance(n, ast.Call)}
            if names & SERIALIZERS and names & {"safe_dump", "dump"}:
                writers.append(f"{path.relative_to(ROOT)}:{func.name}")
    assert writers == []


def _spec(tmp_path: Path, generation: str) -> TargetSpec:
    deployed = resolve(
        cli={"WORKDIR": str(tmp_path), "WORKER_FLOX_GENERATION": generation, "LOGIN_SSH_PORT": "2299"},
        substrate="local",
    ).settings
    login = Endpoint("127.0.0.1", 2299, "slurmtest", tmp_path / "id_cluster", tmp_path / "known_hosts")
    return TargetSpec(
        path=tmp_path / "target.yaml",
        name="local",
        substrate="local",
        workdir=tmp_path,
        login=login,
        admin=dataclasses.replace(login, user="root"),
        kubernetes=None,
        partition="all",
        identity=None,
        expect=Expectations(deployed, runtime_revision(deployed), OLD_IMAGE, 2),
        deployed=deployed,
    )


def test_write_runtime_moves_the_runtime_and_keeps_the_rest(tmp_path):
    """The pool's rewrite after apply: expectations and the deployed worker keys follow the new runtime; the login
    port (not a runtime key), the replicas and the admin stay as ``up`` wrote them."""
    before = _spec(tmp_path, "18")
    write_target(before, tmp_path / "target.yaml")
    moved = resolve(cli={"WORKDIR": str(tmp_path), "WORKER_FLOX_GENERATION": "19", "LOGIN_SSH_PORT": "2400"})
    write_runtime(tmp_path / "target.yaml", moved.settings, "rev-19", NEW_IMAGE)
    after = load_target(tmp_path / "target.yaml")
    assert (after.expect.revision, after.expect.image, after.expect.replicas) == ("rev-19", NEW_IMAGE, 2)
    assert after.expect.settings.worker_flox_generation == 19
    assert after.deployed is not None and after.deployed.worker_flox_generation == 19
    assert all(getattr(after.deployed, k.lower()) == getattr(moved.settings, k.lower()) for k in WORKER_KEYS)
    assert after.login == before.login and after.login.port == 2299 and after.deployed.login_ssh_port == 2299
    assert after.admin == before.admin and after.substrate == "local"


def test_write_runtime_leaves_a_missing_file_alone(tmp_path):
    settings = resolve(cli={"WORKDIR": str(tmp_path)}).settings
    write_runtime(tmp_path / "target.yaml", settings, "rev", "img")
    assert not (tmp_path / "target.yaml").exists()
