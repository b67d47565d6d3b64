"""Version matrix: the acceptance run on the local substrate once per Debian suite (so once per Slurm version the
suites ship: bookworm 22.05, trixie 24.11, sid 26.05), and the verdicts compared check by check.

Why a script and not a test: each suite needs its own node image (minutes to build the first time) and a whole
deployment; that is a measurement to run on purpose, not part of CI. Run it as root, under the integration lock
(one local-substrate run at a time on a shared machine):

    flock /tmp/slurmflox-integration.lock .venv/bin/python bench/version_matrix.py --suites trixie sid \\
        --accept-expired-release --workdir /var/tmp/sfx-matrix

Per suite: ``pytest --slurmflox-up=local -m acceptance --slurmflox-signoff`` with ``SLURMFLOX_LOCAL_SUITE``
(and ``SLURMFLOX_LOCAL_ACCEPT_EXPIRED_RELEASE=1`` with ``--accept-expired-release``, for a mirror snapshot whose
sid Release file has expired), in its own work dir, then ``--slurmflox-destroy`` unless ``--keep``. It prints the
Slurm version each cluster reported (evidence.json's target rows), the exit status, the sign-off verdict and wall
time per suite, then one row per check whose verdict differs between suites (``--all``: every check).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = ROOT / ".venv" / "bin" / "pytest"


@dataclass(frozen=True)
class SuiteRun:
    """One suite's acceptance run, as its evidence.json reports it."""

    suite: str
    exit_status: int
    wall: float
    slurm: str = "?"
    verdict: str = "no evidence"
    checks: dict[str, str] = field(default_factory=dict)  #: nodeid -> verdict


def run_suite(suite: str, workdir: Path, reports: Path, accept_expired: bool, extra: list[str]) -> SuiteRun:
    """Bring up ``suite``'s cluster and run the acceptance with sign-off; read the verdicts back."""
    env = {**os.environ, "SLURMFLOX_LOCAL_SUITE": suite}
    if accept_expired:
        env["SLURMFLOX_LOCAL_ACCEPT_EXPIRED_RELEASE"] = "1"
    run_id = f"matrix-{suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    argv = [str(PYTEST), "--slurmflox-up=local", "-m", "acceptance", "--slurmflox-signoff"]
    argv += [f"--slurmflox-workdir={workdir}", f"--slurmflox-reports={reports}", f"--slurmflox-run-id={run_id}"]
    t0 = time.monotonic()
    status = subprocess.run([*argv, *extra], env=env, cwd=ROOT, check=False).returncode
    wall = time.monotonic() - t0
    evidence = reports / run_id / "evidence.json"
    if not evidence.is_file():
        return SuiteRun(suite, status, wall)
    doc = json.loads(evidence.read_text())
    target = doc["run"].get("target") or {}
    checks = {c["nodeid"]: c["verdict"] for c in doc["checks"]}
    return SuiteRun(suite, status, wall, str(target.get("Slurm version", "?")), doc["run"]["verdict"], checks)


def destroy(suite: str, workdir: Path) -> None:
    env = {**os.environ, "SLURMFLOX_LOCAL_SUITE": suite}
    argv = [str(PYTEST), "--slurmflox-destroy", f"--slurmflox-workdir={workdir}"]
    subprocess.run(argv, env=env, cwd=ROOT, check=False)


def differing(runs: list[SuiteRun], every: bool = False) -> list[tuple[str, list[str]]]:
    """(nodeid, verdict per suite) for each check whose verdicts differ between suites (``every``: all checks);
    a check a suite did not run shows as ``-``."""
    nodeids = sorted({nodeid for run in runs for nodeid in run.checks})
    rows = []
    for nodeid in nodeids:
        verdicts = [run.checks.get(nodeid, "-") for run in runs]
        if every or len(set(verdicts)) > 1:
            rows.append((nodeid, verdicts))
    return rows


def table(runs: list[SuiteRun], every: bool) -> list[str]:
    head = "| | " + " | ".join(run.suite for run in runs) + " |"
    lines = [head, "|---" * (len(runs) + 1) + "|"]
    lines.append("| Slurm | " + " | ".join(run.slurm for run in runs) + " |")
    lines.append("| exit | " + " | ".join(str(run.exit_status) for run in runs) + " |")
    lines.append("| verdict | " + " | ".join(run.verdict for run in runs) + " |")
    lines.append("| wall s | " + " | ".join(f"{run.wall:.0f}" for run in runs) + " |")
    lines += [f"| {nodeid} | " + " | ".join(verdicts) + " |" for nodeid, verdicts in differing(runs, every)]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", default=["trixie", "sid"], choices=["trixie", "sid", "bookworm"])
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/slurmflox-matrix"))
    parser.add_argument("--accept-expired-release", action="store_true", help="a mirror snapshot, on purpose")
    parser.add_argument("--keep", action="store_true", help="keep each deployment (no destroy)")
    parser.add_argument("--all", action="store_true", help="list every check, not only those that differ")
    parser.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    reports = args.workdir / "reports"
    runs = []
    for suite in args.suites:
        workdir = args.workdir / suite
        try:
            runs.append(run_suite(suite, workdir, reports, args.accept_expired_release, args.extra))
        finally:
            if not args.keep:
                destroy(suite, workdir)
        print(f"[matrix] {suite}: exit {runs[-1].exit_status}, {runs[-1].verdict}, {runs[-1].wall:.0f}s", flush=True)
    print("\n".join(table(runs, args.all)))
    return 0 if all(run.exit_status == 0 for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
