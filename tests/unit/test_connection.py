"""connection.py: which runner reaches which endpoint of a target, and the reason every capability is missing when
nothing answers. The endpoints are real loopback ports with nothing listening (refused at once), the key a real
ed25519 key: the probes run as they run against a cluster, and fail the way an unreachable one fails.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pytest_slurmflox.base.run import SSHRunner
from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.harness.connection import connect, login_runner
from pytest_slurmflox.model.abilities import ABILITIES
from pytest_slurmflox.model.target import TargetSpec, parse_target


def _closed_port() -> int:
    """A loopback port nothing listens on (bound once by the kernel's choice, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def key(tmp_path: Path) -> Path:
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    path = tmp_path / "id_ed25519"
    path.write_bytes(pem)
    path.chmod(0o600)
    return path


def _spec(key: Path, **extra: object) -> TargetSpec:
    login = {"host": "127.0.0.1", "port": _closed_port(), "user": "alice", "key": str(key)}
    doc = {"version": 1, "name": "silent", "login": login, "slurm": {"partition": "gpu"}, **extra}
    return parse_target(doc, path=key.parent / "target.yaml")


def test_the_login_runner_is_ssh_to_the_login_endpoint_as_its_user(key: Path):
    spec = _spec(key)
    runner = login_runner(spec.login, None)
    assert isinstance(runner, SSHRunner)
    assert (runner.host, runner.port, runner.user, runner.key_file) == ("127.0.0.1", spec.login.port, "alice", key)
    assert runner.where == f"login(127.0.0.1:{spec.login.port})"


def test_connect_gives_slurm_the_login_as_user_and_the_admin_as_root(key: Path):
    admin_port = _closed_port()
    target = connect(_spec(key, admin={"port": admin_port}))
    try:
        assert isinstance(target.login, SSHRunner) and target.login.user == "alice"
        assert isinstance(target.admin, SSHRunner)
        assert (target.admin.user, target.admin.port, target.admin.key_file) == ("root", admin_port, key)
        assert target.slurm.user is target.login and target.slurm.admin is target.admin
        assert target.slurm.partition == "gpu"
    finally:
        target.close()


def test_a_target_that_answers_nothing_has_no_capability_and_says_why_for_each(key: Path):
    rest_port = _closed_port()
    spec = _spec(
        key, admin={"port": _closed_port()}, accounting={"account": "a"}, rest={"url": f"http://127.0.0.1:{rest_port}"}
    )
    handed: list[tuple[TargetSpec, object]] = []
    target = connect(spec, pool_factory=lambda s, kube: handed.append((s, kube)))  # type: ignore[func-returns-value]
    target.close()
    assert target.capabilities == frozenset()
    assert handed == [(spec, None)]  # no Kubernetes on this target: the pool factory is told so
    why = target.why_missing
    # the login itself is what is unreachable: one line naming it, never blamed on slurmctld
    away = f"login alice@127.0.0.1:{spec.login.port} unreachable (TCP connect): "
    assert target.unreachable is not None and target.unreachable.startswith(away), target.unreachable
    for capability in ("login", "slurm", "accounting"):
        assert why(capability) == target.unreachable
    assert why("admin").startswith("administrative login failed: ")
    assert why("kubernetes") == "target 'silent' (existing) has no Kubernetes API"
    assert why("flox-shim").endswith("the Flox containerd shim exists only on Kubernetes nodes")
    for capability in ("worker-pool", "worker-owner", *ABILITIES):
        assert why(capability) == "nothing on this target lists the workers (no Kubernetes, no substrate)"
    assert why("directory") == "target 'silent' declares no directory service (directory: uri, base, user)"
    assert why("rest").startswith(f"slurmrestd at http://127.0.0.1:{rest_port} does not answer: ")


def test_without_an_admin_login_there_is_no_admin_runner(key: Path):
    target = connect(_spec(key))
    target.close()
    assert target.admin is None and target.slurm.admin is None
    assert target.why_missing("admin") == "the target file names no admin login"
    assert target.why_missing("accounting") == "target 'silent' declares no accounting (slurmdbd)"
    assert target.why_missing("rest") == "target 'silent' declares no REST API (slurmrestd)"


def test_why_missing_is_none_for_a_present_capability_and_names_an_unknown_one(key: Path):
    target = connect(_spec(key))
    target.close()
    present = type(target)(target.spec, target.login, None, target.slurm, capabilities=frozenset({"slurm"}))
    assert present.why_missing("slurm") is None
    assert target.why_missing("warp-drive") == "target 'silent' lacks capability 'warp-drive'"


def _gated(target, capability: str) -> BaseException:
    """What gates.require raised: a SKIP or a FAIL both end the check, so both are caught and told apart after."""
    with pytest.raises((pytest.fail.Exception, pytest.skip.Exception)) as raised:
        require(target, capability)
    return raised.value


def test_the_gate_fails_a_declared_capability_that_does_not_answer(key: Path):
    """gates.require: the target file declares an admin login and Slurm, neither answers: FAIL with the reason."""
    target = connect(_spec(key, admin={"port": _closed_port()}))
    try:
        for capability in ("admin", "slurm"):
            outcome = _gated(target, capability)
            assert isinstance(outcome, pytest.fail.Exception), (capability, outcome)
            assert f"declared capability {capability} answers" in str(outcome), outcome
    finally:
        target.close()


def test_the_gate_skips_a_capability_the_target_does_not_have_at_all(key: Path):
    """gates.require: no admin login, no accounting, no Kubernetes declared: SKIP naming each."""
    target = connect(_spec(key))
    try:
        for capability in ("admin", "accounting", "kubernetes"):
            outcome = _gated(target, capability)
            assert isinstance(outcome, pytest.skip.Exception), (capability, outcome)
            assert f"missing capability {capability}: " in str(outcome), outcome
    finally:
        target.close()
