"""The project's own tests may SKIP only for reasons listed here; any other skip fails the run.

A green CI that hid a missing install step (#19: the real-sshd host-key tests skipped on every fresh machine
because openssh-server was not installed) is worse than a red one. So every skip is printed at the end of the run
with its reason, and a skip that matches no entry of :data:`ALLOWED` makes the run fail, naming the test.

Loaded by ``tests/conftest.py`` (a class registered in ``pytest_configure``, as pytest-xdist registers its
stateful parts); under xdist the controller sees every worker's reports, so one guard judges the whole run.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass(frozen=True)
class AllowedSkip:
    """A skip the project accepts: which tests (an fnmatch pattern over the node id), the reason's text, and why
    the capability cannot exist on a CI machine."""

    nodeid: str
    reason: str
    why: str


#: The one list of accepted skips.
ALLOWED: tuple[AllowedSkip, ...] = (
    AllowedSkip(
        nodeid="tests/unit/test_kube.py::test_live_*",
        reason="no Kubernetes API here",
        why="no Kubernetes API server can run on these machines (no internet for images); the read runs where "
        "SLURMFLOX_KUBECONFIG names a real cluster",
    ),
    AllowedSkip(
        nodeid="tests/unit/test_kubeapi_slinky.py::*",
        reason="no Kubernetes API server: set SLURMFLOX_TEST_KUBECONFIG",
        why="these run Slinky v1.2.1's objects through a real kube-apiserver, which no CI machine here runs (no "
        "images, no binary of it in the project); they run where SLURMFLOX_TEST_KUBECONFIG names one",
    ),
    AllowedSkip(
        nodeid="tests/integration/test_kubernetes_target_local.py::*",
        reason="no Kubernetes API server: set SLURMFLOX_TEST_KUBECONFIG",
        why="the local cluster's Slurm is signed off behind a real kube-apiserver, which no CI machine here runs; it "
        "skips before the local cluster is brought up and runs where SLURMFLOX_TEST_KUBECONFIG names one",
    ),
)


def allowed(nodeid: str, reason: str, table: tuple[AllowedSkip, ...] = ALLOWED) -> AllowedSkip | None:
    for entry in table:
        if fnmatch.fnmatchcase(nodeid, entry.nodeid) and entry.reason in reason:
            return entry
    return None


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@dataclass(eq=False)  # a plugin object must stay hashable
class SkipGuard:
    """Collects every skip of the run; fails the run on one that is not listed."""

    config: pytest.Config
    skips: list[tuple[str, str]] = field(default_factory=list)

    @property
    def unexpected(self) -> list[tuple[str, str]]:
        return [(nodeid, reason) for nodeid, reason in self.skips if allowed(nodeid, reason) is None]

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append((report.nodeid, _reason(report)))

    def pytest_collectreport(self, report: Any) -> None:
        if report.skipped:
            self.skips.append((report.nodeid or "<collection>", _reason(report)))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.unexpected and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.skips:
            return
        terminalreporter.write_sep("=", f"skips ({len(self.skips)}), each with its reason")
        for nodeid, reason in self.skips:
            entry = allowed(nodeid, reason)
            mark = "listed" if entry else "UNEXPECTED"
            terminalreporter.write_line(f"{mark}: {nodeid}: {reason}", red=entry is None)
        for nodeid, reason in self.unexpected:
            terminalreporter.write_line(
                f"unexpected SKIP fails the run: {nodeid} ({reason}); install what it needs or list it in "
                "tests/skipguard.py ALLOWED with why",
                red=True,
                bold=True,
            )
