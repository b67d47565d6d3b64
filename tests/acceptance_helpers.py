"""Running pytest-slurmflox the way a user does (a pytest subprocess), and reading what it reported."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


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


def run_pytest(cwd: Path, *args: str, timeout: float = 1500) -> Run:
    junit = cwd / f"junit-{time.monotonic_ns()}.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER_", "SLURMFLOX_"))}
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
