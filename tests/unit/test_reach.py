"""reach.py: an unreachable login endpoint is one line naming ``user@host:port``, the stage and what to check.
Real loopback ports (one with nothing listening, one that answers but is not SSH) and a name under ``.invalid``
(RFC 2606: never resolves); connect() asks the login once, and every check that needs it is NOT RUN with that line.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import free_port, keygen

from pytest_slurmflox.base.run import SSHRunner
from pytest_slurmflox.harness.connection import connect
from pytest_slurmflox.harness.reach import reach
from pytest_slurmflox.model.target import parse_target


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return keygen(tmp_path / "id_ed25519")


@pytest.fixture
def not_ssh() -> Iterator[int]:
    """A loopback port that accepts and speaks something other than SSH, then closes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _runner(host: str, port: int, key: Path) -> SSHRunner:
    return SSHRunner(host=host, port=port, user="alice", key_file=key, connect_timeout=5)


def test_a_closed_port_is_the_tcp_connect_stage_naming_user_host_port(key: Path):
    port = free_port()
    away = reach(_runner("127.0.0.1", port, key))
    assert away is not None
    line = away.line()
    assert line.startswith(f"login alice@127.0.0.1:{port} unreachable (TCP connect): "), line
    assert "Connection refused" in line and f"sshd listens on 127.0.0.1:{port}" in line
    assert "\n" not in line


def test_a_name_that_does_not_resolve_is_the_name_resolution_stage(key: Path):
    away = reach(_runner("nonexistent.invalid", 22, key))
    assert away is not None
    line = away.line()
    assert line.startswith("login alice@nonexistent.invalid:22 unreachable (name resolution): "), line
    assert "'nonexistent.invalid' does not resolve" in line and "check login.host" in line


def test_a_port_that_is_not_ssh_is_the_handshake_stage(key: Path, not_ssh: int):
    away = reach(_runner("127.0.0.1", not_ssh, key))
    assert away is not None
    assert away.stage == "SSH handshake" and away.who == f"alice@127.0.0.1:{not_ssh}", away


def test_connect_asks_an_unreachable_login_once_and_asks_slurm_nothing(key: Path):
    """One attempt, fast, and slurmctld is not blamed: every login capability carries the login's one line."""
    login = {"host": "nonexistent.invalid", "port": 2222, "user": "alice", "key": str(key)}
    spec = parse_target({"version": 1, "name": "away", "login": login, "accounting": {"account": "a"}}, path=key)
    t0 = time.monotonic()
    target = connect(spec)
    target.close()
    assert time.monotonic() - t0 < 5
    assert target.unreachable and target.unreachable.startswith("login alice@nonexistent.invalid:2222 unreachable")
    assert {target.why_missing(c) for c in ("login", "slurm", "accounting")} == {target.unreachable}
    assert "slurmctld" not in target.unreachable


def test_every_check_is_not_run_with_the_one_reason(key: Path, tmp_path: Path):
    """A pytest run against a login on a closed port: exit 1, every check NOT RUN, the login named on one line
    (the verdict's one reason), slurmctld never blamed, no sweep attempted on the unreachable login."""
    port = free_port()
    target = tmp_path / "target.yaml"
    target.write_text(f"version: 1\nname: away\nlogin: {{host: 127.0.0.1, port: {port}, user: alice, key: {key}}}\n")
    checks = tmp_path / "test_three.py"
    checks.write_text("".join(f"def test_{n}(target):\n    pass\n\n" for n in ("a", "b", "c")))
    argv = [sys.executable, "-m", "pytest", str(checks), f"--slurmflox-target={target}", "-p", "no:cacheprovider"]
    out = subprocess.run(
        [*argv, f"--slurmflox-workdir={tmp_path / 'wd'}", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "3 skipped" in text, text
    named = [line for line in text.splitlines() if f"127.0.0.1:{port}" in line]
    assert len(named) == 1, named
    assert named[0].startswith(f"  - every check is NOT RUN: login alice@127.0.0.1:{port} unreachable (TCP connect)")
    assert "slurmctld" not in text and "could not" not in text, text


def test_the_verdict_says_one_shared_reason_once_and_keeps_distinct_ones_per_group():
    from pytest_slurmflox.reporting.signoff import NOT_RUN, NOT_RUN_PREFIX, Check, decide, summary_lines

    line = "login a@h:1 unreachable (TCP connect): Connection refused; check that sshd listens on h:1"
    same = [
        Check(f"t/test_t{n}.py::test_x", group=f"T{n}", verdict=NOT_RUN, reason=NOT_RUN_PREFIX + line) for n in (2, 3)
    ]
    verdict = decide(same, requested=True)
    assert verdict.one_reason == line
    assert verdict.reasons == (f"every check is NOT RUN: {line}",)
    assert sum(line in text for text in summary_lines(verdict, "r")) == 1
    mixed = [*same, Check("t/test_t4.py::test_y", group="T4", verdict=NOT_RUN, reason=NOT_RUN_PREFIX + "other")]
    assert decide(mixed, requested=True).one_reason == ""
