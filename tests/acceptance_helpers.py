"""Running pytest-slurmflox the way a user does (a pytest subprocess), and reading what it reported."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

#: The groups the default acceptance must PASS on a local cluster (trixie's run, tests/test_acceptance_local.py, and
#: bookworm's, tests/test_bookworm_local.py, assert the same list).
LOCAL_MUST_PASS = (
    "test_t03_task_profile",
    "test_t05_interactive",
    "test_t06_mpi",
    "test_t07_policy",
    "test_t08_resources",
    "test_t09_storage_login",
    "test_ti_identity",
    "test_tp_provenance",
    "test_tf_failure_isolation",
    "test_t11_revision",
    "test_td_directory",
    "test_ta_accounting",
    "test_tr_rest",
)
#: The only capabilities a local cluster lacks: checks needing them SKIP naming them.
LOCAL_MISSING_CAPABILITIES = ("kubernetes", "flox-shim")
#: The groups whose sign-off verdict is PASS on a local cluster (the others need Kubernetes or the Flox shim somewhere).
LOCAL_PASS_GROUPS = frozenset({"T3", "T5", "T6", "T7", "T8", "T9", "T11", "TP", "TI", "TF", "TD", "TA", "TR"})


def group_verdicts(output: str) -> dict[str, str]:
    """The sign-off summary's verdict per group (``*T3    PASS  pass 4 ...``), from a run's terminal output."""
    found = re.findall(r"^\*?(T[0-9A-Z]+)\s+(PASS|FAIL|SKIP|NOT RUN)\s+pass\b", output, re.M)
    return dict(found)


def passed_groups(passed: list[str]) -> set[str]:
    """The groups (suite modules) with at least one PASSED check."""
    return {name.split("::", 1)[0] for name in passed}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Run:
    rc: int
    output: str
    cases: dict[str, tuple[str, str]]  #: test id -> (outcome, message)

    def outcomes(self, outcome: str) -> list[str]:
        return sorted(k for k, (o, _) in self.cases.items() if o == outcome)


def clean_env() -> dict[str, str]:
    """This process's environment without settings or plugin options, so a child run sees only its arguments."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("WORKER_", "SLURMFLOX_"))}


def private_deployment(tmp_path_factory, name: str) -> tuple[Path, Path, tuple[str, ...]]:
    """A home dir, its work dir and the options that keep a test deployment private (work dir, free port)."""
    if os.geteuid() != 0:
        import pytest

        pytest.skip("needs root: the local substrate creates namespaces and overlay mounts")
    home = tmp_path_factory.mktemp(name)
    workdir = home / "operator"
    return home, workdir, (f"--slurmflox-workdir={workdir}", f"--slurmflox-login-ssh-port={free_port()}")


def destroy(home: Path, common: tuple[str, ...]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--slurmflox-destroy", *common],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.stdout


def run_pytest(cwd: Path, *args: str, timeout: float = 1500) -> Run:
    junit = cwd / f"junit-{time.monotonic_ns()}.xml"
    env = clean_env()
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "pytest_slurmflox.suites",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",  # an acceptance run's order is the plugin's; pytest-randomly shuffles the project's tests
            "-o",
            "junit_family=xunit1",
            f"--junitxml={junit}",
            "-rs",
            *args,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(f"[pytest {' '.join(args)}] exit {proc.returncode} in {time.monotonic() - t0:.1f}s")
    cases: dict[str, tuple[str, str]] = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    outcome, message = tag, (el.get("message") or "") + (el.text or "")
            cases[name] = (outcome, message)
    return Run(proc.returncode, proc.stdout + proc.stderr, cases)
